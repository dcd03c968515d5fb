#include "client/statfs_cache.h"

#include "gtest/gtest.h"

namespace grantfs {
namespace {

proto::StatFsReply Counts(uint64_t used, uint64_t seq = 0, uint64_t incarnation = 0) {
  proto::StatFsReply r;
  r.set_capacity_bytes(1 << 30);
  r.set_used_bytes(used);
  r.set_counts_seq(seq);
  r.set_incarnation(incarnation);
  return r;
}

TEST(StatFsCacheTest, KeptUntilTheyAreMaxAgeOld) {
  FakeClock clock;
  StatFsCache cache(absl::Seconds(1), &clock);
  EXPECT_FALSE(cache.Get().has_value());
  const absl::Time sent = cache.Now();
  clock.Advance(absl::Milliseconds(5));
  cache.Note(sent, Counts(10));
  ASSERT_TRUE(cache.Get().has_value());
  EXPECT_EQ(cache.Get()->used_bytes(), 10u);
  clock.Advance(absl::Milliseconds(994));  // 999 ms after the request was sent
  EXPECT_TRUE(cache.Get().has_value());
  clock.Advance(absl::Milliseconds(1));
  EXPECT_FALSE(cache.Get().has_value());
}

TEST(StatFsCacheTest, AChangeWithoutCountsDropsThemAndRefusesRepliesSentBeforeIt) {
  FakeClock clock;
  StatFsCache cache(absl::Seconds(1), &clock);
  const absl::Time before = cache.Now();
  clock.Advance(absl::Milliseconds(1));
  cache.Note(cache.Now(), Counts(10));
  clock.Advance(absl::Milliseconds(1));
  cache.Changed();  // a remove was answered
  EXPECT_FALSE(cache.Get().has_value());
  // A write sent before the remove's answer came: its counts may not
  // count the remove.
  cache.Note(before, Counts(20));
  EXPECT_FALSE(cache.Get().has_value());
  clock.Advance(absl::Milliseconds(1));
  cache.Note(cache.Now(), Counts(30));
  ASSERT_TRUE(cache.Get().has_value());
  EXPECT_EQ(cache.Get()->used_bytes(), 30u);
}

TEST(StatFsCacheTest, AnOlderRequestsReplyDoesNotReplaceANewerOnes) {
  FakeClock clock;
  StatFsCache cache(absl::Seconds(1), &clock);
  const absl::Time first = cache.Now();
  clock.Advance(absl::Milliseconds(1));
  cache.Note(cache.Now(), Counts(2));
  cache.Note(first, Counts(1));  // overtaken on the way
  EXPECT_EQ(cache.Get()->used_bytes(), 2u);
}

// The CI failure of 0f9d64a (test_writing_uses_space): two flushers'
// writes of one file, the second sent filled first; keeping the counts of
// the request sent last showed half the file's space.
TEST(StatFsCacheTest, OfOneServersCountsTheNewerAreKeptWhicheverRequestWasSentFirst) {
  FakeClock clock;
  StatFsCache cache(absl::Seconds(1), &clock);
  const absl::Time first = cache.Now();
  clock.Advance(absl::Milliseconds(1));
  const absl::Time second = cache.Now();
  cache.Note(second, Counts(4, /*seq=*/7, /*incarnation=*/3));
  cache.Note(first, Counts(8, /*seq=*/8, /*incarnation=*/3));
  ASSERT_TRUE(cache.Get().has_value());
  EXPECT_EQ(cache.Get()->used_bytes(), 8u);
  cache.Note(second, Counts(4, /*seq=*/7, /*incarnation=*/3));  // older numbers
  EXPECT_EQ(cache.Get()->used_bytes(), 8u);
  // Their age runs from the later request.
  clock.Advance(absl::Milliseconds(999));
  EXPECT_TRUE(cache.Get().has_value());
  clock.Advance(absl::Milliseconds(1));
  EXPECT_FALSE(cache.Get().has_value());
}

// Found by review: a write sent before a grant (a change without counts)
// ended, filled after a write sent after it, carries the newer counts.
TEST(StatFsCacheTest, NewerCountsOfARequestSentBeforeTheLastChangeAreKeptOverOlderOnes) {
  FakeClock clock;
  StatFsCache cache(absl::Seconds(1), &clock);
  const absl::Time first = cache.Now();
  clock.Advance(absl::Milliseconds(1));
  cache.Changed();
  clock.Advance(absl::Milliseconds(1));
  cache.Note(first, Counts(5, /*seq=*/9, /*incarnation=*/3));  // nothing kept: may not count it
  EXPECT_FALSE(cache.Get().has_value());
  cache.Note(cache.Now(), Counts(4, /*seq=*/10, /*incarnation=*/3));
  cache.Note(first, Counts(8, /*seq=*/11, /*incarnation=*/3));
  ASSERT_TRUE(cache.Get().has_value());
  EXPECT_EQ(cache.Get()->used_bytes(), 8u);
}

TEST(StatFsCacheTest, AnotherServersCountsAreOrderedByWhenTheirRequestWasSent) {
  FakeClock clock;
  StatFsCache cache(absl::Seconds(1), &clock);
  const absl::Time first = cache.Now();
  clock.Advance(absl::Milliseconds(1));
  cache.Note(cache.Now(), Counts(1, /*seq=*/900, /*incarnation=*/3));
  cache.Note(first, Counts(2, /*seq=*/5, /*incarnation=*/4));  // before the failover
  EXPECT_EQ(cache.Get()->used_bytes(), 1u);
  clock.Advance(absl::Milliseconds(1));
  cache.Note(cache.Now(), Counts(3, /*seq=*/6, /*incarnation=*/4));  // the new primary
  EXPECT_EQ(cache.Get()->used_bytes(), 3u);
}

TEST(StatFsCacheTest, MaxAgeZeroKeepsNothing) {
  FakeClock clock;
  StatFsCache cache(absl::ZeroDuration(), &clock);
  cache.Note(cache.Now(), Counts(1));
  EXPECT_FALSE(cache.Get().has_value());
}

}  // namespace
}  // namespace grantfs
