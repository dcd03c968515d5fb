// The space ledger through the Volume: grants, their conversion into used
// space by writes, exact ENOSPC, and grants returned when sessions end.
// Invariant checked after every step: used + granted + reserved <= capacity.
#include <cerrno>
#include <filesystem>

#include "common/errno_status.h"
#include "gtest/gtest.h"
#include "server/volume.h"

namespace grantfs {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/grantfs-ledger-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::filesystem::create_directory(dir_ + "/vol");
    Open();
  }
  void TearDown() override {
    volume_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Open() {
    VolumeOptions o;
    o.dir = dir_ + "/vol";
    o.capacity_bytes = 256 * kMiB;  // low-water mark: 8 MiB
    o.lease = absl::Seconds(10);
    o.clock = &clock_;
    o.lease_clock = &clock_;
    o.background = false;
    auto v = Volume::Open(o);
    ASSERT_TRUE(v.ok()) << v.status();
    volume_ = *std::move(v);
  }
  RequestContext Ctx(uint64_t client) {
    RequestContext c;
    c.client_id = client;
    return c;
  }
  uint64_t NewFile(const std::string& name) {
    proto::MkNodRequest r;
    r.set_parent(1);
    r.set_name(name);
    r.set_mode(S_IFREG | 0644);
    r.set_exclusive(true);
    auto a = volume_->MkNod(Ctx(1), r);
    EXPECT_TRUE(a.ok()) << a.status();
    return a->ino();
  }
  uint64_t GrantTo(uint64_t client, uint64_t wanted, uint64_t back = 0) {
    uint64_t added = 0;
    auto g = volume_->Grant(Ctx(client), wanted, back, &added);
    EXPECT_TRUE(g.ok()) << g.status();
    return *g;
  }
  void ExpectInvariant() {
    SpaceInfo s = volume_->Space();
    EXPECT_TRUE(s.ledger_ok);
    EXPECT_LE(s.used_bytes + s.granted_bytes + s.reserved_bytes, s.capacity_bytes);
    EXPECT_EQ(s.reserved_bytes, 0u);  // nothing in flight between steps
  }

  FakeClock clock_;
  std::string dir_;
  std::unique_ptr<Volume> volume_;
};

TEST_F(LedgerTest, GrantIsTakenFromFreeSpaceAndWritesConvertItToUsed) {
  const uint64_t a = *volume_->OpenSession("a");
  EXPECT_EQ(GrantTo(a, 16 * kMiB), 16 * kMiB);
  EXPECT_EQ(volume_->Space().granted_bytes, 16 * kMiB);
  const uint64_t ino = NewFile("f");
  auto w = volume_->Write(Ctx(a), ino, 0, std::string(kMiB, 'x'), false, /*from_grant=*/true);
  ASSERT_TRUE(w.ok()) << w.status();
  SpaceInfo s = volume_->Space();
  EXPECT_EQ(s.used_bytes, kMiB);
  EXPECT_EQ(s.granted_bytes, 15 * kMiB);
  EXPECT_EQ(volume_->meta().space().GrantOf(a) * kBlockSize, 15 * kMiB);
  ExpectInvariant();
}

TEST_F(LedgerTest, OverwritingAllocatedBytesCostsNothing) {
  const uint64_t a = *volume_->OpenSession("a");
  GrantTo(a, 4 * kMiB);
  const uint64_t ino = NewFile("f");
  ASSERT_TRUE(volume_->Write(Ctx(a), ino, 0, std::string(kMiB, 'x'), false, true).ok());
  ASSERT_TRUE(volume_->Write(Ctx(a), ino, 4096, std::string(kMiB - 8192, 'y'), false, true).ok());
  EXPECT_EQ(volume_->Space().used_bytes, kMiB);
  EXPECT_EQ(volume_->meta().space().GrantOf(a) * kBlockSize, 3 * kMiB);
  ExpectInvariant();
}

TEST_F(LedgerTest, AShortGrantIsToppedUpFromFreeSpaceAndENOSPCIsExact) {
  const uint64_t a = *volume_->OpenSession("a");
  GrantTo(a, kMiB);
  const uint64_t ino = NewFile("f");
  // 2 MiB from a 1 MiB grant: the rest comes from free space.
  ASSERT_TRUE(volume_->Write(Ctx(a), ino, 0, std::string(2 * kMiB, 'x'), false, true).ok());
  EXPECT_EQ(volume_->meta().space().GrantOf(a), 0u);
  EXPECT_EQ(volume_->Space().used_bytes, 2 * kMiB);
  // Fill the volume to the last block with plain writes, then one more byte.
  uint64_t off = 2 * kMiB;
  while (off < 256 * kMiB) {
    const uint64_t n = std::min(4 * kMiB, 256 * kMiB - off);
    auto w = volume_->Write(Ctx(a), ino, off, std::string(n, 'z'), false, true);
    ASSERT_TRUE(w.ok()) << off << " " << w.status();
    off += n;
  }
  EXPECT_EQ(volume_->Space().used_bytes, 256 * kMiB);
  auto over = volume_->Write(Ctx(a), ino, off, "!", false, true);
  EXPECT_EQ(ToErrno(over.status()), ENOSPC);
  ExpectInvariant();
}

