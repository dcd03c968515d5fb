// The mount's typed face of the GrantFs service: one method per RPC the
// mount makes. Each one fills the request (the caller's credentials in the
// header, the fields), calls through RpcClient (deadline, retry, failover;
// see rpc_client.h) and returns the reply's payload, or an errno status
// (ToErrno()). Nothing here caches or remembers anything: what to do with a
// reply is the caller's (FileSystem, Session).
//
// Thread-safe; owns nothing. `rpc` must outlive it.
#ifndef GRANTFS_CLIENT_META_CLIENT_H_
#define GRANTFS_CLIENT_META_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/rpc_client.h"
#include "client/statfs_cache.h"
#include "proto/grantfs.pb.h"

namespace grantfs {

// The credentials of the process that made a request.
struct Creds {
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t pid = 0;
  std::vector<uint32_t> groups;
};

// `c` as the protocol carries it (RequestHeader.creds, LogEntry.creds).
inline void FillCreds(const Creds& c, proto::Creds* out) {
  out->set_uid(c.uid);
  out->set_gid(c.gid);
  out->set_pid(c.pid);
  for (uint32_t g : c.groups) out->add_groups(g);
}

// The leases a reply carried (proto AttrReply.leased / dir_leased).
struct LeaseBits {
  bool attr = false;
  bool dir = false;
  // Not leased because the object is recalled too often (LeaseCache::FallBack).
  bool attr_hot = false;
  bool dir_hot = false;
};

class MetaClient {
 public:
  // `statfs_max_age`: how long statfs's counts are answered without a call
  // (client/statfs_cache.h; zero: never).
  explicit MetaClient(RpcClient* rpc, absl::Duration statfs_max_age = absl::ZeroDuration())
      : rpc_(rpc), statfs_(statfs_max_age) {}
  MetaClient(const MetaClient&) = delete;
  MetaClient& operator=(const MetaClient&) = delete;

  RpcClient& rpc() { return *rpc_; }
  // Called before every call that reads or changes the namespace or file
  // data (not the session's calls: heartbeat, reclaim, stream, acks, space
  // grant, inode ranges, the log itself): the mount's namespace log is
  // applied first (client/ns_grants.h), so the server answers on everything
  // this mount did before. An error fails the call (it would be answered
  // on an older state). Set once, before the first call.
  void SetBarrier(std::function<absl::Status()> barrier) { barrier_ = std::move(barrier); }
  // With it, a call about one inode (a lookup: its directory, and the
  // inode it finds; a readdir: the directory and each entry's inode) runs
  // the barrier only when the log changes that inode: the server answers
  // about any other exactly as after the log. `mark` gives the log's
  // position now; `touched(mark, ino)` whether an entry from that position
  // on (waiting, or applied since) changes `ino` (NsLog::Mark,
  // TouchedSince). A lookup or readdir page that names an inode changed by
  // an entry applied while it was out is asked again. Calls that change
  // anything, fsync, locks and releases always run the barrier; statfs
  // never does. Set once, before the first call.
  void SetTouched(std::function<uint64_t()> mark,
                  std::function<bool(uint64_t mark, uint64_t ino)> touched) {
    mark_ = std::move(mark);
    touched_ = std::move(touched);
  }

  // --- the session ---------------------------------------------------------
  // Opens the session (with retries: for `retry_for` when given, else as
  // long as any call) and sets the client id on the RpcClient. `root`: the
  // directory the mount shows as its root ("/": the volume's).
  absl::StatusOr<proto::OpenSessionReply> OpenSession(
      const std::string& client_name, const std::string& root = "/",
      std::optional<absl::Duration> retry_for = std::nullopt);
  // One attempt on the current server with a 5 s deadline: the heartbeat
  // loop is its own retry. A failure that should move the mount to the next
  // server (RpcClient::ShouldFailover) does so and sets `*failed_over`.
  // The error's message names the server.
  // `report`: the mount's numbers, for grantfsctl clients.
  absl::StatusOr<proto::HeartbeatReply> Heartbeat(uint64_t lost_acked, bool* failed_over,
                                                  const proto::MountReport& report = {});
  // Names this mount's open files, (ino, handle) pairs, to a server that
  // does not know them (a new incarnation).
  absl::StatusOr<proto::ReclaimReply> Reclaim(
      const std::vector<std::pair<uint64_t, uint64_t>>& opens);
  // Ends the session: one try on each server at most (the primary may have
  // moved since the last call); failures are logged.
  void CloseSession();
  // Opens the invalidation stream on the current server, whose index goes
  // to `*index` (to fail over from when the stream ends). `ctx` is the
  // caller's, to cancel.
  // `leases`: the mount takes metadata leases (it holds none now).
  std::unique_ptr<grpc::ClientReader<proto::InvalidationBatch>> Subscribe(grpc::ClientContext* ctx,
                                                                          size_t* index,
                                                                          bool leases);
  // Every recall up to `seq` was dropped: one attempt, deadline `timeout`.
  absl::Status AckRecall(uint64_t seq, absl::Duration timeout);
  // Asks for `wanted` more bytes of space grant, returning `back`; returns
  // the bytes granted.
  absl::StatusOr<uint64_t> Grant(uint64_t wanted, uint64_t back);
  // Namespace grants (docs/namespace-grants.md): `count` inode numbers, the
  // ranges ending at or below `keep_from` given back; and a log applied.
  absl::StatusOr<proto::InodeRangeReply> InodeRange(uint32_t count, uint64_t keep_from);
  absl::StatusOr<proto::ApplyLogReply> ApplyLog(proto::ApplyLogRequest* req);

