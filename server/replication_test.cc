// Replication end to end, in one process: a witness on a gRPC server, a
// primary (Volume + Replicator) and a replica (Replica on its own gRPC
// server), all real, on loopback and temporary directories.
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
#include "server/volume.h"

namespace grantfs {
namespace {

using proto::ReplAck;
using proto::ReplMessage;
using proto::WitnessReply;
using proto::WitnessRequest;
using ::testing::HasSubstr;

// Short leases keep failover tests fast; every wait below is a bounded poll.
constexpr absl::Duration kLease = absl::Milliseconds(300);
constexpr uint64_t kMiB = 1 << 20;
constexpr char kPrimary[] = "primary.test:7420";  // a name only: nobody dials it

// Polls `pred` until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!pred()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// A loopback port free right now (the replica binds it later, and again
// after a restart).
// A replica's copy keeps its chunks in the server's chunk store.
void UseServerStores(ReplicaOptions* o) {
  o->open_chunks = [](const std::string& dir) -> absl::StatusOr<std::unique_ptr<ChunkApplier>> {
    ChunkStoreOptions co;
    co.dir = dir;
    return ChunkStore::Create(co);
  };
  o->identity_key = keys::Identity();
}

int PickPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    return 0;
  }
  close(fd);
  return ntohs(a.sin_port);
}

// Bytes that differ at every offset, so a misplaced copy is noticed.
std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed * 7) % 251 + 1);
  return s;
}

// Compares byte strings without printing megabytes on a mismatch.
::testing::AssertionResult SameBytes(const std::string& want, const std::string& got) {
  if (want == got) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  return ::testing::AssertionFailure() << "sizes want " << want.size() << " got " << got.size()
                                       << "; first difference at byte " << i;
}

// The whole namespace under `ino`: path -> attributes, xattrs, and the
// file's bytes or the link's target.
using Tree = std::map<std::string, std::string>;

absl::Status Walk(Volume* v, const RequestContext& ctx, uint64_t ino, const std::string& path,
                  Tree* out) {
  ASSIGN_OR_RETURN(proto::Attr attr, v->GetAttr(ctx, ino));
  std::string d = attr.ShortDebugString();
  ASSIGN_OR_RETURN(std::vector<std::string> names, v->ListXattr(ctx, ino));
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    ASSIGN_OR_RETURN(std::string value, v->GetXattr(ctx, ino, n));
    absl::StrAppend(&d, " xattr ", n, "=", value);
  }
  if (S_ISREG(attr.mode())) {
    std::string data;
    for (uint64_t off = 0; off < attr.size(); off += 4 * kMiB) {
      ASSIGN_OR_RETURN(std::string piece, v->Read(ctx, ino, off, 4 * kMiB));
      data += piece;
    }
    absl::StrAppend(&d, " data:", data);
  } else if (S_ISLNK(attr.mode())) {
    ASSIGN_OR_RETURN(std::string target, v->ReadLink(ctx, ino));
    absl::StrAppend(&d, " target:", target);
  }
  (*out)[path] = d;
  if (!S_ISDIR(attr.mode())) return absl::OkStatus();
  uint64_t cookie = 0;
  for (;;) {
    proto::ReadDirReply reply;
    RETURN_IF_ERROR(v->ReadDir(ctx, ino, cookie, 64, &reply));
    for (const proto::DirEntry& e : reply.entries()) {
      cookie = e.cookie();
      if (e.name() == "." || e.name() == "..") continue;
      RETURN_IF_ERROR(Walk(v, ctx, e.attr().ino(), path + "/" + e.name(), out));
    }
    if (reply.eof() || reply.entries_size() == 0) break;
  }
  return absl::OkStatus();
}

