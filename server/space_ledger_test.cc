// SpaceLedger on its own: reservations inside and beyond grants, exact
// ENOSPC, grants given and given back, sessions that end with writes in
// progress, the disk's limit, and undoing a change.
#include "server/space_ledger.h"

#include <cerrno>

#include "common/errno_status.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

// 3200 blocks: the low-water mark is 100 blocks (1/32).
constexpr uint64_t kCapacity = 3200;

TEST(SpaceLedger, ConvertsBytesAndBlocks) {
  EXPECT_EQ(SpaceLedger::BlocksCovering(0), 0u);
  EXPECT_EQ(SpaceLedger::BlocksCovering(1), 1u);
  EXPECT_EQ(SpaceLedger::BlocksCovering(4096), 1u);
  EXPECT_EQ(SpaceLedger::BlocksCovering(4097), 2u);
  EXPECT_EQ(SpaceLedger::BlocksWithin(4095), 0u);
  EXPECT_EQ(SpaceLedger::BlocksWithin(8191), 1u);
  EXPECT_EQ(SpaceLedger::Bytes(3), 3 * 4096u);
  // No overflow at the largest give-back a mount sends (2^62 bytes).
  EXPECT_EQ(SpaceLedger::BlocksCovering(uint64_t{1} << 62), (uint64_t{1} << 62) / 4096);
}

TEST(SpaceLedger, ReservesInsideTheGrantFirstThenFreeSpaceExactly) {
  SpaceLedger l;
  l.Load(kCapacity, 0, {{7, 100}});
  EXPECT_EQ(l.granted(), 100u);
  EXPECT_EQ(l.FreeBlocks(), kCapacity - 100);
  auto r = l.Reserve(150, 7);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->from_grant, 100u);
  EXPECT_EQ(r->client, 7u);
  EXPECT_EQ(l.reserved(), 50u);
  // A second write of the session finds its grant busy.
  auto r2 = l.Reserve(10, 7);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->from_grant, 0u);
  EXPECT_EQ(r2->client, 0u);
  // Exactly what is free can be reserved; one block more is ENOSPC.
  const uint64_t free = l.FreeBlocks();
  EXPECT_EQ(free, kCapacity - 100 - 60);
  EXPECT_EQ(ToErrno(l.Reserve(free + 1, 0).status()), ENOSPC);
  auto all = l.Reserve(free, 0);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(l.FreeBlocks(), 0u);
  EXPECT_TRUE(l.Check());
  l.Release(*all);
  l.Release(*r2);
  EXPECT_EQ(l.FreeBlocks(), free + 10);
}

TEST(SpaceLedger, ACommittedWriteMovesItsGrantedPartToUsed) {
  SpaceLedger l;
  l.Load(kCapacity, 0, {{7, 100}});
  auto r = l.Reserve(40, 7);
  ASSERT_TRUE(r.ok());
  l.Release(*r);
  EXPECT_EQ(l.DebitGrant(*r), 60u);
  l.AddUsed(40);
  EXPECT_EQ(l.GrantOf(7), 60u);
  EXPECT_EQ(l.granted(), 60u);
  EXPECT_EQ(l.used(), 40u);
  EXPECT_EQ(l.reserved(), 0u);
  EXPECT_TRUE(l.Check());
  // A grant debited to nothing is gone from the holders.
  auto rest = l.Reserve(60, 7);
  ASSERT_TRUE(rest.ok());
  l.Release(*rest);
  EXPECT_EQ(l.DebitGrant(*rest), 0u);
  EXPECT_TRUE(l.Holders().empty());
}

TEST(SpaceLedger, GrantsFollowThePolicyAndGiveBackSparesBusyBlocks) {
  SpaceLedger l;
  l.Load(kCapacity, 0, {});
  uint64_t added = 0;
  // free/8 of 3200 = 400.
  EXPECT_EQ(l.Grant(7, 1000, 0, &added), 400u);
  EXPECT_EQ(added, 400u);
  auto r = l.Reserve(300, 7);
  ASSERT_TRUE(r.ok());
  // Giving back everything gives back only what no write holds.
  EXPECT_EQ(l.Grant(7, 0, 1000, &added), 300u);
  EXPECT_EQ(added, 0u);
  EXPECT_EQ(l.granted(), 300u);
  EXPECT_EQ(l.Holders(), std::vector<uint64_t>{7});
  EXPECT_TRUE(l.Check());
}

TEST(SpaceLedger, AnEndedSessionKeepsOnlyWhatItsWritesHold) {
  SpaceLedger l;
  l.Load(kCapacity, 0, {{7, 100}, {8, 50}});
  auto r = l.Reserve(30, 7);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(l.EndSession(7), 30u);
  EXPECT_EQ(l.granted(), 80u);
  EXPECT_EQ(l.EndSession(8), 0u);
  EXPECT_EQ(l.Holders(), std::vector<uint64_t>{7});
  // The write commits: the kept grant pays for it, nothing is left.
  l.Release(*r);
  EXPECT_EQ(l.DebitGrant(*r), 0u);
  EXPECT_EQ(l.granted(), 0u);
  EXPECT_TRUE(l.Check());
}

TEST(SpaceLedger, TheDiskLimitsWhatIsFreeBeyondWhatIsPromised) {
  uint64_t disk_bytes = SpaceLedger::Bytes(1000);
  SpaceLedger l([&] { return disk_bytes; });
  l.Load(kCapacity, 0, {{7, 200}});
  // The disk holds 1000 blocks, 200 of them promised to the grant.
  EXPECT_EQ(l.FreeBlocks(), 800u);
  EXPECT_EQ(ToErrno(l.Reserve(801, 0).status()), ENOSPC);
  disk_bytes = SpaceLedger::Bytes(150);  // another program filled the disk
  EXPECT_EQ(l.FreeBlocks(), 0u);
}

TEST(SpaceLedger, RestoreUndoesAnAbandonedChange) {
  SpaceLedger l;
  l.Load(kCapacity, 10, {{7, 100}});
  const SpaceLedger::Durable saved = l.Save();
  uint64_t added = 0;
  l.Grant(8, 50, 0, &added);
  l.AddUsed(5);
  l.FreeUsed(100);  // never below zero
  EXPECT_EQ(l.used(), 0u);
  l.Restore(saved);
  EXPECT_EQ(l.used(), 10u);
  EXPECT_EQ(l.granted(), 100u);
  EXPECT_EQ(l.GrantOf(8), 0u);
  EXPECT_TRUE(l.Check());
}

TEST(SpaceLedger, CheckSeesABrokenInvariant) {
  SpaceLedger l;
  l.Load(100, 90, {{7, 20}});
  EXPECT_FALSE(l.Check());
}

}  // namespace
}  // namespace grantfs
