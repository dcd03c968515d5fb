// The fixture the replication tests share (replication_test.cc,
// replication_failover_test.cc, replication_input_test.cc): a witness on a
// gRPC server, a primary (Volume + Replicator) and a replica (Replica on its
// own gRPC server), all real, on loopback and temporary directories; and
// helpers that wait, make data and compare whole namespaces. Test code only.
#ifndef GRANTFS_SERVER_REPLICATION_TEST_UTIL_H_
#define GRANTFS_SERVER_REPLICATION_TEST_UTIL_H_

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
#include "common/bytes_test_util.h"
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

using proto::ReplAck;
using proto::ReplMessage;
using proto::WitnessReply;
using proto::WitnessRequest;
using ::testing::HasSubstr;

// Short leases keep failover tests fast; every wait below is a bounded poll.
inline constexpr absl::Duration kLease = absl::Milliseconds(300);
inline constexpr uint64_t kMiB = 1 << 20;
inline constexpr char kPrimary[] = "primary.test:7420";  // a name only: nobody dials it

// Polls `pred` until it holds or `timeout` passes.
inline bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout = absl::Seconds(10)) {
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
inline void UseServerStores(ReplicaOptions* o) {
  o->open_chunks = [](const std::string& dir) -> absl::StatusOr<std::unique_ptr<ChunkApplier>> {
    ChunkStoreOptions co;
    co.dir = dir;
    return ChunkStore::Create(co);
  };
  o->identity_key = keys::Identity();
}

inline int PickPort() {
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
inline std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed * 7) % 251 + 1);
  return s;
}

// The whole namespace under `ino`: path -> attributes, xattrs, and the
// file's bytes or the link's target.
using Tree = std::map<std::string, std::string>;

inline absl::Status Walk(Volume* v, const RequestContext& ctx, uint64_t ino,
                         const std::string& path, Tree* out) {
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

inline ::testing::AssertionResult SameTree(const Tree& want, const Tree& got) {
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
    vo.meta_lease = primary_meta_lease_;
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

  void StartReplica(absl::Duration failover = kLease,
                    const std::function<void(ReplicaOptions*)>& tweak = nullptr) {
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
    if (tweak) tweak(&o);
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
    vo.meta_lease = absl::ZeroDuration();  // no client here takes metadata leases
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
  // The primary's metadata lease: 0, as no client here takes leases, unless
  // a test sets it before StartPrimary.
  absl::Duration primary_meta_lease_ = absl::ZeroDuration();
  std::unique_ptr<Replicator> replicator_;
  std::unique_ptr<Volume> volume_;
  RequestContext ctx_;

  std::unique_ptr<Replica> replica_;
  std::unique_ptr<grpc::Server> replica_server_;

  absl::Mutex mu_;
  std::vector<uint64_t> promoted_ ABSL_GUARDED_BY(mu_);
  bool primary_serving_at_promotion_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_REPLICATION_TEST_UTIL_H_
