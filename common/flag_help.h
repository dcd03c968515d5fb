// --help of the programs: every flag a program takes, from the directories
// that define them, not only those of a file named like the program (abseil's
// default, which lists none of ours).
#ifndef GRANTFS_COMMON_FLAG_HELP_H_
#define GRANTFS_COMMON_FLAG_HELP_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace grantfs {

// `usage` lists the flags of files under `dirs` ("client/", "server/", ...)
// and the TLS ones (common/transport_flags.cc) in --help and --helpshort.
inline void ListFlagsFrom(std::initializer_list<const char*> dirs, absl::FlagsUsageConfig* usage) {
  std::vector<std::string> from(dirs.begin(), dirs.end());
  from.push_back("transport_flags");
  usage->contains_help_flags = [from](absl::string_view file) {
    for (const std::string& d : from) {
      if (absl::StrContains(file, d)) return true;
    }
    return false;
  };
  usage->contains_helpshort_flags = usage->contains_help_flags;
}

}  // namespace grantfs

#endif  // GRANTFS_COMMON_FLAG_HELP_H_
