#include "client/name_cache.h"

#include "gtest/gtest.h"

namespace grantfs {
namespace {

TEST(NameCache, RemembersTheLastInodeOfEachName) {
  NameCache names;
  EXPECT_EQ(names.Get(1, "a"), 0u);
  names.Set(1, "a", 10);
  names.Set(1, "b", 10);  // a hard link
  names.Set(2, "a", 11);
  EXPECT_EQ(names.Get(1, "a"), 10u);
  EXPECT_EQ(names.Get(2, "a"), 11u);
  names.Set(1, "a", 12);  // looked up again: replaced elsewhere
  EXPECT_EQ(names.Get(1, "a"), 12u);
  names.Erase(1, "a");
  EXPECT_EQ(names.Get(1, "a"), 0u);
  EXPECT_EQ(names.Get(1, "b"), 10u);
  EXPECT_EQ(names.Size(), 2u);
}

TEST(NameCache, RenameMovesAndExchangeSwaps) {
  NameCache names;
  names.Set(1, "a", 10);
  names.Set(2, "b", 20);
  names.Rename(1, "a", 2, "b", /*exchange=*/false);  // over b: 20's name is gone
  EXPECT_EQ(names.Get(1, "a"), 0u);
  EXPECT_EQ(names.Get(2, "b"), 10u);
  names.Set(1, "c", 30);
  names.Rename(1, "c", 2, "b", /*exchange=*/true);
  EXPECT_EQ(names.Get(1, "c"), 10u);
  EXPECT_EQ(names.Get(2, "b"), 30u);
  names.Rename(1, "missing", 1, "c", /*exchange=*/false);  // unknown source
  EXPECT_EQ(names.Get(1, "c"), 0u);
}

TEST(NameCache, AForgottenInodeLeavesNoNames) {
  NameCache names;
  names.Set(1, "a", 10);
  names.Set(1, "b", 10);
  names.Set(1, "c", 11);
  names.ForgetInode(10);
  EXPECT_EQ(names.Get(1, "a"), 0u);
  EXPECT_EQ(names.Get(1, "b"), 0u);
  EXPECT_EQ(names.Get(1, "c"), 11u);
  EXPECT_EQ(names.Size(), 1u);
}

}  // namespace
}  // namespace grantfs
