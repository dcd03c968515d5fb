// libFuzzer target: arbitrary requests to every handler of GrantFsService,
// called in-process over a real Volume (RocksDB and chunk files in a new
// directory under $GRANTFS_FUZZ_DIR or /dev/shm for each input, so that an
// input that fails fails again alone; no background thread). After each
// input the volume's invariants must hold: the online metadata check
// (server/fsck.h) of the open volume, and, when it holds file data, the
// offline check of its closed data directory, chunk files included, must
// find nothing, else abort().
//
// Input: a sequence of steps, each (method byte, flags byte, request bytes
// parsed as that method's request). The flags make the call plausible
// often enough to get past the checks at the door: the session opened
// before the first step (else the request's own client id), root's
// credentials (else the request's own), a fresh sequence number (else the
// request's own, to reach the exactly-once records), the cluster secret
// (else none: UNAUTHENTICATED). One method number is not a handler: the
// volume's maintenance round (what the background thread does).
// docs/testing.md, "Fuzzing".
#include <grpcpp/grpcpp.h>
#include <grpcpp/test/server_context_test_spouse.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/fuzz_input.h"
#include "glog/logging.h"
#include "server/fsck.h"
#include "server/service.h"
#include "server/volume.h"

namespace grantfs {
namespace {

constexpr char kSecret[] = "fuzz-secret";

// The flags byte of a step.
constexpr uint8_t kOwnClientId = 0x03;  // both bits set: the request's client id
constexpr uint8_t kOwnCreds = 0x04;
constexpr uint8_t kOwnSeq = 0x08;
constexpr uint8_t kNoSecret = 0x30;  // both bits set: no secret

// Aborts with the problems when the check found any (or could not run).
void RequireClean(const absl::StatusOr<FsckReport>& report, const char* which) {
  if (!report.ok()) {
    fprintf(stderr, "service_fuzz: the %s check could not run: %s\n", which,
            report.status().ToString().c_str());
    abort();
  }
  if (report->clean()) return;
  fprintf(stderr, "service_fuzz: the %s check found problems: %s\n", which,
          report->Summary().c_str());
  for (const FsckProblem& p : report->problems) fprintf(stderr, "  %s\n", p.ToString().c_str());
  abort();
}

// One input's volume and service, and the session every plausible step uses.
class Run {
 public:
  Run() {
    std::string tmpl = FuzzTempDir() + "/grantfs-service-fuzz-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) abort();
    dir_ = tmpl;
    std::filesystem::create_directory(dir_ + "/vol");
    VolumeOptions vo;
    vo.dir = dir_ + "/vol";
    vo.capacity_bytes = 16 << 20;
    vo.metadata_reserve_bytes = 1 << 20;
    vo.background = false;
    vo.direct_io = false;  // tmpfs
    vo.sync_data = false;
    // Waits a change may make for other sessions (their grants, their
    // leases) stay short: an input is done in milliseconds.
    vo.recall_wait = absl::Milliseconds(5);
    vo.meta_lease = absl::Milliseconds(50);
    absl::StatusOr<std::unique_ptr<Volume>> v = Volume::Open(vo);
    if (!v.ok()) {
      fprintf(stderr, "service_fuzz: Volume::Open: %s\n", v.status().ToString().c_str());
      abort();
    }
    volume_ = *std::move(v);
    ServiceOptions so;
    so.transport = Transport::Insecure(kSecret);
    service_ = std::make_unique<GrantFsService>(volume_.get(), so);
    grpc::ServerContext ctx;
    auto secret = Authorize(&ctx, true);
    proto::OpenSessionRequest req;
    req.set_client_name("fuzz");
    proto::OpenSessionReply reply;
    if (!service_->OpenSession(&ctx, &req, &reply).ok() || reply.err() != 0) abort();
    client_id_ = reply.client_id();
    // The session's mount has its recall stream up, so the handlers grant
    // and recall leases.
    volume_->leases().StreamUp(client_id_, true);
  }

