// The kernel's references to inodes: how many lookups the kernel holds on
// each inode number (every reply that hands it an entry adds one, every
// forget takes its count away), by the server's inode number. GrantFS uses
// those as FUSE node ids (but for the mount's root, which the kernel holds
// without a lookup and the table does not count: FuseAdapter::ServerIno),
// so the table only keeps the exact counts: they say which inodes the
// kernel still caches, e.g. for invalidations.
//
// Thread-safe.
#ifndef GRANTFS_CLIENT_INODE_TABLE_H_
#define GRANTFS_CLIENT_INODE_TABLE_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace grantfs {

class InodeTable {
 public:
  // The kernel got one more reference to `ino`.
  void Ref(uint64_t ino);
  // The kernel dropped `n` references; returns those left.
  uint64_t Forget(uint64_t ino, uint64_t n);
  uint64_t Count(uint64_t ino);
  size_t Size();

 private:
  absl::Mutex mu_;  // a leaf (lock order: filesystem.h)
  absl::flat_hash_map<uint64_t, uint64_t> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_INODE_TABLE_H_
