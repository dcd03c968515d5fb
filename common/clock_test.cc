#include "common/clock.h"

#include <time.h>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

TEST(Clock, MonotonicIsCLOCK_MONOTONICNotTheWallClock) {
  timespec before;
  clock_gettime(CLOCK_MONOTONIC, &before);
  const absl::Time mono = Clock::Monotonic()->Now();
  timespec after;
  clock_gettime(CLOCK_MONOTONIC, &after);
  EXPECT_GE(mono, absl::TimeFromTimespec(before));
  EXPECT_LE(mono, absl::TimeFromTimespec(after));
  // The wall clock is decades further on: nothing mixes the two up unseen.
  EXPECT_GT(Clock::Real()->Now() - mono, absl::Hours(24 * 365));
}

TEST(Clock, MonotonicNeverGoesBack) {
  absl::Time last = Clock::Monotonic()->Now();
  for (int i = 0; i < 10000; ++i) {
    const absl::Time now = Clock::Monotonic()->Now();
    ASSERT_GE(now, last);
    last = now;
  }
}

}  // namespace
}  // namespace grantfs
