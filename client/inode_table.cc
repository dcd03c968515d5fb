#include "client/inode_table.h"

#include "glog/logging.h"

namespace grantfs {

void InodeTable::Ref(uint64_t ino) {
  absl::MutexLock l(&mu_);
  ++counts_[ino];
}

uint64_t InodeTable::Forget(uint64_t ino, uint64_t n) {
  absl::MutexLock l(&mu_);
  auto it = counts_.find(ino);
  if (it == counts_.end()) {
    LOG(WARNING) << "forget of unknown inode " << ino;
    return 0;
  }
  if (it->second < n) {
    LOG(WARNING) << "forget " << n << " of inode " << ino << " holding " << it->second;
    n = it->second;
  }
  it->second -= n;
  if (it->second > 0) return it->second;
  counts_.erase(it);
  return 0;
}

uint64_t InodeTable::Count(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto it = counts_.find(ino);
  return it == counts_.end() ? 0 : it->second;
}

size_t InodeTable::Size() {
  absl::MutexLock l(&mu_);
  return counts_.size();
}

}  // namespace grantfs
