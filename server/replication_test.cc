// Replication's stream: a snapshot then live changes, synchronous writes, resume and catch-up.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "checkpoint/replica.h"
#include "checkpoint/replicator.h"
#include "checkpoint/witness.h"
#include "common/clock.h"
#include "common/keepalive.h"
#include "common/status_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/chunk_store.h"
#include "server/data_dir.h"
#include "server/keys.h"
#include "server/meta_store.h"
#include "server/replication_test_util.h"
#include "server/volume.h"

namespace grantfs {
namespace {

// --- 1. snapshot, then live changes ---------------------------------------------------

TEST_F(ReplicationTest, EmptyReplicaGetsSnapshotThenLiveChanges) {
  ASSERT_NO_FATAL_FAILURE(StartPrimary());
  // A volume that already holds files: spanning chunks, with holes, xattrs,
  // directories, links.
  ASSERT_OK_AND_ASSIGN(proto::Attr dir, Make("dir", S_IFDIR | 0755));
  ASSERT_OK_AND_ASSIGN(proto::Attr sub, Make("sub", S_IFDIR | 0700, dir.ino()));
  ASSERT_OK_AND_ASSIGN(proto::Attr big, Make("big", S_IFREG | 0644, dir.ino()));
  ASSERT_OK(volume_->Write(ctx_, big.ino(), 0, Pattern(5 * kMiB + 123, 1), false));
  ASSERT_OK_AND_ASSIGN(proto::Attr sparse, Make("sparse", S_IFREG | 0600, sub.ino()));
  ASSERT_OK(volume_->Write(ctx_, sparse.ino(), 9 * kMiB, Pattern(4000, 2), true));
  ASSERT_OK_AND_ASSIGN(proto::Attr small, Make("small", S_IFREG | 0644));
  ASSERT_OK(volume_->Write(ctx_, small.ino(), 0, "hello", false));
  ASSERT_OK(volume_->SetXattr(ctx_, small.ino(), "user.color", "blue", 0));
  ASSERT_OK(volume_->SetXattr(ctx_, dir.ino(), "user.k", std::string(300, 'v'), 0));
  ASSERT_OK(volume_->Symlink(ctx_, kRootIno, "link", "dir/big"));
  ASSERT_OK(volume_->Link(ctx_, small.ino(), sub.ino(), "hard"));
  ASSERT_OK_AND_ASSIGN(proto::Attr gone, Make("gone", S_IFREG | 0644));
  ASSERT_OK(volume_->Write(ctx_, gone.ino(), 0, Pattern(100000, 3), false));
  ASSERT_OK(Truncate(big.ino(), 4 * kMiB + 77));
  ASSERT_OK(volume_->Fsync(ctx_, big.ino()));
  const uint64_t head_before = replicator_->Head();
  ASSERT_GT(head_before, 10u);
  proto::StatusReply before;
  replicator_->FillStatus(&before);
  EXPECT_FALSE(before.has_resync_elapsed_ms()) << "no resync yet";

  ASSERT_NO_FATAL_FAILURE(StartReplica());
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  EXPECT_EQ(replica_->epoch(), epoch_);
  EXPECT_GE(replica_->applied_seq(), head_before);
  // Status tells of the resync: done, and every byte of the files read
  // (chunks of 5 MiB of data at least).
  proto::StatusReply after;
  replicator_->FillStatus(&after);
  ASSERT_TRUE(after.has_resync_elapsed_ms());
  EXPECT_FALSE(after.resync_active());
  EXPECT_GE(after.resync_total_bytes(), 5 * kMiB);
  EXPECT_GE(after.resync_done_bytes(), after.resync_total_bytes());
  EXPECT_GE(after.resync_elapsed_ms(), 0);

  // Live changes, now replicated synchronously.
  ASSERT_OK(volume_->Write(ctx_, big.ino(), 3 * kMiB, Pattern(2 * kMiB, 4), false));
  ASSERT_OK(volume_->Write(ctx_, small.ino(), 2, "LLO world", true));
  ASSERT_OK(volume_->RemoveXattr(ctx_, small.ino(), "user.color"));
  ASSERT_OK(volume_->SetXattr(ctx_, small.ino(), "user.shape", "round", 0));
  proto::RenameRequest rn;
  rn.set_parent(kRootIno);
  rn.set_name("small");
  rn.set_new_parent(dir.ino());
  rn.set_new_name("moved");
  ASSERT_OK(volume_->Rename(ctx_, rn));
  ASSERT_OK(volume_->Remove(ctx_, kRootIno, "gone", false));
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());  // RemoveChunk records
  EXPECT_EQ(freed, 1);
  ASSERT_OK(volume_->Fallocate(ctx_, sparse.ino(), 0, 0, 3 * kMiB));
  ASSERT_OK(Truncate(sparse.ino(), 9 * kMiB + 100));
  ASSERT_OK_AND_ASSIGN(proto::Attr fifo, Make("fifo", S_IFIFO | 0644, sub.ino()));
  (void)fifo;
  ASSERT_NO_FATAL_FAILURE(WaitInSync());

