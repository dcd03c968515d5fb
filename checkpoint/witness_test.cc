#include "checkpoint/witness.h"

#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/pki.h"
#include "common/status_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

using proto::WitnessReply;
using proto::WitnessRequest;
using ::testing::HasSubstr;

constexpr char kA[] = "a:7420";
constexpr char kB[] = "b:7420";
constexpr char kC[] = "c:7420";
constexpr char kVolume[] = "0123456789abcdef0123456789abcdef";
constexpr char kOtherVolume[] = "fedcba9876543210fedcba9876543210";

proto::VolumeIdentity Data(const std::string& volume_id = kVolume, uint64_t data_epoch = 1) {
  proto::VolumeIdentity d;
  d.set_volume_id(volume_id);
  d.set_data_epoch(data_epoch);
  return d;
}

// A request from `server` holding `data` (nullopt: an empty data directory).
WitnessRequest Request(WitnessRequest::Op op, uint64_t epoch, const std::string& server,
                       const std::string& replica = "",
                       const std::optional<proto::VolumeIdentity>& data = Data()) {
  WitnessRequest req;
  req.set_op(op);
  req.set_epoch(epoch);
  req.set_server(server);
  req.set_replica(replica);
  if (data) *req.mutable_data() = *data;
  return req;
}

class WitnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/witness_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    options_.dir = root_ + "/state";  // created by Open
    options_.lease = absl::Seconds(1);
    options_.clock = &clock_;
    Reopen();
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void Reopen() {
    w_.reset();
    auto w = WitnessService::Open(options_);
    ASSERT_TRUE(w.ok()) << w.status();
    w_ = *std::move(w);
  }

  WitnessReply Ask(WitnessRequest::Op op, uint64_t epoch, const std::string& server,
                   const std::string& replica = "",
                   const std::optional<proto::VolumeIdentity>& data = Data()) {
    absl::StatusOr<WitnessReply> r = w_->Decide(Request(op, epoch, server, replica, data));
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->lease_ms(), 1000u);
    return r.ok() ? *r : WitnessReply();
  }

  // A primary at epoch 1 with B as its in-sync replica.
  void PrimaryAWithReplicaB() {
    ASSERT_TRUE(Ask(WitnessRequest::CLAIM, 0, kA).granted());
    ASSERT_TRUE(Ask(WitnessRequest::IN_SYNC, 1, kA, kB).granted());
  }

  std::string root_;
  FakeClock clock_;
  WitnessOptions options_;
  std::unique_ptr<WitnessService> w_;
};

TEST_F(WitnessTest, FirstClaimIsGranted) {
  WitnessReply r = Ask(WitnessRequest::GET, 0, "");
  EXPECT_TRUE(r.granted());
  EXPECT_EQ(r.state().epoch(), 0u);

  r = Ask(WitnessRequest::CLAIM, 0, kA);
  EXPECT_TRUE(r.granted()) << r.reason();
  EXPECT_EQ(r.state().epoch(), 1u);
  EXPECT_EQ(r.state().primary(), kA);
  EXPECT_EQ(r.state().replica(), "");
  EXPECT_FALSE(r.state().replica_in_sync());
  EXPECT_TRUE(Ask(WitnessRequest::RENEW, 1, kA).granted());
}

TEST_F(WitnessTest, ClaimRefusedWhileTheLeaseIsValid) {
  PrimaryAWithReplicaB();
  clock_.Advance(absl::Milliseconds(600));
  WitnessReply r = Ask(WitnessRequest::CLAIM, 0, kB);
  EXPECT_FALSE(r.granted());
  EXPECT_THAT(r.reason(), HasSubstr("primary a:7420 holds a lease for another 415 ms"));
  EXPECT_EQ(r.state().epoch(), 1u);
  EXPECT_EQ(r.state().primary(), kA);

  // Renewals keep it valid.
  ASSERT_TRUE(Ask(WitnessRequest::RENEW, 1, kA).granted());
  clock_.Advance(absl::Milliseconds(600));
  EXPECT_FALSE(Ask(WitnessRequest::CLAIM, 0, kB).granted());
}

