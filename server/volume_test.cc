// Volume (server/volume.cc): opening a data directory, recovery at open, the namespace and locks.
#include "server/volume.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/errno_status.h"
#include "common/fault_injection_env.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"
#include "server/volume_test_util.h"

namespace grantfs {
namespace {

TEST_F(VolumeTest, AMissingDataDirectoryIsRefusedNotCreated) {
  VolumeOptions options;
  options.dir = root_dir_ + "/not-mounted";
  options.capacity_bytes = kMiB;
  options.background = false;
  auto v = Volume::Open(options);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition) << v.status();
  EXPECT_FALSE(std::filesystem::exists(options.dir));
}

TEST_F(VolumeTest, EachOpenRaisesTheDataEpoch) {
  const proto::VolumeIdentity first = volume_->meta().store().identity();
  EXPECT_EQ(first.data_epoch(), 1u);
  OpenVolume(kMiB);
  EXPECT_EQ(volume_->meta().store().identity().volume_id(), first.volume_id());
  EXPECT_EQ(volume_->meta().store().identity().data_epoch(), 2u);
}

// Chunk files a crash left with no record (a write killed between its
// chunk write and its commit) are removed when the volume opens; files
// with records, and those of a deleted file the background deleter has not
// freed yet, stay.
TEST_F(VolumeTest, ChunkFilesNoRecordNamesAreRemovedAtOpen) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, Pattern(10000, 5), false));
  ASSERT_OK_AND_ASSIGN(proto::Attr g, CreateFile(a_, "g"));
  ASSERT_OK(volume_->Write(a_, g.ino(), 0, Pattern(10000, 6), false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "g", false));  // garbage: freed at the next maintenance
  const auto make = [&](uint64_t ino, uint64_t index) {
    const int fd = open(ChunkPath(ino, index).c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(fd, 0) << strerror(errno);
    ASSERT_EQ(pwrite(fd, "cut off", 7, 0), 7);
    close(fd);
  };
  make(f.ino(), 3);         // past what f records
  make(f.ino() + 1000, 0);  // an inode that does not exist
  const uint64_t used = Used();
  OpenVolume(kMiB);
  EXPECT_EQ(ChunkFileSize(f.ino(), 3), -1);
  EXPECT_EQ(ChunkFileSize(f.ino() + 1000, 0), -1);
  EXPECT_EQ(ChunkFileSize(f.ino(), 0), 10000);
  EXPECT_EQ(ChunkFileSize(g.ino(), 0), 10000) << "left to the background deleter";
  EXPECT_EQ(ReadAll(a_, f.ino()), Pattern(10000, 5));
  EXPECT_EQ(Used(), used);
}

TEST_F(VolumeTest, TruncateOfADirectoryIsEisdir) {
  EXPECT_EQ(Err(Truncate(a_, kRootIno, 0)), EISDIR);
}

TEST_F(VolumeTest, RmdirMakesTheDirectoryGarbage) {
  proto::MkNodRequest req;
  req.set_parent(kRootIno);
  req.set_name("d");
  req.set_mode(S_IFDIR | 0755);
  req.set_exclusive(true);
  ASSERT_OK_AND_ASSIGN(proto::Attr d, volume_->MkNod(a_, req));
  ASSERT_OK(CreateFile(a_, "f", d.ino()));
  EXPECT_EQ(Err(volume_->Remove(a_, kRootIno, "d", true)), ENOTEMPTY);
  ASSERT_OK(volume_->Remove(a_, d.ino(), "f", false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "d", true));
  EXPECT_EQ(Err(volume_->GetAttr(a_, d.ino())), ENOENT);
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 2);
  EXPECT_EQ(volume_->Space().inodes, 1u);
  ASSERT_OK_AND_ASSIGN(proto::Attr root, volume_->GetAttr(a_, kRootIno));
  EXPECT_EQ(root.nlink(), 2u);
}

TEST_F(VolumeTest, RenameOverAnOpenFileKeepsItUntilRelease) {
  ASSERT_OK_AND_ASSIGN(proto::Attr victim, CreateFile(a_, "victim"));
  ASSERT_OK_AND_ASSIGN(proto::Attr other, CreateFile(a_, "other"));
  ASSERT_OK(volume_->Open(b_, victim.ino(), O_RDONLY));
  ASSERT_OK(volume_->Write(a_, victim.ino(), 0, "old", false));
  proto::RenameRequest req;
  req.set_parent(kRootIno);
  req.set_name("other");
  req.set_new_parent(kRootIno);
  req.set_new_name("victim");
  ASSERT_OK(volume_->Rename(a_, req));
  ASSERT_OK_AND_ASSIGN(proto::Attr now, volume_->Lookup(a_, kRootIno, "victim"));
  EXPECT_EQ(now.ino(), other.ino());
  EXPECT_EQ(ReadAll(b_, victim.ino()), "old");
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  ASSERT_OK(volume_->Release(b_, victim.ino()));
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Used(), 0u);
}

TEST_F(VolumeTest, LocksConflictAcrossClients) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->SetLock(a_, f.ino(), WriteLock(a_.client_id, 1)));
  EXPECT_EQ(Err(volume_->SetLock(b_, f.ino(), WriteLock(b_.client_id, 1, 10, 20))), EAGAIN);
  ASSERT_OK_AND_ASSIGN(FileLock held,
                       volume_->GetLock(b_, f.ino(), WriteLock(b_.client_id, 1, 10, 20)));
  EXPECT_EQ(held.type, FileLock::kWrite);
  EXPECT_EQ(held.owner, (LockOwner{a_.client_id, 1}));
  EXPECT_EQ(Err(volume_->SetLock(a_, 999, WriteLock(a_.client_id, 1, 0, 10))), ENOENT);
  EXPECT_EQ(Err(volume_->GetLock(a_, 999, WriteLock(a_.client_id, 1))), ENOENT);
  // The release at close works even after the file is gone.
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  FileLock unlock = WriteLock(a_.client_id, 1);
  unlock.type = FileLock::kUnlock;
  EXPECT_EQ(Err(volume_->SetLock(a_, f.ino(), unlock)), 0);
}

TEST_F(VolumeTest, ChangesAreQueuedForTheOtherClients) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "x", false));
  proto::InvalidationBatch for_b, for_a;
  ASSERT_TRUE(volume_->sessions().Drain(b_.client_id, absl::ZeroDuration(), &for_b));
  ASSERT_TRUE(volume_->sessions().Drain(a_.client_id, absl::ZeroDuration(), &for_a));
  EXPECT_EQ(for_a.items_size(), 0);  // the origin is not told
  ASSERT_EQ(for_b.items_size(), 2);
  EXPECT_EQ(for_b.items(0).parent(), kRootIno);  // the new entry
  EXPECT_EQ(for_b.items(0).name(), "f");
  EXPECT_EQ(for_b.items(1).ino(), f.ino());  // the data
  EXPECT_TRUE(for_b.items(1).data_changed());
}
}  // namespace
}  // namespace grantfs
