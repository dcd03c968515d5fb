#include "client/cluster_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

ABSL_FLAG(std::string, config, grantfs::kDefaultClusterConfig,
          "the cluster's configuration file (servers, tls_dir, node, secret_file, insecure, "
          "allowed_root); "
          "flags given on the command line override it; empty: none");

namespace grantfs {
namespace {

constexpr size_t kConfigMax = 64 * 1024;

absl::Status SetFlagFromConfig(const char* flag_name, const std::string& value,
                               const std::string& path) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(flag_name);
  if (flag == nullptr) return absl::OkStatus();  // not one of this program's
  std::string error;
  if (!flag->ParseFrom(value, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", flag_name, " = ", value, ": ", error));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterConfig> ParseClusterConfig(absl::string_view text, const std::string& path) {
  ClusterConfig c;
  bool seen_servers = false, seen_tls = false, seen_node = false, seen_secret = false,
       seen_root = false;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": ", why));
    };
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) return bad("expected KEY = VALUE");
    const std::string key(absl::StripAsciiWhitespace(line.substr(0, eq)));
    const std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    auto once = [&](bool* seen, std::string* field) -> absl::Status {
      if (*seen) return bad(absl::StrCat(key, " given twice"));
      *seen = true;
      *field = value;
      return absl::OkStatus();
    };
    absl::Status s;
    if (key == "servers") {
      s = once(&seen_servers, &c.servers);
      if (s.ok() && value.empty()) s = bad("servers is empty");
    } else if (key == "tls_dir") {
      s = once(&seen_tls, &c.tls_dir);
    } else if (key == "node") {
      s = once(&seen_node, &c.node);
    } else if (key == "secret_file") {
      s = once(&seen_secret, &c.secret_file);
    } else if (key == "allowed_root") {
      s = once(&seen_root, &c.allowed_root);
      if (s.ok() && value.empty()) s = bad("allowed_root is empty");
    } else if (key == "insecure") {
      if (c.insecure.has_value()) return bad("insecure given twice");
      if (value == "true" || value == "yes" || value == "1") {
        c.insecure = true;
      } else if (value == "false" || value == "no" || value == "0") {
        c.insecure = false;
      } else {
        return bad(absl::StrCat("insecure must be true or false, not '", value, "'"));
      }
    } else {
      return bad(absl::StrCat("unknown key '", key,
                              "' (servers, tls_dir, node, secret_file, insecure, allowed_root)"));
    }
    if (!s.ok()) return s;
  }
  return c;
}

absl::StatusOr<std::optional<ClusterConfig>> ReadClusterConfig(const std::string& path,
                                                               bool must_exist) {
  // open + fstat: a FIFO or a device named as the file must not hang or
  // flood the program; at most kConfigMax + 1 bytes are read (one more
  // tells a file that is too large). ENOENT of the default path is "no
  // file"; every other error (EACCES too) is one, said precisely.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT && !must_exist) return std::nullopt;
    return absl::NotFoundError(
        absl::StrCat("cannot read the configuration file ", path, ": ", strerror(err)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("the configuration file ", path, " is not a regular file"));
  }
  std::string data(kConfigMax + 1, '\0');
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = read(fd, data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return absl::NotFoundError(
          absl::StrCat("cannot read the configuration file ", path, ": ", strerror(err)));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  data.resize(got);
  std::ostringstream text;
  text << data;
  if (got > kConfigMax) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": larger than ", kConfigMax, " bytes: not a configuration file"));
  }
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(text.str(), path);
  if (!c.ok()) return c.status();
  return std::optional<ClusterConfig>(*std::move(c));
}

absl::StatusOr<std::optional<ClusterConfig>> ApplyClusterConfig(int argc, char** argv) {
  std::string path = kDefaultClusterConfig;
  bool given = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view a = argv[i];
    if (a == "--") break;
    for (const char* prefix : {"--config=", "-config="}) {
      if (absl::StartsWith(a, prefix)) {
        path = std::string(a.substr(strlen(prefix)));
        given = true;
      }
    }
    if ((a == "--config" || a == "-config") && i + 1 < argc) {
      path = argv[++i];
      given = true;
    }
  }
  if (path.empty()) return std::nullopt;
  absl::StatusOr<std::optional<ClusterConfig>> c = ReadClusterConfig(path, given);
  if (!c.ok() || !c->has_value()) return c;
  const ClusterConfig& conf = **c;
  if (!conf.servers.empty()) {
    if (absl::Status s = SetFlagFromConfig("server", conf.servers, path); !s.ok()) return s;
  }
  const char* env_tls = getenv("GRANTFS_TLS_DIR");
  if (!conf.tls_dir.empty() && (env_tls == nullptr || *env_tls == '\0')) {
    if (absl::Status s = SetFlagFromConfig("tls_dir", conf.tls_dir, path); !s.ok()) return s;
  }
  if (!conf.node.empty()) {
    if (absl::Status s = SetFlagFromConfig("node", conf.node, path); !s.ok()) return s;
  }
  if (!conf.secret_file.empty()) {
    if (absl::Status s = SetFlagFromConfig("secret_file", conf.secret_file, path); !s.ok()) {
      return s;
    }
  }
  if (!conf.allowed_root.empty()) {
    if (absl::Status s = SetFlagFromConfig("allowed_root", conf.allowed_root, path); !s.ok()) {
      return s;
    }
  }
  if (conf.insecure.has_value()) {
    if (absl::Status s = SetFlagFromConfig("insecure", *conf.insecure ? "true" : "false", path);
        !s.ok()) {
      return s;
    }
  }
  return c;
}

}  // namespace grantfs