::testing::AssertionResult SameTree(const Tree& want, const Tree& got) {
  if (want.size() != got.size()) {
    std::string w, g;
    for (const auto& [k, v] : want) absl::StrAppend(&w, k, " ");
    for (const auto& [k, v] : got) absl::StrAppend(&g, k, " ");
    return ::testing::AssertionFailure() << "paths differ: want [" << w << "] got [" << g << "]";
  }
  for (const auto& [path, d] : want) {
    auto it = got.find(path);
    if (it == got.end()) return ::testing::AssertionFailure() << path << " missing";
    if (it->second != d) {
      return ::testing::AssertionFailure()
             << path << ": " << SameBytes(d, it->second).message() << "\nwant " << d.substr(0, 300)
             << "\ngot  " << it->second.substr(0, 300);
    }
  }
  return ::testing::AssertionSuccess();
}

class ReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/replication_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << strerror(errno);
    root_ = tmpl;
    primary_dir_ = root_ + "/primary";
    replica_dir_ = root_ + "/replica";
    ASSERT_TRUE(std::filesystem::create_directory(primary_dir_));
    ASSERT_TRUE(std::filesystem::create_directory(replica_dir_));
    replica_port_ = PickPort();
    ASSERT_NE(replica_port_, 0);
    replica_addr_ = absl::StrCat("127.0.0.1:", replica_port_);
    StartWitness();
  }

  void TearDown() override {
    StopReplica();  // first: its on_promoted looks at the primary
    StopPrimary();
    if (witness_server_) {
      witness_server_->Shutdown(std::chrono::system_clock::now());
      witness_server_->Wait();
    }
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  // --- the witness ---------------------------------------------------------

  void StartWitness() {
    WitnessOptions wo;
    wo.dir = root_ + "/witness";
    wo.lease = kLease;
    auto w = WitnessService::Open(wo);
    ASSERT_TRUE(w.ok()) << w.status();
    witness_ = *std::move(w);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(witness_.get());
    witness_server_ = b.BuildAndStart();
    ASSERT_NE(port, 0);
    witness_addr_ = absl::StrCat("127.0.0.1:", port);
  }

  // What server/main.cc's MakeWitnessCall builds, plus a switch that cuts
  // the caller off from the witness (calls fail as unreachable).
  WitnessCall MakeWitnessCall(const std::string& self, std::atomic<bool>* cut) {
    auto client = std::make_shared<WitnessClient>(witness_addr_, Transport());
    return [client, self, cut](WitnessRequest req) -> absl::StatusOr<WitnessReply> {
      if (cut != nullptr && cut->load()) return absl::UnavailableError("cut off by the test");
      req.set_server(self);
      return client->Update(req);
    };
  }

  proto::WitnessState WitnessState() { return witness_->state(); }

  // --- the primary -----------------------------------------------------------

  // Claims the epoch like main.cc, opens the volume with the Replicator as
  // its change sink; starts the Replicator when `start`.
  void StartPrimary(bool start = true,
                    const std::function<void(ReplicatorOptions*)>& tweak = nullptr) {
    WitnessCall call = MakeWitnessCall(kPrimary, &primary_cut_);
    const absl::Time sent = Clock::Monotonic()->Now();
    // With the data of the primary's directory, as main.cc claims.
    absl::StatusOr<DataDirInfo> data = InspectDataDir(primary_dir_);
    ASSERT_TRUE(data.ok()) << data.status();
    WitnessRequest claim;
    claim.set_op(WitnessRequest::CLAIM);
    claim.set_epoch(WitnessState().epoch());
    if (data->state == DataDirState::kVolume) *claim.mutable_data() = *data->identity;
    absl::StatusOr<WitnessReply> r = call(claim);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->granted()) << r->reason();
    epoch_ = r->state().epoch();

    ReplicatorOptions ro;
    ro.self = kPrimary;
    ro.peer = replica_addr_;
    ro.witness = witness_addr_;
    ro.epoch = epoch_;
    ro.data_dir = primary_dir_;
    ro.witness_call = call;
    ro.checkpoint = [this](const std::string& dir) {
      return volume_->meta().store().Checkpoint(dir);
    };
    ro.identity = [this] { return volume_->meta().store().identity(); };
    ro.on_fenced = [this] { fenced_.fetch_add(1); };
    ro.lease = kLease;
    ro.replica_timeout = kLease;
    ro.granted_at = sent;
    if (tweak) tweak(&ro);
    replicator_ = std::make_unique<Replicator>(ro);

    VolumeOptions vo;
    vo.dir = primary_dir_;
    vo.capacity_bytes = 1ull << 30;
    vo.change_sink = replicator_.get();
    vo.epoch = epoch_;
    vo.background = false;
    auto v = Volume::Open(vo);
    ASSERT_TRUE(v.ok()) << v.status();
    volume_ = *std::move(v);
    ctx_.client_id = volume_->sessions().Open("test");
    if (start) replicator_->Start();
  }

  void StopPrimary() {
    if (replicator_) replicator_->Stop();  // its threads use the volume
    volume_.reset();
    replicator_.reset();
  }

  // --- the replica -------------------------------------------------------------

  void StartReplica(absl::Duration failover = kLease) {
    ReplicaOptions o;
    o.self = replica_addr_;
    o.peer = kPrimary;
    o.witness = witness_addr_;
    o.data_dir = replica_dir_;
    UseServerStores(&o);
    o.witness_call = MakeWitnessCall(replica_addr_, nullptr);
    o.failover_timeout = failover;
    o.on_promoted = [this](uint64_t epoch) {
      std::string why;
      const bool primary_serving = replicator_ != nullptr && replicator_->Serving(&why);
      absl::MutexLock l(&mu_);
      promoted_.push_back(epoch);
      primary_serving_at_promotion_ = primary_serving;
    };
    auto r = Replica::Open(o);
    ASSERT_TRUE(r.ok()) << r.status();
    replica_ = *std::move(r);
    grpc::ServerBuilder b;
    b.SetMaxReceiveMessageSize(16 << 20);  // as server/main.cc
    b.SetMaxSendMessageSize(16 << 20);
    AllowClientKeepalive(&b);
    int port = 0;
    b.AddListeningPort(replica_addr_, grpc::InsecureServerCredentials(), &port);
    b.RegisterService(replica_.get());
    replica_server_ = b.BuildAndStart();
    ASSERT_EQ(port, replica_port_) << "could not bind the replica's port again";
    replica_->Start();
  }

  // The replica's gRPC server goes away (its process is "killed"); the
  // Replica object lives on.
  void KillReplicaServer() {
    if (!replica_server_) return;
    replica_server_->Shutdown(std::chrono::system_clock::now());
    replica_server_->Wait();
    replica_server_.reset();
  }

  void StopReplica() {
    KillReplicaServer();
    replica_.reset();
  }

  std::vector<uint64_t> Promoted() {
    absl::MutexLock l(&mu_);
    return promoted_;
  }

  // --- states ---------------------------------------------------------------------

  // In sync (the witness knows) and every change acknowledged.
  bool InSyncAndCaughtUp() {
    return replicator_->ReplicaState() == "in sync" &&
           replicator_->AckedSeq() == replicator_->Head() && WitnessState().replica_in_sync();
  }
  void WaitInSync() {
    ASSERT_TRUE(WaitFor([this] { return InSyncAndCaughtUp(); }))
        << "replica state " << replicator_->ReplicaState() << ", acked " << replicator_->AckedSeq()
        << " of " << replicator_->Head();
  }

  // --- volume helpers ---------------------------------------------------------------

  absl::StatusOr<proto::Attr> Make(const std::string& name, uint32_t mode,
                                   uint64_t parent = kRootIno) {
    proto::MkNodRequest req;
    req.set_parent(parent);
    req.set_name(name);
    req.set_mode(mode);
    req.set_exclusive(true);
    return volume_->MkNod(ctx_, req);
  }
  absl::StatusOr<proto::Attr> Truncate(uint64_t ino, uint64_t size) {
    proto::SetAttrRequest req;
    req.set_ino(ino);
    req.set_valid(proto::SetAttrRequest::SIZE);
    req.set_size(size);
    return volume_->SetAttr(ctx_, req);
  }

  Tree PrimaryTree() {
    Tree t;
    absl::Status s = Walk(volume_.get(), ctx_, kRootIno, "", &t);
    EXPECT_TRUE(s.ok()) << s;
    return t;
  }

  // Stops the replica and reads its copy as a volume.
  Tree ReplicaTree() {
    StopReplica();
    VolumeOptions vo;
    vo.dir = replica_dir_;
    vo.capacity_bytes = 1ull << 30;
    vo.background = false;
    auto v = Volume::Open(vo);
    EXPECT_TRUE(v.ok()) << v.status();
    if (!v.ok()) return {};
    RequestContext ctx;
    ctx.client_id = (*v)->sessions().Open("reader");
    Tree t;
    absl::Status s = Walk(v->get(), ctx, kRootIno, "", &t);
    EXPECT_TRUE(s.ok()) << s;
    return t;
  }

  // A file in the replica's meta/ that a snapshot (which empties meta/)
  // would remove.
  std::string Sentinel() { return replica_dir_ + "/meta/sentinel.test"; }

  std::string root_, primary_dir_, replica_dir_;
  int replica_port_ = 0;
  std::string replica_addr_;

  std::unique_ptr<WitnessService> witness_;
  std::unique_ptr<grpc::Server> witness_server_;
  std::string witness_addr_;

  std::atomic<bool> primary_cut_{false};
  std::atomic<int> fenced_{0};
  uint64_t epoch_ = 0;
  std::unique_ptr<Replicator> replicator_;
  std::unique_ptr<Volume> volume_;
  RequestContext ctx_;

  std::unique_ptr<Replica> replica_;
  std::unique_ptr<grpc::Server> replica_server_;

  absl::Mutex mu_;
  std::vector<uint64_t> promoted_ ABSL_GUARDED_BY(mu_);
  bool primary_serving_at_promotion_ ABSL_GUARDED_BY(mu_) = false;
};

