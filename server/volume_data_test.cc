// Volume's data path (server/volume_data.cc): read, write, space, fsync, fallocate, disk faults.
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
#include "server/volume.h"
#include "server/volume_test_util.h"

namespace grantfs {
namespace {

TEST_F(VolumeTest, WriteThenReadReturnsTheData) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR));
  const std::string data = Pattern(10000, 1);
  ASSERT_OK_AND_ASSIGN(proto::Attr w, volume_->Write(a_, f.ino(), 0, data, false));
  EXPECT_EQ(w.size(), 10000u);
  EXPECT_EQ(w.blocks(), 3 * kBlockSize / 512);
  EXPECT_EQ(Used(), 3 * kBlockSize);
  ASSERT_OK_AND_ASSIGN(std::string got, volume_->Read(a_, f.ino(), 0, 10000));
  EXPECT_EQ(got, data);
  ASSERT_OK_AND_ASSIGN(got, volume_->Read(a_, f.ino(), 1234, 100));
  EXPECT_EQ(got, data.substr(1234, 100));
  // Another client reads the same bytes.
  ASSERT_OK_AND_ASSIGN(got, volume_->Read(b_, f.ino(), 0, 10000));
  EXPECT_EQ(got, data);
}

// Records what the volume sends to the replica; every change counts as
// replicated at once.
class RecordingSink : public ChangeSink {
 public:
  uint64_t Append(proto::ReplRecord record) override {
    absl::MutexLock l(&mu_);
    records_.push_back(std::move(record));
    return records_.size();
  }
  absl::Status WaitReplicated(uint64_t) override { return absl::OkStatus(); }
  uint64_t Head() override {
    absl::MutexLock l(&mu_);
    return records_.size();
  }
  std::vector<proto::ReplRecord> records() {
    absl::MutexLock l(&mu_);
    return records_;
  }

 private:
  absl::Mutex mu_;
  std::vector<proto::ReplRecord> records_ ABSL_GUARDED_BY(mu_);
};

TEST_F(VolumeTest, AcknowledgedDataIsFdatasyncedHereAndOnTheReplica) {
  // Promise 3: a mount drops its copy of the data when the write is
  // acknowledged, so the data must be durable on both servers by then, not
  // only in their page caches (a power loss of both would lose it).
  for (bool sync_data : {true, false}) {
    SCOPED_TRACE(sync_data);
    RecordingSink sink;
    VolumeOptions options;
    options.dir = root_dir_ + (sync_data ? "/synced" : "/unsynced");
    ASSERT_EQ(mkdir(options.dir.c_str(), 0755), 0) << strerror(errno);
    options.capacity_bytes = 64 * kMiB;
    options.clock = &clock_;
    options.lease_clock = &clock_;
    options.background = false;
    options.change_sink = &sink;
    options.sync_data = sync_data;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Volume> v, Volume::Open(options));
    RequestContext c;
    ASSERT_OK_AND_ASSIGN(c.client_id, v->OpenSession("c"));
    proto::MkNodRequest req;
    req.set_parent(kRootIno);
    req.set_name("f");
    req.set_mode(S_IFREG | 0644);
    ASSERT_OK_AND_ASSIGN(proto::Attr f, v->MkNod(c, req));
    const uint64_t before = v->chunks().syncs();
    // A flush from a mount's write cache: no sync asked for.
    ASSERT_OK(v->Write(c, f.ino(), kVolumeChunk - kMiB / 2, std::string(kMiB, 'd'), /*sync=*/false)
                  .status());
    EXPECT_EQ(v->chunks().syncs() - before, sync_data ? 2u : 0u);  // two chunk pieces
    int data_records = 0;
    for (const proto::ReplRecord& rec : sink.records()) {
      if (!rec.has_data()) continue;
      ++data_records;
      EXPECT_EQ(rec.data().sync(), sync_data);  // the replica syncs before it acks
    }
    EXPECT_EQ(data_records, 2);
  }
}

