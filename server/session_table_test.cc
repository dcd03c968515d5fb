#include "server/session_table.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

constexpr absl::Duration kLease = absl::Seconds(10);

proto::Invalidation Inv(uint64_t ino, uint64_t parent = 0, const std::string& name = "") {
  proto::Invalidation inv;
  inv.set_ino(ino);
  inv.set_parent(parent);
  inv.set_name(name);
  return inv;
}

// The ids Expire() returned, sorted.
std::vector<uint64_t> Ids(
    const std::vector<std::pair<uint64_t, std::map<uint64_t, uint32_t>>>& gone) {
  std::vector<uint64_t> ids;
  for (const auto& [id, open] : gone) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<uint64_t> Sorted(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

class SessionTableTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  SessionTable table_{&clock_, kLease};
};

TEST_F(SessionTableTest, OpenGivesDistinctNonZeroIds) {
  std::set<uint64_t> ids;
  for (int i = 0; i < 100; ++i) {
    uint64_t id = table_.Open("client");
    EXPECT_NE(id, 0u);
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 100u);
  EXPECT_EQ(table_.List().size(), 100u);
  EXPECT_EQ(table_.lease(), kLease);
}

TEST_F(SessionTableTest, ASessionIsUnrecordedUntilItsRecordIsDurable) {
  const uint64_t opened = table_.Open("client");
  EXPECT_FALSE(table_.Recorded(opened));
  table_.MarkRecorded(opened);
  EXPECT_TRUE(table_.Recorded(opened));
  // Re-created by a request after its lease ran out: unrecorded from the
  // moment it exists again, whoever looks.
  EXPECT_EQ(table_.Touch(77), SessionTable::TouchResult::kCreated);
  EXPECT_FALSE(table_.Recorded(77));
  EXPECT_EQ(table_.Touch(77), SessionTable::TouchResult::kRenewed);
  EXPECT_FALSE(table_.Recorded(77));
  // Restored from its record at a server's start: recorded; known only from
  // a grant, a lock or an orphan: not until its record is written.
  table_.Restore(88, "node", "", /*recorded=*/true);
  EXPECT_TRUE(table_.Recorded(88));
  table_.Restore(89, "(restored)");
  EXPECT_FALSE(table_.Recorded(89));
  table_.MarkRecorded(89);
  EXPECT_TRUE(table_.Recorded(89));
  EXPECT_FALSE(table_.Recorded(99));  // no such session
}

// A session is the node's that opened it: another node naming its id is
// not its owner. Sessions of nobody (no TLS, or restored from a record that
// named none) are claimed by the first node that uses them.
TEST_F(SessionTableTest, ASessionBelongsToTheNodeThatOpenedIt) {
  const uint64_t a = table_.Open("a", "node:a");
  EXPECT_TRUE(table_.BelongsTo(a, "node:a"));
  EXPECT_FALSE(table_.BelongsTo(a, "node:b"));
  EXPECT_FALSE(table_.BelongsTo(a, ""));
  EXPECT_EQ(table_.List()[0].peer(), "node:a");
  EXPECT_TRUE(table_.BelongsTo(0, "node:b"));      // no session
  EXPECT_TRUE(table_.BelongsTo(a + 1, "node:b"));  // unknown: Touch re-creates it for b
  const uint64_t plain = table_.Open("plain");     // no TLS
  EXPECT_TRUE(table_.BelongsTo(plain, "node:b"));
  EXPECT_EQ(table_.Touch(plain, "node:b"), SessionTable::TouchResult::kRenewed);
  EXPECT_FALSE(table_.BelongsTo(plain, "node:c"));  // claimed by b
  // Re-created by Touch (the server had forgotten it) or restored after a
  // restart: the owner is kept or taken from the record.
  EXPECT_EQ(table_.Touch(777, "node:d"), SessionTable::TouchResult::kCreated);
  EXPECT_FALSE(table_.BelongsTo(777, "node:a"));
  table_.Restore(888, "(restored)", "node:e");
  EXPECT_TRUE(table_.BelongsTo(888, "node:e"));
  EXPECT_FALSE(table_.BelongsTo(888, "node:a"));
  table_.Restore(a, "a", "node:x");  // a restore never changes an owner
  EXPECT_TRUE(table_.BelongsTo(a, "node:a"));
}

TEST_F(SessionTableTest, HoldsOpenNamesExactlyTheClientsOpenHandles) {
  const uint64_t a = table_.Open("a"), b = table_.Open("b");
  ASSERT_TRUE(table_.OpenFile(a, 5, 7));
  EXPECT_TRUE(table_.HoldsOpen(a, 5, 7));
  EXPECT_FALSE(table_.HoldsOpen(a, 5, 8));  // another handle
  EXPECT_FALSE(table_.HoldsOpen(a, 6, 7));  // another inode
  EXPECT_FALSE(table_.HoldsOpen(b, 5, 7));  // another client
  ASSERT_TRUE(table_.OpenFile(a, 5, 0));
  EXPECT_FALSE(table_.HoldsOpen(a, 5, 0));  // 0 names no open
  table_.CloseFile(a, 5, 7);
  EXPECT_FALSE(table_.HoldsOpen(a, 5, 7));
}

TEST_F(SessionTableTest, ListShowsNameLeaseAndOpenFiles) {
  const uint64_t id = table_.Open("host:/mnt");
  table_.OpenFile(id, 5);
  table_.OpenFile(id, 5);
  table_.OpenFile(id, 6);
  std::vector<proto::SessionInfo> list = table_.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].client_id(), id);
  EXPECT_EQ(list[0].client_name(), "host:/mnt");
  EXPECT_EQ(list[0].lease_left_ms(), absl::ToInt64Milliseconds(kLease));
  EXPECT_EQ(list[0].open_files(), 3u);
}

