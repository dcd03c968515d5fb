// The inode table of grantfs-passthrough: each FUSE inode number the kernel
// holds stands for one object of the source tree, from the first lookup
// until the kernel forgets its last one. Counts are exact: every reply that
// hands the kernel an entry adds one, every forget takes its count away.
//
// An object is reached through an O_PATH fd. The table keeps at most
// `max_open` of them (a tree larger than the process's open-files limit,
// e.g. 20,000 files in a container that caps it at 20,000, must still
// work): past that the least recently used are closed, and reopened when
// needed from the object's file handle (name_to_handle_at /
// open_by_handle_at, which needs CAP_DAC_READ_SEARCH). An fd in use is
// pinned (Pin) and never closed under its user. An object whose file system
// gives no handles keeps its fd open.
//
// Thread-safe: one mutex guards the whole table.
#ifndef GRANTFS_BENCH_PASSTHROUGH_INODE_TABLE_H_
#define GRANTFS_BENCH_PASSTHROUGH_INODE_TABLE_H_

#include <sys/stat.h>

#include <cstdint>
#include <deque>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace grantfs {
namespace passthrough {

class InodeTable {
 public:
  // An inode's O_PATH fd, open while the Pin lives.
  class Pin {
   public:
    Pin() = default;
    Pin(Pin&& other) noexcept;
    Pin& operator=(Pin&&) = delete;
    Pin(const Pin&) = delete;
    ~Pin();
    // -1: the kernel holds no lookup of the inode, or it could not be
    // reopened (the ops answer ESTALE).
    int fd() const { return fd_; }
    bool symlink() const { return symlink_; }

   private:
    friend class InodeTable;
    InodeTable* table_ = nullptr;
    uint64_t ino_ = 0;
    int fd_ = -1;
    bool symlink_ = false;
  };

  // Takes ownership of `root_fd`, an O_PATH fd of the source directory: it
  // is inode 1 (FUSE_ROOT_ID) and stays open for the table's lifetime.
  explicit InodeTable(int root_fd, size_t max_open = 8192);
  ~InodeTable();  // closes every fd
  InodeTable(const InodeTable&) = delete;
  InodeTable& operator=(const InodeTable&) = delete;

  // The inode's fd, pinned; reopened if it was closed.
  Pin Get(uint64_t ino);

  // Records one more kernel lookup of the object `fd` refers to (`st` is its
  // fstat) and returns its inode number. Takes ownership of `fd`: if the
  // object already has an inode, `fd` is closed and the older one kept.
  uint64_t Ref(int fd, const struct stat& st);

  // The kernel dropped `n` lookups of `ino`; the last one closes its fd.
  void Forget(uint64_t ino, uint64_t n);

  // O_PATH fds open now (tests).
  size_t open_fds();

 private:
  using SourceKey = std::pair<dev_t, ino_t>;
  struct Inode {
    int fd = -1;  // -1: closed, reopen from `handle`
    uint64_t nlookup = 0;
    SourceKey key;
    bool symlink = false;
    std::string handle;  // a struct file_handle; empty: none, the fd stays open
    int pins = 0;
    uint64_t used = 0;  // stamp of the last Get, for the LRU
  };

  void Unpin(uint64_t ino, int fd);
  // Closes least recently used unpinned fds while more than max_open_ are open.
  void TrimLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TouchLocked(uint64_t ino, Inode& inode) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int mount_fd_;  // the source directory opened for reading; -1: no reopening
  const size_t max_open_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Inode> inodes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SourceKey, uint64_t> by_source_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ino_ ABSL_GUARDED_BY(mu_);
  size_t open_ ABSL_GUARDED_BY(mu_) = 0;  // fds open, the root's included
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  // (ino, stamp) in order of use; an entry whose stamp is not the inode's
  // `used` any more is stale and skipped.
  std::deque<std::pair<uint64_t, uint64_t>> lru_ ABSL_GUARDED_BY(mu_);
};

}  // namespace passthrough
}  // namespace grantfs

#endif  // GRANTFS_BENCH_PASSTHROUGH_INODE_TABLE_H_
