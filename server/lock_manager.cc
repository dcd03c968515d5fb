#include "server/lock_manager.h"

#include <algorithm>
#include <cerrno>
#include <set>
#include <tuple>

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

void LockManager::ReleaseClient(uint64_t ino, uint64_t client_id) {
  absl::MutexLock l(&mu_);
  auto it = locks_.find(ino);
  if (it == locks_.end()) return;
  auto& v = it->second;
  v.erase(std::remove_if(v.begin(), v.end(),
                         [&](const FileLock& f) { return f.owner.client_id == client_id; }),
          v.end());
  if (v.empty()) locks_.erase(it);
}

std::vector<uint64_t> LockManager::InodesOf(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  std::vector<uint64_t> out;
  for (const auto& [ino, v] : locks_) {
    if (std::any_of(v.begin(), v.end(),
                    [&](const FileLock& f) { return f.owner.client_id == client_id; })) {
      out.push_back(ino);
    }
  }
  return out;
}

std::map<uint64_t, size_t> LockManager::LockedFilesByClient() {
  absl::MutexLock l(&mu_);
  std::map<uint64_t, size_t> out;
  for (const auto& [ino, v] : locks_) {
    std::set<uint64_t> clients;
    for (const FileLock& f : v) clients.insert(f.owner.client_id);
    for (uint64_t c : clients) ++out[c];
  }
  return out;
}

std::vector<FileLock> LockManager::Get(uint64_t ino) {
  std::vector<FileLock> out;
  {
    absl::MutexLock l(&mu_);
    auto it = locks_.find(ino);
    if (it != locks_.end()) out = it->second;
  }
  std::sort(out.begin(), out.end(), [](const FileLock& a, const FileLock& b) {
    return std::tie(a.flock, a.owner.client_id, a.owner.owner, a.start, a.end, a.type, a.pid) <
           std::tie(b.flock, b.owner.client_id, b.owner.owner, b.start, b.end, b.type, b.pid);
  });
  return out;
}

void LockManager::Restore(uint64_t ino, std::vector<FileLock> locks) {
  absl::MutexLock l(&mu_);
  if (locks.empty()) {
    locks_.erase(ino);
  } else {
    locks_[ino] = std::move(locks);
  }
}

size_t LockManager::CountLocks(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto it = locks_.find(ino);
  return it == locks_.end() ? 0 : it->second.size();
}

}  // namespace grantfs
