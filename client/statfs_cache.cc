#include "client/statfs_cache.h"

namespace grantfs {

void StatFsCache::Note(absl::Time sent, const proto::StatFsReply& counts) {
  if (max_age_ <= absl::ZeroDuration()) return;
  absl::MutexLock l(&mu_);
  // Sent before (or as) a change that did not bring counts ended: may not
  // count it. Or
  // older than the counts kept: a reply that overtook this one.
  if (sent <= changed_ || sent < sent_) return;
  counts_ = counts;
  sent_ = sent;
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
