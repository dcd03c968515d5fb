#include "common/mutex_checks.h"

#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/synchronization/mutex.h"

ABSL_FLAG(bool, mutex_deadlock_check, std::getenv("GRANTFS_MUTEX_CHECK") != nullptr,
          "abort on a lock-order cycle among absl::Mutex (costs CPU on every nested lock; "
          "default: on when GRANTFS_MUTEX_CHECK is set in the environment)");

namespace grantfs {

void ApplyMutexDeadlockCheck() {
  absl::SetMutexDeadlockDetectionMode(absl::GetFlag(FLAGS_mutex_deadlock_check)
                                          ? absl::OnDeadlockCycle::kAbort
                                          : absl::OnDeadlockCycle::kIgnore);
}

}  // namespace grantfs
