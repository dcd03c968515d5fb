#include "client/listing_prefetch.h"

#include <memory>
#include <set>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

// Listings "fetched" into a set; a fetch of `block` waits for `release`.
struct FakeListings {
  absl::Mutex mu;
  std::set<uint64_t> listed ABSL_GUARDED_BY(mu);
  std::vector<uint64_t> fetched ABSL_GUARDED_BY(mu);
  std::vector<uint32_t> uids ABSL_GUARDED_BY(mu);
  uint64_t block = 0;
  absl::Notification started, release;

  absl::Status Fetch(const Creds& c, uint64_t dir) {
    if (dir == block) {
      started.Notify();
      release.WaitForNotification();
    }
    absl::MutexLock l(&mu);
    listed.insert(dir);
    fetched.push_back(dir);
    uids.push_back(c.uid);
    return absl::OkStatus();
  }
  bool Listed(uint64_t dir) {
    absl::MutexLock l(&mu);
    return listed.count(dir) > 0;
  }
  std::vector<uint64_t> Fetched() {
    absl::MutexLock l(&mu);
    return fetched;
  }
};

std::unique_ptr<ListingPrefetch> Make(FakeListings* f, size_t window) {
  ListingPrefetchOptions o;
  o.window = window;
  o.threads = 1;
  return std::make_unique<ListingPrefetch>(
      o, [f](const Creds& c, uint64_t d) { return f->Fetch(c, d); },
      [f](uint64_t d) { return f->Listed(d); });
}

void WaitFor(FakeListings* f, size_t n) {
  for (int i = 0; i < 5000 && f->Fetched().size() < n; ++i) absl::SleepFor(absl::Milliseconds(1));
}

TEST(ListingPrefetchTest, EnteringASubdirectoryReadsTheNextOnesAhead) {
  FakeListings f;
  std::unique_ptr<ListingPrefetch> made = Make(&f, 3);
  ListingPrefetch& p = *made;
  // Directory 1 lists subdirectories 10..15, in two pages.
  p.Saw(1, 0, {10, 11, 12});
  p.Saw(1, 3, {13, 14, 15});
  Creds walker;
  walker.uid = 1000;
  p.Reading(Creds{}, 1);  // the walk reads 1 itself: its parent is not known
  p.Reading(walker, 10);  // enters 10: 11, 12, 13 are read ahead
  WaitFor(&f, 3);
  EXPECT_EQ(f.Fetched(), (std::vector<uint64_t>{11, 12, 13}));
  {
    absl::MutexLock l(&f.mu);
    EXPECT_EQ(f.uids, (std::vector<uint32_t>{1000, 1000, 1000}));
  }
  p.Reading(walker, 11);  // 12, 13 are there: only 14
  WaitFor(&f, 4);
  p.Reading(walker, 15);  // the last: nothing after it
  p.Stop();
  EXPECT_EQ(f.Fetched(), (std::vector<uint64_t>{11, 12, 13, 14}));
  EXPECT_EQ(p.stats().fetched, 4u);
}

TEST(ListingPrefetchTest, AListingReadAnewForgetsTheOldOrder) {
  FakeListings f;
  std::unique_ptr<ListingPrefetch> made = Make(&f, 2);
  ListingPrefetch& p = *made;
  p.Saw(1, 0, {10, 11, 12});
  p.Saw(1, 0, {12, 10});  // read again from the start: 11 is gone
  p.Reading(Creds{}, 12);
  WaitFor(&f, 1);
  p.Stop();
  EXPECT_EQ(f.Fetched(), (std::vector<uint64_t>{10}));
}

TEST(ListingPrefetchTest, AwaitWaitsForAFetchUnderWayAndTakesBackAQueuedOne) {
  FakeListings f;
  f.block = 11;
  std::unique_ptr<ListingPrefetch> made = Make(&f, 2);
  ListingPrefetch& p = *made;
  p.Saw(1, 0, {10, 11, 12});
  p.Reading(Creds{}, 10);
  f.started.WaitForNotification();                    // 11 is being fetched, 12 waits
  EXPECT_FALSE(p.Await(12, absl::Seconds(10)));       // taken back: the walk reads it
  EXPECT_FALSE(p.Await(11, absl::Milliseconds(20)));  // still under way
  EXPECT_FALSE(p.Await(99, absl::Seconds(10)));       // never asked for
  f.release.Notify();
  EXPECT_TRUE(p.Await(11, absl::Seconds(60)) || f.Listed(11));
  p.Stop();
  EXPECT_EQ(f.Fetched(), (std::vector<uint64_t>{11}));
}

TEST(ListingPrefetchTest, WindowZeroReadsNothingAhead) {
  FakeListings f;
  std::unique_ptr<ListingPrefetch> made = Make(&f, 0);
  ListingPrefetch& p = *made;
  p.Saw(1, 0, {10, 11});
  p.Reading(Creds{}, 10);
  p.Stop();
  EXPECT_TRUE(f.Fetched().empty());
}

}  // namespace
}  // namespace grantfs
