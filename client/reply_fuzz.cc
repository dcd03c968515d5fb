// libFuzzer target: the mount's handling of what a server replies. The
// seam is FileSystem (client/filesystem.h), the mount's logic with no FUSE
// type in it, over an RpcClient whose channel (RpcClientOptions::connect)
// goes in-process to a fake server that answers every call with the next
// reply of the input: any bytes as the reply message, any gRPC status, any
// credit in the trailing metadata. What the replies reach: RpcClient (the
// status and err words, the credit), MetaClient, the lease cache (leases
// kept from replies, names, listings page by page), the name cache, the
// xattr cache, open handles and the inode table as fuse_ops.cc feeds them
// (a lookup reference for each entry handed to the kernel). Also what
// grantfsctl does with a StatusReply (client/status_json.h), and the lease
// cache's recalls.
//
// Not reached: fuse_ops.cc's own conversions (ToStat, the fuse_reply_*
// calls) need a FUSE request of a live session; the session's threads
// (heartbeats, the invalidation stream) and, with them, fastwrite's grant
// pool and write cache and read-ahead are not started (their order against
// the input's replies would not be repeatable): write-through mode.
//
// Input: a sequence of items. A reply item queues one answer (a status
// byte, mostly OK; a credit; the reply's bytes); an op item runs one
// FileSystem call with arguments from the input, answered by the queued
// replies in order (a call finding none gets UNIMPLEMENTED). No crash and
// no sanitizer report is the property. docs/testing.md, "Fuzzing".
#include <fcntl.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/filesystem.h"
#include "client/status_json.h"
#include "common/fuzz_input.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

struct Answer {
  grpc::StatusCode code = grpc::StatusCode::OK;
  std::string credit;  // "x-grantfs-credit" (none when empty)
  std::string bytes;   // the reply message
};

// Answers every call of any method with the next queued Answer.
class FakeServer final : public grpc::CallbackGenericService {
 public:
  void Push(Answer a) {
    absl::MutexLock l(&mu_);
    answers_.push_back(std::move(a));
  }
  void Clear() {
    absl::MutexLock l(&mu_);
    answers_.clear();
  }
  Answer Pop() {
    absl::MutexLock l(&mu_);
    if (answers_.empty()) return Answer{grpc::StatusCode::UNIMPLEMENTED, "", ""};
    Answer a = std::move(answers_.front());
    answers_.pop_front();
    return a;
  }

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      Reactor(FakeServer* server, grpc::GenericCallbackServerContext* ctx)
          : server_(server), ctx_(ctx) {
        StartRead(&request_);
      }
      void OnReadDone(bool ok) override {
        if (!ok) return Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request"));
        Answer a = server_->Pop();
        if (!a.credit.empty()) ctx_->AddTrailingMetadata("x-grantfs-credit", a.credit);
        if (a.code != grpc::StatusCode::OK) return Finish(grpc::Status(a.code, "fuzz"));
        grpc::Slice slice(a.bytes);
        reply_ = grpc::ByteBuffer(&slice, 1);
        StartWriteAndFinish(&reply_, grpc::WriteOptions(), grpc::Status::OK);
      }
      void OnDone() override { delete this; }

     private:
      FakeServer* const server_;
      grpc::GenericCallbackServerContext* const ctx_;
      grpc::ByteBuffer request_, reply_;
    };
    return new Reactor(this, ctx);
  }

 private:
  absl::Mutex mu_;
  std::deque<Answer> answers_ ABSL_GUARDED_BY(mu_);
};

struct Fixture {
  FakeServer fake;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;
};
Fixture* fx = nullptr;

std::unique_ptr<FileSystem> NewFileSystem() {
  RpcClientOptions ro;
  ro.servers = {"fake.fuzz:1"};
  ro.call_timeout = absl::Seconds(5);
  ro.retry_for = absl::ZeroDuration();  // a refused call fails at once
  ro.connect = [](const std::string&, const grpc::ChannelArguments&) { return fx->channel; };
  absl::StatusOr<std::unique_ptr<RpcClient>> rpc = RpcClient::Create(ro);
  if (!rpc.ok()) abort();
  FileSystemOptions fo;
  fo.client_name = "fuzz";
  fo.max_io_bytes = 64 << 10;
  fo.fastwrite = false;
  fo.readahead.window_bytes = 0;
  fo.leases = true;
  auto fs = std::make_unique<FileSystem>(fo, *std::move(rpc));
  // As when the recall stream is up: replies' leases are kept.
  fs->leases()->Subscribed(Clock::Monotonic()->Now(), absl::Seconds(30));
  return fs;
}

