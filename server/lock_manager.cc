#include "server/lock_manager.h"

#include <algorithm>
#include <cerrno>

#include "common/errno_status.h"

namespace grantfs {

bool LockManager::Conflicts(const FileLock& a, const FileLock& b) {
  if (a.flock != b.flock) return false;
  if (a.owner == b.owner) return false;
  if (a.type != FileLock::kWrite && b.type != FileLock::kWrite) return false;
  return a.start <= b.end && b.start <= a.end;
}

void LockManager::Carve(std::vector<FileLock>* locks, const FileLock& range) {
  std::vector<FileLock> out;
  for (const FileLock& l : *locks) {
    if (!(l.owner == range.owner) || l.flock != range.flock || l.end < range.start ||
        range.end < l.start) {
      out.push_back(l);
      continue;
    }
    if (l.start < range.start) {  // the part before the range survives
      FileLock before = l;
      before.end = range.start - 1;
      out.push_back(before);
    }
    if (l.end > range.end) {  // and the part after it
      FileLock after = l;
      after.start = range.end + 1;
      out.push_back(after);
    }
  }
  locks->swap(out);
}

FileLock LockManager::Test(uint64_t ino, const FileLock& want) {
  absl::MutexLock l(&mu_);
  auto it = locks_.find(ino);
  if (it != locks_.end()) {
    for (const FileLock& held : it->second) {
      if (Conflicts(held, want)) return held;
    }
  }
  FileLock none = want;
  none.type = FileLock::kUnlock;
  return none;
}

absl::Status LockManager::Set(uint64_t ino, const FileLock& want) {
  if (want.start > want.end) return ErrnoStatus(EINVAL, "lock range");
  if (want.type != FileLock::kRead && want.type != FileLock::kWrite &&
      want.type != FileLock::kUnlock) {
    return ErrnoStatus(EINVAL, "lock type");
  }
  absl::MutexLock l(&mu_);
  std::vector<FileLock>& held = locks_[ino];
  if (want.type != FileLock::kUnlock) {
    for (const FileLock& h : held) {
      if (Conflicts(h, want)) return ErrnoStatus(EAGAIN, "lock held elsewhere");
    }
  }
  Carve(&held, want);
  if (want.type != FileLock::kUnlock) held.push_back(want);
  if (held.empty()) locks_.erase(ino);
  return absl::OkStatus();
}

void LockManager::ReleaseOwner(uint64_t ino, const LockOwner& owner, bool flock) {
  FileLock all;
  all.owner = owner;
  all.flock = flock;
  absl::MutexLock l(&mu_);
  auto it = locks_.find(ino);
  if (it == locks_.end()) return;
  Carve(&it->second, all);
  if (it->second.empty()) locks_.erase(it);
}

void LockManager::ReleaseClient(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  for (auto it = locks_.begin(); it != locks_.end();) {
    auto& v = it->second;
    v.erase(std::remove_if(v.begin(), v.end(),
                           [&](const FileLock& f) { return f.owner.client_id == client_id; }),
            v.end());
    it = v.empty() ? locks_.erase(it) : std::next(it);
  }
}

size_t LockManager::CountLocks(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto it = locks_.find(ino);
  return it == locks_.end() ? 0 : it->second.size();
}

}  // namespace grantfs
