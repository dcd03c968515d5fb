// The metadata store's engine (server/meta_store.h), through Metadata: a new
// volume (root, capacity, identity), what survives a reopen, and faults of
// RocksDB's disk under the write-ahead log, and the group commit of its syncs.
#include "server/meta_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/errno_status.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "server/metadata.h"
#include "server/metadata_test_util.h"
#include "server/permissions.h"

namespace grantfs {
namespace {

// --- a new volume ---------------------------------------------------------------

TEST_F(MetaStoreTest, RootExistsAfterOpen) {
  ASSERT_OK_AND_ASSIGN(proto::Attr root, store_->inodes().GetAttr(kRootIno));
  EXPECT_EQ(root.ino(), kRootIno);
  EXPECT_EQ(root.mode(), S_IFDIR | 0755u);
  EXPECT_EQ(root.nlink(), 2u);
  EXPECT_EQ(root.uid(), 0u);
  EXPECT_EQ(root.gid(), 0u);
  EXPECT_EQ(root.mtime_ns(), start_ns_);
  EXPECT_EQ(root.ctime_ns(), start_ns_);
  EXPECT_EQ(InoOf(kRootIno, "."), kRootIno);
  EXPECT_EQ(InoOf(kRootIno, ".."), kRootIno);
  SpaceInfo space = store_->store().Space();
  EXPECT_EQ(space.capacity_bytes, kCapacity);
  EXPECT_EQ(space.used_bytes, 0u);
  EXPECT_EQ(space.reserved_bytes, 0u);
  EXPECT_EQ(space.inodes, 1u);
  EXPECT_EQ(space.next_ino, kRootIno + 1);
  EXPECT_EQ(space.pending_deletes, 0u);
  EXPECT_EQ(ListAll(kRootIno), (std::map<std::string, uint64_t>{{".", 1}, {"..", 2}}));
}

TEST(MetaStoreOpenTest, RejectsBadOptions) {
  MetaStoreOptions o;
  EXPECT_FALSE(MetaStore::Open(o).ok());  // no dir
  o.dir = "/tmp/grantfs-meta-never-created";
  o.capacity_bytes = 100;  // less than one block
  EXPECT_FALSE(MetaStore::Open(o).ok());
  o.capacity_bytes = 1 << 20;
  o.chunk_size = 4096;  // not a multiple of 32 KiB
  EXPECT_FALSE(MetaStore::Open(o).ok());
  struct stat st;
  EXPECT_NE(stat(o.dir.c_str(), &st), 0);
}

TEST_F(MetaStoreTest, TheCapacityIsRecordedAndChangedOnlyWhenAskedTo) {
  EXPECT_EQ(store_->store().Space().capacity_bytes, kCapacity);
  // Reopened with no capacity (a full disk would have derived 0): kept.
  capacity_ = 0;
  Reopen();
  EXPECT_EQ(store_->store().Space().capacity_bytes, kCapacity);
  // An explicit one changes it, and is kept from then on.
  capacity_ = 2 * kCapacity;
  Reopen();
  EXPECT_EQ(store_->store().Space().capacity_bytes, 2 * kCapacity);
  capacity_ = 0;
  Reopen();
  EXPECT_EQ(store_->store().Space().capacity_bytes, 2 * kCapacity);
  // Not below what is used.
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK(Write(f.ino(), 0, 8 * kBlockSize).status());
  capacity_ = 4 * kBlockSize;
  store_.reset();
  auto refused = MetaStore::Open(Options());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  capacity_ = 0;
  Reopen();
  EXPECT_EQ(store_->store().Space().capacity_bytes, 2 * kCapacity);
}

TEST_F(MetaStoreTest, TheVolumeHasAnIdentityWhoseDataEpochGrowsAtEachOpen) {
  const proto::VolumeIdentity first = store_->store().identity();
  EXPECT_EQ(first.volume_id().size(), 32u);
  EXPECT_EQ(first.volume_id().find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_GE(first.created_ns(), start_ns_);
  EXPECT_EQ(first.data_epoch(), 1u);
  // What the store holds is what it says, read without opening it.
  store_.reset();
  ASSERT_OK_AND_ASSIGN(std::optional<proto::VolumeIdentity> read,
                       MetaStore::ReadIdentity(root_dir_ + "/meta"));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->SerializeAsString(), first.SerializeAsString());

  // Each open to serve raises it: by one, or to the witness epoch served.
  Reopen();
  EXPECT_EQ(store_->store().identity().volume_id(), first.volume_id());
  EXPECT_EQ(store_->store().identity().created_ns(), first.created_ns());
  EXPECT_EQ(store_->store().identity().data_epoch(), 2u);
  store_.reset();
  MetaStoreOptions o = Options();
  o.epoch = 7;
  ASSERT_OK_AND_ASSIGN(store_, Metadata::Open(o));
  EXPECT_EQ(store_->store().identity().data_epoch(), 7u);
  store_.reset();
  o.epoch = 3;  // a witness that forgot its epochs: never lowered
  ASSERT_OK_AND_ASSIGN(store_, Metadata::Open(o));
  EXPECT_EQ(store_->store().identity().data_epoch(), 8u);
  store_.reset();
  ASSERT_OK_AND_ASSIGN(read, MetaStore::ReadIdentity(root_dir_ + "/meta"));
  EXPECT_EQ(read->data_epoch(), 8u);

  // Another store is another volume.
  o.dir = root_dir_ + "/other";
  o.epoch = 5;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MetaStore> other, MetaStore::Open(o));
  EXPECT_NE(other->identity().volume_id(), first.volume_id());
  EXPECT_EQ(other->identity().data_epoch(), 5u);
  Reopen();
}

TEST(MetaStoreReadIdentityTest, NoStoreIsAnError) {
  EXPECT_FALSE(MetaStore::ReadIdentity("/tmp/grantfs-meta-never-created").ok());
  struct stat st;
  EXPECT_NE(stat("/tmp/grantfs-meta-never-created", &st), 0);
}

// --- durability -------------------------------------------------------------------------

TEST_F(MetaStoreTest, EverythingSurvivesAReopen) {
  ASSERT_OK_AND_ASSIGN(proto::Attr d, Mkdir(kRootIno, "d", 0750));
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(d.ino(), "f", 0640));
  ASSERT_OK(Write(f.ino(), 0, 3 * kBlockSize + 5));
  ASSERT_OK(store_->inodes().SetXattr(kRoot, f.ino(), "user.k", "value", 0));
  ASSERT_OK(store_->names().Link(kRoot, f.ino(), kRootIno, "hard"));
  ASSERT_OK_AND_ASSIGN(proto::Attr l, store_->names().Symlink(kRoot, kRootIno, "l", "d/f"));
  ASSERT_OK_AND_ASSIGN(proto::Attr o, Create(kRootIno, "orphan"));
  ASSERT_OK(store_->names().Remove(kRoot, kRootIno, "orphan", false));
  ASSERT_OK_AND_ASSIGN(proto::Attr gone, Create(kRootIno, "gone"));
  ASSERT_OK(Write(gone.ino(), 0, kBlockSize));
  ASSERT_OK(store_->names().Remove(kRoot, kRootIno, "gone", false));
  ASSERT_OK(store_->orphans().Reap(gone.ino()));
  const auto root_listing = ListAll(kRootIno);
  const SpaceInfo before = store_->store().Space();
  ASSERT_OK_AND_ASSIGN(proto::Attr f_before, store_->inodes().GetAttr(f.ino()));

