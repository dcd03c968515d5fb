#include "server/data_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "common/status_test_util.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "server/chunk_store.h"
#include "server/keys.h"
#include "server/meta_store.h"

namespace grantfs {
namespace {

namespace fs = std::filesystem;

class DataDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/grantfs_data_dir_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << strerror(errno);
    root_ = tmpl;
    dir_ = root_ + "/data";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  DataDirInfo Inspect() {
    absl::StatusOr<DataDirInfo> info = InspectDataDir(dir_);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : DataDirInfo();
  }
  void Touch(const std::string& rel) {
    fs::create_directories(fs::path(dir_ + "/" + rel).parent_path());
    std::ofstream(dir_ + "/" + rel) << "x";
  }
  // A volume in dir_, as a serving server leaves it: its identity.
  proto::VolumeIdentity MakeVolume() {
    ChunkStoreOptions co;
    co.dir = dir_ + "/chunks";
    EXPECT_TRUE(ChunkStore::Create(co).ok());
    MetaStoreOptions mo;
    mo.dir = dir_ + "/meta";
    mo.capacity_bytes = 1 << 20;
    auto store = MetaStore::Open(mo);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? (*store)->identity() : proto::VolumeIdentity();
  }

  std::string root_;
  std::string dir_;
};

TEST_F(DataDirTest, NoDirectoryIsMissingAndNothingIsCreated) {
  EXPECT_EQ(Inspect().state, DataDirState::kMissing);
  EXPECT_FALSE(fs::exists(dir_));
}

TEST_F(DataDirTest, AFileIsNoDataDirectory) {
  std::ofstream(dir_) << "x";
  absl::StatusOr<DataDirInfo> info = InspectDataDir(dir_);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition) << info.status();
}

TEST_F(DataDirTest, AnEmptyDirectoryOrAFreshFileSystemIsEmpty) {
  fs::create_directories(dir_);
  EXPECT_EQ(Inspect().state, DataDirState::kEmpty);
  fs::create_directories(dir_ + "/lost+found");
  EXPECT_EQ(Inspect().state, DataDirState::kEmpty);
}

TEST_F(DataDirTest, WhatGrantFsMakesBeforeAVolumeExistsIsEmpty) {
  fs::create_directories(dir_);
  ChunkStoreOptions co;
  co.dir = dir_ + "/chunks";
  ASSERT_OK(ChunkStore::Create(co).status());  // 256 empty subdirectories
  fs::create_directories(dir_ + "/meta");
  Touch("space.hold");
  Touch("replica.boot");
  EXPECT_EQ(Inspect().state, DataDirState::kEmpty);
}

TEST_F(DataDirTest, AVolumeIsReadWithItsIdentity) {
  fs::create_directories(dir_);
  const proto::VolumeIdentity made = MakeVolume();
  DataDirInfo info = Inspect();
  EXPECT_EQ(info.state, DataDirState::kVolume);
  ASSERT_TRUE(info.identity.has_value());
  EXPECT_EQ(info.identity->SerializeAsString(), made.SerializeAsString());
  EXPECT_EQ(info.identity->data_epoch(), 1u);
}

TEST_F(DataDirTest, AVolumeFromBeforeIdentitiesHasNone) {
  fs::create_directories(dir_);
  MakeVolume();
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_ + "/meta", &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), keys::Identity()).ok());
  }
  DataDirInfo info = Inspect();
  EXPECT_EQ(info.state, DataDirState::kVolume);
  EXPECT_FALSE(info.identity.has_value());
  // Serving it gives it one.
  const proto::VolumeIdentity given = MakeVolume();
  EXPECT_EQ(given.volume_id().size(), 32u);
  EXPECT_EQ(Inspect().identity->volume_id(), given.volume_id());
}

TEST_F(DataDirTest, AnUnfinishedSnapshotIsEmpty) {
  fs::create_directories(dir_);
  MakeVolume();
  Touch(kPartialSnapshotFile);
  DataDirInfo info = Inspect();
  EXPECT_EQ(info.state, DataDirState::kEmpty);
  EXPECT_EQ(info.detail, "an unfinished snapshot");
}

TEST_F(DataDirTest, OtherFilesAreForeign) {
  fs::create_directories(dir_);
  Touch("notes.txt");
  DataDirInfo info = Inspect();
  EXPECT_EQ(info.state, DataDirState::kForeign);
  EXPECT_EQ(info.detail, "'notes.txt'");
}

TEST_F(DataDirTest, ChunkFilesOrAStoreWithoutCurrentAreForeign) {
  fs::create_directories(dir_);
  Touch("chunks/0a/10.0");
  DataDirInfo info = Inspect();
  EXPECT_EQ(info.state, DataDirState::kForeign);
  EXPECT_EQ(info.detail, "'chunks/0a/10.0' but no metadata store");

  fs::remove_all(dir_ + "/chunks");
  MakeVolume();
  fs::remove(dir_ + "/meta/CURRENT");  // a damaged store is not an empty one
  info = Inspect();
  EXPECT_EQ(info.state, DataDirState::kForeign);
  EXPECT_NE(info.detail.find("but no meta/CURRENT"), std::string::npos) << info.detail;
}

}  // namespace
}  // namespace grantfs
