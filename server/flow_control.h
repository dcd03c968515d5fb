// Flow control of the write path: the server's write backlog (bytes of
// Write requests being applied right now) and the in-flight credit it hands
// every client in every reply.
//
// The rule (docs/write-path.md): with a budget B of backlog bytes and N
// sessions that wrote in the last `active_window`, a client's credit is
//   max(min_credit, min(B / N, its own in-flight bytes + (B - backlog) / N))
// so an idle server lets one writer have all of B, writers share B evenly,
// and a server whose backlog reached B gives nobody more than they already
// have in flight. A client keeps the bytes of its unacknowledged writes
// within its latest credit, except that one request may always be in flight.
//
// Thread-safe. Time comes from the injected Clock.
#ifndef GRANTFS_SERVER_FLOW_CONTROL_H_
#define GRANTFS_SERVER_FLOW_CONTROL_H_

#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace grantfs {

struct FlowControlOptions {
  uint64_t budget_bytes = 64ull << 20;
  uint64_t min_credit_bytes = 1ull << 20;
  absl::Duration active_window = absl::Seconds(2);
  Clock* clock = Clock::Real();
};

class FlowControl {
 public:
  explicit FlowControl(const FlowControlOptions& options) : options_(options) {}

  // A write of `bytes` by `client_id` starts / ends.
  void Begin(uint64_t client_id, uint64_t bytes);
  void End(uint64_t client_id, uint64_t bytes);

  // The credit to send `client_id` now.
  uint64_t Credit(uint64_t client_id);

  uint64_t backlog_bytes();
  uint64_t budget() const { return options_.budget_bytes; }
  // Most writes `client_id` had in flight at once since its first write.
  uint32_t PeakWrites(uint64_t client_id);
  // Forgets a session that ended.
  void Forget(uint64_t client_id);

  // RAII: Begin in the constructor, End in the destructor.
  class Scope {
   public:
    Scope(FlowControl* fc, uint64_t client_id, uint64_t bytes)
        : fc_(fc), client_id_(client_id), bytes_(bytes) {
      fc_->Begin(client_id_, bytes_);
    }
    ~Scope() { fc_->End(client_id_, bytes_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    FlowControl* const fc_;
    const uint64_t client_id_, bytes_;
  };

 private:
  struct Client {
    uint64_t in_flight_bytes = 0;
    uint32_t in_flight_writes = 0;
    uint32_t peak_writes = 0;
    absl::Time last_write;
  };
  const FlowControlOptions options_;
  absl::Mutex mu_;
  uint64_t backlog_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Client> clients_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_FLOW_CONTROL_H_
