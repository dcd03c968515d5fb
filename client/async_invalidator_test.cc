#include "client/async_invalidator.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

// Records the calls; the first one waits for `release`.
class BlockingTarget : public Invalidator {
 public:
  void InvalidateInode(uint64_t ino, bool data) override {
    Note(absl::StrCat("inode ", ino, data ? " data" : ""));
  }
  void InvalidateEntry(uint64_t parent, const std::string& name) override {
    Note(absl::StrCat("entry ", parent, "/", name));
  }
  std::vector<std::string> calls() {
    absl::MutexLock l(&mu_);
    return calls_;
  }
  absl::Notification started, release;

 private:
  void Note(std::string call) {
    if (!started.HasBeenNotified()) {
      started.Notify();
      release.WaitForNotification();
    }
    absl::MutexLock l(&mu_);
    calls_.push_back(std::move(call));
  }
  absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
};

TEST(AsyncInvalidatorTest, ACallThatBlocksHoldsUpNeitherTheCallerNorTheOrder) {
  BlockingTarget target;
  {
    AsyncInvalidator later(&target);
    later.InvalidateEntry(1, "a");
    target.started.WaitForNotification();  // the thread is stuck in the kernel
    later.InvalidateInode(7, true);        // returns at once all the same
    later.InvalidateEntry(1, "b");
    target.release.Notify();
    while (target.calls().size() < 3) absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(target.calls(), (std::vector<std::string>{"entry 1/a", "inode 7 data", "entry 1/b"}));
}

TEST(AsyncInvalidatorTest, TheOldestAreDroppedPastTheBound) {
  BlockingTarget target;
  {
    AsyncInvalidator later(&target, /*max_queued=*/2);
    later.InvalidateInode(1, false);
    target.started.WaitForNotification();
    for (uint64_t ino = 2; ino <= 5; ++ino) later.InvalidateInode(ino, false);
    EXPECT_EQ(later.dropped(), 2u);
    target.release.Notify();
    while (target.calls().size() < 3) absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(target.calls(), (std::vector<std::string>{"inode 1", "inode 4", "inode 5"}));
}

TEST(AsyncInvalidatorTest, AwaitEntriesWaitsForTheDropsPushedBeforeButThoseOfItsDirectory) {
  BlockingTarget target;
  AsyncInvalidator later(&target);
  EXPECT_TRUE(later.AwaitEntries(1, absl::ZeroDuration()));  // nothing pushed
  later.InvalidateEntry(2, "moved");
  target.started.WaitForNotification();  // its drop waits for a kernel lock
  // Not done: a lookup in directory 1 waits (bounded) for it.
  EXPECT_FALSE(later.AwaitEntries(1, absl::Milliseconds(20)));
  // A lookup in directory 2 holds the lock that drop waits for: not waited on.
  EXPECT_TRUE(later.AwaitEntries(2, absl::ZeroDuration()));
  later.InvalidateInode(9, false);  // attributes only: never waited on
  later.InvalidateEntry(1, "own");
  // Waiting in 1 for 2/moved; then 1/own, its own directory's, is left.
  absl::Notification done;
  bool awaited = false;
  std::thread waiter([&] {
    awaited = later.AwaitEntries(1, absl::Seconds(60));
    done.Notify();
  });
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  target.release.Notify();
  waiter.join();
  EXPECT_TRUE(awaited);
  // All handed over: nothing left to wait for.
  while (target.calls().size() < 3) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE(later.AwaitEntries(3, absl::ZeroDuration()));
  EXPECT_EQ(target.calls(), (std::vector<std::string>{"entry 2/moved", "inode 9", "entry 1/own"}));
}

TEST(AsyncInvalidatorTest, AwaitEntriesDoesNotWaitBehindADropOfItsOwnDirectory) {
  BlockingTarget target;
  AsyncInvalidator later(&target);
  later.InvalidateEntry(1, "own");  // waits for the lock the lookup in 1 holds
  target.started.WaitForNotification();
  later.InvalidateEntry(2, "behind");  // cannot be handed over before it
  const absl::Time start = absl::Now();
  EXPECT_TRUE(later.AwaitEntries(1, absl::Seconds(60)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  // Another directory's lookup waits for both.
  EXPECT_FALSE(later.AwaitEntries(3, absl::Milliseconds(20)));
  target.release.Notify();
  EXPECT_TRUE(later.AwaitEntries(3, absl::Seconds(60)));
  later.Stop();
  later.InvalidateEntry(4, "after");  // dropped: stopped
  EXPECT_TRUE(later.AwaitEntries(3, absl::ZeroDuration()));
  EXPECT_EQ(target.calls(), (std::vector<std::string>{"entry 1/own", "entry 2/behind"}));
}

}  // namespace
}  // namespace grantfs
