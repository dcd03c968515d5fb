// The cluster secret, read from a file (servers and clients alike); calls
// carry it and servers check it through common/transport.h.
#ifndef GRANTFS_COMMON_SECRET_H_
#define GRANTFS_COMMON_SECRET_H_

#include <string>

#include "absl/status/statusor.h"

namespace grantfs {

// The first line of `path` without trailing white space; "" for an empty
// `path` (no secret). NotFound/PermissionDenied when the file cannot be read,
// InvalidArgument when it is empty or longer than 255 bytes.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

}  // namespace grantfs

#endif  // GRANTFS_COMMON_SECRET_H_
