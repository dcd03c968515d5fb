// Blocks of file data (server/allocator.h), through Metadata: reservations
// and commits, capacity and the disk's free space, truncation freeing
// blocks, and the sessions' grants across a crash.
#include "server/allocator.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/errno_status.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"
#include "server/metadata.h"
#include "server/metadata_test_util.h"
#include "server/permissions.h"

namespace grantfs {
namespace {

// --- the disk's free space -------------------------------------------------------------

TEST_F(MetaStoreTest, NothingIsPromisedThatTheDiskCannotHold) {
  uint64_t disk = 10 * kBlockSize;  // what the data file system can take
  store_.reset();
  MetaStoreOptions o = Options();
  o.disk_available = [&disk] { return disk; };
  ASSERT_OK_AND_ASSIGN(store_, Metadata::Open(o));
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  // The capacity (64 blocks) says yes, the disk says 10.
  ASSERT_OK_AND_ASSIGN(Reservation r, store_->space().Reserve(f.ino(), 0, 10 * kBlockSize));
  EXPECT_EQ(Err(store_->space().Reserve(f.ino(), 10 * kBlockSize, kBlockSize)), ENOSPC);
  // Written: the blocks are on disk now (the disk's free space went down
  // with them), so nothing more fits.
  ASSERT_OK(store_->space().CommitWrite(f.ino(), 0, 10 * kBlockSize, true, r).status());
  disk -= 10 * kBlockSize;
  EXPECT_EQ(Err(store_->space().Reserve(f.ino(), 10 * kBlockSize, kBlockSize)), ENOSPC);
  // Another program frees space: it can be promised again.
  disk = 3 * kBlockSize;
  ASSERT_OK(store_->space().Reserve(f.ino(), 10 * kBlockSize, 3 * kBlockSize).status());
  EXPECT_EQ(Err(store_->space().Reserve(f.ino(), 20 * kBlockSize, kBlockSize)), ENOSPC);
}

// --- space ---------------------------------------------------------------------------------

TEST_F(MetaStoreTest, WritingTheSameBlocksTwiceAllocatesThemOnce) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK_AND_ASSIGN(Reservation reserved, store_->space().Reserve(f.ino(), 0, 2 * kBlockSize));
  EXPECT_EQ(reserved.blocks, 2u);
  EXPECT_EQ(store_->store().Space().reserved_bytes, 2 * kBlockSize);
  ASSERT_OK_AND_ASSIGN(proto::Attr a,
                       store_->space().CommitWrite(f.ino(), 0, 2 * kBlockSize, true, reserved));
  EXPECT_EQ(a.size(), 2 * kBlockSize);
  EXPECT_EQ(a.blocks(), 2 * kBlockSize / 512);
  EXPECT_EQ(store_->store().Space().used_bytes, 2 * kBlockSize);
  EXPECT_EQ(store_->store().Space().reserved_bytes, 0u);

  // The same blocks again (and a partial block inside them) need nothing.
  ASSERT_OK_AND_ASSIGN(reserved, store_->space().Reserve(f.ino(), 100, kBlockSize));
  EXPECT_EQ(reserved.blocks, 0u);
  ASSERT_OK_AND_ASSIGN(a, store_->space().CommitWrite(f.ino(), 100, kBlockSize, true, reserved));
  EXPECT_EQ(a.size(), 2 * kBlockSize);
  EXPECT_EQ(a.blocks(), 2 * kBlockSize / 512);
  EXPECT_EQ(store_->store().Space().used_bytes, 2 * kBlockSize);