TEST_F(WitnessTest, ClaimRefusedWhenNotTheInSyncReplica) {
  PrimaryAWithReplicaB();
  clock_.Advance(absl::Seconds(2));
  WitnessReply r = Ask(WitnessRequest::CLAIM, 0, kC);
  EXPECT_FALSE(r.granted());
  EXPECT_THAT(r.reason(), HasSubstr("c:7420 is not the in-sync replica"));

  // B was never in sync in a fresh epoch either.
  ASSERT_TRUE(Ask(WitnessRequest::CLAIM, 1, kA).granted());  // A restarts: epoch 2
  clock_.Advance(absl::Seconds(2));
  r = Ask(WitnessRequest::CLAIM, 0, kB);
  EXPECT_FALSE(r.granted());
  EXPECT_THAT(r.reason(), HasSubstr("b:7420 is not the in-sync replica"));
  EXPECT_EQ(r.state().epoch(), 2u);
}

TEST_F(WitnessTest, InSyncReplicaTakesOverAfterLeaseExpiryAndOldPrimaryIsFenced) {
  PrimaryAWithReplicaB();
  // Not at the end of the lease: the witness holds it 1 % + 5 ms longer
  // (the old primary's clock may run that much slower).
  clock_.Advance(absl::Milliseconds(1001));
  EXPECT_THAT(Ask(WitnessRequest::CLAIM, 0, kB).reason(), HasSubstr("for another 14 ms"));
  clock_.Advance(absl::Milliseconds(14));
  WitnessReply r = Ask(WitnessRequest::CLAIM, 0, kB);
  ASSERT_TRUE(r.granted()) << r.reason();
  EXPECT_EQ(r.state().epoch(), 2u);
  EXPECT_EQ(r.state().primary(), kB);
  EXPECT_EQ(r.state().replica(), "");
  EXPECT_FALSE(r.state().replica_in_sync());

  r = Ask(WitnessRequest::RENEW, 1, kA);
  EXPECT_FALSE(r.granted());
  EXPECT_EQ(r.reason(), "fenced: epoch 2 is owned by b:7420");
  EXPECT_FALSE(Ask(WitnessRequest::IN_SYNC, 1, kA, kB).granted());
  EXPECT_FALSE(Ask(WitnessRequest::DEGRADE, 1, kA).granted());
  // The new primary's lease is fresh: A cannot claim back until it runs out,
  // and then only as B's in-sync replica.
  EXPECT_THAT(Ask(WitnessRequest::CLAIM, 0, kA).reason(), HasSubstr("holds a lease"));
  EXPECT_TRUE(Ask(WitnessRequest::RENEW, 2, kB).granted());
  EXPECT_TRUE(Ask(WitnessRequest::IN_SYNC, 2, kB, kA).granted());
  clock_.Advance(absl::Seconds(5));
  r = Ask(WitnessRequest::CLAIM, 0, kA);
  EXPECT_TRUE(r.granted()) << r.reason();
  EXPECT_EQ(r.state().epoch(), 3u);
}

// The witness itself paused (SIGSTOP, a frozen machine) longer than the
// lease: it heard no RENEW for its own fault, so on waking it refuses the
// replica's claim for one more lease, and the primary renews meanwhile.
TEST_F(WitnessTest, AWitnessThatStalledDoesNotDeposeThePrimary) {
  options_.stall_tick = absl::Milliseconds(100);
  Reopen();
  PrimaryAWithReplicaB();
  clock_.Advance(absl::Seconds(15));  // nothing ran: a stall
  WitnessReply r = Ask(WitnessRequest::CLAIM, 0, kB);
  EXPECT_FALSE(r.granted());
  EXPECT_THAT(r.reason(), HasSubstr("holds a lease for another 1015 ms"));
  EXPECT_TRUE(Ask(WitnessRequest::RENEW, 1, kA).granted());

  // A primary that really went silent still loses the role: time passing
  // in steps shorter than the stall threshold (400 ms) is not a stall.
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Milliseconds(300));
    Ask(WitnessRequest::GET, 0, "");
  }
  r = Ask(WitnessRequest::CLAIM, 0, kB);
  EXPECT_TRUE(r.granted()) << r.reason();
  EXPECT_EQ(r.state().epoch(), 2u);
}

TEST_F(WitnessTest, PrimaryRestartGetsNewEpochAndLosesItsInSyncReplica) {
  PrimaryAWithReplicaB();
  WitnessReply r = Ask(WitnessRequest::CLAIM, 0, kA);
  ASSERT_TRUE(r.granted());
  EXPECT_EQ(r.state().epoch(), 2u);
  EXPECT_FALSE(r.state().replica_in_sync());
  EXPECT_FALSE(Ask(WitnessRequest::RENEW, 1, kA).granted());  // old epoch
}