TEST_F(VolumeTest, ReadPastEndOfFileIsShort) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  const std::string data = Pattern(10000, 2);
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, data, false));
  ASSERT_OK_AND_ASSIGN(std::string got, volume_->Read(a_, f.ino(), 5000, 10000));
  EXPECT_EQ(got, data.substr(5000));
  ASSERT_OK_AND_ASSIGN(got, volume_->Read(a_, f.ino(), 9999, 2));
  EXPECT_EQ(got, data.substr(9999));
  ASSERT_OK_AND_ASSIGN(got, volume_->Read(a_, f.ino(), 10000, 10));
  EXPECT_EQ(got, "");
  ASSERT_OK_AND_ASSIGN(got, volume_->Read(a_, f.ino(), 1 << 30, 10));
  EXPECT_EQ(got, "");
}

TEST_F(VolumeTest, WriteAcrossAChunkBoundaryAndHoles) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  const std::string data = Pattern(300, 3);
  ASSERT_OK_AND_ASSIGN(proto::Attr w, volume_->Write(a_, f.ino(), kVolumeChunk - 100, data, false));
  EXPECT_EQ(w.size(), kVolumeChunk + 200);
  EXPECT_EQ(Used(), 2 * kBlockSize);
  EXPECT_EQ(ChunkFileSize(f.ino(), 0), static_cast<int64_t>(kVolumeChunk));
  EXPECT_EQ(ChunkFileSize(f.ino(), 1), 200);
  ASSERT_OK_AND_ASSIGN(std::string got, volume_->Read(a_, f.ino(), kVolumeChunk - 100, 300));
  EXPECT_EQ(got, data);
  // The hole before the data reads as zeros.
  ASSERT_OK_AND_ASSIGN(got, volume_->Read(a_, f.ino(), 0, 4096));
  EXPECT_EQ(got, std::string(4096, '\0'));
}

TEST_F(VolumeTest, OverwriteKeepsSizeAndSpace) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, std::string(8192, 'a'), false));
  ASSERT_OK_AND_ASSIGN(proto::Attr w, volume_->Write(a_, f.ino(), 100, "bbb", true));
  EXPECT_EQ(w.size(), 8192u);
  EXPECT_EQ(Used(), 8192u);
  std::string expect(8192, 'a');
  expect.replace(100, 3, "bbb");
  EXPECT_EQ(ReadAll(a_, f.ino()), expect);
  ASSERT_OK(volume_->Fsync(a_, f.ino()));
}

TEST_F(VolumeTest, DataRequestsOnWrongTargets) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  EXPECT_EQ(Err(volume_->Read(a_, kRootIno, 0, 10)), EISDIR);
  EXPECT_EQ(Err(volume_->Write(a_, kRootIno, 0, "x", false)), EISDIR);
  EXPECT_EQ(Err(volume_->Read(a_, 999, 0, 10)), ENOENT);
  EXPECT_EQ(Err(volume_->Write(a_, 999, 0, "x", false)), ENOENT);
  EXPECT_EQ(Err(volume_->Read(a_, f.ino(), 0, (8 << 20) + 1)), EINVAL);
  EXPECT_EQ(Err(volume_->Write(a_, f.ino(), kMaxFileSize, "x", false)), EFBIG);
  EXPECT_EQ(Err(volume_->Write(a_, f.ino(), kMaxFileSize - 1, "xy", false)), EFBIG);
  ASSERT_OK_AND_ASSIGN(proto::Attr attr, volume_->GetAttr(a_, f.ino()));
  EXPECT_EQ(attr.size(), 0u);
  EXPECT_EQ(Used(), 0u);
}

