#include "server/dedupe.h"

namespace grantfs {

bool InFlightRequests::Enter(uint64_t client_id, uint64_t seq, absl::Duration wait) {
  const auto key = std::make_pair(client_id, seq);
  absl::MutexLock l(&mu_);
  auto free = [this, &key]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_.count(key) == 0; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&free), wait)) return false;
  running_.insert(key);
  return true;
}

void InFlightRequests::Leave(uint64_t client_id, uint64_t seq) {
  absl::MutexLock l(&mu_);
  running_.erase(std::make_pair(client_id, seq));
}

}  // namespace grantfs
