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
#include "common/status_macros.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"
#include "server/names.h"

namespace grantfs {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kVolumeChunk = 4 * kMiB;  // ChunkStoreOptions' default
constexpr absl::Duration kLease = absl::Seconds(10);

// Bytes that differ at every offset, so a misplaced copy is noticed.
std::string Pattern(size_t n, uint8_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed) % 251 + 1);
  return s;
}

FileLock WriteLock(uint64_t client_id, uint64_t owner, uint64_t start = 0,
                   uint64_t end = UINT64_MAX) {
  FileLock l;
  l.type = FileLock::kWrite;
  l.start = start;
  l.end = end;
  l.owner = LockOwner{client_id, owner};
  return l;
}

class VolumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/grantfs_volume_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << strerror(errno);
    root_dir_ = tmpl;
    ASSERT_EQ(mkdir((root_dir_ + "/vol").c_str(), 0700), 0) << strerror(errno);
    OpenVolume(kMiB);
  }
  void TearDown() override {
    volume_.reset();
    std::error_code ec;
    std::filesystem::remove_all(root_dir_, ec);
  }

  // (Re)opens the volume in the same directory with `capacity` bytes. With
  // `same_clients`, a_ and b_ keep their session ids (clients that come
  // back after a restart or a failover: they are in grace until they
  // Reclaim); otherwise they close their sessions first and get new ones.
  void OpenVolume(uint64_t capacity, bool same_clients = false) {
    if (volume_ && !same_clients) {  // the clients unmount first
      ASSERT_OK(volume_->CloseSession(a_.client_id));
      ASSERT_OK(volume_->CloseSession(b_.client_id));
    }
    volume_.reset();
    VolumeOptions options;
    options.dir = root_dir_ + "/vol";
    options.capacity_bytes = capacity;
    options.lease = kLease;
    options.clock = &clock_;
    options.lease_clock = &clock_;
    options.background = false;
    options.serving = [this] { return serving_; };
    options.chunk_env = chunk_env_;
    options.sync_data = sync_data_;
    auto v = Volume::Open(options);
    ASSERT_TRUE(v.ok()) << v.status();
    volume_ = *std::move(v);
    if (same_clients) return;
    ASSERT_OK_AND_ASSIGN(a_.client_id, volume_->OpenSession("a"));
    ASSERT_OK_AND_ASSIGN(b_.client_id, volume_->OpenSession("b"));
  }
  // `ctx` comes back after a restart with the (ino, handle) opens given.
  // Returns the inodes that were gone.
  std::vector<uint64_t> Reclaim(const RequestContext& ctx,
                                const std::vector<std::pair<uint64_t, uint64_t>>& opens = {}) {
    absl::StatusOr<std::vector<uint64_t>> lost = volume_->Reclaim(ctx, opens);
    EXPECT_TRUE(lost.ok()) << lost.status();
    return lost.ok() ? *lost : std::vector<uint64_t>{};
  }

  absl::StatusOr<proto::Attr> CreateFile(const RequestContext& ctx, const std::string& name,
                                         uint64_t parent = kRootIno) {
    proto::MkNodRequest req;
    req.set_parent(parent);
    req.set_name(name);
    req.set_mode(S_IFREG | 0644);
    req.set_exclusive(true);
    return volume_->MkNod(ctx, req);
  }
  absl::StatusOr<proto::Attr> Truncate(const RequestContext& ctx, uint64_t ino, uint64_t size) {
    proto::SetAttrRequest req;
    req.set_ino(ino);
    req.set_valid(proto::SetAttrRequest::SIZE);
    req.set_size(size);
    return volume_->SetAttr(ctx, req);
  }
  // The whole file, read in one go (or a marker on error).
  std::string ReadAll(const RequestContext& ctx, uint64_t ino) {
    auto attr = volume_->GetAttr(ctx, ino);
    if (!attr.ok()) return "<getattr failed>";
    auto data = volume_->Read(ctx, ino, 0, static_cast<uint32_t>(attr->size()));
    return data.ok() ? *data : "<read failed>";
  }
  std::string ChunkPath(uint64_t ino, uint64_t index) const {
    return absl::StrFormat("%s/vol/chunks/%02x/%d.%d", root_dir_, ino % 256, ino, index);
  }
  // The chunk file's size, or -1 when it does not exist.
  int64_t ChunkFileSize(uint64_t ino, uint64_t index) const {
    struct stat st;
    if (stat(ChunkPath(ino, index).c_str(), &st) != 0) return -1;
    return st.st_size;
  }
  uint64_t Used() { return volume_->Space().used_bytes; }

  FakeClock clock_;
  bool serving_ = true;
  Env* chunk_env_ = Env::Posix();  // the chunk store's file system
  bool sync_data_ = true;          // VolumeOptions::sync_data
  std::string root_dir_;
  std::unique_ptr<Volume> volume_;
  RequestContext a_;  // two clients, both root
  RequestContext b_;
};

