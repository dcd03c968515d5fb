// The node agent (client/node_agent.h): what one pass over a table does to
// a fake node's mounts, and the whole agent against a real Cluster service
// (in process, over gRPC) on a real volume.
#include "client/node_agent.h"

#include <grpcpp/grpcpp.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/cluster_client.h"
#include "client/fake_mounter.h"
#include "common/clock.h"
#include "common/status_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/cluster_service.h"
#include "server/mount_table.h"
#include "server/node_table.h"
#include "server/volume.h"

namespace grantfs {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using State = proto::NodeMountState;

proto::GlobalMountRecord Rec(const std::string& path, uint64_t gen, bool removing = false,
                             bool force = false) {
  proto::GlobalMountRecord r;
  r.set_path(path);
  r.set_subdir("/");
  r.set_generation(gen);
  r.set_removing(removing);
  r.set_force(force);
  return r;
}

proto::GlobalMountTable Table(std::vector<proto::GlobalMountRecord> recs) {
  proto::GlobalMountTable t;
  for (auto& r : recs) *t.add_mounts() = r;
  return t;
}

std::map<std::string, State> ByPath(const std::vector<State>& states) {
  std::map<std::string, State> out;
  for (const State& s : states) out[s.path()] = s;
  return out;
}

class NodeAgentTest : public ::testing::Test {
 protected:
  NodeAgentOptions Options() {
    NodeAgentOptions o;
    o.node = "n1";
    o.allowed_root = "/g";
    o.mounter = &mounter_;
    o.clock = &clock_;
    o.retry = absl::Seconds(2);
    return o;
  }
  FakeMounter mounter_;
  FakeClock clock_;
};

TEST_F(NodeAgentTest, MountsWhatTheTableHoldsAndAdoptsWhatIsMountedAlready) {
  NodeAgent agent(Options());
  mounter_.Set("/g/old", MountAt::kGrantFs);  // the previous run's
  agent.Reconcile(Table({Rec("/g/new", 5), Rec("/g/old", 6)}));
  EXPECT_EQ(mounter_.mounts(), 1);  // not /g/old a second time
  auto st = ByPath(agent.States());
  EXPECT_EQ(st["/g/new"].state(), State::MOUNTED);
  EXPECT_EQ(st["/g/new"].generation(), 5u);
  EXPECT_EQ(st["/g/old"].state(), State::MOUNTED);
  EXPECT_THAT(agent.Managed(), ElementsAre("/g/new", "/g/old"));
  agent.Reconcile(Table({Rec("/g/new", 5), Rec("/g/old", 6)}));
  EXPECT_EQ(mounter_.mounts(), 1);  // nothing to do
}

TEST_F(NodeAgentTest, AFailedMountIsReportedAndRetriedAfterTheRetryPeriod) {
  NodeAgent agent(Options());
  mounter_.Fail("grantfs-mount exited with 1: cannot mount");
  agent.Reconcile(Table({Rec("/g/x", 5)}));
  auto st = ByPath(agent.States());
  EXPECT_EQ(st["/g/x"].state(), State::FAILED);
  EXPECT_THAT(st["/g/x"].reason(), HasSubstr("cannot mount"));
  agent.Reconcile(Table({Rec("/g/x", 5)}));
  EXPECT_EQ(mounter_.mounts(), 1);  // not before the retry period
  mounter_.Fail("");
  clock_.Advance(absl::Seconds(3));
  agent.Reconcile(Table({Rec("/g/x", 5)}));
  EXPECT_EQ(mounter_.mounts(), 2);
  EXPECT_EQ(ByPath(agent.States())["/g/x"].state(), State::MOUNTED);
}

TEST_F(NodeAgentTest, AnotherFileSystemAtThePathOrABadRecordIsAFailureNotAMount) {
  NodeAgent agent(Options());
  mounter_.Set("/g/taken", MountAt::kOther);
  proto::GlobalMountRecord bad = Rec("/g/bad", 3);
  bad.set_options("tls_dir=/tmp/evil");
  agent.Reconcile(Table({Rec("/g/taken", 2), bad}));
  EXPECT_EQ(mounter_.mounts(), 0);
  auto st = ByPath(agent.States());
  EXPECT_EQ(st["/g/taken"].state(), State::FAILED);
  EXPECT_THAT(st["/g/taken"].reason(), HasSubstr("another file system"));
  EXPECT_EQ(st["/g/bad"].state(), State::FAILED);
  EXPECT_THAT(st["/g/bad"].reason(), HasSubstr("refused"));
}

TEST_F(NodeAgentTest, AMountWhoseDaemonDiedIsDetachedAndMountedAgain) {
  NodeAgent agent(Options());
  mounter_.Set("/g/x", MountAt::kDead);
  agent.Reconcile(Table({Rec("/g/x", 5)}));
  EXPECT_EQ(mounter_.lazy(), 1);
  EXPECT_EQ(mounter_.mounts(), 1);
  EXPECT_EQ(ByPath(agent.States())["/g/x"].state(), State::MOUNTED);
}

TEST_F(NodeAgentTest, RemovalUnmountsOrSaysWhoKeepsItBusyAndForceDetaches) {
  NodeAgent agent(Options());
  agent.Reconcile(Table({Rec("/g/x", 5)}));
  mounter_.Busy("pid 12 (sleep) has its working directory inside");
  agent.Reconcile(Table({Rec("/g/x", 6, true)}));
  auto st = ByPath(agent.States());
  EXPECT_EQ(st["/g/x"].state(), State::BUSY);
  EXPECT_EQ(st["/g/x"].generation(), 6u);
  EXPECT_THAT(st["/g/x"].reason(), HasSubstr("pid 12 (sleep)"));
  // Tried again after the retry period; -f detaches.
  agent.Reconcile(Table({Rec("/g/x", 7, true, true)}));
  st = ByPath(agent.States());
  EXPECT_EQ(st["/g/x"].state(), State::UNMOUNTED);
  EXPECT_EQ(mounter_.lazy(), 1);
  EXPECT_TRUE(agent.Managed().empty());
  // Forgotten by the table: its state goes too.
  agent.Reconcile(Table({}));
  EXPECT_TRUE(agent.States().empty());
}

TEST_F(NodeAgentTest, WhatItMountedAndTheTableNoLongerHoldsIsUnmounted) {
  NodeAgent agent(Options());
  agent.Reconcile(Table({Rec("/g/x", 5), Rec("/g/y", 5)}));
  agent.Reconcile(Table({Rec("/g/y", 5)}));
  EXPECT_EQ(mounter_.Probe("/g/x"), MountAt::kNothing);
  EXPECT_THAT(agent.Managed(), ElementsAre("/g/y"));
  // A GrantFS mount it never made and the table does not name stays.
  mounter_.Set("/mnt/mine", MountAt::kGrantFs);
  agent.Reconcile(Table({Rec("/g/y", 5)}));
  EXPECT_EQ(mounter_.Probe("/mnt/mine"), MountAt::kGrantFs);
}

TEST_F(NodeAgentTest, MetricsCountMountsByStateAndAttempts) {
  NodeAgent agent(Options());
  agent.Reconcile(Table({Rec("/g/x", 5)}));
  mounter_.Fail("no");
  agent.Reconcile(Table({Rec("/g/x", 5), Rec("/g/y", 5)}));
  const std::string m = agent.RenderMetrics();
  EXPECT_THAT(m, HasSubstr("grantfs_agent_mounts{state=\"mounted\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("grantfs_agent_mounts{state=\"failed\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("grantfs_agent_mount_attempts_total 2\n"));
  EXPECT_THAT(m, HasSubstr("grantfs_agent_mount_failures_total 1\n"));
  EXPECT_THAT(m, HasSubstr("grantfs_agent_mount_seconds_count 2\n"));
  EXPECT_THAT(m, HasSubstr("grantfs_agent_connected 0\n"));
  EXPECT_THAT(m, HasSubstr("# TYPE grantfs_agent_heartbeats_total counter\n"));
}

TEST_F(NodeAgentTest, TheStateFileKeepsEscapedPathsAndSkipsBadLines) {
  NodeAgent::Spec known;
  known.known = true;
  known.subdir = "/a\tb";
  known.options = "";
  const std::map<std::string, NodeAgent::Spec> mounts = {
      {"/g/a b", known}, {"/g/new\nline", NodeAgent::Spec()}, {"/g/x", known}};
  EXPECT_EQ(NodeAgent::ParseStateFile(NodeAgent::FormatStateFile(mounts)), mounts);
  const auto parsed =
      NodeAgent::ParseStateFile("/g/ok\nrelative\n/\n/g/../etc\n\\x\n/g/two\tfields\n");
  ASSERT_EQ(parsed.size(), 1u);
  EXPECT_EQ(parsed.begin()->first, "/g/ok");
  EXPECT_FALSE(parsed.begin()->second.known);
}

TEST_F(NodeAgentTest, AMountMadeForAnOlderRecordOfItsPathIsMadeAgain) {
  NodeAgent agent(Options());
  agent.Reconcile(Table({Rec("/g/x", 5)}));
  // Removed and forgotten while the agent was away, added again with
  // another directory: unmounted and mounted again.
  proto::GlobalMountRecord other = Rec("/g/x", 9);
  other.set_subdir("/sub");
  agent.Reconcile(Table({other}));
  EXPECT_EQ(mounter_.unmounts(), 1);
  EXPECT_EQ(mounter_.mounts(), 2);
  EXPECT_EQ(ByPath(agent.States())["/g/x"].state(), State::MOUNTED);
  // Busy: a failure that says so, tried again later.
  proto::GlobalMountRecord third = Rec("/g/x", 11);
  third.set_options("ro");
  mounter_.Busy("pid 1 (sh) has its working directory inside");
  agent.Reconcile(Table({third}));
  auto st = ByPath(agent.States());
  EXPECT_EQ(st["/g/x"].state(), State::FAILED);
  EXPECT_THAT(st["/g/x"].reason(), HasSubstr("another directory or options"));
  EXPECT_EQ(mounter_.mounts(), 2);
}

TEST_F(NodeAgentTest, APathOutsideTheAllowedRootOrWithUnsafeOptionsIsRefusedNotMounted) {
  NodeAgent agent(Options());  // allowed root /g
  proto::GlobalMountRecord suid = Rec("/g/suid", 4);
  suid.set_options("ro,suid");
  proto::GlobalMountRecord dev = Rec("/g/dev", 4);
  dev.set_options("dev");
  agent.Reconcile(Table({Rec("/etc", 2), Rec("/gx/y", 2), Rec("/g", 2), suid, dev}));
  EXPECT_EQ(mounter_.mounts(), 0);
  auto st = ByPath(agent.States());
  for (const char* p : {"/etc", "/gx/y", "/g"}) {
    EXPECT_EQ(st[p].state(), State::FAILED) << p;
    EXPECT_THAT(st[p].reason(), HasSubstr("outside the allowed root /g")) << p;
  }
  EXPECT_EQ(st["/g/suid"].state(), State::FAILED);
  EXPECT_THAT(st["/g/suid"].reason(), HasSubstr("'suid': not allowed"));
  EXPECT_THAT(st["/g/dev"].reason(), HasSubstr("'dev': not allowed"));
  // A removal outside the root never unmounts what is there.
  mounter_.Set("/etc", MountAt::kGrantFs);
  agent.Reconcile(Table({Rec("/etc", 3, /*removing=*/true)}));
  EXPECT_EQ(mounter_.Probe("/etc"), MountAt::kGrantFs);
}

TEST_F(NodeAgentTest, AGrantFsMountOfOtherServersWithNoRecordIsNotAdopted) {
  NodeAgent agent(Options());
  mounter_.Set("/g/theirs", MountAt::kGrantFs);
  mounter_.Foreign("/g/theirs");
  agent.Reconcile(Table({Rec("/g/theirs", 2)}));
  EXPECT_EQ(mounter_.mounts(), 0);
  EXPECT_EQ(mounter_.unmounts(), 0);
  EXPECT_TRUE(agent.Managed().empty());
  auto st = ByPath(agent.States());
  EXPECT_EQ(st["/g/theirs"].state(), State::FAILED);
  EXPECT_THAT(st["/g/theirs"].reason(), HasSubstr("not adopted"));
  // Removed from the table: it is not this agent's to unmount either.
  agent.Reconcile(Table({Rec("/g/theirs", 2, /*removing=*/true)}));
  EXPECT_EQ(mounter_.unmounts(), 0);
  EXPECT_EQ(mounter_.Probe("/g/theirs"), MountAt::kGrantFs);
  EXPECT_EQ(ByPath(agent.States())["/g/theirs"].state(), State::UNMOUNTED);
}

TEST_F(NodeAgentTest, BadOptionsAreRefusedAtStart) {
  NodeAgentOptions o = Options();
  o.node = "a b";
  FakeMounter m;
  ClusterClientOptions co;
  co.servers = {"127.0.0.1:1"};
  auto cluster = ClusterClient::Create(co);
  ASSERT_TRUE(cluster.ok());
  o.cluster = cluster->get();
  NodeAgent agent(o);
  EXPECT_EQ(agent.Start().code(), absl::StatusCode::kInvalidArgument);
  for (const char* root : {"/", "relative", "/a/../b", ""}) {
    o.node = "n1";
    o.allowed_root = root;
    NodeAgent bad_root(o);
    EXPECT_EQ(bad_root.Start().code(), absl::StatusCode::kInvalidArgument) << root;
  }
}

// --- the whole agent against a real Cluster service --------------------------------

class NodeAgentServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/grantfs_node_agent_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << strerror(errno);
    dir_ = tmpl;
    VolumeOptions vo;
    vo.dir = dir_;
    vo.capacity_bytes = 64 << 20;
    vo.background = false;
    auto v = Volume::Open(vo);
    ASSERT_TRUE(v.ok()) << v.status();
    volume_ = *std::move(v);
    table_ = std::make_unique<MountTable>(&volume_->meta().store());
    ClusterServiceOptions so;
    so.table = table_.get();
    so.nodes = &nodes_;
    service_ = std::make_unique<ClusterService>(so);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ClusterClientOptions co;
    co.servers = {"127.0.0.1:" + std::to_string(port)};
    auto c = ClusterClient::Create(co);
    ASSERT_TRUE(c.ok());
    cluster_ = *std::move(c);
  }
  void TearDown() override {
    // Also after a SetUp that stopped half way.
    if (service_) service_->Shutdown();
    if (server_) {
      server_->Shutdown();
      server_->Wait();
    }
    table_.reset();
    volume_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    std::filesystem::remove(dir_ + "-mounts.list", ec);
  }
  // The primary's view of `node`'s state of `path` (PENDING when none).
  State::State Reported(const std::string& node, const std::string& path, uint64_t gen) {
    for (const proto::NodeInfo& n : nodes_.List()) {
      if (n.node() != node) continue;
      for (const State& s : n.mounts()) {
        if (s.path() == path && s.generation() == gen) return s.state();
      }
    }
    return State::PENDING;
  }
  // Polls `pred` for up to 10 s (the target is 2 s; generous for a loaded machine).
  template <typename Pred>
  bool Within10s(Pred pred) {
    const absl::Time end = absl::Now() + absl::Seconds(10);
    while (absl::Now() < end) {
      if (pred()) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return pred();
  }

  std::string dir_;
  std::unique_ptr<Volume> volume_;
  std::unique_ptr<MountTable> table_;
  NodeTable nodes_;
  std::unique_ptr<ClusterService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ClusterClient> cluster_;
  FakeMounter mounter_;
};

TEST_F(NodeAgentServiceTest, ANewMountReachesTheAgentAndItsStateThePrimaryAtOnce) {
  NodeAgentOptions o;
  o.node = "n1";
  o.allowed_root = "/g";
  o.version = "test";
  o.poll = absl::Seconds(2);  // the server's longest wait
  o.cluster = cluster_.get();
  o.mounter = &mounter_;
  o.state_file = dir_ + "/mounts.list";
  NodeAgent agent(o);
  ASSERT_OK(agent.Start());
  ASSERT_TRUE(Within10s([&] { return !nodes_.List().empty(); }));
  EXPECT_EQ(nodes_.List()[0].agent_version(), "test");
  // The agent is in its long poll now: the change ends it.
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time added_at = absl::Now();
  ASSERT_OK_AND_ASSIGN(MountTable::Added a, table_->Add("/g/x", "/", "", ""));
  ASSERT_TRUE(
      Within10s([&] { return Reported("n1", "/g/x", a.mount.generation()) == State::MOUNTED; }));
  // Well within the 2 s poll period (it takes milliseconds): the long poll
  // ended at the change, the agent did not wait for its next heartbeat.
  EXPECT_LT(absl::Now() - added_at, absl::Milliseconds(1500));
  EXPECT_EQ(mounter_.Probe("/g/x"), MountAt::kGrantFs);

  ASSERT_OK_AND_ASSIGN(proto::GlobalMountRecord r, table_->MarkRemoving("/g/x", false));
  ASSERT_TRUE(
      Within10s([&] { return Reported("n1", "/g/x", r.generation()) == State::UNMOUNTED; }));
  EXPECT_EQ(mounter_.Probe("/g/x"), MountAt::kNothing);

  // Stopping ends the long poll at once.
  const absl::Time stop_at = absl::Now();
  agent.Stop();
  EXPECT_LT(absl::Now() - stop_at, absl::Milliseconds(1500));
}

TEST_F(NodeAgentServiceTest, ARestartedAgentAdoptsItsMountsAndUnmountsWhatWasRemovedMeanwhile) {
  NodeAgentOptions o;
  o.node = "n1";
  o.allowed_root = "/g";
  o.cluster = cluster_.get();
  o.mounter = &mounter_;
  o.state_file = dir_ + "/mounts.list";
  ASSERT_OK(table_->Add("/g/keep", "/", "", "").status());
  ASSERT_OK(table_->Add("/g/gone", "/", "", "").status());
  {
    NodeAgent agent(o);
    ASSERT_OK(agent.Start());
    ASSERT_TRUE(Within10s([&] { return agent.Managed().size() == 2; }));
  }  // stopped: the mounts stay
  EXPECT_EQ(mounter_.Probe("/g/keep"), MountAt::kGrantFs);
  EXPECT_EQ(mounter_.mounts(), 2);
  ASSERT_OK_AND_ASSIGN(proto::GlobalMountRecord r, table_->MarkRemoving("/g/gone", false));
  ASSERT_OK(table_->Forget("/g/gone", r.generation()));
  NodeAgent again(o);
  ASSERT_OK(again.Start());
  ASSERT_TRUE(Within10s([&] { return mounter_.Probe("/g/gone") == MountAt::kNothing; }));
  ASSERT_TRUE(Within10s([&] { return again.Managed().size() == 1; }));
  EXPECT_EQ(mounter_.Probe("/g/keep"), MountAt::kGrantFs);
  EXPECT_EQ(mounter_.mounts(), 2);  // /g/keep adopted, not mounted twice
}

// --- the Cluster service's gate and the client's failover ---------------------------

// A Cluster service on 127.0.0.1 in process.
struct InProcessCluster {
  explicit InProcessCluster(const ClusterServiceOptions& o) : service(o) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service);
    server = b.BuildAndStart();
  }
  ~InProcessCluster() {
    service.Shutdown();
    server->Shutdown();
    server->Wait();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  ClusterService service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

TEST_F(NodeAgentServiceTest, AReplicaIsNotThePrimaryTheClientGoesOnToTheNext) {
  InProcessCluster replica{ClusterServiceOptions()};  // no table: a replica's
  const std::string primary = cluster_->addresses()[0];
  ClusterClientOptions co;
  co.servers = {replica.address(), primary};
  auto c = ClusterClient::Create(co);
  ASSERT_TRUE(c.ok());
  proto::ListMountsReply reply;
  std::string server;
  ASSERT_OK((*c)->Call(&proto::Cluster::Stub::ListMounts, proto::ListMountsRequest(), &reply,
                       absl::ZeroDuration(), nullptr, &server));
  EXPECT_EQ(server, primary);
  // Only the replica: UNAVAILABLE, naming it and what it said.
  co.servers = {replica.address()};
  auto alone = ClusterClient::Create(co);
  ASSERT_TRUE(alone.ok());
  absl::Status s =
      (*alone)->Call(&proto::Cluster::Stub::ListMounts, proto::ListMountsRequest(), &reply);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr(replica.address() + ": not the primary"));
}

TEST_F(NodeAgentServiceTest, BeyondTheWaitingLimitAHeartbeatIsAnsweredAtOnce) {
  ClusterServiceOptions so;
  so.table = table_.get();
  so.nodes = &nodes_;
  so.max_waiting = 0;
  InProcessCluster busy(so);
  ClusterClientOptions co;
  co.servers = {busy.address()};
  auto c = ClusterClient::Create(co);
  ASSERT_TRUE(c.ok());
  proto::NodeHeartbeatRequest req;
  req.set_node("n1");
  req.set_known_incarnation(table_->incarnation());
  req.set_known_version(table_->version());
  req.set_wait_ms(2000);
  proto::NodeHeartbeatReply reply;
  const absl::Time t0 = absl::Now();
  ASSERT_OK((*c)->Call(&proto::Cluster::Stub::Heartbeat, req, &reply, absl::Seconds(2)));
  EXPECT_LT(absl::Now() - t0, absl::Milliseconds(1500));  // not the 2 s wait
  // A bad node name is refused with what is wrong.
  req.set_node("no/slashes");
  absl::Status s = (*c)->Call(&proto::Cluster::Stub::Heartbeat, req, &reply);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("node name"));
}

}  // namespace
}  // namespace grantfs