TEST_F(SessionTableTest, SessionExpiresExactlyWhenItsLeaseRunsOut) {
  const uint64_t id = table_.Open("c");
  clock_.Advance(kLease - absl::Nanoseconds(1));
  EXPECT_TRUE(table_.Expire().empty());
  clock_.Advance(absl::Nanoseconds(1));
  EXPECT_EQ(Ids(table_.Expire()), std::vector<uint64_t>{id});
  EXPECT_TRUE(table_.List().empty());
  // Expired once: not reported again.
  clock_.Advance(kLease);
  EXPECT_TRUE(table_.Expire().empty());
}

TEST_F(SessionTableTest, TouchRenewsTheLease) {
  const uint64_t id = table_.Open("c");
  clock_.Advance(absl::Seconds(6));
  table_.Touch(id);
  clock_.Advance(absl::Seconds(6));  // 12 s after Open, 6 s after Touch
  EXPECT_TRUE(table_.Expire().empty());
  ASSERT_EQ(table_.List().size(), 1u);
  EXPECT_EQ(table_.List()[0].client_name(), "c");
  clock_.Advance(absl::Seconds(4));  // exactly one lease after Touch
  EXPECT_EQ(Ids(table_.Expire()), std::vector<uint64_t>{id});
}

TEST_F(SessionTableTest, TouchRecreatesAForgottenSession) {
  table_.Touch(0);  // no-op
  EXPECT_TRUE(table_.List().empty());
  table_.Touch(777);
  std::vector<proto::SessionInfo> list = table_.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].client_id(), 777u);
  EXPECT_EQ(list[0].client_name(), "(reconnected)");
  clock_.Advance(kLease);
  EXPECT_EQ(Ids(table_.Expire()), std::vector<uint64_t>{777});
}