  // --- the namespace -------------------------------------------------------
  // `leases` (optional) gets the leases the reply carried; Lookup's also
  // with ENOENT.
  absl::StatusOr<proto::Attr> Lookup(const Creds& c, uint64_t parent, const std::string& name,
                                     LeaseBits* leases = nullptr);
  // ENOENT when the inode no longer exists.
  absl::StatusOr<proto::Attr> GetAttr(const Creds& c, uint64_t ino, LeaseBits* leases = nullptr);
  // `req.ino` and `req.valid` say what to change; the header is stamped here.
  absl::StatusOr<proto::Attr> SetAttr(const Creds& c, proto::SetAttrRequest req,
                                      LeaseBits* leases = nullptr);
  // The reply's `created`: whether this call made the inode; `granted`:
  // whether a directory asked for with `want_grant` is granted to this
  // session (docs/namespace-grants.md).
  absl::StatusOr<proto::AttrReply> MkNod(const Creds& c, uint64_t parent, const std::string& name,
                                         uint32_t mode, uint64_t rdev, uint32_t umask,
                                         bool exclusive, bool want_grant = false);
  absl::StatusOr<proto::Attr> Symlink(const Creds& c, uint64_t parent, const std::string& name,
                                      const std::string& target, LeaseBits* leases = nullptr);
  absl::StatusOr<proto::Attr> Link(const Creds& c, uint64_t ino, uint64_t new_parent,
                                   const std::string& new_name, LeaseBits* leases = nullptr);
  // `expected_ino`: the inode the mount believes `name` is (0: unknown); the
  // server refuses to remove another. The replies say which inodes lost or
  // moved a name (proto RemoveReply, RenameReply).
  absl::StatusOr<proto::RemoveReply> Remove(const Creds& c, uint64_t parent,
                                            const std::string& name, bool is_dir,
                                            uint64_t expected_ino);
  absl::StatusOr<proto::RenameReply> Rename(const Creds& c, uint64_t parent,
                                            const std::string& name, uint64_t new_parent,
                                            const std::string& new_name, uint32_t flags,
                                            uint64_t expected_ino, uint64_t expected_new_ino);
  absl::StatusOr<std::string> ReadLink(const Creds& c, uint64_t ino);
  // `want_grant` (cookie 0): the directory's grant is asked for too
  // (ReadDirReply.granted). `retry_for`: as RpcClient::Call's (work that
  // may be given up retries briefly).
  absl::StatusOr<proto::ReadDirReply> ReadDir(
      const Creds& c, uint64_t ino, uint64_t cookie, uint32_t max_entries, bool want_grant = false,
      std::optional<absl::Duration> retry_for = std::nullopt);