  // A small write past the end touches one new block.
  ASSERT_OK_AND_ASSIGN(a, Write(f.ino(), 2 * kBlockSize + 10, 1));
  EXPECT_EQ(a.size(), 2 * kBlockSize + 11);
  EXPECT_EQ(store_->store().Space().used_bytes, 3 * kBlockSize);
  // A write across a chunk boundary: blocks 15 and 16.
  ASSERT_OK_AND_ASSIGN(a, Write(f.ino(), kChunk - 10, 20));
  EXPECT_EQ(a.size(), kChunk + 10);
  EXPECT_EQ(a.blocks(), 5 * kBlockSize / 512);
  EXPECT_EQ(store_->store().Space().used_bytes, 5 * kBlockSize);
}

TEST_F(MetaStoreTest, CommitWithoutExtendKeepsTheSize) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK_AND_ASSIGN(Reservation reserved, store_->space().Reserve(f.ino(), 0, 3 * kBlockSize));
  ASSERT_OK_AND_ASSIGN(proto::Attr a,
                       store_->space().CommitWrite(f.ino(), 0, 3 * kBlockSize, false, reserved));
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(a.blocks(), 3 * kBlockSize / 512);
}

TEST_F(MetaStoreTest, ReservationsPastCapacityAreEnospc) {
  constexpr uint64_t kCapBlocks = kCapacity / kBlockSize;  // 64
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK_AND_ASSIGN(proto::Attr g, Create(kRootIno, "g"));
  ASSERT_OK(Write(f.ino(), 0, 2 * kBlockSize));
  // Room for exactly the rest.
  ASSERT_OK_AND_ASSIGN(Reservation held,
                       store_->space().Reserve(g.ino(), 0, (kCapBlocks - 2) * kBlockSize));
  EXPECT_EQ(held.blocks, kCapBlocks - 2);
  // Reservations count: nothing more fits.
  EXPECT_EQ(Err(store_->space().Reserve(f.ino(), 2 * kBlockSize, 1)), ENOSPC);
  // Rewriting allocated blocks needs no space.
  ASSERT_OK_AND_ASSIGN(Reservation none, store_->space().Reserve(f.ino(), 0, 2 * kBlockSize));
  EXPECT_EQ(none.blocks, 0u);
  store_->space().Unreserve(held);
  EXPECT_EQ(store_->store().Space().reserved_bytes, 0u);
  EXPECT_EQ(Err(store_->space().Reserve(g.ino(), 0, (kCapBlocks - 1) * kBlockSize)), ENOSPC);
  EXPECT_EQ(store_->store().Space().reserved_bytes, 0u);  // a refused reservation holds nothing
  ASSERT_OK(Write(g.ino(), 0, (kCapBlocks - 2) * kBlockSize));
  SpaceInfo space = store_->store().Space();
  EXPECT_EQ(space.used_bytes, kCapacity);
  EXPECT_EQ(space.reserved_bytes, 0u);
  EXPECT_EQ(Err(store_->space().Reserve(f.ino(), 2 * kBlockSize, 1)), ENOSPC);
  // Full, but overwriting in place still works.
  ASSERT_OK(Write(g.ino(), kBlockSize, 100));
  EXPECT_EQ(store_->store().Space().used_bytes, kCapacity);
}

// --- grants and reservations across a crash (issue: the ledger survives crashes) ----------------

class LedgerCrashTest : public MetaStoreTest {
 protected:
  void SetUp() override {
    capacity_ = 1ull << 30;  // room for grants under the grant policy
    MetaStoreTest::SetUp();
    proto::SessionRecord rec;
    ASSERT_OK(store_->sessions().PutSession(kA, rec));
    ASSERT_OK(store_->sessions().PutSession(kB, rec));
  }
  static constexpr uint64_t kA = 101, kB = 102;
  uint64_t GrantBlocks(uint64_t client, uint64_t wanted, uint64_t back = 0) {
    uint64_t added = 0;
    auto g = store_->space().Grant(client, wanted, back, &added);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : 0;
  }
  // The sessions' grants and the granted total agree, and the ledger holds.
  void ExpectConsistent(uint64_t want_granted_blocks) {
    const SpaceInfo s = store_->store().Space();
    EXPECT_TRUE(s.ledger_ok);
    EXPECT_EQ(s.granted_bytes, want_granted_blocks * kBlockSize);
    EXPECT_EQ(s.granted_bytes,
              (store_->space().GrantOf(kA) + store_->space().GrantOf(kB)) * kBlockSize);
    EXPECT_LE(s.used_bytes + s.granted_bytes + s.reserved_bytes, s.capacity_bytes);
  }
};

