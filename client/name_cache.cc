#include "client/name_cache.h"

namespace grantfs {

void NameCache::SetLocked(const Key& key, uint64_t ino) {
  auto it = inode_of_.find(key);
  if (it != inode_of_.end() && it->second == ino) return;  // (a warm readdir: all of them)
  EraseLocked(key);
  inode_of_[key] = ino;
  names_of_[ino].insert(key);
}

void NameCache::EraseLocked(const Key& key) {
  auto it = inode_of_.find(key);
  if (it == inode_of_.end()) return;
  auto names = names_of_.find(it->second);
  if (names != names_of_.end()) {
    names->second.erase(key);
    if (names->second.empty()) names_of_.erase(names);
  }
  inode_of_.erase(it);
}

void NameCache::Set(uint64_t parent, const std::string& name, uint64_t ino) {
  absl::MutexLock l(&mu_);
  SetLocked({parent, name}, ino);
}

uint64_t NameCache::Get(uint64_t parent, const std::string& name) {
  absl::MutexLock l(&mu_);
  auto it = inode_of_.find(Key{parent, name});
  return it == inode_of_.end() ? 0 : it->second;
}

void NameCache::Erase(uint64_t parent, const std::string& name) {
  absl::MutexLock l(&mu_);
  EraseLocked({parent, name});
}

void NameCache::Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                       const std::string& new_name, bool exchange) {
  absl::MutexLock l(&mu_);
  const Key from{parent, name}, to{new_parent, new_name};
  auto a = inode_of_.find(from);
  auto b = inode_of_.find(to);
  const uint64_t src = a == inode_of_.end() ? 0 : a->second;
  const uint64_t dst = b == inode_of_.end() ? 0 : b->second;
  EraseLocked(from);
  EraseLocked(to);
  if (src != 0) SetLocked(to, src);
  if (exchange && dst != 0) SetLocked(from, dst);
}

void NameCache::ForgetInode(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto names = names_of_.find(ino);
  if (names == names_of_.end()) return;
  for (const Key& key : names->second) inode_of_.erase(key);
  names_of_.erase(names);
}

size_t NameCache::Size() {
  absl::MutexLock l(&mu_);
  return inode_of_.size();
}

}  // namespace grantfs