TEST_F(WitnessTest, DegradeMakesLaterReplicaClaimFail) {
  PrimaryAWithReplicaB();
  WitnessReply r = Ask(WitnessRequest::DEGRADE, 1, kA);
  ASSERT_TRUE(r.granted());
  EXPECT_EQ(r.state().replica(), kB);
  EXPECT_FALSE(r.state().replica_in_sync());
  clock_.Advance(absl::Seconds(2));
  r = Ask(WitnessRequest::CLAIM, 0, kB);
  EXPECT_FALSE(r.granted());
  EXPECT_THAT(r.reason(), HasSubstr("b:7420 is not the in-sync replica"));
  // Only the primary of the current epoch may degrade.
  EXPECT_FALSE(Ask(WitnessRequest::DEGRADE, 1, kB).granted());
}

TEST_F(WitnessTest, InSyncRules) {
  ASSERT_TRUE(Ask(WitnessRequest::CLAIM, 0, kA).granted());
  WitnessReply r = Ask(WitnessRequest::IN_SYNC, 1, kA, kA);
  EXPECT_FALSE(r.granted());
  EXPECT_FALSE(Ask(WitnessRequest::IN_SYNC, 2, kA, kB).granted());  // no such epoch
  EXPECT_FALSE(Ask(WitnessRequest::IN_SYNC, 1, kB, kC).granted());  // not the primary
  r = Ask(WitnessRequest::IN_SYNC, 1, kA, kB);
  EXPECT_TRUE(r.granted());
  EXPECT_EQ(r.state().replica(), kB);
  EXPECT_TRUE(r.state().replica_in_sync());
}

TEST_F(WitnessTest, Handover) {
  ASSERT_TRUE(Ask(WitnessRequest::CLAIM, 0, kA).granted());
  // Not before the replica is in sync, and only to that replica.
  EXPECT_FALSE(Ask(WitnessRequest::HANDOVER, 1, kA, kB).granted());
  ASSERT_TRUE(Ask(WitnessRequest::IN_SYNC, 1, kA, kB).granted());
  EXPECT_FALSE(Ask(WitnessRequest::HANDOVER, 1, kA, kC).granted());
  EXPECT_FALSE(Ask(WitnessRequest::HANDOVER, 1, kB, kA).granted());  // not the primary

  WitnessReply r = Ask(WitnessRequest::HANDOVER, 1, kA, kB);
  ASSERT_TRUE(r.granted()) << r.reason();
  EXPECT_EQ(r.state().epoch(), 2u);
  EXPECT_EQ(r.state().primary(), kB);
  EXPECT_EQ(r.state().replica(), kA);
  EXPECT_FALSE(r.state().replica_in_sync());
  EXPECT_EQ(Ask(WitnessRequest::RENEW, 1, kA).reason(), "fenced: epoch 2 is owned by b:7420");
  EXPECT_TRUE(Ask(WitnessRequest::RENEW, 2, kB).granted());
  // The new primary has a fresh lease: the old one cannot claim back.
  clock_.Advance(absl::Milliseconds(500));
  EXPECT_FALSE(Ask(WitnessRequest::CLAIM, 0, kA).granted());
}

TEST_F(WitnessTest, StateSurvivesReopenAndTheLeaseStartsFresh) {
  PrimaryAWithReplicaB();
  clock_.Advance(absl::Seconds(10));  // A's lease ran out before the restart
  Reopen();
  WitnessReply r = Ask(WitnessRequest::GET, 0, "");
  EXPECT_EQ(r.state().epoch(), 1u);
  EXPECT_EQ(r.state().primary(), kA);
  EXPECT_EQ(r.state().replica(), kB);
  EXPECT_TRUE(r.state().replica_in_sync());
  // A restarted witness does not promote early: a full lease from now.
  clock_.Advance(absl::Milliseconds(900));
  EXPECT_THAT(Ask(WitnessRequest::CLAIM, 0, kB).reason(), HasSubstr("holds a lease"));
  clock_.Advance(absl::Milliseconds(200));
  r = Ask(WitnessRequest::CLAIM, 0, kB);
  EXPECT_TRUE(r.granted()) << r.reason();
  EXPECT_EQ(r.state().epoch(), 2u);

  Reopen();
  EXPECT_EQ(w_->state().epoch(), 2u);
  EXPECT_EQ(w_->state().primary(), kB);
  EXPECT_FALSE(std::filesystem::exists(options_.dir + "/witness.state.tmp"));
}

