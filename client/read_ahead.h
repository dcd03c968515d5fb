// Asynchronous read-ahead of large extents for sequential readers (the read
// path of docs/write-path.md).
//
// Per inode, a stream remembers how far the reads of its current run got. A
// read that starts within the run's window (at most two extents behind the
// furthest byte read, at most one extent past what was read or fetched)
// continues the run: the stream then keeps the extents covering
// [furthest byte read, + window) fetched or in flight, one fetch (one Read
// RPC) per extent, aligned to the extent size, on a small pool of threads.
// The window starts at `initial_window_bytes` and doubles each time the reader
// enters a new extent, up to `window_bytes`. Reads copy from fetched extents,
// wait for extents in flight, and read directly (the caller's function) what
// no extent holds, or when a fetch failed or took longer than `wait_timeout`.
// A read outside the window drops the stream's extents and starts a new run:
// random reads fetch nothing ahead.
//
// Never stale: every stream has a generation. Invalidate() (a local write,
// truncate, fallocate, open, a change pushed by the server) bumps it and drops
// the stream's extents; a fetch issued at an older generation is discarded
// when it completes. No read-ahead starts for an inode while `has_dirty`
// says the write cache holds data of it (the server's copy may be superseded
// when the flush lands); the caller still lays cached writes over what Read()
// returns. A fetch that comes back short marks the end of file for its
// generation: nothing past it is fetched or served.
//
// Errors: a failed fetch is logged (once until a fetch of that inode works
// again) and its readers read directly; the stream issues nothing for
// `retry_after`, or until its data changes.
//
// Memory: the bytes of all extents, fetched or in flight (including discarded
// ones still in flight), never exceed max(memory_limit, window + 2 extents).
// A stream holds at most window + 2 extents (the window ahead, the extent
// being read and the one before it, for reads the kernel sent together that
// arrive late), and at most memory_limit / (window + 2 extents) streams are
// tracked (the least recently read is evicted). Release of the last open of an
// inode drops its stream.
//
// Thread-safe. mu_ is never held across a fetch or a `has_dirty` call.
#ifndef GRANTFS_CLIENT_READ_AHEAD_H_
#define GRANTFS_CLIENT_READ_AHEAD_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace grantfs {

struct ReadAheadOptions {
  // Most bytes kept fetched ahead of a sequential reader (at least one
  // extent). Default 8 MiB.
  uint64_t window_bytes = 8ull << 20;
  // The window of a new sequential run. Default 1 MiB.
  uint64_t initial_window_bytes = 1ull << 20;
  // Bytes of one fetch (one Read RPC); extents are aligned to it. Default
  // 1 MiB, the server's largest read.
  uint64_t extent_bytes = 1ull << 20;
  // Bytes of all streams' extents together; also sets how many streams are
  // tracked (memory_limit / (window + 2 extents), at least 1). Default
  // 64 MiB: 6 streams of 8 + 2 MiB.
  uint64_t memory_limit = 64ull << 20;
  // Threads fetching in parallel. Default 4.
  int threads = 4;
  // Longest wait of a read for an extent in flight before it reads directly.
  absl::Duration wait_timeout = absl::Seconds(10);
  // After a failed fetch, how long a stream reads directly only.
  absl::Duration retry_after = absl::Seconds(1);
  Clock* clock = Clock::Real();
};

class ReadAhead {
 public:
  // Reads [offset, offset + size) of `ino` from the server; shorter only at
  // end of file.
  using ReadFn =
      std::function<absl::StatusOr<std::string>(uint64_t ino, uint64_t offset, size_t size)>;
  // Whether this mount holds written data of `ino` not yet on the server.
  using DirtyFn = std::function<bool(uint64_t ino)>;

  // `fetch` is called on the pool's threads; `has_dirty` (may be empty) on
  // the readers' threads, with no lock of this class held.
  ReadAhead(const ReadAheadOptions& options, ReadFn fetch, DirtyFn has_dirty);
  ~ReadAhead();

  void Start();
  // Drops queued fetches, wakes waiting readers and joins the pool (a fetch
  // in progress is waited for: the caller cancels its RPCs first). Reads
  // after Stop() read directly. Idempotent.
  void Stop();

  // [offset, offset + size) of `ino`: from fetched extents where they hold
  // it, otherwise through `direct` (called at most once, for the rest of the
  // range). Notes the access pattern and keeps the window in flight. The
  // result is shorter than `size` only at end of file; errors are
  // `direct`'s.
  absl::StatusOr<std::string> Read(uint64_t ino, uint64_t offset, size_t size,
                                   const ReadFn& direct);