TEST_F(SessionTableTest, AnEndingSessionIsNotRecreatedUntilItIsForgotten) {
  using R = SessionTable::TouchResult;
  const uint64_t id = table_.Open("a");
  EXPECT_TRUE(table_.OpenFile(id, 5, 1));
  EXPECT_EQ(table_.Touch(id), R::kRenewed);
  clock_.Advance(kLease);
  ASSERT_EQ(Ids(table_.Expire()), std::vector<uint64_t>{id});
  // A request from the client comes in while its old session's locks and
  // opens are being released: it is told to retry, and nothing is created.
  EXPECT_EQ(table_.Touch(id), R::kEnding);
  EXPECT_FALSE(table_.OpenFile(id, 5, 2));
  EXPECT_TRUE(table_.List().empty());
  table_.Forgotten(id);
  EXPECT_EQ(table_.Touch(id), R::kCreated);
  EXPECT_EQ(table_.OpenCountBy(id, 5), 0u);
  EXPECT_EQ(table_.OpenCount(5), 0u);
  // The same after a Close.
  table_.Close(id);
  EXPECT_EQ(table_.Touch(id), R::kEnding);
  table_.Forgotten(id);
  EXPECT_EQ(table_.Touch(id), R::kCreated);
  EXPECT_EQ(table_.Touch(id), R::kRenewed);
  EXPECT_EQ(table_.Touch(0), R::kRenewed);
}

TEST_F(SessionTableTest, AClientWhoseSessionExpiredIsToldOnce) {
  const uint64_t id = table_.Open("a");
  table_.Restore(555, "b");  // known from the last run: not lost
  EXPECT_EQ(table_.LostToken(id, 0), 0u);
  EXPECT_EQ(table_.LostToken(555, 0), 0u);
  clock_.Advance(kLease);
  ASSERT_EQ(Ids(table_.Expire()).size(), 2u);
  table_.Forgotten(id);
  // Its next request, whichever it is, re-creates the session; heartbeats
  // tell the client that what it held is gone until it acks the token.
  EXPECT_EQ(table_.Touch(id), SessionTable::TouchResult::kCreated);
  EXPECT_EQ(table_.Touch(id), SessionTable::TouchResult::kRenewed);
  const uint64_t token = table_.LostToken(id, 0);
  EXPECT_NE(token, 0u);
  EXPECT_EQ(table_.LostToken(id, 0), token);  // the reply was lost: again
  EXPECT_EQ(table_.LostToken(id, token + 1), token);
  EXPECT_EQ(table_.LostToken(id, token), 0u);  // acked
  EXPECT_EQ(table_.LostToken(id, token), 0u);
  EXPECT_EQ(table_.LostToken(42, 0), 0u);  // unknown
  // Lost again later: a new token, which the old ack does not clear.
  clock_.Advance(kLease);
  table_.Expire();
  table_.Forgotten(id);
  EXPECT_EQ(table_.Touch(id), SessionTable::TouchResult::kCreated);
  const uint64_t again = table_.LostToken(id, token);
  EXPECT_NE(again, 0u);
  EXPECT_NE(again, token);
}

TEST_F(SessionTableTest, GraceLastsUntilEveryRestoredSessionReclaimedOrEnded) {
  table_.Restore(1, "host1:/mnt");
  table_.Restore(2, "host2:/mnt");
  table_.Restore(3, "host3:/mnt");
  EXPECT_EQ(table_.reclaiming(), 0u);
  table_.StartGrace();
  EXPECT_EQ(table_.reclaiming(), 3u);
  table_.StartGrace();  // idempotent
  EXPECT_EQ(table_.reclaiming(), 3u);
  for (const proto::SessionInfo& info : table_.List()) {
    EXPECT_TRUE(info.reclaiming());
    EXPECT_EQ(info.client_name(), absl::StrCat("host", info.client_id(), ":/mnt"));
  }
  const uint64_t fresh = table_.Open("new");  // mounted after the restart
  EXPECT_EQ(table_.reclaiming(), 3u);
  EXPECT_FALSE(table_.Reclaimed(fresh));
  EXPECT_FALSE(table_.Reclaimed(1));
  EXPECT_FALSE(table_.Reclaimed(1));  // a resent reclaim
  EXPECT_EQ(table_.reclaiming(), 2u);
  table_.Close(2);  // unmounted without reclaiming
  table_.Forgotten(2);
  EXPECT_EQ(table_.reclaiming(), 1u);
  clock_.Advance(kLease);  // 3 never comes back (nor do the others call)
  EXPECT_EQ(Ids(table_.Expire()), Sorted({1, 3, fresh}));
  EXPECT_EQ(table_.reclaiming(), 0u);
}

