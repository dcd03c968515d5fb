#include "client/inode_table.h"

#include "gtest/gtest.h"

namespace grantfs {
namespace {

TEST(InodeTable, CountsLookupsExactly) {
  InodeTable t;
  t.Ref(5);
  t.Ref(5);
  t.Ref(7);
  EXPECT_EQ(t.Count(5), 2u);
  EXPECT_EQ(t.Size(), 2u);
  EXPECT_EQ(t.Forget(5, 1), 1u);
  EXPECT_EQ(t.Forget(5, 1), 0u);
  EXPECT_EQ(t.Count(5), 0u);
  EXPECT_EQ(t.Size(), 1u);
}

TEST(InodeTable, OverForgetIsClampedNotNegative) {
  InodeTable t;
  t.Ref(9);
  EXPECT_EQ(t.Forget(9, 5), 0u);
  EXPECT_EQ(t.Count(9), 0u);
  EXPECT_EQ(t.Forget(42, 1), 0u);  // unknown inode: logged, no crash
}

}  // namespace
}  // namespace grantfs
