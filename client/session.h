// The mount's session with the servers: opening and closing it, the
// heartbeats that keep its lease (and its space grant), the reclaim of its
// open files by a server that does not know them (a restart, or a replica
// that took over), and the stream of cache invalidations the server pushes.
//
// Thread-safe. Two threads of its own after Start(): the heartbeat and the
// invalidation stream.
#ifndef GRANTFS_CLIENT_SESSION_H_
#define GRANTFS_CLIENT_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/grant_pool.h"
#include "client/lease_cache.h"
#include "client/meta_client.h"
#include "client/ns_grants.h"
#include "client/open_handles.h"
#include "client/read_ahead.h"
#include "common/clock.h"
#include "proto/grantfs.pb.h"

namespace grantfs {

// What the kernel must forget after a change made on another node.
class Invalidator {
 public:
  virtual ~Invalidator() = default;
  // Attributes of `ino` changed; when `data`, its cached pages too.
  virtual void InvalidateInode(uint64_t ino, bool data) = 0;
  // The entry `name` of directory `parent` changed.
  virtual void InvalidateEntry(uint64_t parent, const std::string& name) = 0;
  // Every name the kernel holds is to be checked again before its next use
  // (a leased directory was recalled or the leases were dropped). Takes no
  // lock the kernel may hold. Nothing to do by default (a kernel that does
  // not hold leased names).
  virtual void InvalidateAllNames() {}
  // The lease on the names of directory `dir` ended: the kernel's copy of
  // its listing, if it keeps one (fuse_ops.cc, FuseAdapter::OpenDir), is
  // dropped. Takes no lock the kernel may hold while it waits for the
  // mount. Nothing to do by default.
  virtual void InvalidateListing(uint64_t dir) {}
};

struct SessionOptions {
  // Name shown in the server's session list (host and mount point).
  std::string client_name;
  // The directory the mount shows as its root (OpenSessionRequest.root).
  std::string root_path = "/";
  // How long Open() waits for a server; nullopt: as long as any call.
  std::optional<absl::Duration> open_wait;
  // Fills what each heartbeat reports of the mount (grantfsctl clients);
  // none: nothing is reported. Called on the heartbeat thread.
  std::function<void(proto::MountReport*)> report;
  // Measures leases (the grant's, GrantPoolOptions::clock). Not owned.
  Clock* clock = Clock::Monotonic();
};

class AsyncInvalidator;  // client/async_invalidator.h

class Session {
 public:
  // Not owned, and must outlive it: `meta`, `handles`; `pool` (null without
  // fastwrite), `read_ahead` and `leases` (null when off) too. Takes over
  // the RpcClient's failover hook (a failover sends a heartbeat at once).
  // With leases, the heartbeats renew them and the stream carries their
  // recalls (client/lease_cache.h).
  // `ns` (null when namespace grants are off): the stream's grant recalls
  // apply its log and drop the grant before they are acknowledged, a broken
  // stream or a renewal refused drops its grants, and its log is applied
  // before the mount subscribes again (docs/namespace-grants.md).
  Session(const SessionOptions& options, MetaClient* meta, OpenHandleTable* handles,
          GrantPool* pool, ReadAhead* read_ahead, LeaseCache* leases = nullptr,
          NsGrants* ns = nullptr);
  ~Session();

