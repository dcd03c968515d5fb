// What this mount last told the kernel each name points to: (directory,
// name) -> inode, from every reply that hands the kernel an entry (lookup,
// create, mkdir, symlink, link, readdir) and moved by renames. The kernel
// removes and renames by name, through the entry it cached; another node
// may have replaced that name since. Sending the inode the kernel meant
// lets the server refuse (ESTALE: the kernel looks the name up again and
// retries) instead of removing another inode while the kernel marks the
// one it cached as dead (a live directory that lists empty on this node).
//
// Entries of an inode the kernel forgot entirely are dropped, so the size
// follows the kernel's cache. Thread-safe.
#ifndef GRANTFS_CLIENT_NAME_CACHE_H_
#define GRANTFS_CLIENT_NAME_CACHE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace grantfs {

class NameCache {
 public:
  // The kernel was told `name` in `parent` is `ino`.
  void Set(uint64_t parent, const std::string& name, uint64_t ino);
  // The inode the kernel was last told `name` is; 0 when unknown.
  uint64_t Get(uint64_t parent, const std::string& name);
  // The name was removed.
  void Erase(uint64_t parent, const std::string& name);
  // rename(2): what `name` pointed to is now `new_name` (what that pointed
  // to is gone); with `exchange`, the two swap.
  void Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
              const std::string& new_name, bool exchange);
  // The kernel holds no reference to `ino` any more.
  void ForgetInode(uint64_t ino);
  size_t Size();

 private:
  using Key = std::pair<uint64_t, std::string>;
  void EraseLocked(const Key& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetLocked(const Key& key, uint64_t ino) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;  // a leaf (lock order: filesystem.h)
  absl::flat_hash_map<Key, uint64_t> inode_of_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, absl::flat_hash_set<Key>> names_of_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_NAME_CACHE_H_