TEST_F(SessionTableTest, EndGraceEndsItForEverySessionStillReclaiming) {
  table_.Restore(1, "a");
  table_.Restore(2, "b");
  table_.StartGrace();
  EXPECT_FALSE(table_.Reclaimed(1));
  EXPECT_EQ(table_.EndGrace(), std::vector<uint64_t>{2});
  EXPECT_EQ(table_.reclaiming(), 0u);
  EXPECT_TRUE(table_.EndGrace().empty());
  EXPECT_FALSE(table_.Reclaimed(2));  // a late reclaim
  EXPECT_EQ(table_.reclaiming(), 0u);
}

TEST_F(SessionTableTest, ReclaimedSaysWhenTheLastSessionReclaimed) {
  table_.Restore(1, "a");
  table_.Restore(2, "b");
  table_.StartGrace();
  EXPECT_FALSE(table_.Reclaimed(2));
  EXPECT_TRUE(table_.Reclaimed(1));
  EXPECT_EQ(table_.reclaiming(), 0u);
}

TEST_F(SessionTableTest, ExpireReturnsExactlyTheExpiredSessionsAndTheirOpenFiles) {
  const uint64_t a = table_.Open("a");
  const uint64_t b = table_.Open("b");
  clock_.Advance(absl::Seconds(5));
  const uint64_t c = table_.Open("c");  // expires 5 s after a and b
  table_.OpenFile(a, 10);
  table_.OpenFile(a, 10);
  table_.OpenFile(a, 11);
  table_.OpenFile(c, 10);
  clock_.Advance(absl::Seconds(5));

  auto gone = table_.Expire();
  EXPECT_EQ(Ids(gone), Sorted({a, b}));
  std::map<uint64_t, std::map<uint64_t, uint32_t>> by_id(gone.begin(), gone.end());
  EXPECT_EQ(by_id[a], (std::map<uint64_t, uint32_t>{{10, 2}, {11, 1}}));
  EXPECT_TRUE(by_id[b].empty());

  // The expired opens no longer count; c's open does.
  EXPECT_EQ(table_.OpenCount(10), 1u);
  EXPECT_EQ(table_.OpenCount(11), 0u);
  EXPECT_EQ(table_.OpenCountBy(a, 10), 0u);
  EXPECT_EQ(table_.OpenCountBy(c, 10), 1u);
  ASSERT_EQ(table_.List().size(), 1u);
  EXPECT_EQ(table_.List()[0].client_id(), c);

  clock_.Advance(absl::Seconds(5));
  gone = table_.Expire();
  EXPECT_EQ(Ids(gone), std::vector<uint64_t>{c});
  EXPECT_EQ(gone[0].second, (std::map<uint64_t, uint32_t>{{10, 1}}));
  EXPECT_EQ(table_.OpenCount(10), 0u);
}

TEST_F(SessionTableTest, OpenAndCloseFileCounts) {
  const uint64_t a = table_.Open("a");
  const uint64_t b = table_.Open("b");
  table_.OpenFile(a, 7);
  table_.OpenFile(a, 7);
  table_.OpenFile(b, 7);
  EXPECT_EQ(table_.OpenCount(7), 3u);
  EXPECT_EQ(table_.OpenCountBy(a, 7), 2u);
  EXPECT_EQ(table_.OpenCountBy(b, 7), 1u);
  EXPECT_EQ(table_.OpenCount(8), 0u);

  EXPECT_EQ(table_.CloseFile(a, 7), 2u);  // total left over all clients
  EXPECT_EQ(table_.OpenCountBy(a, 7), 1u);
  // Closing what a client does not have open changes nothing.
  EXPECT_EQ(table_.CloseFile(b, 8), 0u);
  EXPECT_EQ(table_.CloseFile(12345, 7), 2u);
  EXPECT_EQ(table_.CloseFile(b, 7), 1u);
  EXPECT_EQ(table_.CloseFile(b, 7), 1u);  // b had only one open
  EXPECT_EQ(table_.CloseFile(a, 7), 0u);
  EXPECT_EQ(table_.OpenCount(7), 0u);
  EXPECT_EQ(table_.List()[0].open_files() + table_.List()[1].open_files(), 0u);
}