// --- data -----------------------------------------------------------------------

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

TEST_F(VolumeTest, TruncateOfADirectoryIsEisdir) {
  EXPECT_EQ(Err(Truncate(a_, kRootIno, 0)), EISDIR);
}

// --- unlinked open files ----------------------------------------------------------

TEST_F(VolumeTest, UnlinkedOpenFileStaysReadableUntilRelease) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR));
  const std::string data = Pattern(3 * kBlockSize, 5);
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, data, false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));

  EXPECT_EQ(Err(volume_->Lookup(a_, kRootIno, "f")), ENOENT);
  ASSERT_OK_AND_ASSIGN(proto::Attr attr, volume_->GetAttr(a_, f.ino()));
  EXPECT_EQ(attr.nlink(), 0u);
  EXPECT_EQ(ReadAll(a_, f.ino()), data);
  // Still writable through the open handle.
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "Z", false));
  // Another client cannot open it any more; the holder can open it again.
  EXPECT_EQ(Err(volume_->Open(b_, f.ino(), O_RDONLY)), ESTALE);
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDONLY));

  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(Used(), 3 * kBlockSize);
  ASSERT_OK(volume_->Release(a_, f.ino()));  // one open left
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(ReadAll(a_, f.ino()).substr(1), data.substr(1));

  ASSERT_OK(volume_->Release(a_, f.ino()));  // the last one
  EXPECT_EQ(volume_->Space().pending_deletes, 1u);
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  SpaceInfo space = volume_->Space();
  EXPECT_EQ(space.used_bytes, 0u);
  EXPECT_EQ(space.pending_deletes, 0u);
  EXPECT_EQ(space.inodes, 1u);
  EXPECT_EQ(Err(volume_->GetAttr(a_, f.ino())), ENOENT);
  EXPECT_EQ(ChunkFileSize(f.ino(), 0), -1);
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
}

TEST_F(VolumeTest, UnlinkOfAClosedFileFreesItsSpaceAtTheNextMaintenance) {
  OpenVolume(16 * kMiB);
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, std::string(kVolumeChunk + 1, 'q'), false));
  EXPECT_EQ(Used(), kVolumeChunk + kBlockSize);
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  EXPECT_EQ(Err(volume_->GetAttr(a_, f.ino())), ENOENT);
  EXPECT_EQ(Used(), kVolumeChunk + kBlockSize);
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(ChunkFileSize(f.ino(), 0), -1);
  EXPECT_EQ(ChunkFileSize(f.ino(), 1), -1);
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

