// WriteCache's flushing: the dirty limit, flush errors and retries, buffers, the server's credit.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/grant_pool.h"
#include "client/test_util.h"
#include "client/write_cache.h"
#include "client/write_cache_test_util.h"
#include "common/clock.h"
#include "common/errno_status.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

TEST(WriteCache, WriterBlocksAtTheDirtyLimitAndResumesAfterFlushes) {
  Harness h(SmallCache(/*flushers=*/2));
  absl::Notification release;
  h.server.set_hook([&](int, uint64_t, uint64_t, const std::string&) {
    release.WaitForNotificationWithTimeout(absl::Seconds(60));
    return absl::OkStatus();
  });
  h.cache.Start();
  std::mt19937_64 rng(3);
  const size_t kWrite = 64 * kKiB;
  const std::string data = RandomBytes(&rng, 8 * kMiB);
  std::atomic<uint64_t> written{0};
  std::atomic<bool> refused{false};
  absl::Notification writer_done;
  std::thread writer([&] {
    for (uint64_t off = 0; off < data.size(); off += kWrite) {
      if (!h.cache.Write(1, off, data.data() + off, kWrite)) refused = true;
      written += kWrite;
    }
    writer_done.Notify();
  });
  auto cleanup = absl::MakeCleanup([&] {
    if (!release.HasBeenNotified()) release.Notify();
    if (!writer_done.WaitForNotificationWithTimeout(absl::Seconds(30))) h.cache.Stop();
    writer.join();
  });

  uint64_t max_dirty = 0;
  const bool full = WaitFor([&] {
    max_dirty = std::max(max_dirty, h.cache.dirty_bytes());
    return written.load() >= 4 * kMiB;
  });
  ASSERT_TRUE(full) << "writer wrote " << written.load();
  absl::SleepFor(absl::Milliseconds(200));
  max_dirty = std::max(max_dirty, h.cache.dirty_bytes());
  EXPECT_FALSE(writer_done.HasBeenNotified());
  EXPECT_EQ(written.load(), 4 * kMiB);  // blocked in the next write
  EXPECT_EQ(h.cache.dirty_bytes(), 4 * kMiB);
  EXPECT_LE(max_dirty, 4 * kMiB + kWrite);

  release.Notify();
  ASSERT_TRUE(writer_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  std::move(cleanup).Invoke();
  EXPECT_FALSE(refused.load());
  EXPECT_EQ(written.load(), 8 * kMiB);
  ASSERT_TRUE(h.FlushAll().ok());
  EXPECT_TRUE(SameBytes(data, h.server.content(1)));
  EXPECT_EQ(h.cache.dirty_bytes(), 0u);
}

TEST(WriteCache, FlushErrorIsReportedDataStaysAndIsRetried) {
  Harness h;
  h.server.set_hook([](int index, uint64_t, uint64_t, const std::string&) {
    if (index < 2) return absl::UnavailableError("primary failing over");
    return absl::OkStatus();
  });
  h.cache.Start();
  std::mt19937_64 rng(9);
  const std::string d = RandomBytes(&rng, 300 * kKiB);
  ASSERT_TRUE(h.Write(1, 4096, d));

  const absl::Status first = h.FlushInode(1);
  EXPECT_EQ(first.code(), absl::StatusCode::kUnavailable) << first;
  EXPECT_EQ(h.cache.extent_count(1), 1u);
  EXPECT_EQ(h.cache.dirty_bytes(), d.size());
  EXPECT_EQ(h.server.content(1), "");
  // Still readable from the cache.
  std::vector<WriteCache::Piece> pieces = h.cache.Snapshot(1, 4096, d.size()).pieces;
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_TRUE(SameBytes(d, pieces[0].data));

  absl::Status s = first;
  int flushes = 1;
  while (!s.ok() && flushes < 3) {
    s = h.FlushInode(1);
    ++flushes;
  }
  ASSERT_TRUE(s.ok()) << s << " after " << flushes << " flushes";
  EXPECT_EQ(h.server.attempts(), 3);
  std::string want(4096, '\0');
  want += d;
  EXPECT_TRUE(SameBytes(want, h.server.content(1)));
  EXPECT_EQ(h.cache.extent_count(1), 0u);
  EXPECT_EQ(h.cache.dirty_bytes(), 0u);
  EXPECT_TRUE(h.FlushInode(1).ok());  // the error was reported once
  EXPECT_EQ(h.pool.available(), h.grants.granted() - h.server.used());
}

// The first `n` flushes fail as if the server were unreachable.
void FailFirstFlushes(Harness* h, int n) {
  auto left = std::make_shared<std::atomic<int>>(n);
  h->server.set_hook([left](int, uint64_t, uint64_t, const std::string&) {
    if (left->fetch_sub(1) > 0) return absl::UnavailableError("server unreachable");
    return absl::OkStatus();
  });
}

TEST(WriteCache, AFlushAfterAFailureWaitsForTheRetryAndReportsOnlyItsOutcome) {
  // Found by review: after one failed flush, close() and fsync() returned
  // the old error at once without waiting, and again after a retry worked.
  Harness h;
  FailFirstFlushes(&h, 1);
  h.cache.Start();
  ASSERT_TRUE(h.Write(1, 0, std::string(100 * kKiB, 'a')));
  EXPECT_EQ(h.FlushInode(1).code(), absl::StatusCode::kUnavailable);
  // More data, then a flush: it waits for the retry of the old data and
  // for the new, and both land.
  ASSERT_TRUE(h.Write(1, 100 * kKiB, std::string(100 * kKiB, 'b')));
  ASSERT_TRUE(h.FlushInode(1).ok());
  EXPECT_EQ(h.server.content(1), std::string(100 * kKiB, 'a') + std::string(100 * kKiB, 'b'));
  EXPECT_TRUE(h.FlushInode(1).ok());
}

TEST(WriteCache, AFailureThatIsNotNewDoesNotEndTheWait) {
  // The extent failed in the background, before anyone flushed: the flush
  // waits for its retry (which works) instead of returning the old error.
  Harness h;
  FailFirstFlushes(&h, 1);
  h.cache.Start();
  ASSERT_TRUE(h.Write(1, 0, std::string(64 * kKiB, 'a')));
  h.clock.Advance(absl::Seconds(60));  // comes of age: flushed unasked, and fails
  for (int i = 0; i < 500 && h.server.attempts() < 1; ++i) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_GE(h.server.attempts(), 1);
  ASSERT_TRUE(h.FlushInode(1).ok());
  EXPECT_EQ(h.server.content(1), std::string(64 * kKiB, 'a'));
}

TEST(WriteCache, DataRefusedForGoodIsDroppedAndReportedOnce) {
  Harness h;
  h.server.set_hook([](int, uint64_t, uint64_t offset, const std::string&) {
    if (offset == 0) return ErrnoStatus(EFBIG, "past the maximum file size");
    return absl::OkStatus();
  });
  h.cache.Start();
  ASSERT_TRUE(h.Write(1, 0, std::string(4096, 'x')));
  const absl::Status s = h.FlushInode(1);
  EXPECT_EQ(ToErrno(s), EFBIG) << s;
  EXPECT_EQ(h.cache.extent_count(1), 0u);
  EXPECT_EQ(h.cache.dirty_bytes(), 0u);
  EXPECT_TRUE(h.FlushInode(1).ok());  // said once
  EXPECT_EQ(h.server.attempts(), 1);  // and never retried
  // Its debit is back: the pool holds what the server still grants.
  EXPECT_EQ(h.pool.available(), h.grants.granted() - h.server.used());

  // Reported to the next flush even when nobody waited at the time.
  ASSERT_TRUE(h.Write(2, 0, std::string(100, 'y')));
  h.clock.Advance(absl::Seconds(60));  // comes of age: flushed unasked
  for (int i = 0; i < 200 && h.server.attempts() < 2; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(ToErrno(h.FlushInode(2)), EFBIG);
  EXPECT_TRUE(h.FlushInode(2).ok());
}

TEST(WriteCache, BytesHandedToAFailedFlushAreNeverChangedAfterwards) {
  // gRPC may hold the bytes of a failed Write until they are on the socket:
  // writes after the failure (overlapping it, or appending to it) must not
  // touch them. The extent is sent because it came of age; the failing
  // attempt turns the clock back, so nothing makes the flusher retry it at
  // once and the next writes find it idle.
  Harness h;
  h.server.set_hold(true);
  const absl::Duration age = SmallCache().max_age;
  h.server.set_hook([&h, age](int index, uint64_t, uint64_t, const std::string&) {
    if (index > 0) return absl::OkStatus();
    h.clock.Advance(-age);
    return absl::UnavailableError("primary failing over");
  });
  h.cache.Start();
  std::mt19937_64 rng(10);
  const std::string a = RandomBytes(&rng, 200 * kKiB);
  ASSERT_TRUE(h.Write(1, 0, a));
  h.clock.Advance(age);
  ASSERT_TRUE(WaitFor([&h] { return h.server.attempts() == 1; }));
  absl::SleepFor(absl::Milliseconds(200));  // the flusher takes the failure back
  const std::string b = RandomBytes(&rng, 100 * kKiB);
  const std::string c = RandomBytes(&rng, 50 * kKiB);
  ASSERT_TRUE(h.Write(1, 50 * kKiB, b));   // over the failed extent
  ASSERT_TRUE(h.Write(1, 200 * kKiB, c));  // appending to it
  const absl::Status s = h.FlushInode(1);
  EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kUnavailable) << s;
  ASSERT_TRUE(h.FlushInode(1).ok());
  EXPECT_TRUE(h.server.held_buffers_unchanged());
  std::string want = a;
  want.replace(50 * kKiB, b.size(), b);
  want += c;
  EXPECT_TRUE(SameBytes(want, h.server.content(1)));
}

TEST(WriteCache, StreamingBuffersAreReusedWithinTheirBound) {
  WriteCacheOptions o = SmallCache();
  o.dirty_limit = 16 * kMiB;  // spares: at most 16 MiB / 8 = 2 buffers of 1 MiB
  Harness h(o);
  std::mt19937_64 rng(11);
  const std::string d = RandomBytes(&rng, 5 * kMiB);
  // Five full extents, cached before the flushers start: were one flushed
  // while the writer made the next, that one would take its buffer back
  // and fewer than two would be left over (a flake under load).
  ASSERT_TRUE(h.Write(1, 0, d));
  h.cache.Start();
  ASSERT_TRUE(h.FlushInode(1).ok());
  EXPECT_TRUE(WaitFor([&h] { return h.cache.spare_bytes() == 2 * kMiB; })) << h.cache.spare_bytes();
  // The next streaming extent takes a spare; small writes do not.
  ASSERT_TRUE(h.Write(2, 0, std::string(100, 'x')));
  EXPECT_EQ(h.cache.spare_bytes(), 2 * kMiB);
  ASSERT_TRUE(h.Write(3, 0, d.substr(0, 256 * kKiB)));
  EXPECT_EQ(h.cache.spare_bytes(), 1 * kMiB);
  // A reused buffer holds only the new bytes.
  ASSERT_TRUE(h.Write(3, 256 * kKiB, d.substr(kMiB, 100 * kKiB)));
  ASSERT_TRUE(h.FlushAll().ok());
  EXPECT_TRUE(SameBytes(d, h.server.content(1)));
  EXPECT_TRUE(SameBytes(d.substr(0, 256 * kKiB) + d.substr(kMiB, 100 * kKiB), h.server.content(3)));
  EXPECT_EQ(h.server.content(2), std::string(100, 'x'));
}

// Flow control: with a credit of one extent, extents go one at a time even
// with several flushers; without a credit they overlap.
int PeakWithCredit(uint64_t credit) {
  WriteCacheOptions o = SmallCache(/*flushers=*/4);
  o.credit = [credit] { return credit; };
  Harness h(o);
  std::atomic<int> now{0}, peak{0};
  h.server.set_hook([&](int, uint64_t, uint64_t, const std::string&) {
    const int n = ++now;
    int p = peak.load();
    while (n > p && !peak.compare_exchange_weak(p, n)) {
    }
    absl::SleepFor(absl::Milliseconds(5));
    --now;
    return absl::OkStatus();
  });
  h.cache.Start();
  std::mt19937_64 rng(9);
  const std::string data = RandomBytes(&rng, 4 * kMiB);
  // Four files so that extents do not wait on each other for block order.
  for (uint64_t ino = 1; ino <= 4; ++ino) EXPECT_TRUE(h.Write(ino, 0, data));
  EXPECT_TRUE(h.FlushAll().ok());
  for (uint64_t ino = 1; ino <= 4; ++ino) EXPECT_TRUE(SameBytes(data, h.server.content(ino)));
  EXPECT_EQ(h.cache.peak_in_flight(), peak.load());
  return peak.load();
}

TEST(WriteCache, FlushersKeepWithinTheServersCredit) {
  EXPECT_EQ(PeakWithCredit(/*one byte: one extent at a time*/ 1), 1);
  EXPECT_GT(PeakWithCredit(/*no limit*/ 0), 1);
}
// A FlushRpc that hands its extents to another sender (as the namespace
// log takes the data of a closed small file: FlushResult.later), which
// settles them when asked (hurry) with what the test says.
class HandOff {
 public:
  explicit HandOff(FakeServer* server) : server_(server) {}
  WriteCache::FlushRpc Rpc() {
    return [this](uint64_t ino, uint64_t offset, std::shared_ptr<const std::string> data,
                  WriteCache::WriteTime) -> absl::StatusOr<WriteCache::FlushResult> {
      absl::MutexLock l(&mu_);
      ++rpcs_;
      if (!hand_) return direct_(ino, offset, data, {});  // a call of its own
      WriteCache::FlushResult later;
      later.later = true;
      if (early_) {
        // Answered before this returns (the batch went at once).
        mu_.Unlock();
        cache_->Settle(ino, data.get(), direct_(ino, offset, data, {}));
        mu_.Lock();
        return later;
      }
      handed_.push_back({ino, offset, std::move(data)});
      return later;
    };
  }
  // The cache's hurry: settles what was handed for `ino` with `outcome`
  // (OK: applied by the server), or fails with `refuse`.
  absl::Status Hurry(uint64_t ino) {
    std::vector<Handed> mine;
    absl::Status outcome, refuse;
    {
      absl::MutexLock l(&mu_);
      ++hurries_;
      refuse = refuse_;
      outcome = outcome_;
      if (!refuse.ok()) return refuse;
      if (absl::IsAborted(outcome)) {
        // Refused once: what is sent again goes as a call of its own.
        hand_ = false;
        outcome_ = absl::OkStatus();
      }
      for (auto it = handed_.begin(); it != handed_.end();) {
        if (it->ino == ino) {
          mine.push_back(std::move(*it));
          it = handed_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Handed& h : mine) {
      cache_->Settle(h.ino, h.data.get(),
                     outcome.ok() ? direct_(h.ino, h.offset, h.data, {})
                                  : absl::StatusOr<WriteCache::FlushResult>(outcome));
    }
    return absl::OkStatus();
  }
  void Set(bool hand, absl::Status outcome, absl::Status refuse = absl::OkStatus(),
           bool early = false) {
    absl::MutexLock l(&mu_);
    hand_ = hand;
    early_ = early;
    outcome_ = std::move(outcome);
    refuse_ = std::move(refuse);
  }
  size_t handed() {
    absl::MutexLock l(&mu_);
    return handed_.size();
  }
  int hurries() {
    absl::MutexLock l(&mu_);
    return hurries_;
  }
  int rpcs() {
    absl::MutexLock l(&mu_);
    return rpcs_;
  }
  WriteCache* cache_ = nullptr;

 private:
  struct Handed {
    uint64_t ino;
    uint64_t offset;
    std::shared_ptr<const std::string> data;
  };
  FakeServer* const server_;
  const WriteCache::FlushRpc direct_ = server_->Rpc();
  absl::Mutex mu_;
  bool hand_ ABSL_GUARDED_BY(mu_) = true;
  bool early_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status outcome_ ABSL_GUARDED_BY(mu_);
  absl::Status refuse_ ABSL_GUARDED_BY(mu_);
  std::vector<Handed> handed_ ABSL_GUARDED_BY(mu_);
  int hurries_ ABSL_GUARDED_BY(mu_) = 0;
  int rpcs_ ABSL_GUARDED_BY(mu_) = 0;
};

// A cache whose FlushRpc and hurry are a HandOff's, over fakes.
struct HandOffHarness {
  HandOffHarness()
      : hand(&server), pool(PoolOptions(), grants.Rpc()), cache(CacheOptions(), &pool, hand.Rpc()) {
    hand.cache_ = &cache;
  }
  GrantPoolOptions PoolOptions() {
    GrantPoolOptions o = BigPool();
    o.clock = &clock;
    return o;
  }
  WriteCacheOptions CacheOptions() {
    WriteCacheOptions o = SmallCache();
    o.clock = &clock;
    o.hurry = [this](uint64_t ino) { return hand.Hurry(ino); };
    return o;
  }
  absl::Status Within(const std::function<absl::Status()>& f) { return WithinOrStop(&cache, f); }

  FakeGrants grants;
  FakeServer server;
  FakeClock clock;
  HandOff hand;
  GrantPool pool;
  WriteCache cache;
};

// An extent whose FlushRpc answered `later` stays cached (read, counted
// dirty) and in flight until Settle; a flush of its file hurries the other
// sender once and waits for the outcome. A refusal of the hurry ends that
// wait with its error (the extent stays); ABORTED sends it again with no
// failure reported; TimesSet does not wait for it.
TEST(WriteCache, AnExtentHandedToAnotherSenderIsSettledByItAndHurriedByAFlush) {
  HandOffHarness h;
  WriteCache& cache = h.cache;
  HandOff& hand = h.hand;
  FakeServer& server = h.server;
  cache.Start();
  auto within = [&](const std::function<absl::Status()>& f) { return h.Within(f); };

  // Handed, then settled by the hurry of a flush.
  const std::string a(5000, 'a');
  ASSERT_TRUE(cache.Write(1, 0, a.data(), a.size()));
  cache.Seal(1);
  for (int i = 0; i < 500 && hand.handed() == 0; ++i) absl::SleepFor(absl::Milliseconds(2));
  ASSERT_EQ(hand.handed(), 1u);
  EXPECT_EQ(cache.CachedBytes(1), a.size());  // still cached
  EXPECT_EQ(cache.in_flight(), 0);            // not counted against the credit
  EXPECT_OK(within([&] {                      // does not wait for it
    cache.TimesSet(1);
    return absl::OkStatus();
  }));
  EXPECT_OK(within([&] { return cache.FlushInode(1); }));
  EXPECT_EQ(hand.hurries(), 1);
  EXPECT_EQ(server.content(1), a);
  EXPECT_EQ(cache.CachedBytes(1), 0u);
  EXPECT_EQ(h.pool.available(), h.grants.granted() - server.used());

  // The hurry fails: so does the flush; the extent stays handed, and is
  // settled when its sender answers.
  const std::string b(3000, 'b');
  ASSERT_TRUE(cache.Write(2, 0, b.data(), b.size()));
  hand.Set(true, absl::OkStatus(), absl::UnavailableError("no server"));
  EXPECT_EQ(within([&] { return cache.FlushInode(2); }).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(cache.CachedBytes(2), b.size());
  hand.Set(true, absl::OkStatus());
  EXPECT_OK(within([&] { return cache.FlushInode(2); }));
  EXPECT_EQ(server.content(2), b);

  // Settled ABORTED (refused by the other sender): sent again, as a call
  // of its own, and the flush that waited reports nothing.
  const std::string c(2000, 'c');
  ASSERT_TRUE(cache.Write(3, 0, c.data(), c.size()));
  const int rpcs = hand.rpcs();
  hand.Set(true, absl::AbortedError("refused"));
  EXPECT_OK(within([&] { return cache.FlushInode(3); }));
  EXPECT_EQ(server.content(3), c);
  EXPECT_EQ(hand.rpcs(), rpcs + 2);  // handed, then sent again

  // Answered before the FlushRpc returned `later`: settled then.
  const std::string d(1000, 'd');
  ASSERT_TRUE(cache.Write(4, 0, d.data(), d.size()));
  hand.Set(true, absl::OkStatus(), absl::OkStatus(), /*early=*/true);
  EXPECT_OK(within([&] { return cache.FlushInode(4); }));
  EXPECT_EQ(server.content(4), d);
  EXPECT_EQ(cache.CachedBytes(4), 0u);
  EXPECT_EQ(h.pool.available(), h.grants.granted() - server.used());
  cache.Stop();
}

// FlushNow sends from the calling thread what waits behind an extent
// handed elsewhere (here a later write over the same block): it hurries
// the handed one, then sends the next, with no flusher at all.
TEST(WriteCache, FlushNowHurriesAHandedExtentAndSendsWhatWaitedBehindIt) {
  HandOffHarness h;
  WriteCache& cache = h.cache;
  HandOff& hand = h.hand;
  // Not started: no flusher sends anything.
  const std::string a(4096, 'a');
  ASSERT_TRUE(cache.Write(1, 0, a.data(), a.size()));
  hand.Set(true, absl::UnavailableError("not yet"), absl::UnavailableError("not yet"));
  EXPECT_FALSE(cache.FlushNow({1}, true).ok());  // handed, and could not be hurried
  EXPECT_EQ(hand.handed(), 1u);
  ASSERT_TRUE(cache.Write(1, 100, "BBB", 3));  // a new extent, behind the handed one
  hand.Set(true, absl::OkStatus());
  EXPECT_OK(h.Within([&] { return cache.FlushNow({1}, true); }));
  std::string want = a;
  want.replace(100, 3, "BBB");
  EXPECT_EQ(h.server.content(1), want);
  EXPECT_EQ(cache.CachedBytes(1), 0u);
  cache.Stop();
}

}  // namespace
}  // namespace grantfs
