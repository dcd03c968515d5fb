// The global mount table (server/mount_table.h) on a real volume's
// metadata store, and the node table (server/node_table.h) on a fake clock.
#include "server/mount_table.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "checkpoint/change_sink.h"
#include "common/clock.h"
#include "common/status_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/fsck.h"
#include "server/keys.h"
#include "server/node_table.h"
#include "server/volume.h"

namespace grantfs {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class MountTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/grantfs_mount_table_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << strerror(errno);
    dir_ = tmpl;
    Open();
  }
  void TearDown() override {
    table_.reset();
    volume_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void Open(ChangeSink* sink = nullptr) {
    table_.reset();
    volume_.reset();
    VolumeOptions o;
    o.dir = dir_;
    o.change_sink = sink;
    o.capacity_bytes = 64 << 20;
    o.clock = &clock_;
    o.lease_clock = &clock_;
    o.background = false;
    auto v = Volume::Open(o);
    ASSERT_TRUE(v.ok()) << v.status();
    volume_ = *std::move(v);
    table_ = std::make_unique<MountTable>(&volume_->meta().store());
  }
  std::vector<std::string> Paths() {
    absl::StatusOr<proto::GlobalMountTable> t = table_->List();
    EXPECT_TRUE(t.ok()) << t.status();
    std::vector<std::string> out;
    if (t.ok()) {
      for (const auto& m : t->mounts()) out.push_back(m.path());
    }
    return out;
  }

  FakeClock clock_;
  std::string dir_;
  std::unique_ptr<Volume> volume_;
  std::unique_ptr<MountTable> table_;
};

TEST_F(MountTableTest, AMountIsRecordedNormalizedAndSurvivesAReopen) {
  ASSERT_OK_AND_ASSIGN(MountTable::Added a,
                       table_->Add("/global//data/", "/projects/", "ro,,leases=off", "admin:ops"));
  EXPECT_FALSE(a.existed);
  EXPECT_EQ(a.mount.path(), "/global/data");
  EXPECT_EQ(a.mount.subdir(), "/projects");
  EXPECT_EQ(a.mount.options(), "ro,leases=off");
  EXPECT_EQ(a.mount.created_by(), "admin:ops");
  EXPECT_FALSE(a.mount.removing());
  EXPECT_GT(a.mount.generation(), 0u);
  ASSERT_OK(table_->Add("/global/b", "", "", "").status());
  EXPECT_THAT(Paths(), ElementsAre("/global/b", "/global/data"));

  Open();  // a restart, or the replica's copy after a failover
  ASSERT_OK_AND_ASSIGN(proto::GlobalMountTable t, table_->List());
  ASSERT_EQ(t.mounts_size(), 2);
  EXPECT_EQ(t.mounts(1).path(), "/global/data");
  EXPECT_EQ(t.mounts(1).subdir(), "/projects");
  EXPECT_EQ(t.mounts(1).options(), "ro,leases=off");
  EXPECT_EQ(t.mounts(1).generation(), a.mount.generation());
}

// A replica that acknowledges only when the test says, or refuses.
class GatedSink : public ChangeSink {
 public:
  uint64_t Append(proto::ReplRecord) override {
    absl::MutexLock l(&mu_);
    return ++head_;
  }
  absl::Status WaitReplicated(uint64_t seq) override {
    absl::MutexLock l(&mu_);
    ++waiting_;
    mu_.Await(absl::Condition(
        +[](GatedSink* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->open_; }, this));
    --waiting_;
    return answer_;
  }
  uint64_t Head() override {
    absl::MutexLock l(&mu_);
    return head_;
  }
  void Hold() {
    absl::MutexLock l(&mu_);
    open_ = false;
  }
  void Release(absl::Status answer) {
    absl::MutexLock l(&mu_);
    answer_ = std::move(answer);
    open_ = true;
  }
  void AwaitWaiter() {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](GatedSink* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->waiting_ > 0; }, this));
  }

 private:
  absl::Mutex mu_;
  uint64_t head_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  absl::Status answer_ ABSL_GUARDED_BY(mu_);
};

