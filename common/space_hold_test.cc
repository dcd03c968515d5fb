#include "common/space_hold.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "common/errno_status.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class SpaceHoldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/grantfs_space_hold_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << strerror(errno);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  // Opens the hold; growing it past `disk_` bytes fails with ENOSPC.
  std::unique_ptr<SpaceHold> Open(uint64_t slack = 4 * kMiB) {
    SpaceHoldOptions o;
    o.path = path();
    o.slack_bytes = slack;
    o.allocate = [this](int fd, uint64_t offset, uint64_t length) {
      ++allocations_;
      if (offset + length > disk_) return ENOSPC;
      return fallocate(fd, 0, offset, length) == 0 ? 0 : errno;
    };
    auto hold = SpaceHold::Open(o);
    EXPECT_TRUE(hold.ok()) << hold.status();
    return hold.ok() ? *std::move(hold) : nullptr;
  }
  std::string path() const { return root_ + "/space.hold"; }
  // Bytes the file really has allocated on the disk.
  uint64_t Allocated() const {
    struct stat st;
    EXPECT_EQ(stat(path().c_str(), &st), 0);
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }

  std::string root_;
  uint64_t disk_ = 1ull << 40;
  int allocations_ = 0;
};

TEST_F(SpaceHoldTest, CoverAllocatesWhatIsPromisedOnTheDisk) {
  auto hold = Open();
  ASSERT_TRUE(hold->enabled());
  ASSERT_TRUE(hold->Cover(10 * kMiB).ok());
  EXPECT_EQ(hold->held(), 10 * kMiB);
  EXPECT_GE(Allocated(), 10 * kMiB);  // really allocated, not a sparse size
}

TEST_F(SpaceHoldTest, ShrinksOnlyBeyondTheSlack) {
  auto hold = Open(/*slack=*/4 * kMiB);
  ASSERT_TRUE(hold->Cover(20 * kMiB).ok());
  ASSERT_TRUE(hold->Cover(17 * kMiB).ok());  // 3 MiB over: kept
  EXPECT_EQ(hold->held(), 20 * kMiB);
  ASSERT_TRUE(hold->Cover(10 * kMiB).ok());  // 10 MiB over: given back
  EXPECT_EQ(hold->held(), 10 * kMiB);
  EXPECT_LT(Allocated(), 11 * kMiB);
}

TEST_F(SpaceHoldTest, AFullDiskIsEnospcAndTheHoldKeepsWhatItHad) {
  auto hold = Open();
  ASSERT_TRUE(hold->Cover(8 * kMiB).ok());
  disk_ = 12 * kMiB;
  absl::Status st = hold->Cover(16 * kMiB);
  EXPECT_EQ(ToErrno(st), ENOSPC) << st;
  EXPECT_EQ(hold->held(), 8 * kMiB);
  disk_ = 1ull << 40;  // space came back
  EXPECT_TRUE(hold->Cover(16 * kMiB).ok());
  EXPECT_EQ(hold->held(), 16 * kMiB);
}

TEST_F(SpaceHoldTest, ALoanShrinksTheFileAndCoverDoesNotTakeItBack) {
  auto hold = Open();
  ASSERT_TRUE(hold->Cover(10 * kMiB).ok());
  EXPECT_EQ(hold->Lend(3 * kMiB), 3 * kMiB);
  EXPECT_EQ(hold->held(), 7 * kMiB);
  EXPECT_EQ(hold->lent(), 3 * kMiB);
  // While the loan runs the promise is the same: Cover must not grow the
  // file back into the space the write is landing in.
  ASSERT_TRUE(hold->Cover(10 * kMiB).ok());
  EXPECT_EQ(hold->held(), 7 * kMiB);
  // The write committed: its blocks left the promise, and the loan ends.
  hold->Repay(3 * kMiB);
  ASSERT_TRUE(hold->Cover(7 * kMiB).ok());
  EXPECT_EQ(hold->held(), 7 * kMiB);
  EXPECT_EQ(hold->lent(), 0u);
}

TEST_F(SpaceHoldTest, LendGivesAtMostWhatIsHeld) {
  auto hold = Open();
  ASSERT_TRUE(hold->Cover(2 * kMiB).ok());
  EXPECT_EQ(hold->Lend(5 * kMiB), 2 * kMiB);
  EXPECT_EQ(hold->Lend(1 * kMiB), 0u);
  EXPECT_EQ(hold->held(), 0u);
  hold->Repay(2 * kMiB);
  hold->Repay(1 * kMiB);  // more than lent: the loan count stops at zero
  EXPECT_EQ(hold->lent(), 0u);
}

TEST_F(SpaceHoldTest, ARestartStartsFromWhatTheFileHolds) {
  {
    auto hold = Open();
    ASSERT_TRUE(hold->Cover(6 * kMiB).ok());
  }
  auto hold = Open();
  EXPECT_EQ(hold->held(), 6 * kMiB);
  // A full disk at the restart: the hold still opens, holding what it had.
  hold.reset();
  disk_ = 0;
  hold = Open();
  ASSERT_NE(hold, nullptr);
  EXPECT_EQ(hold->held(), 6 * kMiB);
}

TEST_F(SpaceHoldTest, AFileSystemWithoutFallocateHoldsNothing) {
  SpaceHoldOptions o;
  o.path = path();
  o.allocate = [](int, uint64_t, uint64_t) { return EOPNOTSUPP; };
  auto hold = SpaceHold::Open(o);
  ASSERT_TRUE(hold.ok()) << hold.status();
  EXPECT_FALSE((*hold)->enabled());
  EXPECT_TRUE((*hold)->Cover(10 * kMiB).ok());
  EXPECT_EQ((*hold)->held(), 0u);
  EXPECT_EQ((*hold)->Lend(kMiB), 0u);
}

}  // namespace
}  // namespace grantfs
