// Replication's failover: replica loss and the witness, fencing, promotion and switchover.
#include <grpcpp/grpcpp.h>
#include <grpcpp/test/server_context_test_spouse.h>
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
#include "server/service.h"
#include "server/volume.h"

namespace grantfs {
namespace {

// Leases and timeouts run on the monotonic clock (issue: a primary whose
// wall clock stepped back kept passing its lease check for the step's
// length). The lease is counted on ReplicatorOptions::clock only, which is
// CLOCK_MONOTONIC unless a test injects one: here a FakeClock, while the
// wall clock runs on and would say nothing lapsed.
TEST(ReplicatorLease, CountsOnItsMonotonicClockOnly) {
  EXPECT_EQ(ReplicatorOptions().clock, Clock::Monotonic());
  EXPECT_EQ(WitnessOptions().clock, Clock::Monotonic());
  EXPECT_EQ(VolumeOptions().lease_clock, Clock::Monotonic());
  FakeClock mono(absl::UnixEpoch() + absl::Hours(1));  // any origin: only differences count
  ReplicatorOptions o;
  o.peer = "127.0.0.1:1";
  o.clock = &mono;
  o.granted_at = mono.Now();
  o.lease = absl::Seconds(1);
  Replicator r(o);  // not started: the lease is only what the witness granted
  std::string why;
  EXPECT_TRUE(r.Serving(&why)) << why;
  mono.Advance(absl::Milliseconds(999));
  EXPECT_TRUE(r.Serving(&why)) << why;
  mono.Advance(absl::Milliseconds(1));
  EXPECT_FALSE(r.Serving(&why));
  EXPECT_THAT(why, HasSubstr("lease lapsed"));
}

// --- 4. replica loss ---------------------------------------------------------------------

TEST_F(ReplicationTest, LosingTheReplicaDegradesWithTheWitnessWord) {
  ASSERT_NO_FATAL_FAILURE(StartPrimary());
  ASSERT_NO_FATAL_FAILURE(StartReplica(absl::Seconds(60)));
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Make("f", S_IFREG | 0644));
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  ASSERT_TRUE(WitnessState().replica_in_sync());

  // The witness is out of reach while the replica goes: the write waits.
  primary_cut_ = true;
  KillReplicaServer();
  std::atomic<bool> done{false};
  absl::Status status;
  bool in_sync_at_return = true;
  std::thread writer([&] {
    status = volume_->Write(ctx_, f.ino(), 0, "after the loss", false).status();
    in_sync_at_return = WitnessState().replica_in_sync();
    done = true;
  });
  absl::SleepFor(3 * kLease);
  EXPECT_FALSE(done.load()) << "a write returned without the replica or the witness";
  EXPECT_EQ(replicator_->ReplicaState(), "degraded");
  // The witness answers again and agrees: the write returns, and only then.
  primary_cut_ = false;
  writer.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_FALSE(in_sync_at_return);
  EXPECT_EQ(replicator_->ReplicaState(), "degraded");
  ASSERT_OK(volume_->Write(ctx_, f.ino(), 0, "and more", false));
  std::string why;
  EXPECT_TRUE(WaitFor([&] { return replicator_->Serving(&why); })) << why;
  EXPECT_EQ(fenced_.load(), 0);
}

// While the witness cannot be reached, losing the replica makes writes wait,
// never succeed.
TEST_F(ReplicationTest, WithoutTheWitnessWritesWaitForTheLostReplica) {
  ASSERT_NO_FATAL_FAILURE(
      StartPrimary(true, [](ReplicatorOptions* o) { o->wait_bound = absl::Seconds(1); }));
  ASSERT_NO_FATAL_FAILURE(StartReplica(absl::Seconds(60)));
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Make("f", S_IFREG | 0644));
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  primary_cut_ = true;
  KillReplicaServer();
  absl::StatusOr<proto::Attr> w = volume_->Write(ctx_, f.ino(), 0, "x", false);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnavailable) << w.status();
  EXPECT_TRUE(WitnessState().replica_in_sync());
}

// --- 5. fencing --------------------------------------------------------------------------

