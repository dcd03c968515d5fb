#include "server/lease_table.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace grantfs {
namespace {

class LeaseTableTest : public ::testing::Test {
 protected:
  LeaseTableTest()
      : table_(LeaseTableOptions{.clock = &clock_, .term = absl::Seconds(3)},
               [this](uint64_t id, const proto::Invalidation& inv) {
                 absl::MutexLock l(&mu_);
                 pushed_.emplace_back(id, inv);
                 return true;
               }) {}

  std::vector<std::pair<uint64_t, proto::Invalidation>> Pushed() {
    absl::MutexLock l(&mu_);
    return pushed_;
  }

  FakeClock clock_;
  absl::Mutex mu_;
  std::vector<std::pair<uint64_t, proto::Invalidation>> pushed_ ABSL_GUARDED_BY(mu_);
  LeaseTable table_;
};

TEST_F(LeaseTableTest, OnlyAMountWithAStreamGetsLeases) {
  EXPECT_FALSE(table_.Grant(1, LeaseKey::Attr(5), table_.Epoch()));
  table_.StreamUp(2, /*leases=*/false);
  EXPECT_FALSE(table_.Grant(2, LeaseKey::Attr(5), table_.Epoch()));
  table_.StreamUp(1, true);
  EXPECT_TRUE(table_.Grant(1, LeaseKey::Attr(5), table_.Epoch()));
  EXPECT_EQ(table_.HeldBy(1), 1u);
}

TEST_F(LeaseTableTest, ARecallReachesEveryHolderButTheOriginAndWaitsForTheirAcks) {
  table_.StreamUp(1, true);
  table_.StreamUp(2, true);
  table_.StreamUp(3, true);
  for (uint64_t id : {1, 2, 3}) ASSERT_TRUE(table_.Grant(id, LeaseKey::Dir(7), table_.Epoch()));
  std::atomic<bool> done{false};
  std::thread change([&] {
    table_.Recall(1, {LeaseKey::Dir(7), LeaseKey::Attr(7)});
    done = true;
  });
  // Both others are told, the origin is not.
  while (Pushed().size() < 2) absl::SleepFor(absl::Milliseconds(1));
  auto pushed = Pushed();
  ASSERT_EQ(pushed.size(), 2u);
  for (const auto& [id, inv] : pushed) {
    EXPECT_NE(id, 1u);
    EXPECT_EQ(inv.dir(), 7u);
    EXPECT_EQ(inv.recall(), 1u);
  }
  table_.Ack(2, 1);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(done.load()) << "returned before every holder acknowledged";
  table_.Ack(3, 1);
  change.join();
  EXPECT_TRUE(done.load());
  EXPECT_EQ(table_.HeldBy(1), 1u);  // the origin keeps its lease
  EXPECT_EQ(table_.HeldBy(2), 0u);
}

TEST_F(LeaseTableTest, AHolderThatDoesNotAnswerIsWaitedForUntilItsLeaseRunsOut) {
  table_.StreamUp(1, true);
  table_.StreamUp(2, true);
  ASSERT_TRUE(table_.Grant(2, LeaseKey::Attr(9), table_.Epoch()));
  std::atomic<bool> done{false};
  std::thread change([&] {
    table_.Recall(1, {LeaseKey::Attr(9)});
    done = true;
  });
  while (Pushed().empty()) absl::SleepFor(absl::Milliseconds(1));
  // Past ack_wait, heartbeats no longer renew it...
  clock_.Advance(absl::Milliseconds(1500));
  EXPECT_FALSE(table_.Renew(2));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(done.load());
  // ...so its leases end `term` after the last renewal.
  clock_.Advance(absl::Seconds(2));
  change.join();
  EXPECT_EQ(table_.Stats().lapsed, 1u);
  // A lapsed mount is told so at its next heartbeat (it drops everything).
  EXPECT_FALSE(table_.Renew(2));
}

TEST_F(LeaseTableTest, LeasesThatRanOutAreNotRenewedAsIfTheyHadNot) {
  table_.StreamUp(1, true);
  table_.StreamUp(2, true);
  ASSERT_TRUE(table_.Grant(2, LeaseKey::Attr(9), table_.Epoch()));
  EXPECT_TRUE(table_.Renew(2));
  clock_.Advance(absl::Seconds(4));       // no heartbeat for longer than the term
  table_.Recall(1, {LeaseKey::Attr(9)});  // skips it: its leases ran out
  EXPECT_TRUE(Pushed().empty());
  // Its next heartbeat renews from now on, but says no: the mount drops
  // what it has (the recall above never reached it).
  EXPECT_FALSE(table_.Renew(2));
  EXPECT_TRUE(table_.Renew(2));
}

TEST_F(LeaseTableTest, ANewStreamEndsTheWait) {
  table_.StreamUp(1, true);
  table_.StreamUp(2, true);
  ASSERT_TRUE(table_.Grant(2, LeaseKey::Attr(9), table_.Epoch()));
  std::thread change([&] { table_.Recall(1, {LeaseKey::Attr(9)}); });
  while (Pushed().empty()) absl::SleepFor(absl::Milliseconds(1));
  table_.StreamUp(2, true);  // it dropped everything before it subscribed
  change.join();
}

TEST_F(LeaseTableTest, AReadThatARecallOvertookGetsNoLease) {
  table_.StreamUp(1, true);
  const uint64_t epoch = table_.Epoch();  // before the read
  table_.Recall(2, {LeaseKey::Attr(4)});  // a change committed meanwhile
  EXPECT_FALSE(table_.Grant(1, LeaseKey::Attr(4), epoch));
  EXPECT_TRUE(table_.Grant(1, LeaseKey::Attr(5), epoch));  // another key
  EXPECT_TRUE(table_.Grant(1, LeaseKey::Attr(4), table_.Epoch()));
}

TEST_F(LeaseTableTest, AnObjectRecalledTooOftenIsNotLeasedForAWhile) {
  table_.StreamUp(1, true);
  table_.StreamUp(2, true);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(table_.Grant(2, LeaseKey::Dir(3), table_.Epoch())) << i;
    const size_t before = Pushed().size();
    std::thread t([&] { table_.Recall(1, {LeaseKey::Dir(3)}); });
    while (Pushed().size() == before) absl::SleepFor(absl::Milliseconds(1));
    table_.Ack(2, Pushed().back().second.recall());
    t.join();
  }
  EXPECT_FALSE(table_.Grant(2, LeaseKey::Dir(3), table_.Epoch()));
  EXPECT_EQ(table_.Stats().refused_hot, 1u);
  // The reply says why (the mount falls back to the caches of leases off).
  EXPECT_TRUE(table_.Hot(LeaseKey::Dir(3)));
  EXPECT_FALSE(table_.Hot(LeaseKey::Attr(3)));
  clock_.Advance(absl::Seconds(2));
  EXPECT_FALSE(table_.Hot(LeaseKey::Dir(3)));
  EXPECT_TRUE(table_.Renew(2));
  EXPECT_TRUE(table_.Grant(2, LeaseKey::Dir(3), table_.Epoch()));
}