  ~Run() {
    RequireClean(volume_->CheckMetadata(), "online");
    // The offline check reads the chunk files too, but costs as much as the
    // rest of an input (it forks to look at the store's lock): it runs when
    // there is file data to check, in the records (used) or on disk.
    const bool data =
        volume_->Space().used_bytes > 0 || !std::filesystem::is_empty(dir_ + "/vol/chunks");
    service_.reset();
    volume_.reset();
    if (data) {
      FsckOptions fo;
      fo.data_dir = dir_ + "/vol";
      RequireClean(CheckVolume(fo), "offline");
    }
    std::filesystem::remove_all(dir_);
  }

  void Step(FuzzInput& in) {
    const uint8_t method = in.Byte();
    flags_ = in.Byte();
    const std::string bytes = in.Bytes();
    using S = GrantFsService;
    switch (method % 37) {
      case 0:
        return Call(&S::OpenSession, bytes);
      case 1:
        return Call(&S::Heartbeat, bytes);
      case 2:
        return Call(&S::Reclaim, bytes);
      case 3:
        return Call(&S::CloseSession, bytes);
      case 4:
        return Subscribe(bytes);
      case 5:
        return Call(&S::AckRecall, bytes);
      case 6:
        return Call(&S::Lookup, bytes);
      case 7:
        return Call(&S::GetAttr, bytes);
      case 8:
        return Call(&S::SetAttr, bytes);
      case 9:
        return Call(&S::MkNod, bytes);
      case 10:
        return Call(&S::Symlink, bytes);
      case 11:
        return Call(&S::Link, bytes);
      case 12:
        return Call(&S::Remove, bytes);
      case 13:
        return Call(&S::Rename, bytes);
      case 14:
        return Call(&S::ReadLink, bytes);
      case 15:
        return Call(&S::ReadDir, bytes);
      case 16:
        return Call(&S::Open, bytes);
      case 17:
        return Call(&S::Release, bytes);
      case 18:
        return Call(&S::Read, bytes);
      case 19:
        return Call(&S::Write, bytes);
      case 20:
        return Call(&S::Grant, bytes);
      case 21:
        return Call(&S::Fsync, bytes);
      case 22:
        return Call(&S::Fallocate, bytes);
      case 23:
        return Call(&S::StatFs, bytes);
      case 24:
        return Call(&S::SetXattr, bytes);
      case 25:
        return Call(&S::GetXattr, bytes);
      case 26:
        return Call(&S::ListXattr, bytes);
      case 27:
        return Call(&S::RemoveXattr, bytes);
      case 28:
        return Call(&S::GetLock, bytes);
      case 29:
        return Call(&S::SetLock, bytes);
      case 30:
        return Call(&S::Status, bytes);
      case 31:
        return Call(&S::Echo, bytes);
      case 32:
        return Call(&S::Switchover, bytes);
      case 33:
        return Call(&S::Check, bytes);
      case 34: {
        absl::StatusOr<int> freed = volume_->RunMaintenance();
        (void)freed;
        return;
      }
      case 35:
        return Call(&S::InodeRange, bytes);
      case 36:
        return Call(&S::ApplyLog, bytes);
    }
  }

 private:
  // The call carries the cluster secret unless the step says not to. The
  // context's metadata points into the returned object: keep it for the
  // call.
  static std::unique_ptr<grpc::testing::ServerContextTestSpouse> Authorize(grpc::ServerContext* ctx,
                                                                           bool secret) {
    auto spouse = std::make_unique<grpc::testing::ServerContextTestSpouse>(ctx);
    if (secret) spouse->AddClientMetadata("x-grantfs-secret", kSecret);
    return spouse;
  }

