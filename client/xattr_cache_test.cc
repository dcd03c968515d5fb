#include "client/xattr_cache.h"

#include "common/clock.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

constexpr char kCap[] = "security.capability";

XattrCacheOptions Options(FakeClock* clock) {
  XattrCacheOptions o;
  o.clock = clock;
  o.ttl = absl::Seconds(1);
  return o;
}

TEST(XattrCache, RemembersAnAbsentCapabilityForTheTtl) {
  FakeClock clock;
  XattrCache cache(Options(&clock));
  EXPECT_FALSE(cache.KnownAbsent(5, kCap));
  cache.NoteAbsent(5, kCap);
  EXPECT_TRUE(cache.KnownAbsent(5, kCap));
  EXPECT_FALSE(cache.KnownAbsent(6, kCap));
  clock.Advance(absl::Milliseconds(999));
  EXPECT_TRUE(cache.KnownAbsent(5, kCap));
  clock.Advance(absl::Milliseconds(1));
  EXPECT_FALSE(cache.KnownAbsent(5, kCap));
  cache.NoteAbsent(5, kCap);  // asked again: trusted for another ttl
  EXPECT_TRUE(cache.KnownAbsent(5, kCap));
}

TEST(XattrCache, CachesOnlyTheCapability) {
  FakeClock clock;
  XattrCache cache(Options(&clock));
  cache.NoteAbsent(5, "user.x");
  EXPECT_FALSE(cache.KnownAbsent(5, "user.x"));
  EXPECT_EQ(cache.size(), 0u);
  cache.NoteAbsent(5, kCap);
  EXPECT_FALSE(cache.KnownAbsent(5, "user.x"));
}

TEST(XattrCache, ForgetDropsWhatWasKnown) {
  FakeClock clock;
  XattrCache cache(Options(&clock));
  cache.NoteAbsent(5, kCap);
  cache.NoteAbsent(6, kCap);
  cache.Forget(5);  // set or removed here, or changed elsewhere
  EXPECT_FALSE(cache.KnownAbsent(5, kCap));
  EXPECT_TRUE(cache.KnownAbsent(6, kCap));
  cache.Forget(7);  // unknown: nothing happens
  EXPECT_EQ(cache.size(), 1u);
}

TEST(XattrCache, MemoryIsBounded) {
  FakeClock clock;
  XattrCacheOptions o = Options(&clock);
  o.max_entries = 3;
  XattrCache cache(o);
  for (uint64_t ino = 1; ino <= 4; ++ino) cache.NoteAbsent(ino, kCap);
  EXPECT_EQ(cache.size(), 4u);
  cache.NoteAbsent(5, kCap);  // over the bound: everything else is forgotten
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_TRUE(cache.KnownAbsent(5, kCap));
  EXPECT_FALSE(cache.KnownAbsent(1, kCap));
}

}  // namespace
}  // namespace grantfs