TEST_F(VolumeTest, DataSurvivesAReopen) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  const std::string data = Pattern(20000, 4);
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, data, true));
  OpenVolume(kMiB);
  ASSERT_OK_AND_ASSIGN(proto::Attr again, volume_->Lookup(a_, kRootIno, "f"));
  EXPECT_EQ(again.ino(), f.ino());
  EXPECT_EQ(again.size(), 20000u);
  EXPECT_EQ(ReadAll(a_, f.ino()), data);
  EXPECT_EQ(Used(), 5 * kBlockSize);
}

// --- space ------------------------------------------------------------------------

TEST_F(VolumeTest, WritePastCapacityIsEnospcAndChangesNothing) {
  OpenVolume(16 * kBlockSize);  // 64 KiB
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  const std::string first(2 * kBlockSize, 'a');
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, first, false));
  EXPECT_EQ(Used(), 2 * kBlockSize);
  // 15 more blocks do not fit in the 14 left.
  EXPECT_EQ(
      Err(volume_->Write(a_, f.ino(), 2 * kBlockSize, std::string(15 * kBlockSize, 'b'), false)),
      ENOSPC);
  SpaceInfo space = volume_->Space();
  EXPECT_EQ(space.used_bytes, 2 * kBlockSize);
  EXPECT_EQ(space.reserved_bytes, 0u);
  ASSERT_OK_AND_ASSIGN(proto::Attr attr, volume_->GetAttr(a_, f.ino()));
  EXPECT_EQ(attr.size(), 2 * kBlockSize);
  // Decided before any byte landed on disk.
  EXPECT_EQ(ChunkFileSize(f.ino(), 0), static_cast<int64_t>(2 * kBlockSize));
  EXPECT_EQ(ReadAll(a_, f.ino()), first);
  // Exactly the 14 left still fit, and then nothing more.
  ASSERT_OK(volume_->Write(a_, f.ino(), 2 * kBlockSize, std::string(14 * kBlockSize, 'c'), false));
  EXPECT_EQ(Used(), 16 * kBlockSize);
  EXPECT_EQ(Err(volume_->Write(a_, f.ino(), 16 * kBlockSize, "d", false)), ENOSPC);
  // Overwriting in place on a full volume works.
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "e", false));
  EXPECT_EQ(Used(), 16 * kBlockSize);
}

TEST_F(VolumeTest, TruncateDownThenExtendReadsZeros) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, std::string(3 * kBlockSize, 'x'), false));
  EXPECT_EQ(Used(), 3 * kBlockSize);
  // Cut inside the second block: it stays allocated, the third is freed.
  ASSERT_OK_AND_ASSIGN(proto::Attr t, Truncate(a_, f.ino(), 5000));
  EXPECT_EQ(t.size(), 5000u);
  EXPECT_EQ(Used(), 2 * kBlockSize);
  EXPECT_EQ(ReadAll(a_, f.ino()), std::string(5000, 'x'));
  ASSERT_OK_AND_ASSIGN(t, Truncate(a_, f.ino(), 3 * kBlockSize));
  EXPECT_EQ(t.size(), 3 * kBlockSize);
  EXPECT_EQ(Used(), 2 * kBlockSize);  // growing allocates nothing
  EXPECT_EQ(ReadAll(a_, f.ino()),
            std::string(5000, 'x') + std::string(3 * kBlockSize - 5000, '\0'));
}

TEST_F(VolumeTest, WritePastATruncationLeavesZerosBetween) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, std::string(3 * kBlockSize, 'x'), false));
  ASSERT_OK(Truncate(a_, f.ino(), 100));
  ASSERT_OK(volume_->Write(a_, f.ino(), 10000, "yy", false));
  EXPECT_EQ(ReadAll(a_, f.ino()), std::string(100, 'x') + std::string(9900, '\0') + "yy");
  EXPECT_EQ(Used(), 2 * kBlockSize);  // blocks 0 and 2
}