TEST_F(LedgerCrashTest, ACrashBetweenReserveAndCommitLeavesEveryGrantWhole) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  EXPECT_EQ(GrantBlocks(kA, 20), 20u);
  EXPECT_EQ(GrantBlocks(kB, 20), 20u);
  // A's write sits between reserve and commit...
  ASSERT_OK_AND_ASSIGN(Reservation r, store_->space().Reserve(f.ino(), 0, 4 * kBlockSize, kA));
  EXPECT_EQ(r.from_grant, 4u);
  // ... while another change commits (it writes the counters) ...
  ASSERT_OK(Create(kRootIno, "g").status());
  ASSERT_OK(Write(f.ino(), 10 * kBlockSize, kBlockSize).status());
  // ... and the server dies: the write never committed, A still holds its
  // whole grant (its mount resends the write from its cache).
  Reopen();
  EXPECT_EQ(store_->space().GrantOf(kA), 20u);
  EXPECT_EQ(store_->space().GrantOf(kB), 20u);
  ExpectConsistent(40);
  // Both sessions end: nothing granted, no wrap-around.
  ASSERT_OK(store_->sessions().EndSession(kA));
  ASSERT_OK(store_->sessions().EndSession(kB));
  ExpectConsistent(0);
  Reopen();
  ExpectConsistent(0);
  // And the space is all there again.
  ASSERT_OK(store_->sessions().PutSession(kA, proto::SessionRecord()));
  EXPECT_EQ(GrantBlocks(kA, 8), 8u);
}

TEST_F(LedgerCrashTest, AGivenUpWriteGivesItsGrantBack) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  GrantBlocks(kA, 20);
  ASSERT_OK_AND_ASSIGN(Reservation r, store_->space().Reserve(f.ino(), 0, 4 * kBlockSize, kA));
  store_->space().Unreserve(r);  // the chunk write failed
  EXPECT_EQ(store_->space().GrantOf(kA), 20u);
  ExpectConsistent(20);
  // A committed one debits the grant, in the same batch as the usage.
  ASSERT_OK_AND_ASSIGN(r, store_->space().Reserve(f.ino(), 0, 4 * kBlockSize, kA));
  ASSERT_OK(store_->space().CommitWrite(f.ino(), 0, 4 * kBlockSize, true, r).status());
  EXPECT_EQ(store_->space().GrantOf(kA), 16u);
  EXPECT_EQ(store_->store().Space().used_bytes, 4 * kBlockSize);
  Reopen();
  EXPECT_EQ(store_->space().GrantOf(kA), 16u);
  ExpectConsistent(16);
}

TEST_F(LedgerCrashTest, BlocksHeldByAWriteInProgressAreNotGivenBackOrReleased) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  GrantBlocks(kA, 20);
  ASSERT_OK_AND_ASSIGN(Reservation r, store_->space().Reserve(f.ino(), 0, 4 * kBlockSize, kA));
  // A give-back of everything keeps what the write holds.
  EXPECT_EQ(GrantBlocks(kA, 0, 100), 4u);
  ExpectConsistent(4);
  // The session ends meanwhile: those blocks stay granted until the write
  // commits, then the grant is gone.
  ASSERT_OK(store_->sessions().EndSession(kA));
  ExpectConsistent(4);
  ASSERT_OK(store_->space().CommitWrite(f.ino(), 0, 4 * kBlockSize, true, r).status());
  ExpectConsistent(0);
  EXPECT_EQ(store_->store().Space().used_bytes, 4 * kBlockSize);
  Reopen();
  ExpectConsistent(0);
}

