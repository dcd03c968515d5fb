#include "client/grant_pool.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/test_util.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;

// The server's side of the grant RPC: records every call, grants what is
// asked (or at most `limit` per call, or fails with `error`), and keeps the
// total granted so the tests can check the ledger exactly.
class FakeGrantServer {
 public:
  struct Call {
    uint64_t wanted;
    uint64_t back;
  };

  absl::StatusOr<uint64_t> Grant(uint64_t wanted, uint64_t back) {
    absl::MutexLock l(&mu_);
    calls_.push_back({wanted, back});
    if (!error_.ok()) return error_;
    const uint64_t g = limit_.has_value() ? std::min(wanted, *limit_) : wanted;
    granted_ += g;
    return g;
  }
  GrantPool::GrantRpc Rpc() {
    return [this](uint64_t wanted, uint64_t back) { return Grant(wanted, back); };
  }

  // Grants at most `limit` bytes per call from now on.
  void set_limit(uint64_t limit) {
    absl::MutexLock l(&mu_);
    limit_ = limit;
  }
  void set_error(absl::Status s) {
    absl::MutexLock l(&mu_);
    error_ = std::move(s);
  }
  size_t call_count() {
    absl::MutexLock l(&mu_);
    return calls_.size();
  }
  Call call(size_t i) {
    absl::MutexLock l(&mu_);
    return calls_.at(i);
  }
  uint64_t granted() {
    absl::MutexLock l(&mu_);
    return granted_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  std::optional<uint64_t> limit_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  uint64_t granted_ ABSL_GUARDED_BY(mu_) = 0;
};

GrantPoolOptions Options(Clock* clock, uint64_t initial = 1 * kMiB, uint64_t max = 8 * kMiB) {
  GrantPoolOptions o;
  o.initial_refill_bytes = initial;
  o.max_refill_bytes = max;
  o.low_watermark = 0.5;
  o.clock = clock;
  return o;
}

TEST(GrantPool, DebitsWithinThePoolMakeNoRpc) {
  FakeClock clock;
  FakeGrantServer server;
  GrantPool pool(Options(&clock), server.Rpc());
  ASSERT_EQ(pool.MaybeRefill(), 1 * kMiB);
  ASSERT_EQ(server.call_count(), 1u);
  EXPECT_EQ(server.call(0).wanted, 1 * kMiB);
  EXPECT_EQ(server.call(0).back, 0u);

  for (int i = 0; i < 256; ++i) ASSERT_TRUE(pool.Debit(4 * kKiB)) << i;
  EXPECT_EQ(server.call_count(), 1u);
  EXPECT_EQ(pool.available(), 0u);
  EXPECT_TRUE(pool.Debit(0));  // nothing to take: never an RPC
  EXPECT_EQ(server.call_count(), 1u);
}

TEST(GrantPool, EmptyPoolMakesExactlyOneRpcPerShortDebitThenSucceeds) {
  FakeClock clock;
  FakeGrantServer server;
  GrantPool pool(Options(&clock), server.Rpc());

  ASSERT_TRUE(pool.Debit(4 * kKiB));
  ASSERT_EQ(server.call_count(), 1u);
  EXPECT_EQ(server.call(0).wanted, 1 * kMiB);  // the refill size covers it
  EXPECT_EQ(server.call(0).back, 0u);
  EXPECT_EQ(pool.available(), 1 * kMiB - 4 * kKiB);

  // Short by more than a refill: one RPC for at least the debit.
  ASSERT_TRUE(pool.Debit(3 * kMiB));
  ASSERT_EQ(server.call_count(), 2u);
  EXPECT_GE(server.call(1).wanted, 3 * kMiB);
  EXPECT_EQ(pool.available(), server.granted() - 4 * kKiB - 3 * kMiB);

  // Drain, then every short debit costs exactly one more call.
  ASSERT_TRUE(pool.Debit(pool.available()));
  for (size_t i = 0; i < 5; ++i) {
    const size_t before = server.call_count();
    ASSERT_TRUE(pool.Debit(2 * kMiB)) << i;
    EXPECT_EQ(server.call_count(), before + 1) << i;
    ASSERT_TRUE(pool.Debit(pool.available()));
  }
  EXPECT_EQ(pool.available(), 0u);
}

TEST(GrantPool, ServerWithNothingToGiveMakesDebitFail) {
  FakeClock clock;
  FakeGrantServer server;
  server.set_limit(0);
  GrantPool pool(Options(&clock), server.Rpc());

  EXPECT_FALSE(pool.Debit(4 * kKiB));
  EXPECT_EQ(server.call_count(), 1u);
  EXPECT_EQ(pool.available(), 0u);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(pool.Debit(1)) << i;
  // Each failing debit asks the server at most once (the write then goes
  // through, allocating at the server).
  EXPECT_LE(server.call_count(), 11u);
  EXPECT_EQ(pool.available(), 0u);
  EXPECT_EQ(server.granted(), 0u);
}

TEST(GrantPool, PartialGrantIsKeptAndRpcsAreBounded) {
  FakeClock clock;
  FakeGrantServer server;
  server.set_limit(1000);  // less than any debit below
  GrantPool pool(Options(&clock), server.Rpc());

  EXPECT_FALSE(pool.Debit(4 * kKiB));
  EXPECT_GE(server.call_count(), 1u);
  EXPECT_LE(server.call_count(), 2u);
  // What the server did grant is in the pool, not lost.
  EXPECT_EQ(pool.available(), server.granted());
  EXPECT_TRUE(pool.Debit(server.granted()));
  EXPECT_EQ(pool.available(), 0u);
}

TEST(GrantPool, RpcErrorMakesDebitFail) {
  FakeClock clock;
  FakeGrantServer server;
  server.set_error(absl::UnavailableError("primary gone"));
  GrantPool pool(Options(&clock), server.Rpc());

  EXPECT_FALSE(pool.Debit(4 * kKiB));
  EXPECT_EQ(server.call_count(), 1u);
  EXPECT_EQ(pool.available(), 0u);

  server.set_error(absl::OkStatus());
  EXPECT_TRUE(pool.Debit(4 * kKiB));
  EXPECT_EQ(server.call_count(), 2u);
  EXPECT_EQ(pool.available(), 1 * kMiB - 4 * kKiB);
}

TEST(GrantPool, SettleReturnsTheDifference) {
  FakeClock clock;
  FakeGrantServer server;
  GrantPool pool(Options(&clock), server.Rpc());
  ASSERT_EQ(pool.MaybeRefill(), 1 * kMiB);

  ASSERT_TRUE(pool.Debit(8192));
  EXPECT_EQ(pool.available(), 1 * kMiB - 8192);
  pool.Settle(8192, 0);  // an overwrite: used nothing
  EXPECT_EQ(pool.available(), 1 * kMiB);

  ASSERT_TRUE(pool.Debit(8192));
  pool.Settle(8192, 4096);
  EXPECT_EQ(pool.available(), 1 * kMiB - 4096);

  ASSERT_TRUE(pool.Debit(4096));
  EXPECT_EQ(pool.available(), 1 * kMiB - 8192);
  pool.Settle(4096, 8192);  // used more than debited: 4096 more
  EXPECT_EQ(pool.available(), 1 * kMiB - 12288);

  pool.Refund(8192);
  EXPECT_EQ(pool.available(), 1 * kMiB - 4096);
  EXPECT_EQ(server.call_count(), 1u);  // settling never calls the server
}

TEST(GrantPool, SettleOverdrawBecomesDebt) {
  FakeClock clock;
  FakeGrantServer server;
  GrantPool pool(Options(&clock, /*initial=*/4096, /*max=*/4096), server.Rpc());
  ASSERT_EQ(pool.MaybeRefill(), 4096u);
  ASSERT_TRUE(pool.Debit(4096));
  ASSERT_TRUE(pool.Debit(0));
  ASSERT_EQ(pool.available(), 0u);
  pool.Settle(4096, 8192);
  EXPECT_EQ(pool.available(), 0u);  // not wrapped around to ~2^64
  EXPECT_EQ(pool.debt(), 4096u);
  EXPECT_EQ(pool.outstanding(), 0u);
  pool.Refund(4096);  // pays the debt first
  EXPECT_EQ(pool.available(), 0u);
  EXPECT_EQ(pool.debt(), 0u);
}

TEST(GrantPool, MaybeRefillOnlyUnderTheWatermark) {
  FakeClock clock;
  FakeGrantServer server;
  GrantPool pool(Options(&clock), server.Rpc());

  EXPECT_EQ(pool.MaybeRefill(), 1 * kMiB);  // empty: under the watermark
  ASSERT_EQ(server.call_count(), 1u);
  EXPECT_EQ(pool.MaybeRefill(), 0u);  // full
  EXPECT_EQ(server.call_count(), 1u);

  ASSERT_TRUE(pool.Debit(512 * kKiB));  // exactly at the watermark
  EXPECT_EQ(pool.MaybeRefill(), 0u);
  EXPECT_EQ(server.call_count(), 1u);

  ASSERT_TRUE(pool.Debit(1));  // one byte under it
  EXPECT_EQ(pool.MaybeRefill(), 1 * kMiB);
  ASSERT_EQ(server.call_count(), 2u);
  EXPECT_EQ(server.call(1).wanted, 1 * kMiB);
  EXPECT_EQ(pool.available(), 2 * kMiB - 512 * kKiB - 1);
  EXPECT_EQ(pool.MaybeRefill(), 0u);
  EXPECT_EQ(server.call_count(), 2u);
}

TEST(GrantPool, RefillSizeGrowsWithTheWriteRate) {
  FakeClock clock;
  FakeGrantServer server;
  GrantPool pool(Options(&clock, /*initial=*/1 * kMiB, /*max=*/8 * kMiB), server.Rpc());
  ASSERT_EQ(pool.refill_size(), 1 * kMiB);

  // 6 MiB in 2 s is 3 MiB/s: the refill becomes twice that, 6 MiB.
  ASSERT_TRUE(pool.Debit(6 * kMiB));
  ASSERT_EQ(server.call_count(), 1u);
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(pool.MaybeRefill(), 6 * kMiB);
  ASSERT_EQ(server.call_count(), 2u);
  EXPECT_EQ(server.call(1).wanted, 6 * kMiB);
  EXPECT_GT(server.call(1).wanted, 1 * kMiB);
  EXPECT_EQ(pool.refill_size(), 6 * kMiB);

  // 64 MiB in 2 s would be 64 MiB: clamped at the maximum.
  ASSERT_TRUE(pool.Debit(pool.available()));
  ASSERT_TRUE(pool.Debit(64 * kMiB));
  clock.Advance(absl::Seconds(2));
  ASSERT_TRUE(pool.Debit(pool.available()));
  const size_t before = server.call_count();
  EXPECT_EQ(pool.MaybeRefill(), 8 * kMiB);
  ASSERT_EQ(server.call_count(), before + 1);
  EXPECT_EQ(server.call(before).wanted, 8 * kMiB);
  EXPECT_EQ(pool.refill_size(), 8 * kMiB);
}

TEST(GrantPool, SlowWriterKeepsTheInitialRefillSize) {
  FakeClock clock;
  FakeGrantServer server;
  GrantPool pool(Options(&clock, /*initial=*/1 * kMiB, /*max=*/8 * kMiB), server.Rpc());
  // 600 KiB in 2 s is 300 KiB/s: twice that is under the initial size.
  ASSERT_TRUE(pool.Debit(600 * kKiB));
  ASSERT_EQ(server.call_count(), 1u);
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(pool.MaybeRefill(), 1 * kMiB);
  ASSERT_EQ(server.call_count(), 2u);
  EXPECT_EQ(server.call(1).wanted, 1 * kMiB);
  EXPECT_EQ(pool.refill_size(), 1 * kMiB);
}

TEST(GrantPool, RefillSizeIsNotResizedWithinASecond) {
  FakeClock clock;
  FakeGrantServer server;
  GrantPool pool(Options(&clock), server.Rpc());
  ASSERT_TRUE(pool.Debit(6 * kMiB));
  clock.Advance(absl::Milliseconds(500));  // too short a window to measure
  EXPECT_EQ(pool.MaybeRefill(), 1 * kMiB);
  EXPECT_EQ(pool.refill_size(), 1 * kMiB);
}

TEST(GrantPool, AfterTheServerSaidZeroMaybeRefillWaitsOneSecond) {
  FakeClock clock;
  FakeGrantServer server;
  server.set_limit(0);
  GrantPool pool(Options(&clock), server.Rpc());

  EXPECT_EQ(pool.MaybeRefill(), 0u);
  ASSERT_EQ(server.call_count(), 1u);
  EXPECT_EQ(pool.MaybeRefill(), 0u);
  EXPECT_EQ(server.call_count(), 1u);
  clock.Advance(absl::Milliseconds(999));
  EXPECT_EQ(pool.MaybeRefill(), 0u);
  EXPECT_EQ(server.call_count(), 1u);
  clock.Advance(absl::Milliseconds(1));
  EXPECT_EQ(pool.MaybeRefill(), 0u);
  EXPECT_EQ(server.call_count(), 2u);  // one second later: asks again

  // The server has space again; the next ask a second later gets it.
  server.set_limit(UINT64_MAX);
  EXPECT_EQ(pool.MaybeRefill(), 0u);
  EXPECT_EQ(server.call_count(), 2u);
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(pool.MaybeRefill(), 1 * kMiB);
  EXPECT_EQ(server.call_count(), 3u);
  EXPECT_EQ(pool.available(), 1 * kMiB);
}

TEST(GrantPool, AfterAnRpcErrorMaybeRefillWaitsOneSecond) {
  FakeClock clock;
  FakeGrantServer server;
  server.set_error(absl::UnavailableError("failover"));
  GrantPool pool(Options(&clock), server.Rpc());

  EXPECT_EQ(pool.MaybeRefill(), 0u);
  ASSERT_EQ(server.call_count(), 1u);
  server.set_error(absl::OkStatus());
  EXPECT_EQ(pool.MaybeRefill(), 0u);
  EXPECT_EQ(server.call_count(), 1u);
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(pool.MaybeRefill(), 1 * kMiB);
  EXPECT_EQ(server.call_count(), 2u);
}

TEST(GrantPool, BackgroundRefillerStartsWithTheFirstWriteAndTopsUpUnderTheWatermark) {
  FakeGrantServer server;
  GrantPool pool(Options(Clock::Real()), server.Rpc());
  pool.Start();
  // An idle mount holds no grant: nothing is asked before the first write.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(server.call_count(), 0u);

  ASSERT_TRUE(pool.Debit(100 * kKiB));  // empty pool: one grant RPC of its own
  EXPECT_EQ(server.call_count(), 1u);
  EXPECT_EQ(pool.available(), 1 * kMiB - 100 * kKiB);

  ASSERT_TRUE(pool.Debit(500 * kKiB));  // 424 KiB left: under half of 1 MiB
  ASSERT_TRUE(WaitFor([&] { return pool.available() == 2 * kMiB - 600 * kKiB; }));
  EXPECT_EQ(server.call_count(), 2u);
  pool.Stop();
  pool.Stop();  // idempotent
  EXPECT_EQ(pool.available(), server.granted() - 600 * kKiB);
}

TEST(GrantPool, ConcurrentDebitsKeepTheLedgerExact) {
  FakeGrantServer server;
  GrantPool pool(Options(Clock::Real(), 256 * kKiB, 4 * kMiB), server.Rpc());
  pool.Start();
  constexpr int kThreads = 4;
  constexpr int kDebits = 2000;
  std::atomic<uint64_t> debited{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kDebits; ++i) {
        const uint64_t n = 4096 * (1 + (i + t) % 7);
        if (pool.Debit(n)) {
          debited += n;
          if (i % 5 == 0) {
            pool.Settle(n, n / 2);
            debited -= n - n / 2;
          }
        } else {
          ++failed;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  pool.Stop();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(pool.available(), server.granted() - debited.load());
}

}  // namespace
}  // namespace grantfs

namespace grantfs {
namespace {

TEST(GrantPool, RecallGivesBackOnlyWhatCachedDataDoesNotNeed) {
  FakeClock clock;
  FakeGrantServer server;
  GrantPool pool(Options(&clock, 4 * kMiB), server.Rpc());
  ASSERT_EQ(pool.MaybeRefill(), 4 * kMiB);
  ASSERT_TRUE(pool.Debit(1 * kMiB));  // promised to cached data: kept
  EXPECT_EQ(pool.Recall(100 * kMiB), 3 * kMiB);
  ASSERT_EQ(server.call_count(), 2u);
  EXPECT_EQ(server.call(1).wanted, 0u);
  EXPECT_EQ(server.call(1).back, 3 * kMiB);
  EXPECT_EQ(pool.available(), 0u);
  // The flush of the cached data still settles against the kept part.
  pool.Settle(1 * kMiB, 1 * kMiB);
  EXPECT_EQ(pool.available(), 0u);
  // No background refill right after a recall ...
  EXPECT_EQ(pool.MaybeRefill(), 0u);
  EXPECT_EQ(server.call_count(), 2u);
  // ... but a second later the pool may ask again.
  clock.Advance(absl::Seconds(2));
  EXPECT_GT(pool.MaybeRefill(), 0u);
}

TEST(GrantPool, AnIdleMountGivesItsUnpromisedGrantBack) {
  FakeClock clock;
  FakeGrantServer server;
  GrantPoolOptions o = Options(&clock);
  o.return_idle_after = absl::Seconds(10);
  GrantPool pool(o, server.Rpc());
  ASSERT_TRUE(pool.Debit(100 * kKiB));  // cached data: its debit stays
  EXPECT_EQ(pool.available(), 1 * kMiB - 100 * kKiB);
  clock.Advance(absl::Seconds(9));
  EXPECT_EQ(pool.ReturnIfIdle(), 0u);  // not idle long enough
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(pool.ReturnIfIdle(), 1 * kMiB - 100 * kKiB);
  EXPECT_EQ(pool.available(), 0u);
  const FakeGrantServer::Call last = server.call(server.call_count() - 1);
  EXPECT_EQ(last.wanted, 0u);
  EXPECT_EQ(last.back, 1 * kMiB - 100 * kKiB);
  const size_t calls = server.call_count();
  EXPECT_EQ(pool.ReturnIfIdle(), 0u);  // nothing left to give
  EXPECT_EQ(server.call_count(), calls);
  // A failed give-back is counted as given back (the server may have
  // applied it) and waits another idle period before the next one.
  ASSERT_TRUE(pool.Debit(10 * kKiB));
  clock.Advance(absl::Seconds(10));
  server.set_error(absl::UnavailableError("server unreachable"));
  EXPECT_EQ(pool.ReturnIfIdle(), 0u);
  EXPECT_EQ(pool.available(), 0u);
  server.set_error(absl::OkStatus());
  // Once nothing is cached, everything the server may still hold for the
  // mount goes back, once.
  pool.Settle(110 * kKiB, 110 * kKiB);
  ASSERT_EQ(pool.outstanding(), 0u);
  EXPECT_EQ(pool.ReturnIfIdle(), 0u);  // not yet
  clock.Advance(absl::Seconds(10));
  const size_t before = server.call_count();
  EXPECT_EQ(pool.ReturnIfIdle(), 0u);  // nothing counted here...
  ASSERT_EQ(server.call_count(), before + 1);
  EXPECT_GE(server.call(before).back, 1ull << 40);  // ...but all of it at the server
  clock.Advance(absl::Seconds(20));
  EXPECT_EQ(pool.ReturnIfIdle(), 0u);
  EXPECT_EQ(server.call_count(), before + 1);  // once
}

TEST(GrantPool, RecallIsBoundedByWhatTheServerAsked) {
  FakeClock clock;
  FakeGrantServer server;
  GrantPool pool(Options(&clock, 4 * kMiB), server.Rpc());
  ASSERT_EQ(pool.MaybeRefill(), 4 * kMiB);
  EXPECT_EQ(pool.Recall(1 * kMiB), 1 * kMiB);
  EXPECT_EQ(pool.available(), 3 * kMiB);
}

TEST(GrantPool, FailedRecallCountsAsGivenBack) {
  // The reply may be what was lost: the server may hold less than before,
  // and the mount must never count on grant the server does not hold.
  FakeClock clock;
  FakeGrantServer server;
  GrantPool pool(Options(&clock, 4 * kMiB), server.Rpc());
  ASSERT_EQ(pool.MaybeRefill(), 4 * kMiB);
  server.set_error(absl::UnavailableError("down"));
  EXPECT_EQ(pool.Recall(3 * kMiB), 0u);
  EXPECT_EQ(pool.available(), 1 * kMiB);
  EXPECT_EQ(GrantPool(Options(&clock), server.Rpc()).Recall(1), 0u);  // nothing to give
}

TEST(GrantPool, ALapsedLeaseAcceptsNoWriteAndMakesNoRpcUntilRenewed) {
  FakeClock clock;
  FakeGrantServer server;
  GrantPool pool(Options(&clock, 4 * kMiB), server.Rpc());
  pool.Renewed(clock.Now() + absl::Seconds(9));
  ASSERT_EQ(pool.MaybeRefill(), 4 * kMiB);
  ASSERT_TRUE(pool.Debit(1 * kMiB));
  const size_t calls = server.call_count();
  clock.Advance(absl::Seconds(9));
  // The server may have given the grant to others: write through.
  EXPECT_FALSE(pool.Debit(4 * kKiB));
  EXPECT_EQ(pool.MaybeRefill(), 0u);
  EXPECT_EQ(pool.Recall(1 * kMiB), 0u);
  EXPECT_EQ(server.call_count(), calls);
  // The server answered again and did not release the grant: it counts.
  pool.Renewed(clock.Now() + absl::Seconds(9));
  EXPECT_EQ(pool.available(), 3 * kMiB);
  EXPECT_TRUE(pool.Debit(4 * kKiB));
  EXPECT_EQ(server.call_count(), calls);
}

TEST(GrantPool, ALostGrantMakesCachedDataADebtThatRefillsPayFirst) {
  FakeClock clock;
  FakeGrantServer server;
  GrantPool pool(Options(&clock, 1 * kMiB), server.Rpc());
  pool.Renewed(clock.Now() + absl::Seconds(9));
  ASSERT_EQ(pool.MaybeRefill(), 1 * kMiB);
  ASSERT_TRUE(pool.Debit(300 * kKiB));  // cached, not yet written
  clock.Advance(absl::Seconds(20));
  EXPECT_FALSE(pool.Debit(4 * kKiB));  // lapsed
  // The server expired the session: its grant is gone.
  pool.Lost();
  pool.Renewed(clock.Now() + absl::Seconds(9));
  EXPECT_EQ(pool.available(), 0u);
  EXPECT_EQ(pool.debt(), 300 * kKiB);
  EXPECT_EQ(pool.outstanding(), 300 * kKiB);
  // The next refill asks for the debt on top, and pays it first.
  const size_t calls = server.call_count();
  EXPECT_EQ(pool.MaybeRefill(), 1 * kMiB + 300 * kKiB);
  EXPECT_EQ(server.call(calls).wanted, 1 * kMiB + 300 * kKiB);
  EXPECT_EQ(pool.available(), 1 * kMiB);
  EXPECT_EQ(pool.debt(), 0u);
  // The cached data's write draws on the new grant.
  pool.Settle(300 * kKiB, 300 * kKiB);
  EXPECT_EQ(pool.available(), 1 * kMiB);
  EXPECT_EQ(pool.outstanding(), 0u);
}

TEST(GrantPool, ALostGrantWithNothingGrantedAgainKeepsTheDebt) {
  FakeClock clock;
  FakeGrantServer server;
  GrantPool pool(Options(&clock, 1 * kMiB), server.Rpc());
  ASSERT_EQ(pool.MaybeRefill(), 1 * kMiB);
  ASSERT_TRUE(pool.Debit(300 * kKiB));
  pool.Lost();
  server.set_limit(100 * kKiB);  // the volume filled meanwhile
  EXPECT_EQ(pool.MaybeRefill(), 100 * kKiB);
  EXPECT_EQ(pool.available(), 0u);
  EXPECT_EQ(pool.debt(), 200 * kKiB);
  server.set_limit(0);
  EXPECT_FALSE(pool.Debit(4 * kKiB));  // nothing to give: write through
  EXPECT_EQ(pool.debt(), 200 * kKiB);
  // The write took 100 KiB from the grant and the rest from free space.
  pool.Settle(300 * kKiB, 100 * kKiB);
  EXPECT_EQ(pool.debt(), 0u);
  EXPECT_EQ(pool.available(), 0u);
}

}  // namespace
}  // namespace grantfs
