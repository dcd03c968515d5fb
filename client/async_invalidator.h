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
#include "absl/time/time.h"
#include "client/session.h"

namespace grantfs {

class AsyncInvalidator : public Invalidator {
 public:
  // `target` (not owned) must outlive this.
  explicit AsyncInvalidator(Invalidator* target, size_t max_queued = 65536);
  // Stop()s.
  ~AsyncInvalidator() override;
  // Drops what is still queued and joins the thread; what is pushed after
  // is dropped. Idempotent; not concurrent with itself.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  void InvalidateInode(uint64_t ino, bool data) override ABSL_LOCKS_EXCLUDED(mu_);
  void InvalidateEntry(uint64_t parent, const std::string& name) override ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t dropped() ABSL_LOCKS_EXCLUDED(mu_);

  // Waits at most `timeout` until every entry invalidation pushed before
  // this call was handed to the target (or dropped), except those of
  // directory `except`; true when none is left that it could wait for. A lookup of a directory
  // the kernel holds under another name calls it before its reply: the
  // kernel moves its old name to the new one only if it gets the old
  // parent's lock at once (fs/dcache.c, __d_unalias), and fails the
  // lookup with ESTALE otherwise, while the old name is still there
  // (client/fuse_ops.cc, OpLookup). The lookup holds `except`'s lock, which
  // the drops of its names wait for: bounded by `timeout`, not waited on
  // when they are all that is left, nor past the first of them (the drops
  // are handed over in order: nothing behind it moves until the lookup
  // returns).
  bool AwaitEntries(uint64_t except, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Item {
    uint64_t ino = 0;  // InvalidateInode, or the entry's parent
    bool data = false;
    bool entry = false;
    std::string name;
    uint64_t seq = 0;  // the order pushed, from 1
  };
  void Push(Item item) ABSL_LOCKS_EXCLUDED(mu_);
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  Invalidator* const target_;
  const size_t max_queued_;
  absl::Mutex mu_;  // a leaf
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t pushed_ ABSL_GUARDED_BY(mu_) = 0;  // the seq of the last item pushed
  // The item handed to the target now (its parent, when an entry), if any.
  uint64_t busy_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool busy_entry_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t busy_parent_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: started once the rest is built
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_ASYNC_INVALIDATOR_H_
