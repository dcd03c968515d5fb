// Time, injected so that lease and timeout logic is tested without sleeps.
#ifndef GRANTFS_COMMON_CLOCK_H_
#define GRANTFS_COMMON_CLOCK_H_

#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace grantfs {

// Thread-safe source of the current time.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  int64_t NowNanos() { return absl::ToUnixNanos(Now()); }

  // The process-wide real clock (wall time); never deleted.
  static Clock* Real();
  // The process-wide monotonic clock (CLOCK_MONOTONIC as time since the
  // Unix epoch): for leases and timeouts, which a step of the wall clock
  // must not stretch or cut. Only differences of its times mean anything.
  static Clock* Monotonic();
};

// A clock that moves only when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000)) : now_(start) {}
  absl::Time Now() override {
    absl::MutexLock l(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock l(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_COMMON_CLOCK_H_