// A crash between a write's bytes reaching the chunk file and its commit
// (kill -9 of the server) leaves those bytes in the file, in blocks no
// record allocates. Holes over them, made later by an extension or by a
// write further on, read as zeros, not as the bytes of the lost write.
TEST_F(VolumeTest, BytesOfAWriteThatNeverCommittedReadAsZeros) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "head", false));
  {
    // The uncommitted write: bytes in the chunk file only (the second block,
    // and part of the first past the end of the file).
    int fd = open(ChunkPath(f.ino(), 0).c_str(), O_WRONLY);
    ASSERT_GE(fd, 0) << strerror(errno);
    const std::string stale(2 * kBlockSize, 's');
    ASSERT_EQ(pwrite(fd, stale.data(), stale.size(), 100), static_cast<ssize_t>(stale.size()));
    close(fd);
  }
  ASSERT_OK(Truncate(a_, f.ino(), 3 * kBlockSize));  // extension: a hole
  EXPECT_EQ(ReadAll(a_, f.ino()), "head" + std::string(3 * kBlockSize - 4, '\0'));
  // A write in the third block; the second stays a hole.
  ASSERT_OK(volume_->Write(a_, f.ino(), 2 * kBlockSize + 10, "tail", false));
  const std::string all = ReadAll(a_, f.ino());
  EXPECT_EQ(all.substr(kBlockSize, kBlockSize), std::string(kBlockSize, '\0'));
  EXPECT_EQ(all.substr(2 * kBlockSize + 10, 4), "tail");
  // A read starting inside a hole, across blocks and chunks' edges.
  ASSERT_OK_AND_ASSIGN(std::string part, volume_->Read(a_, f.ino(), 4000, 200));
  EXPECT_EQ(part, std::string(200, '\0'));
}

// Growing a file whose last block was never allocated writes nothing
// (no chunk file without a record: fsck would report it).
TEST_F(VolumeTest, GrowingPastAnUnallocatedBlockMakesNoChunkFile) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(Truncate(a_, f.ino(), 5000));
  ASSERT_OK(Truncate(a_, f.ino(), 10000));
  ASSERT_OK(volume_->Write(a_, f.ino(), 20000, "x", false));
  EXPECT_EQ(ChunkFileSize(f.ino(), 0), 20001);  // only the write's block
  EXPECT_EQ(Used(), kBlockSize);
  EXPECT_EQ(ReadAll(a_, f.ino()), std::string(20000, '\0') + "x");
}

TEST_F(VolumeTest, TruncateToZeroFreesEverything) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), kVolumeChunk - 10, std::string(20, 'x'), false));
  ASSERT_OK_AND_ASSIGN(proto::Attr t, Truncate(a_, f.ino(), 0));
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.blocks(), 0u);
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(ChunkFileSize(f.ino(), 0), -1);
  EXPECT_EQ(ChunkFileSize(f.ino(), 1), -1);
  ASSERT_OK(Truncate(a_, f.ino(), kVolumeChunk + 10));
  EXPECT_EQ(ReadAll(a_, f.ino()), std::string(kVolumeChunk + 10, '\0'));
}

// --- fallocate ---------------------------------------------------------------------

TEST_F(VolumeTest, FallocateExtendsAndAllocates) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK_AND_ASSIGN(proto::Attr a, volume_->Fallocate(a_, f.ino(), 0, 0, 10000));
  EXPECT_EQ(a.size(), 10000u);
  EXPECT_EQ(a.blocks(), 3 * kBlockSize / 512);
  EXPECT_EQ(Used(), 3 * kBlockSize);
  EXPECT_EQ(ReadAll(a_, f.ino()), std::string(10000, '\0'));
  // Writing into allocated space needs no more.
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "abc", false));
  EXPECT_EQ(Used(), 3 * kBlockSize);
  // Inside the file: the size stays.
  ASSERT_OK_AND_ASSIGN(a, volume_->Fallocate(a_, f.ino(), 0, 0, 100));
  EXPECT_EQ(a.size(), 10000u);
  EXPECT_EQ(ReadAll(a_, f.ino()).substr(0, 4), std::string("abc\0", 4));
  // Past the end: extends.
  ASSERT_OK_AND_ASSIGN(a, volume_->Fallocate(a_, f.ino(), 0, 20000, 100));
  EXPECT_EQ(a.size(), 20100u);
  EXPECT_EQ(Used(), 4 * kBlockSize);
}