  const Tree want = PrimaryTree();
  ASSERT_EQ(want.size(), 9u);  // root, dir, sub, big, sparse, moved, hard, link, fifo
  EXPECT_TRUE(SameTree(want, ReplicaTree()));
  // The chunk files of the removed file are gone on the replica too.
  EXPECT_FALSE(std::filesystem::exists(absl::StrCat(replica_dir_, "/chunks/",
                                                    absl::Hex(gone.ino() % 256, absl::kZeroPad2),
                                                    "/", gone.ino(), ".0")));
}

// --- 2. synchronous replication -------------------------------------------------------

TEST_F(ReplicationTest, OnceInSyncAWriteIsOnTheReplicaWhenItReturns) {
  ASSERT_NO_FATAL_FAILURE(StartPrimary());
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Make("f", S_IFREG | 0644));
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  for (int i = 0; i < 50; ++i) {
    ASSERT_OK(volume_->Write(ctx_, f.ino(), i * 1000, Pattern(3000, i), false));
    const uint64_t head = replicator_->Head();
    ASSERT_GE(replica_->applied_seq(), head) << "write " << i;
    if (i % 10 == 0) {
      ASSERT_OK(Truncate(f.ino(), i * 500));
      ASSERT_GE(replica_->applied_seq(), replicator_->Head()) << "truncate " << i;
      ASSERT_OK(volume_->SetXattr(ctx_, f.ino(), absl::StrCat("user.", i), "x", 0));
      ASSERT_GE(replica_->applied_seq(), replicator_->Head()) << "setxattr " << i;
    }
  }
  EXPECT_EQ(replicator_->ReplicaState(), "in sync");
}

// --- 3. resume ---------------------------------------------------------------------------

TEST_F(ReplicationTest, RestartedReplicaResumesFromTheLog) {
  ASSERT_NO_FATAL_FAILURE(StartPrimary());
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Make("f", S_IFREG | 0644));
  ASSERT_OK(volume_->Write(ctx_, f.ino(), 0, Pattern(200000, 1), false));
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  { std::ofstream(Sentinel()) << "x"; }
  ASSERT_TRUE(std::filesystem::exists(Sentinel()));

  StopReplica();
  // Changes the replica misses while it is down (the primary degrades).
  ASSERT_OK(volume_->Write(ctx_, f.ino(), 50000, Pattern(70000, 2), false));
  ASSERT_OK_AND_ASSIGN(proto::Attr g, Make("g", S_IFREG | 0644));
  ASSERT_OK(volume_->Write(ctx_, g.ino(), 0, "while down", false));
  EXPECT_EQ(replicator_->ReplicaState(), "degraded");
  EXPECT_FALSE(WitnessState().replica_in_sync());

  ASSERT_NO_FATAL_FAILURE(StartReplica());
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  EXPECT_TRUE(std::filesystem::exists(Sentinel())) << "the replica got a snapshot, not the log";
  ASSERT_OK(volume_->Write(ctx_, g.ino(), 5, " and after", false));
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  const Tree want = PrimaryTree();
  EXPECT_TRUE(SameTree(want, ReplicaTree()));
}

// A replica back from further behind than the kept log gets a snapshot.
TEST_F(ReplicationTest, ReplicaBehindTheKeptLogGetsASnapshot) {
  ASSERT_NO_FATAL_FAILURE(
      StartPrimary(true, [](ReplicatorOptions* o) { o->retain_bytes = 64 << 10; }));
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Make("f", S_IFREG | 0644));
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  { std::ofstream(Sentinel()) << "x"; }

  StopReplica();
  ASSERT_TRUE(WaitFor([this] { return replicator_->ReplicaState() == "degraded"; }));
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK(volume_->Write(ctx_, f.ino(), i * 100000, Pattern(100000, i), false));
  }
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  // Writes go on while the replica takes the snapshot and catches up.
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK(volume_->Write(ctx_, f.ino(), i * 50000, Pattern(100000, 100 + i), false));
  }
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  EXPECT_FALSE(std::filesystem::exists(Sentinel())) << "expected a snapshot";
  const Tree want = PrimaryTree();
  EXPECT_TRUE(SameTree(want, ReplicaTree()));
}

