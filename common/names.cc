#include "common/names.h"

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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

absl::StatusOr<std::string> NormalizePath(absl::string_view path) {
  if (path.empty() || path[0] != '/') {
    return ErrnoStatus(EINVAL, absl::StrCat("\"", path, "\" is not an absolute path"));
  }
  if (path.size() >= kPathMax) return ErrnoStatus(ENAMETOOLONG, "path");
  std::vector<std::string> names;
  for (absl::string_view n : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    std::string name(n);
    if (!ValidateName(name).ok()) {
      return ErrnoStatus(
          EINVAL, absl::StrCat("\"", path, "\": \"", name, "\" is not a name a path may hold"));
    }
    names.push_back(std::move(name));
  }
  return "/" + absl::StrJoin(names, "/");
}

std::vector<std::string> PathNames(const std::string& normalized) {
  return absl::StrSplit(normalized, '/', absl::SkipEmpty());
}

}  // namespace grantfs
