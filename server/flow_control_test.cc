#include "server/flow_control.h"

#include "gtest/gtest.h"

namespace grantfs {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

class FlowControlTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  FlowControl fc_{FlowControlOptions{.budget_bytes = 64 * kMiB,
                                     .min_credit_bytes = 1 * kMiB,
                                     .active_window = absl::Seconds(2),
                                     .clock = &clock_}};
};

TEST_F(FlowControlTest, IdleServerGivesOneClientTheWholeBudget) {
  EXPECT_EQ(fc_.Credit(1), 64 * kMiB);
}

TEST_F(FlowControlTest, ActiveWritersShareTheBudget) {
  fc_.Begin(1, 4 * kMiB);
  fc_.End(1, 4 * kMiB);
  fc_.Begin(2, 4 * kMiB);
  fc_.End(2, 4 * kMiB);
  // Two active writers (and a third asking) split it.
  EXPECT_EQ(fc_.Credit(1), 32 * kMiB);
  EXPECT_EQ(fc_.Credit(3), 64 * kMiB / 3);
}

TEST_F(FlowControlTest, WritersGoIdleAfterTheWindow) {
  fc_.Begin(2, 4 * kMiB);
  fc_.End(2, 4 * kMiB);
  EXPECT_EQ(fc_.Credit(1), 32 * kMiB);
  clock_.Advance(absl::Seconds(3));
  EXPECT_EQ(fc_.Credit(1), 64 * kMiB);
}

TEST_F(FlowControlTest, FullBacklogGivesNoMoreThanInFlight) {
  // Client 2 fills the backlog; client 1 has 8 MiB in flight.
  fc_.Begin(2, 56 * kMiB);
  fc_.Begin(1, 8 * kMiB);
  EXPECT_EQ(fc_.backlog_bytes(), 64 * kMiB);
  EXPECT_EQ(fc_.Credit(1), 8 * kMiB);
  // Over budget, a client with nothing in flight still gets the minimum.
  fc_.Begin(2, 16 * kMiB);
  EXPECT_EQ(fc_.Credit(3), 1 * kMiB);
}

TEST_F(FlowControlTest, CreditGrowsAsTheBacklogDrains) {
  fc_.Begin(2, 60 * kMiB);
  const uint64_t before = fc_.Credit(1);
  fc_.End(2, 60 * kMiB);
  EXPECT_GT(fc_.Credit(1), before);
  EXPECT_EQ(fc_.backlog_bytes(), 0u);
}

TEST_F(FlowControlTest, PeakWritesAndScope) {
  {
    FlowControl::Scope a(&fc_, 7, kMiB);
    FlowControl::Scope b(&fc_, 7, kMiB);
    EXPECT_EQ(fc_.backlog_bytes(), 2 * kMiB);
  }
  EXPECT_EQ(fc_.backlog_bytes(), 0u);
  EXPECT_EQ(fc_.PeakWrites(7), 2u);
  fc_.Forget(7);
  EXPECT_EQ(fc_.PeakWrites(7), 0u);
}

}  // namespace
}  // namespace grantfs
