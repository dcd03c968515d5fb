#include "common/mount_spec.h"

#include <string>

#include "gtest/gtest.h"

namespace grantfs {
namespace {

TEST(MountSpecTest, PathsAreNormalizedAndSystemDirectoriesRefused) {
  EXPECT_EQ(*NormalizeMountPath("/global//x/"), "/global/x");
  EXPECT_FALSE(NormalizeMountPath("global/x").ok());
  EXPECT_FALSE(NormalizeMountPath("/").ok());
  EXPECT_FALSE(NormalizeMountPath("/proc/x").ok());
  EXPECT_FALSE(NormalizeMountPath("/run").ok());
  EXPECT_TRUE(NormalizeMountPath("/runner").ok());
}

TEST(MountSpecTest, NestingIsByWholeComponents) {
  EXPECT_TRUE(PathsNest("/a", "/a/b"));
  EXPECT_TRUE(PathsNest("/a/b", "/a"));
  EXPECT_TRUE(PathsNest("/a", "/a"));
  EXPECT_FALSE(PathsNest("/a", "/ab"));
  EXPECT_TRUE(PathsNest("/", "/x"));
}

TEST(MountSpecTest, StrictlyBelowTheAllowedRoot) {
  EXPECT_TRUE(StrictlyBelow("/global/x", "/global"));
  EXPECT_TRUE(StrictlyBelow("/global/x/y", "/global"));
  EXPECT_FALSE(StrictlyBelow("/global", "/global"));
  EXPECT_FALSE(StrictlyBelow("/globalx", "/global"));
  EXPECT_FALSE(StrictlyBelow("/etc", "/global"));
  EXPECT_FALSE(StrictlyBelow("/", "/global"));
}

}  // namespace
}  // namespace grantfs
