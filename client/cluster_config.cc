#include "client/cluster_config.h"

#include <cstdlib>
#include <cstring>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/flag_config.h"

ABSL_FLAG(std::string, config, grantfs::kDefaultClusterConfig,
          "the cluster's configuration file (servers, tls_dir, node, secret_file, insecure, "
          "allowed_root); "
          "flags given on the command line override it; empty: none");

namespace grantfs {
namespace {

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
  absl::Status s = ForEachConfigLine(
      text, path,
      [&](const std::string& key, const std::string& value,
          const ConfigLineError& bad) -> absl::Status {
        auto once = [&](bool* seen, std::string* field) -> absl::Status {
          if (*seen) return bad(absl::StrCat(key, " given twice"));
          *seen = true;
          *field = value;
          return absl::OkStatus();
        };
        if (key == "servers") {
          if (value.empty()) return bad("servers is empty");
          return once(&seen_servers, &c.servers);
        }
        if (key == "tls_dir") return once(&seen_tls, &c.tls_dir);
        if (key == "node") return once(&seen_node, &c.node);
        if (key == "secret_file") return once(&seen_secret, &c.secret_file);
        if (key == "allowed_root") {
          if (value.empty()) return bad("allowed_root is empty");
          return once(&seen_root, &c.allowed_root);
        }
        if (key == "insecure") {
          if (c.insecure.has_value()) return bad("insecure given twice");
          if (value == "true" || value == "yes" || value == "1") {
            c.insecure = true;
          } else if (value == "false" || value == "no" || value == "0") {
            c.insecure = false;
          } else {
            return bad(absl::StrCat("insecure must be true or false, not '", value, "'"));
          }
          return absl::OkStatus();
        }
        return bad(absl::StrCat("unknown key '", key,
                                "' (servers, tls_dir, node, secret_file, insecure, allowed_root)"));
      });
  if (!s.ok()) return s;
  return c;
}

absl::StatusOr<std::optional<ClusterConfig>> ReadClusterConfig(const std::string& path,
                                                               bool must_exist) {
  // ENOENT of the default path is "no file"; every other error (EACCES
  // too) is one, said precisely (common/flag_config.h).
  absl::StatusOr<std::optional<std::string>> text = ReadConfigText(path, must_exist);
  if (!text.ok()) return text.status();
  if (!text->has_value()) return std::nullopt;
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(**text, path);
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
