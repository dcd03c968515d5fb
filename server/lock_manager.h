// Cluster-wide file locks: POSIX record locks (fcntl) and BSD flock locks,
// held by (client session, lock owner) pairs. The two kinds never conflict
// with each other, as on Linux. This table lives in memory; Volume keeps a
// durable, replicated copy of each inode's locks in the metadata store and
// puts it back with Restore() when a server starts or takes over. The end of
// a client's session releases its locks.
//
// Thread-safe.
#ifndef GRANTFS_SERVER_LOCK_MANAGER_H_
#define GRANTFS_SERVER_LOCK_MANAGER_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace grantfs {

struct LockOwner {
  uint64_t client_id = 0;
  uint64_t owner = 0;  // the client's lock owner (fuse lock_owner)
  bool operator==(const LockOwner& o) const { return client_id == o.client_id && owner == o.owner; }
};

struct FileLock {
  enum Type { kRead = 0, kWrite = 1, kUnlock = 2 };  // F_RDLCK, F_WRLCK, F_UNLCK
  Type type = kUnlock;
  uint64_t start = 0;
  uint64_t end = UINT64_MAX;  // inclusive
  uint32_t pid = 0;
  LockOwner owner;
  bool flock = false;  // BSD flock rather than a POSIX record lock
  bool operator==(const FileLock& o) const {
    return type == o.type && start == o.start && end == o.end && pid == o.pid && owner == o.owner &&
           flock == o.flock;
  }
};

class LockManager {
 public:
  // The first lock that conflicts with `want`, or one of type kUnlock.
  FileLock Test(uint64_t ino, const FileLock& want);

  // Takes, converts or (type kUnlock) releases `want` for its owner.
  // Never blocks: EAGAIN when another owner's lock conflicts, EINVAL for a
  // bad range or type.
  absl::Status Set(uint64_t ino, const FileLock& want);

  // Releases every lock of `owner` on `ino` of the given kind.
  void ReleaseOwner(uint64_t ino, const LockOwner& owner, bool flock);

  // Releases every lock the client holds on `ino` (its session ended).
  void ReleaseClient(uint64_t ino, uint64_t client_id);
  // The inodes on which the client holds locks.
  std::vector<uint64_t> InodesOf(uint64_t client_id);
  // For every client that holds locks: on how many files (one pass).
  std::map<uint64_t, size_t> LockedFilesByClient();

  // The locks held on `ino`, in a fixed order (so two lists compare equal
  // when they hold the same locks).
  std::vector<FileLock> Get(uint64_t ino);
  // Replaces the locks held on `ino` (a copy kept elsewhere).
  void Restore(uint64_t ino, std::vector<FileLock> locks);

  // Locks held on `ino`, for tests and status.
  size_t CountLocks(uint64_t ino);

 private:
  static bool Conflicts(const FileLock& a, const FileLock& b);
  // Removes `owner`'s coverage of [start, end] in `locks`. REQUIRES: mu_.
  static void Carve(std::vector<FileLock>* locks, const FileLock& range);

  absl::Mutex mu_;
  std::map<uint64_t, std::vector<FileLock>> locks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_LOCK_MANAGER_H_
