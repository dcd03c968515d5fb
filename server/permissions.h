// POSIX permission rules, checked on the server for every change so that a
// client's stale attribute cache can never let a caller do what the current
// attributes forbid.
#ifndef GRANTFS_SERVER_PERMISSIONS_H_
#define GRANTFS_SERVER_PERMISSIONS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "proto/store.pb.h"

namespace grantfs {

// Who is asking. Thread-compatible value type.
struct Caller {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;  // supplementary groups

  bool IsRoot() const { return uid == 0; }
  bool InGroup(uint32_t g) const;
};

inline constexpr int kMayRead = 4;
inline constexpr int kMayWrite = 2;
inline constexpr int kMayExec = 1;

// OK when `caller` has all of `mask` (kMay*) on `inode`, else EACCES.
// Root passes except for exec on a file with no exec bit at all.
absl::Status CheckAccess(const proto::InodeRecord& inode, const Caller& caller, int mask);

// The sticky-bit rule for removing or renaming an entry of `dir` that names
// `victim`: OK, or EPERM when `dir` is sticky and the caller owns neither.
absl::Status CheckSticky(const proto::InodeRecord& dir, const proto::InodeRecord& victim,
                         const Caller& caller);

// OK when the caller is the owner or root, else EPERM (chmod, utimes with
// explicit times, xattrs on trusted namespaces).
absl::Status CheckOwner(const proto::InodeRecord& inode, const Caller& caller);

// True when changing permission bits `old_mode` to `new_mode` only clears
// set-user-ID and/or set-group-ID (at least one of them): what the kernel
// asks of a FUSE file system when a non-owner writes or truncates a set-id
// file. Both are 07777-or-wider modes; the file type bits are ignored.
bool IsSetIdKill(uint32_t old_mode, uint32_t new_mode);

}  // namespace grantfs

#endif  // GRANTFS_SERVER_PERMISSIONS_H_
