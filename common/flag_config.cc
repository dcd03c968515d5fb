#include "common/flag_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace grantfs {
namespace {

constexpr size_t kConfigMax = 64 * 1024;

}  // namespace

absl::StatusOr<std::optional<std::string>> ReadConfigText(const std::string& path,
                                                          bool must_exist) {
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
  // At most kConfigMax + 1 bytes: one more tells a file that is too large.
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
  if (got > kConfigMax) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": larger than ", kConfigMax, " bytes: not a configuration file"));
  }
  data.resize(got);
  return std::optional<std::string>(std::move(data));
}

absl::Status ForEachConfigLine(
    absl::string_view text, const std::string& path,
    absl::FunctionRef<absl::Status(const std::string& key, const std::string& value,
                                   const ConfigLineError& bad)>
        line) {
  int line_no = 0;
  for (absl::string_view l : absl::StrSplit(text, '\n')) {
    ++line_no;
    l = absl::StripAsciiWhitespace(l);
    if (l.empty() || l[0] == '#') continue;
    const ConfigLineError bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": ", why));
    };
    const size_t eq = l.find('=');
    if (eq == absl::string_view::npos) return bad("expected KEY = VALUE");
    const std::string key(absl::StripAsciiWhitespace(l.substr(0, eq)));
    const std::string value(absl::StripAsciiWhitespace(l.substr(eq + 1)));
    if (absl::Status s = line(key, value, bad); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ApplyFlagText(absl::string_view text, const std::string& path) {
  std::set<std::string> seen;
  return ForEachConfigLine(
      text, path,
      [&](const std::string& name, const std::string& value,
          const ConfigLineError& bad) -> absl::Status {
        if (name == "config" || name == "flagfile" || name == "fromenv" || name == "tryfromenv" ||
            name == "undefok") {
          return bad(absl::StrCat("'", name, "' cannot be set from a configuration file"));
        }
        absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
        if (flag == nullptr || absl::StartsWith(name, "-")) {
          return bad(absl::StrCat("unknown flag '", name, "' (--help lists them)"));
        }
        if (!seen.insert(name).second) return bad(absl::StrCat(name, " given twice"));
        std::string error;
        if (!flag->ParseFrom(value, &error)) {
          return bad(absl::StrCat(name, " = ", value, ": ", error));
        }
        return absl::OkStatus();
      });
}

absl::Status ApplyFlagConfig(int argc, char** argv) {
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view a = argv[i];
    if (a == "--") break;
    for (const char* prefix : {"--config=", "-config="}) {
      if (absl::StartsWith(a, prefix)) path = std::string(a.substr(strlen(prefix)));
    }
    if ((a == "--config" || a == "-config") && i + 1 < argc) path = argv[++i];
  }
  if (path.empty()) return absl::OkStatus();
  absl::StatusOr<std::optional<std::string>> text = ReadConfigText(path, /*must_exist=*/true);
  if (!text.ok()) return text.status();
  return ApplyFlagText(**text, path);
}

}  // namespace grantfs
