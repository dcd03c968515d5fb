// Whether absl::Mutex looks for lock-order cycles at run time.
//
// Debian's abseil is built without NDEBUG, so its Mutex records the order of
// every pair of locks held together and aborts on a cycle: 2-3% of a daemon's
// CPU under metadata load (GraphCycles on each acquisition made while holding
// another lock). The daemons turn it off unless --mutex_deadlock_check is
// given; its default is on when GRANTFS_MUTEX_CHECK is set in the
// environment, as the end-to-end tests do (tests/conftest.py). Unit tests
// keep abseil's default (on). The lock rules themselves are checked at
// compile time (clang thread-safety, scripts/check-thread-safety.sh).
#ifndef GRANTFS_COMMON_MUTEX_CHECKS_H_
#define GRANTFS_COMMON_MUTEX_CHECKS_H_

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(bool, mutex_deadlock_check);

namespace grantfs {

// Applies --mutex_deadlock_check; call once, after parsing the flags and
// before starting threads.
void ApplyMutexDeadlockCheck();

}  // namespace grantfs

#endif  // GRANTFS_COMMON_MUTEX_CHECKS_H_
