#include "server/grant_policy.h"

#include "gtest/gtest.h"

namespace grantfs {
namespace {

constexpr uint64_t kMiB = 256;          // blocks per MiB
constexpr uint64_t kCap = 1024 * kMiB;  // a 1 GiB volume

TEST(GrantPolicy, PlentyOfRoomGrantsTheWholeWish) {
  EXPECT_EQ(GrantBlocks(64 * kMiB, kCap, kCap), 64 * kMiB);
}

TEST(GrantPolicy, NearFullGrantsAnEighthOfWhatIsFree) {
  EXPECT_EQ(GrantBlocks(64 * kMiB, 256 * kMiB, kCap), 32 * kMiB);
  EXPECT_EQ(GrantBlocks(64 * kMiB, 100 * kMiB, kCap), 100 * kMiB / 8);
}

TEST(GrantPolicy, UnderTheLowWaterMarkGrantsNothing) {
  EXPECT_EQ(LowWaterBlocks(kCap), 32 * kMiB);
  EXPECT_EQ(GrantBlocks(1, 32 * kMiB, kCap), 0u);
  EXPECT_EQ(GrantBlocks(1, 32 * kMiB + 8, kCap), 1u);
  // Just above the mark only the part above it can be granted.
  EXPECT_EQ(GrantBlocks(64 * kMiB, 32 * kMiB + 100, kCap), 100u);
}

TEST(GrantPolicy, LowWaterMarkIsCappedAt64MiB) {
  EXPECT_EQ(LowWaterBlocks(1024 * 1024 * kMiB), 64 * kMiB);
}

TEST(GrantPolicy, ManyClientsCannotTakeMoreThanIsFree) {
  // Clients asking again and again each get 1/8 of what is left: the total
  // converges below what was free and never passes it.
  uint64_t free = 200 * kMiB, given = 0;
  for (int i = 0; i < 1000; ++i) {
    uint64_t g = GrantBlocks(64 * kMiB, free, kCap);
    given += g;
    free -= g;
  }
  EXPECT_LE(given, 200 * kMiB);
  EXPECT_GE(free, LowWaterBlocks(kCap));
}

}  // namespace
}  // namespace grantfs