TEST_F(VolumeTest, OrphansOfAPreviousRunAreKeptForTheirHolders) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK_AND_ASSIGN(proto::Attr g, CreateFile(a_, "g"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR, /*handle=*/7));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDONLY, /*handle=*/8));
  ASSERT_OK(volume_->Open(b_, g.ino(), O_RDWR, /*handle=*/7));
  const std::string data = Pattern(100, 9);
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, data, false));
  ASSERT_OK(volume_->Write(b_, g.ino(), 0, data, false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  // g goes by being renamed over; b opened it, a did the rename.
  ASSERT_OK_AND_ASSIGN(proto::Attr h, CreateFile(a_, "h"));
  proto::RenameRequest mv;
  mv.set_parent(kRootIno);
  mv.set_name("h");
  mv.set_new_parent(kRootIno);
  mv.set_new_name("g");
  ASSERT_OK(volume_->Rename(a_, mv));
  EXPECT_EQ(Used(), 2 * kBlockSize);

  OpenVolume(kMiB, /*same_clients=*/true);  // a restart or a failover
  // Both orphans are still there for the sessions that had them open.
  EXPECT_EQ(ReadAll(a_, f.ino()), data);
  EXPECT_EQ(ReadAll(b_, g.ino()), data);
  EXPECT_EQ(volume_->sessions().OpenCountBy(a_.client_id, f.ino()), 2u);
  EXPECT_EQ(volume_->sessions().OpenCountBy(b_.client_id, g.ino()), 1u);
  EXPECT_EQ(volume_->sessions().List().size(), 2u);  // given a lease to come back in
  // Both come back and name what they have open: opens already known count
  // once.
  EXPECT_EQ(volume_->sessions().reclaiming(), 2u);
  EXPECT_TRUE(Reclaim(a_, {{f.ino(), 7}, {f.ino(), 8}}).empty());
  EXPECT_TRUE(Reclaim(b_, {{g.ino(), 7}}).empty());
  EXPECT_EQ(volume_->sessions().reclaiming(), 0u);
  EXPECT_EQ(volume_->sessions().OpenCountBy(a_.client_id, f.ino()), 2u);
  EXPECT_EQ(volume_->sessions().OpenCountBy(b_.client_id, g.ino()), 1u);
  // The holder can still open it; nobody else can.
  EXPECT_EQ(Err(volume_->Open(b_, f.ino(), O_RDONLY, 1)), ESTALE);
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDONLY, 9));
  ASSERT_OK(volume_->Release(a_, f.ino(), 9));

  // a comes back and closes both of its opens; a resent release counts once.
  ASSERT_OK(volume_->Release(a_, f.ino(), 7));
  ASSERT_OK(volume_->Release(a_, f.ino(), 7));
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  ASSERT_OK(volume_->Release(a_, f.ino(), 8));
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Err(volume_->GetAttr(a_, f.ino())), ENOENT);

  // b keeps g through one more restart, then never comes back: its lease
  // runs out and g goes.
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_EQ(ReadAll(b_, g.ino()), data);
  EXPECT_TRUE(Reclaim(a_).empty());
  clock_.Advance(kLease / 2);
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  clock_.Advance(kLease / 2);
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Used(), 0u);
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_EQ(Err(volume_->GetAttr(b_, g.ino())), ENOENT);
  EXPECT_TRUE(volume_->sessions().List().empty());
}

TEST_F(VolumeTest, AFileOpenAtARestartIsKeptUntilItsHolderReclaims) {
  // a has f open while it still has a name: no record says so.
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR, /*handle=*/3));
  const std::string data = Pattern(5000, 4);
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, data, false));
  const uint64_t used = Used();

  OpenVolume(kMiB, /*same_clients=*/true);  // a restart or a failover
  EXPECT_EQ(volume_->sessions().reclaiming(), 2u);
  std::vector<proto::SessionInfo> list = volume_->sessions().List();
  ASSERT_EQ(list.size(), 2u);
  for (const proto::SessionInfo& info : list) {
    EXPECT_TRUE(info.reclaiming());
    EXPECT_TRUE(info.client_name() == "a" || info.client_name() == "b") << info.client_name();
  }
  // b comes back first and unlinks f: a may still have it open, so it stays.
  EXPECT_TRUE(Reclaim(b_).empty());
  ASSERT_OK(volume_->Remove(b_, kRootIno, "f", false));
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(Used(), used);
  // a names its open (and one of a file that is gone): it keeps f.
  const uint64_t gone = f.ino() + 1000;
  EXPECT_EQ(Reclaim(a_, {{f.ino(), 3}, {gone, 4}}), std::vector<uint64_t>{gone});
  EXPECT_EQ(volume_->sessions().reclaiming(), 0u);
  EXPECT_EQ(volume_->sessions().OpenCountBy(a_.client_id, f.ino()), 1u);
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(ReadAll(a_, f.ino()), data);
  ASSERT_OK(volume_->Write(a_, f.ino(), data.size(), "tail", false));
  // Its close frees it.
  ASSERT_OK(volume_->Release(a_, f.ino(), 3));
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Used(), 0u);
}