// A log that keeps nothing beyond what the replica acknowledged
// (retain_bytes smaller than one record): a replica that needs records the
// log dropped gets a new snapshot, and is in sync once the writes pause.
TEST_F(ReplicationTest, ReplicaCatchesUpWhenTheLogKeepsNothing) {
  ASSERT_NO_FATAL_FAILURE(StartPrimary(true, [](ReplicatorOptions* o) { o->retain_bytes = 1; }));
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Make("f", S_IFREG | 0644));
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      absl::Status s =
          volume_->Write(ctx_, f.ino(), (i % 50) * 4096, Pattern(8192, i), false).status();
      if (!s.ok()) ADD_FAILURE() << s;
    }
  });
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  // Writes go on while the replica takes its first snapshot.
  EXPECT_TRUE(WaitFor([this] { return replicator_->ReplicaState() == "syncing"; }));
  absl::SleepFor(absl::Milliseconds(50));
  stop = true;
  writer.join();
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  const Tree want = PrimaryTree();
  EXPECT_TRUE(SameTree(want, ReplicaTree()));
}

// --- 7. snapshot under load ---------------------------------------------------------------

TEST_F(ReplicationTest, SnapshotUnderConcurrentWritesIsExact) {
  ASSERT_NO_FATAL_FAILURE(StartPrimary());
  constexpr int kFiles = 3;
  constexpr uint64_t kSpan = 10 * kMiB;  // three chunks per file
  std::vector<uint64_t> inos;
  for (int i = 0; i < kFiles; ++i) {
    ASSERT_OK_AND_ASSIGN(proto::Attr a, Make(absl::StrCat("f", i), S_IFREG | 0644));
    for (uint64_t off = 0; off < kSpan; off += 4 * kMiB) {
      ASSERT_OK(
          volume_->Write(ctx_, a.ino(), off, Pattern(std::min(4 * kMiB, kSpan - off), i), false));
    }
    inos.push_back(a.ino());
  }
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0}, ops{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t) {
    writers.emplace_back([&, t] {
      std::mt19937 rng(t);
      while (!stop.load()) {
        const uint64_t ino = inos[rng() % inos.size()];
        absl::Status s;
        if (rng() % 8 == 0) {
          s = Truncate(ino, rng() % kSpan).status();
        } else {
          const uint64_t len = 1 + rng() % (256 << 10);
          s = volume_->Write(ctx_, ino, rng() % kSpan, Pattern(len, rng()), false).status();
        }
        if (!s.ok()) {
          ADD_FAILURE() << s;
          errors.fetch_add(1);
        }
        ops.fetch_add(1);
      }
    });
  }
  ASSERT_TRUE(WaitFor([&] { return ops.load() > 20; }));
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  // The snapshot is taken and the replica catches up while the writers go on.
  const bool synced =
      WaitFor([this] { return replicator_->ReplicaState() == "in sync"; }, absl::Seconds(20));
  const int ops_at_sync = ops.load();
  EXPECT_TRUE(WaitFor([&] { return ops.load() > ops_at_sync + 50; }));
  stop = true;
  for (std::thread& w : writers) w.join();
  ASSERT_TRUE(synced) << replicator_->ReplicaState();
  EXPECT_EQ(errors.load(), 0);
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  const Tree want = PrimaryTree();
  EXPECT_TRUE(SameTree(want, ReplicaTree()));
}

// --- 8. group commit ----------------------------------------------------------------------

