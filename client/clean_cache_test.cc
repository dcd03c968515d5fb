// CleanCache (client/clean_cache.h): what is kept, when it is served, and
// what makes it go.
#include "client/clean_cache.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace grantfs {
namespace {

std::shared_ptr<const std::string> Bytes(const std::string& s) {
  return std::make_shared<const std::string>(s);
}

// The bytes the overlay gives for [offset, offset + size), '.' where it has
// none, cut at its end.
std::string View(const WriteCache::Overlay& o, uint64_t offset, size_t size) {
  std::string out(size, '.');
  for (const WriteCache::Piece& p : o.pieces) out.replace(p.offset - offset, p.data.size(), p.data);
  if (o.end < offset + size) out.resize(o.end > offset ? o.end - offset : 0);
  return out;
}

TEST(CleanCache, KeepsAcknowledgedBytesUnderTheSameStamp) {
  CleanCache c(1 << 20);
  CleanCache::Token t = c.Begin(7);
  c.Put(1, t, 2, Bytes("abc"), 5);
  WriteCache::Overlay o;
  ASSERT_TRUE(c.Read(1, 7, 0, 8, &o));
  EXPECT_EQ(o.end, 5u);
  EXPECT_EQ(View(o, 0, 8), "..abc");
  ASSERT_TRUE(c.Read(1, 7, 3, 1, &o));
  EXPECT_EQ(View(o, 3, 1), "b");
  EXPECT_FALSE(c.Read(2, 7, 0, 8, &o));  // another file
  EXPECT_FALSE(c.Read(1, 0, 0, 8, &o));  // lease not held
  // Another node changed the file: the stamp moved, the bytes go.
  EXPECT_FALSE(c.Read(1, 9, 0, 8, &o));
  EXPECT_FALSE(c.Read(1, 7, 0, 8, &o));
  EXPECT_EQ(c.bytes(), 0u);
}

TEST(CleanCache, NewerBytesCutWhatTheyOverlapAndTheSizeOnlyGrows) {
  CleanCache c(1 << 20);
  c.Put(1, c.Begin(3), 0, Bytes("aaaa"), 4);
  c.Put(1, c.Begin(3), 6, Bytes("cc"), 8);
  c.Put(1, c.Begin(3), 2, Bytes("BBBBB"), 7);  // cuts both
  WriteCache::Overlay o;
  ASSERT_TRUE(c.Read(1, 3, 0, 10, &o));
  EXPECT_EQ(o.end, 8u);
  EXPECT_EQ(View(o, 0, 10), "aaBBBBBc");
  // One inside another splits it; one over several cuts each.
  c.Put(1, c.Begin(3), 3, Bytes("x"), 4);
  ASSERT_TRUE(c.Read(1, 3, 0, 10, &o));
  EXPECT_EQ(View(o, 0, 10), "aaBxBBBc");
  c.Put(1, c.Begin(3), 1, Bytes("yyyyyy"), 4);
  ASSERT_TRUE(c.Read(1, 3, 0, 10, &o));
  EXPECT_EQ(View(o, 0, 10), "ayyyyyyc");
  ASSERT_TRUE(c.Read(1, 3, 5, 2, &o));
  EXPECT_EQ(View(o, 5, 2), "yy");
  // Under a new stamp, what was kept under the old one is not comparable:
  // the first flush after it keeps nothing, and neither does one begun
  // before it; the next one is kept.
  CleanCache::Token old_flush = c.Begin(3);
  c.Put(1, c.Begin(4), 0, Bytes("z"), 1);
  EXPECT_FALSE(c.Read(1, 4, 0, 10, &o));
  EXPECT_FALSE(c.Read(1, 3, 0, 10, &o));
  c.Put(1, old_flush, 0, Bytes("w"), 1);
  EXPECT_FALSE(c.Read(1, 3, 0, 10, &o));
  c.Put(1, c.Begin(4), 0, Bytes("z"), 1);
  ASSERT_TRUE(c.Read(1, 4, 0, 10, &o));
  EXPECT_EQ(View(o, 0, 10), "z");
}

// A flush that is not kept takes the file's kept bytes with it, and what
// the flushes begun before it would keep: their sizes may be older than
// the one it gave the file.
TEST(CleanCache, AFlushNotKeptIsADropOfTheFile) {
  CleanCache c(4 << 20);
  CleanCache::Token small = c.Begin(3);
  CleanCache::Token large = c.Begin(3);
  c.Put(1, large, 8192, Bytes(std::string(CleanCache::kMaxPiece + 1, 'L')),
        8192 + CleanCache::kMaxPiece + 1);
  c.Put(1, small, 0, Bytes("s"), 4096);  // the server may have applied it first
  WriteCache::Overlay o;
  EXPECT_FALSE(c.Read(1, 3, 0, 1, &o));
  // The other order: the small one kept first, then the large one drops it.
  small = c.Begin(3);
  large = c.Begin(3);
  c.Put(1, small, 0, Bytes("s"), 4096);
  ASSERT_TRUE(c.Read(1, 3, 0, 1, &o));
  c.Put(1, large, 8192, Bytes(std::string(CleanCache::kMaxPiece + 1, 'L')),
        8192 + CleanCache::kMaxPiece + 1);
  EXPECT_FALSE(c.Read(1, 3, 0, 1, &o));
  EXPECT_EQ(c.bytes(), 0u);
}

TEST(CleanCache, ADropRefusesTheFlushesBegunBeforeIt) {
  CleanCache c(1 << 20);
  c.Put(1, c.Begin(3), 0, Bytes("old"), 3);
  CleanCache::Token before = c.Begin(3);
  c.Drop(1);  // e.g. a truncate at the server while the flush was out
  WriteCache::Overlay o;
  EXPECT_FALSE(c.Read(1, 3, 0, 4, &o));
  c.Put(1, before, 0, Bytes("new"), 3);
  EXPECT_FALSE(c.Read(1, 3, 0, 4, &o));
  // A flush begun after the drop is kept; a drop of another file does not
  // matter.
  CleanCache::Token after = c.Begin(3);
  c.Drop(2);
  c.Put(1, after, 0, Bytes("new"), 3);
  ASSERT_TRUE(c.Read(1, 3, 0, 4, &o));
  EXPECT_EQ(View(o, 0, 4), "new");
}

TEST(CleanCache, ForgottenDropsRefuseEveryFlushBegunBefore) {
  CleanCache c(1 << 20);
  CleanCache::Token early = c.Begin(3);
  for (uint64_t ino = 100; ino < 100 + 5000; ++ino) c.Drop(ino);
  c.Put(1, early, 0, Bytes("x"), 1);
  WriteCache::Overlay o;
  EXPECT_FALSE(c.Read(1, 3, 0, 1, &o));
  c.Put(1, c.Begin(3), 0, Bytes("x"), 1);
  EXPECT_TRUE(c.Read(1, 3, 0, 1, &o));
}

TEST(CleanCache, LargePiecesAreNotKeptAndDropWhatTheyOverlap) {
  CleanCache c(1 << 20);
  c.Put(1, c.Begin(3), 0, Bytes("small"), 5);
  c.Put(1, c.Begin(3), 0, Bytes(std::string(CleanCache::kMaxPiece + 1, 'L')),
        CleanCache::kMaxPiece + 1);
  WriteCache::Overlay o;
  EXPECT_FALSE(c.Read(1, 3, 0, 5, &o));
  EXPECT_EQ(c.bytes(), 0u);
  // And a flush while the lease was not held likewise.
  c.Put(1, c.Begin(3), 0, Bytes("small"), 5);
  c.Put(1, c.Begin(0), 10, Bytes("x"), 11);
  EXPECT_FALSE(c.Read(1, 3, 0, 5, &o));
}

TEST(CleanCache, StaysWithinItsBytesOldestFirst) {
  const std::string a(1000, 'a'), b(1000, 'b'), cc(1000, 'c');
  CleanCache c(2500);
  c.Put(1, c.Begin(3), 0, Bytes(a), 1000);
  c.Put(2, c.Begin(3), 0, Bytes(b), 1000);
  c.Put(3, c.Begin(3), 0, Bytes(cc), 1000);  // past 2500: file 1's goes
  EXPECT_LE(c.bytes(), 2500u);
  EXPECT_GE(c.bytes(), 2000u);
  WriteCache::Overlay o;
  EXPECT_FALSE(c.Read(1, 3, 0, 4, &o));
  ASSERT_TRUE(c.Read(2, 3, 0, 1000, &o));
  EXPECT_EQ(View(o, 0, 1000), b);
  ASSERT_TRUE(c.Read(3, 3, 0, 1000, &o));
  EXPECT_EQ(View(o, 0, 1000), cc);
  // A piece is counted by the buffer it holds, not the bytes it shows.
  auto big = std::make_shared<std::string>(4000, 'x');
  big->resize(1500);  // capacity stays 4000: copied, not held
  CleanCache d(1 << 20);
  d.Put(1, d.Begin(3), 0, big, 1500);
  EXPECT_LT(d.bytes(), 4000u);
  // Off: nothing kept.
  CleanCache off(0);
  off.Put(1, off.Begin(3), 0, Bytes("a"), 1);
  EXPECT_FALSE(off.Read(1, 3, 0, 1, &o));
}

}  // namespace
}  // namespace grantfs