  // --- files ---------------------------------------------------------------
  // `handle`: this open's id in the mount (a resent Open counts once).
  absl::StatusOr<proto::Attr> Open(const Creds& c, uint64_t ino, uint32_t flags, uint64_t handle,
                                   bool created);
  absl::Status Release(uint64_t ino, uint64_t handle);
  // One Read RPC of at most `size` bytes (fewer at the end of the file).
  absl::StatusOr<std::string> Read(const Creds& c, uint64_t ino, uint64_t offset, size_t size);
  // One attempt of a Read without credentials, on `ctx` (prepared by the
  // caller, who may cancel it): RpcClient::CallOnce.
  absl::StatusOr<std::string> ReadOnce(grpc::ClientContext* ctx, uint64_t ino, uint64_t offset,
                                       size_t size);
  // One Write RPC that allocates at the server (write-through).
  absl::Status Write(const Creds& c, uint64_t ino, uint64_t offset, const char* data, size_t size);
  // One Write RPC of cached data debited from the session's grant; `data`
  // is sent without a copy (RpcClient::Write). `time_ns`, `keep_times`,
  // `granted`: as WriteRequest's (WriteCache::WriteTime).
  absl::StatusOr<proto::WriteReply> WriteFromGrant(uint64_t ino, uint64_t offset,
                                                   std::shared_ptr<const std::string> data,
                                                   int64_t time_ns = 0, bool keep_times = false,
                                                   bool granted = false);
  // Makes what was written to `ino` durable. No call when the server
  // fdatasyncs every write before it answers (WriteReply.synced_always, in
  // the last Write reply) and no write of `ino` was acknowledged here
  // without that, nor space allocated (Fallocate): there is nothing left
  // to sync. (A server in the mode that does not, --sync_data=false, says
  // so in every Write reply: then every fsync is a call.)
  absl::Status Fsync(const Creds& c, uint64_t ino) ABSL_LOCKS_EXCLUDED(unsynced_mu_);
  absl::Status Fallocate(const Creds& c, uint64_t ino, uint32_t mode, uint64_t offset,
                         uint64_t length);
  // Answered from the counts kept (client/statfs_cache.h) while they are
  // younger than the max age and no call since changed them without
  // saying. Every call below that changes them says so: those whose reply
  // carries them (Write, WriteFromGrant, ApplyLog) keep them, the others
  // (creates, removes, renames, setattr, an open with O_TRUNC, fallocate,
  // xattrs, grants) make the kept ones stale.
  absl::StatusOr<proto::StatFsReply> StatFs(const Creds& c);

  // --- xattrs --------------------------------------------------------------
  absl::Status SetXattr(const Creds& c, uint64_t ino, const std::string& name,
                        const std::string& value, uint32_t flags);
  absl::StatusOr<std::string> GetXattr(const Creds& c, uint64_t ino, const std::string& name);
  absl::StatusOr<std::vector<std::string>> ListXattr(const Creds& c, uint64_t ino);
  absl::Status RemoveXattr(const Creds& c, uint64_t ino, const std::string& name);

  // --- locks ---------------------------------------------------------------
  // The conflicting lock (type F_UNLCK when none).
  absl::StatusOr<proto::LockRange> GetLock(const Creds& c, uint64_t ino, uint64_t owner,
                                           const proto::LockRange& range);
  // One try: EAGAIN when a conflicting lock is held (the server never
  // blocks a call).
  absl::Status SetLock(const Creds& c, uint64_t ino, uint64_t owner, bool flock,
                       const proto::LockRange& range);

  // After a write or allocation of `ino` was acknowledged (`reply`: its
  // Write reply, or what a write entry of the namespace log was answered
  // in its stead: NsGrants::LogWrite; none: an allocation, never synced at
  // the ack).
  void NoteWritten(uint64_t ino, const proto::WriteReply* reply) ABSL_LOCKS_EXCLUDED(unsynced_mu_);

 private:
  absl::Status Barrier() const { return barrier_ ? barrier_() : absl::OkStatus(); }
  uint64_t Mark() const { return mark_ ? mark_() : 0; }
  bool TouchedSince(uint64_t mark, uint64_t ino) const {
    return barrier_ && (!touched_ || touched_(mark, ino));
  }
  absl::Status BarrierFor(uint64_t ino) const {
    return TouchedSince(Mark(), ino) ? Barrier() : absl::OkStatus();
  }

  // A call sent at `sent` ended with `status`, and `counts` (null: none)
  // in its reply.
  void NoteCounts(absl::Time sent, const absl::Status& status, const proto::StatFsReply* counts);

  RpcClient* const rpc_;
  StatFsCache statfs_;
  // Fsync's state: the last Write reply's synced_always, and the inodes
  // with acknowledged writes not on disk at the ack (each with a number
  // that grows with every such write: an Fsync forgets the inode only if
  // none came while it was out). Past kMaxUnsynced inodes, all are.
  static constexpr size_t kMaxUnsynced = 65536;
  absl::Mutex unsynced_mu_;  // a leaf
  bool synced_always_ ABSL_GUARDED_BY(unsynced_mu_) = false;
  bool all_unsynced_ ABSL_GUARDED_BY(unsynced_mu_) = false;
  uint64_t unsynced_seq_ ABSL_GUARDED_BY(unsynced_mu_) = 0;
  absl::flat_hash_map<uint64_t, uint64_t> unsynced_ ABSL_GUARDED_BY(unsynced_mu_);
  std::function<absl::Status()> barrier_;
  std::function<uint64_t()> mark_;
  std::function<bool(uint64_t, uint64_t)> touched_;
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_META_CLIENT_H_
