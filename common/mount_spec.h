// What a global mount may say (proto/cluster.proto GlobalMountRecord): the
// path every node mounts it at, the directory of the volume it shows, and
// the grantfs-mount -o options. The server checks what `grantfsctl mount -g`
// asks for; each node agent checks again what it is about to run.
#ifndef GRANTFS_COMMON_MOUNT_SPEC_H_
#define GRANTFS_COMMON_MOUNT_SPEC_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace grantfs {

inline constexpr size_t kMountPathMax = 1024;
inline constexpr size_t kMountOptionsMax = 1024;

// The normalized mount path ("/global//x/" -> "/global/x"), or
// INVALID_ARGUMENT saying why: not absolute, ".", "..", "/" itself, longer
// than kMountPathMax, or inside /proc, /sys, /dev or /run.
absl::StatusOr<std::string> NormalizeMountPath(absl::string_view path);

// The normalized directory of the volume ("" -> "/"), or INVALID_ARGUMENT.
absl::StatusOr<std::string> NormalizeMountSubdir(absl::string_view subdir);

// The options, each checked, joined again by commas ("ro,,leases=off" ->
// "ro,leases=off"), or INVALID_ARGUMENT: longer than kMountOptionsMax, a
// character outside [A-Za-z0-9_.=/:+-], or an option not on the allow-list
// (mount_spec.cc; docs/operations.md "Global mounts"): ro, rw, noatime,
// nodiratime, relatime, noexec, nosuid, nodev, sync, async, dirsync, and the
// grantfs-mount caching flags with a value (leases=, write_mode=, ...).
// suid, dev, fsname, subtype, allow_other and anything naming a file or an
// identity are refused: every node mounts what the table says as root.
absl::StatusOr<std::string> NormalizeMountOptions(absl::string_view options);

// Whether one of two normalized paths is the other or below it ("/a" and
// "/a/b": a mount inside a mount).
bool PathsNest(const std::string& a, const std::string& b);

// Whether normalized `path` is strictly below normalized `root` ("/global/x"
// below "/global"; "/global" itself and "/globalx" are not): where the node
// agents mount (--allowed_root), and what grantfsctl mount -g accepts.
bool StrictlyBelow(const std::string& path, const std::string& root);

}  // namespace grantfs

#endif  // GRANTFS_COMMON_MOUNT_SPEC_H_
