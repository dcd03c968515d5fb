// The GrantFs gRPC service of the primary: each handler checks the caller,
// turns the request into a Volume call and the result into a reply whose
// `err` carries the errno. File-system errors never fail the RPC itself; the
// gRPC status is only for authentication and server-side failures.
// How one call is served: server/service_call.h; the handlers: service.cc
// (sessions, administration) and service_fs.cc (file-system operations).
#ifndef GRANTFS_SERVER_SERVICE_H_
#define GRANTFS_SERVER_SERVICE_H_

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "checkpoint/server_role.h"
#include "common/transport.h"
#include "proto/grantfs.grpc.pb.h"
#include "server/server_metrics.h"
#include "server/volume.h"

namespace grantfs {

class LogPins;       // service_ns_grants.cc
class StagedWrites;  // service_ns_grants.cc

struct ServiceOptions {
  // Who may call (common/transport.h): mounts and grantfsctl for the file
  // system's calls, grantfsctl alone for Switchover and Check; and the
  // cluster secret, when there is one.
  Transport transport;
  // Role reported by Status when there is no `role` object.
  std::string role = "standalone";
  // The replication role (checkpoint/server_role.h); nullptr: standalone. Not
  // owned.
  ServerRole* server_role = nullptr;
  // Where calls are counted and timed (--metrics_addr); nullptr: nowhere.
  // Not owned; outlives the service.
  ServerMetrics* metrics = nullptr;
  // Tests only: a call of a method (its name, as counted in `metrics`) for
  // which `refuse` returns a status other than OK is answered with that
  // status and not served, as by a server that cannot be reached. Empty:
  // every call is served.
  std::function<grpc::Status(const char* op)> refuse;
};

class GrantFsService final {
 public:
  // `volume` must outlive the service. A replica has no volume (nullptr):
  // it answers every call but Status with UNAVAILABLE "not the primary".
  GrantFsService(Volume* volume, const ServiceOptions& options);

  using Ctx = grpc::ServerContextBase;
  grpc::Status OpenSession(Ctx*, const proto::OpenSessionRequest*, proto::OpenSessionReply*);
  grpc::Status Heartbeat(Ctx*, const proto::HeartbeatRequest*, proto::HeartbeatReply*);
  grpc::Status Reclaim(Ctx*, const proto::ReclaimRequest*, proto::ReclaimReply*);
  grpc::Status CloseSession(Ctx*, const proto::CloseSessionRequest*, proto::CloseSessionReply*);
  // The invalidation stream: sends each batch with `write` (false: the
  // stream broke) until the caller goes away or its session ends. Blocks
  // for the life of the stream.
  using BatchWriter = std::function<bool(const proto::InvalidationBatch&)>;
  grpc::Status Subscribe(Ctx*, const proto::SubscribeRequest*, const BatchWriter& write);
  grpc::Status AckRecall(Ctx*, const proto::AckRecallRequest*, proto::ErrReply*);
  grpc::Status Lookup(Ctx*, const proto::LookupRequest*, proto::AttrReply*);
  grpc::Status GetAttr(Ctx*, const proto::GetAttrRequest*, proto::AttrReply*);
  grpc::Status SetAttr(Ctx*, const proto::SetAttrRequest*, proto::AttrReply*);
  grpc::Status MkNod(Ctx*, const proto::MkNodRequest*, proto::AttrReply*);
  grpc::Status Symlink(Ctx*, const proto::SymlinkRequest*, proto::AttrReply*);
  grpc::Status Link(Ctx*, const proto::LinkRequest*, proto::AttrReply*);
  grpc::Status Remove(Ctx*, const proto::RemoveRequest*, proto::RemoveReply*);
  grpc::Status Rename(Ctx*, const proto::RenameRequest*, proto::RenameReply*);
  grpc::Status ReadLink(Ctx*, const proto::ReadLinkRequest*, proto::ReadLinkReply*);
  grpc::Status ReadDir(Ctx*, const proto::ReadDirRequest*, proto::ReadDirReply*);
  // Namespace grants (service_ns_grants.cc, docs/namespace-grants.md).
  grpc::Status InodeRange(Ctx*, const proto::InodeRangeRequest*, proto::InodeRangeReply*);
  grpc::Status ApplyLog(Ctx*, const proto::ApplyLogRequest*, proto::ApplyLogReply*);
  grpc::Status Open(Ctx*, const proto::OpenRequest*, proto::OpenReply*);
  grpc::Status Release(Ctx*, const proto::ReleaseRequest*, proto::ReleaseReply*);
  grpc::Status Read(Ctx*, const proto::ReadRequest*, proto::ReadReply*);
  grpc::Status Write(Ctx*, const proto::WriteRequest*, proto::WriteReply*);
  grpc::Status Grant(Ctx*, const proto::GrantRequest*, proto::GrantReply*);
  grpc::Status Fsync(Ctx*, const proto::FsyncRequest*, proto::ErrReply*);
  grpc::Status Fallocate(Ctx*, const proto::FallocateRequest*, proto::AttrReply*);
  grpc::Status StatFs(Ctx*, const proto::StatFsRequest*, proto::StatFsReply*);
  grpc::Status SetXattr(Ctx*, const proto::SetXattrRequest*, proto::ErrReply*);
  grpc::Status GetXattr(Ctx*, const proto::GetXattrRequest*, proto::GetXattrReply*);
  grpc::Status ListXattr(Ctx*, const proto::ListXattrRequest*, proto::ListXattrReply*);
  grpc::Status RemoveXattr(Ctx*, const proto::RemoveXattrRequest*, proto::ErrReply*);
  grpc::Status GetLock(Ctx*, const proto::LockRequest*, proto::GetLockReply*);
  grpc::Status SetLock(Ctx*, const proto::LockRequest*, proto::ErrReply*);
  grpc::Status Status(Ctx*, const proto::StatusRequest*, proto::StatusReply*);
  // What Status answers, for a caller in this process (the metrics).
  void FillStatus(proto::StatusReply* reply);
  // Whether it serves a volume (a replica's does not: its Status has no
  // ledger, leases or sessions).
  bool has_volume() const { return volume_ != nullptr; }
  grpc::Status Echo(Ctx*, const proto::EchoRequest*, proto::EchoReply*);
  grpc::Status Switchover(Ctx*, const proto::SwitchoverRequest*, proto::ErrReply*);
  grpc::Status Check(Ctx*, const proto::CheckRequest*, proto::CheckReply*);

