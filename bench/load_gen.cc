#include "bench/load_gen.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/stats.h"

namespace grantfs {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "OTHER";
  }
}

// What every call records, shared with the gRPC callbacks (which may run
// after RunLoad gave up waiting, hence the shared_ptr).
struct Tally {
  explicit Tally(size_t n) : latency_ms(n, -1), done_at(n) {}
  // Written once per call index by its own callback; read after the
  // callback has counted the call down under mu (which orders the writes).
  std::vector<double> latency_ms;  // -1: not OK
  std::vector<Clock::time_point> done_at;

  absl::Mutex mu;
  int outstanding ABSL_GUARDED_BY(mu) = 0;
  std::map<std::string, uint64_t> failures ABSL_GUARDED_BY(mu);
};

// One call in flight: owns what gRPC needs until the callback.
template <typename Req, typename Reply>
struct Call {
  grpc::ClientContext ctx;
  Req req;
  Reply reply;
};

void Finish(const std::shared_ptr<Tally>& tally, size_t i, Clock::time_point due,
            const grpc::Status& s, int err) {
  const auto now = Clock::now();
  std::string failure;
  if (!s.ok()) {
    failure = CodeName(s.error_code());
  } else if (err != 0) {
    failure = absl::StrCat("errno ", err);
  } else {
    tally->latency_ms[i] = std::chrono::duration<double, std::milli>(now - due).count();
  }
  tally->done_at[i] = now;
  absl::MutexLock l(&tally->mu);
  if (!failure.empty()) ++tally->failures[failure];
  --tally->outstanding;
}

}  // namespace

absl::StatusOr<LoadResult> RunLoad(RpcClient* rpc, const LoadOptions& o) {
  if (o.op != "getattr" && o.op != "setattr" && o.op != "echo") {
    return absl::InvalidArgumentError("op must be getattr, setattr or echo, not '" + o.op + "'");
  }
  if (!(o.rate > 0) || o.duration <= absl::ZeroDuration() || o.max_outstanding < 1) {
    return absl::InvalidArgumentError("rate, duration and max_outstanding must be positive");
  }
  const double secs = absl::ToDoubleSeconds(o.duration);
  const double offered = std::floor(o.rate * secs);
  if (offered < 1 || offered > 50e6) {
    return absl::InvalidArgumentError("rate * duration must be between 1 and 50 million calls");
  }
  const size_t n = static_cast<size_t>(offered);
  auto tally = std::make_shared<Tally>(n);
  LoadResult r;
  r.offered = n;
  std::vector<bool> sent(n, false);
  const auto start = Clock::now() + std::chrono::milliseconds(1);
  const auto window_end = start + absl::ToChronoNanoseconds(o.duration);
  auto due_of = [&](size_t i) {
    return start + std::chrono::nanoseconds(static_cast<int64_t>(i * 1e9 / o.rate));
  };
  for (size_t i = 0; i < n; ++i) {
    const auto due = due_of(i);
    if (Clock::now() < due) std::this_thread::sleep_until(due);
    r.max_send_lag_ms = std::max(
        r.max_send_lag_ms, std::chrono::duration<double, std::milli>(Clock::now() - due).count());
    {
      absl::MutexLock l(&tally->mu);
      if (tally->outstanding >= o.max_outstanding) {
        ++r.dropped;
        continue;
      }
      ++tally->outstanding;
    }
    sent[i] = true;
    if (o.op == "getattr") {
      auto* c = new Call<proto::GetAttrRequest, proto::AttrReply>;
      rpc->PrepareContext(&c->ctx, o.call_timeout);
      c->req.set_ino(1);
      rpc->stub()->async()->GetAttr(&c->ctx, &c->req, &c->reply,
                                    [c, tally, i, due](grpc::Status s) {
                                      const int err = c->reply.err();
                                      delete c;  // before the count-down lets RunLoad return
                                      Finish(tally, i, due, s, err);
                                    });
    } else if (o.op == "setattr") {
      auto* c = new Call<proto::SetAttrRequest, proto::AttrReply>;
      rpc->PrepareContext(&c->ctx, o.call_timeout);
      c->req.set_ino(1);
      c->req.set_valid(proto::SetAttrRequest::MTIME_NOW);
      rpc->stub()->async()->SetAttr(&c->ctx, &c->req, &c->reply,
                                    [c, tally, i, due](grpc::Status s) {
                                      const int err = c->reply.err();
                                      delete c;  // before the count-down lets RunLoad return
                                      Finish(tally, i, due, s, err);
                                    });
    } else {
      auto* c = new Call<proto::EchoRequest, proto::EchoReply>;
      rpc->PrepareContext(&c->ctx, o.call_timeout);
      rpc->stub()->async()->Echo(&c->ctx, &c->req, &c->reply, [c, tally, i, due](grpc::Status s) {
        const int err = c->reply.err();
        delete c;  // before the count-down lets RunLoad return
        Finish(tally, i, due, s, err);
      });
    }
  }
  // Every call has a deadline; allow it plus a margin for the callbacks.
  {
    absl::MutexLock l(&tally->mu);
    auto all_done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tally->mu) {
      return tally->outstanding == 0;
    };
    if (!tally->mu.AwaitWithTimeout(absl::Condition(&all_done),
                                    o.call_timeout + absl::Seconds(10))) {
      return absl::DeadlineExceededError(
          absl::StrCat(tally->outstanding, " calls still unanswered past their deadline"));
    }
    r.failures = tally->failures;
  }
  std::vector<double> ok_ms;
  uint64_t in_window = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!sent[i]) continue;
    if (tally->latency_ms[i] < 0) {
      ++r.failed;
      continue;
    }
    ok_ms.push_back(tally->latency_ms[i]);
    if (tally->done_at[i] <= window_end) ++in_window;
  }
  r.ok = ok_ms.size();
  r.achieved_per_s = in_window / secs;
  if (!ok_ms.empty()) {
    Summary s = Summarize(ok_ms);
    std::sort(ok_ms.begin(), ok_ms.end());
    r.mean_ms = s.mean;
    r.p50_ms = Percentile(ok_ms, 50);
    r.p99_ms = Percentile(ok_ms, 99);
    r.max_ms = s.max;
  }
  return r;
}

}  // namespace bench
}  // namespace grantfs