TEST_F(SessionTableTest, HandlesMakeAResentOpenOrCloseCountOnce) {
  const uint64_t a = table_.Open("a");
  const uint64_t b = table_.Open("b");
  table_.OpenFile(a, 7, 1);
  table_.OpenFile(a, 7, 1);  // resent
  table_.OpenFile(a, 7, 2);
  table_.OpenFile(b, 7, 1);  // handles are per session
  table_.OpenFile(b, 7, 0);
  table_.OpenFile(b, 7, 0);  // opens without a handle each count
  EXPECT_EQ(table_.OpenCount(7), 5u);
  EXPECT_EQ(table_.OpenCountBy(a, 7), 2u);

  proto::OrphanRecord holders = table_.Holders(7);
  ASSERT_EQ(holders.holders_size(), 2);
  const int ia = holders.holders(0).client_id() == a ? 0 : 1;
  EXPECT_EQ(holders.holders(ia).client_id(), a);
  EXPECT_EQ(std::vector<uint64_t>(holders.holders(ia).handles().begin(),
                                  holders.holders(ia).handles().end()),
            (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(std::vector<uint64_t>(holders.holders(1 - ia).handles().begin(),
                                  holders.holders(1 - ia).handles().end()),
            (std::vector<uint64_t>{1, 0, 0}));
  EXPECT_EQ(table_.Holders(8).holders_size(), 0);

  EXPECT_EQ(table_.CloseFile(a, 7, 1), 4u);
  EXPECT_EQ(table_.CloseFile(a, 7, 1), 4u);  // resent: already closed
  EXPECT_EQ(table_.CloseFile(a, 7, 3), 4u);  // never opened
  EXPECT_EQ(table_.CloseFile(b, 7, 0), 3u);
  EXPECT_EQ(table_.CloseFile(b, 7, 0), 2u);
  EXPECT_EQ(table_.CloseFile(b, 7, 0), 2u);
  EXPECT_EQ(table_.CloseFile(b, 7, 1), 1u);
  EXPECT_EQ(table_.CloseFile(a, 7, 2), 0u);
  EXPECT_EQ(table_.Holders(7).holders_size(), 0);
}

TEST_F(SessionTableTest, RenewAllGivesEverySessionAWholeLease) {
  const uint64_t a = table_.Open("a");
  clock_.Advance(kLease - absl::Seconds(1));
  table_.RenewAll();
  clock_.Advance(kLease - absl::Seconds(1));
  EXPECT_TRUE(table_.Expire().empty());
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(Ids(table_.Expire()), std::vector<uint64_t>{a});
}

TEST_F(SessionTableTest, OpenFileForAnUnknownClientRecordsNothing) {
  EXPECT_FALSE(table_.OpenFile(99, 3));
  EXPECT_EQ(table_.OpenCountBy(99, 3), 0u);
  EXPECT_EQ(table_.OpenCount(3), 0u);
  EXPECT_TRUE(table_.List().empty());
}

TEST_F(SessionTableTest, CloseReturnsOpenFilesAndForgetsThem) {
  const uint64_t a = table_.Open("a");
  const uint64_t b = table_.Open("b");
  table_.OpenFile(a, 1);
  table_.OpenFile(a, 2);
  table_.OpenFile(a, 2);
  table_.OpenFile(b, 2);
  EXPECT_EQ(table_.Close(a), (std::map<uint64_t, uint32_t>{{1, 1}, {2, 2}}));
  EXPECT_EQ(table_.OpenCount(1), 0u);
  EXPECT_EQ(table_.OpenCount(2), 1u);
  EXPECT_TRUE(table_.Close(a).empty());
  ASSERT_EQ(table_.List().size(), 1u);
  EXPECT_EQ(table_.List()[0].client_id(), b);
}

TEST_F(SessionTableTest, PublishSkipsTheOriginAndDrainReturnsTheQueue) {
  const uint64_t a = table_.Open("a");
  const uint64_t b = table_.Open("b");
  const uint64_t c = table_.Open("c");
  table_.Publish(a, Inv(5, 1, "x"));
  table_.Publish(b, Inv(6));

  proto::InvalidationBatch batch;
  ASSERT_TRUE(table_.Drain(a, absl::ZeroDuration(), &batch));
  ASSERT_EQ(batch.items_size(), 1);
  EXPECT_EQ(batch.items(0).ino(), 6u);

  batch.Clear();
  ASSERT_TRUE(table_.Drain(b, absl::ZeroDuration(), &batch));
  ASSERT_EQ(batch.items_size(), 1);
  EXPECT_EQ(batch.items(0).ino(), 5u);
  EXPECT_EQ(batch.items(0).parent(), 1u);
  EXPECT_EQ(batch.items(0).name(), "x");

  batch.Clear();
  ASSERT_TRUE(table_.Drain(c, absl::ZeroDuration(), &batch));
  ASSERT_EQ(batch.items_size(), 2);
  EXPECT_EQ(batch.items(0).ino(), 5u);  // in publication order
  EXPECT_EQ(batch.items(1).ino(), 6u);

  // Drained means gone: a second drain finds nothing but still succeeds.
  batch.Clear();
  EXPECT_TRUE(table_.Drain(c, absl::ZeroDuration(), &batch));
  EXPECT_EQ(batch.items_size(), 0);
}

TEST_F(SessionTableTest, PublishFromOutsideAnySessionReachesEveryone) {
  const uint64_t a = table_.Open("a");
  const uint64_t b = table_.Open("b");
  table_.Publish(0, Inv(9));
  for (uint64_t id : {a, b}) {
    proto::InvalidationBatch batch;
    ASSERT_TRUE(table_.Drain(id, absl::ZeroDuration(), &batch));
    ASSERT_EQ(batch.items_size(), 1);
    EXPECT_EQ(batch.items(0).ino(), 9u);
  }
}

TEST_F(SessionTableTest, DrainOfAnUnknownOrEndedSessionIsFalse) {
  proto::InvalidationBatch batch;
  EXPECT_FALSE(table_.Drain(4242, absl::ZeroDuration(), &batch));
  const uint64_t a = table_.Open("a");
  table_.Publish(0, Inv(1));
  table_.Close(a);
  EXPECT_FALSE(table_.Drain(a, absl::ZeroDuration(), &batch));
  EXPECT_EQ(batch.items_size(), 0);
}

TEST(SessionTableQueueTest, OldestInvalidationsAreDroppedPastMaxQueued) {
  FakeClock clock;
  SessionTable table(&clock, kLease, /*max_queued=*/3);
  const uint64_t a = table.Open("a");
  for (uint64_t ino = 1; ino <= 5; ++ino) table.Publish(0, Inv(ino));
  proto::InvalidationBatch batch;
  ASSERT_TRUE(table.Drain(a, absl::ZeroDuration(), &batch));
  ASSERT_EQ(batch.items_size(), 3);
  EXPECT_EQ(batch.items(0).ino(), 3u);
  EXPECT_EQ(batch.items(1).ino(), 4u);
  EXPECT_EQ(batch.items(2).ino(), 5u);
}

TEST(SessionTableQueueTest, DrainHandsOutAtMost1024AtATime) {
  FakeClock clock;
  SessionTable table(&clock, kLease);
  const uint64_t a = table.Open("a");
  for (uint64_t ino = 1; ino <= 1500; ++ino) table.Publish(0, Inv(ino));
  proto::InvalidationBatch first, second;
  ASSERT_TRUE(table.Drain(a, absl::ZeroDuration(), &first));
  ASSERT_TRUE(table.Drain(a, absl::ZeroDuration(), &second));
  ASSERT_EQ(first.items_size(), 1024);
  ASSERT_EQ(second.items_size(), 476);
  EXPECT_EQ(first.items(0).ino(), 1u);
  EXPECT_EQ(second.items(0).ino(), 1025u);
  EXPECT_EQ(second.items(475).ino(), 1500u);
}

TEST_F(SessionTableTest, ListShowsWhereTheLatestCallCameFromAndGrantRecallsAreCounted) {
  const uint64_t a = table_.Open("a"), b = table_.Open("b");
  table_.CameFrom(a, "10.0.0.5:41234");
  table_.CameFrom(a, "10.0.0.5:41300");  // reconnected: the latest counts
  table_.CameFrom(12345, "10.0.0.9:1");  // no such session: nothing
  for (const proto::SessionInfo& info : table_.List()) {
    EXPECT_EQ(info.address(), info.client_id() == a ? "10.0.0.5:41300" : "") << info.client_id();
  }
  EXPECT_EQ(table_.grant_recalls(), 0u);
  proto::InvalidationBatch batch;
  ASSERT_TRUE(table_.Recall(a, 4096));
  ASSERT_TRUE(table_.Recall(a, 8192));  // one recall (the larger) until it is sent
  ASSERT_TRUE(table_.Drain(a, absl::ZeroDuration(), &batch));
  ASSERT_TRUE(table_.Recall(b, 4096));
  ASSERT_TRUE(table_.Drain(b, absl::ZeroDuration(), &batch));
  EXPECT_EQ(table_.grant_recalls(), 2u);
  // An ended session's recalls stay counted.
  table_.Close(b);
  EXPECT_EQ(table_.grant_recalls(), 2u);
}

}  // namespace
}  // namespace grantfs