TEST_F(LedgerTest, NearFullGrantsShrinkAndStopAtTheLowWaterMark) {
  const uint64_t a = *volume_->OpenSession("a");
  const uint64_t b = *volume_->OpenSession("b");
  // Plenty of room: the whole wish (1/8 of 256 MiB is 32 MiB).
  EXPECT_EQ(GrantTo(a, 16 * kMiB), 16 * kMiB);
  // Then each ask gets at most 1/8 of what is free, never below 8 MiB free.
  uint64_t total = 0;
  for (int i = 0; i < 200; ++i) total = GrantTo(b, 64 * kMiB);
  SpaceInfo s = volume_->Space();
  EXPECT_EQ(s.capacity_bytes - s.granted_bytes, 8 * kMiB);
  EXPECT_EQ(total, 256 * kMiB - 16 * kMiB - 8 * kMiB);
  EXPECT_EQ(GrantTo(a, kMiB), 16 * kMiB);  // nothing more for anyone
  ExpectInvariant();
}

TEST_F(LedgerTest, ReturningPartOfAGrantFreesIt) {
  const uint64_t a = *volume_->OpenSession("a");
  GrantTo(a, 16 * kMiB);
  EXPECT_EQ(GrantTo(a, 0, 10 * kMiB), 6 * kMiB);
  EXPECT_EQ(volume_->Space().granted_bytes, 6 * kMiB);
  EXPECT_EQ(GrantTo(a, 0, 100 * kMiB), 0u);  // more than held: all of it
  ExpectInvariant();
}

TEST_F(LedgerTest, LeaseExpiryReturnsTheGrant) {
  const uint64_t a = *volume_->OpenSession("a");
  GrantTo(a, 16 * kMiB);
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(volume_->RunMaintenance().ok());
  EXPECT_EQ(volume_->Space().granted_bytes, 16 * kMiB);  // lease still running
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(volume_->RunMaintenance().ok());
  EXPECT_EQ(volume_->Space().granted_bytes, 0u);
  ExpectInvariant();
}

TEST_F(LedgerTest, CloseSessionReturnsTheGrant) {
  const uint64_t a = *volume_->OpenSession("a");
  GrantTo(a, 16 * kMiB);
  ASSERT_TRUE(volume_->CloseSession(a).ok());
  EXPECT_EQ(volume_->Space().granted_bytes, 0u);
}

TEST_F(LedgerTest, GrantsSurviveARestartAndExpireIfTheirClientNeverReturns) {
  const uint64_t a = *volume_->OpenSession("a");
  const uint64_t b = *volume_->OpenSession("b");
  GrantTo(a, 16 * kMiB);
  GrantTo(b, 8 * kMiB);
  volume_.reset();
  Open();
  EXPECT_EQ(volume_->Space().granted_bytes, 24 * kMiB);
  EXPECT_EQ(volume_->meta().space().GrantOf(a) * kBlockSize, 16 * kMiB);
  // a comes back (any call renews its lease); b never does.
  clock_.Advance(absl::Seconds(8));
  volume_->sessions().Touch(a);
  clock_.Advance(absl::Seconds(3));
  ASSERT_TRUE(volume_->RunMaintenance().ok());
  EXPECT_EQ(volume_->Space().granted_bytes, 16 * kMiB);
  ExpectInvariant();
}

TEST_F(LedgerTest, TruncateAndUnlinkGiveSpaceBack) {
  const uint64_t a = *volume_->OpenSession("a");
  GrantTo(a, 16 * kMiB);
  const uint64_t ino = NewFile("f");
  ASSERT_TRUE(volume_->Write(Ctx(a), ino, 0, std::string(8 * kMiB, 'x'), false, true).ok());
  proto::SetAttrRequest t;
  t.set_ino(ino);
  t.set_valid(proto::SetAttrRequest::SIZE);
  t.set_size(3 * kMiB + 1);
  ASSERT_TRUE(volume_->SetAttr(Ctx(a), t).ok());
  EXPECT_EQ(volume_->Space().used_bytes, 3 * kMiB + 4096);
  ASSERT_TRUE(volume_->Remove(Ctx(a), 1, "f", false).ok());
  ASSERT_TRUE(volume_->RunMaintenance().ok());
  EXPECT_EQ(volume_->Space().used_bytes, 0u);
  EXPECT_EQ(volume_->Space().granted_bytes, 8 * kMiB);
  ExpectInvariant();
}

}  // namespace
}  // namespace grantfs