TEST_F(VolumeTest, UnlinkedFilesAreFreedOnceTheSessionsThatDoNotComeBackExpire) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "x", false));
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_TRUE(Reclaim(b_).empty());
  ASSERT_OK(volume_->Remove(b_, kRootIno, "f", false));
  // a never comes back; b keeps its session alive.
  clock_.Advance(kLease / 2);
  ASSERT_OK(volume_->Touch(b_.client_id));
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(volume_->sessions().reclaiming(), 1u);
  clock_.Advance(kLease / 2);
  ASSERT_OK(volume_->Touch(b_.client_id));
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(volume_->sessions().reclaiming(), 0u);
  EXPECT_EQ(volume_->sessions().List().size(), 1u);
  EXPECT_EQ(Used(), 0u);
  // a's record went with its session: the next start waits only for b.
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_EQ(volume_->sessions().reclaiming(), 1u);
}

TEST_F(VolumeTest, GraceEndsTwoLeasesAfterTheStartEvenIfAClientNeverReclaims) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "x", false));
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_TRUE(Reclaim(b_).empty());
  ASSERT_OK(volume_->Remove(b_, kRootIno, "f", false));
  // a stays alive (its requests renew its lease) but never reclaims, like a
  // mount of a build that does not know Reclaim.
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(kLease / 2);
    ASSERT_OK(volume_->Touch(a_.client_id));
    ASSERT_OK(volume_->Touch(b_.client_id));
    ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
    EXPECT_EQ(freed, 0) << "after " << (i + 1) << " half leases";
  }
  EXPECT_EQ(volume_->sessions().reclaiming(), 1u);
  clock_.Advance(kLease / 2);
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(volume_->sessions().reclaiming(), 0u);
  EXPECT_EQ(volume_->sessions().List().size(), 2u);
}

TEST_F(VolumeTest, AnOpenAfterTheSessionEndedRecreatesItWithARecord) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  clock_.Advance(kLease);
  // RunMaintenance ends the session in one go; the window between the end
  // and Forgotten is what SessionTable's own test covers. Here: once it is
  // over, the client's next request re-creates its session, with a record.
  ASSERT_OK(volume_->RunMaintenance().status());
  EXPECT_TRUE(volume_->sessions().List().empty());
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDONLY, 1));  // re-creates the session
  EXPECT_EQ(volume_->sessions().OpenCountBy(a_.client_id, f.ino()), 1u);
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_EQ(volume_->sessions().List().size(), 1u);  // a's record was written again
}

TEST_F(VolumeTest, ASessionRecreatedByARequestIsRecordedAgain) {
  ASSERT_OK(volume_->CloseSession(a_.client_id));
  ASSERT_OK(volume_->Touch(a_.client_id));  // a request of a's, e.g. after a long partition
  OpenVolume(kMiB, /*same_clients=*/true);
  std::vector<proto::SessionInfo> list = volume_->sessions().List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(volume_->sessions().reclaiming(), 2u);
}