  Reopen();

  EXPECT_EQ(InoOf(kRootIno, "d"), d.ino());
  EXPECT_EQ(InoOf(d.ino(), "f"), f.ino());
  EXPECT_EQ(InoOf(kRootIno, "hard"), f.ino());
  ASSERT_OK_AND_ASSIGN(proto::Attr f_after, store_->inodes().GetAttr(f.ino()));
  EXPECT_EQ(f_after.SerializeAsString(), f_before.SerializeAsString());
  EXPECT_EQ(f_after.size(), 3 * kBlockSize + 5);
  EXPECT_EQ(f_after.nlink(), 2u);
  EXPECT_EQ(f_after.mode(), S_IFREG | 0640u);
  EXPECT_EQ(Nlink(kRootIno), 3);
  ASSERT_OK_AND_ASSIGN(std::string v, store_->inodes().GetXattr(kRoot, f.ino(), "user.k"));
  EXPECT_EQ(v, "value");
  ASSERT_OK_AND_ASSIGN(std::string target, store_->names().ReadLink(l.ino()));
  EXPECT_EQ(target, "d/f");
  EXPECT_EQ(Orphans(), std::vector<uint64_t>{o.ino()});
  EXPECT_EQ(Garbage(), std::vector<uint64_t>{gone.ino()});
  EXPECT_EQ(ListAll(kRootIno), root_listing);

