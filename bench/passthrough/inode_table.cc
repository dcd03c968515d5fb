#include "bench/passthrough/inode_table.h"

#include <unistd.h>

#include <algorithm>
#include <limits>

namespace grantfs {
namespace passthrough {
namespace {
constexpr uint64_t kRootIno = 1;  // FUSE_ROOT_ID
}  // namespace

InodeTable::InodeTable(int root_fd) : next_ino_(kRootIno + 1) {
  struct stat st = {};
  fstat(root_fd, &st);
  // The kernel never forgets the root: give it a count no forget reaches.
  const SourceKey key{st.st_dev, st.st_ino};
  inodes_[kRootIno] = Inode{root_fd, std::numeric_limits<uint64_t>::max() / 2, key, false};
  by_source_[key] = kRootIno;
}

InodeTable::~InodeTable() {
  absl::MutexLock l(&mu_);
  for (auto& [ino, inode] : inodes_) close(inode.fd);
}

int InodeTable::Fd(uint64_t ino) {
  bool symlink;
  return Fd(ino, &symlink);
}

int InodeTable::Fd(uint64_t ino, bool* symlink) {
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return -1;
  *symlink = it->second.symlink;
  return it->second.fd;
}

uint64_t InodeTable::Ref(int fd, const struct stat& st) {
  const SourceKey key{st.st_dev, st.st_ino};
  absl::MutexLock l(&mu_);
  auto it = by_source_.find(key);
  if (it != by_source_.end()) {
    // Known object (a second name, or a lookup racing the last forget that
    // has not come yet): one fd per object is enough.
    close(fd);
    ++inodes_[it->second].nlookup;
    return it->second;
  }
  const uint64_t ino = next_ino_++;
  inodes_[ino] = Inode{fd, 1, key, S_ISLNK(st.st_mode)};
  by_source_[key] = ino;
  return ino;
}

void InodeTable::Forget(uint64_t ino, uint64_t n) {
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return;
  Inode& inode = it->second;
  inode.nlookup -= std::min(n, inode.nlookup);
  if (inode.nlookup > 0) return;
  close(inode.fd);
  by_source_.erase(inode.key);
  inodes_.erase(it);
}

}  // namespace passthrough
}  // namespace grantfs
