#include "bench/passthrough/inode_table.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "glog/logging.h"

namespace grantfs {
namespace passthrough {
namespace {
constexpr uint64_t kRootIno = 1;  // FUSE_ROOT_ID

// The file handle of what the O_PATH `fd` refers to, as bytes; empty when
// its file system gives none.
std::string HandleOf(int fd) {
  std::vector<char> buf(sizeof(struct file_handle) + MAX_HANDLE_SZ);
  auto* fh = reinterpret_cast<struct file_handle*>(buf.data());
  fh->handle_bytes = MAX_HANDLE_SZ;
  int mount_id = 0;
  if (name_to_handle_at(fd, "", fh, &mount_id, AT_EMPTY_PATH) != 0) return "";
  return std::string(buf.data(), sizeof(struct file_handle) + fh->handle_bytes);
}
}  // namespace

InodeTable::Pin::Pin(Pin&& other) noexcept
    : table_(other.table_), ino_(other.ino_), fd_(other.fd_), symlink_(other.symlink_) {
  other.table_ = nullptr;
}

InodeTable::Pin::~Pin() {
  if (table_ != nullptr) table_->Unpin(ino_, fd_);
}

InodeTable::InodeTable(int root_fd, size_t max_open)
    :  // open_by_handle_at needs a real fd of the mount, not an O_PATH one.
      mount_fd_(openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)),
      max_open_(std::max<size_t>(max_open, 16)),
      next_ino_(kRootIno + 1) {
  struct stat st = {};
  fstat(root_fd, &st);
  // The kernel never forgets the root: give it a count no forget reaches.
  const SourceKey key{st.st_dev, st.st_ino};
  Inode root;
  root.fd = root_fd;
  root.nlookup = std::numeric_limits<uint64_t>::max() / 2;
  root.key = key;
  root.pins = 1;  // never closed by the LRU
  absl::MutexLock l(&mu_);
  inodes_[kRootIno] = root;
  by_source_[key] = kRootIno;
  open_ = 1;
}

InodeTable::~InodeTable() {
  absl::MutexLock l(&mu_);
  for (auto& [ino, inode] : inodes_) {
    if (inode.fd >= 0) close(inode.fd);
  }
  if (mount_fd_ >= 0) close(mount_fd_);
}

void InodeTable::TouchLocked(uint64_t ino, Inode& inode) {
  inode.used = ++clock_;
  lru_.emplace_back(ino, inode.used);
  if (lru_.size() > 4 * inodes_.size() + 64) {  // mostly stale entries: rebuild
    std::vector<std::pair<uint64_t, uint64_t>> live;
    for (const auto& [i, in] : inodes_) {
      if (in.fd >= 0) live.emplace_back(in.used, i);
    }
    std::sort(live.begin(), live.end());
    lru_.clear();
    for (const auto& [used, i] : live) lru_.emplace_back(i, used);
  }
}

void InodeTable::TrimLocked() {
  while (open_ > max_open_ && !lru_.empty()) {
    const auto [ino, stamp] = lru_.front();
    lru_.pop_front();
    auto it = inodes_.find(ino);
    if (it == inodes_.end()) continue;
    Inode& inode = it->second;
    if (inode.used != stamp || inode.fd < 0 || inode.pins > 0 || inode.handle.empty()) continue;
    close(inode.fd);
    inode.fd = -1;
    --open_;
  }
}

InodeTable::Pin InodeTable::Get(uint64_t ino) {
  Pin pin;
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return pin;
  Inode& inode = it->second;
  if (inode.fd < 0) {
    // (Under the lock: a reopen is one syscall, and only past max_open.)
    std::string h = inode.handle;
    inode.fd = open_by_handle_at(mount_fd_, reinterpret_cast<struct file_handle*>(h.data()),
                                 O_PATH | O_CLOEXEC);
    if (inode.fd < 0) {  // gone from the source (the ops answer ESTALE)
      PLOG(WARNING) << "reopening inode " << ino << " by its file handle";
      return pin;
    }
    ++open_;
  }
  ++inode.pins;
  TouchLocked(ino, inode);
  pin.table_ = this;
  pin.ino_ = ino;
  pin.fd_ = inode.fd;
  pin.symlink_ = inode.symlink;
  TrimLocked();
  return pin;
}

void InodeTable::Unpin(uint64_t ino, int fd) {
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end() || it->second.fd != fd) return;
  --it->second.pins;
  TrimLocked();
}

uint64_t InodeTable::Ref(int fd, const struct stat& st) {
  const SourceKey key{st.st_dev, st.st_ino};
  std::string handle = HandleOf(fd);
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
  Inode& inode = inodes_[ino];
  inode.fd = fd;
  inode.nlookup = 1;
  inode.key = key;
  inode.symlink = S_ISLNK(st.st_mode);
  if (mount_fd_ >= 0) inode.handle = std::move(handle);  // else never closed
  ++open_;
  by_source_[key] = ino;
  TouchLocked(ino, inode);
  TrimLocked();
  return ino;
}

void InodeTable::Forget(uint64_t ino, uint64_t n) {
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return;
  Inode& inode = it->second;
  inode.nlookup -= std::min(n, inode.nlookup);
  // The kernel forgets an inode only after its last request was answered:
  // nothing pins it any more.
  if (inode.nlookup > 0) return;
  if (inode.fd >= 0) {
    close(inode.fd);
    --open_;
  }
  by_source_.erase(inode.key);
  inodes_.erase(it);
}

size_t InodeTable::open_fds() {
  absl::MutexLock l(&mu_);
  return open_;
}

}  // namespace passthrough
}  // namespace grantfs
