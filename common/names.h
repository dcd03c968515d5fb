// Validation of names and sizes: the server checks what arrives from
// clients, and a mount answers what the server would without asking.
#ifndef GRANTFS_COMMON_NAMES_H_
#define GRANTFS_COMMON_NAMES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace grantfs {

inline constexpr size_t kNameMax = 255;
inline constexpr size_t kPathMax = 4096;  // symlink targets
inline constexpr size_t kXattrNameMax = 255;
inline constexpr size_t kXattrValueMax = 64 * 1024;
inline constexpr uint64_t kMaxFileSize = uint64_t{1} << 40;  // 1 TiB

// OK, or EINVAL for "", ".", "..", a '/' or NUL inside; ENAMETOOLONG past 255 bytes.
absl::Status ValidateName(const std::string& name);

// OK, or ENOENT for an empty target, ENAMETOOLONG past 4095 bytes, EINVAL for NUL.
absl::Status ValidateSymlinkTarget(const std::string& target);

// OK, or ERANGE / EINVAL / E2BIG / EOPNOTSUPP for a bad xattr name or value.
absl::Status ValidateXattr(const std::string& name, size_t value_size);

// OK when [offset, offset + length) stays within kMaxFileSize, else EFBIG.
absl::Status ValidateRange(uint64_t offset, uint64_t length);

// A path inside the file system (a mount's root, a node's subtree):
// absolute, each name valid (ValidateName: no "." or ".."), repeated and
// trailing slashes dropped: "/a//b/" -> "/a/b", "/" -> "/". EINVAL (with
// why) otherwise.
absl::StatusOr<std::string> NormalizePath(absl::string_view path);

// The names of a normalized path, from the root: "/a/b" -> {"a", "b"};
// "/" -> {}.
std::vector<std::string> PathNames(const std::string& normalized);

}  // namespace grantfs

#endif  // GRANTFS_COMMON_NAMES_H_
