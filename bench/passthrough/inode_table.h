// The inode table of grantfs-passthrough: each FUSE inode number the kernel
// holds stands for one object of the source tree, kept open as an O_PATH fd
// until the kernel forgets its last lookup. Counts are exact: every reply
// that hands the kernel an entry adds one, every forget takes its count away.
//
// Thread-safe: one mutex guards the whole table.
#ifndef GRANTFS_BENCH_PASSTHROUGH_INODE_TABLE_H_
#define GRANTFS_BENCH_PASSTHROUGH_INODE_TABLE_H_

#include <sys/stat.h>

#include <cstdint>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace grantfs {
namespace passthrough {

class InodeTable {
 public:
  // Takes ownership of `root_fd`, an O_PATH fd of the source directory: it
  // is inode 1 (FUSE_ROOT_ID) and stays open for the table's lifetime.
  explicit InodeTable(int root_fd);
  ~InodeTable();  // closes every fd
  InodeTable(const InodeTable&) = delete;
  InodeTable& operator=(const InodeTable&) = delete;

  // The O_PATH fd of `ino`, or -1 if the kernel holds no lookup of it. The
  // fd stays valid until the last Forget of `ino`, and the kernel forgets an
  // inode only after its last request on it has been answered.
  int Fd(uint64_t ino);
  // The same, and whether the object is a symlink.
  int Fd(uint64_t ino, bool* symlink);

  // Records one more kernel lookup of the object `fd` refers to (`st` is its
  // fstat) and returns its inode number. Takes ownership of `fd`: if the
  // object already has an inode, `fd` is closed and the older one kept.
  uint64_t Ref(int fd, const struct stat& st);

  // The kernel dropped `n` lookups of `ino`; the last one closes its fd.
  void Forget(uint64_t ino, uint64_t n);

 private:
  using SourceKey = std::pair<dev_t, ino_t>;
  struct Inode {
    int fd;
    uint64_t nlookup;
    SourceKey key;
    bool symlink;
  };

  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Inode> inodes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SourceKey, uint64_t> by_source_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ino_ ABSL_GUARDED_BY(mu_);
};

}  // namespace passthrough
}  // namespace grantfs

#endif  // GRANTFS_BENCH_PASSTHROUGH_INODE_TABLE_H_