  // Parses `bytes` as the request (a message gRPC would not parse is never
  // handed to a handler), makes its header plausible as the flags say.
  template <typename Req>
  bool Parse(const std::string& bytes, Req* req) {
    if (!req->ParseFromString(bytes)) return false;
    proto::RequestHeader* h = req->mutable_header();
    if ((flags_ & kOwnClientId) != kOwnClientId) h->set_client_id(client_id_);
    if (!(flags_ & kOwnCreds)) {
      h->mutable_creds()->set_uid(0);
      h->mutable_creds()->set_gid(0);
    }
    if (!(flags_ & kOwnSeq)) h->set_seq(++seq_);
    return true;
  }

  template <typename Req, typename Reply>
  void Call(grpc::Status (GrantFsService::*method)(GrantFsService::Ctx*, const Req*, Reply*),
            const std::string& bytes) {
    Req req;
    if (!Parse(bytes, &req)) return;
    grpc::ServerContext ctx;
    auto secret = Authorize(&ctx, (flags_ & kNoSecret) != kNoSecret);
    Reply reply;
    grpc::Status st = (service_.get()->*method)(&ctx, &req, &reply);
    (void)st;
  }

  // The stream of invalidations: its first batch is written, then the
  // mount goes away (a stream that lasted would block the input).
  void Subscribe(const std::string& bytes) {
    proto::SubscribeRequest req;
    if (!Parse(bytes, &req)) return;
    grpc::ServerContext ctx;
    auto secret = Authorize(&ctx, (flags_ & kNoSecret) != kNoSecret);
    grpc::Status st = service_->Subscribe(&ctx, &req, [](const proto::InvalidationBatch& b) {
      std::string wire = b.SerializeAsString();
      (void)wire;
      return false;
    });
    (void)st;
  }