// What fuse_ops.cc does with an entry it hands the kernel, short of the
// FUSE reply itself: a lookup reference, and the timeouts it asks for.
void HandEntry(FileSystem* fs, uint64_t parent, const proto::Attr& attr) {
  fs->inodes().Ref(attr.ino());
  (void)fs->AttrTimeout(attr);
  (void)fs->KernelKeepsName(parent);
  (void)fs->NameLeaseLeft(parent);
}

void Entry(FileSystem* fs, uint64_t parent, const absl::StatusOr<proto::Attr>& r) {
  if (r.ok()) HandEntry(fs, parent, *r);
}

void Attr(FileSystem* fs, const absl::StatusOr<proto::Attr>& r) {
  if (r.ok()) (void)fs->AttrTimeout(*r);
}

proto::LockRange Range(FuzzInput& in) {
  proto::LockRange r;
  r.set_type(in.Byte() % 3);
  r.set_start(in.Number(2));
  r.set_end(in.Number(8));
  r.set_pid(in.Byte());
  return r;
}

void Op(FileSystem* fs, FuzzInput& in) {
  Creds c;
  c.uid = in.Byte() < 128 ? 0 : 1000;
  c.gid = c.uid;
  const uint8_t op = in.Byte();
  const uint64_t ino = in.Byte();
  const uint64_t other = in.Byte();
  const std::string name = in.Bytes(64);
  switch (op % 30) {
    case 0:
      return Entry(fs, ino, fs->Lookup(c, ino, name));
    case 1:
      return Attr(fs, fs->GetAttr(c, ino));
    case 2: {
      proto::SetAttrRequest req;
      if (!req.ParseFromString(in.Bytes(256))) return;
      req.set_ino(ino);
      return Attr(fs, fs->SetAttr(c, req));
    }
    case 3: {
      bool created = false;
      const uint32_t mode = (in.Byte() & 1) ? S_IFDIR | 0755 : S_IFREG | 0644;
      return Entry(fs, ino, fs->MkNod(c, ino, name, mode, 0, 022, in.Byte() & 1, &created));
    }
    case 4:
      return Entry(fs, ino, fs->Symlink(c, ino, name, in.Bytes(64)));
    case 5:
      return Entry(fs, other, fs->Link(c, ino, other, name));
    case 6:
      (void)fs->Remove(c, ino, name, in.Byte() & 1);
      return;
    case 7:
      (void)fs->Rename(c, ino, name, other, in.Bytes(64), in.Byte() % 4);
      return;
    case 8:
      (void)fs->ReadLink(c, ino);
      return;
    case 9: {
      // As readdirplus hands the entries to the kernel.
      absl::StatusOr<proto::ReadDirReply> r = fs->ReadDir(c, ino, in.Number(2), 1 + in.Byte());
      if (!r.ok()) return;
      for (const proto::DirEntry& e : r->entries()) {
        if (e.name() == "." || e.name() == "..") continue;
        HandEntry(fs, ino, e.attr());
        fs->HandedToKernel(ino, e.name(), e.attr().ino());
      }
      return;
    }
    case 10: {
      uint64_t handle = 0;
      return Entry(fs, ino, fs->Create(c, ino, name, 0644, 022, O_RDWR | O_CREAT, &handle));
    }
    case 11: {
      uint64_t handle = 0;
      absl::StatusOr<proto::Attr> r = fs->Open(c, ino, in.Byte() & 3, &handle);
      if (r.ok() && (in.Byte() & 1)) (void)fs->Release(ino, handle);
      return;
    }
    case 12:
      (void)fs->Release(ino, in.Byte());
      return;
    case 13:
      (void)fs->Read(c, ino, in.Number(3), in.Number(2) * 4);
      return;
    case 14: {
      const std::string data = in.Bytes(1 << 16);
      (void)fs->Write(c, ino, in.Number(3), data.data(), data.size());
      return;
    }
    case 15:
      (void)fs->Flush(ino);
      return;
    case 16:
      (void)fs->Fsync(c, ino);
      return;
    case 17:
      (void)fs->Fallocate(c, ino, in.Byte() & 3, in.Number(3), in.Number(3));
      return;
    case 18:
      (void)fs->StatFs(c);
      return;
    case 19:
      (void)fs->SetXattr(c, ino, name, in.Bytes(64), in.Byte() & 3);
      return;
    case 20:
      (void)fs->GetXattr(c, ino, name);
      return;
    case 21:
      (void)fs->ListXattr(c, ino);
      return;
    case 22:
      (void)fs->RemoveXattr(c, ino, name);
      return;
    case 23:
      (void)fs->GetLock(c, ino, other, Range(in));
      return;
    case 24:
      (void)fs->SetLock(c, ino, other, in.Byte() & 1, Range(in), /*wait=*/false,
                        [] { return true; });
      return;
    case 25:
      // The kernel forgets what it was handed.
      (void)fs->Forget(ino, 1 + in.Byte() % 4);
      return;
    case 26: {
      // A recall off the invalidation stream.
      const LeaseCache::Kind kind =
          (in.Byte() & 1) ? LeaseCache::Kind::kDir : LeaseCache::Kind::kAttr;
      fs->leases()->Recall({kind, ino});
      return;
    }
    case 27:
      (void)fs->leases()->DropAll(in.Byte() & 1);
      return;
    case 28: {
      // grantfsctl status --json over a server's StatusReply.
      proto::StatusReply st;
      if (!st.ParseFromString(in.Bytes())) return;
      (void)AvailableBytes(st);
      (void)ToJsonLine(StatusToStruct(name, st));
      return;
    }
    case 29:
      (void)fs->NameLeaseLeft(ino);
      (void)fs->KernelKeepsName(ino);
      return;
  }
}

