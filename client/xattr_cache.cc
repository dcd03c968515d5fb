#include "client/xattr_cache.h"

namespace grantfs {
namespace {
constexpr char kCapability[] = "security.capability";
}  // namespace

bool XattrCache::KnownAbsent(uint64_t ino, const std::string& name) {
  if (name != kCapability) return false;
  const absl::Time now = options_.clock->Now();
  absl::MutexLock l(&mu_);
  auto it = no_capability_.find(ino);
  return it != no_capability_.end() && now < it->second;
}

void XattrCache::NoteAbsent(uint64_t ino, const std::string& name) {
  if (name != kCapability) return;
  const absl::Time until = options_.clock->Now() + options_.ttl;
  absl::MutexLock l(&mu_);
  if (no_capability_.size() > options_.max_entries) no_capability_.clear();
  no_capability_[ino] = until;
}

void XattrCache::Forget(uint64_t ino) {
  absl::MutexLock l(&mu_);
  no_capability_.erase(ino);
}

size_t XattrCache::size() {
  absl::MutexLock l(&mu_);
  return no_capability_.size();
}

}  // namespace grantfs