TEST_F(VolumeTest, FallocateErrors) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  EXPECT_EQ(Err(volume_->Fallocate(a_, f.ino(), 1, 0, 4096)), EOPNOTSUPP);  // KEEP_SIZE
  EXPECT_EQ(Err(volume_->Fallocate(a_, f.ino(), 3, 0, 4096)), EOPNOTSUPP);  // PUNCH_HOLE
  EXPECT_EQ(Err(volume_->Fallocate(a_, f.ino(), 0, 0, 0)), EINVAL);
  EXPECT_EQ(Err(volume_->Fallocate(a_, f.ino(), 0, kMaxFileSize, 1)), EFBIG);
  EXPECT_EQ(Err(volume_->Fallocate(a_, kRootIno, 0, 0, 4096)), EISDIR);
  EXPECT_EQ(Err(volume_->Fallocate(a_, f.ino(), 0, 0, 2 * kMiB)), ENOSPC);  // 1 MiB volume
  ASSERT_OK_AND_ASSIGN(proto::Attr attr, volume_->GetAttr(a_, f.ino()));
  EXPECT_EQ(attr.size(), 0u);
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(volume_->Space().reserved_bytes, 0u);
}

// --- faults of the chunk store's disk (common/fault_injection_env.h) ----------------

class VolumeFaultTest : public VolumeTest {
 protected:
  void SetUp() override {
    chunk_env_ = &env_;
    VolumeTest::SetUp();
  }
  // The server loses power: the metadata store's WAL was fsync'd at every
  // change, the chunk files lose what was not fdatasync'd. The clients
  // come back with their sessions.
  void PowerLoss(uint64_t capacity) {
    volume_.reset();
    ASSERT_OK(env_.DropUnsyncedData());
    OpenVolume(capacity, /*same_clients=*/true);
  }

  FaultInjectionEnv env_;
};

TEST_F(VolumeFaultTest, AcknowledgedWritesSurviveAPowerLoss) {
  // Promise 3: a write the volume acknowledged is on disk, whatever the
  // client asked for (sync_data, the default): flushes of a mount's write
  // cache come without `sync`.
  OpenVolume(64 * kMiB);
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  const std::string small = Pattern(10000, 1);
  const std::string big = Pattern(2 * kMiB, 2);  // O_DIRECT pieces, two chunks
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, small, /*sync=*/false));
  ASSERT_OK(volume_->Write(a_, f.ino(), kVolumeChunk - kMiB, big, /*sync=*/false));
  ASSERT_OK(volume_->Write(a_, f.ino(), 5000, "overwritten", /*sync=*/false));
  EXPECT_GT(volume_->chunks().direct_writes(), 0u);
  EXPECT_TRUE(env_.UnsyncedFiles().empty());  // nothing acknowledged is only in memory
  std::string want(kVolumeChunk + kMiB, '\0');
  want.replace(0, small.size(), small);
  want.replace(kVolumeChunk - kMiB, big.size(), big);
  want.replace(5000, 11, "overwritten");
  PowerLoss(64 * kMiB);
  ASSERT_OK_AND_ASSIGN(proto::Attr attr, volume_->GetAttr(a_, f.ino()));
  EXPECT_EQ(attr.size(), want.size());
  for (uint64_t at = 0; at < want.size(); at += kMiB) {
    ASSERT_OK_AND_ASSIGN(std::string got, volume_->Read(a_, f.ino(), at, kMiB));
    EXPECT_TRUE(got == want.substr(at, kMiB)) << "MiB at " << at;
  }
}

