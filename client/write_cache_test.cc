// WriteCache (client/write_cache.h): what reaches the server, the grant ledger, cached reads.
#include "client/write_cache.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/grant_pool.h"
#include "client/test_util.h"
#include "client/write_cache_test_util.h"
#include "common/clock.h"
#include "common/errno_status.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

TEST(WriteCache, HandPickedShapesReachTheServerExactly) {
  Harness h;
  h.cache.Start();
  Model m;
  std::mt19937_64 rng(1);
  auto w = [&](uint64_t ino, uint64_t offset, size_t size) {
    const std::string d = RandomBytes(&rng, size);
    ASSERT_TRUE(h.Write(ino, offset, d)) << ino << " @" << offset << " +" << size;
    m.Write(ino, offset, d);
  };
  // File 1: a sequential stream of 100 KiB writes over 1.5 MiB (crosses the
  // 1 MiB extent boundary), then a write inside the first extent, one
  // straddling the two extents, and a backwards write.
  for (uint64_t off = 0; off < 1536 * kKiB; off += 100 * kKiB) w(1, off, 100 * kKiB);
  w(1, 4000, 300);
  w(1, 1 * kMiB - 5000, 10000);
  w(1, 700 * kKiB, 50 * kKiB);
  w(1, 600 * kKiB, 50 * kKiB);
  // File 2: out of order, a hole, a single byte, rewrites of one range.
  w(2, 3 * kMiB, 64 * kKiB);
  w(2, 0, 1);
  w(2, 2 * kMiB + 17, 4096);
  w(2, 8191, 2);
  for (int i = 0; i < 5; ++i) w(2, 100 * kKiB, 200 * kKiB);
  // File 3: backwards writes, each ending where the previous one began.
  for (int i = 9; i >= 0; --i) w(3, i * 128 * kKiB, 128 * kKiB);

  ASSERT_TRUE(h.FlushAll().ok());
  for (uint64_t ino : {1, 2, 3}) {
    EXPECT_TRUE(SameBytes(m.files[ino], h.server.content(ino))) << "inode " << ino;
    EXPECT_EQ(h.cache.extent_count(ino), 0u) << "inode " << ino;
  }
  EXPECT_EQ(h.cache.dirty_bytes(), 0u);
  ExpectAllSentInPieces(h.server, 1 * kMiB);
  EXPECT_EQ(h.server.used(), m.BlockBytes());
  EXPECT_EQ(h.pool.available(), h.grants.granted() - h.server.used());
}

TEST(WriteCache, RandomWritesToSeveralFilesReachTheServerExactly) {
  Harness h(SmallCache(/*flushers=*/4));
  // Random delays in the fake server so flushes finish out of order.
  h.server.set_hook([](int index, uint64_t, uint64_t, const std::string&) {
    absl::SleepFor(absl::Microseconds((index * 7919) % 3000));
    return absl::OkStatus();
  });
  h.cache.Start();
  Model m;
  std::mt19937_64 rng(42);
  const absl::Status s = h.Within([&] {
    uint64_t cursor[4] = {0, 0, 0, 0};
    for (int i = 0; i < 300; ++i) {
      const uint64_t ino = 1 + rng() % 3;
      uint64_t offset;
      size_t size;
      switch (rng() % 3) {
        case 0:  // streaming
          size = 4 * kKiB + rng() % (252 * kKiB);
          offset = cursor[ino];
          cursor[ino] = (cursor[ino] + size) % (4 * kMiB);
          break;
        case 1:  // anywhere, any size
          size = 1 + rng() % (256 * kKiB);
          offset = rng() % (4 * kMiB);
          break;
        default:  // small overwrites near the start
          size = 1 + rng() % 8192;
          offset = rng() % (64 * kKiB);
          break;
      }
      const std::string d = RandomBytes(&rng, size);
      if (!h.Write(ino, offset, d)) return absl::InternalError("write refused");
      m.Write(ino, offset, d);
      EXPECT_LE(h.cache.dirty_bytes(), 4 * kMiB);
    }
    return h.cache.FlushAll();
  });
  ASSERT_TRUE(s.ok()) << s;
  for (uint64_t ino : {1, 2, 3}) {
    EXPECT_TRUE(SameBytes(m.files[ino], h.server.content(ino))) << "inode " << ino;
  }
  EXPECT_EQ(h.cache.dirty_bytes(), 0u);
  ExpectAllSentInPieces(h.server, 1 * kMiB);
  EXPECT_EQ(h.server.used(), m.BlockBytes());
  EXPECT_EQ(h.pool.available(), h.grants.granted() - h.server.used());
}

