// An open-loop load generator: calls are offered at a fixed rate whether or
// not earlier ones have been answered (the SFS way), so an overloaded
// server shows as growing response times and failed calls instead of a
// slower client. Calls are asynchronous (gRPC callback API) on the one
// channel of an RpcClient, at most LoadOptions::max_in_flight at once.
#ifndef GRANTFS_BENCH_LOAD_GEN_H_
#define GRANTFS_BENCH_LOAD_GEN_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/rpc_client.h"

namespace grantfs {
namespace bench {

struct LoadOptions {
  // The call offered: "getattr" (GetAttr of the root inode: a metadata read
  // from RocksDB), "setattr" (SetAttr of the root's mtime to now: a
  // metadata change, committed to the WAL and, with a replica, replicated
  // before the answer) or "echo" (Echo with no payload: the RPC path alone).
  std::string op = "getattr";
  // Calls offered per second, evenly spaced; > 0.
  double rate = 1000;
  // How long calls are offered; > 0.
  absl::Duration duration = absl::Seconds(5);
  // Deadline of each call.
  absl::Duration call_timeout = absl::Seconds(5);
  // A call due while this many are unanswered is not sent (counted as
  // dropped): bounds the generator's memory when the server stalls.
  int max_outstanding = 20000;
  // Calls open on the channel at once: the server lets a connection have
  // 256 (HTTP/2 MAX_CONCURRENT_STREAMS). Calls due past that wait in the
  // generator, in order, each sent when an earlier one is answered; their
  // response time and deadline still count from when they were due. (Left
  // to gRPC, the excess waits in its transport, which costs the generator
  // CPU that, on a small machine, the server needs.)
  int max_in_flight = 256;
};

struct LoadResult {
  uint64_t offered = 0;  // rate * duration
  uint64_t dropped = 0;  // not sent: max_outstanding calls were in flight
  uint64_t ok = 0;       // answered without error
  uint64_t failed = 0;   // gRPC error or a non-zero err in the reply
  // Failed calls by gRPC status code name ("RESOURCE_EXHAUSTED") or
  // "errno N" for a reply's err.
  std::map<std::string, uint64_t> failures;
  // Calls answered OK within the offering window, per second of it.
  double achieved_per_s = 0;
  // Response time of OK calls, from the moment each call was due (so time a
  // call waited behind a late generator counts too), in milliseconds.
  double mean_ms = 0, p50_ms = 0, p99_ms = 0, max_ms = 0;
  // The latest a call was sent after it was due (the generator's own lag,
  // and the wait for one of max_in_flight).
  double max_send_lag_ms = 0;
};

// Offers the load, then waits for every call sent to finish (each has a
// deadline). InvalidArgument for bad options.
absl::StatusOr<LoadResult> RunLoad(RpcClient* rpc, const LoadOptions& options);

}  // namespace bench
}  // namespace grantfs

#endif  // GRANTFS_BENCH_LOAD_GEN_H_
