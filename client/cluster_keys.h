// `grantfsctl init`: the cluster's keys in one directory (common/pki.h).
//
//   ca.crt, ca.key          the cluster's CA (ca.key signs; keep it where
//                           init runs, copy it nowhere else)
//   server.crt, .key        a certificate every server may use ("server:cluster")
//   node.crt, .key          one every mount may use ("node:default"; with
//                           --node_options, e.g. "root": not root-squashed)
//   admin.crt, .key         grantfsctl's ("admin:admin")
//   server-NAME.*, node-NAME.*, admin-NAME.*
//                           one per name given with --servers, --nodes, --admins
//   secret                  a random cluster secret (--secret_file)
// Keys and the secret are mode 0600. Run again on the same directory, it
// keeps what exists and adds what is missing, signed by the same CA.
#ifndef GRANTFS_CLIENT_CLUSTER_KEYS_H_
#define GRANTFS_CLIENT_CLUSTER_KEYS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace grantfs {

struct ClusterKeysOptions {
  std::string dir;
  std::vector<std::string> servers, nodes, admins;  // extra names
  // Validity of the certificates made now (the CA: ten years).
  absl::Duration valid_for = absl::Hours(24 * 825);
  // Options of the node certificates made now ("root", "ro", "anon":
  // common/transport.h CallerPolicy); "" = none: root squashed, read-write,
  // the node's uids trusted.
  std::string node_options;
};

// Makes what is missing in options.dir; returns the files it wrote.
absl::StatusOr<std::vector<std::string>> MakeClusterKeys(const ClusterKeysOptions& options);

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_CLUSTER_KEYS_H_
