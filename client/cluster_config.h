// The cluster's configuration file (/etc/grantfs/cluster.conf by default):
// what grantfsctl and the node agent (grantfs-node) would otherwise need as
// flags. docs/operations.md, "The cluster's configuration file".
//
//   # comments and blank lines are ignored
//   servers = 10.0.0.1:7420,10.0.0.2:7420
//   tls_dir = /etc/grantfs
//   node = node1
//   secret_file = /etc/grantfs/secret     (optional)
//   insecure = false                      (optional)
//   allowed_root = /global                (optional: where global mounts
//                                          may be; agent and grantfsctl)
//
// Precedence, highest first: the command line's flags; for tls_dir,
// $GRANTFS_TLS_DIR; the file; the flags' defaults. A missing default file
// is no error; a missing --config file, an unknown key, a key given twice
// or a line without '=' is, naming the file and line.
#ifndef GRANTFS_CLIENT_CLUSTER_CONFIG_H_
#define GRANTFS_CLIENT_CLUSTER_CONFIG_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace grantfs {

inline constexpr char kDefaultClusterConfig[] = "/etc/grantfs/cluster.conf";

struct ClusterConfig {
  std::string servers;  // "" when not given
  std::string tls_dir;
  std::string node;
  std::string secret_file;
  std::optional<bool> insecure;
  std::string allowed_root;  // "" when not given
};

// Parses the text of a configuration file; `path` names it in errors.
// INVALID_ARGUMENT "PATH:LINE: why" for a bad line.
absl::StatusOr<ClusterConfig> ParseClusterConfig(absl::string_view text, const std::string& path);

// Reads and parses `path`. nullopt when it does not exist and
// `must_exist` is false; NOT_FOUND when it must.
absl::StatusOr<std::optional<ClusterConfig>> ReadClusterConfig(const std::string& path,
                                                               bool must_exist);

// Before absl::ParseCommandLine: finds --config=PATH (or "--config PATH")
// in argv (default kDefaultClusterConfig, which may be missing; an empty
// PATH reads none) and sets, from the file, the flags the program has
// (absl's registry: server, tls_dir, node, secret_file, insecure,
// allowed_root), so that
// the command line's own values, parsed after, win. Returns the file read
// (nullopt: none).
absl::StatusOr<std::optional<ClusterConfig>> ApplyClusterConfig(int argc, char** argv);

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_CLUSTER_CONFIG_H_
