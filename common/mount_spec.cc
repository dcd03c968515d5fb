#include "common/mount_spec.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "common/names.h"

namespace grantfs {
namespace {

bool OptionChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '=' ||
         c == '/' || c == ':' || c == '+' || c == '-';
}

}  // namespace

absl::StatusOr<std::string> NormalizeMountPath(absl::string_view path) {
  if (path.size() > kMountPathMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("mount path longer than ", kMountPathMax, " bytes"));
  }
  absl::StatusOr<std::string> p = NormalizePath(path);
  if (!p.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("mount path '", path, "': ", p.status().message()));
  }
  if (*p == "/") return absl::InvalidArgumentError("mount path '/': not the root directory");
  for (const char* system : {"/proc", "/sys", "/dev", "/run"}) {
    if (PathsNest(*p, system) && p->size() >= std::string(system).size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("mount path '", *p, "': inside ", system, ", which the system owns"));
    }
  }
  return p;
}

absl::StatusOr<std::string> NormalizeMountSubdir(absl::string_view subdir) {
  if (subdir.empty()) return std::string("/");
  if (subdir.size() > kMountPathMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("directory of the volume longer than ", kMountPathMax, " bytes"));
  }
  absl::StatusOr<std::string> p = NormalizePath(subdir);
  if (!p.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("directory of the volume '", subdir, "': ", p.status().message()));
  }
  return p;
}

absl::StatusOr<std::string> NormalizeMountOptions(absl::string_view options) {
  if (options.size() > kMountOptionsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("mount options longer than ", kMountOptionsMax, " bytes"));
  }
  // An allow-list, not a deny-list: every node runs what the table says as
  // root, so an option nobody thought of (suid, dev, fsname=, subtype=,
  // allow_other, metrics_addr=, log_file=, ...) is refused until it is
  // added here on purpose. Bare: FUSE's and the kernel's; with a value:
  // grantfs-mount flags (client/main.cc) that change only how it caches.
  static const char* const kBare[] = {"ro",       "rw",     "noatime", "nodiratime",
                                      "relatime", "noexec", "nosuid",  "nodev",
                                      "sync",     "async",  "dirsync"};
  static const char* const kValued[] = {
      "leases",      "attr_timeout",  "entry_timeout",  "rpc_timeout_ms", "retry_ms",
      "threads",     "write_mode",    "dirty_limit_mb", "flushers",       "extent_kib",
      "flush_age_s", "readahead_kib", "grant_mb"};
  std::vector<std::string> out;
  for (absl::string_view o : absl::StrSplit(options, ',', absl::SkipEmpty())) {
    for (char c : o) {
      if (!OptionChar(c)) {
        return absl::InvalidArgumentError(
            absl::StrCat("mount option '", absl::CHexEscape(o),
                         "': only letters, digits and _.=/:+- may appear"));
      }
    }
    const size_t eq = o.find('=');
    const absl::string_view name = o.substr(0, eq);
    bool allowed = false;
    for (const char* a : (eq == absl::string_view::npos ? absl::MakeConstSpan(kBare)
                                                        : absl::MakeConstSpan(kValued))) {
      if (name == a) allowed = true;
    }
    if (!allowed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mount option '", o,
          "': not allowed in a global mount (allowed: ro, rw, noatime, nodiratime, relatime, "
          "noexec, nosuid, nodev, sync, async, dirsync, and leases=, attr_timeout=, "
          "entry_timeout=, rpc_timeout_ms=, retry_ms=, threads=, write_mode=, dirty_limit_mb=, "
          "flushers=, extent_kib=, flush_age_s=, readahead_kib=, grant_mb=)"));
    }
    out.emplace_back(o);
  }
  return absl::StrJoin(out, ",");
}

bool PathsNest(const std::string& a, const std::string& b) {
  const std::string& shorter = a.size() <= b.size() ? a : b;
  const std::string& longer = a.size() <= b.size() ? b : a;
  if (longer.compare(0, shorter.size(), shorter) != 0) return false;
  return longer.size() == shorter.size() || shorter == "/" || longer[shorter.size()] == '/';
}

bool StrictlyBelow(const std::string& path, const std::string& root) {
  return path.size() > root.size() && PathsNest(path, root);
}

}  // namespace grantfs