 private:
  // UNAVAILABLE unless this server is the serving primary.
  grpc::Status Gate();
  // OK when a caller of one of `kinds` made the call (Transport::Authorize).
  grpc::Status Authenticate(Ctx* ctx, int kinds = kNodePeer | kAdminPeer);
  // Authenticates the call and renews the session; fills `rc`.
  grpc::Status Begin(Ctx* ctx, const proto::RequestHeader& header, RequestContext* rc);
  // OK when the caller's node reaches inode `ino` (server/subtree.h; always
  // when it is not restricted to a subtree). Otherwise PERMISSION_DENIED,
  // logged with `op`, or the errno of the walk (ENOENT: no such inode).
  absl::Status Reaches(Ctx* ctx, const RequestContext& rc, const char* op, uint64_t ino);
  // The volume's counts as statfs answers them (StatFs, and the replies
  // that carry them: WriteReply.space, ApplyLogReply.space).
  void FillStatFs(proto::StatFsReply* reply);
  // A time a mount stamped (a write, a log entry), at most 1 s ahead of
  // this server's clock.
  int64_t ClampMountTime(int64_t time_ns) const;
  // Whether `req` is the data of a file made in a directory granted to the
  // caller (WriteRequest.granted, and the caller does hold the grant of the
  // file's directory, or may apply into it: LeaseTable::BeginApply): its
  // recalls then do not wait for the sessions a server that took over
  // inherited (RequestContext::log_entry), as for log entries.
  bool GrantedWrite(const RequestContext& rc, const proto::WriteRequest& req);
  // Stores the data of `req` as a Write call or a write entry of a log does
  // (`sync`: the request's own wish): the mount's time of it and its
  // keep_times on rc.tag, the bytes counted in flight and in the metrics.
  // `staged`: its bytes are on disk already (Volume::StageWrite).
  absl::StatusOr<proto::Attr> StoreWrite(const RequestContext& rc, const proto::WriteRequest& req,
                                         bool sync, uint64_t* grant_used, bool staged = false);
  // For a node restricted to a subtree: the inode `name` in `parent` names
  // now (0: none), which it must reach like an inode of the call (Reaches).
  // Remove and Rename act on names; a name may be a link from outside.
  absl::StatusOr<uint64_t> ReachesName(Ctx* ctx, const RequestContext& rc, const char* op,
                                       uint64_t parent, const std::string& name);
  // `keys` less those a node restricted to a subtree does not reach (the
  // recalls a retried change makes from its request alone).
  std::vector<LeaseKey> Reachable(const RequestContext& rc, std::vector<LeaseKey> keys);
  // What a node restricted to a subtree hears of changes: recalls of what
  // it holds, and changes of inodes and names it reaches; the rest is left
  // out. Its top is the one of when the stream began.
  void ConfineBatch(const RequestContext& rc, proto::InvalidationBatch* batch);
  // What a node restricted to a subtree sees of a page of directory `dir`
  // (which it reaches): ".." of its top is the top itself, as at "/" of a
  // chroot, and names of inodes outside (links from outside) are left out.
  void ConfineListing(const RequestContext& rc, uint64_t dir, proto::ReadDirReply* reply);

  // Applies one entry of a mount's log (ApplyLog) for the session of `rc`
  // whose node has `policy`, under the grants `pins` holds for the batch;
  // raises `durable` to what the batch waits for; adds to `reply` what it
  // made and could not lease to the session (unleased) and what a write
  // entry did (written).
  absl::Status ApplyEntry(Ctx* ctx, const RequestContext& rc, const CallerPolicy& policy,
                          const proto::LogEntry& entry, LogPins* pins,
                          RequestTag::Durability* durable, proto::ApplyLogReply* reply,
                          StagedWrites* staged, int index);

  // Serves one call named `op` (for logs and errors; taken once): the gate,
  // the caller's identity, its flow-control credit on the reply, inode
  // numbers that must not be 0 (EINVAL) and that the caller's node must
  // reach (Reaches: PERMISSION_DENIED), then `body(rc)`, whose status
  // becomes reply->err (Done in server/service_call.h).
  // kChange (ServeOnce): `inos` count as changing (LeaseTable::BeginChange)
  // from before the grants check until the body returned.
  template <bool kChange = false, typename Req, typename Reply, typename Body>
  grpc::Status Serve(const char* op, Ctx* ctx, const Req* req, Reply* reply,
                     std::initializer_list<uint64_t> inos, Body body);
  // Serve for a call that changes something, exactly once (server/dedupe.h):
  // a retry of an applied request is answered by `prior(record, rc)` without
  // running `body` again; with a null `prior` the body runs and is told of
  // the record (`body(rc, record)`, null when none).
  template <typename Req, typename Reply, typename Prior, typename Body>
  grpc::Status ServeOnce(const char* op, Ctx* ctx, const Req* req, Reply* reply,
                         std::initializer_list<uint64_t> inos, Prior prior, Body body);

  Volume* const volume_;
  const ServiceOptions options_;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_SERVICE_H_
