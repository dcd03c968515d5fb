#include "common/clock.h"

namespace grantfs {
namespace {
class RealClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};
}  // namespace

Clock* Clock::Real() {
  static Clock* clock = new RealClock;
  return clock;
}

}  // namespace grantfs
