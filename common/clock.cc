#include "common/clock.h"

#include <time.h>

namespace grantfs {
namespace {
class RealClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};

class MonotonicClock : public Clock {
 public:
  absl::Time Now() override {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return absl::TimeFromTimespec(ts);
  }
};
}  // namespace

Clock* Clock::Real() {
  static Clock* clock = new RealClock;
  return clock;
}

Clock* Clock::Monotonic() {
  static Clock* clock = new MonotonicClock;
  return clock;
}

}  // namespace grantfs
