#include "client/async_invalidator.h"

#include <string>
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

}  // namespace
}  // namespace grantfs
