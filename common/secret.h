// The cluster secret, read from a file (servers and clients alike).
#ifndef GRANTFS_COMMON_SECRET_H_
#define GRANTFS_COMMON_SECRET_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/statusor.h"

namespace grantfs {

// The first line of `path` without trailing white space; "" for an empty
// `path` (no secret). NotFound/PermissionDenied when the file cannot be read,
// InvalidArgument when it is empty or longer than 255 bytes.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

// Every GrantFS call carries the secret as metadata "x-grantfs-secret".
// CheckSecret: OK when `secret` is "" or the call carries it; otherwise
// UNAUTHENTICATED, logged with `who` and the caller's address.
grpc::Status CheckSecret(const grpc::ServerContext& ctx, const std::string& secret,
                         const char* who);
// Adds `secret` (if not "") to an outgoing call.
void AddSecret(grpc::ClientContext* ctx, const std::string& secret);

}  // namespace grantfs

#endif  // GRANTFS_COMMON_SECRET_H_
