#include "client/statfs_cache.h"

#include <algorithm>

namespace grantfs {

void StatFsCache::Note(absl::Time sent, const proto::StatFsReply& counts) {
  if (max_age_ <= absl::ZeroDuration()) return;
  absl::MutexLock l(&mu_);
  if (counts_.has_value() && counts.counts_seq() != 0 &&
      counts.incarnation() == counts_->incarnation()) {
    // The same server numbered both: the larger is the newer, whichever
    // request was sent first (concurrent replies are filled in any order).
    // The kept ones came after the last change without counts (Changed()
    // drops them), so newer ones count it too, even when their request
    // was sent before it ended.
    if (counts.counts_seq() <= counts_->counts_seq()) return;
  } else if (sent <= changed_) {
    return;  // sent before (or as) a change without counts ended: may not count it
  } else if (sent < sent_) {
    return;  // older than the counts kept: a reply that overtook this one
  }
  counts_ = counts;
  // Their age: they are at least as new as the request of either.
  sent_ = std::max(sent_, sent);
}

void StatFsCache::Changed() {
  if (max_age_ <= absl::ZeroDuration()) return;
  const absl::Time now = clock_->Now();
  absl::MutexLock l(&mu_);
  changed_ = now;
  counts_.reset();
}

std::optional<proto::StatFsReply> StatFsCache::Get() {
  if (max_age_ <= absl::ZeroDuration()) return std::nullopt;
  const absl::Time now = clock_->Now();
  absl::MutexLock l(&mu_);
  if (!counts_.has_value() || now - sent_ >= max_age_) return std::nullopt;
  return counts_;
}

}  // namespace grantfs
