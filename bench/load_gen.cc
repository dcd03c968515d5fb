#include "bench/load_gen.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
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
  Tally(RpcClient* rpc, const LoadOptions& o, size_t n, Clock::time_point start)
      : rpc(rpc), options(o), start(start), latency_ms(n, -1), done_at(n) {}
  RpcClient* const rpc;
  const LoadOptions options;
  const Clock::time_point start;
  // Written once per call index by its own callback; read after the
  // callback has counted the call down under mu (which orders the writes).
  std::vector<double> latency_ms;  // -1: not OK
  std::vector<Clock::time_point> done_at;

  Clock::time_point Due(size_t i) const {
    return start + std::chrono::nanoseconds(static_cast<int64_t>(i * 1e9 / options.rate));
  }

  absl::Mutex mu;
  int outstanding ABSL_GUARDED_BY(mu) = 0;  // sent or waiting here
  int in_flight ABSL_GUARDED_BY(mu) = 0;    // sent
  // Calls due but not sent: the connection has max_in_flight open. Sent in
  // order as earlier ones finish.
  std::deque<size_t> waiting ABSL_GUARDED_BY(mu);
  bool stopped ABSL_GUARDED_BY(mu) = false;  // RunLoad returned: send nothing more
  // Callbacks between taking a waiting call and starting it (they use rpc,
  // which RunLoad's caller owns): RunLoad waits for none before it returns.
  int sending ABSL_GUARDED_BY(mu) = 0;
  double max_send_lag_ms ABSL_GUARDED_BY(mu) = 0;
  std::map<std::string, uint64_t> failures ABSL_GUARDED_BY(mu);
};

// One call in flight: owns what gRPC needs until the callback.
template <typename Req, typename Reply>
struct Call {
  grpc::ClientContext ctx;
  Req req;
  Reply reply;
};

void Send(const std::shared_ptr<Tally>& tally, size_t i);

// Call i finished: records it, then sends the next call waiting here, if
// any, in its place.
void Finish(const std::shared_ptr<Tally>& tally, size_t i, const grpc::Status& s, int err) {
  const auto now = Clock::now();
  std::string failure;
  if (!s.ok()) {
    failure = CodeName(s.error_code());
  } else if (err != 0) {
    failure = absl::StrCat("errno ", err);
  } else {
    tally->latency_ms[i] = std::chrono::duration<double, std::milli>(now - tally->Due(i)).count();
  }
  tally->done_at[i] = now;
  size_t next = 0;
  bool send = false;
  {
    absl::MutexLock l(&tally->mu);
    if (!failure.empty()) ++tally->failures[failure];
    --tally->outstanding;
    // A waiting call past its deadline (counted from when it was due) is
    // not sent: it failed like a call the server did not answer in time.
    const auto timeout = absl::ToChronoNanoseconds(tally->options.call_timeout);
    while (!tally->waiting.empty() && !tally->stopped) {
      const size_t j = tally->waiting.front();
      tally->waiting.pop_front();
      if (tally->Due(j) + timeout <= now) {
        ++tally->failures["DEADLINE_EXCEEDED"];
        tally->done_at[j] = now;
        --tally->outstanding;
        continue;
      }
      next = j;
      send = true;
      break;
    }
    if (send) {
      ++tally->sending;
    } else {
      --tally->in_flight;
    }
  }
  if (send) {
    Send(tally, next);
    absl::MutexLock l(&tally->mu);
    --tally->sending;
  }
}

