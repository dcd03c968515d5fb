// RPC microbenchmarks of GrantFS's own RPC path (RpcClient -> gRPC ->
// GrantFsService::Echo, no store access): round-trip latency and bandwidth
// for one payload size, and messages per second from concurrent callers.
// Each function uses the caller's RpcClient (thread-safe) and returns an
// error status at the first failed call.
#ifndef GRANTFS_BENCH_RPC_BENCH_H_
#define GRANTFS_BENCH_RPC_BENCH_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/rpc_client.h"

namespace grantfs {
namespace bench {

// Sequential Echo calls of one payload size for a while.
struct EchoLatency {
  uint64_t calls = 0;
  double median_us = 0, p99_us = 0, min_us = 0;  // round trip of one call
  double mb_per_s = 0;  // payload bytes moved (both directions) per second, 1 MB = 1e6 B
};

// Calls Echo back to back for `duration` (at least 3 calls): one-way sends
// `bytes` of random payload and gets an empty reply; request/reply
// (`request_reply`) gets the same number of bytes back.
absl::StatusOr<EchoLatency> MeasureEchoLatency(RpcClient* rpc, uint32_t bytes, bool request_reply,
                                               absl::Duration duration);

struct EchoRate {
  uint64_t calls = 0;         // answered OK
  double msgs_per_s = 0;      // OK one-way calls per second, all callers together
  uint64_t failed = 0;        // calls the server refused or that failed
  std::string first_failure;  // the gRPC status of the first failed call
};

// `callers` threads each call Echo (one-way, `bytes` of payload) back to
// back for `duration`, all on the one channel of `rpc`. Failed calls are
// counted, not retried: a server with fewer threads than callers refuses
// calls (RESOURCE_EXHAUSTED), and that is part of the result.
absl::StatusOr<EchoRate> MeasureEchoRate(RpcClient* rpc, uint32_t bytes, int callers,
                                         absl::Duration duration);

}  // namespace bench
}  // namespace grantfs

#endif  // GRANTFS_BENCH_RPC_BENCH_H_
