#include "client/cluster_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "common/pki.h"
#include "common/transport.h"

namespace grantfs {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Writes `data` to `path` (created with `mode`, replaced atomically).
absl::Status WriteFile(const std::string& path, const std::string& data, mode_t mode) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("creating ", tmp));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      const int err = errno;
      close(fd);
      return ErrnoStatus(err, absl::StrCat("writing ", tmp));
    }
    done += n;
  }
  if (fsync(fd) != 0 || close(fd) != 0) return ErrnoStatus(errno, absl::StrCat("syncing ", tmp));
  if (rename(tmp.c_str(), path.c_str()) != 0)
    return ErrnoStatus(errno, absl::StrCat("renaming to ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus(errno, absl::StrCat("reading ", path));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> MakeClusterKeys(const ClusterKeysOptions& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("no directory");
  if (mkdir(options.dir.c_str(), 0700) != 0 && errno != EEXIST)
    return ErrnoStatus(errno, absl::StrCat("mkdir ", options.dir));
  std::vector<std::string> written;
  const std::string dir = options.dir + "/";
  const absl::Time now = absl::Now();
  CertAndKey ca;
  if (Exists(dir + "ca.crt") && Exists(dir + "ca.key")) {
    absl::StatusOr<std::string> cert = ReadFile(dir + "ca.crt");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile(dir + "ca.key");
    if (!key.ok()) return key.status();
    ca = {*std::move(cert), *std::move(key)};
  } else if (Exists(dir + "ca.crt")) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir,
                     "ca.crt exists but not ca.key: certificates can only be made where "
                     "the CA's key is"));
  } else {
    absl::StatusOr<CertAndKey> made = MakeCertificateAuthority(
        "GrantFS cluster CA", now - absl::Minutes(5), now + absl::Hours(24 * 3650));
    if (!made.ok()) return made.status();
    ca = *std::move(made);
    if (absl::Status s = WriteFile(dir + "ca.key", ca.key_pem, 0600); !s.ok()) return s;
    if (absl::Status s = WriteFile(dir + "ca.crt", ca.cert_pem, 0644); !s.ok()) return s;
    written.push_back(dir + "ca.crt");
    written.push_back(dir + "ca.key");
  }
  // (file name, common name)
  std::vector<std::pair<std::string, std::string>> certs = {
      {"server", "server:cluster"}, {"node", "node:default"}, {"admin", "admin:admin"}};
  for (const std::string& n : options.servers) certs.push_back({"server-" + n, "server:" + n});
  for (const std::string& n : options.nodes) certs.push_back({"node-" + n, "node:" + n});
  for (const std::string& n : options.admins) certs.push_back({"admin-" + n, "admin:" + n});
  for (const auto& [file, cn] : certs) {
    if (Exists(dir + file + ".crt")) continue;
    // A little in the past: clocks of the nodes may lag this one's.
    const bool node = PeerKindOf(cn) == kNodePeer;
    absl::StatusOr<CertAndKey> made = IssueCertificate(
        ca, cn, now - absl::Minutes(5), now + options.valid_for, node ? options.node_options : "");
    if (!made.ok()) return made.status();
    if (absl::Status s = WriteFile(dir + file + ".key", made->key_pem, 0600); !s.ok()) return s;
    if (absl::Status s = WriteFile(dir + file + ".crt", made->cert_pem, 0644); !s.ok()) return s;
    written.push_back(dir + file + ".crt");
    written.push_back(dir + file + ".key");
  }
  if (!Exists(dir + "secret")) {
    std::string raw(24, '\0');
    std::ifstream rnd("/dev/urandom", std::ios::binary);
    if (!rnd.read(raw.data(), raw.size())) return absl::InternalError("reading /dev/urandom");
    if (absl::Status s = WriteFile(dir + "secret", absl::BytesToHexString(raw) + "\n", 0600);
        !s.ok()) {
      return s;
    }
    written.push_back(dir + "secret");
  }
  return written;
}

}  // namespace grantfs