  std::string dir_;
  std::unique_ptr<Volume> volume_;
  std::unique_ptr<GrantFsService> service_;
  uint64_t client_id_ = 0;
  uint64_t seq_ = 0;
  uint8_t flags_ = 0;
};

// Seeds: a step of each method with a request that does something real.
std::vector<std::string> MakeSeeds() {
  std::vector<std::string> seeds;
  auto step = [](FuzzInputWriter& w, int method, const google::protobuf::Message& req) {
    w.Byte(static_cast<uint8_t>(method)).Byte(0).Bytes(req.SerializeAsString());
  };
  // mkdir d, create d/f, write it, read it, rename it, xattr, lock, list.
  FuzzInputWriter w;
  proto::MkNodRequest mkdir;
  mkdir.set_parent(1);
  mkdir.set_name("d");
  mkdir.set_mode(040755);
  mkdir.set_exclusive(true);
  step(w, 9, mkdir);
  proto::MkNodRequest create;
  create.set_parent(2);
  create.set_name("f");
  create.set_mode(0100644);
  step(w, 9, create);
  proto::OpenRequest open;
  open.set_ino(3);
  open.set_flags(2);  // O_RDWR
  open.set_handle(1);
  step(w, 16, open);
  proto::GrantRequest grant;
  grant.set_wanted_bytes(1 << 20);
  step(w, 20, grant);
  proto::WriteRequest write;
  write.set_ino(3);
  write.set_offset(4090);
  write.set_data("hello, world");
  write.set_from_grant(true);
  step(w, 19, write);
  proto::ReadRequest read;
  read.set_ino(3);
  read.set_size(8192);
  step(w, 18, read);
  proto::SetAttrRequest truncate;
  truncate.set_ino(3);
  truncate.set_valid(proto::SetAttrRequest::SIZE);
  truncate.set_size(4095);
  step(w, 8, truncate);
  proto::SetXattrRequest setx;
  setx.set_ino(3);
  setx.set_name("user.a");
  setx.set_value("v");
  step(w, 24, setx);
  proto::LockRequest lock;
  lock.set_ino(3);
  lock.mutable_range()->set_type(1);
  lock.mutable_range()->set_end(100);
  step(w, 29, lock);
  proto::RenameRequest rename;
  rename.set_parent(2);
  rename.set_name("f");
  rename.set_new_parent(1);
  rename.set_new_name("g");
  step(w, 13, rename);
  proto::ReadDirRequest readdir;
  readdir.set_ino(1);
  readdir.set_max_entries(10);
  step(w, 15, readdir);
  proto::RemoveRequest unlink;
  unlink.set_parent(1);
  unlink.set_name("g");
  step(w, 12, unlink);
  proto::ReleaseRequest release;
  release.set_ino(3);
  release.set_handle(1);
  step(w, 17, release);
  w.Byte(34).Byte(0).Bytes("");  // maintenance frees the unlinked file
  seeds.push_back(w.str());
  // Symlink, link, fallocate, a second session, status and check.
  FuzzInputWriter w2;
  proto::SymlinkRequest symlink;
  symlink.set_parent(1);
  symlink.set_name("s");
  symlink.set_target("/etc/passwd");
  step(w2, 10, symlink);
  step(w2, 9, create);  // parent 2 is the symlink: ENOTDIR
  create.set_parent(1);
  step(w2, 9, create);
  proto::LinkRequest link;
  link.set_ino(3);
  link.set_new_parent(1);
  link.set_new_name("h");
  step(w2, 11, link);
  proto::FallocateRequest falloc;
  falloc.set_ino(3);
  falloc.set_length(1 << 20);
  step(w2, 22, falloc);
  step(w2, 0, proto::OpenSessionRequest());
  step(w2, 30, proto::StatusRequest());
  step(w2, 33, proto::CheckRequest());
  seeds.push_back(w2.str());
  // Namespace grants: inode numbers 2-17 (a new volume's next is 2), the
  // grant of a new directory (inode 18), a log made in it.
  FuzzInputWriter w3;
  proto::InodeRangeRequest range;
  range.set_count(16);
  step(w3, 35, range);
  proto::MkNodRequest granted = mkdir;
  granted.set_name("n");
  granted.set_want_grant(true);
  step(w3, 9, granted);
  proto::ApplyLogRequest log;
  uint64_t seq = 1000;
  auto entry = [&](uint64_t ino) {
    proto::LogEntry* e = log.add_entries();
    e->set_seq(++seq);
    e->set_time_ns(1'700'000'000'000'000'000);
    e->set_ino(ino);
    return e;
  };
  proto::MkNodRequest* sub = entry(2)->mutable_mknod();
  sub->set_parent(18);
  sub->set_name("sub");
  sub->set_mode(040755);
  proto::MkNodRequest* file = entry(3)->mutable_mknod();
  file->set_parent(2);
  file->set_name("f");
  file->set_mode(0100644);
  proto::SymlinkRequest* sym = entry(4)->mutable_symlink();
  sym->set_parent(18);
  sym->set_name("l");
  sym->set_target("sub/f");
  proto::RenameRequest* mv = entry(0)->mutable_rename();
  mv->set_parent(2);
  mv->set_name("f");
  mv->set_new_parent(18);
  mv->set_new_name("g");
  proto::SetAttrRequest* chmod = entry(0)->mutable_setattr();
  chmod->set_ino(3);
  chmod->set_valid(proto::SetAttrRequest::MODE);
  chmod->set_mode(0600);
  proto::RemoveRequest* rm = entry(0)->mutable_remove();
  rm->set_parent(18);
  rm->set_name("l");
  step(w3, 36, log);
  step(w3, 36, log);  // sent again: answered from the records
  seeds.push_back(w3.str());
  return seeds;
}

}  // namespace
}  // namespace grantfs

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // The handlers log every refusal; thousands of inputs a second would
  // drown the fuzzer's own output. GRANTFS_FUZZ_LOG=1 keeps them.
  if (getenv("GRANTFS_FUZZ_LOG") == nullptr) FLAGS_minloglevel = 3;
  google::InitGoogleLogging("service_fuzz");
  grantfs::WriteSeedsIfEmpty(*argc, *argv, grantfs::MakeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  grantfs::FuzzInput in(data, size);
  grantfs::Run run;
  for (int steps = 0; !in.empty() && steps < 64; ++steps) run.Step(in);
  return 0;
}