TEST_F(ReplicationTest, PrimaryIsFencedWhenTheReplicaClaimedTheEpoch) {
  ASSERT_NO_FATAL_FAILURE(StartPrimary());
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Make("f", S_IFREG | 0644));
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  std::string why;
  ASSERT_TRUE(replicator_->Serving(&why)) << why;

  // The primary is cut off from the witness and from the replica.
  primary_cut_ = true;
  KillReplicaServer();
  // A write under way: the replica does not answer and the witness cannot
  // agree to go on without it, so it waits.
  std::atomic<bool> write_done{false};
  absl::Status write_status;
  std::thread writer([&] {
    write_status = volume_->Write(ctx_, f.ino(), 0, "lost?", false).status();
    write_done = true;
  });

  // The replica hears nothing, claims the epoch once the lease ran out.
  ASSERT_TRUE(WaitFor([this] { return !Promoted().empty(); })) << "the replica never took over";
  EXPECT_EQ(Promoted(), std::vector<uint64_t>{epoch_ + 1});
  {
    absl::MutexLock l(&mu_);
    EXPECT_FALSE(primary_serving_at_promotion_) << "two primaries serving at once";
  }
  EXPECT_EQ(WitnessState().epoch(), epoch_ + 1);
  EXPECT_EQ(WitnessState().primary(), replica_addr_);
  EXPECT_FALSE(replicator_->Serving(&why));
  EXPECT_FALSE(write_done.load()) << "a write returned OK on a primary cut off from all";

  // The primary reaches the witness again and learns it is fenced.
  primary_cut_ = false;
  ASSERT_TRUE(WaitFor([this] { return fenced_.load() > 0; }));
  EXPECT_EQ(fenced_.load(), 1);
  EXPECT_FALSE(replicator_->Serving(&why));
  EXPECT_THAT(why, HasSubstr("fenced"));
  writer.join();
  EXPECT_EQ(write_status.code(), absl::StatusCode::kUnavailable) << write_status;
  EXPECT_EQ(replicator_->WaitReplicated(replicator_->Head()).code(),
            absl::StatusCode::kUnavailable);
  absl::StatusOr<proto::Attr> w = volume_->Write(ctx_, f.ino(), 0, "after", false);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnavailable) << w.status();
}

// --- 6. promotion --------------------------------------------------------------------------

TEST_F(ReplicationTest, ReplicaTakesOverWhenThePrimaryStops) {
  ASSERT_NO_FATAL_FAILURE(StartPrimary());
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Make("f", S_IFREG | 0644));
  ASSERT_OK(volume_->Write(ctx_, f.ino(), 0, Pattern(10000, 1), false));
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  const Tree want = PrimaryTree();

  replicator_->Stop();
  ASSERT_TRUE(WaitFor([this] { return !Promoted().empty(); })) << "the replica never took over";
  EXPECT_EQ(Promoted(), std::vector<uint64_t>{epoch_ + 1});
  EXPECT_EQ(WitnessState().epoch(), epoch_ + 1);
  EXPECT_EQ(WitnessState().primary(), replica_addr_);
  EXPECT_EQ(fenced_.load(), 0);
  // The promoted copy opens as the volume the primary had.
  EXPECT_TRUE(SameTree(want, ReplicaTree()));
}

// Namespace grants: a mount's log, applied in one batch, is on the replica
// when ApplyLog returns, so a takeover right then loses none of it.
TEST_F(ReplicationTest, AnAppliedLogIsOnTheReplicaWhenTheCallReturns) {
  primary_meta_lease_ = absl::Seconds(3);
  ASSERT_NO_FATAL_FAILURE(StartPrimary());
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  ServiceOptions so;
  so.transport = Transport::Insecure("s");
  GrantFsService service(volume_.get(), so);
  uint64_t seq = 0;
  uint64_t client = 0;
  auto call = [&](auto method, auto* req, auto* reply) {
    grpc::ServerContext sctx;
    grpc::testing::ServerContextTestSpouse spouse(&sctx);
    spouse.AddClientMetadata("x-grantfs-secret", "s");
    req->mutable_header()->set_client_id(client);
    req->mutable_header()->set_seq(++seq);
    ASSERT_TRUE((service.*method)(&sctx, req, reply).ok());
    ASSERT_EQ(reply->err(), 0);
  };
  proto::OpenSessionRequest open;
  proto::OpenSessionReply opened;
  ASSERT_NO_FATAL_FAILURE(call(&GrantFsService::OpenSession, &open, &opened));
  client = opened.client_id();
  volume_->leases().StreamUp(client, true);  // its mount's recall stream
  proto::InodeRangeRequest range;
  range.set_count(16);
  proto::InodeRangeReply got;
  ASSERT_NO_FATAL_FAILURE(call(&GrantFsService::InodeRange, &range, &got));
  proto::MkNodRequest mkdir;
  mkdir.set_parent(1);
  mkdir.set_name("d");
  mkdir.set_mode(S_IFDIR | 0755);
  mkdir.set_exclusive(true);
  mkdir.set_want_grant(true);
  proto::AttrReply dir;
  ASSERT_NO_FATAL_FAILURE(call(&GrantFsService::MkNod, &mkdir, &dir));
  ASSERT_TRUE(dir.granted());
  proto::ApplyLogRequest log;
  for (int i = 0; i < 20; ++i) {
    proto::LogEntry* e = log.add_entries();
    e->set_seq(1000 + i);
    if (i < 16) {
      e->set_ino(got.first() + i);
      e->mutable_mknod()->set_parent(dir.attr().ino());
      e->mutable_mknod()->set_name(absl::StrCat("f", i));
      e->mutable_mknod()->set_mode(S_IFREG | 0644);
    } else {
      e->mutable_remove()->set_parent(dir.attr().ino());
      e->mutable_remove()->set_name(absl::StrCat("f", i - 16));
    }
  }
  proto::ApplyLogReply applied;
  ASSERT_NO_FATAL_FAILURE(call(&GrantFsService::ApplyLog, &log, &applied));
  ASSERT_EQ(applied.errs_size(), 20);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(applied.errs(i), 0) << i;
  const Tree want = PrimaryTree();
  EXPECT_EQ(want.count("/d/f15"), 1u);
  EXPECT_EQ(want.count("/d/f0"), 0u);

  replicator_->Stop();
  ASSERT_TRUE(WaitFor([this] { return !Promoted().empty(); })) << "the replica never took over";
  EXPECT_TRUE(SameTree(want, ReplicaTree()));
}