TEST_F(VolumeTest, ClosedSessionsLeaveNothingToWaitFor) {
  // OpenVolume without same_clients: a and b unmount, then new ones mount.
  OpenVolume(kMiB);
  EXPECT_EQ(volume_->sessions().reclaiming(), 0u);
  EXPECT_EQ(volume_->sessions().List().size(), 2u);
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "x", false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
}

TEST_F(VolumeTest, MaintenanceReapsAnOrphanWhoseRecordMissedTheLastRelease) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR, 4));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "x", false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  // As if Release's record update had failed (the replica did not answer):
  // the open is gone, the record still names it.
  volume_->sessions().CloseFile(a_.client_id, f.ino(), 4);
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Used(), 0u);
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_EQ(Err(volume_->GetAttr(a_, f.ino())), ENOENT);
}

TEST_F(VolumeTest, AResentOpenCountsOnceByItsHandle) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR, 5));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR, 5));  // the reply was lost; sent again
  EXPECT_EQ(volume_->sessions().OpenCountBy(a_.client_id, f.ino()), 1u);
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "x", false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  ASSERT_OK(volume_->Release(a_, f.ino(), 5));
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Used(), 0u);
}

TEST_F(VolumeTest, LocksSurviveARestartAndGoWithTheirSession) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK_AND_ASSIGN(proto::Attr g, CreateFile(a_, "g"));
  ASSERT_OK(volume_->SetLock(a_, f.ino(), WriteLock(a_.client_id, 1, 0, 99)));
  FileLock shared = WriteLock(b_.client_id, 4, 200, 299);
  shared.type = FileLock::kRead;
  ASSERT_OK(volume_->SetLock(b_, f.ino(), shared));
  FileLock flock = WriteLock(b_.client_id, 4);
  flock.flock = true;
  ASSERT_OK(volume_->SetLock(b_, g.ino(), flock));
  // Taken and given back before the restart: not there afterwards.
  ASSERT_OK(volume_->SetLock(a_, g.ino(), WriteLock(a_.client_id, 2, 10, 10)));
  FileLock unlock = WriteLock(a_.client_id, 2, 10, 10);
  unlock.type = FileLock::kUnlock;
  ASSERT_OK(volume_->SetLock(a_, g.ino(), unlock));

  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_EQ(Err(volume_->SetLock(b_, f.ino(), WriteLock(b_.client_id, 4, 50, 50))), EAGAIN);
  EXPECT_EQ(Err(volume_->SetLock(a_, f.ino(), WriteLock(a_.client_id, 1, 250, 250))), EAGAIN);
  FileLock f2 = WriteLock(a_.client_id, 9);
  f2.flock = true;
  EXPECT_EQ(Err(volume_->SetLock(a_, g.ino(), f2)), EAGAIN);
  EXPECT_EQ(Err(volume_->SetLock(a_, g.ino(), WriteLock(a_.client_id, 2, 10, 10))), 0);
  ASSERT_OK_AND_ASSIGN(FileLock held, volume_->GetLock(b_, f.ino(), WriteLock(b_.client_id, 4)));
  EXPECT_EQ(held.type, FileLock::kWrite);
  EXPECT_EQ(held.end, 99u);
  EXPECT_EQ(held.owner.client_id, a_.client_id);

  // a comes back and unlocks at close; b does not come back at all.
  FileLock all = WriteLock(a_.client_id, 1);
  all.type = FileLock::kUnlock;
  ASSERT_OK(volume_->SetLock(a_, f.ino(), all));
  clock_.Advance(kLease);
  volume_->sessions().Touch(a_.client_id);
  ASSERT_OK(volume_->RunMaintenance().status());
  OpenVolume(kMiB, /*same_clients=*/true);  // what is left is what was written
  EXPECT_EQ(Err(volume_->SetLock(a_, f.ino(), WriteLock(a_.client_id, 1))), 0);
  EXPECT_EQ(Err(volume_->SetLock(a_, g.ino(), f2)), 0);
  EXPECT_EQ(Err(volume_->SetLock(b_, g.ino(), WriteLock(b_.client_id, 3, 10, 10))), EAGAIN);
}

