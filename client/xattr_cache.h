// What the mount knows of xattrs without asking: the inodes that have no
// security.capability, for a short while. The kernel asks for that xattr
// before every write() (file_remove_privs): without this cache every write
// would cost a round trip. Only the absence of that one name is cached;
// every other name, and every value, is asked of the server.
//
// Thread-safe: one mutex, never held across anything but the map.
#ifndef GRANTFS_CLIENT_XATTR_CACHE_H_
#define GRANTFS_CLIENT_XATTR_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace grantfs {

struct XattrCacheOptions {
  // How long a known absence is trusted without asking; changes made
  // elsewhere also drop it at once (Forget, from the invalidation stream).
  absl::Duration ttl = absl::Seconds(1);
  // Most inodes remembered; when full, everything is forgotten (bounded
  // memory, and the next write of each inode asks once again).
  size_t max_entries = 100000;
  // Not owned; the default is never deleted.
  Clock* clock = Clock::Real();
};

class XattrCache {
 public:
  explicit XattrCache(const XattrCacheOptions& options = XattrCacheOptions()) : options_(options) {}

  // True when `ino` is known (within the ttl) to have no xattr `name`.
  bool KnownAbsent(uint64_t ino, const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // The server said `ino` has no xattr `name` (ENODATA).
  void NoteAbsent(uint64_t ino, const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // `ino`'s xattrs changed (here or elsewhere): nothing known of them holds.
  void Forget(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);

  size_t size() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const XattrCacheOptions options_;
  absl::Mutex mu_;  // a leaf: nothing else is taken while holding it
  // Inodes known to have no security.capability, until the time given.
  absl::flat_hash_map<uint64_t, absl::Time> no_capability_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_XATTR_CACHE_H_