TEST_F(ReplicationTest, ConcurrentChangesShareReplicaRoundTrips) {
  ASSERT_NO_FATAL_FAILURE(StartPrimary());
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  constexpr int kThreads = 8;
  constexpr int kPerThread = 25;
  const ReplicatorStats before = replicator_->Stats();
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        absl::Status s = Make(absl::StrCat("t", t, "-", i), S_IFDIR | 0755).status();
        if (!s.ok()) {
          ADD_FAILURE() << s;
          errors.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  // Every change returned after the replica acknowledged it: the counters
  // are final.
  const ReplicatorStats after = replicator_->Stats();
  const uint64_t records = after.records - before.records;
  const uint64_t messages = after.messages - before.messages;
  const uint64_t trips = after.round_trips - before.round_trips;
  EXPECT_GE(records, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_LE(messages, records);
  EXPECT_LE(trips, messages);
  // The stream holds small records while two messages are unacknowledged
  // (ReplicatorOptions::group_window): with 8 writers a round trip carries
  // about 3 changes (without the hold, about 1.3).
  EXPECT_LE(trips, records / 2) << records << " records, " << messages << " messages, " << trips
                                << " round trips";
  EXPECT_EQ(replicator_->AckedSeq(), replicator_->Head());
  const Tree want = PrimaryTree();
  EXPECT_TRUE(SameTree(want, ReplicaTree()));
}

// --- 9. space: the replica's data disk holds what the primary promised ---------------------

// Bytes allocated to a file (its blocks).
uint64_t AllocatedBytes(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

TEST_F(ReplicationTest, AGrantIsAnsweredOnceTheReplicasDiskHoldsIt) {
  ASSERT_NO_FATAL_FAILURE(StartPrimary());
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  ASSERT_OK_AND_ASSIGN(ctx_.client_id, volume_->OpenSession("grant-test"));
  const std::string hold = replica_dir_ + "/space.hold";
  constexpr uint64_t kReserve = 64 * kMiB;  // VolumeOptions::metadata_reserve_bytes
  EXPECT_TRUE(WaitFor([&] { return AllocatedBytes(hold) >= kReserve; })) << AllocatedBytes(hold);
  uint64_t added = 0;
  ASSERT_OK_AND_ASSIGN(uint64_t granted, volume_->Grant(ctx_, 8 * kMiB, 0, &added));
  EXPECT_EQ(granted, 8 * kMiB);
  EXPECT_EQ(added, 8 * kMiB);
  // No wait: the grant was answered after the replica's hold grew.
  EXPECT_GE(AllocatedBytes(hold), kReserve + 8 * kMiB);
  EXPECT_EQ(replicator_->ReplicaState(), "in sync");
}

// The replica's space hold can grow to `*limit` bytes (its "disk").
std::function<void(ReplicaOptions*)> HoldLimit(std::atomic<uint64_t>* limit) {
  return [limit](ReplicaOptions* o) {
    o->hold_allocate = [limit](int fd, uint64_t offset, uint64_t length) {
      if (offset + length > limit->load()) return ENOSPC;
      return fallocate(fd, 0, offset, length) == 0 ? 0 : errno;
    };
  };
}

TEST_F(ReplicationTest, AGrantTheReplicasDiskCannotHoldIsTakenBack) {
  // The replica's "disk" holds 72 MiB for the hold: the metadata reserve
  // (64 MiB) fits, a grant of 16 MiB more does not.
  std::atomic<uint64_t> limit{72 * kMiB};
  ASSERT_NO_FATAL_FAILURE(StartPrimary());
  ASSERT_NO_FATAL_FAILURE(StartReplica(kLease, HoldLimit(&limit)));
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  ASSERT_OK_AND_ASSIGN(ctx_.client_id, volume_->OpenSession("grant-test"));
  uint64_t added = 0;
  ASSERT_OK_AND_ASSIGN(uint64_t granted, volume_->Grant(ctx_, 16 * kMiB, 0, &added));
  EXPECT_EQ(added, 0u);
  EXPECT_EQ(granted, 0u);
  EXPECT_EQ(volume_->meta().space().GrantOf(ctx_.client_id), 0u);
  // The replica stays in sync: it holds what it can and says so.
  EXPECT_EQ(replicator_->ReplicaState(), "in sync");
  // Space returns on the replica's disk: the next grant is given.
  limit = ~0ull;
  ASSERT_OK_AND_ASSIGN(granted, volume_->Grant(ctx_, 16 * kMiB, 0, &added));
  EXPECT_EQ(added, 16 * kMiB);
  EXPECT_EQ(granted, 16 * kMiB);
  EXPECT_GE(AllocatedBytes(replica_dir_ + "/space.hold"), 80 * kMiB);
}

TEST_F(ReplicationTest, AReplicaWhoseDiskCannotHoldThePromisesIsNotInSync) {
  // 32 MiB for the hold: not even the metadata reserve (64 MiB) fits.
  std::atomic<uint64_t> limit{32 * kMiB};
  ASSERT_NO_FATAL_FAILURE(StartPrimary());
  ASSERT_NO_FATAL_FAILURE(StartReplica(kLease, HoldLimit(&limit)));
  // It has every change, but it could not store what grants let mounts
  // write: writers must not count on it, nor may it take over.
  ASSERT_TRUE(WaitFor([this] {
    return replicator_->Head() > 0 && replicator_->AckedSeq() == replicator_->Head();
  }));
  EXPECT_EQ(replicator_->ReplicaState(), "syncing");
  EXPECT_FALSE(WitnessState().replica_in_sync());
  limit = ~0ull;  // space came back on its disk
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
}

}  // namespace
}  // namespace grantfs
