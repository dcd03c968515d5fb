#include "server/lock_manager.h"

#include <cerrno>
#include <cstdint>

#include "common/errno_status.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

constexpr uint64_t kIno = 42;
constexpr LockOwner kA{1, 10};
constexpr LockOwner kB{2, 20};

FileLock Lock(FileLock::Type type, uint64_t start, uint64_t end, LockOwner owner,
              bool flock = false, uint32_t pid = 0) {
  FileLock l;
  l.type = type;
  l.start = start;
  l.end = end;
  l.owner = owner;
  l.flock = flock;
  l.pid = pid;
  return l;
}

TEST(LockManagerTest, ReadLocksShare) {
  LockManager m;
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 0, 99, kA))), 0);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 50, 149, kB))), 0);
  EXPECT_EQ(m.CountLocks(kIno), 2u);
  EXPECT_EQ(m.Test(kIno, Lock(FileLock::kRead, 0, UINT64_MAX, LockOwner{3, 30})).type,
            FileLock::kUnlock);
}

TEST(LockManagerTest, ReadWriteConflictIsEagain) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 0, 99, kA))), 0);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 99, 200, kB))), EAGAIN);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, 0, kB))), EAGAIN);
  // Just past the read lock there is no conflict.
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 100, 200, kB))), 0);
  // And now A cannot read-lock what B write-locked.
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 150, 150, kA))), EAGAIN);
  EXPECT_EQ(m.CountLocks(kIno), 2u);
}

TEST(LockManagerTest, WriteWriteConflict) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 10, 20, kA))), 0);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 20, 30, kB))), EAGAIN);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 0, 10, kB))), EAGAIN);
  EXPECT_EQ(m.CountLocks(kIno), 1u);
}

TEST(LockManagerTest, LocksOnOtherInodesDoNotConflict) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, UINT64_MAX, kA))), 0);
  EXPECT_EQ(ToErrno(m.Set(kIno + 1, Lock(FileLock::kWrite, 0, UINT64_MAX, kB))), 0);
  EXPECT_EQ(m.CountLocks(kIno), 1u);
  EXPECT_EQ(m.CountLocks(kIno + 1), 1u);
}

TEST(LockManagerTest, SameOwnerNumberOnAnotherClientIsAnotherOwner) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, 9, LockOwner{1, 7}))), 0);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, 9, LockOwner{2, 7}))), EAGAIN);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, 9, LockOwner{1, 8}))), EAGAIN);
}

TEST(LockManagerTest, SameOwnerUpgradesAndDowngrades) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 0, 99, kA))), 0);
  // Upgrade in place: the read lock is replaced, not kept beside it.
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, 99, kA))), 0);
  EXPECT_EQ(m.CountLocks(kIno), 1u);
  FileLock conflict = m.Test(kIno, Lock(FileLock::kRead, 50, 50, kB));
  EXPECT_EQ(conflict.type, FileLock::kWrite);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 50, 50, kB))), EAGAIN);
  // Downgrade: B may read again, but still not write.
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 0, 99, kA))), 0);
  EXPECT_EQ(m.CountLocks(kIno), 1u);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 50, 50, kB))), 0);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 60, 60, kB))), EAGAIN);
}

TEST(LockManagerTest, UpgradeOfPartOfARangeSplitsIt) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 0, 99, kA))), 0);
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 40, 59, kA))), 0);
  // read [0,39], write [40,59], read [60,99]
  EXPECT_EQ(m.CountLocks(kIno), 3u);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 0, 39, kB))), 0);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 60, 99, kB))), 0);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 40, 40, kB))), EAGAIN);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 59, 59, kB))), EAGAIN);
}

TEST(LockManagerTest, UpgradeBlockedByAnotherReader) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 0, 99, kA))), 0);
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 0, 99, kB))), 0);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, 99, kA))), EAGAIN);
  // The failed upgrade left A's read lock as it was.
  EXPECT_EQ(m.CountLocks(kIno), 2u);
  FileLock conflict = m.Test(kIno, Lock(FileLock::kWrite, 0, 0, LockOwner{3, 3}));
  EXPECT_EQ(conflict.type, FileLock::kRead);
}