TEST_F(VolumeFaultTest, WithoutSyncDataOnlySyncedWritesAndFsyncSurvive) {
  // --sync_data=false: acknowledged data sits in the page cache until the
  // file's fsync (docs/architecture.md); the size is durable, the bytes not.
  sync_data_ = false;
  OpenVolume(kMiB);
  ASSERT_OK_AND_ASSIGN(proto::Attr lost, CreateFile(a_, "lost"));
  ASSERT_OK_AND_ASSIGN(proto::Attr synced, CreateFile(a_, "synced"));
  ASSERT_OK_AND_ASSIGN(proto::Attr fsynced, CreateFile(a_, "fsynced"));
  ASSERT_OK(volume_->Write(a_, lost.ino(), 0, std::string(5000, 'l'), /*sync=*/false));
  ASSERT_OK(volume_->Write(a_, synced.ino(), 0, std::string(5000, 's'), /*sync=*/true));
  ASSERT_OK(volume_->Write(a_, fsynced.ino(), 0, std::string(5000, 'f'), /*sync=*/false));
  ASSERT_OK(volume_->Fsync(a_, fsynced.ino()));
  PowerLoss(kMiB);
  EXPECT_EQ(ReadAll(a_, lost.ino()), std::string(5000, '\0'));
  EXPECT_EQ(ReadAll(a_, synced.ino()), std::string(5000, 's'));
  EXPECT_EQ(ReadAll(a_, fsynced.ino()), std::string(5000, 'f'));
}

TEST_F(VolumeFaultTest, AFailedChunkWriteReleasesItsReservationAndItsGrant) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  const std::string data(8 * kBlockSize, 'w');
  // Exactly the write's blocks in a_'s grant: a grant left busy by a failed
  // write would make the next write take free space instead.
  uint64_t added = 0;
  ASSERT_OK(volume_->Grant(a_, data.size(), 0, &added));
  ASSERT_EQ(added, data.size());
  auto expect_unchanged = [&](const char* what) {
    SCOPED_TRACE(what);
    const SpaceInfo space = volume_->Space();
    EXPECT_EQ(space.used_bytes, 0u);
    EXPECT_EQ(space.reserved_bytes, 0u);
    EXPECT_EQ(space.granted_bytes, data.size());
    EXPECT_TRUE(space.ledger_ok);
    EXPECT_EQ(volume_->meta().space().GrantOf(a_.client_id) * kBlockSize, data.size());
    ASSERT_OK_AND_ASSIGN(proto::Attr attr, volume_->GetAttr(a_, f.ino()));
    EXPECT_EQ(attr.size(), 0u);
  };
  struct Case {
    FileOp op;
    int err;
  };
  for (const Case& c :
       {Case{FileOp::kWrite, EIO}, Case{FileOp::kDataSync, EIO}, Case{FileOp::kOpen, EIO},
        Case{FileOp::kWrite, ENOSPC}, Case{FileOp::kDataSync, ENOSPC}}) {
    SCOPED_TRACE(testing::Message() << "op " << static_cast<int>(c.op) << " errno " << c.err);
    // Every try fails: a write in a grant that finds the disk full borrows
    // the space hold and tries again (three times), then gives up.
    env_.FailAlways(c.op, c.err);
    const int64_t calls = env_.calls(c.op);
    uint64_t grant_used = 12345;
    EXPECT_EQ(Err(volume_->Write(a_, f.ino(), 0, data, false, /*from_grant=*/true, &grant_used)),
              c.err);
    EXPECT_EQ(env_.calls(c.op) - calls, c.err == ENOSPC ? 4 : 1);
    EXPECT_EQ(grant_used, 0u);
    expect_unchanged("after a write in the grant");
    EXPECT_EQ(Err(volume_->Write(a_, f.ino(), 0, data, false)), c.err);
    expect_unchanged("after a write outside any grant");
    env_.ClearFaults();
  }
  // One ENOSPC (another program filled the disk): the write in the grant
  // borrows from the space hold and lands, all of it from the grant.
  env_.FailNext(FileOp::kWrite, ENOSPC);
  uint64_t grant_used = 0;
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, data, false, /*from_grant=*/true, &grant_used));
  EXPECT_EQ(grant_used, data.size());
  const SpaceInfo space = volume_->Space();
  EXPECT_EQ(space.used_bytes, data.size());
  EXPECT_EQ(space.granted_bytes, 0u);
  EXPECT_EQ(space.reserved_bytes, 0u);
  EXPECT_EQ(ReadAll(a_, f.ino()), data);
}

