// A program's flags from a configuration file of `NAME = VALUE` lines
// instead of a long command line (the servers' /etc/grantfs/INSTANCE.conf,
// docs/operations.md "Install from a package, run under systemd"):
//
//   # comments and blank lines are ignored
//   role = primary
//   listen = 0.0.0.0:7420
//   data_dir = /var/lib/grantfs
//
// NAME is any flag of the program (as `--help` lists it, without the
// dashes); VALUE is what `--NAME=VALUE` would take, the rest of the line
// with the spaces around it cut. The command line's own flags, parsed
// after, win.
#ifndef GRANTFS_COMMON_FLAG_CONFIG_H_
#define GRANTFS_COMMON_FLAG_CONFIG_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace grantfs {

// The text of a small configuration file: open without blocking (a FIFO or
// a device named as the file must not hang the program), a regular file of
// at most 64 KiB. nullopt when it does not exist and `must_exist` is
// false; NOT_FOUND (naming the file and why) when it cannot be read;
// INVALID_ARGUMENT when it is no regular file or too large.
absl::StatusOr<std::optional<std::string>> ReadConfigText(const std::string& path, bool must_exist);

// Calls `line(key, value, bad)` for each `KEY = VALUE` line of `text`, in
// order (blank lines and lines starting with '#' skipped; spaces around
// key and value cut), until one returns an error, which is returned.
// `bad(why)` is INVALID_ARGUMENT "PATH:LINE: why" for that line; a line
// without '=' is one ("expected KEY = VALUE").
using ConfigLineError = std::function<absl::Status(const std::string& why)>;
absl::Status ForEachConfigLine(
    absl::string_view text, const std::string& path,
    absl::FunctionRef<absl::Status(const std::string& key, const std::string& value,
                                   const ConfigLineError& bad)>
        line);

// Sets the flags `text` names (its file called `path` in errors).
// INVALID_ARGUMENT "PATH:LINE: why" for a line without '=', a name that is
// no flag of this program, `config` or absl's `flagfile`, `fromenv`,
// `tryfromenv`, `undefok` (no file reads another), a flag given twice, or a
// value the flag refuses; flags before the bad line stay set.
absl::Status ApplyFlagText(absl::string_view text, const std::string& path);

// Before absl::ParseCommandLine: finds --config=PATH (or "--config PATH")
// in argv and applies that file (which must exist). OK with nothing done
// when there is no --config or it is empty.
absl::Status ApplyFlagConfig(int argc, char** argv);

}  // namespace grantfs

#endif  // GRANTFS_COMMON_FLAG_CONFIG_H_