// Whose data: the disk of a restarted primary that was not mounted (an
// empty data directory), another volume's, or an older copy of this one
// never becomes primary; the in-sync replica still takes over.
TEST_F(WitnessTest, AnEmptyDataDirectoryNeverBecomesPrimaryOnceTheVolumeExists) {
  // A new cluster: the first primary creates the volume.
  ASSERT_TRUE(Ask(WitnessRequest::CLAIM, 0, kA, "", std::nullopt).granted());
  ASSERT_TRUE(Ask(WitnessRequest::RENEW, 1, kA).granted());
  ASSERT_TRUE(Ask(WitnessRequest::IN_SYNC, 1, kA, kB).granted());
  EXPECT_EQ(w_->state().volume_id(), kVolume);
  EXPECT_EQ(w_->state().data_epoch(), 1u);

  // A restarts on an empty data directory: refused, for good.
  WitnessReply r = Ask(WitnessRequest::CLAIM, 1, kA, "", std::nullopt);
  EXPECT_FALSE(r.granted());
  EXPECT_TRUE(r.refused_data());
  EXPECT_THAT(r.reason(), HasSubstr("a:7420 has no data (its data directory is empty), but volume "
                                    "0123456789abcdef0123456789abcdef has been served up to "
                                    "epoch 1"));
  clock_.Advance(absl::Seconds(5));
  EXPECT_TRUE(Ask(WitnessRequest::CLAIM, 1, kA, "", std::nullopt).refused_data());
  EXPECT_EQ(w_->state().epoch(), 1u);
  EXPECT_TRUE(w_->state().replica_in_sync());  // nothing changed

  // The in-sync replica takes over with its copy.
  r = Ask(WitnessRequest::CLAIM, 1, kB);
  ASSERT_TRUE(r.granted()) << r.reason();
  EXPECT_EQ(r.state().primary(), kB);
  EXPECT_FALSE(r.refused_data());
}

TEST_F(WitnessTest, AnotherVolumeIsRefused) {
  PrimaryAWithReplicaB();
  clock_.Advance(absl::Seconds(2));
  WitnessReply r = Ask(WitnessRequest::CLAIM, 1, kA, "", Data(kOtherVolume, 9));
  EXPECT_FALSE(r.granted());
  EXPECT_TRUE(r.refused_data());
  EXPECT_THAT(r.reason(), HasSubstr("a:7420 holds volume fedcba9876543210fedcba9876543210, not "
                                    "volume 0123456789abcdef0123456789abcdef"));
  // Also the in-sync replica, if its copy were another volume's.
  r = Ask(WitnessRequest::CLAIM, 1, kB, "", Data(kOtherVolume));
  EXPECT_TRUE(r.refused_data());
  EXPECT_EQ(w_->state().epoch(), 1u);
  EXPECT_EQ(w_->state().volume_id(), kVolume);
}

TEST_F(WitnessTest, OlderDataIsRefusedAndTheNewestIsRecordedDurably) {
  ASSERT_TRUE(Ask(WitnessRequest::CLAIM, 0, kA, "", Data(kVolume, 4)).granted());
  EXPECT_EQ(w_->state().data_epoch(), 4u);
  ASSERT_TRUE(Ask(WitnessRequest::RENEW, 1, kA, "", Data(kVolume, 5)).granted());
  EXPECT_EQ(w_->state().data_epoch(), 5u);
  Reopen();
  EXPECT_EQ(w_->state().volume_id(), kVolume);
  EXPECT_EQ(w_->state().data_epoch(), 5u);

  // A's disk rolled back to an older copy of the volume.
  WitnessReply r = Ask(WitnessRequest::CLAIM, 1, kA, "", Data(kVolume, 3));
  EXPECT_FALSE(r.granted());
  EXPECT_TRUE(r.refused_data());
  EXPECT_THAT(r.reason(), HasSubstr("holds data epoch 3 of the volume, older than data epoch 5"));
  r = Ask(WitnessRequest::CLAIM, 1, kA, "", Data(kVolume, 5));
  EXPECT_TRUE(r.granted()) << r.reason();
  EXPECT_EQ(r.state().epoch(), 2u);
}

TEST_F(WitnessTest, AHandedOverPrimaryIsCheckedAtItsFirstRenew) {
  PrimaryAWithReplicaB();
  ASSERT_TRUE(Ask(WitnessRequest::HANDOVER, 1, kA, kB).granted());
  WitnessReply r = Ask(WitnessRequest::RENEW, 2, kB, "", Data(kOtherVolume));
  EXPECT_FALSE(r.granted());
  EXPECT_TRUE(r.refused_data());
  EXPECT_TRUE(Ask(WitnessRequest::RENEW, 2, kB).granted());
  // A fenced server is told it is fenced, not about its data.
  r = Ask(WitnessRequest::RENEW, 1, kA, "", std::nullopt);
  EXPECT_EQ(r.reason(), "fenced: epoch 2 is owned by b:7420");
  EXPECT_FALSE(r.refused_data());
}

