#include "checkpoint/meta_digest.h"

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"

namespace grantfs {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class MetaDigestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meta-digest-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    a_ = Open("a");
    b_ = Open("b");
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<rocksdb::DB> Open(const std::string& name) {
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    EXPECT_TRUE(rocksdb::DB::Open(o, dir_ + "/" + name, &db).ok());
    return std::unique_ptr<rocksdb::DB>(db);
  }
  static void Put(rocksdb::DB* db, const std::string& k, const std::string& v) {
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), k, v).ok());
  }
  static proto::MetaDigest Digest(rocksdb::DB* db, const rocksdb::Snapshot* snap = nullptr) {
    absl::StatusOr<proto::MetaDigest> d = DigestMeta(db, snap, 7);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : proto::MetaDigest();
  }
  void PutBoth(const std::string& k, const std::string& v) {
    Put(a_.get(), k, v);
    Put(b_.get(), k, v);
  }

  std::string dir_;
  std::unique_ptr<rocksdb::DB> a_, b_;
};

TEST_F(MetaDigestTest, EqualStoresHaveEqualDigestsPerKind) {
  PutBoth("I\x01", "inode one");
  PutBoth("Dx", "entry");
  PutBoth(std::string("M") + "counters", std::string("\0\1", 2));
  proto::MetaDigest da = Digest(a_.get()), db = Digest(b_.get());
  EXPECT_THAT(CompareDigests(da, db), IsEmpty());
  EXPECT_EQ(da.seq(), 7u);
  ASSERT_EQ(da.kinds_size(), 3);  // D, I, M in key order
  EXPECT_EQ(da.kinds(0).kind(), "D");
  EXPECT_EQ(da.kinds(0).records(), 1u);
  EXPECT_EQ(da.kinds(1).bytes(), 2u + 9u);
}

TEST_F(MetaDigestTest, TheReplicaPositionIsLeftOut) {
  PutBoth("Ix", "1");
  Put(b_.get(), "Rposition", "epoch 3 seq 9");
  EXPECT_THAT(CompareDigests(Digest(a_.get()), Digest(b_.get())), IsEmpty());
}

TEST_F(MetaDigestTest, ADifferenceNamesItsKind) {
  PutBoth("Ix", "1");
  PutBoth("Dname", "to 1");
  Put(a_.get(), "Ey", "a");
  Put(b_.get(), "Ey", "b");      // same size, other bytes
  Put(a_.get(), "Lz", "grant");  // only on the primary
  EXPECT_THAT(CompareDigests(Digest(a_.get()), Digest(b_.get())),
              ElementsAre(HasSubstr("E: 1 records on both, contents differ"),
                          HasSubstr("L: 1 records on the primary, none on the replica")));
  Put(b_.get(), "Ix2", "2");  // one record more
  EXPECT_THAT(CompareDigests(Digest(a_.get()), Digest(b_.get())),
              ::testing::Contains(HasSubstr("I: 1 records (3 bytes) on the primary, 2")));
}

TEST_F(MetaDigestTest, KeyAndValueBoundariesCount) {
  // "ab"+"c" and "a"+"bc" must not digest alike.
  Put(a_.get(), "Iab", "c");
  Put(b_.get(), "Ia", "bc");
  EXPECT_THAT(CompareDigests(Digest(a_.get()), Digest(b_.get())),
              ElementsAre(HasSubstr("contents differ")));
}

TEST_F(MetaDigestTest, ASnapshotIsDigestedAsOfWhenItWasTaken) {
  PutBoth("Ix", "1");
  const rocksdb::Snapshot* snap = a_->GetSnapshot();
  Put(a_.get(), "Iy", "2");  // after the snapshot
  Put(a_.get(), "Ix", "changed");
  EXPECT_THAT(CompareDigests(Digest(a_.get(), snap), Digest(b_.get())), IsEmpty());
  EXPECT_THAT(CompareDigests(Digest(a_.get()), Digest(b_.get())), ::testing::SizeIs(1));
  a_->ReleaseSnapshot(snap);
}

}  // namespace
}  // namespace grantfs