// --- 1. snapshot, then live changes ---------------------------------------------------

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

  ASSERT_NO_FATAL_FAILURE(StartReplica());
  ASSERT_NO_FATAL_FAILURE(WaitInSync());
  EXPECT_EQ(replica_->epoch(), epoch_);
  EXPECT_GE(replica_->applied_seq(), head_before);

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

TEST_F(ReplicationTest, EmptyReplicaNeverClaims) {
  // A new cluster (epoch 0): the witness would grant a claim to anybody.
  ASSERT_EQ(WitnessState().epoch(), 0u);
  ASSERT_NO_FATAL_FAILURE(StartReplica());
  absl::SleepFor(8 * kLease);  // many failover timeouts of silence
  EXPECT_TRUE(Promoted().empty());
  EXPECT_EQ(WitnessState().epoch(), 0u);
  EXPECT_EQ(replica_->epoch(), 0u);
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

// --- 9. bad input on the replica ------------------------------------------------------------

class ReplicaInputTest : public ReplicationTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(ReplicationTest::SetUp());
    // No failover during these tests: nobody is primary.
    ASSERT_NO_FATAL_FAILURE(StartReplica(absl::Seconds(60)));
    stub_ = proto::Replication::NewStub(
        grpc::CreateChannel(replica_addr_, grpc::InsecureChannelCredentials()));
  }

  struct Call {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<ReplMessage, ReplAck>> stream;
  };
  std::unique_ptr<Call> Open() {
    auto c = std::make_unique<Call>();
    c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    c->stream = stub_->Stream(&c->ctx);
    return c;
  }
  // A primary's hello, naming volume identity_ (none while unset).
  ReplMessage Hello(uint64_t epoch) {
    ReplMessage m;
    m.mutable_hello()->set_epoch(epoch);
    m.mutable_hello()->set_server("raw.test:1");
    if (identity_) *m.mutable_hello()->mutable_identity() = *identity_;
    return m;
  }
  // Sends the hello; returns the replica's first ack.
  ReplAck Handshake(Call* c, uint64_t epoch) {
    EXPECT_TRUE(c->stream->Write(Hello(epoch)));
    ReplAck a;
    EXPECT_TRUE(c->stream->Read(&a));
    return a;
  }
  // Reads acks until the stream ends; returns the last error seen and the
  // stream's status.
  static grpc::Status Drain(Call* c, std::string* error) {
    c->stream->WritesDone();
    ReplAck a;
    while (c->stream->Read(&a)) {
      if (!a.error().empty()) *error = a.error();
    }
    return c->stream->Finish();
  }

  // A snapshot of a new volume's metadata at (epoch, start_seq).
  void SendSnapshot(Call* c, uint64_t epoch, uint64_t start_seq, bool finish = true) {
    const std::string src = root_ + "/src";
    {
      MetaStoreOptions mo;
      mo.dir = src;
      mo.capacity_bytes = 1 << 30;
      auto m = MetaStore::Open(mo);
      ASSERT_TRUE(m.ok()) << m.status();
      ASSERT_OK((*m)->Checkpoint(root_ + "/cp"));
      identity_ = (*m)->identity();
    }
    ReplMessage h = Hello(epoch);
    h.mutable_hello()->set_snapshot(true);
    h.mutable_hello()->set_start_seq(start_seq);
    ASSERT_TRUE(c->stream->Write(h));
    ReplMessage pieces;
    // CURRENT first: a copy cut short then has a CURRENT without its files.
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(root_ + "/cp")) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
      return (a == "CURRENT") > (b == "CURRENT") || ((a == "CURRENT") == (b == "CURRENT") && a < b);
    });
    for (const std::string& name : names) {
      std::ifstream in(root_ + "/cp/" + name, std::ios::binary);
      std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      proto::SnapshotPiece* p = pieces.add_snapshot();
      p->set_path("meta/" + name);
      p->set_data(data);
      proto::SnapshotPiece* eof = pieces.add_snapshot();
      eof->set_path("meta/" + name);
      eof->set_offset(data.size());
      eof->set_eof(true);
      if (!finish) break;  // only CURRENT
    }
    pieces.set_snapshot_done(finish);
    ASSERT_TRUE(c->stream->Write(pieces));
  }

  static ReplMessage SyncRecord(uint64_t seq) {
    ReplMessage m;
    proto::ReplRecord* r = m.add_records();
    r->set_seq(seq);
    r->mutable_sync()->set_ino(12345);
    r->mutable_sync()->set_a(0);
    return m;
  }

  std::unique_ptr<proto::Replication::Stub> stub_;
  std::optional<proto::VolumeIdentity> identity_;  // of the last snapshot sent
};

