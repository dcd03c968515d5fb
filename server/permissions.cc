#include "server/permissions.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "common/errno_status.h"

namespace grantfs {

bool Caller::InGroup(uint32_t g) const {
  return gid == g || std::find(groups.begin(), groups.end(), g) != groups.end();
}

absl::Status CheckAccess(const proto::InodeRecord& inode, const Caller& caller, int mask) {
  const uint32_t mode = inode.mode();
  if (caller.IsRoot()) {
    if ((mask & kMayExec) && !S_ISDIR(mode) && (mode & 0111) == 0) {
      return ErrnoStatus(EACCES, "no execute bit");
    }
    return absl::OkStatus();
  }
  int granted;
  if (caller.uid == inode.uid()) {
    granted = (mode >> 6) & 7;
  } else if (caller.InGroup(inode.gid())) {
    granted = (mode >> 3) & 7;
  } else {
    granted = mode & 7;
  }
  if ((granted & mask) != mask) return ErrnoStatus(EACCES, "permission");
  return absl::OkStatus();
}

absl::Status CheckSticky(const proto::InodeRecord& dir, const proto::InodeRecord& victim,
                         const Caller& caller) {
  if (!(dir.mode() & S_ISVTX) || caller.IsRoot()) return absl::OkStatus();
  if (caller.uid == dir.uid() || caller.uid == victim.uid()) return absl::OkStatus();
  return ErrnoStatus(EPERM, "sticky directory");
}

absl::Status CheckOwner(const proto::InodeRecord& inode, const Caller& caller) {
  if (caller.IsRoot() || caller.uid == inode.uid()) return absl::OkStatus();
  return ErrnoStatus(EPERM, "not the owner");
}

bool IsSetIdKill(uint32_t old_mode, uint32_t new_mode) {
  constexpr uint32_t kSetId = S_ISUID | S_ISGID;
  old_mode &= 07777;
  new_mode &= 07777;
  const uint32_t cleared = old_mode & ~new_mode;
  return cleared != 0 && (cleared & ~kSetId) == 0 && (new_mode & ~old_mode) == 0;
}

}  // namespace grantfs