  const SpaceInfo after = store_->store().Space();
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_EQ(after.used_bytes, 5 * kBlockSize);
  EXPECT_EQ(after.inodes, before.inodes);
  EXPECT_EQ(after.next_ino, before.next_ino);
  EXPECT_EQ(after.pending_deletes, 1u);
  // Allocation maps survive: rewriting the same blocks needs nothing.
  ASSERT_OK_AND_ASSIGN(Reservation reserved, store_->space().Reserve(f.ino(), 0, 4 * kBlockSize));
  EXPECT_EQ(reserved.blocks, 0u);
  // Inode numbers and cookies are never reused.
  ASSERT_OK_AND_ASSIGN(proto::Attr n, Create(kRootIno, "new"));
  EXPECT_EQ(n.ino(), before.next_ino);
  auto listing = ListAll(kRootIno);
  for (const auto& [name, cookie] : root_listing) EXPECT_LT(cookie, listing["new"]) << name;
}

// --- faults of RocksDB's disk ---------------------------------------------------------

// RocksDB's file system, with the write-ahead log's appends or syncs failing
// (IOError, or NoSpace for appends) while told to, or its syncs slowed down
// (a slow disk, so that concurrent changes surely queue behind a sync).
class WalFaultFs : public rocksdb::FileSystemWrapper {
 public:
  explicit WalFaultFs(const std::shared_ptr<rocksdb::FileSystem>& base)
      : rocksdb::FileSystemWrapper(base) {}
  static const char* kClassName() { return "WalFaultFs"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* file,
                                    rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewWritableFile(name, options, file, dbg);
    if (s.ok() && absl::EndsWith(name, ".log")) file->reset(new WalFile(std::move(*file), this));
    return s;
  }

  std::atomic<bool> fail_append{false};
  std::atomic<bool> append_no_space{false};  // NoSpace rather than IOError
  std::atomic<bool> fail_sync{false};
  std::atomic<int> failed{0};
  std::atomic<int> sync_delay_ms{0};  // each sync of the WAL first sleeps this long

 private:
  class WalFile : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    WalFile(std::unique_ptr<rocksdb::FSWritableFile> base, WalFaultFs* fs)
        : rocksdb::FSWritableFileOwnerWrapper(std::move(base)), fs_(fs) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* dbg) override {
      if (fs_->fail_append) return Failed(fs_->append_no_space);
      return target()->Append(data, o, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      if (fs_->fail_append) return Failed(fs_->append_no_space);
      return target()->Append(data, o, info, dbg);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (fs_->fail_sync) return Failed(false);
      Delay();
      return target()->Sync(o, dbg);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (fs_->fail_sync) return Failed(false);
      Delay();
      return target()->Fsync(o, dbg);
    }

   private:
    void Delay() {
      if (const int ms = fs_->sync_delay_ms; ms > 0) absl::SleepFor(absl::Milliseconds(ms));
    }
    rocksdb::IOStatus Failed(bool no_space) {
      ++fs_->failed;
      if (!no_space) return rocksdb::IOStatus::IOError("injected");
      // As RocksDB's PosixWritableFile reports ENOSPC: retryable.
      rocksdb::IOStatus s = rocksdb::IOStatus::NoSpace("injected");
      s.SetRetryable(true);
      return s;
    }
    WalFaultFs* const fs_;
  };
};

class MetaStoreFaultTest : public MetaStoreTest {
 protected:
  void SetUp() override {
    fs_ = std::make_shared<WalFaultFs>(rocksdb::FileSystem::Default());
    env_ = rocksdb::NewCompositeEnv(fs_);
    MetaStoreTest::SetUp();
    ReopenFaulty();
  }

  // Closes the store and opens it again on the faulty file system (a
  // restart of the server).
  void ReopenFaulty() {
    store_.reset();
    MetaStoreOptions o = Options();
    o.rocksdb_env = env_.get();
    ASSERT_OK_AND_ASSIGN(store_, Metadata::Open(o));
  }

  std::shared_ptr<WalFaultFs> fs_;
  std::unique_ptr<rocksdb::Env> env_;
};

TEST_F(MetaStoreFaultTest, AFailedWalSyncIsEioThenChangesAreRefusedUntilAReopen) {
  ASSERT_OK(Create(kRootIno, "a"));
  fs_->fail_sync = true;
  EXPECT_EQ(Err(Create(kRootIno, "b")), EIO);
  EXPECT_EQ(fs_->failed, 1);
  fs_->fail_sync = false;
  // RocksDB (7.8) took the failed sync as a background error: the store
  // refuses every change from now on, with EIO, and does not abort.
  EXPECT_EQ(Err(Create(kRootIno, "c")), EIO);
  EXPECT_EQ(Err(Mkdir(kRootIno, "d")), EIO);
  EXPECT_EQ(fs_->failed, 1);  // refused without touching the WAL
  // Reads go on. The change whose sync failed was applied (memtable and
  // WAL) though its caller got EIO: others see it, and it is still there
  // after a reopen (the WAL's bytes were in the page cache). Its request
  // record rides in the same batch, so a resend is answered as applied.
  EXPECT_OK(store_->names().Lookup(kRoot, kRootIno, "a"));
  EXPECT_OK(store_->names().Lookup(kRoot, kRootIno, "b"));
  ReopenFaulty();
  EXPECT_OK(store_->names().Lookup(kRoot, kRootIno, "a"));
  EXPECT_OK(store_->names().Lookup(kRoot, kRootIno, "b"));
  EXPECT_EQ(Err(store_->names().Lookup(kRoot, kRootIno, "c")), ENOENT);
  ASSERT_OK(Create(kRootIno, "e"));  // a restart recovers
  EXPECT_TRUE(store_->store().Space().ledger_ok);
}

