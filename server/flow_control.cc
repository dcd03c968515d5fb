#include "server/flow_control.h"

#include <algorithm>

namespace grantfs {

void FlowControl::Begin(uint64_t client_id, uint64_t bytes) {
  absl::MutexLock l(&mu_);
  Client& c = clients_[client_id];
  c.in_flight_bytes += bytes;
  c.peak_writes = std::max(c.peak_writes, ++c.in_flight_writes);
  c.last_write = options_.clock->Now();
  backlog_ += bytes;
}

void FlowControl::End(uint64_t client_id, uint64_t bytes) {
  absl::MutexLock l(&mu_);
  Client& c = clients_[client_id];
  c.in_flight_bytes -= std::min(c.in_flight_bytes, bytes);
  if (c.in_flight_writes > 0) --c.in_flight_writes;
  c.last_write = options_.clock->Now();
  backlog_ -= std::min(backlog_, bytes);
}

uint64_t FlowControl::Credit(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  const absl::Time now = options_.clock->Now();
  uint64_t active = 0;
  uint64_t own = 0;
  for (const auto& [id, c] : clients_) {
    const bool is_active = c.in_flight_writes > 0 || now - c.last_write < options_.active_window;
    if (id == client_id) {
      own = c.in_flight_bytes;
      continue;  // counted below, active or not: it is asking
    }
    if (is_active) ++active;
  }
  ++active;
  const uint64_t b = options_.budget_bytes;
  const uint64_t fair = b / active;
  const uint64_t room = own + (b > backlog_ ? (b - backlog_) / active : 0);
  return std::max(options_.min_credit_bytes, std::min(fair, room));
}

uint64_t FlowControl::backlog_bytes() {
  absl::MutexLock l(&mu_);
  return backlog_;
}

uint32_t FlowControl::PeakWrites(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  auto it = clients_.find(client_id);
  return it == clients_.end() ? 0 : it->second.peak_writes;
}

void FlowControl::Forget(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  auto it = clients_.find(client_id);
  if (it != clients_.end() && it->second.in_flight_writes == 0) clients_.erase(it);
}

}  // namespace grantfs
