// What a server serves on --metrics_addr (docs/metrics.md), over its whole
// run whatever roles it takes: every call it served, by kind, and how long
// it took; the bytes files read and written; how often it took the primary
// role over; and what Status says now of the role it has (the role's
// endpoint registers while it serves).
#ifndef GRANTFS_SERVER_SERVER_METRICS_H_
#define GRANTFS_SERVER_SERVER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"

namespace grantfs {

class GrantFsEndpoint;

class ServerMetrics {
 public:
  ServerMetrics() = default;
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // Call latencies by method (GrantFsService::Serve times each).
  OpLatencies& calls() { return calls_; }
  void AddRead(uint64_t bytes) { read_bytes_.fetch_add(bytes, std::memory_order_relaxed); }
  void AddWritten(uint64_t bytes) { written_bytes_.fetch_add(bytes, std::memory_order_relaxed); }
  uint64_t written_bytes() const { return written_bytes_.load(std::memory_order_relaxed); }

  // The endpoint whose Status the metrics show (null: none, e.g. between
  // roles), and the role it serves. Returns once no render uses the one
  // before: the caller may then destroy it.
  void SetEndpoint(GrantFsEndpoint* endpoint, const std::string& role) ABSL_LOCKS_EXCLUDED(mu_);

  // The exposition (common/metrics.h).
  std::string Render() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  OpLatencies calls_{"grantfs_server_call_seconds",
                     "calls served, by method, and how long each took (from admission to reply)"};
  std::atomic<uint64_t> read_bytes_{0}, written_bytes_{0};
  absl::Mutex mu_;
  GrantFsEndpoint* endpoint_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string role_ ABSL_GUARDED_BY(mu_) = "starting";
  int roles_started_ ABSL_GUARDED_BY(mu_) = 0;   // SetEndpoint with an endpoint
  uint64_t takeovers_ ABSL_GUARDED_BY(mu_) = 0;  // of them, "primary" after another
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_SERVER_METRICS_H_