TEST_F(VolumeTest, SessionsAreKeptWhileTheServerIsNotServing) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->SetLock(a_, f.ino(), WriteLock(a_.client_id, 1)));
  serving_ = false;  // cut off: no client can reach this server
  clock_.Advance(3 * kLease);
  ASSERT_OK(volume_->RunMaintenance().status());
  EXPECT_EQ(volume_->sessions().List().size(), 2u);
  serving_ = true;  // back: every session has a whole lease to come back in
  clock_.Advance(kLease / 2);
  ASSERT_OK(volume_->RunMaintenance().status());
  EXPECT_EQ(volume_->sessions().List().size(), 2u);
  EXPECT_EQ(Err(volume_->SetLock(b_, f.ino(), WriteLock(b_.client_id, 1))), EAGAIN);
  volume_->sessions().Touch(b_.client_id);
  clock_.Advance(kLease / 2);
  ASSERT_OK(volume_->RunMaintenance().status());
  ASSERT_EQ(volume_->sessions().List().size(), 1u);  // a never came back
  EXPECT_EQ(Err(volume_->SetLock(b_, f.ino(), WriteLock(b_.client_id, 1))), 0);
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

// --- locks and sessions -------------------------------------------------------------

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

TEST_F(VolumeTest, LeaseExpiryReleasesLocksAndReapsUnlinkedOpenFiles) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK_AND_ASSIGN(proto::Attr kept, CreateFile(a_, "kept"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR));
  ASSERT_OK(volume_->Open(a_, kept.ino(), O_RDWR));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, std::string(2 * kBlockSize, 'f'), false));
  ASSERT_OK(volume_->Write(a_, kept.ino(), 0, std::string(kBlockSize, 'k'), false));
  ASSERT_OK(volume_->SetLock(a_, kept.ino(), WriteLock(a_.client_id, 7)));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  EXPECT_EQ(Err(volume_->SetLock(b_, kept.ino(), WriteLock(b_.client_id, 1))), EAGAIN);

  // Halfway through the lease nothing happens; b keeps its session alive.
  clock_.Advance(kLease / 2);
  volume_->sessions().Touch(b_.client_id);
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(Used(), 3 * kBlockSize);
  EXPECT_EQ(Err(volume_->SetLock(b_, kept.ino(), WriteLock(b_.client_id, 1))), EAGAIN);

  // a is not heard from for a whole lease.
  clock_.Advance(kLease / 2);
  volume_->sessions().Touch(b_.client_id);
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);  // f, unlinked and open only by a
  EXPECT_EQ(Used(), kBlockSize);
  EXPECT_EQ(Err(volume_->GetAttr(b_, f.ino())), ENOENT);
  EXPECT_EQ(volume_->sessions().OpenCount(kept.ino()), 0u);
  ASSERT_OK_AND_ASSIGN(FileLock held, volume_->GetLock(b_, kept.ino(), WriteLock(b_.client_id, 1)));
  EXPECT_EQ(held.type, FileLock::kUnlock);
  EXPECT_EQ(Err(volume_->SetLock(b_, kept.ino(), WriteLock(b_.client_id, 1))), 0);
  // The linked file is untouched.
  EXPECT_EQ(ReadAll(b_, kept.ino()), std::string(kBlockSize, 'k'));
  ASSERT_EQ(volume_->sessions().List().size(), 1u);
  EXPECT_EQ(volume_->sessions().List()[0].client_id(), b_.client_id);
}

TEST_F(VolumeTest, CloseSessionReleasesLocksAndOpenFiles) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "data", false));
  ASSERT_OK(volume_->SetLock(a_, f.ino(), WriteLock(a_.client_id, 1)));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  ASSERT_OK(volume_->CloseSession(a_.client_id));
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Used(), 0u);
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
}  // namespace
}  // namespace grantfs