TEST_F(MountTableTest, AChangeIsServedOnlyOnceTheReplicaHasIt) {
  GatedSink sink;
  Open(&sink);
  ASSERT_OK(table_->Add("/global/a", "/", "", "").status());
  const uint64_t v0 = table_->version();

  // Committed here, not yet on the replica: the agents do not see it.
  sink.Hold();
  absl::Status added;
  std::thread adder([&] { added = table_->Add("/global/b", "/", "", "").status(); });
  sink.AwaitWaiter();
  EXPECT_THAT(Paths(), ElementsAre("/global/a"));
  EXPECT_EQ(table_->version(), v0);
  sink.Release(absl::OkStatus());
  adder.join();
  ASSERT_OK(added);
  EXPECT_THAT(Paths(), ElementsAre("/global/a", "/global/b"));
  EXPECT_GT(table_->version(), v0);

  // The same for a removal and a forget.
  sink.Hold();
  absl::Status marked;
  std::thread marker([&] { marked = table_->MarkRemoving("/global/b", false).status(); });
  sink.AwaitWaiter();
  ASSERT_OK_AND_ASSIGN(proto::GlobalMountTable t, table_->List());
  EXPECT_FALSE(t.mounts(1).removing());
  sink.Release(absl::OkStatus());
  marker.join();
  ASSERT_OK(marked);
  ASSERT_OK_AND_ASSIGN(t, table_->List());
  EXPECT_TRUE(t.mounts(1).removing());
  sink.Hold();
  absl::Status forgot;
  std::thread forgetter([&] { forgot = table_->Forget("/global/b", 0); });
  sink.AwaitWaiter();
  EXPECT_THAT(Paths(), ElementsAre("/global/a", "/global/b"));
  sink.Release(absl::OkStatus());
  forgetter.join();
  ASSERT_OK(forgot);
  EXPECT_THAT(Paths(), ElementsAre("/global/a"));

  // A change whose replication failed after its local commit stays unseen
  // (a failover could still undo it) until the next change finds it
  // replicated: grantfsctl's retry, here.
  const uint64_t v1 = table_->version();
  sink.Hold();
  absl::Status failed;
  std::thread failer([&] { failed = table_->Add("/global/c", "/", "", "").status(); });
  sink.AwaitWaiter();
  EXPECT_THAT(Paths(), ElementsAre("/global/a"));
  sink.Release(absl::UnavailableError("replica gone"));
  failer.join();
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_EQ(table_->version(), v1);
  EXPECT_THAT(Paths(), ElementsAre("/global/a"));
  // The retry while the replica still does not answer: refused, unseen.
  EXPECT_EQ(table_->Add("/global/c", "/", "", "").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Paths(), ElementsAre("/global/a"));
  // It answers again: the retry finds the record, now replicated, and shows it.
  sink.Release(absl::OkStatus());
  ASSERT_OK_AND_ASSIGN(MountTable::Added again, table_->Add("/global/c", "/", "", ""));
  EXPECT_TRUE(again.existed);
  EXPECT_GT(table_->version(), v1);
  EXPECT_THAT(Paths(), ElementsAre("/global/a", "/global/c"));
  // A refusal by the checks changes nothing, not even the version.
  const uint64_t v2 = table_->version();
  EXPECT_EQ(table_->Forget("/global/none", 0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_->version(), v2);
  table_.reset();
  volume_.reset();
}

TEST_F(MountTableTest, TheSameMountAgainChangesNothingAnotherOneAtItsPathIsRefused) {
  ASSERT_OK_AND_ASSIGN(MountTable::Added a, table_->Add("/global/x", "/", "ro", ""));
  const uint64_t version = table_->version();
  ASSERT_OK_AND_ASSIGN(MountTable::Added again, table_->Add("/global/x/", "", "ro", ""));
  EXPECT_TRUE(again.existed);
  EXPECT_EQ(again.mount.generation(), a.mount.generation());
  EXPECT_EQ(table_->version(), version);
  absl::Status other = table_->Add("/global/x", "/sub", "", "").status();
  EXPECT_EQ(other.code(), absl::StatusCode::kAlreadyExists) << other;
  EXPECT_THAT(other.message(), HasSubstr("already a global mount"));
}

TEST_F(MountTableTest, BadPathsDirectoriesAndOptionsAreRefused) {
  for (const char* path : {"", "relative", "/", "/a/../b", "/proc/x", "/dev", "/run/g"}) {
    absl::Status s = table_->Add(path, "/", "", "").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << path << ": " << s;
  }
  EXPECT_EQ(table_->Add("/g", "a/b", "", "").status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* options :
       {"tls_dir=/tmp", "insecure", "a b", "x;rm", "foreground", "log_file=/etc/passwd",
        "identity=admin", "suid", "ro,dev", "fsname=x", "subtype=x", "allow_other",
        "metrics_addr=:1", "leases", "ro=1", "whatever"}) {
    absl::Status s = table_->Add("/g", "/", options, "").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << options << ": " << s;
  }
  EXPECT_THAT(table_->Add("/g", "/", "nosuid,suid", "").status().message(),
              ::testing::HasSubstr("mount option 'suid': not allowed in a global mount"));
  EXPECT_EQ(table_->Add(std::string(2000, 'a').insert(0, "/"), "/", "", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Paths().empty());
}

TEST_F(MountTableTest, AMountInsideAnotherIsRefused) {
  ASSERT_OK(table_->Add("/global/a", "/", "", "").status());
  for (const char* path : {"/global/a/b", "/global", "/global/a"}) {
    absl::Status s = table_->Add(path, "/x", "", "").status();
    EXPECT_FALSE(s.ok()) << path;
  }
  EXPECT_EQ(table_->Add("/global/a/b", "/", "", "").status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(table_->Add("/global/ab", "/", "", "").status());  // a sibling, not inside
}

TEST_F(MountTableTest, RemovalIsMarkedThenForgottenByGeneration) {
  ASSERT_OK_AND_ASSIGN(MountTable::Added a, table_->Add("/global/x", "/", "", ""));
  EXPECT_EQ(table_->Forget("/global/x", 0).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_OK_AND_ASSIGN(proto::GlobalMountRecord marked, table_->MarkRemoving("/global/x", false));
  EXPECT_TRUE(marked.removing());
  EXPECT_FALSE(marked.force());
  EXPECT_GT(marked.generation(), a.mount.generation());
  // Not mounted again while it is being removed.
  EXPECT_EQ(table_->Add("/global/x", "/", "", "").status().code(),
            absl::StatusCode::kFailedPrecondition);
  // -f later adds force, and a new generation.
  ASSERT_OK_AND_ASSIGN(proto::GlobalMountRecord forced, table_->MarkRemoving("/global/x", true));
  EXPECT_TRUE(forced.force());
  EXPECT_GT(forced.generation(), marked.generation());
  EXPECT_EQ(table_->Forget("/global/x", marked.generation()).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(table_->Forget("/global/x", forced.generation()));
  EXPECT_TRUE(Paths().empty());
  EXPECT_EQ(table_->Forget("/global/x", 0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_->MarkRemoving("/global/x", false).status().code(), absl::StatusCode::kNotFound);
  // And it may be mounted again.
  ASSERT_OK(table_->Add("/global/x", "/", "", "").status());
}

TEST_F(MountTableTest, WaitChangedReturnsAtAChangeOrAfterItsTimeout) {
  const uint64_t inc = table_->incarnation(), version = table_->version();
  const absl::Time t0 = absl::Now();
  table_->WaitChanged(inc, version, absl::Milliseconds(50));
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(45));
  // Another incarnation (the agent knew an older primary's): at once.
  table_->WaitChanged(inc + 1, version, absl::Seconds(60));
  std::thread adder([this] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_OK(table_->Add("/global/w", "/", "", "").status());
  });
  table_->WaitChanged(inc, version, absl::Seconds(60));  // the change ends it
  EXPECT_NE(table_->version(), version);
  adder.join();
  table_->Shutdown();
  table_->WaitChanged(inc, table_->version(), absl::Seconds(60));  // at once
}

TEST_F(MountTableTest, TheOfflineCheckKnowsTheRecords) {
  ASSERT_OK(table_->Add("/global/x", "/", "ro", "").status());
  ASSERT_OK(table_->MarkRemoving("/global/x", false).status());
  ASSERT_OK(table_->Add("/global/y", "/", "", "").status());
  table_.reset();
  volume_.reset();
  FsckOptions o;
  o.data_dir = dir_;
  ASSERT_OK_AND_ASSIGN(FsckReport r, CheckVolume(o));
  EXPECT_TRUE(r.clean()) << r.Summary();
}

// --- nodes ------------------------------------------------------------------------

proto::NodeHeartbeatRequest Beat(const std::string& node) {
  proto::NodeHeartbeatRequest hb;
  hb.set_node(node);
  hb.set_agent_version("0.1.0");
  proto::NodeMountState* m = hb.add_mounts();
  m->set_path("/global/x");
  m->set_generation(7);
  m->set_state(proto::NodeMountState::MOUNTED);
  return hb;
}

TEST(NodeTableTest, ANodeIsAliveUntilItsHeartbeatsStop) {
  FakeClock clock;
  NodeTableOptions o;
  o.clock = &clock;
  o.wall_clock = &clock;
  o.node_timeout = absl::Seconds(5);
  NodeTable nodes(o);
  // A new table (a primary that started or took over) settles for one node
  // timeout: nodes it has not heard from may still call in.
  EXPECT_EQ(nodes.Settling(), absl::Seconds(5));
  ASSERT_OK(nodes.Heartbeat(Beat("n2"), "node:default", "ipv4:10.0.0.2:4000"));
  ASSERT_OK(nodes.Heartbeat(Beat("n1"), "", "ipv4:10.0.0.1:4000"));
  clock.Advance(absl::Seconds(3));
  EXPECT_EQ(nodes.Settling(), absl::Seconds(2));
  ASSERT_OK(nodes.Heartbeat(Beat("n1"), "", "ipv4:10.0.0.1:4001"));
  clock.Advance(absl::Seconds(3));
  std::vector<proto::NodeInfo> list = nodes.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].node(), "n1");
  EXPECT_TRUE(list[0].alive());
  EXPECT_EQ(list[0].heartbeat_age_ms(), 3000);
  EXPECT_EQ(list[0].address(), "ipv4:10.0.0.1:4001");
  ASSERT_EQ(list[0].mounts_size(), 1);
  EXPECT_EQ(list[0].mounts(0).state(), proto::NodeMountState::MOUNTED);
  EXPECT_EQ(list[1].node(), "n2");
  EXPECT_FALSE(list[1].alive());
  EXPECT_EQ(list[1].peer(), "node:default");
  EXPECT_EQ(list[1].agent_version(), "0.1.0");
  EXPECT_EQ(nodes.Settling(), absl::ZeroDuration());
}

TEST(NodeTableTest, BadHeartbeatsAreRefused) {
  NodeTable nodes;
  for (const char* name : {"", "a b", "a/b", "n\n"}) {
    EXPECT_EQ(nodes.Heartbeat(Beat(name), "", "x").code(), absl::StatusCode::kInvalidArgument)
        << name;
  }
  EXPECT_EQ(nodes.Heartbeat(Beat(std::string(65, 'n')), "", "x").code(),
            absl::StatusCode::kInvalidArgument);
  proto::NodeHeartbeatRequest many = Beat("n1");
  for (int i = 0; i < 1100; ++i) *many.add_mounts() = many.mounts(0);
  EXPECT_EQ(nodes.Heartbeat(many, "", "x").code(), absl::StatusCode::kInvalidArgument);
  // A node's own certificate speaks for its name only; the shared one for any.
  EXPECT_EQ(nodes.Heartbeat(Beat("n2"), "node:n1", "x").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_OK(nodes.Heartbeat(Beat("n1"), "node:n1", "x"));
  EXPECT_OK(nodes.Heartbeat(Beat("n2"), "node:default", "x"));
  // Long reasons are cut.
  proto::NodeHeartbeatRequest wordy = Beat("n3");
  wordy.mutable_mounts(0)->set_reason(std::string(5000, 'r'));
  ASSERT_OK(nodes.Heartbeat(wordy, "", "x"));
  EXPECT_EQ(nodes.List().back().mounts(0).reason().size(), 512u);
}

TEST(NodeTableTest, TwoAgentsWithOneNameAreToldApartARestartIsNot) {
  FakeClock clock;
  NodeTableOptions o;
  o.clock = &clock;
  o.wall_clock = &clock;
  NodeTable nodes(o);
  proto::NodeHeartbeatRequest a = Beat("n1"), b = Beat("n1");
  a.set_instance(1);
  b.set_instance(2);
  ASSERT_OK(nodes.Heartbeat(a, "", "ipv4:10.0.0.1:1"));
  clock.Advance(absl::Seconds(1));
  ASSERT_OK(nodes.Heartbeat(b, "", "ipv4:10.0.0.2:1"));  // a restart, or a second agent
  EXPECT_EQ(nodes.List()[0].conflict(), "");
  clock.Advance(absl::Seconds(1));
  absl::Status s = nodes.Heartbeat(a, "", "ipv4:10.0.0.1:1");  // the first one still calls
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_THAT(s.message(), HasSubstr("taken by another agent, at ipv4:10.0.0.2:1"));
  ASSERT_OK(nodes.Heartbeat(b, "", "ipv4:10.0.0.2:1"));  // the last one keeps the name
  EXPECT_THAT(nodes.List()[0].conflict(), HasSubstr("two agents report as this node"));
  // It keeps being refused while it calls; once silent, the conflict goes.
  clock.Advance(absl::Seconds(4));
  EXPECT_EQ(nodes.Heartbeat(a, "", "x").code(), absl::StatusCode::kAlreadyExists);
  for (int i = 0; i < 6; ++i) {
    clock.Advance(absl::Seconds(1));
    ASSERT_OK(nodes.Heartbeat(b, "", "ipv4:10.0.0.2:1"));
  }
  EXPECT_EQ(nodes.List()[0].conflict(), "");
  EXPECT_EQ(nodes.List()[0].address(), "ipv4:10.0.0.2:1");
}

TEST(NodeTableTest, AReplacedAgentIsTakenBackOnceTheOneThatReplacedItDies) {
  FakeClock clock;
  NodeTableOptions o;
  o.clock = &clock;
  o.wall_clock = &clock;
  NodeTable nodes(o);
  proto::NodeHeartbeatRequest a = Beat("n1"), b = Beat("n1");
  a.set_instance(1);
  b.set_instance(2);
  ASSERT_OK(nodes.Heartbeat(a, "", "ipv4:10.0.0.1:1"));
  clock.Advance(absl::Seconds(1));
  ASSERT_OK(nodes.Heartbeat(b, "", "ipv4:10.0.0.2:1"));  // b replaces a
  // a keeps calling (refused) while b is alive; then b dies.
  for (int i = 0; i < 4; ++i) {
    clock.Advance(absl::Seconds(1));
    EXPECT_EQ(nodes.Heartbeat(a, "", "ipv4:10.0.0.1:1").code(), absl::StatusCode::kAlreadyExists);
  }
  for (int i = 0; i < 10; ++i) {
    clock.Advance(absl::Seconds(1));
    (void)nodes.Heartbeat(a, "", "ipv4:10.0.0.1:1");
  }
  // b silent for longer than the node timeout: a is the node's agent again.
  ASSERT_OK(nodes.Heartbeat(a, "", "ipv4:10.0.0.1:1"));
  EXPECT_EQ(nodes.List()[0].address(), "ipv4:10.0.0.1:1");
  EXPECT_TRUE(nodes.List()[0].alive());
}

TEST(NodeTableTest, OnlyStatesOfTablePathsAreKeptAndLongSilentNodesForgotten) {
  FakeClock clock;
  NodeTableOptions o;
  o.clock = &clock;
  o.wall_clock = &clock;
  NodeTable nodes(o);
  proto::NodeHeartbeatRequest hb = Beat("a");
  hb.add_mounts()->set_path("/not/in/the/table");
  const std::set<std::string> table = {"/global/x"};
  ASSERT_OK(nodes.Heartbeat(hb, "", "x", &table));
  ASSERT_EQ(nodes.List().size(), 1u);
  ASSERT_EQ(nodes.List()[0].mounts_size(), 1);
  EXPECT_EQ(nodes.List()[0].mounts(0).path(), "/global/x");
  clock.Advance(absl::Minutes(59));
  ASSERT_OK(nodes.Heartbeat(Beat("b"), "", "x", &table));
  EXPECT_EQ(nodes.List().size(), 2u);  // a: down, still listed
  clock.Advance(absl::Minutes(2));
  ASSERT_OK(nodes.Heartbeat(Beat("b"), "", "x", &table));
  ASSERT_EQ(nodes.List().size(), 1u);  // a: silent over an hour, forgotten
  EXPECT_EQ(nodes.List()[0].node(), "b");
}

TEST(NodeTableTest, WhenFullASilentNodeMakesRoomALiveOneDoesNot) {
  FakeClock clock;
  NodeTableOptions o;
  o.clock = &clock;
  o.max_nodes = 2;
  NodeTable nodes(o);
  ASSERT_OK(nodes.Heartbeat(Beat("a"), "", "x"));
  ASSERT_OK(nodes.Heartbeat(Beat("b"), "", "x"));
  EXPECT_EQ(nodes.Heartbeat(Beat("c"), "", "x").code(), absl::StatusCode::kResourceExhausted);
  clock.Advance(absl::Seconds(10));
  ASSERT_OK(nodes.Heartbeat(Beat("b"), "", "x"));
  ASSERT_OK(nodes.Heartbeat(Beat("c"), "", "x"));  // a, silent longest, goes
  std::vector<proto::NodeInfo> list = nodes.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].node(), "b");
  EXPECT_EQ(list[1].node(), "c");
}

}  // namespace
}  // namespace grantfs