TEST_F(ReplicaInputTest, FirstMessageWithoutHelloIsInvalid) {
  auto c = Open();
  ReplMessage m;
  m.set_sent_ns(1);
  ASSERT_TRUE(c->stream->Write(m));
  std::string error;
  grpc::Status s = Drain(c.get(), &error);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  // Epoch 0 is no hello either.
  c = Open();
  ASSERT_TRUE(c->stream->Write(Hello(0)));
  s = Drain(c.get(), &error);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
}

TEST_F(ReplicaInputTest, StaleEpochIsRefused) {
  auto c = Open();
  ReplAck a = Handshake(c.get(), 5);
  EXPECT_TRUE(a.error().empty()) << a.error();
  EXPECT_EQ(a.hello().epoch(), 0u);
  std::string error;
  EXPECT_TRUE(Drain(c.get(), &error).ok());

  c = Open();
  ASSERT_TRUE(c->stream->Write(Hello(3)));
  grpc::Status s = Drain(c.get(), &error);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_THAT(error, HasSubstr("stale epoch"));
}

TEST_F(ReplicaInputTest, SnapshotPathsOutsideTheDataDirAreRefused) {
  for (const char* bad : {"../x", "meta/../../x", "chunks/../../x", "/x", "x", "meta/"}) {
    SCOPED_TRACE(bad);
    auto c = Open();
    ReplAck a = Handshake(c.get(), 7);
    ASSERT_TRUE(a.error().empty()) << a.error();
    ReplMessage h = Hello(7);
    h.mutable_hello()->set_snapshot(true);
    h.mutable_hello()->set_start_seq(1);
    ASSERT_TRUE(c->stream->Write(h));
    ReplMessage m;
    proto::SnapshotPiece* p = m.add_snapshot();
    p->set_path(bad);
    p->set_data("evil");
    ASSERT_TRUE(c->stream->Write(m));
    std::string error;
    grpc::Status s = Drain(c.get(), &error);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_THAT(error, HasSubstr("bad snapshot path"));
  }
  EXPECT_FALSE(std::filesystem::exists(root_ + "/x"));
  std::vector<std::string> top;
  for (const auto& e : std::filesystem::directory_iterator(root_)) {
    top.push_back(e.path().filename().string());
  }
  std::sort(top.begin(), top.end());
  EXPECT_EQ(top, (std::vector<std::string>{"primary", "replica", "witness"}));
  EXPECT_EQ(replica_->epoch(), 0u);
}