TEST_F(WitnessTest, AWitnessFromBeforeIdentitiesLearnsTheVolume) {
  // Its state knows epochs but no volume: a volume from before identities
  // claims without an id, then the primary reports the one it was given.
  ASSERT_TRUE(Ask(WitnessRequest::CLAIM, 0, kA, "", Data("", 0)).granted());
  EXPECT_EQ(w_->state().volume_id(), "");
  ASSERT_TRUE(Ask(WitnessRequest::CLAIM, 1, kA, "", Data("", 0)).granted());
  ASSERT_TRUE(Ask(WitnessRequest::RENEW, 2, kA, "", Data(kVolume, 3)).granted());
  EXPECT_EQ(w_->state().volume_id(), kVolume);
  EXPECT_EQ(w_->state().data_epoch(), 3u);
  // Still, an empty data directory never gets the role after epoch 0.
  EXPECT_TRUE(Ask(WitnessRequest::CLAIM, 2, kA, "", std::nullopt).refused_data());
}

TEST_F(WitnessTest, InvalidRequests) {
  auto decide = [&](WitnessRequest::Op op, uint64_t epoch, const std::string& server,
                    const std::string& replica) {
    WitnessRequest req;
    req.set_op(op);
    req.set_epoch(epoch);
    req.set_server(server);
    req.set_replica(replica);
    return w_->Decide(req).status();
  };
  EXPECT_TRUE(absl::IsInvalidArgument(decide(WitnessRequest::CLAIM, 0, "", "")));
  EXPECT_TRUE(absl::IsInvalidArgument(decide(WitnessRequest::RENEW, 0, kA, "")));
  EXPECT_TRUE(absl::IsInvalidArgument(decide(WitnessRequest::DEGRADE, 1, "", "")));
  EXPECT_TRUE(absl::IsInvalidArgument(decide(WitnessRequest::IN_SYNC, 1, kA, "")));
  EXPECT_TRUE(absl::IsInvalidArgument(decide(WitnessRequest::HANDOVER, 1, kA, "")));
  EXPECT_TRUE(absl::IsInvalidArgument(decide(static_cast<WitnessRequest::Op>(42), 1, kA, kB)));
  EXPECT_EQ(w_->state().epoch(), 0u);
}

TEST_F(WitnessTest, CorruptOrUnusableStateFileIsAnError) {
  ASSERT_TRUE(Ask(WitnessRequest::CLAIM, 0, kA).granted());
  w_.reset();
  const std::string path = options_.dir + "/witness.state";
  for (const std::string& junk : {std::string("not a witness state \xff"), std::string()}) {
    std::ofstream(path, std::ios::trunc) << junk;
    absl::StatusOr<std::unique_ptr<WitnessService>> w = WitnessService::Open(options_);
    EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss) << w.status();
  }
  // Parses as a message, but no witness writes it: an epoch without owner.
  proto::WitnessState bad;
  bad.set_epoch(3);
  std::ofstream(path, std::ios::trunc) << bad.SerializeAsString();
  EXPECT_EQ(WitnessService::Open(options_).status().code(), absl::StatusCode::kDataLoss);

  WitnessOptions o = options_;
  o.lease = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(WitnessService::Open(o).status()));
  o = options_;
  o.dir = "";
  EXPECT_TRUE(absl::IsInvalidArgument(WitnessService::Open(o).status()));
}

// The witness behind a real gRPC server, asked with WitnessClient.
class WitnessGrpcTest : public WitnessTest {
 protected:
  void StartServer(const std::string& secret) { StartServer(Transport::Insecure(secret)); }
  void StartServer(const Transport& transport) {
    options_.transport = transport;
    Reopen();
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", options_.transport.ServerCredentials(), &port_);
    b.RegisterService(w_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    address_ = "127.0.0.1:" + std::to_string(port_);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    WitnessTest::TearDown();
  }

  int port_ = 0;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(WitnessGrpcTest, ClaimRenewFailoverThroughGrpc) {
  StartServer("s3cret");
  WitnessClient c(address_, Transport::Insecure("s3cret"));
  absl::StatusOr<WitnessReply> r = c.Update(Request(WitnessRequest::CLAIM, 0, kA));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->granted());
  EXPECT_EQ(r->state().epoch(), 1u);
  EXPECT_EQ(r->lease_ms(), 1000u);
  ASSERT_TRUE(c.Update(Request(WitnessRequest::IN_SYNC, 1, kA, kB))->granted());

  // Refused is an OK status with granted=false.
  r = c.Update(Request(WitnessRequest::CLAIM, 0, kB));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->granted());
  EXPECT_THAT(r->reason(), HasSubstr("holds a lease"));

