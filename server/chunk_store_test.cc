#include "server/chunk_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "common/errno_status.h"
#include "common/fault_injection_env.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

constexpr uint64_t kChunk = 64 * 1024;

// Bytes that differ at every offset, so a misplaced copy is noticed.
std::string Pattern(size_t n, uint8_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed) % 251 + 1);
  return s;
}

class ChunkStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/grantfs_chunk_store_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << strerror(errno);
    root_ = tmpl;
    ChunkStoreOptions options;
    options.dir = root_ + "/chunks";
    options.chunk_size = kChunk;
    auto store = ChunkStore::Create(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  std::string ChunkPath(uint64_t ino, uint64_t index) const {
    return absl::StrFormat("%s/chunks/%02x/%d.%d", root_, ino % 256, ino, index);
  }
  bool ChunkExists(uint64_t ino, uint64_t index) const {
    struct stat st;
    return stat(ChunkPath(ino, index).c_str(), &st) == 0;
  }
  // The chunk file's size, or -1 when it does not exist.
  int64_t ChunkFileSize(uint64_t ino, uint64_t index) const {
    struct stat st;
    if (stat(ChunkPath(ino, index).c_str(), &st) != 0) return -1;
    return st.st_size;
  }
  std::string Read(uint64_t ino, uint64_t offset, size_t size) {
    std::string out(size, '\x7f');
    absl::Status s = store_->Read(ino, offset, size, out.data());
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  std::string root_;
  std::unique_ptr<ChunkStore> store_;
};

TEST(ChunkStoreCreateTest, RejectsBadOptions) {
  ChunkStoreOptions options;
  EXPECT_EQ(ChunkStore::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.dir = "/tmp/never-created-grantfs-dir";
  options.chunk_size = 1000;
  EXPECT_EQ(ChunkStore::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.chunk_size = 0;
  EXPECT_EQ(ChunkStore::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  struct stat st;
  EXPECT_NE(stat(options.dir.c_str(), &st), 0);
}

TEST_F(ChunkStoreTest, CreateMakesTheFanOutDirectories) {
  EXPECT_EQ(store_->chunk_size(), kChunk);
  struct stat st;
  EXPECT_EQ(stat((root_ + "/chunks/00").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(stat((root_ + "/chunks/ff").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  // Creating again over the same directory is fine.
  ChunkStoreOptions options;
  options.dir = root_ + "/chunks";
  options.chunk_size = kChunk;
  EXPECT_TRUE(ChunkStore::Create(options).ok());
}

TEST_F(ChunkStoreTest, RoundTripWithinOneChunk) {
  const std::string data = Pattern(1000, 1);
  ASSERT_TRUE(store_->Write(7, 100, data.data(), data.size(), false).ok());
  EXPECT_EQ(Read(7, 100, 1000), data);
  EXPECT_EQ(Read(7, 600, 100), data.substr(500, 100));
  EXPECT_EQ(ChunkFileSize(7, 0), 1100);
  EXPECT_FALSE(ChunkExists(7, 1));
}

TEST_F(ChunkStoreTest, RoundTripAcrossAChunkBoundary) {
  // 3000 bytes before the boundary, the rest in chunk 1 and 2.
  const uint64_t offset = kChunk - 3000;
  const std::string data = Pattern(kChunk + 5000, 2);
  ASSERT_TRUE(store_->Write(300, offset, data.data(), data.size(), true).ok());
  EXPECT_EQ(Read(300, offset, data.size()), data);
  // Each chunk file holds exactly its part.
  EXPECT_EQ(ChunkFileSize(300, 0), static_cast<int64_t>(kChunk));
  EXPECT_EQ(ChunkFileSize(300, 1), static_cast<int64_t>(kChunk));
  EXPECT_EQ(ChunkFileSize(300, 2), 2000);
  EXPECT_FALSE(ChunkExists(300, 3));
  // A read that starts in chunk 1 and ends in chunk 2.
  EXPECT_EQ(Read(300, 2 * kChunk - 10, 20), data.substr(2 * kChunk - 10 - offset, 20));
  // Files are kept apart: the same offsets of another inode are empty.
  EXPECT_EQ(Read(301, offset, 100), std::string(100, '\0'));
}

TEST_F(ChunkStoreTest, HolesReadAsZeros) {
  const std::string data = Pattern(100, 3);
  // Write only into chunk 2; chunks 0 and 1 do not exist.
  ASSERT_TRUE(store_->Write(9, 2 * kChunk + 50, data.data(), data.size(), false).ok());
  EXPECT_FALSE(ChunkExists(9, 0));
  EXPECT_FALSE(ChunkExists(9, 1));
  const std::string all = Read(9, 0, 2 * kChunk + 200);
  EXPECT_EQ(all.substr(0, 2 * kChunk + 50), std::string(2 * kChunk + 50, '\0'));
  EXPECT_EQ(all.substr(2 * kChunk + 50, 100), data);
  // Past the chunk file's end.
  EXPECT_EQ(all.substr(2 * kChunk + 150), std::string(50, '\0'));
  // A file never written reads as zeros too.
  EXPECT_EQ(Read(12345, 0, 10), std::string(10, '\0'));
}

TEST_F(ChunkStoreTest, OverwriteReplacesOnlyTheWrittenBytes) {
  const std::string a(300, 'a');
  const std::string b(100, 'b');
  ASSERT_TRUE(store_->Write(5, 0, a.data(), a.size(), false).ok());
  ASSERT_TRUE(store_->Write(5, 100, b.data(), b.size(), false).ok());
  EXPECT_EQ(Read(5, 0, 300), std::string(100, 'a') + b + std::string(100, 'a'));
}

TEST_F(ChunkStoreTest, TruncateCutsExactlyAndExtensionReadsZeros) {
  const std::string data = Pattern(2 * kChunk + 1000, 4);
  ASSERT_TRUE(store_->Write(11, 0, data.data(), data.size(), false).ok());
  ASSERT_TRUE(ChunkExists(11, 2));
  const uint64_t cut = kChunk + 1234;
  ASSERT_TRUE(store_->Truncate(11, cut, data.size()).ok());
  EXPECT_EQ(ChunkFileSize(11, 0), static_cast<int64_t>(kChunk));
  EXPECT_EQ(ChunkFileSize(11, 1), 1234);
  EXPECT_FALSE(ChunkExists(11, 2));
  // The bytes below the cut survive; everything after it reads as zeros,
  // including where chunk 2 used to be (no stale bytes).
  const std::string after = Read(11, 0, data.size());
  EXPECT_EQ(after.substr(0, cut), data.substr(0, cut));
  EXPECT_EQ(after.substr(cut), std::string(data.size() - cut, '\0'));
  // A later write past the cut leaves the gap as zeros.
  const std::string tail(10, 't');
  ASSERT_TRUE(store_->Write(11, 2 * kChunk + 500, tail.data(), tail.size(), false).ok());
  const std::string extended = Read(11, cut, 2 * kChunk + 510 - cut);
  EXPECT_EQ(extended.substr(0, 2 * kChunk + 500 - cut), std::string(2 * kChunk + 500 - cut, '\0'));
  EXPECT_EQ(extended.substr(2 * kChunk + 500 - cut), tail);
}

TEST_F(ChunkStoreTest, TruncateToAChunkBoundaryRemovesTheChunksPastIt) {
  const std::string data = Pattern(3 * kChunk, 5);
  ASSERT_TRUE(store_->Write(12, 0, data.data(), data.size(), false).ok());
  ASSERT_TRUE(store_->Truncate(12, kChunk, data.size()).ok());
  EXPECT_EQ(ChunkFileSize(12, 0), static_cast<int64_t>(kChunk));
  EXPECT_FALSE(ChunkExists(12, 1));
  EXPECT_FALSE(ChunkExists(12, 2));
  EXPECT_EQ(Read(12, 0, kChunk), data.substr(0, kChunk));
  EXPECT_EQ(Read(12, kChunk, 2 * kChunk), std::string(2 * kChunk, '\0'));
}

TEST_F(ChunkStoreTest, TruncateToZeroRemovesEveryChunk) {
  const std::string data = Pattern(kChunk + 1, 6);
  ASSERT_TRUE(store_->Write(13, 0, data.data(), data.size(), false).ok());
  ASSERT_TRUE(store_->Truncate(13, 0, data.size()).ok());
  EXPECT_FALSE(ChunkExists(13, 0));
  EXPECT_FALSE(ChunkExists(13, 1));
  EXPECT_EQ(Read(13, 0, data.size()), std::string(data.size(), '\0'));
}

TEST_F(ChunkStoreTest, TruncateWithinAHoleChunkAndBeyondTheDataIsANoOp) {
  const std::string data(100, 'd');
  ASSERT_TRUE(store_->Write(14, 0, data.data(), data.size(), false).ok());
  // Growing: the chunk file is already shorter than the new size.
  ASSERT_TRUE(store_->Truncate(14, 5000, 100).ok());
  EXPECT_EQ(ChunkFileSize(14, 0), 100);
  EXPECT_EQ(Read(14, 0, 100), data);
  // The chunk that holds the new size does not exist: nothing to cut.
  ASSERT_TRUE(store_->Truncate(15, kChunk + 10, 2 * kChunk).ok());
  EXPECT_FALSE(ChunkExists(15, 1));
}

TEST_F(ChunkStoreTest, RemoveChunk) {
  const std::string data = Pattern(2 * kChunk, 7);
  ASSERT_TRUE(store_->Write(16, 0, data.data(), data.size(), false).ok());
  ASSERT_TRUE(store_->RemoveChunk(16, 0).ok());
  EXPECT_FALSE(ChunkExists(16, 0));
  EXPECT_TRUE(ChunkExists(16, 1));
  EXPECT_EQ(Read(16, 0, kChunk), std::string(kChunk, '\0'));
  EXPECT_EQ(Read(16, kChunk, kChunk), data.substr(kChunk));
  // Removing a chunk that does not exist is not an error.
  EXPECT_TRUE(store_->RemoveChunk(16, 0).ok());
  EXPECT_TRUE(store_->RemoveChunk(99, 5).ok());
}

TEST_F(ChunkStoreTest, SyncOfExistingDataAndOfHoles) {
  const std::string data = Pattern(100, 8);
  ASSERT_TRUE(store_->Write(17, 2 * kChunk, data.data(), data.size(), false).ok());
  // Chunks 0 and 1 are holes; chunk 2 exists.
  EXPECT_TRUE(store_->Sync(17, 2 * kChunk + 100).ok());
  EXPECT_TRUE(store_->Sync(17, 0).ok());
  EXPECT_TRUE(store_->Sync(18, 10 * kChunk).ok());  // a file with no chunks
  EXPECT_EQ(Read(17, 2 * kChunk, 100), data);
}

// A replica applies the primary's data records through ChunkApplier.
TEST_F(ChunkStoreTest, AppliedRecordsChangeTheChunksAndListWhatToSync) {
  const std::string data = Pattern(kChunk + 100, 9);
  proto::ReplRecord w;
  w.set_seq(1);
  w.mutable_data()->set_ino(20);
  w.mutable_data()->set_offset(kChunk - 50);
  w.mutable_data()->set_data(data);
  w.mutable_data()->set_sync(true);
  ChunkSet unsynced;
  ASSERT_TRUE(store_->ApplyRecord(w, &unsynced).ok());
  EXPECT_EQ(Read(20, kChunk - 50, data.size()), data);
  // The write touched chunks 0, 1 and 2; the caller syncs them.
  EXPECT_EQ(unsynced, (ChunkSet{{20, 0}, {20, 1}, {20, 2}}));

  // Without sync nothing is listed.
  w.mutable_data()->set_sync(false);
  ChunkSet none;
  ASSERT_TRUE(store_->ApplyRecord(w, &none).ok());
  EXPECT_TRUE(none.empty());

  proto::ReplRecord t;
  t.set_seq(2);
  t.mutable_truncate()->set_ino(20);
  t.mutable_truncate()->set_a(kChunk);
  t.mutable_truncate()->set_b(kChunk - 50 + data.size());
  ASSERT_TRUE(store_->ApplyRecord(t, &none).ok());
  EXPECT_FALSE(ChunkExists(20, 2));
  EXPECT_EQ(ChunkFileSize(20, 0), static_cast<int64_t>(kChunk));

  proto::ReplRecord r;
  r.set_seq(3);
  r.mutable_remove_chunk()->set_ino(20);
  r.mutable_remove_chunk()->set_a(0);
  ASSERT_TRUE(store_->ApplyRecord(r, &none).ok());
  EXPECT_FALSE(ChunkExists(20, 0));

  // A metadata batch, or no operation, is not the chunk store's.
  proto::ReplRecord m;
  m.set_seq(4);
  m.set_meta_batch("x");
  EXPECT_EQ(store_->ApplyRecord(m, &none).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->ApplyRecord(proto::ReplRecord(), &none).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ChunkStoreTest, AllocateKeepsChunkFileSizes) {
  const std::string data(10, 'x');
  ASSERT_TRUE(store_->Write(19, 0, data.data(), data.size(), false).ok());
  ASSERT_TRUE(store_->Allocate(19, 0, kChunk + 4096).ok());
  EXPECT_EQ(ChunkFileSize(19, 0), 10);
  EXPECT_EQ(ChunkFileSize(19, 1), 0);
  struct stat st;
  ASSERT_EQ(stat(ChunkPath(19, 0).c_str(), &st), 0);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, kChunk);
  ASSERT_EQ(stat(ChunkPath(19, 1).c_str(), &st), 0);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, 4096u);
  EXPECT_EQ(Read(19, 0, 20), data + std::string(10, '\0'));
}

// Blocks preallocated past a chunk file's size (fallocate KEEP_SIZE) must be
// given back to the disk when the file is cut inside that chunk, or the
// ledger (which frees them) and the disk drift apart.
TEST_F(ChunkStoreTest, TruncateFreesPreallocatedBlocksPastTheCut) {
  const std::string data(10, 'x');
  ASSERT_TRUE(store_->Write(21, 0, data.data(), data.size(), false).ok());
  ASSERT_TRUE(store_->Allocate(21, 0, kChunk).ok());
  struct stat st;
  ASSERT_EQ(stat(ChunkPath(21, 0).c_str(), &st), 0);
  ASSERT_GE(static_cast<uint64_t>(st.st_blocks) * 512, kChunk);
  ASSERT_TRUE(store_->Truncate(21, 8192, kChunk).ok());
  ASSERT_EQ(stat(ChunkPath(21, 0).c_str(), &st), 0);
  EXPECT_LE(static_cast<uint64_t>(st.st_blocks) * 512, 8192u);
  EXPECT_EQ(Read(21, 0, 10), data);
}

TEST_F(ChunkStoreTest, ChunkFilesLiveInTheirFanOutDirectory) {
  const std::string data(1, 'z');
  ASSERT_TRUE(store_->Write(0x1ff, kChunk * 3, data.data(), 1, false).ok());
  struct stat st;
  EXPECT_EQ(stat((root_ + "/chunks/ff/511.3").c_str(), &st), 0);
}

// A store whose 64 KiB+ aligned pieces go to disk with O_DIRECT.
class DirectChunkStoreTest : public ChunkStoreTest {
 protected:
  void SetUp() override {
    ChunkStoreTest::SetUp();
    ChunkStoreOptions options;
    options.dir = root_ + "/direct";
    options.chunk_size = 1 << 20;
    options.direct_min_bytes = 64 << 10;
    auto store = ChunkStore::Create(options);
    ASSERT_TRUE(store.ok()) << store.status();
    direct_ = *std::move(store);
  }
  void TearDown() override {
    direct_.reset();
    ChunkStoreTest::TearDown();
  }
  std::string ReadDirect(uint64_t ino, uint64_t offset, size_t size) {
    std::string out(size, '\x7f');
    absl::Status s = direct_->Read(ino, offset, size, out.data());
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }
  std::unique_ptr<ChunkStore> direct_;
};

TEST_F(DirectChunkStoreTest, DirectAndBufferedWritesOfOneFileStayCoherent) {
  // The test directory is on the machine's disk (ext4), which takes O_DIRECT.
  ASSERT_TRUE(direct_->direct_io());
  const std::string a = Pattern(256 << 10, 5);
  ASSERT_TRUE(direct_->Write(3, 0, a.data(), a.size(), false).ok());
  EXPECT_EQ(direct_->direct_writes(), 1u);
  // A small unaligned write is buffered: its page is dirty in the cache...
  const std::string b(100, 'b');
  ASSERT_TRUE(direct_->Write(3, 4000, b.data(), b.size(), false).ok());
  EXPECT_EQ(direct_->direct_writes(), 1u);
  std::string want = a;
  want.replace(4000, 100, b);
  EXPECT_EQ(ReadDirect(3, 0, a.size()), want);
  // ... and a direct write over it wins, also in what a read sees next.
  const std::string c = Pattern(64 << 10, 6);
  ASSERT_TRUE(direct_->Write(3, 0, c.data(), c.size(), true).ok());
  EXPECT_EQ(direct_->direct_writes(), 2u);
  want.replace(0, c.size(), c);
  EXPECT_EQ(ReadDirect(3, 0, a.size()), want);
  // Reading first (pages cached), then writing direct: no stale page.
  const std::string d = Pattern(128 << 10, 7);
  ASSERT_TRUE(direct_->Write(3, 128 << 10, d.data(), d.size(), false).ok());
  want.replace(128 << 10, d.size(), d);
  EXPECT_EQ(ReadDirect(3, 0, a.size()), want);
  EXPECT_EQ(direct_->direct_writes(), 3u);
}

TEST_F(DirectChunkStoreTest, UnalignedMemoryGoesThroughTheBounceBuffer) {
  // The source is one byte off a page; the file range is aligned.
  const std::string src = Pattern((64 << 10) + 1, 8);
  ASSERT_TRUE(direct_->Write(4, 1 << 20, src.data() + 1, 64 << 10, false).ok());
  EXPECT_EQ(direct_->direct_writes(), 1u);
  EXPECT_EQ(ReadDirect(4, 1 << 20, 64 << 10), src.substr(1));
  // Chunk 0 is a hole; chunk 1 holds exactly the piece.
  EXPECT_EQ(ReadDirect(4, 0, 4096), std::string(4096, '\0'));
}

TEST_F(DirectChunkStoreTest, SmallOrMisalignedPiecesAndAcrossChunksAreExact) {
  // 512 bytes off a block: buffered. Small: buffered.
  const std::string m = Pattern(128 << 10, 9);
  ASSERT_TRUE(direct_->Write(5, 512, m.data(), m.size(), false).ok());
  const std::string s = Pattern(4096, 10);
  ASSERT_TRUE(direct_->Write(5, 1 << 20, s.data(), s.size(), false).ok());
  EXPECT_EQ(direct_->direct_writes(), 0u);
  // 2 MiB from 512 KiB: pieces of 512 KiB, 1 MiB and 512 KiB, all direct.
  const std::string big = Pattern(2 << 20, 11);
  ASSERT_TRUE(direct_->Write(6, 512 << 10, big.data(), big.size(), true).ok());
  EXPECT_EQ(direct_->direct_writes(), 3u);
  EXPECT_EQ(ReadDirect(5, 512, m.size()), m);
  EXPECT_EQ(ReadDirect(5, 1 << 20, s.size()), s);
  EXPECT_EQ(ReadDirect(6, 512 << 10, big.size()), big);
  EXPECT_EQ(ReadDirect(6, 0, 512 << 10), std::string(512 << 10, '\0'));
}

TEST_F(ChunkStoreTest, DirectIoOffWritesEverythingBuffered) {
  ChunkStoreOptions options;
  options.dir = root_ + "/off";
  options.chunk_size = 1 << 20;
  options.direct_min_bytes = 4096;
  options.direct_io = false;
  auto store = ChunkStore::Create(options);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string a = Pattern(1 << 20, 12);
  ASSERT_TRUE((*store)->Write(1, 0, a.data(), a.size(), true).ok());
  EXPECT_EQ((*store)->direct_writes(), 0u);
  EXPECT_FALSE((*store)->direct_io());
  std::string out(a.size(), '\0');
  ASSERT_TRUE((*store)->Read(1, 0, out.size(), out.data()).ok());
  EXPECT_EQ(out, a);
}

// --- faults: a FaultInjectionEnv under the store (common/fault_injection_env.h) ---

class ChunkStoreFaultTest : public ChunkStoreTest {
 protected:
  void SetUp() override {
    ChunkStoreTest::SetUp();
    ChunkStoreOptions options;
    options.dir = root_ + "/faulty";
    options.chunk_size = 1 << 20;
    options.direct_min_bytes = 64 << 10;
    options.env = &env_;
    ASSERT_OK_AND_ASSIGN(faulty_, ChunkStore::Create(options));
  }
  void TearDown() override {
    faulty_.reset();
    ChunkStoreTest::TearDown();
  }
  std::string ReadFaulty(uint64_t ino, uint64_t offset, size_t size) {
    std::string out(size, '\x7f');
    absl::Status s = faulty_->Read(ino, offset, size, out.data());
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }
  absl::Status Write(uint64_t ino, uint64_t offset, const std::string& data, bool sync) {
    return faulty_->Write(ino, offset, data.data(), data.size(), sync);
  }

  // The size of chunk `index` of inode 12, or -1 when it does not exist.
  int64_t ChunkFileSize12(uint64_t index) const {
    struct stat st;
    const std::string path = absl::StrFormat("%s/faulty/0c/12.%d", root_, index);
    if (stat(path.c_str(), &st) != 0) return -1;
    return st.st_size;
  }

  FaultInjectionEnv env_;
  std::unique_ptr<ChunkStore> faulty_;
};

TEST_F(ChunkStoreFaultTest, SyncedWritesSurviveAPowerLossUnsyncedOnesMayNot) {
  // Synced: a small buffered write and a large one that goes O_DIRECT, the
  // latter across a chunk boundary (two files, each fdatasync'd).
  const std::string small = Pattern(1000, 1), big = Pattern(512 << 10, 2);
  ASSERT_OK(Write(1, 100, small, /*sync=*/true));
  ASSERT_OK(Write(2, (1 << 20) - (256 << 10), big, /*sync=*/true));
  EXPECT_EQ(faulty_->direct_writes(), 2u);
  // Not synced: a new file, and an overwrite of synced bytes.
  const std::string lost = Pattern(5000, 3);
  ASSERT_OK(Write(3, 0, lost, /*sync=*/false));
  ASSERT_OK(Write(1, 100, std::string(10, 'o'), /*sync=*/false));
  EXPECT_EQ(env_.UnsyncedFiles().size(), 2u);
  ASSERT_OK(env_.DropUnsyncedData());
  EXPECT_EQ(ReadFaulty(1, 100, small.size()), small);
  EXPECT_EQ(ReadFaulty(2, (1 << 20) - (256 << 10), big.size()), big);
  EXPECT_EQ(ReadFaulty(3, 0, lost.size()), std::string(lost.size(), '\0'));
}

TEST_F(ChunkStoreFaultTest, SyncAndSyncChunkMakeEarlierWritesDurable) {
  const std::string a = Pattern((1 << 20) + 4096, 4), b = Pattern(3000, 5);
  ASSERT_OK(Write(7, 0, a, false));  // chunks 0 and 1
  ASSERT_OK(Write(8, 0, b, false));
  ASSERT_OK(faulty_->Sync(7, a.size()));     // what fsync() of the file does
  ASSERT_OK(faulty_->SyncChunks({{8, 0}}));  // what a replica does once per message
  EXPECT_TRUE(env_.UnsyncedFiles().empty());
  ASSERT_OK(env_.DropUnsyncedData());
  EXPECT_EQ(ReadFaulty(7, 0, a.size()), a);
  EXPECT_EQ(ReadFaulty(8, 0, b.size()), b);
}

// A replica's removal of a chunk (the background deleter's, replicated)
// is durable once its message is: its directory is fsync'd with the syncs.
TEST_F(ChunkStoreFaultTest, AReplicatedRemovalIsDurableAfterSyncChunks) {
  ASSERT_OK(Write(9, 0, Pattern(3000, 6), /*sync=*/true));
  ASSERT_OK(Write(265, 0, Pattern(3000, 7), /*sync=*/true));  // the same directory (9 % 256)
  ChunkSet unsynced;
  for (uint64_t ino : {9, 265}) {
    proto::ReplRecord rec;
    rec.set_seq(1);
    rec.mutable_remove_chunk()->set_ino(ino);
    rec.mutable_remove_chunk()->set_a(0);
    ASSERT_OK(faulty_->ApplyRecord(rec, &unsynced));
  }
  EXPECT_EQ(unsynced, (ChunkSet{{9, 0}, {265, 0}}));
  EXPECT_FALSE(env_.UnsyncedFiles().empty());  // the removals, until their directory is synced
  ASSERT_OK(faulty_->SyncChunks(unsynced));
  EXPECT_TRUE(env_.UnsyncedFiles().empty());
  ASSERT_OK(env_.DropUnsyncedData());
  EXPECT_EQ(ReadFaulty(9, 0, 3000), std::string(3000, '\0'));
  EXPECT_EQ(ReadFaulty(265, 0, 3000), std::string(3000, '\0'));
}

TEST_F(ChunkStoreFaultTest, DiskErrorsComeBackAsEnospcOrEio) {
  const std::string data = Pattern(8192, 6), big = Pattern(128 << 10, 7);
  struct Case {
    FileOp op;
    int err;
    int want;
    bool direct;
  };
  for (const Case& c :
       {Case{FileOp::kWrite, ENOSPC, ENOSPC, false}, Case{FileOp::kWrite, EIO, EIO, false},
        Case{FileOp::kWrite, ENOSPC, ENOSPC, true}, Case{FileOp::kWrite, EIO, EIO, true},
        Case{FileOp::kDataSync, EIO, EIO, false}, Case{FileOp::kDataSync, ENOSPC, ENOSPC, true},
        Case{FileOp::kOpen, EIO, EIO, false},
        Case{FileOp::kOpen, EROFS, EIO, false},  // anything else: EIO
        Case{FileOp::kOpen, ENOSPC, ENOSPC, true}}) {
    SCOPED_TRACE(testing::Message() << "op " << static_cast<int>(c.op) << " errno " << c.err
                                    << (c.direct ? " direct" : " buffered"));
    env_.FailNext(c.op, c.err);
    EXPECT_EQ(Err(Write(9, 0, c.direct ? big : data, /*sync=*/true)), c.want);
    EXPECT_EQ(env_.calls(c.op) > 0, true);
    // The store goes on: the next write works, O_DIRECT still on.
    ASSERT_OK(Write(9, 0, c.direct ? big : data, true));
    EXPECT_TRUE(faulty_->direct_io());
  }
  EXPECT_EQ(env_.injected(), 9);
  env_.FailNext(FileOp::kRead, EIO);
  std::string out(100, '\0');
  EXPECT_EQ(Err(faulty_->Read(9, 0, out.size(), out.data())), EIO);
  env_.FailNext(FileOp::kAllocate, ENOSPC);
  EXPECT_EQ(Err(faulty_->Allocate(9, 0, 1 << 20)), ENOSPC);
  env_.FailNext(FileOp::kTruncate, EIO);
  EXPECT_EQ(Err(faulty_->Truncate(9, 100, big.size())), EIO);
  env_.FailNext(FileOp::kRemove, EIO);
  EXPECT_EQ(Err(faulty_->RemoveChunk(9, 0)), EIO);
  env_.FailNext(FileOp::kDataSync, EIO);
  EXPECT_EQ(Err(faulty_->Sync(9, big.size())), EIO);
  env_.FailNext(FileOp::kCreateDir, EACCES);
  ChunkStoreOptions options;
  options.dir = root_ + "/denied";
  options.env = &env_;
  EXPECT_EQ(Err(ChunkStore::Create(options)), EIO);
}

// A write the disk refused leaves no byte behind: a chunk file it created
// is removed, one it extended gets its size back (fsck found such bytes as
// orphan chunk files after the real-disk fills), whether the write or its
// fdatasync failed, buffered or O_DIRECT.
TEST_F(ChunkStoreFaultTest, AFailedWriteIsUndone) {
  const std::string small = Pattern(8192, 3), big = Pattern(128 << 10, 4);
  for (FileOp op : {FileOp::kWrite, FileOp::kDataSync}) {
    for (bool direct : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "op " << static_cast<int>(op) << (direct ? " direct" : " buffered"));
      const std::string& data = direct ? big : small;
      env_.FailNext(op, ENOSPC);
      EXPECT_EQ(Err(Write(12, 0, data, /*sync=*/true)), ENOSPC);
      EXPECT_EQ(ChunkFileSize12(0), -1) << "the chunk file it created is still there";
      ASSERT_OK(Write(12, 0, data, true));
      env_.FailNext(op, ENOSPC);
      EXPECT_EQ(Err(Write(12, data.size(), data, true)), ENOSPC);
      EXPECT_EQ(ChunkFileSize12(0), static_cast<int64_t>(data.size()));
      EXPECT_EQ(ReadFaulty(12, 0, data.size()), data);
      ASSERT_OK(faulty_->RemoveChunk(12, 0));
    }
  }
}

// What a chunk store hands to replication.
class RecordingSink : public ChangeSink {
 public:
  uint64_t Append(proto::ReplRecord record) override {
    records.push_back(std::move(record));
    return records.size();
  }
  absl::Status WaitReplicated(uint64_t) override { return absl::OkStatus(); }
  uint64_t Head() override { return records.size(); }
  std::vector<proto::ReplRecord> records;
};

// A write over two chunks whose second piece fails is undone in both: the
// first chunk file gets its old size back (or goes), and the replica is
// sent only what stays changed (bytes within a chunk file's old size), so
// no orphan chunk file is left on either copy and both hold the same bytes.
TEST_F(ChunkStoreFaultTest, AWriteFailingInItsSecondChunkIsUndoneInTheFirst) {
  RecordingSink sink;
  ChunkStoreOptions options;
  options.dir = root_ + "/sinked";
  options.chunk_size = 1 << 20;
  options.direct_io = false;
  options.env = &env_;
  options.change_sink = &sink;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ChunkStore> store, ChunkStore::Create(options));
  const auto chunk_size = [&](uint64_t index) -> int64_t {
    struct stat st;
    const std::string path = absl::StrFormat("%s/sinked/0c/12.%d", root_, index);
    return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
  };
  const uint64_t mib = 1 << 20;
  const std::string data = Pattern(64 << 10, 11);
  for (FileOp op : {FileOp::kWrite, FileOp::kDataSync}) {
    SCOPED_TRACE(testing::Message() << "op " << static_cast<int>(op));
    sink.records.clear();
    // New chunk files: both are gone after the failure, nothing replicated.
    env_.FailNext(op, ENOSPC, 1, /*skip=*/1);
    EXPECT_EQ(Err(store->Write(12, mib - 32768, data.data(), data.size(), true)), ENOSPC);
    EXPECT_EQ(chunk_size(0), -1);
    EXPECT_EQ(chunk_size(1), -1);
    EXPECT_TRUE(sink.records.empty());
    // Chunk 0 already holds bytes up to mib - 16384: it is cut back to
    // that size, and the 16 KiB the write changed below it are replicated.
    const std::string base = Pattern(mib - 16384, 12);
    ASSERT_OK(store->Write(12, 0, base.data(), base.size(), true));
    sink.records.clear();
    env_.FailNext(op, ENOSPC, 1, /*skip=*/1);
    EXPECT_EQ(Err(store->Write(12, mib - 32768, data.data(), data.size(), true)), ENOSPC);
    EXPECT_EQ(chunk_size(0), static_cast<int64_t>(base.size()));
    EXPECT_EQ(chunk_size(1), -1);
    ASSERT_EQ(sink.records.size(), 1u);
    EXPECT_EQ(sink.records[0].data().offset(), mib - 32768);
    EXPECT_EQ(sink.records[0].data().data(), data.substr(0, 16384));
    // Both pieces of a write that works are replicated, in order.
    sink.records.clear();
    ASSERT_OK(store->Write(12, mib - 32768, data.data(), data.size(), true));
    ASSERT_EQ(sink.records.size(), 2u);
    EXPECT_EQ(sink.records[0].data().offset(), mib - 32768);
    EXPECT_EQ(sink.records[1].data().offset(), mib);
    EXPECT_EQ(sink.records[0].data().data() + sink.records[1].data().data(), data);
    ASSERT_OK(store->RemoveChunk(12, 0));
    ASSERT_OK(store->RemoveChunk(12, 1));
  }
}

TEST_F(ChunkStoreFaultTest, AFileSystemWithoutODirectGetsBufferedWrites) {
  const std::string big = Pattern(128 << 10, 8);
  // Refused at the open (EINVAL): written buffered, the same bytes.
  env_.set_refuse_direct(true);
  ASSERT_OK(Write(10, 0, big, true));
  EXPECT_FALSE(faulty_->direct_io());
  EXPECT_EQ(faulty_->direct_writes(), 0u);
  EXPECT_EQ(ReadFaulty(10, 0, big.size()), big);
  ASSERT_OK(env_.DropUnsyncedData());
  EXPECT_EQ(ReadFaulty(10, 0, big.size()), big);
}

TEST_F(ChunkStoreFaultTest, ODirectRefusedAtTheFirstWriteFallsBackToo) {
  // Some file systems open with O_DIRECT and refuse the write (EINVAL,
  // nothing written): the piece is written again, buffered.
  const std::string big = Pattern(128 << 10, 9);
  env_.FailNext(FileOp::kWrite, EINVAL);
  ASSERT_OK(Write(11, 0, big, true));
  EXPECT_FALSE(faulty_->direct_io());
  EXPECT_EQ(ReadFaulty(11, 0, big.size()), big);
}

TEST_F(ChunkStoreFaultTest, ATruncationIsDurableWhenItReturns) {
  // The volume commits the smaller size (durable) once Truncate returns: a
  // power loss must not bring back bytes past the cut, which a later
  // extension of the file would uncover as its contents.
  const std::string data = Pattern(3 << 20, 10);  // chunks 0, 1 and 2
  ASSERT_OK(Write(12, 0, data, /*sync=*/true));
  ASSERT_OK(faulty_->Truncate(12, 1000, data.size()));  // cuts chunk 0, removes 1 and 2
  ASSERT_OK(env_.DropUnsyncedData());
  EXPECT_EQ(ChunkFileSize12(0), 1000);
  EXPECT_EQ(ChunkFileSize12(1), -1);
  EXPECT_EQ(ChunkFileSize12(2), -1);
  // Zeros up to where a later write would extend the file.
  EXPECT_EQ(ReadFaulty(12, 1000, 3 << 20).find_first_not_of('\0'), std::string::npos);
}
}  // namespace
}  // namespace grantfs
