#include "common/names.h"

#include <cerrno>
#include <limits>
#include <string>
#include <vector>

#include "common/errno_status.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

TEST(ValidateName, AcceptsOrdinaryNames) {
  EXPECT_EQ(ToErrno(ValidateName("a")), 0);
  EXPECT_EQ(ToErrno(ValidateName("file.txt")), 0);
  EXPECT_EQ(ToErrno(ValidateName("...")), 0);
  EXPECT_EQ(ToErrno(ValidateName(".hidden")), 0);
  EXPECT_EQ(ToErrno(ValidateName("with space")), 0);
}

TEST(ValidateName, RejectsEmptyDotAndDotDot) {
  EXPECT_EQ(ToErrno(ValidateName("")), EINVAL);
  EXPECT_EQ(ToErrno(ValidateName(".")), EINVAL);
  EXPECT_EQ(ToErrno(ValidateName("..")), EINVAL);
}

TEST(ValidateName, RejectsSlashAndNul) {
  EXPECT_EQ(ToErrno(ValidateName("a/b")), EINVAL);
  EXPECT_EQ(ToErrno(ValidateName("/")), EINVAL);
  EXPECT_EQ(ToErrno(ValidateName("trailing/")), EINVAL);
  EXPECT_EQ(ToErrno(ValidateName(std::string("a\0b", 3))), EINVAL);
  EXPECT_EQ(ToErrno(ValidateName(std::string("\0", 1))), EINVAL);
}

TEST(ValidateName, LengthLimitIs255Bytes) {
  EXPECT_EQ(ToErrno(ValidateName(std::string(255, 'x'))), 0);
  EXPECT_EQ(ToErrno(ValidateName(std::string(256, 'x'))), ENAMETOOLONG);
  EXPECT_EQ(ToErrno(ValidateName(std::string(4096, 'x'))), ENAMETOOLONG);
  // Counted in bytes, not characters: 128 two-byte UTF-8 characters.
  std::string utf8;
  for (int i = 0; i < 128; ++i) utf8 += "\xc3\xa9";  // U+00E9
  ASSERT_EQ(utf8.size(), 256u);
  EXPECT_EQ(ToErrno(ValidateName(utf8)), ENAMETOOLONG);
  EXPECT_EQ(ToErrno(ValidateName(utf8.substr(2))), 0);
}

TEST(ValidateSymlinkTarget, Limits) {
  EXPECT_EQ(ToErrno(ValidateSymlinkTarget("target")), 0);
  EXPECT_EQ(ToErrno(ValidateSymlinkTarget("../a/b/c")), 0);
  EXPECT_EQ(ToErrno(ValidateSymlinkTarget("")), ENOENT);
  EXPECT_EQ(ToErrno(ValidateSymlinkTarget(std::string(kPathMax - 1, 'a'))), 0);
  EXPECT_EQ(ToErrno(ValidateSymlinkTarget(std::string(kPathMax, 'a'))), ENAMETOOLONG);
  EXPECT_EQ(ToErrno(ValidateSymlinkTarget(std::string("a\0b", 3))), EINVAL);
}

TEST(ValidateXattr, SupportedNamespaces) {
  EXPECT_EQ(ToErrno(ValidateXattr("user.x", 0)), 0);
  EXPECT_EQ(ToErrno(ValidateXattr("trusted.x", 10)), 0);
  EXPECT_EQ(ToErrno(ValidateXattr("security.selinux", 10)), 0);
}

TEST(ValidateXattr, UnsupportedNamespaces) {
  EXPECT_EQ(ToErrno(ValidateXattr("system.x", 0)), EOPNOTSUPP);
  EXPECT_EQ(ToErrno(ValidateXattr("system.posix_acl_access", 0)), EOPNOTSUPP);
  EXPECT_EQ(ToErrno(ValidateXattr("foo", 0)), EOPNOTSUPP);
  EXPECT_EQ(ToErrno(ValidateXattr("USER.x", 0)), EOPNOTSUPP);
  // A namespace prefix alone names nothing.
  EXPECT_EQ(ToErrno(ValidateXattr("user.", 0)), EOPNOTSUPP);
}

TEST(ValidateXattr, BadNames) {
  EXPECT_EQ(ToErrno(ValidateXattr("", 0)), EINVAL);
  EXPECT_EQ(ToErrno(ValidateXattr(std::string("user.a\0b", 8), 0)), EINVAL);
  const std::string longest = "user." + std::string(kXattrNameMax - 5, 'n');
  ASSERT_EQ(longest.size(), kXattrNameMax);
  EXPECT_EQ(ToErrno(ValidateXattr(longest, 0)), 0);
  EXPECT_EQ(ToErrno(ValidateXattr(longest + "n", 0)), ERANGE);
}

TEST(ValidateXattr, ValueSizeLimit) {
  EXPECT_EQ(ToErrno(ValidateXattr("user.x", kXattrValueMax)), 0);
  EXPECT_EQ(ToErrno(ValidateXattr("user.x", kXattrValueMax + 1)), E2BIG);
  EXPECT_EQ(ToErrno(ValidateXattr("trusted.x", 1 << 20)), E2BIG);
}

TEST(ValidateRange, WithinTheMaximumFileSize) {
  EXPECT_EQ(ToErrno(ValidateRange(0, 0)), 0);
  EXPECT_EQ(ToErrno(ValidateRange(0, 4096)), 0);
  EXPECT_EQ(ToErrno(ValidateRange(0, kMaxFileSize)), 0);
  EXPECT_EQ(ToErrno(ValidateRange(kMaxFileSize - 1, 1)), 0);
  EXPECT_EQ(ToErrno(ValidateRange(kMaxFileSize, 0)), 0);
}

TEST(ValidateRange, PastTheMaximumFileSizeIsEfbig) {
  EXPECT_EQ(ToErrno(ValidateRange(kMaxFileSize, 1)), EFBIG);
  EXPECT_EQ(ToErrno(ValidateRange(kMaxFileSize - 1, 2)), EFBIG);
  EXPECT_EQ(ToErrno(ValidateRange(0, kMaxFileSize + 1)), EFBIG);
  EXPECT_EQ(ToErrno(ValidateRange(kMaxFileSize + 1, 0)), EFBIG);
  // No wrap-around for huge values.
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(ToErrno(ValidateRange(kMax, 1)), EFBIG);
  EXPECT_EQ(ToErrno(ValidateRange(1, kMax)), EFBIG);
  EXPECT_EQ(ToErrno(ValidateRange(kMax, kMax)), EFBIG);
}

TEST(NormalizePath, AbsolutePathsOfValidNames) {
  EXPECT_EQ(*NormalizePath("/"), "/");
  EXPECT_EQ(*NormalizePath("//"), "/");
  EXPECT_EQ(*NormalizePath("/a//b/"), "/a/b");
  EXPECT_EQ(*NormalizePath("/proj/x y"), "/proj/x y");
  for (const char* bad : {"", "a/b", "/a/../b", "/a/./b", "/..", "./a"}) {
    EXPECT_EQ(ToErrno(NormalizePath(bad).status()), EINVAL) << bad;
  }
  EXPECT_EQ(ToErrno(NormalizePath("/" + std::string(kPathMax, 'a')).status()), ENAMETOOLONG);
  EXPECT_EQ(PathNames("/a/b"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(PathNames("/").empty());
}

}  // namespace
}  // namespace grantfs
