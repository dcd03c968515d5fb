// Read-ahead for directory walks: the listings of the directories a walk
// will enter next, fetched while it is busy with the one it entered.
//
// `find`, `du`, `ls -R`, `rm -r` and `cp -r` read a directory, then enter
// its subdirectories one after another. Each first read of a listing is a
// call the walk waits for. Once a walk enters one subdirectory of P (reads
// its listing from the start), the next `window` subdirectories of P, in
// P's listing order, are read here by worker threads, with the walker's
// credentials, into the lease cache (FileSystem::ReadDir: the same calls
// and leases as the walk's own reads); the walk then finds them there.
// A listing of P alone (`ls -l P`) enters none and fetches nothing.
//
// Bounded: at most `max_known` subdirectories remembered (all forgotten
// past it), `max_queued` fetches waiting (the oldest dropped past it).
// Thread-safe; one mutex, a leaf (the callbacks run without it).
#ifndef GRANTFS_CLIENT_LISTING_PREFETCH_H_
#define GRANTFS_CLIENT_LISTING_PREFETCH_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/meta_client.h"

namespace grantfs {

struct ListingPrefetchOptions {
  size_t window = 8;  // subdirectories read ahead of the walk (0: off)
  size_t threads = 2;
  size_t max_known = 65536;
  size_t max_queued = 256;
};

class ListingPrefetch {
 public:
  // `fetch(creds, dir)`: reads `dir`'s whole listing into the lease cache.
  // `listed(dir)`: whether its whole listing is held there now.
  ListingPrefetch(const ListingPrefetchOptions& options,
                  std::function<absl::Status(const Creds&, uint64_t)> fetch,
                  std::function<bool(uint64_t)> listed);
  // Stop()s.
  ~ListingPrefetch();
  // Drops what waits and joins the workers (a fetch under way ends first).
  // Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // A page of `dir`'s listing read from `cookie`: `subdirs`, the inodes of
  // the directories in it, in order (cookie 0: the listing starts anew).
  void Saw(uint64_t dir, uint64_t cookie, const std::vector<uint64_t>& subdirs)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A program (`c`) starts reading `dir`'s listing.
  void Reading(const Creds& c, uint64_t dir) ABSL_LOCKS_EXCLUDED(mu_);
  // Before a walk reads `dir`'s listing from the server: a fetch of it
  // under way is waited for (at most `timeout`; true when it ended), one
  // only queued is taken back (the walk reads it itself; false).
  bool Await(uint64_t dir, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    uint64_t fetched = 0;  // listings read ahead
    uint64_t failed = 0;
    uint64_t dropped = 0;  // queued, then dropped past max_queued
  };
  Stats stats() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const ListingPrefetchOptions options_;
  const std::function<absl::Status(const Creds&, uint64_t)> fetch_;
  const std::function<bool(uint64_t)> listed_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Each listed directory's subdirectories in order, and where each
  // subdirectory stands in its parent's.
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> subdirs_ ABSL_GUARDED_BY(mu_);
  struct Place {
    uint64_t parent = 0;
    size_t index = 0;
  };
  absl::flat_hash_map<uint64_t, Place> places_ ABSL_GUARDED_BY(mu_);
  size_t known_ ABSL_GUARDED_BY(mu_) = 0;  // entries of subdirs_, all lists
  struct Job {
    Creds creds;
    uint64_t dir = 0;
  };
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  // Queued or being fetched; being fetched.
  absl::flat_hash_set<uint64_t> pending_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> running_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_;  // last: started once the rest is built
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_LISTING_PREFETCH_H_
