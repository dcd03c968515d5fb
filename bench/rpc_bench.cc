#include "bench/rpc_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "bench/stats.h"

namespace grantfs {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

// Random bytes: nothing on the path can compress them.
std::string RandomPayload(uint32_t bytes, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(bytes, '\0');
  for (auto& c : s) c = static_cast<char>(gen());
  return s;
}

absl::Status CallEcho(RpcClient* rpc, proto::EchoRequest* req, proto::EchoReply* reply) {
  return rpc->Call("Echo", &proto::GrantFs::Stub::Echo, req, reply);
}

}  // namespace

absl::StatusOr<EchoLatency> MeasureEchoLatency(RpcClient* rpc, uint32_t bytes, bool request_reply,
                                               absl::Duration duration) {
  proto::EchoRequest req;
  req.set_payload(RandomPayload(bytes, bytes + 1));
  req.set_reply_bytes(request_reply ? bytes : 0);
  proto::EchoReply reply;
  // Warm up: the connection, and the allocations of this size on both ends.
  for (int i = 0; i < 3; ++i) {
    if (absl::Status s = CallEcho(rpc, &req, &reply); !s.ok()) return s;
  }
  std::vector<double> us;
  const auto start = Clock::now();
  const auto until = start + absl::ToChronoNanoseconds(duration);
  while (us.size() < 3 || Clock::now() < until) {
    const auto t = Clock::now();
    if (absl::Status s = CallEcho(rpc, &req, &reply); !s.ok()) return s;
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    if (reply.payload().size() != req.reply_bytes()) {
      return absl::InternalError("Echo replied with " + std::to_string(reply.payload().size()) +
                                 " bytes, asked for " + std::to_string(req.reply_bytes()));
    }
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  EchoLatency r;
  r.calls = us.size();
  Summary s = Summarize(us);
  std::sort(us.begin(), us.end());
  r.median_us = s.median;
  r.min_us = s.min;
  r.p99_us = Percentile(us, 99);
  r.mb_per_s = r.calls * double(bytes) * (request_reply ? 2 : 1) / elapsed / 1e6;
  return r;
}

absl::StatusOr<EchoRate> MeasureEchoRate(RpcClient* rpc, uint32_t bytes, int callers,
                                         absl::Duration duration) {
  if (callers < 1) return absl::InvalidArgumentError("callers must be at least 1");
  std::atomic<uint64_t> calls{0}, failed{0};
  absl::Mutex mu;
  std::string first_failure;  // guarded by mu
  const auto start = Clock::now();
  const auto until = start + absl::ToChronoNanoseconds(duration);
  std::vector<std::thread> threads;
  for (int t = 0; t < callers; ++t) {
    threads.emplace_back([&, t] {
      proto::EchoRequest req;
      req.set_payload(RandomPayload(bytes, t + 1));
      proto::EchoReply reply;
      // The stub directly: RpcClient::Call would retry and log every refusal.
      while (Clock::now() < until) {
        grpc::ClientContext ctx;
        rpc->PrepareContext(&ctx, rpc->options().call_timeout);
        grpc::Status s = rpc->stub()->Echo(&ctx, req, &reply);
        if (s.ok() && reply.err() == 0) {
          calls.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        failed.fetch_add(1, std::memory_order_relaxed);
        absl::MutexLock l(&mu);
        if (first_failure.empty()) {
          first_failure = s.ok() ? "errno " + std::to_string(reply.err())
                                 : std::to_string(s.error_code()) + " " + s.error_message();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  EchoRate r;
  r.calls = calls.load();
  r.failed = failed.load();
  r.msgs_per_s = r.calls / elapsed;
  absl::MutexLock l(&mu);
  r.first_failure = first_failure;
  if (r.calls == 0) return absl::UnavailableError("no Echo call succeeded: " + first_failure);
  return r;
}

}  // namespace bench
}  // namespace grantfs
