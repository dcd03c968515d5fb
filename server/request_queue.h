// The server's request queue: the place between gRPC and the handlers where
// calls wait for a thread. gRPC's callback API hands each call over on one of
// its own threads, which must never block; the call is queued here and run
// by one of a fixed set of worker threads, which may block (a RocksDB WAL
// fsync, the replica's acknowledgement, a lease recall).
//
// Past saturation the queue keeps the workers busy with the calls that are
// already waiting and refuses the excess at once (Submit returns false: the
// caller answers RESOURCE_EXHAUSTED, which clients retry with a backoff),
// instead of letting every call slow down together. Two bounds decide:
// calls waiting in all, and calls waiting from one source (a client's
// connection: a mount has one), so one flooding client fills its own
// share, not the queue. Sources take turns: a worker takes the oldest call of the next source in
// a round robin, so a source with one call waiting is served before the
// thousandth call of another.
//
// Calls of one source run on at most `max_running_per_source` workers at
// once: a client whose calls block (changes waiting for a recall a stopped
// node does not answer, writes waiting for space) cannot take every worker.
//
// Two lanes have threads of their own, so that they never wait behind
// ordinary calls: heartbeats and recall acknowledgements (kLiveness: a
// change blocked in a recall waits for an acknowledgement, and a late
// heartbeat costs the mount its leases), and the calls of sessions,
// operators and space given back (kControl: opening and closing sessions,
// Status, Switchover, Check, Grant returning space to other writers, and
// ApplyLog, a mount's answer to the recall of a namespace grant).
//
// Thread-safe.
#ifndef GRANTFS_SERVER_REQUEST_QUEUE_H_
#define GRANTFS_SERVER_REQUEST_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace grantfs {

struct RequestQueueOptions {
  // Threads that run ordinary calls (the file system's operations); >= 1.
  int workers = 64;
  // Threads of the control lane and of the liveness lane; >= 1.
  int control_workers = 4;
  int liveness_workers = 2;
  // Calls waiting (not yet running) in a lane, all sources together; a call
  // past it is refused.
  size_t max_queued = 8192;
  // Calls of one source waiting in a lane; a call past it is refused.
  size_t max_queued_per_source = 256;
  // Bytes of the requests waiting in a lane (what their messages hold: a
  // Write's data), all sources together; a call past it is refused, and a
  // source's calls past a quarter of it. A source with nothing waiting gets
  // one call in up to twice the bound, so that one flooding source cannot
  // keep the others out. Mounts keep their writes within the flow-control
  // credit, so only a client that ignores it meets these bounds: without
  // them, calls counted by number could hold gigabytes of messages.
  size_t max_queued_bytes = 512ull << 20;
  // Calls of one source running at once in the work lane; 0: half the
  // workers (at least 1).
  int max_running_per_source = 0;
  // Not the queue's own: the calls one client connection may have open at
  // once (HTTP/2 MAX_CONCURRENT_STREAMS, set by the server, server/roles.cc);
  // the client holds back the rest.
  int max_streams = 256;
};

enum class Lane { kWork, kControl, kLiveness };

struct RequestQueueStats {
  uint64_t admitted = 0;     // calls queued since start
  uint64_t refused = 0;      // calls refused since start (a bound was reached)
  uint64_t queued = 0;       // calls waiting now
  uint64_t running = 0;      // calls on a worker now
  uint64_t peak_queued = 0;  // the most calls that waited at once in one lane
  uint64_t sources = 0;      // sources with calls waiting now
};

class RequestQueue {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  // Starts the workers.
  explicit RequestQueue(const RequestQueueOptions& options);
  // Stop().
  ~RequestQueue();
  RequestQueue(const RequestQueue&) = delete;
  RequestQueue& operator=(const RequestQueue&) = delete;

  // Queues `task` to run once on a worker of `lane`, as a call of `source`
  // (any number that tells callers apart). False when a bound is reached
  // or the queue is stopping: `task` is dropped without running, and the
  // caller answers the call itself.
  // `bytes`: the size of the call's request (max_queued_bytes).
  bool Submit(Lane lane, uint64_t source, Task task, size_t bytes = 0);

  // Refuses new calls, runs every call already queued, then ends the
  // workers. Idempotent.
  void Stop();

  RequestQueueStats Stats() const;

 private:
  struct Waiting {
    Task task;
    size_t bytes = 0;
  };
  struct Source {
    std::deque<Waiting> tasks;  // waiting, oldest first
    size_t bytes = 0;           // of `tasks`
    size_t running = 0;         // on a worker now
    bool in_ring = false;
  };
  // One lane's calls, threads and counters.
  struct LaneState {
    // Constant after construction.
    size_t max_per_source = 0;
    size_t max_running = 0;  // per source
    // A source is kept while it has calls waiting or running.
    absl::flat_hash_map<uint64_t, Source> sources ABSL_GUARDED_BY(mu);
    // Sources that have calls waiting and may run one more, each once, in
    // the order they are served.
    std::deque<uint64_t> ring ABSL_GUARDED_BY(mu);
    size_t queued ABSL_GUARDED_BY(mu) = 0;
    size_t queued_bytes ABSL_GUARDED_BY(mu) = 0;
    size_t running ABSL_GUARDED_BY(mu) = 0;
    bool stopping ABSL_GUARDED_BY(mu) = false;
    uint64_t admitted ABSL_GUARDED_BY(mu) = 0;
    uint64_t refused ABSL_GUARDED_BY(mu) = 0;
    uint64_t peak_queued ABSL_GUARDED_BY(mu) = 0;
    absl::Time last_refusal_log ABSL_GUARDED_BY(mu) = absl::InfinitePast();
    mutable absl::Mutex mu;
    absl::CondVar work;
    std::vector<std::thread> threads;  // started by the constructor, joined by Stop
  };

  void Work(LaneState* lane);
  // Puts `id` in the ring when it has calls waiting and room to run one.
  // REQUIRES: l->mu held.
  static void MaybeRing(LaneState* l, uint64_t id, Source* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(l->mu);
  LaneState& lane(Lane l) {
    return l == Lane::kControl ? control_ : l == Lane::kLiveness ? liveness_ : work_;
  }
  LaneState* lanes(int i) { return i == 0 ? &work_ : i == 1 ? &control_ : &liveness_; }
  const LaneState* lanes(int i) const { return i == 0 ? &work_ : i == 1 ? &control_ : &liveness_; }

  // Constant after construction.
  const RequestQueueOptions options_;
  LaneState work_;
  LaneState control_;
  LaneState liveness_;
  absl::Mutex stop_mu_;  // serializes Stop
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_REQUEST_QUEUE_H_
