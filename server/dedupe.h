// Exactly-once execution of retried requests.
//
// Every request carries (client_id, seq); a client resends a request with
// the same pair after a timeout or a failover. The first Mutate of the
// metadata store that a tagged request makes also writes a DedupeRecord
// under keys::Dedupe(client_id, seq), in the same RocksDB batch, so the
// record exists exactly when the change does (and is replicated with it).
// A request whose pair already has a record is not applied again: the
// service answers it from the record (a retried create returns the inode it
// created, not EEXIST; a retried rename succeeds instead of ENOENT).
//
// RequestTag: the request a change is made for. The service makes one per
// request (server/service.cc ServeOnce) and hands it down explicitly: it
// rides in the RequestContext to the Volume, which passes it to each change
// of the metadata store on the request's path (MetaStore::Mutate takes it;
// null for changes made for no request: maintenance, recovery, tests).
// InFlightRequests: a retry that arrives while the first attempt is still
// running waits for it to finish.
//
// Records expire after a retention time (5 min by default, far above the
// client's retry window).
#ifndef GRANTFS_SERVER_DEDUPE_H_
#define GRANTFS_SERVER_DEDUPE_H_

#include <cstdint>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace grantfs {

// Used by the one thread that serves the request; not thread-safe.
struct RequestTag {
  uint64_t client_id = 0;
  uint64_t seq = 0;
  // What the record keeps (op-specific); set by the op before its Mutate.
  uint64_t value = 0;
  // The record is written; later Mutates of the same request add none.
  bool recorded = false;

  // An operation a mount made on its own in a directory granted to it,
  // applied now from its log (ApplyLog, docs/namespace-grants.md):
  // `time_ns` its timestamps (0: the server's clock, MetaTxn::NowNanos),
  // `ino` the number a create gives the new inode (0: the next free one).
  int64_t time_ns = 0;
  uint64_t ino = 0;
  // A write whose file had its times set after it, at the mount
  // (WriteRequest.keep_times): its commit leaves mtime and ctime alone.
  bool keep_times = false;
  // Each Mutate for the request returns once its batch is applied, not
  // durable, and raises `durable` to what to wait for
  // (MetaStore::WaitDurable(Durability)): a log of changes pays one WAL sync
  // and one replica round trip.
  bool defer_durable = false;
  struct Durability {
    uint64_t ticket = 0;          // MetaStore's applied-batch ticket
    uint64_t replicated_seq = 0;  // the change sink's sequence number
  } durable;

  bool active() const { return client_id != 0 && seq != 0 && !recorded; }
};

// Requests being executed now, by (client_id, seq).
class InFlightRequests {
 public:
  // Registers the pair; if it is already running (a retry overtook the
  // first attempt), waits up to `wait` for it to finish. Returns false on
  // timeout (the caller answers EAGAIN-like and the client retries).
  bool Enter(uint64_t client_id, uint64_t seq, absl::Duration wait);
  void Leave(uint64_t client_id, uint64_t seq);

 private:
  absl::Mutex mu_;
  std::set<std::pair<uint64_t, uint64_t>> running_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_DEDUPE_H_
