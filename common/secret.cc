#include "common/secret.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace grantfs {

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  if (path.empty()) return std::string();
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) return ErrnoStatus(errno, absl::StrCat("secret file ", path));
  char buf[257];
  const size_t n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  std::string s(buf, n);
  if (size_t nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  while (!s.empty() && isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  if (s.empty() || s.size() > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("secret file ", path, ": 1..255 bytes expected"));
  }
  return s;
}

}  // namespace grantfs