namespace grantfs {
namespace {

TEST(SessionTableShutdown, DrainReturnsFalseOnceShuttingDown) {
  FakeClock clock;
  SessionTable table(&clock, absl::Seconds(10));
  const uint64_t id = table.Open("node");
  proto::InvalidationBatch batch;
  EXPECT_TRUE(table.Drain(id, absl::ZeroDuration(), &batch));
  table.Shutdown();
  EXPECT_FALSE(table.Drain(id, absl::Seconds(30), &batch));  // returns at once
}

}  // namespace
}  // namespace grantfs

namespace grantfs {
namespace {

TEST(SessionTableStreams, ANewerStreamTakesTheQueueFromAnOlderOne) {
  FakeClock clock;
  SessionTable table(&clock, absl::Seconds(10));
  const uint64_t id = table.Open("m");
  const uint64_t old_stream = table.NewStream(id);
  const uint64_t new_stream = table.NewStream(id);
  proto::Invalidation recall;
  recall.set_recall(1);
  recall.set_ino(5);
  ASSERT_TRUE(table.PushRecall(id, recall));
  proto::InvalidationBatch batch;
  // The older stream (its mount may be gone) takes nothing.
  EXPECT_FALSE(table.Drain(id, absl::ZeroDuration(), &batch, old_stream));
  EXPECT_EQ(batch.items_size(), 0);
  ASSERT_TRUE(table.Drain(id, absl::ZeroDuration(), &batch, new_stream));
  ASSERT_EQ(batch.items_size(), 1);
  EXPECT_EQ(batch.items(0).recall(), 1u);
}

TEST(SessionTableStreams, ARecallIsNeverDroppedFromAFullQueue) {
  FakeClock clock;
  SessionTable table(&clock, absl::Seconds(10), /*max_queued=*/2);
  const uint64_t id = table.Open("m");
  proto::Invalidation recall;
  recall.set_recall(1);
  recall.set_ino(5);
  ASSERT_TRUE(table.PushRecall(id, recall));
  proto::Invalidation inv;
  inv.set_ino(6);
  table.Publish(/*origin=*/0, inv);
  table.Publish(/*origin=*/0, inv);  // would push the recall out
  proto::InvalidationBatch batch;
  // The stream ends instead (its mount re-subscribes and drops everything).
  EXPECT_FALSE(table.Drain(id, absl::ZeroDuration(), &batch));
}

}  // namespace
}  // namespace grantfs