TEST_F(LedgerCrashTest, AGrantForASessionThatEndedIsRefused) {
  // The session ended while a Grant was on its way: nothing is granted to
  // nobody (its space would stay taken until a restart).
  ASSERT_OK(store_->sessions().EndSession(kA));
  uint64_t added = 0;
  auto g = store_->space().Grant(kA, 20, 0, &added);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted) << g.status();
  EXPECT_EQ(added, 0u);
  ExpectConsistent(0);
  // Giving back needs no session.
  ASSERT_OK(store_->space().Grant(kA, 0, 5, &added).status());
}

TEST_F(LedgerCrashTest, TwoWritesOfOneSessionCannotBothSpendTheSameGrant) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  GrantBlocks(kA, 6);
  ASSERT_OK_AND_ASSIGN(Reservation r1, store_->space().Reserve(f.ino(), 0, 4 * kBlockSize, kA));
  ASSERT_OK_AND_ASSIGN(Reservation r2,
                       store_->space().Reserve(f.ino(), 8 * kBlockSize, 4 * kBlockSize, kA));
  EXPECT_EQ(r1.from_grant, 4u);
  EXPECT_EQ(r2.from_grant, 2u);  // the rest from free space
  EXPECT_EQ(store_->store().Space().reserved_bytes, 2 * kBlockSize);
  ASSERT_OK(store_->space().CommitWrite(f.ino(), 0, 4 * kBlockSize, true, r1).status());
  ASSERT_OK(
      store_->space().CommitWrite(f.ino(), 8 * kBlockSize, 4 * kBlockSize, true, r2).status());
  EXPECT_EQ(store_->space().GrantOf(kA), 0u);
  ExpectConsistent(0);
  EXPECT_EQ(store_->store().Space().used_bytes, 8 * kBlockSize);
  EXPECT_EQ(store_->store().Space().reserved_bytes, 0u);
}

// --- truncation ------------------------------------------------------------------------

TEST_F(MetaStoreTest, TruncateFreesBlocks) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  // 3 blocks in chunk 0, 2 in chunk 1, 1 in chunk 3.
  ASSERT_OK(Write(f.ino(), kChunk - 3 * kBlockSize, 5 * kBlockSize));
  ASSERT_OK(Write(f.ino(), 3 * kChunk, 10));
  EXPECT_EQ(store_->store().Space().used_bytes, 6 * kBlockSize);

  // Into the middle of a block: the block holding the new end stays.
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Truncate(f.ino(), kChunk + 100));
  EXPECT_EQ(a.size(), kChunk + 100);
  EXPECT_EQ(a.blocks(), 4 * kBlockSize / 512);
  EXPECT_EQ(store_->store().Space().used_bytes, 4 * kBlockSize);

  // To a chunk boundary.
  ASSERT_OK_AND_ASSIGN(a, Truncate(f.ino(), kChunk));
  EXPECT_EQ(a.blocks(), 3 * kBlockSize / 512);
  EXPECT_EQ(store_->store().Space().used_bytes, 3 * kBlockSize);

  // Growing allocates nothing.
  ASSERT_OK_AND_ASSIGN(a, Truncate(f.ino(), 10 * kChunk));
  EXPECT_EQ(a.size(), 10 * kChunk);
  EXPECT_EQ(a.blocks(), 3 * kBlockSize / 512);
  EXPECT_EQ(store_->store().Space().used_bytes, 3 * kBlockSize);

  // To zero frees everything; a later write allocates again from scratch.
  ASSERT_OK_AND_ASSIGN(a, Truncate(f.ino(), 0));
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(a.blocks(), 0u);
  EXPECT_EQ(store_->store().Space().used_bytes, 0u);
  ASSERT_OK_AND_ASSIGN(Reservation reserved, store_->space().Reserve(f.ino(), 0, kChunk));
  EXPECT_EQ(reserved.blocks, kChunk / kBlockSize);
  store_->space().Unreserve(reserved);
}

}  // namespace
}  // namespace grantfs