TEST_F(ReplicaInputTest, RecordsWithAGapAreRefused) {
  auto c = Open();
  ASSERT_TRUE(Handshake(c.get(), 2).error().empty());
  ASSERT_NO_FATAL_FAILURE(SendSnapshot(c.get(), 2, 10));
  ReplAck a;
  ASSERT_TRUE(c->stream->Read(&a));
  ASSERT_TRUE(a.error().empty()) << a.error();
  EXPECT_EQ(a.applied_seq(), 9u);
  ASSERT_TRUE(c->stream->Write(SyncRecord(10)));
  ASSERT_TRUE(c->stream->Read(&a));
  ASSERT_TRUE(a.error().empty()) << a.error();
  EXPECT_EQ(a.applied_seq(), 10u);
  ASSERT_TRUE(c->stream->Write(SyncRecord(12)));
  std::string error;
  grpc::Status s = Drain(c.get(), &error);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_THAT(error, HasSubstr("change 12 arrived, expected 11"));
  EXPECT_EQ(replica_->applied_seq(), 10u);
  EXPECT_EQ(replica_->epoch(), 2u);

  // A resume that does not start right after the copy is refused too.
  c = Open();
  a = Handshake(c.get(), 2);
  EXPECT_EQ(a.hello().applied_seq(), 10u);
  ReplMessage resume = Hello(2);
  resume.mutable_hello()->set_start_seq(12);
  ASSERT_TRUE(c->stream->Write(resume));
  s = Drain(c.get(), &error);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_THAT(error, HasSubstr("resume at 12"));

  // The position survives a restart.
  StopReplica();
  ASSERT_NO_FATAL_FAILURE(StartReplica(absl::Seconds(60)));
  EXPECT_EQ(replica_->epoch(), 2u);
  EXPECT_EQ(replica_->applied_seq(), 10u);
}