TEST_F(MetaStoreFaultTest, AFailedWalAppendIsEioAndTheChangeIsNotApplied) {
  ASSERT_OK(Create(kRootIno, "a"));
  fs_->fail_append = true;
  EXPECT_EQ(Err(Create(kRootIno, "b")), EIO);
  fs_->fail_append = false;
  EXPECT_EQ(Err(store_->names().Lookup(kRoot, kRootIno, "b")), ENOENT);
  EXPECT_EQ(Err(Create(kRootIno, "c")), EIO);  // refused, as after a failed sync
  ReopenFaulty();
  EXPECT_OK(store_->names().Lookup(kRoot, kRootIno, "a"));
  EXPECT_EQ(Err(store_->names().Lookup(kRoot, kRootIno, "b")), ENOENT);
  ASSERT_OK(Create(kRootIno, "c"));
}

TEST_F(MetaStoreFaultTest, AFullDiskUnderTheWalIsEnospcUnlessRoomIsMade) {
  ASSERT_OK(Create(kRootIno, "a"));
  fs_->fail_append = true;
  fs_->append_no_space = true;
  EXPECT_EQ(Err(Create(kRootIno, "b")), ENOSPC);
  // With make_room (the volume lends the metadata reserve of its space
  // hold), the store resumes RocksDB and writes again.
  store_.reset();
  fs_->fail_append = false;
  MetaStoreOptions o = Options();
  o.rocksdb_env = env_.get();
  int asked = 0;
  o.make_room = [&] {
    ++asked;
    fs_->fail_append = false;  // the lent room
    return true;
  };
  ASSERT_OK_AND_ASSIGN(store_, Metadata::Open(o));
  fs_->fail_append = true;
  ASSERT_OK(Create(kRootIno, "b"));  // the first try after the room was made
  EXPECT_EQ(asked, 1);
  ASSERT_OK(Create(kRootIno, "c"));
  EXPECT_OK(store_->names().Lookup(kRoot, kRootIno, "b"));
}

// --- group commit ------------------------------------------------------------------

TEST_F(MetaStoreFaultTest, ConcurrentChangesShareWalSyncsAndAllAreDurable) {
  // Each WAL sync takes 5 ms: meanwhile the other threads apply their
  // changes and queue behind it, so the next sync covers all of them.
  fs_->sync_delay_ms = 5;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 25;
  const CommitStats before = store_->store().Commits();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t, &failures] {
      for (int i = 0; i < kPerThread; ++i) {
        if (!Create(kRootIno, absl::StrFormat("t%d-%d", t, i)).ok()) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures, 0);
  const CommitStats after = store_->store().Commits();
  const uint64_t changes = after.changes - before.changes;
  const uint64_t syncs = after.wal_syncs - before.wal_syncs;
  EXPECT_EQ(changes, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_GE(syncs, 1u);
  EXPECT_LE(syncs, changes / 2) << changes << " changes needed " << syncs << " WAL syncs";

  // Every change acknowledged is there after a restart.
  fs_->sync_delay_ms = 0;
  ReopenFaulty();
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      EXPECT_NE(InoOf(kRootIno, absl::StrFormat("t%d-%d", t, i)), 0u) << t << " " << i;
    }
  }
  EXPECT_EQ(store_->store().Space().inodes, 1u + kThreads * kPerThread);
}

TEST_F(MetaStoreTest, OneChangeAtATimeIsOneWalSyncEach) {
  // Without concurrency nothing is shared: the counters count each change
  // and its own sync.
  const CommitStats before = store_->store().Commits();
  for (int i = 0; i < 5; ++i) ASSERT_OK(Create(kRootIno, absl::StrFormat("f%d", i)));
  const CommitStats after = store_->store().Commits();
  EXPECT_EQ(after.changes - before.changes, 5u);
  EXPECT_EQ(after.wal_syncs - before.wal_syncs, 5u);
}

}  // namespace
}  // namespace grantfs