TEST_F(ReplicationTest, EmptyReplicaNeverClaims) {
  // A new cluster (epoch 0): the witness would grant a claim to anybody.
  ASSERT_EQ(WitnessState().epoch(), 0u);
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  absl::SleepFor(8 * kLease);  // many failover timeouts of silence
  EXPECT_TRUE(Promoted().empty());
  EXPECT_EQ(WitnessState().epoch(), 0u);
  EXPECT_EQ(replica_->epoch(), 0u);
}

// --- 8. switchover -------------------------------------------------------------------------

TEST_F(ReplicationTest, SwitchoverHandsTheEpochToTheReplica) {
  ASSERT_NO_FATAL_FAILURE(StartPrimary());
  // Only the handover may promote it: no claim within the test.
  ASSERT_NO_FATAL_FAILURE(StartReplica(absl::Seconds(60)));
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Make("f", S_IFREG | 0644));
  ASSERT_OK(volume_->Write(ctx_, f.ino(), 0, Pattern(30000, 5), false));
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  const Tree want = PrimaryTree();

  ASSERT_OK(replicator_->Switchover());
  EXPECT_EQ(WitnessState().epoch(), epoch_ + 1);
  EXPECT_EQ(WitnessState().primary(), replica_addr_);
  EXPECT_EQ(WitnessState().replica(), kPrimary);
  std::string why;
  EXPECT_FALSE(replicator_->Serving(&why));
  EXPECT_EQ(fenced_.load(), 1);
  ASSERT_TRUE(WaitFor([this] { return !Promoted().empty(); })) << "the replica never took over";
  EXPECT_EQ(Promoted(), std::vector<uint64_t>{epoch_ + 1});
  EXPECT_TRUE(SameTree(want, ReplicaTree()));
}

// The witness granted the handover but its answer was lost (the 500 ms
// deadline passed on a loaded machine): the switchover asks again, finds
// the epoch handed to the replica, and takes that as the grant.
TEST_F(ReplicationTest, SwitchoverWhoseGrantWasLostIsTakenOnTheRetry) {
  std::atomic<int> handovers{0};
  ASSERT_NO_FATAL_FAILURE(StartPrimary(true, [&](ReplicatorOptions* ro) {
    ro->witness_call = [call = ro->witness_call,
                        &handovers](WitnessRequest req) -> absl::StatusOr<WitnessReply> {
      if (req.op() != WitnessRequest::HANDOVER) return call(req);
      absl::StatusOr<WitnessReply> r = call(req);
      if (handovers.fetch_add(1) == 0) return absl::UnavailableError("the answer was lost");
      return r;
    };
  }));
  ASSERT_NO_FATAL_FAILURE(StartReplica(absl::Seconds(60)));
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  ASSERT_OK(replicator_->Switchover());
  EXPECT_EQ(handovers.load(), 2);
  EXPECT_EQ(WitnessState().epoch(), epoch_ + 1);
  EXPECT_EQ(WitnessState().primary(), replica_addr_);
  EXPECT_EQ(fenced_.load(), 1);
  ASSERT_TRUE(WaitFor([this] { return !Promoted().empty(); })) << "the replica never took over";
}

TEST_F(ReplicationTest, SwitchoverWithoutAnInSyncReplicaIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartPrimary());
  EXPECT_EQ(replicator_->Switchover().code(), absl::StatusCode::kFailedPrecondition);
  // (The lease may have lapsed while the volume opened: the first renewal
  // comes lease/5 after Start.)
  std::string why;
  EXPECT_TRUE(WaitFor([&] { return replicator_->Serving(&why); })) << why;
  EXPECT_EQ(WitnessState().epoch(), epoch_);
}
}  // namespace
}  // namespace grantfs