TEST(WriteCache, OverlappingWritesAreAppliedInWriteOrder) {
  Harness h(SmallCache(/*flushers=*/4));
  absl::Notification first_started;
  h.server.set_hook([&](int index, uint64_t, uint64_t, const std::string&) {
    if (index == 0) {
      first_started.Notify();
      absl::SleepFor(absl::Milliseconds(200));  // the older write is slow
    }
    return absl::OkStatus();
  });
  h.cache.Start();
  const std::string a(1 * kMiB, 'A'), b(1 * kMiB, 'B'), c(1 * kMiB, 'C');
  ASSERT_TRUE(h.Write(1, 0, a));  // a full extent: sent at once
  ASSERT_TRUE(first_started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(h.Write(1, 0, b));           // same range, while A is in flight
  ASSERT_TRUE(h.Write(1, 512 * kKiB, c));  // overlaps B's second half
  ASSERT_TRUE(h.FlushInode(1).ok());

  std::string want = b;
  want.resize(1536 * kKiB);
  want.replace(512 * kKiB, 1 * kMiB, c);
  EXPECT_TRUE(SameBytes(want, h.server.content(1)));
  const std::vector<FakeServer::Call> applied = h.server.applied();
  ASSERT_EQ(applied.size(), 3u);
  EXPECT_EQ(applied[0].data[0], 'A');
  EXPECT_EQ(applied[1].data[0], 'B');
  EXPECT_EQ(applied[2].data[0], 'C');
}

TEST(WriteCache, ManyVersionsOfOneRangeEndWithTheLast) {
  Harness h(SmallCache(/*flushers=*/4));
  h.server.set_hook([](int index, uint64_t, uint64_t, const std::string&) {
    absl::SleepFor(absl::Microseconds(((index * 31) % 5) * 1000));
    return absl::OkStatus();
  });
  h.cache.Start();
  Model m;
  std::mt19937_64 rng(7);
  const absl::Status s = h.Within([&] {
    for (int v = 0; v < 40; ++v) {
      const uint64_t offset = (rng() % 16) * 64 * kKiB;
      const std::string d = RandomBytes(&rng, 1 * kMiB - offset % kMiB);
      if (!h.Write(5, offset, d)) return absl::InternalError("write refused");
      m.Write(5, offset, d);
    }
    return h.cache.FlushInode(5);
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(SameBytes(m.files[5], h.server.content(5)));
}

TEST(WriteCache, SameBlockWrittenTwiceIsDebitedOnce) {
  Harness h;  // flushers not started: everything stays cached
  ASSERT_TRUE(h.Write(1, 0, std::string(4096, 'x')));
  const uint64_t granted = h.grants.granted();
  EXPECT_EQ(granted, 64 * kMiB);
  EXPECT_EQ(h.pool.available(), granted - 4096);
  ASSERT_TRUE(h.Write(1, 0, std::string(4096, 'y')));
  EXPECT_EQ(h.pool.available(), granted - 4096);
  ASSERT_TRUE(h.Write(1, 100, std::string(100, 'z')));
  EXPECT_EQ(h.pool.available(), granted - 4096);
  EXPECT_EQ(h.grants.calls(), 1);
}

TEST(WriteCache, OneByteWriteDebitsOneBlock) {
  Harness h;
  ASSERT_TRUE(h.Write(1, 5000, "q"));
  EXPECT_EQ(h.pool.available(), h.grants.granted() - 4096);
  // The same block in another inode is another block.
  ASSERT_TRUE(h.Write(2, 5000, "q"));
  EXPECT_EQ(h.pool.available(), h.grants.granted() - 8192);
  // Two bytes across a block boundary: two blocks.
  ASSERT_TRUE(h.Write(3, 8191, "rs"));
  EXPECT_EQ(h.pool.available(), h.grants.granted() - 16384);
}

// A block already debited by a cached extent is not debited again by a
// write that touches the block but not the extent's bytes (the contract of
// NewBlockBytes: "blocks that no cached extent of `inode` has debited").
TEST(WriteCache, WritesSharingABlockButNoBytesDebitItOnce) {
  Harness h;
  const uint64_t g = 64 * kMiB;
  // A small sequential appender (a log): eight 512-byte appends fill one
  // block, all coalesced into one extent.
  for (uint64_t off = 0; off < 4096; off += 512) {
    ASSERT_TRUE(h.Write(1, off, std::string(512, 'l')));
  }
  EXPECT_EQ(h.cache.extent_count(1), 1u);
  EXPECT_EQ(h.pool.available(), g - 4096) << "debited " << g - h.pool.available();
  // Two separate small writes in one block of another file.
  ASSERT_TRUE(h.Write(2, 5000, "q"));
  ASSERT_TRUE(h.Write(2, 8191, "rs"));  // blocks 1 (debited above) and 2
  EXPECT_EQ(h.pool.available(), g - 4096 - 8192) << "debited " << g - h.pool.available();
  EXPECT_EQ(h.grants.granted(), g);
}

TEST(WriteCache, PartlyCachedRangeDebitsOnlyItsNewBlocks) {
  Harness h;
  ASSERT_TRUE(h.Write(1, 0, std::string(4096, 'a')));
  // [2048, 10240) touches blocks 0, 1, 2; block 0 is already debited.
  ASSERT_TRUE(h.Write(1, 2048, std::string(8192, 'b')));
  EXPECT_EQ(h.pool.available(), h.grants.granted() - 12288);
  // Blocks 1..3, overlapping the cached bytes: only 3 is new.
  ASSERT_TRUE(h.Write(1, 5000, std::string(10000, 'c')));
  EXPECT_EQ(h.pool.available(), h.grants.granted() - 16384);
}

TEST(WriteCache, PoolAfterFlushAllIsGrantMinusServerUse) {
  Harness h;
  h.cache.Start();
  ASSERT_TRUE(h.Write(1, 0, std::string(10000, 'a')));     // 3 blocks
  ASSERT_TRUE(h.Write(1, 2 * kMiB, std::string(1, 'b')));  // 1 block
  ASSERT_TRUE(h.FlushAll().ok());
  EXPECT_EQ(h.server.used(), 4 * kBlock);
  EXPECT_EQ(h.pool.available(), h.grants.granted() - 4 * kBlock);

  // Overwrites of blocks the server already has: debited again (nothing is
  // cached for them any more), used nothing, all of it comes back.
  ASSERT_TRUE(h.Write(1, 0, std::string(8192, 'c')));
  EXPECT_EQ(h.pool.available(), h.grants.granted() - 6 * kBlock);
  ASSERT_TRUE(h.FlushAll().ok());
  EXPECT_EQ(h.server.used(), 4 * kBlock);
  EXPECT_EQ(h.pool.available(), h.grants.granted() - h.server.used());
  EXPECT_EQ(h.grants.calls(), 1);
}

// Two cached extents that share a 4 KiB block but no byte are sent in write
// order: the server charges a newly allocated block to the write that
// reaches it first, and the older extent is the one that was debited for
// it. Even with two flushers and a slow first flush, the ledger is exact.
TEST(WriteCache, ExtentsSharingABlockAreSentInOrderAndTheLedgerIsExact) {
  GrantPoolOptions popts;
  popts.initial_refill_bytes = 4096;
  popts.max_refill_bytes = 4096;
  Harness h(SmallCache(/*flushers=*/2), popts);
  ASSERT_TRUE(h.Write(1, 0, std::string(100, 'a')));    // debits block 0 (one RPC)
  ASSERT_TRUE(h.Write(1, 200, std::string(100, 'b')));  // block 0 again: no debit
  h.server.set_hook([&](int, uint64_t, uint64_t offset, const std::string&) {
    // Give the younger extent every chance to overtake the older one.
    if (offset == 0) absl::SleepFor(absl::Milliseconds(100));
    return absl::OkStatus();
  });
  h.cache.Start();
  ASSERT_TRUE(h.FlushInode(1).ok());

  const std::vector<FakeServer::Call> applied = h.server.applied();
  ASSERT_EQ(applied.size(), 2u);
  EXPECT_EQ(applied[0].offset, 0u);
  EXPECT_EQ(applied[1].offset, 200u);
  std::string want(300, '\0');
  want.replace(0, 100, std::string(100, 'a'));
  want.replace(200, 100, std::string(100, 'b'));
  EXPECT_TRUE(SameBytes(want, h.server.content(1)));
  EXPECT_EQ(h.server.used(), 4096u);
  // The pool holds exactly what the server still grants this client.
  EXPECT_EQ(h.pool.available(), h.grants.granted() - h.server.used());
}

TEST(WriteCache, WriteTheGrantCannotCoverFailsAndCachesNothing) {
  GrantPoolOptions popts;
  popts.initial_refill_bytes = 4096;
  popts.max_refill_bytes = 4096;
  Harness h(SmallCache(), popts);
  h.grants.set_limit(0);
  EXPECT_FALSE(h.Write(1, 0, std::string(100, 'a')));
  EXPECT_EQ(h.cache.dirty_bytes(), 0u);
  EXPECT_EQ(h.cache.extent_count(1), 0u);
  EXPECT_TRUE(h.cache.Snapshot(1, 0, 4096).empty());
  proto::Attr attr;
  attr.set_ino(1);
  attr.set_size(7);
  h.cache.PatchAttr(&attr);
  EXPECT_EQ(attr.size(), 7u);
  EXPECT_LE(h.grants.calls(), 2);

  // One block of grant: the first block fits, a second new block does not,
  // an overwrite of the cached block needs no grant.
  h.grants.set_limit(4096);
  ASSERT_TRUE(h.Write(2, 0, std::string(4096, 'x')));
  EXPECT_EQ(h.pool.available(), 0u);
  h.grants.set_limit(0);
  EXPECT_FALSE(h.Write(2, 4096, std::string(4096, 'y')));
  EXPECT_EQ(h.cache.dirty_bytes(), 4096u);
  EXPECT_EQ(h.cache.extent_count(2), 1u);
  const int calls = h.grants.calls();
  EXPECT_TRUE(h.Write(2, 10, std::string(20, 'z')));
  EXPECT_EQ(h.grants.calls(), calls);
  EXPECT_EQ(h.cache.dirty_bytes(), 4096u);

  h.cache.Start();
  ASSERT_TRUE(h.FlushAll().ok());
  std::string want(4096, 'x');
  want.replace(10, 20, std::string(20, 'z'));
  EXPECT_TRUE(SameBytes(want, h.server.content(2)));
  EXPECT_EQ(h.server.content(1), "");
  for (const FakeServer::Call& c : h.server.applied()) EXPECT_EQ(c.ino, 2u);
}

TEST(WriteCache, SnapshotAndApplyOverlayCachedBytes) {
  Harness h;  // not started: everything stays cached
  ASSERT_TRUE(h.Write(7, 4, "WXYZ"));
  std::string data = "0123456789";  // what the server returned
  WriteCache::Apply(h.cache.Snapshot(7, 0, 10), 0, 10, &data);
  EXPECT_EQ(data, "0123WXYZ89");
  data = "2345";
  WriteCache::Apply(h.cache.Snapshot(7, 2, 4), 2, 4, &data);
  EXPECT_EQ(data, "23WX");
  EXPECT_TRUE(h.cache.Snapshot(7, 8, 100).pieces.empty());
  EXPECT_TRUE(h.cache.Snapshot(99, 0, 100).empty());

  // Past the server's end of file: the gap reads as zeros.
  ASSERT_TRUE(h.Write(8, 10, "XYZ"));
  data = "abc";
  WriteCache::Apply(h.cache.Snapshot(8, 0, 100), 0, 100, &data);
  EXPECT_EQ(data, std::string("abc\0\0\0\0\0\0\0XYZ", 13));
  data = "";
  WriteCache::Apply(h.cache.Snapshot(8, 5, 7), 5, 7, &data);
  EXPECT_EQ(data, std::string("\0\0\0\0\0XY", 7));

  // Two cached extents over one range: the newer wins.
  ASSERT_TRUE(h.Write(9, 0, std::string(1 * kMiB, 'a')));
  ASSERT_TRUE(h.Write(9, 1 * kMiB, std::string(10, 'c')));  // seals the first
  ASSERT_TRUE(h.Write(9, 100, std::string(100, 'b')));
  ASSERT_EQ(h.cache.extent_count(9), 3u);
  data = "";
  WriteCache::Apply(h.cache.Snapshot(9, 50, 100), 50, 100, &data);
  EXPECT_EQ(data, std::string(50, 'a') + std::string(50, 'b'));
}

TEST(WriteCache, AHoleBelowACachedWriteReadsAsZeros) {
  Harness h;  // not started: everything stays cached
  // pwrite past the server's end of file, then read a range wholly inside
  // the hole below it: the server has nothing there, the cache no piece,
  // yet the bytes exist (they were a short read before: end of file).
  ASSERT_TRUE(h.Write(5, 0x2440c, std::string(45179, 'w')));
  WriteCache::Overlay o = h.cache.Snapshot(5, 0x14827, 0x30ad);
  EXPECT_TRUE(o.pieces.empty());
  EXPECT_EQ(o.end, 0x2440cu + 45179);
  std::string data;  // the server's answer: end of file
  WriteCache::Apply(o, 0x14827, 0x30ad, &data);
  EXPECT_EQ(data, std::string(0x30ad, '\0'));

  // A read straddling the cached end stops there.
  std::string tail = "";
  WriteCache::Apply(h.cache.Snapshot(5, 0x2440c + 45000, 1000), 0x2440c + 45000, 1000, &tail);
  EXPECT_EQ(tail, std::string(179, 'w'));
  // Past the cached end: still end of file.
  std::string past;
  WriteCache::Apply(h.cache.Snapshot(5, 0x2440c + 45179, 100), 0x2440c + 45179, 100, &past);
  EXPECT_EQ(past, "");

  // 100 bytes at 0 and at 200000: 1000 bytes at 1000 are zeros.
  ASSERT_TRUE(h.Write(6, 0, std::string(100, 'a')));
  ASSERT_TRUE(h.Write(6, 200000, std::string(100, 'b')));
  std::string mid;
  WriteCache::Apply(h.cache.Snapshot(6, 1000, 1000), 1000, 1000, &mid);
  EXPECT_EQ(mid, std::string(1000, '\0'));
}

TEST(WriteCache, PatchAttrRaisesSizeToTheCachedEnd) {
  Harness h;
  const int64_t t0 = h.clock.NowNanos();
  h.clock.Advance(absl::Seconds(3));
  const int64_t t1 = h.clock.NowNanos();
  ASSERT_TRUE(h.Write(5, 100, std::string(100, 'x')));

  proto::Attr a;
  a.set_ino(5);
  a.set_size(50);
  a.set_mtime_ns(t0);
  a.set_ctime_ns(t0);
  h.cache.PatchAttr(&a);
  EXPECT_EQ(a.size(), 200u);
  EXPECT_EQ(a.mtime_ns(), t1);
  EXPECT_EQ(a.ctime_ns(), t1);

  proto::Attr bigger;  // the server already knows a larger file
  bigger.set_ino(5);
  bigger.set_size(1000);
  bigger.set_mtime_ns(t1 + 5);
  bigger.set_ctime_ns(t1 + 5);
  h.cache.PatchAttr(&bigger);
  EXPECT_EQ(bigger.size(), 1000u);
  EXPECT_EQ(bigger.mtime_ns(), t1 + 5);

  proto::Attr other;
  other.set_ino(6);
  other.set_size(10);
  other.set_mtime_ns(t0);
  other.set_ctime_ns(t0);
  const std::string before = other.SerializeAsString();
  h.cache.PatchAttr(&other);
  EXPECT_EQ(other.SerializeAsString(), before);

  h.cache.Start();
  ASSERT_TRUE(h.FlushAll().ok());
  proto::Attr after;
  after.set_ino(5);
  after.set_size(50);
  after.set_mtime_ns(t0);
  h.cache.PatchAttr(&after);  // nothing cached any more: the server's word
  EXPECT_EQ(after.size(), 50u);
  EXPECT_EQ(after.mtime_ns(), t0);
}

TEST(WriteCache, LargeWriteIsSentInPiecesOfAtMostExtentBytes) {
  Harness h;
  h.cache.Start();
  std::mt19937_64 rng(11);
  const std::string d = RandomBytes(&rng, 2 * kMiB + 512 * kKiB);
  ASSERT_TRUE(h.Write(1, 1000, d));
  ASSERT_TRUE(h.FlushInode(1).ok());
  std::string want(1000, '\0');
  want += d;
  EXPECT_TRUE(SameBytes(want, h.server.content(1)));
  ExpectAllSentInPieces(h.server, 1 * kMiB);
}
}  // namespace

// A flush gives the file the time of its latest cached write
// (WriteRequest.time_ns), so a close that does not wait for its data does
// not move mtime later; once the times were set after the writes
// (TimesSet: a setattr in the namespace log), flushes leave them alone, and
// a later write stamps again.
TEST(WriteCache, FlushesCarryTheTimeOfTheLatestWriteOrKeepSetTimes) {
  Harness h;
  h.cache.Start();
  const int64_t t0 = h.clock.NowNanos();
  ASSERT_TRUE(h.Write(1, 0, "abc"));
  h.clock.Advance(absl::Seconds(7));  // the flush goes later than the write
  ASSERT_TRUE(h.FlushInode(1).ok());
  std::vector<WriteCache::WriteTime> times = h.server.times();
  ASSERT_EQ(times.size(), 1u);
  EXPECT_EQ(times[0].ns, t0);
  EXPECT_FALSE(times[0].keep);

  ASSERT_TRUE(h.Write(1, 3, "def"));
  h.cache.TimesSet(1);
  proto::Attr a;
  a.set_ino(1);
  a.set_mtime_ns(42);  // utimes to an old time: not raised by the write's time
  a.set_ctime_ns(43);
  h.cache.PatchAttr(&a);
  EXPECT_EQ(a.mtime_ns(), 42);
  EXPECT_EQ(a.size(), 6u);
  ASSERT_TRUE(h.FlushInode(1).ok());
  times = h.server.times();
  ASSERT_EQ(times.size(), 2u);
  EXPECT_TRUE(times[1].keep);

  h.clock.Advance(absl::Seconds(1));
  const int64_t t2 = h.clock.NowNanos();
  ASSERT_TRUE(h.Write(1, 6, "g"));
  ASSERT_TRUE(h.FlushInode(1).ok());
  times = h.server.times();
  ASSERT_EQ(times.size(), 3u);
  EXPECT_EQ(times[2].ns, t2);
  EXPECT_FALSE(times[2].keep);
  EXPECT_EQ(h.server.content(1), "abcdefg");
}

// A file gone (Discard) sends nothing more: its bytes are dropped with their
// debit refunded, and a refusal of a flush already in flight is not
// reported to anyone. Still open, it keeps its bytes (readable, flushed),
// and their refusal is not reported either.
TEST(WriteCache, DiscardDropsCachedBytesAndRefundsThem) {
  Harness h;
  h.cache.Start();
  ASSERT_TRUE(h.Write(5, 0, std::string(10000, 'x')));
  EXPECT_GT(h.cache.CachedBytes(5), 0u);
  EXPECT_LT(h.pool.available(), h.grants.granted());
  h.cache.Discard(5, /*still_open=*/false);
  EXPECT_EQ(h.cache.CachedBytes(5), 0u);
  EXPECT_EQ(h.cache.dirty_bytes(), 0u);
  EXPECT_EQ(h.pool.available(), h.grants.granted());  // the whole debit back
  ASSERT_TRUE(h.FlushAll().ok());
  EXPECT_TRUE(h.server.times().empty());
  EXPECT_TRUE(h.FlushInode(5).ok());

  // In flight when discarded: the server's refusal is expected.
  absl::Notification sent, go;
  h.server.set_hook([&](int, uint64_t ino, uint64_t, const std::string&) -> absl::Status {
    if (ino != 6) return absl::OkStatus();
    sent.Notify();
    go.WaitForNotification();
    return ErrnoStatus(ENOENT, "gone");
  });
  ASSERT_TRUE(h.Write(6, 0, "y"));
  std::thread flush([&] { (void)h.cache.FlushInode(6); });
  sent.WaitForNotification();
  h.cache.Discard(6, /*still_open=*/false);
  go.Notify();
  flush.join();
  EXPECT_TRUE(h.FlushInode(6).ok());  // nothing reported
  EXPECT_EQ(h.cache.CachedBytes(6), 0u);
  EXPECT_EQ(h.cache.dirty_bytes(), 0u);

  h.server.set_hook([&](int, uint64_t ino, uint64_t, const std::string&) -> absl::Status {
    return ino == 7 ? ErrnoStatus(ENOENT, "gone") : absl::OkStatus();
  });
  ASSERT_TRUE(h.Write(7, 0, "zz"));
  h.cache.Discard(7, /*still_open=*/true);
  EXPECT_EQ(h.cache.CachedBytes(7), 2u);
  WriteCache::Overlay o = h.cache.Snapshot(7, 0, 2);
  EXPECT_EQ(o.end, 2u);
  EXPECT_TRUE(h.FlushInode(7).ok());  // refused, as expected: not reported
  EXPECT_EQ(h.cache.CachedBytes(7), 0u);
}

}  // namespace grantfs
