// The counts statfs answers with (space and inodes), kept for a short while.
//
// Programs call statfs often (dbench before most of its operations, `df`,
// shells, package managers), and each answer was a round trip. The server
// puts its counts in the replies that change them anyway (WriteReply,
// ApplyLogReply .space); a call that changes them without saying (a
// create, a remove, a truncate, a grant) makes the kept counts stale. So a
// statfs on the node that made a change sees it at once, as on a local
// file system; a change made on another node, or by the server's own
// maintenance (space freed after the last close of a removed file), shows
// within `max_age` (Lustre's client statfs cache has the same 1 s bound).
//
// Times are of when the request was sent: counts from a reply to a request
// sent before the last change that did not carry them are not kept. Of two
// replies from one server, the counts it numbered later are kept
// (StatFsReply.counts_seq): the request sent last is not always the one
// the server answered last.
//
// Thread-safe: one mutex, a leaf.
#ifndef GRANTFS_CLIENT_STATFS_CACHE_H_
#define GRANTFS_CLIENT_STATFS_CACHE_H_

#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/grantfs.pb.h"

namespace grantfs {

class StatFsCache {
 public:
  // `max_age` zero: nothing is kept, every statfs is a call. `clock` (not
  // owned) measures the ages.
  explicit StatFsCache(absl::Duration max_age = absl::ZeroDuration(),
                       Clock* clock = Clock::Monotonic())
      : max_age_(max_age), clock_(clock) {}

  absl::Time Now() const { return clock_->Now(); }
  // The server's counts in the reply to a request sent at `sent` (Now()).
  void Note(absl::Time sent, const proto::StatFsReply& counts) ABSL_LOCKS_EXCLUDED(mu_);
  // A call that may have changed the counts, without them in its reply,
  // was answered (or failed: it may have been applied).
  void Changed() ABSL_LOCKS_EXCLUDED(mu_);
  // The counts, when kept ones are younger than max_age and no change
  // came after the request that brought them.
  std::optional<proto::StatFsReply> Get() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const absl::Duration max_age_;
  Clock* const clock_;
  absl::Mutex mu_;
  std::optional<proto::StatFsReply> counts_ ABSL_GUARDED_BY(mu_);
  absl::Time sent_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();     // of counts_'s request
  absl::Time changed_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // the last Changed()
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_STATFS_CACHE_H_