  clock_.Advance(absl::Seconds(2));
  r = c.Update(Request(WitnessRequest::CLAIM, 0, kB));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->granted());
  EXPECT_EQ(r->state().epoch(), 2u);
  r = c.Update(Request(WitnessRequest::RENEW, 1, kA));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->granted());
  EXPECT_EQ(r->reason(), "fenced: epoch 2 is owned by b:7420");

  // A malformed request is a status, not a decision.
  r = c.Update(Request(WitnessRequest::RENEW, 0, kA));
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
}

TEST_F(WitnessGrpcTest, BadSecretIsUnauthenticated) {
  StartServer("s3cret");
  for (const char* secret : {"wrong", ""}) {
    WitnessClient c(address_, Transport::Insecure(secret));
    absl::StatusOr<WitnessReply> r = c.Update(Request(WitnessRequest::CLAIM, 0, kA));
    EXPECT_TRUE(absl::IsUnauthenticated(r.status())) << r.status();
  }
  EXPECT_EQ(w_->state().epoch(), 0u);
}

// With TLS, only a server's certificate of the cluster's CA, valid now, may
// ask the witness: a mount's or an admin's is refused (PERMISSION_DENIED),
// no certificate, another CA's or an expired one fail the handshake
// (UNAVAILABLE); nothing changes. Then a server's is granted.
TEST_F(WitnessGrpcTest, WithTlsOnlyServersMayAsk) {
  const absl::Time now = absl::Now();
  const absl::Time from = now - absl::Hours(1), to = now + absl::Hours(1);
  ASSERT_OK_AND_ASSIGN(CertAndKey ca, MakeCertificateAuthority("test CA", from, to));
  ASSERT_OK_AND_ASSIGN(CertAndKey other_ca, MakeCertificateAuthority("other CA", from, to));
  const auto transport = [&](const CertAndKey& by, const std::string& cn, absl::Time until) {
    absl::StatusOr<CertAndKey> c = IssueCertificate(by, cn, from, until);
    EXPECT_TRUE(c.ok()) << c.status();
    absl::StatusOr<Transport> t = Transport::FromPem(ca.cert_pem, c->cert_pem, c->key_pem, "");
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  };
  StartServer(transport(ca, "server:witness", to));
  for (const std::string cn : {"node:n1", "admin:ops"}) {
    WitnessClient c(address_, transport(ca, cn, to));
    absl::StatusOr<WitnessReply> r = c.Update(Request(WitnessRequest::CLAIM, 0, kA));
    EXPECT_TRUE(absl::IsPermissionDenied(r.status())) << cn << ": " << r.status();
  }
  struct Bad {
    const char* what;
    Transport t;
  };
  for (const Bad& bad :
       {Bad{"no certificate", Transport()}, Bad{"another CA", transport(other_ca, "server:a", to)},
        Bad{"expired", transport(ca, "server:a", now - absl::Minutes(1))}}) {
    WitnessClient c(address_, bad.t);
    absl::StatusOr<WitnessReply> r =
        c.Update(Request(WitnessRequest::CLAIM, 0, kA), absl::Seconds(2));
    EXPECT_TRUE(absl::IsUnavailable(r.status())) << bad.what << ": " << r.status();
  }
  EXPECT_EQ(w_->state().epoch(), 0u);
  WitnessClient server(address_, transport(ca, "server:a", to));
  absl::StatusOr<WitnessReply> r = server.Update(Request(WitnessRequest::CLAIM, 0, kA));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->granted());
}

TEST_F(WitnessGrpcTest, UnreachableWitnessIsUnavailableWithinTheDeadline) {
  StartServer("");
  server_->Shutdown(std::chrono::system_clock::now());
  server_.reset();
  WitnessClient c(address_, Transport());
  const absl::Time start = absl::Now();
  absl::StatusOr<WitnessReply> r =
      c.Update(Request(WitnessRequest::GET, 0, ""), absl::Milliseconds(300));
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(address_));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

}  // namespace
}  // namespace grantfs