TEST(LockManagerTest, UnlockInTheMiddleSplitsTheRange) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, 99, kA))), 0);
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kUnlock, 40, 59, kA))), 0);
  EXPECT_EQ(m.CountLocks(kIno), 2u);
  // The hole is free, its neighbours are still held.
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 40, 59, kB))), 0);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 39, 39, kB))), EAGAIN);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 60, 60, kB))), EAGAIN);
  FileLock left = m.Test(kIno, Lock(FileLock::kRead, 0, 39, LockOwner{3, 3}));
  EXPECT_EQ(left.type, FileLock::kWrite);
  EXPECT_EQ(left.start, 0u);
  EXPECT_EQ(left.end, 39u);
  FileLock right = m.Test(kIno, Lock(FileLock::kRead, 60, 1000, LockOwner{3, 3}));
  EXPECT_EQ(right.type, FileLock::kWrite);
  EXPECT_EQ(right.start, 60u);
  EXPECT_EQ(right.end, 99u);
}

TEST(LockManagerTest, UnlockToEndOfFileAndFromStart) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, UINT64_MAX, kA))), 0);
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kUnlock, 100, UINT64_MAX, kA))), 0);
  EXPECT_EQ(m.CountLocks(kIno), 1u);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 100, UINT64_MAX, kB))), 0);
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kUnlock, 0, 49, kA))), 0);
  FileLock rest = m.Test(kIno, Lock(FileLock::kWrite, 0, 99, LockOwner{3, 3}));
  EXPECT_EQ(rest.owner, kA);
  EXPECT_EQ(rest.start, 50u);
  EXPECT_EQ(rest.end, 99u);
}

TEST(LockManagerTest, UnlockOfAnotherOwnersRangeChangesNothing) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, 99, kA))), 0);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kUnlock, 0, 99, kB))), 0);
  EXPECT_EQ(m.CountLocks(kIno), 1u);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, 0, kB))), EAGAIN);
}

TEST(LockManagerTest, UnlockOfEverythingForgetsTheInode) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 0, 9, kA))), 0);
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 20, 29, kA))), 0);
  EXPECT_EQ(m.CountLocks(kIno), 2u);
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kUnlock, 0, UINT64_MAX, kA))), 0);
  EXPECT_EQ(m.CountLocks(kIno), 0u);
  EXPECT_EQ(m.CountLocks(999), 0u);
}

TEST(LockManagerTest, FlockAndPosixLocksDoNotConflict) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, UINT64_MAX, kA))), 0);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, UINT64_MAX, kB, /*flock=*/true))), 0);
  EXPECT_EQ(m.CountLocks(kIno), 2u);
  // But flock locks conflict among themselves.
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 0, UINT64_MAX, kA, /*flock=*/true))), EAGAIN);
  // And a POSIX unlock does not drop the same owner's flock lock.
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, UINT64_MAX, LockOwner{5, 5}, true))),
            EAGAIN);
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kUnlock, 0, UINT64_MAX, kB))), 0);
  EXPECT_EQ(m.CountLocks(kIno), 2u);
}

TEST(LockManagerTest, ReleaseOwnerDropsOneKindOfOneOwner) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 0, 9, kA))), 0);
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 20, 29, kA))), 0);
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, UINT64_MAX, kA, true))), 0);
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 100, 200, kB))), 0);
  EXPECT_EQ(m.CountLocks(kIno), 4u);
  m.ReleaseOwner(kIno, kA, /*flock=*/false);
  EXPECT_EQ(m.CountLocks(kIno), 2u);  // A's flock and B's read lock stay
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, 29, kB))), 0);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, 0, kB, true))), EAGAIN);
  m.ReleaseOwner(kIno, kA, /*flock=*/true);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, 0, kB, true))), 0);
  // Releasing an owner with nothing held is harmless.
  m.ReleaseOwner(kIno, LockOwner{9, 9}, false);
  m.ReleaseOwner(777, kA, false);
  EXPECT_EQ(m.CountLocks(kIno), 3u);
}