void Reply(FuzzInput& in) {
  Answer a;
  const uint8_t code = in.Byte();
  if (code >= 0xc0) a.code = static_cast<grpc::StatusCode>(code % 17);
  if (in.Byte() & 1) {
    // Any text a metadata value may hold (gRPC refuses to send others, and
    // a client's gRPC would drop them on the wire).
    for (char ch : in.Bytes(24)) a.credit += static_cast<char>(0x20 + (ch & 0x7f) % 0x5f);
  }
  a.bytes = in.Bytes();
  fx->fake.Push(std::move(a));
}

// Seeds: replies a real server would give to a lookup, a readdir, a create
// and a read.
std::vector<std::string> MakeSeeds() {
  std::vector<std::string> seeds;
  proto::Attr dir;
  dir.set_ino(2);
  dir.set_mode(S_IFDIR | 0755);
  dir.set_nlink(2);
  proto::Attr file;
  file.set_ino(3);
  file.set_mode(S_IFREG | 0644);
  file.set_nlink(1);
  file.set_size(10);
  auto reply = [](FuzzInputWriter& w, const google::protobuf::Message& m) {
    w.Byte(0).Byte(0).Byte(0).Bytes(m.SerializeAsString());
  };
  auto op = [](FuzzInputWriter& w, int op, int ino, const std::string& name) {
    w.Byte(1)
        .Byte(0)
        .Byte(static_cast<uint8_t>(op))
        .Byte(static_cast<uint8_t>(ino))
        .Byte(0)
        .Bytes(name);
  };
  FuzzInputWriter w;
  proto::AttrReply lookup;
  *lookup.mutable_attr() = dir;
  lookup.set_leased(true);
  lookup.set_dir_leased(true);
  reply(w, lookup);
  op(w, 0, 1, "d");
  proto::ReadDirReply list;
  list.set_leased(true);
  for (int i = 0; i < 3; ++i) {
    proto::DirEntry* e = list.add_entries();
    e->set_name("f" + std::to_string(i));
    e->set_cookie(3 + i);
    *e->mutable_attr() = file;
    e->mutable_attr()->set_ino(3 + i);
    e->set_leased(true);
  }
  reply(w, list);
  op(w, 9, 2, "");
  w.Byte(0);  // cookie
  w.Byte(0).Byte(10);
  proto::AttrReply created;
  *created.mutable_attr() = file;
  created.set_created(true);
  reply(w, created);
  proto::OpenReply opened;
  *opened.mutable_attr() = file;
  reply(w, opened);
  op(w, 10, 2, "new");
  proto::ReadReply read;
  read.set_data("0123456789");
  reply(w, read);
  op(w, 13, 3, "");
  seeds.push_back(w.str());
  return seeds;
}

}  // namespace
}  // namespace grantfs

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  using grantfs::fx;
  // The client logs every failed call; GRANTFS_FUZZ_LOG=1 keeps the logs.
  if (getenv("GRANTFS_FUZZ_LOG") == nullptr) FLAGS_minloglevel = 3;
  google::InitGoogleLogging("reply_fuzz");
  fx = new grantfs::Fixture;
  grpc::ServerBuilder b;
  b.RegisterCallbackGenericService(&fx->fake);
  fx->server = b.BuildAndStart();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  fx->channel = fx->server->InProcessChannel(args);
  grantfs::WriteSeedsIfEmpty(*argc, *argv, grantfs::MakeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  grantfs::FuzzInput in(data, size);
  std::unique_ptr<grantfs::FileSystem> fs = grantfs::NewFileSystem();
  for (int items = 0; !in.empty() && items < 64; ++items) {
    if (in.Byte() & 1) {
      grantfs::Op(fs.get(), in);
    } else {
      grantfs::Reply(in);
    }
  }
  fs.reset();
  grantfs::fx->fake.Clear();
  return 0;
}
