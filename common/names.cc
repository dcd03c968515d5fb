#include "common/names.h"

#include <cerrno>

#include "common/errno_status.h"

namespace grantfs {

absl::Status ValidateName(const std::string& name) {
  if (name.empty() || name == "." || name == "..") {
    return ErrnoStatus(EINVAL, "reserved or empty name");
  }
  if (name.size() > kNameMax) return ErrnoStatus(ENAMETOOLONG, "name");
  if (name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
    return ErrnoStatus(EINVAL, "name contains '/' or NUL");
  }
  return absl::OkStatus();
}

absl::Status ValidateSymlinkTarget(const std::string& target) {
  if (target.empty()) return ErrnoStatus(ENOENT, "empty symlink target");
  if (target.size() >= kPathMax) return ErrnoStatus(ENAMETOOLONG, "symlink target");
  if (target.find('\0') != std::string::npos) {
    return ErrnoStatus(EINVAL, "symlink target contains NUL");
  }
  return absl::OkStatus();
}

absl::Status ValidateXattr(const std::string& name, size_t value_size) {
  if (name.empty() || name.find('\0') != std::string::npos) {
    return ErrnoStatus(EINVAL, "xattr name");
  }
  if (name.size() > kXattrNameMax) return ErrnoStatus(ERANGE, "xattr name");
  if (value_size > kXattrValueMax) return ErrnoStatus(E2BIG, "xattr value");
  // Linux namespaces; "system." ones (ACLs) are not stored by GrantFS.
  for (const char* ns : {"user.", "trusted.", "security."}) {
    if (name.rfind(ns, 0) == 0 && name.size() > std::string(ns).size()) {
      return absl::OkStatus();
    }
  }
  return ErrnoStatus(EOPNOTSUPP, "xattr namespace");
}

absl::Status ValidateRange(uint64_t offset, uint64_t length) {
  if (offset > kMaxFileSize || length > kMaxFileSize - offset) {
    return ErrnoStatus(EFBIG, "beyond the maximum file size");
  }
  return absl::OkStatus();
}

}  // namespace grantfs