TEST(LockManagerTest, ReleaseClientDropsEveryOwnerOfThatClientOnEveryInode) {
  LockManager m;
  const LockOwner a1{1, 1}, a2{1, 2}, b{2, 1};
  ASSERT_EQ(ToErrno(m.Set(1, Lock(FileLock::kWrite, 0, 9, a1))), 0);
  ASSERT_EQ(ToErrno(m.Set(1, Lock(FileLock::kWrite, 10, 19, a2))), 0);
  ASSERT_EQ(ToErrno(m.Set(1, Lock(FileLock::kWrite, 20, 29, b))), 0);
  ASSERT_EQ(ToErrno(m.Set(2, Lock(FileLock::kRead, 0, 9, a1, true))), 0);
  ASSERT_EQ(ToErrno(m.Set(3, Lock(FileLock::kRead, 0, 9, a2))), 0);
  EXPECT_EQ(m.InodesOf(1), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(m.InodesOf(2), (std::vector<uint64_t>{1}));
  EXPECT_TRUE(m.InodesOf(7).empty());
  for (uint64_t ino : m.InodesOf(1)) m.ReleaseClient(ino, 1);
  m.ReleaseClient(99, 1);  // nothing held there: harmless
  EXPECT_TRUE(m.InodesOf(1).empty());
  EXPECT_EQ(m.CountLocks(1), 1u);
  EXPECT_EQ(m.CountLocks(2), 0u);
  EXPECT_EQ(m.CountLocks(3), 0u);
  EXPECT_EQ(ToErrno(m.Set(1, Lock(FileLock::kWrite, 0, 19, LockOwner{3, 1}))), 0);
  EXPECT_EQ(ToErrno(m.Set(1, Lock(FileLock::kWrite, 25, 25, LockOwner{3, 1}))), EAGAIN);
}

TEST(LockManagerTest, GetListsInAFixedOrderAndRestorePutsTheLocksBack) {
  LockManager m;
  const LockOwner a{1, 1}, b{2, 1};
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 50, 59, b))), 0);
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 0, 9, a))), 0);
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 20, 29, a, /*flock=*/true))), 0);
  std::vector<FileLock> first = m.Get(kIno);
  ASSERT_EQ(first.size(), 3u);
  // Re-taking a held lock reorders the table inside, not what Get returns.
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 50, 59, b))), 0);
  EXPECT_EQ(m.Get(kIno), first);
  EXPECT_FALSE(first[0].flock);
  EXPECT_TRUE(first[2].flock);
  EXPECT_EQ(first[0].owner, a);
  EXPECT_EQ(first[1].owner, b);

  // A fresh table given the copy enforces the same locks.
  LockManager other;
  other.Restore(kIno, first);
  EXPECT_EQ(other.Get(kIno), first);
  EXPECT_EQ(ToErrno(other.Set(kIno, Lock(FileLock::kWrite, 5, 5, b))), EAGAIN);
  EXPECT_EQ(ToErrno(other.Set(kIno, Lock(FileLock::kWrite, 55, 55, a))), EAGAIN);
  EXPECT_EQ(ToErrno(other.Set(kIno, Lock(FileLock::kRead, 5, 5, a))), 0);  // a's own
  other.Restore(kIno, {});
  EXPECT_EQ(other.CountLocks(kIno), 0u);
  EXPECT_EQ(ToErrno(other.Set(kIno, Lock(FileLock::kWrite, 0, 100, b))), 0);
}

TEST(LockManagerTest, TestReturnsTheConflictingLock) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 100, 199, kA, false, /*pid=*/4321))), 0);
  FileLock got = m.Test(kIno, Lock(FileLock::kRead, 150, 300, kB, false, 99));
  EXPECT_EQ(got.type, FileLock::kWrite);
  EXPECT_EQ(got.start, 100u);
  EXPECT_EQ(got.end, 199u);
  EXPECT_EQ(got.pid, 4321u);
  EXPECT_EQ(got.owner, kA);
  EXPECT_FALSE(got.flock);
  // Test takes nothing.
  EXPECT_EQ(m.CountLocks(kIno), 1u);
}

TEST(LockManagerTest, TestWithoutConflictReturnsUnlockOfTheWantedRange) {
  LockManager m;
  ASSERT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kRead, 0, 99, kA))), 0);
  FileLock got = m.Test(kIno, Lock(FileLock::kRead, 0, 99, kB, false, 7));
  EXPECT_EQ(got.type, FileLock::kUnlock);
  EXPECT_EQ(got.start, 0u);
  EXPECT_EQ(got.end, 99u);
  // The owner's own locks never conflict with it.
  EXPECT_EQ(m.Test(kIno, Lock(FileLock::kWrite, 0, 99, kA)).type, FileLock::kUnlock);
  // Nor do locks of the other namespace.
  EXPECT_EQ(m.Test(kIno, Lock(FileLock::kWrite, 0, 99, kB, true)).type, FileLock::kUnlock);
  EXPECT_EQ(m.Test(kIno + 1, Lock(FileLock::kWrite, 0, 99, kB)).type, FileLock::kUnlock);
}

TEST(LockManagerTest, BadRangeOrTypeIsEinval) {
  LockManager m;
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(FileLock::kWrite, 10, 9, kA))), EINVAL);
  EXPECT_EQ(ToErrno(m.Set(kIno, Lock(static_cast<FileLock::Type>(7), 0, 9, kA))), EINVAL);
  EXPECT_EQ(m.CountLocks(kIno), 0u);
}

}  // namespace
}  // namespace grantfs