// The replica keeps its copy rather than take a stream of other data: a
// primary restarted on the wrong disk, or (after the witness lost its
// state) an older copy of the volume.
TEST_F(ReplicaInputTest, AStreamOfAnotherVolumeOrOfOlderDataIsRefusedAndTheCopyKept) {
  auto c = Open();
  ASSERT_TRUE(Handshake(c.get(), 2).error().empty());  // an empty copy takes any volume
  ASSERT_NO_FATAL_FAILURE(SendSnapshot(c.get(), 2, 1));
  ReplAck a;
  ASSERT_TRUE(c->stream->Read(&a));
  ASSERT_TRUE(a.error().empty()) << a.error();
  std::string error;
  EXPECT_TRUE(Drain(c.get(), &error).ok());
  const proto::VolumeIdentity copy = *identity_;
  ASSERT_EQ(copy.data_epoch(), 1u);
  proto::StatusReply st;
  replica_->FillStatus(&st);
  EXPECT_EQ(st.volume_id(), copy.volume_id());
  EXPECT_EQ(st.data_epoch(), 1u);

  // A stream that ends makes the replica ask the witness at once whether the
  // role was handed to it; meanwhile it turns new streams away ("taking
  // over") or cancels them. Each stream below is tried again past that.
  auto stream = [&](const std::optional<proto::VolumeIdentity>& primary, uint64_t epoch,
                    grpc::Status* status) {
    identity_ = primary;
    std::string error;
    for (int i = 0; i < 200; ++i) {
      auto c = Open();
      EXPECT_TRUE(c->stream->Write(Hello(epoch)));
      error.clear();
      *status = Drain(c.get(), &error);
      if (error != "this server is taking over" &&
          status->error_code() != grpc::StatusCode::CANCELLED) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return error;
  };
  auto refused = [&](const std::optional<proto::VolumeIdentity>& primary, uint64_t epoch) {
    grpc::Status s;
    std::string error = stream(primary, epoch, &s);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    return error;
  };
  auto accepted = [&](const std::optional<proto::VolumeIdentity>& primary, uint64_t epoch) {
    grpc::Status s;
    std::string error = stream(primary, epoch, &s);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return error;
  };
  proto::VolumeIdentity other = copy;
  other.set_volume_id("fedcba9876543210fedcba9876543210");
  other.set_data_epoch(9);
  EXPECT_EQ(refused(other, 3),
            "the primary serves volume fedcba9876543210fedcba9876543210 but "
            "this copy is of volume " +
                copy.volume_id());
  EXPECT_THAT(refused(std::nullopt, 3), HasSubstr("the primary serves volume (none named)"));
  proto::VolumeIdentity older = copy;
  older.set_data_epoch(0);
  EXPECT_EQ(refused(older, 3),
            "the primary's data (data epoch 0) is older than this copy (data "
            "epoch 1)");
  EXPECT_EQ(refused(copy, 3),
            "the primary's data (epoch 3) and this copy (epoch 2) are both at "
            "data epoch 1: two histories of the volume");
  EXPECT_EQ(replica_->epoch(), 2u);
  EXPECT_TRUE(std::filesystem::exists(replica_dir_ + "/meta/CURRENT"));

  // The same data from the same epoch resumes; newer data replaces it.
  EXPECT_EQ(accepted(copy, 2), "");
  proto::VolumeIdentity newer = copy;
  newer.set_data_epoch(3);
  EXPECT_EQ(accepted(newer, 3), "");
}

TEST_F(ReplicaInputTest, ASnapshotCutShortLeavesAReplicaThatStillOpens) {
  auto c = Open();
  ASSERT_TRUE(Handshake(c.get(), 4).error().empty());
  ASSERT_NO_FATAL_FAILURE(SendSnapshot(c.get(), 4, 1, /*finish=*/false));
  c->ctx.TryCancel();  // the primary goes away in the middle
  c->stream->Finish();
  ASSERT_TRUE(WaitFor([this] {
    proto::StatusReply st;
    replica_->FillStatus(&st);
    return st.replica_state() == "waiting";
  }));
  EXPECT_EQ(replica_->epoch(), 0u);
  // The replica process restarts (or crashed mid-snapshot): it must come
  // back as an empty replica, not refuse to start on a half copy.
  KillReplicaServer();
  replica_.reset();
  ReplicaOptions o;
  o.self = replica_addr_;
  o.data_dir = replica_dir_;
  UseServerStores(&o);
  o.witness_call = MakeWitnessCall(replica_addr_, nullptr);
  auto r = Replica::Open(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->epoch(), 0u);
  EXPECT_FALSE(std::filesystem::exists(replica_dir_ + "/meta/CURRENT"));
}

TEST_F(ReplicaInputTest, WrongSecretIsRefused) {
  StopReplica();
  ReplicaOptions o;
  o.self = replica_addr_;
  o.data_dir = replica_dir_;
  UseServerStores(&o);
  o.transport = Transport::Insecure("s3cret");
  o.witness_call = MakeWitnessCall(replica_addr_, nullptr);
  auto r = Replica::Open(o);
  ASSERT_TRUE(r.ok()) << r.status();
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort(replica_addr_, grpc::InsecureServerCredentials(), &port);
  b.RegisterService(r->get());
  auto server = b.BuildAndStart();
  ASSERT_EQ(port, replica_port_);
  auto c = std::make_unique<Call>();
  c->ctx.AddMetadata("x-grantfs-secret", "wrong");
  c->stream = stub_->Stream(&c->ctx);
  c->stream->Write(Hello(1));
  std::string error;
  EXPECT_EQ(Drain(c.get(), &error).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
}

}  // namespace
}  // namespace grantfs
