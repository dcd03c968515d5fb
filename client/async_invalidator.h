// An Invalidator that hands each invalidation to a thread of its own, in
// order: for the kernel invalidations that may block (an entry's waits for
// its directory's lock, a file's pages for their page locks), so that the
// thread that receives the server's stream never waits on them. With
// metadata leases the stream thread must answer recalls at once: a change
// in flight on this node may hold the very lock an invalidation waits for,
// while the server holds that change until another node's recall is
// answered (client/lease_cache.h).
//
// At most `max_queued` invalidations wait; past it the oldest are dropped
// (they are hints to the kernel: with leases the mount answers names
// itself, and open() drops cached pages). Thread-safe.
#ifndef GRANTFS_CLIENT_ASYNC_INVALIDATOR_H_
#define GRANTFS_CLIENT_ASYNC_INVALIDATOR_H_

#include <cstdint>
#include <deque>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/session.h"

namespace grantfs {

class AsyncInvalidator : public Invalidator {
 public:
  // `target` (not owned) must outlive this.
  explicit AsyncInvalidator(Invalidator* target, size_t max_queued = 65536);
  // Drops what is still queued and joins the thread.
  ~AsyncInvalidator() override;

  void InvalidateInode(uint64_t ino, bool data) override ABSL_LOCKS_EXCLUDED(mu_);
  void InvalidateEntry(uint64_t parent, const std::string& name) override ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t dropped() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Item {
    uint64_t ino = 0;  // InvalidateInode, or the entry's parent
    bool data = false;
    bool entry = false;
    std::string name;
  };
  void Push(Item item) ABSL_LOCKS_EXCLUDED(mu_);
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  Invalidator* const target_;
  const size_t max_queued_;
  absl::Mutex mu_;  // a leaf
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: started once the rest is built
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_ASYNC_INVALIDATOR_H_