  // Opens the session on the server (retried as every call). Returns the
  // reply; `*sent` gets when it was sent (options.clock), for LeaseEnd.
  absl::StatusOr<proto::OpenSessionReply> Open(absl::Time* sent) ABSL_LOCKS_EXCLUDED(mu_);
  // Where the session's lease ends, seen from the mount, for a request sent
  // at `sent` (options.clock) that the server answered.
  absl::Time LeaseEnd(absl::Time sent) ABSL_LOCKS_EXCLUDED(mu_);
  // The metadata lease term of the server that answered (OpenSession,
  // every heartbeat and subscription: after a failover it is the new
  // server's): renewals count with it, and heartbeats come every third.
  // After a heartbeat succeeded: a recall stream left on another server than
  // the one that answers the calls (a primary that lost its role but stays
  // up) is ended, so that the mount subscribes where its leases are
  // renewed. Only after a call succeeded there: a failover of one slow call
  // must not cost the leases.
  // `answered`: the server the heartbeat was sent to.
  void FollowCalls(size_t answered) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns the term to count with (the last one said, when `ms` is 0).
  absl::Duration SetMetaLease(uint64_t ms) ABSL_LOCKS_EXCLUDED(mu_);
  // After Open(): starts heartbeats and (if `invalidator` is not null) the
  // invalidation stream. `invalidator` must outlive Join().
  void Start(Invalidator* invalidator) ABSL_LOCKS_EXCLUDED(mu_);
  // Heartbeats stop and the stream is cancelled; returns at once.
  void BeginStop() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for the threads (BeginStop first), then ends the session on the
  // server. Idempotent.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);
  // With leases, the kernel's names are dropped on a thread of their own
  // (SubscribeLoop): waits at most `timeout` for the drops pushed so far,
  // but those in directory `except` (AsyncInvalidator::AwaitEntries). True
  // when none is left (or there is no such thread).
  bool AwaitEntryDrops(uint64_t except, absl::Duration timeout);

 private:
  void HeartbeatLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // The server answering is `incarnation` (heartbeat reply): if that is not
  // the one seen before, or open handles are owed a reclaim
  // (OpenHandleTable::NeedsReclaim), tells it which files this mount has
  // open. Returns false when that failed (tried again on the next
  // heartbeat). Heartbeat thread only.
  bool Reclaim(uint64_t incarnation) ABSL_LOCKS_EXCLUDED(mu_);
  void SubscribeLoop(Invalidator* invalidator) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits `backoff` before the stream is opened again, less when the
  // server's channel gets connected meanwhile, polling its connection
  // attempt (RpcClient::WaitForServer); mu_ is released while waiting.
  // False when the mount is stopping.
  bool WaitToReconnect(absl::Duration backoff) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every leased thing is dropped, here and in the kernel (`invalidator`
  // may be null).
  void DropLeases(bool stream_down, Invalidator* invalidator);
  // The recalls of one batch: dropped here and in the kernel, then
  // acknowledged. Stream thread only.
  void Recall(const proto::InvalidationBatch& batch, Invalidator* invalidator);

  // Constant after construction.
  const SessionOptions options_;
  MetaClient* const meta_;
  OpenHandleTable* const handles_;
  GrantPool* const pool_;
  ReadAhead* const ra_;
  LeaseCache* const leases_;
  NsGrants* const ns_;

  // A leaf lock: nothing else is taken while it is held, and no RPC is made
  // (nor a failover done: the failover hook takes it) under it.
  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t lease_ms_ ABSL_GUARDED_BY(mu_) = 10000;
  uint64_t meta_lease_ms_ ABSL_GUARDED_BY(mu_) = 3000;
  // Set by Start, before the threads: the heartbeat drops leases in it.
  Invalidator* invalidator_ = nullptr;
  // With leases, made by Start before the threads and before the kernel's
  // requests (stopped by Close, kept until the session goes): the stream's
  // drops that may wait for kernel locks go through it.
  std::unique_ptr<AsyncInvalidator> slow_;
  // A call moved to another server: the next heartbeat goes at once (it
  // finds out whether the server is a new incarnation).
  bool kick_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* stream_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  // The server (RpcClient index) the recall stream is on.
  size_t stream_index_ ABSL_GUARDED_BY(mu_) = SIZE_MAX;

  // The server incarnation this mount's open files are known to (0: none
  // yet). Set by Open(), then used by the heartbeat thread only.
  uint64_t incarnation_ = 0;
  // Reclaim: the server incarnation the namespace log was last seen for,
  // and the log's last position then (heartbeat thread only).
  uint64_t log_seen_incarnation_ = 0;
  uint64_t log_upto_ = 0;
  std::thread heartbeat_;
  std::thread subscriber_;
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_SESSION_H_
