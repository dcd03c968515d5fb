#include "common/transport_flags.h"

#include <sys/stat.h>

#include <cstdlib>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/secret.h"
#include "glog/logging.h"

ABSL_FLAG(std::string, tls_dir, "",
          "directory with ca.crt and IDENTITY.crt/.key (grantfsctl init makes it); default "
          "$GRANTFS_TLS_DIR, else /etc/grantfs");
ABSL_FLAG(std::string, identity, "",
          "which certificate of --tls_dir this program uses (IDENTITY.crt, IDENTITY.key); "
          "default server, node or admin");
ABSL_FLAG(bool, insecure, false,
          "no TLS and no authentication: anyone who reaches the port may call (a warning "
          "is logged at every start)");
ABSL_FLAG(std::string, secret_file, "",
          "file holding the cluster secret, sent with every call and required of callers");

namespace grantfs {

std::string TlsDirFromFlags() {
  std::string dir = absl::GetFlag(FLAGS_tls_dir);
  if (dir.empty()) {
    const char* env = getenv("GRANTFS_TLS_DIR");
    dir = env != nullptr && *env != '\0' ? env : "/etc/grantfs";
  }
  return dir;
}

absl::StatusOr<Transport> TransportFromFlags(const std::string& default_identity,
                                             const char* program) {
  absl::StatusOr<std::string> secret = ReadSecretFile(absl::GetFlag(FLAGS_secret_file));
  if (!secret.ok()) return secret.status();
  const char* insecure_env = getenv("GRANTFS_INSECURE");
  if (absl::GetFlag(FLAGS_insecure) ||
      (insecure_env != nullptr && std::string(insecure_env) == "1")) {
    LOG(WARNING) << program
                 << " runs with --insecure: no TLS, and no proof of who calls: anyone who "
                    "can reach it may claim any identity and any uid"
                 << (secret->empty() ? "" : " (only the cluster secret is checked)");
    return Transport::Insecure(*std::move(secret));
  }
  const std::string dir = TlsDirFromFlags();
  std::string identity = absl::GetFlag(FLAGS_identity);
  if (identity.empty()) identity = default_identity;
  struct stat st;
  if (stat((dir + "/ca.crt").c_str(), &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no TLS material: ", dir,
        "/ca.crt is missing. Make the cluster's keys with "
        "`grantfsctl init --tls_dir=",
        dir,
        "` (docs/security.md), point --tls_dir (or "
        "$GRANTFS_TLS_DIR) at them, or run without TLS and authentication with --insecure"));
  }
  return Transport::FromDirectory(dir, identity, *std::move(secret));
}

}  // namespace grantfs
