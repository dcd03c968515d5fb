// The flags every GrantFS program has for its Transport (common/transport.h):
//   --tls_dir=DIR      ca.crt and IDENTITY.crt/.key (made by `grantfsctl init`);
//                      default $GRANTFS_TLS_DIR, else /etc/grantfs
//   --identity=NAME    which certificate in DIR (default: the program's own,
//                      "server", "node" or "admin")
//   --insecure         no TLS, no authentication: a warning at every start
//                      (also GRANTFS_INSECURE=1 in the environment, for
//                      benchmarks that compare; warned the same)
//   --secret_file=F    the cluster secret, also required of callers
#ifndef GRANTFS_COMMON_TRANSPORT_FLAGS_H_
#define GRANTFS_COMMON_TRANSPORT_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/transport.h"

namespace grantfs {

// The Transport the flags ask for. `default_identity` when --identity is
// not given; `program` names the program in the --insecure warning.
// FAILED_PRECONDITION (with what to do) when there is no TLS material and
// no --insecure.
absl::StatusOr<Transport> TransportFromFlags(const std::string& default_identity,
                                             const char* program);

// The directory --tls_dir (or its default) names.
std::string TlsDirFromFlags();

}  // namespace grantfs

#endif  // GRANTFS_COMMON_TRANSPORT_FLAGS_H_