  // The data of `ino` may have changed: fetched and in-flight extents are
  // dropped and never served.
  void Invalidate(uint64_t ino);
  // The same for every inode.
  void InvalidateAll();
  // An open of `ino` (close-to-open: invalidates) with the file's size the
  // server reported, and its release; the last release drops the stream.
  // Read-ahead fetches nothing past `size` until the data changes (reads
  // past it are still answered, directly).
  void Opened(uint64_t ino, uint64_t size);
  void Released(uint64_t ino);

  struct Stats {
    uint64_t issued = 0;        // extents queued for fetching
    uint64_t fetches = 0;       // read-ahead fetches completed (RPCs sent)
    uint64_t fetch_errors = 0;  // ... that failed
    uint64_t discarded = 0;     // ... whose result was dropped (stale or evicted)
    uint64_t served_bytes = 0;  // bytes copied from extents
    uint64_t waits = 0;         // reads that waited for an extent in flight
    uint64_t timeouts = 0;      // ... and gave up
    uint64_t direct_reads = 0;  // calls of the caller's direct read
    uint64_t held_bytes = 0;    // bytes of extents now (fetched or in flight)
    uint64_t streams = 0;       // inodes tracked now
  };
  Stats stats();

 private:
  struct Extent {
    enum State { kQueued, kFetching, kDone, kFailed };
    uint64_t offset = 0;
    uint64_t size = 0;  // asked for; counted in held bytes until freed
    uint64_t gen = 0;
    State state = kQueued;
    bool dropped = false;  // no longer in its stream; never served
    std::string data;      // kDone: shorter than `size` at end of file
  };
  struct Stream {
    uint64_t ino = 0;
    uint64_t gen = 0;
    bool dead = false;                           // evicted or released: nothing more is issued
    uint64_t reads = 0;                          // reads in the current run
    uint64_t run_end = 0;                        // furthest byte read in the current run
    uint64_t fetch_end = 0;                      // end of the furthest extent issued this run
    uint64_t window = 0;                         // current window (0: not sequential yet)
    uint64_t eof = UINT64_MAX;                   // end of file seen at this generation
    uint64_t size_hint = UINT64_MAX;             // size at open; nothing fetched past it
    absl::Time retry_at = absl::InfinitePast();  // after a failed fetch: none issued before
    bool error_logged = false;  // a failure was logged; cleared by a fetch that works
    uint64_t held = 0;          // bytes of `extents`
    uint64_t last_use = 0;      // for LRU eviction
    std::map<uint64_t, std::shared_ptr<Extent>> extents;  // by offset, all of `gen`
  };
  struct Task {
    std::shared_ptr<Stream> stream;
    std::shared_ptr<Extent> extent;
  };

  // The stream of `ino`, made (evicting the least recently read) if absent.
  std::shared_ptr<Stream> StreamLocked(uint64_t ino) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Classifies a read and updates the run; true when it is sequential.
  bool NoteReadLocked(Stream* s, uint64_t offset, uint64_t end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Issues the extents of [from, run_end + window) not held yet, within the
  // memory bounds.
  void IssueLocked(const std::shared_ptr<Stream>& s, uint64_t from)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes one extent from its stream; its bytes are freed now, or when its
  // fetch ends.
  void DropLocked(Stream* s, std::map<uint64_t, std::shared_ptr<Extent>>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropAllLocked(Stream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveStreamLocked(uint64_t ino) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bumps the generation of `s` and drops its extents.
  void InvalidateLocked(Stream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies what the extents of `s` hold from *pos on into *out; true at end
  // of file. Waits for extents in flight (mu_ is released while waiting).
  bool ServeLocked(Stream* s, uint64_t end, uint64_t* pos, std::string* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLoop();

  // Constant after construction.
  const ReadAheadOptions options_;
  const uint64_t extent_;  // extent size (> 0)
  const uint64_t window_;  // largest window (>= extent_)
  const uint64_t memory_limit_;
  const size_t max_streams_;
  const ReadFn fetch_;
  const DirtyFn has_dirty_;

  // A leaf: fetch_ and has_dirty_ are called with it released (lock order:
  // filesystem.h).
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Stream>> streams_ ABSL_GUARDED_BY(mu_);
  struct Open {
    int count = 0;
    uint64_t size = UINT64_MAX;  // reported by the last open
  };
  absl::flat_hash_map<uint64_t, Open> opens_ ABSL_GUARDED_BY(mu_);
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t held_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of all extents not yet freed
  uint64_t tick_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_;
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_READ_AHEAD_H_