TEST(LeaseTableHotTest, WithHotRecallsZeroAnObjectIsAlwaysLeased) {
  FakeClock clock;
  std::vector<uint64_t> pushed;
  absl::Mutex mu;
  LeaseTable table(LeaseTableOptions{.clock = &clock, .term = absl::Seconds(3), .hot_recalls = 0},
                   [&](uint64_t, const proto::Invalidation& inv) {
                     absl::MutexLock l(&mu);
                     pushed.push_back(inv.recall());
                     return true;
                   });
  table.StreamUp(1, true);
  table.StreamUp(2, true);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(table.Grant(2, LeaseKey::Dir(3), table.Epoch())) << i;
    std::thread t([&] { table.Recall(1, {LeaseKey::Dir(3)}); });
    uint64_t seq = 0;
    while (seq == 0) {
      absl::SleepFor(absl::Milliseconds(1));
      absl::MutexLock l(&mu);
      if (pushed.size() == static_cast<size_t>(i + 1)) seq = pushed.back();
    }
    table.Ack(2, seq);
    t.join();
  }
  EXPECT_FALSE(table.Hot(LeaseKey::Dir(3)));
  EXPECT_EQ(table.Stats().refused_hot, 0u);
}

TEST_F(LeaseTableTest, ANewServerWaitsForTheMountsOfTheLastOne) {
  table_.Inherit({2}, clock_.Now() + absl::Seconds(3));
  std::atomic<bool> done{false};
  std::thread change([&] {
    table_.Recall(1, {LeaseKey::Attr(9)});
    done = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(done.load());
  table_.StreamUp(2, true);
  change.join();
  // Once every mount subscribed (or the time passed), a change waits for none.
  table_.Recall(1, {LeaseKey::Attr(9)});
}

TEST_F(LeaseTableTest, AForgottenSessionHoldsNothing) {
  table_.StreamUp(2, true);
  ASSERT_TRUE(table_.Grant(2, LeaseKey::Attr(9), table_.Epoch()));
  table_.Forget(2);
  EXPECT_EQ(table_.Stats().held, 0u);
  table_.Recall(1, {LeaseKey::Attr(9)});  // returns at once
  EXPECT_TRUE(Pushed().empty());
}

TEST(LeaseTableCapTest, AMountOverItsCapHasSomeLeasesRecalledAndOthersStillGetLeases) {
  FakeClock clock;
  absl::Mutex mu;
  std::vector<std::pair<uint64_t, proto::Invalidation>> pushed;
  // At most 16 leases in all, 8 per mount (evicted 1 at a time: 8 / 16).
  LeaseTable table(
      LeaseTableOptions{
          .clock = &clock, .term = absl::Seconds(3), .max_leases = 16, .max_leases_per_holder = 8},
      [&](uint64_t id, const proto::Invalidation& inv) {
        absl::MutexLock l(&mu);
        pushed.emplace_back(id, inv);
        return true;
      });
  table.StreamUp(1, true);
  table.StreamUp(2, true);
  // A long walk: mount 1 asks for 100 attribute leases, and gets each one.
  for (uint64_t ino = 100; ino < 200; ++ino) {
    ASSERT_TRUE(table.Grant(1, LeaseKey::Attr(ino), table.Epoch())) << ino;
    ASSERT_LE(table.HeldBy(1), 8u);
  }
  EXPECT_EQ(table.Stats().evicted, 92u);
  // Each one given up was recalled from it, numbered as recalls are, and it
  // still holds the newest.
  uint64_t given_up = 0;
  {
    absl::MutexLock l(&mu);
    ASSERT_EQ(pushed.size(), 92u);
    for (size_t i = 0; i < pushed.size(); ++i) {
      EXPECT_EQ(pushed[i].first, 1u);
      EXPECT_EQ(pushed[i].second.recall(), i + 1);
      EXPECT_NE(pushed[i].second.ino(), 199u);
    }
    given_up = pushed[0].second.ino();
  }
  // Mount 2 is not starved by mount 1's walk.
  for (uint64_t ino = 300; ino < 308; ++ino) {
    EXPECT_TRUE(table.Grant(2, LeaseKey::Dir(ino), table.Epoch())) << ino;
  }
  EXPECT_EQ(table.Stats().held, 16u);
  // A change of something mount 1 was made to give up waits until mount 1
  // acknowledged that recall: until then it may still answer from its copy.
  std::atomic<bool> done{false};
  std::thread change([&] {
    table.Recall(2, {LeaseKey::Attr(given_up)});
    done = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(done.load()) << "returned before the evicted holder acknowledged";
  // Acknowledged, the evictions leave mount 1 renewed, and the change returns.
  table.Ack(1, 92);
  change.join();
  EXPECT_TRUE(done.load());
  EXPECT_TRUE(table.Renew(1));
}

TEST_F(LeaseTableTest, AChangeWaitsForAHolderAnEarlierChangeRecalledFrom) {
  table_.StreamUp(1, true);
  table_.StreamUp(2, true);
  table_.StreamUp(3, true);
  ASSERT_TRUE(table_.Grant(2, LeaseKey::Attr(9), table_.Epoch()));
  // Change 1 (from mount 1) recalls mount 2's lease; mount 2 has not
  // acknowledged when change 2 (from mount 3) of the same inode commits.
  std::atomic<int> done{0};
  std::thread first([&] {
    table_.Recall(1, {LeaseKey::Attr(9)});
    done++;
  });
  while (Pushed().empty()) absl::SleepFor(absl::Milliseconds(1));
  std::atomic<bool> second_done{false};
  std::thread second([&] {
    table_.Recall(3, {LeaseKey::Attr(9)});
    second_done = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(second_done.load()) << "the second change returned while mount 2 may still "
                                      "answer from the copy the first one recalled";
  table_.Ack(2, 1);
  first.join();
  second.join();
  EXPECT_EQ(Pushed().size(), 1u);  // one recall message: mount 2 held it once
}

TEST(LeaseTableRecordTest, ASessionWhoseRecordIsNotDurableTakesNoLease) {
  FakeClock clock;
  std::atomic<bool> recorded{false};
  LeaseTable table(LeaseTableOptions{.clock = &clock,
                                     .term = absl::Seconds(3),
                                     .recorded = [&](uint64_t) { return recorded.load(); }},
                   [](uint64_t, const proto::Invalidation&) { return true; });
  table.StreamUp(1, true);
  // A server taking over now would not know the session: no lease.
  EXPECT_FALSE(table.Grant(1, LeaseKey::Attr(5), table.Epoch()));
  EXPECT_EQ(table.HeldBy(1), 0u);
  recorded = true;
  EXPECT_TRUE(table.Grant(1, LeaseKey::Attr(5), table.Epoch()));
}

}  // namespace
}  // namespace grantfs

namespace grantfs {
namespace {

// Namespace grants (LeaseKey::kNsGrant): nobody else caches a granted
// directory, a holder that applies its log is waited for past its lease,
// and GrantsOut ends with the last grant.
TEST_F(LeaseTableTest, NobodyElseLeasesADirectoryGrantedToASession) {
  table_.StreamUp(1, true);
  table_.StreamUp(2, true);
  EXPECT_FALSE(table_.GrantsOut());
  ASSERT_TRUE(table_.Grant(1, LeaseKey::NsGrant(7), table_.Epoch()));
  EXPECT_TRUE(table_.GrantsOut());
  EXPECT_FALSE(table_.Grant(2, LeaseKey::Dir(7), table_.Epoch()));
  EXPECT_FALSE(table_.Grant(2, LeaseKey::Attr(7), table_.Epoch()));
  EXPECT_TRUE(table_.Grant(1, LeaseKey::Dir(7), table_.Epoch()));  // its holder may
  EXPECT_TRUE(table_.HeldByOther(2, {LeaseKey::NsGrant(7)}));
  EXPECT_FALSE(table_.HeldByOther(1, {LeaseKey::NsGrant(7)}));
  table_.Drop(1, LeaseKey::NsGrant(7));
  EXPECT_FALSE(table_.GrantsOut());
  EXPECT_TRUE(table_.Grant(2, LeaseKey::Dir(7), table_.Epoch()));
}

TEST_F(LeaseTableTest, AHolderApplyingItsLogIsWaitedForPastItsLease) {
  table_.StreamUp(1, true);
  table_.StreamUp(2, true);
  ASSERT_TRUE(table_.Grant(2, LeaseKey::NsGrant(9), table_.Epoch()));
  ASSERT_TRUE(table_.BeginApply(2, {LeaseKey::NsGrant(9)}));
  std::atomic<bool> done{false};
  std::thread reader([&] {
    table_.Recall(1, {LeaseKey::NsGrant(9)});
    done = true;
  });
  while (Pushed().empty()) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(Pushed()[0].second.grant(), 9u);
  // Recalled, not acknowledged: it may still apply there.
  EXPECT_TRUE(table_.BeginApply(2, {LeaseKey::NsGrant(9)}));
  clock_.Advance(absl::Seconds(10));  // its lease ran out...
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(done.load());                                   // ...but it is still applying
  EXPECT_FALSE(table_.BeginApply(2, {LeaseKey::NsGrant(9)}));  // and may start no more
  table_.EndApply(2, 2);
  reader.join();
  // The unanswered recall counts until the mount, told its leases ran out,
  // subscribes again.
  EXPECT_FALSE(table_.Renew(2));
  table_.StreamUp(2, true);
  EXPECT_FALSE(table_.GrantsOut());
}

TEST_F(LeaseTableTest, GrantsOfAForgottenSessionOrANewStreamAreGone) {
  table_.StreamUp(1, true);
  ASSERT_TRUE(table_.Grant(1, LeaseKey::NsGrant(3), table_.Epoch()));
  table_.GrantCreated(1, 4);
  EXPECT_TRUE(table_.BeginApply(1, {LeaseKey::NsGrant(3), LeaseKey::NsGrant(4)}));
  table_.EndApply(1);
  table_.StreamUp(1, true);  // it dropped everything before it subscribed again
  EXPECT_FALSE(table_.GrantsOut());
  EXPECT_FALSE(table_.BeginApply(1, {LeaseKey::NsGrant(3)}));
  ASSERT_TRUE(table_.Grant(1, LeaseKey::NsGrant(3), table_.Epoch()));
  table_.Forget(1);
  EXPECT_FALSE(table_.GrantsOut());
}

TEST_F(LeaseTableTest, AnInheritedSessionReplaysButNotIntoAGrantMadeSince) {
  table_.Inherit({1, 2}, clock_.Now() + absl::Seconds(3), /*with_grants=*/true);
  EXPECT_TRUE(table_.GrantsOut());
  EXPECT_TRUE(table_.HeldByOther(3, {LeaseKey::NsGrant(5)}));  // inherited may hold it
  table_.StreamUp(2, true);
  ASSERT_TRUE(table_.Grant(2, LeaseKey::NsGrant(5), table_.Epoch()));
  EXPECT_FALSE(table_.BeginApply(1, {LeaseKey::NsGrant(5)}));
  EXPECT_TRUE(table_.BeginApply(1, {LeaseKey::NsGrant(6)}));
  table_.EndApply(1);
  clock_.Advance(absl::Seconds(4));
  EXPECT_FALSE(table_.BeginApply(1, {LeaseKey::NsGrant(6)}));
}

TEST_F(LeaseTableTest, EachInheritedSessionIsWaitedForOnlyForItsOwnWindow) {
  // A session without grants: the metadata lease; one with grants: longer.
  table_.Inherit({2}, clock_.Now() + absl::Seconds(3));
  table_.Inherit({3}, clock_.Now() + absl::Seconds(20), /*with_grants=*/true);
  EXPECT_TRUE(table_.HeldByOther(1, {LeaseKey::Attr(9)}));
  clock_.Advance(absl::Seconds(4));
  // 2's window is over; 3's is not: still waited for, and may replay.
  EXPECT_TRUE(table_.HeldByOther(1, {LeaseKey::Attr(9)}));
  EXPECT_TRUE(table_.BeginApply(3, {LeaseKey::NsGrant(6)}));
  table_.EndApply(3);
  EXPECT_FALSE(table_.BeginApply(2, {LeaseKey::NsGrant(6)}));
  table_.StreamUp(3, true);
  EXPECT_FALSE(table_.HeldByOther(1, {LeaseKey::Attr(9)}));
  table_.Recall(1, {LeaseKey::Attr(9)});  // waits for none
}

}  // namespace
}  // namespace grantfs