TEST_F(VolumeFaultTest, OtherDiskErrorsComeBackAsTheirErrno) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, std::string(3 * kBlockSize, 'x'), false));
  env_.FailNext(FileOp::kRead, EIO);
  EXPECT_EQ(Err(volume_->Read(a_, f.ino(), 0, 100)), EIO);
  env_.FailNext(FileOp::kDataSync, EIO);
  EXPECT_EQ(Err(volume_->Fsync(a_, f.ino())), EIO);
  env_.FailNext(FileOp::kAllocate, ENOSPC);
  EXPECT_EQ(Err(volume_->Fallocate(a_, f.ino(), 0, 0, 16 * kBlockSize)), ENOSPC);
  EXPECT_EQ(volume_->Space().reserved_bytes, 0u);
  EXPECT_EQ(Used(), 3 * kBlockSize);
  env_.FailNext(FileOp::kTruncate, EIO);
  EXPECT_EQ(Err(Truncate(a_, f.ino(), 100)), EIO);
  ASSERT_OK_AND_ASSIGN(proto::Attr attr, volume_->GetAttr(a_, f.ino()));
  EXPECT_EQ(attr.size(), 3 * kBlockSize);
  EXPECT_EQ(Used(), 3 * kBlockSize);
  // The volume goes on once the disk does.
  EXPECT_EQ(ReadAll(a_, f.ino()), std::string(3 * kBlockSize, 'x'));
  ASSERT_OK(Truncate(a_, f.ino(), 100));
  EXPECT_TRUE(volume_->Space().ledger_ok);
}

TEST_F(VolumeFaultTest, ATruncationIsNotUndoneByAPowerLoss) {
  // The smaller size is committed (durable) after the chunk files were cut.
  // Were the cut lost and the size kept, the chunk files would come back
  // with the bytes cut off: reads zero the blocks no write allocated, but a
  // later write of part of such a block lands in the old bytes, and the
  // rest of the block shows them (and their space is counted nowhere).
  OpenVolume(64 * kMiB);
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, Pattern(2 * kVolumeChunk, 3), false));
  ASSERT_OK(Truncate(a_, f.ino(), 100));  // cuts chunk 0, removes chunk 1
  ASSERT_OK_AND_ASSIGN(proto::Attr g, CreateFile(a_, "g"));
  ASSERT_OK(volume_->Write(a_, g.ino(), 0, Pattern(kVolumeChunk, 4), false));
  ASSERT_OK(Truncate(a_, g.ino(), 0));  // open(O_TRUNC): removes chunk 0
  PowerLoss(64 * kMiB);
  ASSERT_OK(volume_->Write(a_, f.ino(), 2 * kVolumeChunk - 1, "e", false));
  ASSERT_OK(volume_->Write(a_, g.ino(), kVolumeChunk - 1, "e", false));
  const std::string f_all = ReadAll(a_, f.ino()), g_all = ReadAll(a_, g.ino());
  ASSERT_EQ(f_all.size(), 2 * kVolumeChunk);
  EXPECT_EQ(f_all.substr(0, 100), Pattern(100, 3));
  EXPECT_EQ(f_all.find_first_not_of('\0', 100), 2 * kVolumeChunk - 1);
  ASSERT_EQ(g_all.size(), kVolumeChunk);
  EXPECT_EQ(g_all.find_first_not_of('\0'), kVolumeChunk - 1);
}