// Starts call i on the channel (counted in in_flight by the caller).
void Send(const std::shared_ptr<Tally>& tally, size_t i) {
  const LoadOptions& o = tally->options;
  RpcClient* rpc = tally->rpc;
  const auto late = Clock::now() - tally->Due(i);
  {
    const double lag = std::chrono::duration<double, std::milli>(late).count();
    absl::MutexLock l(&tally->mu);
    tally->max_send_lag_ms = std::max(tally->max_send_lag_ms, lag);
  }
  // The deadline counts from when the call was due, not from when it left.
  const absl::Duration timeout =
      std::max(o.call_timeout - absl::FromChrono(late), absl::Milliseconds(1));
  if (o.op == "getattr") {
    auto* c = new Call<proto::GetAttrRequest, proto::AttrReply>;
    rpc->PrepareContext(&c->ctx, timeout);
    c->req.set_ino(1);
    rpc->stub()->async()->GetAttr(&c->ctx, &c->req, &c->reply, [c, tally, i](grpc::Status s) {
      const int err = c->reply.err();
      delete c;  // before the count-down lets RunLoad return
      Finish(tally, i, s, err);
    });
  } else if (o.op == "setattr") {
    auto* c = new Call<proto::SetAttrRequest, proto::AttrReply>;
    rpc->PrepareContext(&c->ctx, timeout);
    c->req.set_ino(1);
    c->req.set_valid(proto::SetAttrRequest::MTIME_NOW);
    rpc->stub()->async()->SetAttr(&c->ctx, &c->req, &c->reply, [c, tally, i](grpc::Status s) {
      const int err = c->reply.err();
      delete c;  // before the count-down lets RunLoad return
      Finish(tally, i, s, err);
    });
  } else {
    auto* c = new Call<proto::EchoRequest, proto::EchoReply>;
    rpc->PrepareContext(&c->ctx, timeout);
    rpc->stub()->async()->Echo(&c->ctx, &c->req, &c->reply, [c, tally, i](grpc::Status s) {
      const int err = c->reply.err();
      delete c;  // before the count-down lets RunLoad return
      Finish(tally, i, s, err);
    });
  }
}

}  // namespace

absl::StatusOr<LoadResult> RunLoad(RpcClient* rpc, const LoadOptions& o) {
  if (o.op != "getattr" && o.op != "setattr" && o.op != "echo") {
    return absl::InvalidArgumentError("op must be getattr, setattr or echo, not '" + o.op + "'");
  }
  if (!(o.rate > 0) || o.duration <= absl::ZeroDuration() || o.max_outstanding < 1 ||
      o.max_in_flight < 1) {
    return absl::InvalidArgumentError(
        "rate, duration, max_outstanding and max_in_flight must be positive");
  }
  const double secs = absl::ToDoubleSeconds(o.duration);
  const double offered = std::floor(o.rate * secs);
  if (offered < 1 || offered > 50e6) {
    return absl::InvalidArgumentError("rate * duration must be between 1 and 50 million calls");
  }
  const size_t n = static_cast<size_t>(offered);
  const auto start = Clock::now() + std::chrono::milliseconds(1);
  auto tally = std::make_shared<Tally>(rpc, o, n, start);
  LoadResult r;
  r.offered = n;
  std::vector<bool> sent(n, false);
  const auto window_end = start + absl::ToChronoNanoseconds(o.duration);
  // The generator wakes at most every kBatch: at high rates the calls that
  // fell due meanwhile go out together (a wake-up per call, 64,000 a
  // second, cost the CPU the server needs on a small machine). A call may
  // so leave up to kBatch late; its response time counts from when it was
  // due all the same.
  constexpr auto kBatch = std::chrono::microseconds(100);
  auto woke = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    const auto due = tally->Due(i);
    if (Clock::now() < due) {
      std::this_thread::sleep_until(std::max(due, woke + kBatch));
      woke = Clock::now();
    }
    {
      absl::MutexLock l(&tally->mu);
      if (tally->outstanding >= o.max_outstanding) {
        ++r.dropped;
        continue;
      }
      ++tally->outstanding;
      sent[i] = true;
      if (tally->in_flight >= o.max_in_flight) {
        tally->waiting.push_back(i);  // sent by the callback of an earlier call
        continue;
      }
      ++tally->in_flight;
    }
    Send(tally, i);
  }
  // Every call has a deadline; allow it plus a margin for the callbacks.
  {
    absl::MutexLock l(&tally->mu);
    auto all_done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tally->mu) {
      return tally->outstanding == 0;
    };
    if (!tally->mu.AwaitWithTimeout(absl::Condition(&all_done),
                                    o.call_timeout + absl::Seconds(10))) {
      tally->stopped = true;
      auto not_sending = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tally->mu) {
        return tally->sending == 0;
      };
      tally->mu.Await(absl::Condition(&not_sending));  // a Send does not block
      return absl::DeadlineExceededError(
          absl::StrCat(tally->outstanding, " calls still unanswered past their deadline"));
    }
    r.failures = tally->failures;
    r.max_send_lag_ms = tally->max_send_lag_ms;
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
