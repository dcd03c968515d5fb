#include "client/lease_cache.h"

#include <sys/stat.h>

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace grantfs {
namespace {

proto::Attr AttrOf(uint64_t ino, uint32_t mode) {
  proto::Attr a;
  a.set_ino(ino);
  a.set_mode(mode);
  return a;
}

class LeaseCacheTest : public ::testing::Test {
 protected:
  LeaseCacheTest() : cache_(LeaseCacheOptions{.clock = &clock_}) {
    cache_.SetTerm(absl::Seconds(3));
    cache_.Subscribed(clock_.Now());
  }
  FakeClock clock_;
  LeaseCache cache_;
};

TEST_F(LeaseCacheTest, NothingIsLeasedBeforeTheStreamIsUp) {
  LeaseCache fresh(LeaseCacheOptions{.clock = &clock_});
  fresh.SetTerm(absl::Seconds(3));
  fresh.Renewed(clock_.Now());
  const LeaseCache::Ticket t = fresh.Take();
  fresh.PutAttr(t, AttrOf(5, 0100644));
  EXPECT_FALSE(fresh.Attr(5).has_value());
}

TEST_F(LeaseCacheTest, AnObjectRecalledTooOftenFallsBackForAWhile) {
  using K = LeaseCache::Kind;
  EXPECT_FALSE(cache_.FallingBack({K::kDir, 7}));
  cache_.FallBack({K::kDir, 7});
  EXPECT_TRUE(cache_.FallingBack({K::kDir, 7}));
  // Only that key: not the inode's attributes, not another directory.
  EXPECT_FALSE(cache_.FallingBack({K::kAttr, 7}));
  EXPECT_FALSE(cache_.FallingBack({K::kDir, 8}));
  clock_.Advance(LeaseCache::kFallBack);
  EXPECT_FALSE(cache_.FallingBack({K::kDir, 7}));
  // Bounded: past 4096 keys falling back at once, more are not marked (they
  // stay exact: asked of the server every time).
  for (uint64_t i = 0; i < 5000; ++i) cache_.FallBack({K::kAttr, 100 + i});
  EXPECT_TRUE(cache_.FallingBack({K::kAttr, 100}));
  EXPECT_FALSE(cache_.FallingBack({K::kAttr, 100 + 4999}));
  // Expired marks make room again.
  clock_.Advance(LeaseCache::kFallBack);
  cache_.FallBack({K::kAttr, 1});
  EXPECT_TRUE(cache_.FallingBack({K::kAttr, 1}));
}

TEST_F(LeaseCacheTest, AttributesLastUntilTheLeaseEnds) {
  cache_.PutAttr(cache_.Take(), AttrOf(5, 0100644));
  absl::Duration left;
  ASSERT_TRUE(cache_.Attr(5, &left).has_value());
  EXPECT_GT(left, absl::Seconds(2));
  EXPECT_LE(left, absl::Seconds(3));
  clock_.Advance(absl::Seconds(3));
  EXPECT_FALSE(cache_.Attr(5).has_value()) << "served past its lease";
  // A renewal from before the end keeps them: the server renewed too.
  cache_.Renewed(clock_.Now());
  EXPECT_TRUE(cache_.Attr(5).has_value());
}

TEST_F(LeaseCacheTest, AReplyOvertakenByARecallIsNotKept) {
  const LeaseCache::Ticket t = cache_.Take();
  cache_.Recall({LeaseCache::Kind::kAttr, 5});  // arrived before the reply
  cache_.PutAttr(t, AttrOf(5, 0100644));
  EXPECT_FALSE(cache_.Attr(5).has_value());
  cache_.PutAttr(t, AttrOf(6, 0100644));  // another inode: kept
  EXPECT_TRUE(cache_.Attr(6).has_value());
}

TEST_F(LeaseCacheTest, OwnChangesDoNotRefuseTheirOwnReply) {
  const LeaseCache::Ticket t = cache_.Take();
  cache_.AttrChanged(5);
  cache_.PutAttr(t, AttrOf(5, 0100600), /*own=*/true);
  ASSERT_TRUE(cache_.Attr(5).has_value());
  EXPECT_EQ(cache_.Attr(5)->mode(), 0100600u);
  // ...but a reader's reply from before the change is refused.
  cache_.AttrChanged(5);
  cache_.PutAttr(t, AttrOf(5, 0100644));
  EXPECT_FALSE(cache_.Attr(5).has_value());
}

TEST_F(LeaseCacheTest, TheDataStampChangesOnlyWhenAnotherNodeMayHaveChangedTheFile) {
  EXPECT_EQ(cache_.DataStamp(5), 0u) << "not held";
  cache_.PutAttr(cache_.Take(), AttrOf(5, 0100644));
  const uint64_t held = cache_.DataStamp(5);
  EXPECT_NE(held, 0u);
  // Own changes (its writes, their flushes) keep it.
  cache_.AttrChanged(5);
  cache_.Recall({LeaseCache::Kind::kAttr, 6});
  EXPECT_EQ(cache_.DataStamp(5), held);
  // A recall: not held until leased again, and then not the same.
  cache_.Recall({LeaseCache::Kind::kAttr, 5});
  EXPECT_EQ(cache_.DataStamp(5), 0u);
  cache_.PutAttr(cache_.Take(), AttrOf(5, 0100644));
  const uint64_t again = cache_.DataStamp(5);
  EXPECT_NE(again, 0u);
  EXPECT_NE(again, held);
  // A flush that failed.
  cache_.DataUnsure(5);
  const uint64_t unsure = cache_.DataStamp(5);
  EXPECT_NE(unsure, again);
  // Everything dropped and leased again.
  cache_.DropAll(/*stream_down=*/true);
  cache_.Subscribed(clock_.Now());
  cache_.PutAttr(cache_.Take(), AttrOf(5, 0100644));
  EXPECT_NE(cache_.DataStamp(5), 0u);
  EXPECT_NE(cache_.DataStamp(5), unsure);
  // The lease ran out.
  clock_.Advance(absl::Seconds(3));
  EXPECT_EQ(cache_.DataStamp(5), 0u);
}

TEST_F(LeaseCacheTest, TheDataStampChangesWhenTheRecallsItCountsAreForgotten) {
  LeaseCache small(LeaseCacheOptions{.clock = &clock_, .max_changed = 4});
  small.SetTerm(absl::Seconds(3));
  small.Subscribed(clock_.Now());
  small.PutAttr(small.Take(), AttrOf(5, 0100644));
  const uint64_t held = small.DataStamp(5);
  small.Recall({LeaseCache::Kind::kAttr, 5});
  small.PutAttr(small.Take(), AttrOf(5, 0100644));
  const uint64_t after = small.DataStamp(5);
  EXPECT_NE(after, held);
  for (uint64_t i = 100; i < 110; ++i) small.AttrChanged(i);  // 5's recall forgotten
  EXPECT_NE(small.DataStamp(5), held);
}

TEST_F(LeaseCacheTest, TypesOutliveAttributesAndAllNamesNeedTheWholeListing) {
  cache_.PutAttr(cache_.Take(), AttrOf(5, 0100644));
  cache_.PutAttr(cache_.Take(), AttrOf(6, 040755));
  cache_.AttrChanged(5);
  cache_.Recall({LeaseCache::Kind::kAttr, 6});
  EXPECT_FALSE(cache_.Attr(5).has_value());
  EXPECT_EQ(cache_.Type(5), static_cast<uint32_t>(S_IFREG));
  EXPECT_EQ(cache_.Type(6), static_cast<uint32_t>(S_IFDIR));
  EXPECT_EQ(cache_.Type(7), 0u);
  std::vector<std::pair<std::string, uint64_t>> names;
  uint64_t parent = 0;
  EXPECT_FALSE(cache_.AllNames(10, &names, &parent));
  cache_.PutEmptyDir(cache_.Take(), 10, 1);
  cache_.NameAdded(10, "a", 5);
  cache_.NameAdded(10, "b", 6);
  cache_.NameRemoved(10, "b");
  ASSERT_TRUE(cache_.AllNames(10, &names, &parent));
  EXPECT_EQ(parent, 1u);
  EXPECT_EQ(names, (std::vector<std::pair<std::string, uint64_t>>{{"a", 5}}));
  cache_.DirChanged(10);
  EXPECT_FALSE(cache_.AllNames(10, &names, &parent));
}

TEST_F(LeaseCacheTest, ACompleteListingAnswersAbsentNamesAndReaddir) {
  const LeaseCache::Ticket t = cache_.Take();
  proto::ReadDirReply page;
  page.set_leased(true);
  page.set_eof(true);
  const std::vector<std::pair<std::string, uint64_t>> names = {
      {".", 2}, {"..", 1}, {"a", 10}, {"b", 11}};
  uint64_t cookie = 0;
  for (const auto& [name, ino] : names) {
    proto::DirEntry* e = page.add_entries();
    e->set_name(name);
    e->set_cookie(++cookie);
    *e->mutable_attr() = AttrOf(ino, 0100644);
    cache_.PutAttr(t, e->attr());
  }
  cache_.PutPage(t, 2, 0, page);
  uint64_t ino = 0;
  EXPECT_EQ(cache_.Lookup(2, "a", &ino), LeaseCache::Name::kPresent);
  EXPECT_EQ(ino, 10u);
  EXPECT_EQ(cache_.Lookup(2, "zzz", &ino), LeaseCache::Name::kAbsent);
  proto::ReadDirReply out;
  ASSERT_TRUE(cache_.List(2, 2, 100, &out));  // after ".."
  ASSERT_EQ(out.entries_size(), 2);
  EXPECT_EQ(out.entries(0).name(), "a");
  EXPECT_TRUE(out.eof());
  // An own create keeps the names, not the order (its cookie is the
  // server's): readdir asks again, a lookup does not.
  cache_.NameAdded(2, "c", 12);
  EXPECT_EQ(cache_.Lookup(2, "c", &ino), LeaseCache::Name::kPresent);
  EXPECT_EQ(cache_.Lookup(2, "d", &ino), LeaseCache::Name::kAbsent);
  EXPECT_FALSE(cache_.List(2, 0, 100, &out));
  // An own removal.
  cache_.NameRemoved(2, "a");
  EXPECT_EQ(cache_.Lookup(2, "a", &ino), LeaseCache::Name::kAbsent);
  // A recall drops it all.
  cache_.Recall({LeaseCache::Kind::kDir, 2});
  EXPECT_EQ(cache_.Lookup(2, "b", &ino), LeaseCache::Name::kUnknown);
}

TEST_F(LeaseCacheTest, ADirectoryIsKnownEmptyOnlyWhileItsWholeListingIsLeased) {
  EXPECT_FALSE(cache_.KnownEmpty(4));
  cache_.PutEmptyDir(cache_.Take(), 4, 2);
  EXPECT_FALSE(cache_.KnownEmpty(4));  // its attributes are not leased
  cache_.PutAttr(cache_.Take(), AttrOf(4, 040755));
  EXPECT_TRUE(cache_.KnownEmpty(4));
  // A name not there, looked up, does not count.
  cache_.PutName(cache_.Take(), 4, "gone", 0);
  cache_.PutAttr(cache_.Take(), AttrOf(4, 040755));
  EXPECT_TRUE(cache_.KnownEmpty(4));
  cache_.NameAdded(4, "a", 9);
  cache_.PutAttr(cache_.Take(), AttrOf(4, 040755));
  EXPECT_FALSE(cache_.KnownEmpty(4));
  cache_.NameRemoved(4, "a");
  cache_.PutAttr(cache_.Take(), AttrOf(4, 040755));
  EXPECT_TRUE(cache_.KnownEmpty(4));
  // The lease runs out: nothing is known.
  clock_.Advance(absl::Seconds(4));
  EXPECT_FALSE(cache_.KnownEmpty(4));
}

TEST_F(LeaseCacheTest, EachLeaseOnACompleteListingHasItsOwnEpoch) {
  auto list = [this](uint64_t dir) {
    cache_.PutAttr(cache_.Take(), AttrOf(dir, 040755));
    proto::ReadDirReply page;
    page.set_leased(true);
    page.set_eof(true);
    proto::DirEntry* e = page.add_entries();
    e->set_name("a");
    e->set_cookie(3);
    cache_.PutPage(cache_.Take(), dir, 0, page);
  };
  EXPECT_EQ(cache_.ListingEpoch(2), 0u);
  // A single name leased is not the listing.
  cache_.PutName(cache_.Take(), 2, "x", 9);
  EXPECT_EQ(cache_.ListingEpoch(2), 0u);
  list(2);
  const uint64_t first = cache_.ListingEpoch(2);
  EXPECT_NE(first, 0u);
  // Own changes keep the lease, and its epoch; they drop the directory's
  // attributes, and without those there is none until they are back.
  cache_.NameAdded(2, "c", 12);
  cache_.NameRemoved(2, "a");
  EXPECT_EQ(cache_.ListingEpoch(2), 0u);
  cache_.PutAttr(cache_.Take(), AttrOf(2, 040755));
  EXPECT_EQ(cache_.ListingEpoch(2), first);
  // Another directory, a directory made here: epochs of their own.
  list(3);
  cache_.PutEmptyDir(cache_.Take(), 4, 2);
  cache_.PutAttr(cache_.Take(), AttrOf(4, 040755));
  EXPECT_NE(cache_.ListingEpoch(3), 0u);
  EXPECT_NE(cache_.ListingEpoch(4), 0u);
  EXPECT_NE(cache_.ListingEpoch(3), first);
  EXPECT_NE(cache_.ListingEpoch(4), cache_.ListingEpoch(3));
  // Recalled, then leased again: a new epoch.
  cache_.Recall({LeaseCache::Kind::kDir, 2});
  EXPECT_EQ(cache_.ListingEpoch(2), 0u);
  list(2);
  const uint64_t second = cache_.ListingEpoch(2);
  EXPECT_NE(second, 0u);
  EXPECT_NE(second, first);
  // None once the leases run out, nor after everything was dropped.
  clock_.Advance(absl::Seconds(4));
  EXPECT_EQ(cache_.ListingEpoch(2), 0u);
  cache_.Renewed(clock_.Now());
  EXPECT_EQ(cache_.ListingEpoch(2), second);
  cache_.DropAll(/*stream_down=*/false);
  EXPECT_EQ(cache_.ListingEpoch(2), 0u);
  EXPECT_EQ(cache_.ListingEpoch(3), 0u);
}

TEST_F(LeaseCacheTest, AListingRecalledBetweenPagesIsNotKept) {
  const LeaseCache::Ticket t = cache_.Take();
  proto::ReadDirReply first;
  first.set_leased(true);
  proto::DirEntry* e = first.add_entries();
  e->set_name("a");
  e->set_cookie(3);
  cache_.PutPage(t, 2, 0, first);
  cache_.Recall({LeaseCache::Kind::kDir, 2});
  proto::ReadDirReply last;
  last.set_leased(true);
  last.set_eof(true);
  cache_.PutPage(cache_.Take(), 2, 3, last);
  uint64_t ino;
  EXPECT_EQ(cache_.Lookup(2, "zzz", &ino), LeaseCache::Name::kUnknown);
}

// Two readers of one directory (a walk and its read-ahead): the second's
// first page, asked for after a recall, joined by the first's second page,
// asked for before it: not kept.
TEST_F(LeaseCacheTest, PagesOfTwoReadersJoinedAcrossARecallAreNotKept) {
  proto::ReadDirReply first;
  first.set_leased(true);
  proto::DirEntry* e = first.add_entries();
  e->set_name("a");
  e->set_cookie(3);
  proto::ReadDirReply last;
  last.set_leased(true);
  last.set_eof(true);
  const LeaseCache::Ticket one_first = cache_.Take();
  cache_.PutPage(one_first, 2, 0, first);
  const LeaseCache::Ticket one_last = cache_.Take();  // its answer is slow
  cache_.Recall({LeaseCache::Kind::kDir, 2});
  cache_.PutPage(cache_.Take(), 2, 0, first);  // the other reader starts
  cache_.PutPage(one_last, 2, 3, last);        // the first reader's old page
  uint64_t ino;
  EXPECT_EQ(cache_.Lookup(2, "zzz", &ino), LeaseCache::Name::kUnknown);
  EXPECT_EQ(cache_.ListingEpoch(2), 0u);
  // One reader's pages after the recall are kept.
  cache_.PutPage(cache_.Take(), 2, 0, first);
  cache_.PutPage(cache_.Take(), 2, 3, last);
  EXPECT_EQ(cache_.Lookup(2, "zzz", &ino), LeaseCache::Name::kAbsent);
}

TEST_F(LeaseCacheTest, DroppingEverythingRefusesRepliesInFlight) {
  const LeaseCache::Ticket t = cache_.Take();
  cache_.PutAttr(t, AttrOf(7, 0100644));
  std::vector<uint64_t> dropped = cache_.DropAll(/*stream_down=*/true);
  EXPECT_EQ(dropped, std::vector<uint64_t>{7});
  cache_.PutAttr(t, AttrOf(8, 0100644));
  EXPECT_FALSE(cache_.Attr(8).has_value());
  // Nothing is kept until the new stream is up, then only newer replies.
  cache_.PutAttr(cache_.Take(), AttrOf(8, 0100644));
  EXPECT_FALSE(cache_.Attr(8).has_value());
  cache_.Subscribed(clock_.Now());
  cache_.PutAttr(t, AttrOf(8, 0100644));
  EXPECT_FALSE(cache_.Attr(8).has_value());
  cache_.PutAttr(cache_.Take(), AttrOf(8, 0100644));
  EXPECT_TRUE(cache_.Attr(8).has_value());
}

TEST_F(LeaseCacheTest, AbsentXattrsLastUnderTheAttributeLeaseAcrossOwnWrites) {
  cache_.PutAttr(cache_.Take(), AttrOf(5, 0100644));
  LeaseCache::Ticket t = cache_.Take();
  cache_.PutXattrAbsent(t, 5, "security.capability");
  cache_.PutXattrAbsent(t, 6, "security.capability");  // no lease on 6: not kept
  EXPECT_TRUE(cache_.XattrAbsent(5, "security.capability"));
  EXPECT_FALSE(cache_.XattrAbsent(5, "user.a"));
  EXPECT_FALSE(cache_.XattrAbsent(6, "security.capability"));
  cache_.AttrChanged(5);  // an own write: size and mtime, no xattr
  EXPECT_TRUE(cache_.XattrAbsent(5, "security.capability"));
  // A reply that a recall overtook is not kept.
  t = cache_.Take();
  cache_.Recall({LeaseCache::Kind::kAttr, 5});
  EXPECT_FALSE(cache_.XattrAbsent(5, "security.capability"));
  cache_.PutXattrAbsent(t, 5, "security.capability");
  EXPECT_FALSE(cache_.XattrAbsent(5, "security.capability"));
  // An own setxattr drops them too.
  cache_.PutAttr(cache_.Take(), AttrOf(5, 0100644));
  cache_.PutXattrAbsent(cache_.Take(), 5, "user.a");
  EXPECT_TRUE(cache_.XattrAbsent(5, "user.a"));
  cache_.XattrsChanged(5);
  EXPECT_FALSE(cache_.XattrAbsent(5, "user.a"));
}

TEST_F(LeaseCacheTest, LeasedAttributesWithoutXattrsAnswerForEveryNameButUser) {
  proto::Attr a = AttrOf(5, 0100644);
  a.set_no_xattrs(true);
  cache_.PutAttr(cache_.Take(), a);
  cache_.PutAttr(cache_.Take(), AttrOf(6, 0100644));  // has some, or not looked
  EXPECT_TRUE(cache_.NoXattrs(5));
  EXPECT_TRUE(cache_.XattrAbsent(5, "security.selinux"));
  EXPECT_TRUE(cache_.XattrAbsent(5, "system.posix_acl_access"));
  EXPECT_TRUE(cache_.XattrAbsent(5, "trusted.x"));
  EXPECT_FALSE(cache_.XattrAbsent(5, "user.a"));  // the server checks read access first
  EXPECT_FALSE(cache_.NoXattrs(6));
  EXPECT_FALSE(cache_.XattrAbsent(6, "security.selinux"));
  // An own setxattr, and a recall, end it.
  cache_.XattrsChanged(5);
  EXPECT_FALSE(cache_.NoXattrs(5));
  EXPECT_FALSE(cache_.XattrAbsent(5, "security.selinux"));
  cache_.PutAttr(cache_.Take(), a);
  EXPECT_TRUE(cache_.NoXattrs(5));
  cache_.Recall({LeaseCache::Kind::kAttr, 5});
  EXPECT_FALSE(cache_.NoXattrs(5));
  EXPECT_FALSE(cache_.XattrAbsent(5, "security.selinux"));
  // An own reply sent before an own xattr change is not kept (it may carry
  // attributes read before it).
  LeaseCache::Ticket before = cache_.Take();
  cache_.XattrsChanged(5);
  cache_.PutAttr(before, a, /*own=*/true);
  EXPECT_FALSE(cache_.NoXattrs(5));
  // And so does the end of the lease.
  cache_.PutAttr(cache_.Take(), a);
  clock_.Advance(absl::Seconds(10));
  EXPECT_FALSE(cache_.NoXattrs(5));
  EXPECT_FALSE(cache_.XattrAbsent(5, "security.selinux"));
}

TEST_F(LeaseCacheTest, MemoryIsBounded) {
  LeaseCache small(LeaseCacheOptions{.clock = &clock_, .max_attrs = 100});
  small.SetTerm(absl::Seconds(3));
  small.Subscribed(clock_.Now());
  for (uint64_t i = 1; i <= 1000; ++i) small.PutAttr(small.Take(), AttrOf(i, 0100644));
  EXPECT_LE(small.stats().attrs, 100u);
  EXPECT_TRUE(small.Attr(1000).has_value());
}

TEST_F(LeaseCacheTest, DroppingEveryAttributeRefusesRepliesInFlight) {
  cache_.PutAttr(cache_.Take(), AttrOf(5, 0100644));
  cache_.PutAttr(cache_.Take(), AttrOf(6, 0100644));
  const LeaseCache::Ticket before = cache_.Take();
  cache_.DropAttrs();  // a retried remove: which inode lost a link is not known
  EXPECT_FALSE(cache_.Attr(5).has_value());
  EXPECT_FALSE(cache_.Attr(6).has_value());
  cache_.PutAttr(before, AttrOf(5, 0100600));  // sent before: may be older than the change
  EXPECT_FALSE(cache_.Attr(5).has_value());
  cache_.PutAttr(cache_.Take(), AttrOf(5, 0100600));  // sent after: kept
  ASSERT_TRUE(cache_.Attr(5).has_value());
  EXPECT_EQ(cache_.Attr(5)->mode(), 0100600u);
}

TEST_F(LeaseCacheTest, ANewStreamCountsOnlyWithItsServersTerm) {
  cache_.Renewed(clock_.Now(), absl::Seconds(10));    // the last server's term: 10 s
  cache_.DropAll(/*stream_down=*/true);               // it went away
  cache_.Subscribed(clock_.Now(), absl::Seconds(1));  // the new one's: 1 s
  cache_.PutAttr(cache_.Take(), AttrOf(5, 0100644));
  ASSERT_TRUE(cache_.Attr(5).has_value());
  clock_.Advance(absl::Milliseconds(1100));
  EXPECT_FALSE(cache_.Attr(5).has_value()) << "counted with the old server's 10 s";
  cache_.Renewed(clock_.Now(), absl::Seconds(1));
  cache_.PutAttr(cache_.Take(), AttrOf(5, 0100644));
  EXPECT_TRUE(cache_.Attr(5).has_value());
}

}  // namespace
}  // namespace grantfs