TEST_F(VolumeFaultTest, ADeletedFilesChunkFilesStayDeletedAfterAPowerLoss) {
  // The background deleter's record of a removed file goes once its chunk
  // files' deletions are durable (their directory fsync'd): were they not,
  // the power loss would bring back files no record names.
  OpenVolume(64 * kMiB);
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, Pattern(2 * kVolumeChunk, 5), false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  volume_.reset();
  ASSERT_OK(env_.DropUnsyncedData());
  EXPECT_EQ(ChunkFileSize(f.ino(), 0), -1);
  EXPECT_EQ(ChunkFileSize(f.ino(), 1), -1);
}

TEST_F(VolumeFaultTest, AWriteWhoseFileIsRemovedBeforeItsCommitLeavesNoChunkFile) {
  // A mount's flush of a closed file races its unlink (namespace grants: a
  // close does not wait for its data): the file goes between the write's
  // data and its commit. The chunk file the write made is named by no
  // record: it goes too, durably, and is counted nowhere.
  OpenVolume(64 * kMiB);
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  // Whole blocks: the write below zeroes no tail first.
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, Pattern(2 * kBlockSize, 2), false));
  bool removed = false;
  env_.set_before(FileOp::kDataSync, [&](const std::string&) {
    if (!std::exchange(removed, true)) {
      EXPECT_OK(volume_->Remove(a_, kRootIno, "f", false));
    }
  });
  EXPECT_EQ(Err(volume_->Write(a_, f.ino(), kVolumeChunk, Pattern(1000, 3), false)), ENOENT);
  env_.set_before(FileOp::kDataSync, nullptr);
  ASSERT_TRUE(removed);
  ASSERT_OK(volume_->RunMaintenance().status());
  EXPECT_EQ(ChunkFileSize(f.ino(), 0), -1);
  EXPECT_EQ(ChunkFileSize(f.ino(), 1), -1);
  EXPECT_EQ(Used(), 0u);
  volume_.reset();
  ASSERT_OK(env_.DropUnsyncedData());
  EXPECT_EQ(ChunkFileSize(f.ino(), 1), -1);
}

TEST_F(VolumeFaultTest, ADeletedFileWhoseChunkFileCannotBeRemovedHoldsUpNoOther) {
  OpenVolume(64 * kMiB);
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK_AND_ASSIGN(proto::Attr g, CreateFile(a_, "g"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, Pattern(1000, 7), false));
  ASSERT_OK(volume_->Write(a_, g.ino(), 0, Pattern(1000, 8), false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "g", false));
  env_.FailNext(FileOp::kRemove, EIO);  // the first file's chunk
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  ASSERT_OK_AND_ASSIGN(std::vector<uint64_t> garbage, volume_->meta().orphans().ListGarbage());
  EXPECT_EQ(garbage.size(), 1u);
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(ChunkFileSize(f.ino(), 0), -1);
  EXPECT_EQ(ChunkFileSize(g.ino(), 0), -1);
  EXPECT_EQ(Used(), 0u);
}

TEST_F(VolumeFaultTest, AFailedDirectorySyncKeepsTheDeletedFileForTheNextRound) {
  OpenVolume(64 * kMiB);
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, Pattern(1000, 6), false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  env_.FailNext(FileOp::kSyncDir, EIO);
  EXPECT_EQ(Err(volume_->RunMaintenance()), EIO);
  ASSERT_OK_AND_ASSIGN(std::vector<uint64_t> garbage, volume_->meta().orphans().ListGarbage());
  EXPECT_EQ(garbage, std::vector<uint64_t>{f.ino()});
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  ASSERT_OK_AND_ASSIGN(garbage, volume_->meta().orphans().ListGarbage());
  EXPECT_TRUE(garbage.empty());
  EXPECT_EQ(Used(), 0u);
}
}  // namespace
}  // namespace grantfs
