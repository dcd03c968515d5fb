#include "client/open_handles.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

TEST(OpenHandleTable, HandlesAreUniqueAndOnlySuccessfulOpensCount) {
  OpenHandleTable t;
  const uint64_t a = t.BeginOpen(10);
  const uint64_t b = t.BeginOpen(10);
  EXPECT_NE(a, b);
  EXPECT_EQ(t.open_count(), 0u);  // pending
  t.EndOpen(a, true);
  t.EndOpen(b, false);  // the server refused it
  EXPECT_EQ(t.open_count(), 1u);
  t.Release(a);
  EXPECT_EQ(t.open_count(), 0u);
}

TEST(OpenHandleTable, AReclaimNamesEveryOpenHandle) {
  OpenHandleTable t;
  const uint64_t a = t.BeginOpen(10);
  t.EndOpen(a, true);
  const uint64_t b = t.BeginOpen(11);
  t.EndOpen(b, true);
  const uint64_t c = t.BeginOpen(12);
  t.EndOpen(c, true);
  t.Release(c);
  EXPECT_THAT(t.BeginReclaim(), UnorderedElementsAre(Pair(10, a), Pair(11, b)));
  EXPECT_THAT(t.EndReclaim(true), IsEmpty());
  EXPECT_FALSE(t.NeedsReclaim());
  EXPECT_EQ(t.generation(), 1u);
}

// The race reclaim_mu_ used to close by blocking every open() and close()
// for the length of a retried Reclaim RPC.
TEST(OpenHandleTable, AReclaimWaitsForOpensInFlightOfAnOlderGeneration) {
  OpenHandleTable t;
  const uint64_t old_open = t.BeginOpen(10);  // its RPC may reach the old server
  std::atomic<bool> returned{false};
  OpenHandleTable::Opens named;
  std::thread reclaimer([&] {
    named = t.BeginReclaim();
    returned = true;
  });
  // The reclaim has started its generation; it cannot return before the
  // open in flight ends.
  while (t.generation() == 0) std::this_thread::yield();
  EXPECT_FALSE(returned.load());
  // Opens and releases go on meanwhile, without waiting for it.
  const uint64_t other = t.BeginOpen(11);
  t.EndOpen(old_open, true);
  reclaimer.join();
  EXPECT_THAT(named, ElementsAre(Pair(10, old_open)));
  // `other` began under the reclaim's generation and was not waited for.
  t.EndOpen(other, true);
  EXPECT_TRUE(t.NeedsReclaim());
  EXPECT_THAT(t.EndReclaim(true), IsEmpty());
  // The next reclaim names it (and the one before again: a new server
  // knows neither); after that, nothing more is owed.
  EXPECT_THAT(t.BeginReclaim(), UnorderedElementsAre(Pair(10, old_open), Pair(11, other)));
  EXPECT_FALSE(t.NeedsReclaim());
  EXPECT_THAT(t.EndReclaim(true), IsEmpty());
  EXPECT_FALSE(t.NeedsReclaim());
}

TEST(OpenHandleTable, AnOpenDuringAReclaimIsNotLostOrReclaimedTwice) {
  OpenHandleTable t;
  const uint64_t a = t.BeginOpen(10);
  t.EndOpen(a, true);
  OpenHandleTable::Opens first = t.BeginReclaim();
  EXPECT_THAT(first, ElementsAre(Pair(10, a)));
  // Opened while the Reclaim RPC is in flight: not named by it.
  const uint64_t b = t.BeginOpen(20);
  t.EndOpen(b, true);
  EXPECT_TRUE(t.NeedsReclaim());
  EXPECT_THAT(t.EndReclaim(true), IsEmpty());
  EXPECT_TRUE(t.NeedsReclaim());  // lost unless reclaimed again
  EXPECT_THAT(t.BeginReclaim(), UnorderedElementsAre(Pair(10, a), Pair(20, b)));
  EXPECT_THAT(t.EndReclaim(true), IsEmpty());
  // Reclaimed once: later opens on the same server owe nothing.
  const uint64_t c = t.BeginOpen(30);
  t.EndOpen(c, true);
  EXPECT_FALSE(t.NeedsReclaim());
}

TEST(OpenHandleTable, AnOpenThatFailsDuringAReclaimOwesNothing) {
  OpenHandleTable t;
  t.BeginReclaim();
  const uint64_t b = t.BeginOpen(20);
  t.EndOpen(b, false);
  EXPECT_THAT(t.EndReclaim(true), IsEmpty());
  EXPECT_FALSE(t.NeedsReclaim());
  EXPECT_EQ(t.open_count(), 0u);
}

TEST(OpenHandleTable, AHandleReleasedDuringAReclaimThatNamesItIsReleasedAgain) {
  OpenHandleTable t;
  const uint64_t a = t.BeginOpen(10);
  t.EndOpen(a, true);
  const uint64_t b = t.BeginOpen(11);
  t.EndOpen(b, true);
  EXPECT_THAT(t.BeginReclaim(), UnorderedElementsAre(Pair(10, a), Pair(11, b)));
  // close(): its Release may reach the new server before the Reclaim does.
  t.Release(a);
  EXPECT_THAT(t.EndReclaim(true), ElementsAre(Pair(10, a)));
  // Only once, and never named again.
  EXPECT_THAT(t.BeginReclaim(), ElementsAre(Pair(11, b)));
  EXPECT_THAT(t.EndReclaim(true), IsEmpty());
}

TEST(OpenHandleTable, AHandleReleasedBeforeAReclaimIsNotNamed) {
  OpenHandleTable t;
  const uint64_t a = t.BeginOpen(10);
  t.EndOpen(a, true);
  t.Release(a);
  EXPECT_THAT(t.BeginReclaim(), IsEmpty());
  EXPECT_THAT(t.EndReclaim(true), IsEmpty());
}

TEST(OpenHandleTable, AFailedReclaimIsOwed) {
  OpenHandleTable t;
  const uint64_t a = t.BeginOpen(10);
  t.EndOpen(a, true);
  t.BeginReclaim();
  t.Release(a);
  // The failed Reclaim may still have been applied: the Release goes again.
  EXPECT_THAT(t.EndReclaim(false), ElementsAre(Pair(10, a)));
  EXPECT_TRUE(t.NeedsReclaim());
  EXPECT_THAT(t.BeginReclaim(), IsEmpty());
  EXPECT_THAT(t.EndReclaim(true), IsEmpty());
  EXPECT_FALSE(t.NeedsReclaim());
}

// Many threads open and close while reclaims run: every handle open at the
// end was named by the last reclaim, and no handle released before a
// reclaim began is ever named by it.
TEST(OpenHandleTable, ConcurrentOpensReleasesAndReclaims) {
  OpenHandleTable t;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&t, &stop, i] {
      std::vector<uint64_t> mine;
      uint64_t n = 0;
      while (!stop.load()) {
        const uint64_t h = t.BeginOpen(100 + i);
        t.EndOpen(h, (++n % 5) != 0);
        mine.push_back(h);
        if (mine.size() > 3) {
          t.Release(mine.front());
          mine.erase(mine.begin());
        }
      }
      for (uint64_t h : mine) t.Release(h);
    });
  }
  for (int r = 0; r < 200; ++r) {
    t.BeginReclaim();
    t.EndReclaim(true);
  }
  stop = true;
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(t.open_count(), 0u);
  // Whatever was owed, one more reclaim settles it.
  EXPECT_THAT(t.BeginReclaim(), IsEmpty());
  t.EndReclaim(true);
  EXPECT_FALSE(t.NeedsReclaim());
}

}  // namespace
}  // namespace grantfs
