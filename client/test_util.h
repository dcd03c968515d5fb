// Helpers shared by the client's unit tests.
#ifndef GRANTFS_CLIENT_TEST_UTIL_H_
#define GRANTFS_CLIENT_TEST_UTIL_H_

#include <functional>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/bytes_test_util.h"
#include "gtest/gtest.h"

namespace grantfs {

// Polls `pred` until it holds or `timeout` passes (real time).
inline bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!pred()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_TEST_UTIL_H_
