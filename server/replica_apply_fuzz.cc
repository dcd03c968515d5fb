// libFuzzer target: arbitrary change streams to a replica (checkpoint/
// replica.h), through Replica::Stream served in-process (no network port),
// on a new data directory (under $GRANTFS_FUZZ_DIR, else /dev/shm) for each
// input, so that an input that fails fails again alone.
//
// Input: a hello byte (the stream's epoch, 0 is no hello; whether it names
// the volume), then up to 32 steps, each a kind byte and its fields:
//   0  a raw ReplMessage (hello, records, snapshot pieces, anything);
//   1  the snapshot of a real primary's volume, all of it or cut short,
//      with the snapshot hello (its start_seq as made or from the input);
//   2  a run of that primary's real records (from index i, n of them);
//   3  a raw ReplRecord given the sequence number the replica expects;
//   4  a resume hello at the sequence number the replica expects.
// The real snapshot and records are made once at start: a volume whose
// change sink records what a workload of creates, writes, truncations,
// renames, xattrs, removals, grants, fsyncs and a digest mark sends.
//
// After each input, what must hold whatever was sent (else abort()):
//   - the data directory holds only the copy's own files, and nothing was
//     written beside it (snapshot paths stay inside);
//   - the replica opens again (a restart after any stream) at the position
//     it last acknowledged: the same epoch, the applied_seq of its last
//     ack (an acknowledged change is durable, and nothing it did not
//     acknowledge counts);
//   - when the stream was only the real snapshot and a run of real records
//     in order, the copy passes the offline check (server/fsck.h), chunk
//     files included once the whole run was applied. A raw batch is the
//     primary's word: the replica applies it as it is, by design, so a copy
//     that applied one is not checked.
// docs/testing.md, "Fuzzing".
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/change_sink.h"
#include "checkpoint/replica.h"
#include "common/fuzz_input.h"
#include "glog/logging.h"
#include "server/chunk_store.h"
#include "server/fsck.h"
#include "server/keys.h"
#include "server/volume.h"

namespace grantfs {
namespace {

#define FUZZ_CHECK(cond, ...)                                    \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "replica_apply_fuzz: %s failed: ", #cond); \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, "\n");                                     \
      abort();                                                   \
    }                                                            \
  } while (0)

// The primary's change sink: keeps every record.
class Recorder : public ChangeSink {
 public:
  uint64_t Append(proto::ReplRecord record) override {
    absl::MutexLock l(&mu_);
    record.set_seq(++head_);
    records_.push_back(std::move(record));
    return head_;
  }
  absl::Status WaitReplicated(uint64_t) override { return absl::OkStatus(); }
  uint64_t Head() override {
    absl::MutexLock l(&mu_);
    return head_;
  }
  uint64_t Promise(uint64_t bytes) override {
    {
      absl::MutexLock l(&mu_);
      if (bytes == promised_) return 0;
      promised_ = bytes;
    }
    proto::ReplRecord r;
    r.set_promised_bytes(bytes);
    return Append(std::move(r));
  }
  std::vector<proto::ReplRecord> After(uint64_t seq) {
    absl::MutexLock l(&mu_);
    std::vector<proto::ReplRecord> out;
    for (const proto::ReplRecord& r : records_) {
      if (r.seq() > seq) out.push_back(r);
    }
    return out;
  }

 private:
  absl::Mutex mu_;
  uint64_t head_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t promised_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<proto::ReplRecord> records_ ABSL_GUARDED_BY(mu_);
};

// A real primary's snapshot and the records that follow it.
struct Canned {
  proto::VolumeIdentity identity;
  uint64_t start_seq = 0;
  std::vector<proto::SnapshotPiece> pieces;  // "meta/NAME", then its eof piece
  std::vector<proto::ReplRecord> records;    // start_seq, start_seq + 1, ...
};

void Must(const absl::Status& s, const char* what) {
  FUZZ_CHECK(s.ok(), "%s: %s", what, s.ToString().c_str());
}

Canned MakeCanned(const std::string& base) {
  Canned c;
  Recorder sink;
  std::filesystem::create_directory(base + "/primary");
  VolumeOptions vo;
  vo.dir = base + "/primary";
  vo.capacity_bytes = 16 << 20;
  vo.metadata_reserve_bytes = 1 << 20;
  vo.background = false;
  vo.direct_io = false;
  vo.change_sink = &sink;
  absl::StatusOr<std::unique_ptr<Volume>> v = Volume::Open(vo);
  Must(v.status(), "opening the primary");
  Volume& vol = **v;
  c.identity = vol.meta().store().identity();
  absl::StatusOr<uint64_t> cut = vol.meta().store().Checkpoint(base + "/cp");
  Must(cut.status(), "checkpoint");
  c.start_seq = *cut + 1;
  for (const auto& e : std::filesystem::directory_iterator(base + "/cp")) {
    std::ifstream in(e.path(), std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    proto::SnapshotPiece p;
    p.set_path("meta/" + e.path().filename().string());
    p.set_data(data);
    c.pieces.push_back(p);
    p.clear_data();
    p.set_offset(data.size());
    p.set_eof(true);
    c.pieces.push_back(p);
  }
  // The workload.
  absl::StatusOr<uint64_t> id = vol.OpenSession("primary-workload");
  Must(id.status(), "session");
  RequestContext ctx;
  ctx.client_id = *id;
  auto mknod = [&](uint64_t parent, const std::string& name, uint32_t mode) {
    proto::MkNodRequest r;
    r.set_parent(parent);
    r.set_name(name);
    r.set_mode(mode);
    r.set_exclusive(true);
    absl::StatusOr<proto::Attr> a = vol.MkNod(ctx, r);
    Must(a.status(), "mknod");
    return a->ino();
  };
  const uint64_t dir = mknod(kRootIno, "d", S_IFDIR | 0755);
  const uint64_t f = mknod(dir, "f", S_IFREG | 0644);
  const uint64_t g = mknod(kRootIno, "g", S_IFREG | 0644);
  uint64_t added = 0;
  Must(vol.Grant(ctx, 1 << 20, 0, &added).status(), "grant");
  Must(vol.Write(ctx, f, 0, std::string(70000, 'a'), /*sync=*/true, /*from_grant=*/true).status(),
       "write");
  Must(vol.Write(ctx, f, (4 << 20) - 10, std::string(30, 'b'), /*sync=*/false).status(),
       "write across chunks");
  Must(vol.Write(ctx, g, 5000, "g data", /*sync=*/false).status(), "write g");
  proto::SetAttrRequest truncate;
  truncate.set_ino(f);
  truncate.set_valid(proto::SetAttrRequest::SIZE);
  truncate.set_size(4097);
  Must(vol.SetAttr(ctx, truncate).status(), "truncate");
  Must(vol.Fallocate(ctx, g, 0, 0, 3 << 20).status(), "fallocate");
  Must(vol.SetXattr(ctx, f, "user.x", "value", 0), "setxattr");
  Must(vol.Fsync(ctx, f), "fsync");
  proto::RenameRequest rename;
  rename.set_parent(dir);
  rename.set_name("f");
  rename.set_new_parent(kRootIno);
  rename.set_new_name("h");
  Must(vol.Rename(ctx, rename).status(), "rename");
  Must(vol.meta().store().DigestWithMark().status(), "digest mark");
  Must(vol.Remove(ctx, kRootIno, "g", false).status(), "remove");
  Must(vol.RunMaintenance().status(), "maintenance");  // frees g's chunks
  Must(vol.Remove(ctx, kRootIno, "d", true).status(), "rmdir");
  Must(vol.CloseSession(*id), "close session");
  c.records = sink.After(*cut);
  return c;
}

// Hands the stream to whichever replica runs now (one per input).
class Forward final : public proto::Replication::Service {
 public:
  grpc::Status Stream(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<proto::ReplAck, proto::ReplMessage>* stream) override {
    return replica->Stream(ctx, stream);
  }
  Replica* replica = nullptr;
};

struct Fixture {
  std::string base;  // FuzzTempDir()/grantfs-replica-fuzz-XXXXXX
  Canned canned;
  Forward forward;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<proto::Replication::Stub> stub;
};
Fixture* fx = nullptr;

const std::set<std::string> kCopyFiles = {
    "meta", "chunks", "space.hold", "snapshot.partial", "replica.boot", "replica.boot.tmp"};

std::unique_ptr<Replica> OpenReplica(const std::string& dir) {
  ReplicaOptions o;
  o.self = "replica.fuzz:1";
  o.data_dir = dir;
  o.identity_key = keys::Identity();
  o.open_chunks = [](const std::string& d) -> absl::StatusOr<std::unique_ptr<ChunkApplier>> {
    ChunkStoreOptions co;
    co.dir = d;
    co.direct_io = false;
    return ChunkStore::Create(co);
  };
  o.witness_call = [](proto::WitnessRequest) -> absl::StatusOr<proto::WitnessReply> {
    return absl::UnavailableError("no witness in the fuzz target");
  };
  // The hold grows on tmpfs, that is in memory: a promise past 64 MiB
  // finds the disk full (the replica's path for a full disk).
  o.hold_allocate = [](int fd, uint64_t offset, uint64_t length) {
    if (offset + length > (64 << 20) || offset + length < offset) return ENOSPC;
    return fallocate(fd, 0, offset, length) == 0 ? 0 : errno;
  };
  o.failover_timeout = absl::Hours(1);
  absl::StatusOr<std::unique_ptr<Replica>> r = Replica::Open(o);
  Must(r.status(), "opening the replica");
  return *std::move(r);
}

std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

// The state of one input's stream, as the test side sees it.
struct Sent {
  uint64_t epoch = 0;
  bool named = true;
  uint64_t next_seq = 0;     // what the replica should expect next (0: unknown)
  bool only_canned = true;   // nothing raw was sent
  uint64_t last_canned = 0;  // seq of the last real record sent
  bool snapshot_sent = false;
};

proto::ReplMessage Hello(const Sent& s) {
  proto::ReplMessage m;
  m.mutable_hello()->set_epoch(s.epoch);
  m.mutable_hello()->set_server("primary.fuzz:1");
  if (s.named) *m.mutable_hello()->mutable_identity() = fx->canned.identity;
  return m;
}

// Decodes one step into the messages it sends.
std::vector<proto::ReplMessage> StepMessages(FuzzInput& in, Sent* s) {
  const Canned& c = fx->canned;
  std::vector<proto::ReplMessage> out;
  switch (in.Byte() % 5) {
    case 0: {
      proto::ReplMessage m;
      if (!m.ParseFromString(in.Bytes())) break;
      s->only_canned = false;
      s->next_seq = 0;
      out.push_back(std::move(m));
      break;
    }
    case 1: {
      const uint8_t b = in.Byte();
      proto::ReplMessage h = Hello(*s);
      h.mutable_hello()->set_snapshot(true);
      h.mutable_hello()->set_start_seq(c.start_seq);
      if (b & 0x20) {
        h.mutable_hello()->set_start_seq(in.Number(2));
        s->only_canned = false;
      }
      out.push_back(std::move(h));
      proto::ReplMessage pieces;
      const size_t n = (b & 0x80) ? b % (c.pieces.size() + 1) : c.pieces.size();
      for (size_t i = 0; i < n; ++i) *pieces.add_snapshot() = c.pieces[i];
      pieces.set_snapshot_done(!(b & 0x40));
      out.push_back(std::move(pieces));
      s->next_seq = out.front().hello().start_seq();
      s->snapshot_sent = true;
      s->last_canned = 0;
      break;
    }
    case 2: {
      if (c.records.empty()) break;
      const size_t from = in.Byte() % c.records.size();
      const size_t n = std::min<size_t>(1 + in.Byte() % 8, c.records.size() - from);
      proto::ReplMessage m;
      for (size_t i = from; i < from + n; ++i) *m.add_records() = c.records[i];
      s->next_seq = c.records[from + n - 1].seq() + 1;
      s->last_canned = c.records[from + n - 1].seq();
      out.push_back(std::move(m));
      break;
    }
    case 3: {
      proto::ReplMessage m;
      if (!m.add_records()->ParseFromString(in.Bytes())) break;
      m.mutable_records(0)->set_seq(s->next_seq);
      if (s->next_seq != 0) ++s->next_seq;
      s->only_canned = false;
      out.push_back(std::move(m));
      break;
    }
    case 4: {
      proto::ReplMessage h = Hello(*s);
      h.mutable_hello()->set_start_seq(s->next_seq);
      out.push_back(std::move(h));
      break;
    }
  }
  return out;
}

void RunInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const std::string dir = fx->base + "/run";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directory(dir);
  std::unique_ptr<Replica> replica = OpenReplica(dir);
  fx->forward.replica = replica.get();

  Sent sent;
  const uint8_t h = in.Byte();
  sent.epoch = h & 7;
  sent.named = !(h & 0x80);

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = fx->stub->Stream(&ctx);
  // Acks are read as they come (the replica blocks on an ack nobody reads).
  proto::ReplAck last_ack;
  bool acked_records = false;
  std::thread reader([&] {
    proto::ReplAck a;
    while (stream->Read(&a)) {
      if (a.has_space() || a.applied_seq() != 0) {
        last_ack = a;
        acked_records = true;
      }
    }
  });
  bool open = stream->Write(Hello(sent));
  for (int steps = 0; open && !in.empty() && steps < 32; ++steps) {
    for (const proto::ReplMessage& m : StepMessages(in, &sent)) {
      if (!(open = stream->Write(m))) break;
    }
  }
  stream->WritesDone();
  reader.join();
  grpc::Status st = stream->Finish();
  (void)st;

  // Nothing but the copy's files, and nothing beside the data directory.
  for (const std::string& name : Names(dir)) {
    FUZZ_CHECK(kCopyFiles.count(name), "unexpected file %s in the data directory", name.c_str());
  }
  const std::set<std::string> around = Names(fx->base);
  FUZZ_CHECK((around == std::set<std::string>{"primary", "cp", "run"}),
             "something was written beside the data directory");

  // A restart comes back at the acknowledged position.
  const uint64_t epoch = replica->epoch(), applied = replica->applied_seq();
  fx->forward.replica = nullptr;
  replica.reset();
  replica = OpenReplica(dir);
  FUZZ_CHECK(replica->epoch() == epoch || replica->epoch() == 0,
             "epoch %llu before the restart, %llu after", (unsigned long long)epoch,
             (unsigned long long)replica->epoch());
  if (epoch != 0 && replica->epoch() == epoch) {
    FUZZ_CHECK(replica->applied_seq() <= applied, "applied %llu before the restart, %llu after",
               (unsigned long long)applied, (unsigned long long)replica->applied_seq());
    if (acked_records) {
      FUZZ_CHECK(replica->applied_seq() == last_ack.applied_seq(),
                 "acknowledged %llu, applied %llu after a restart",
                 (unsigned long long)last_ack.applied_seq(),
                 (unsigned long long)replica->applied_seq());
    }
  } else if (epoch != 0) {
    FUZZ_CHECK(false, "a copy at epoch %llu came back empty", (unsigned long long)epoch);
  }
  const uint64_t reopened_epoch = replica->epoch(), reopened_seq = replica->applied_seq();
  replica.reset();

  // A copy of a real stream is a consistent volume.
  if (sent.only_canned && reopened_epoch != 0) {
    FsckOptions fo;
    fo.data_dir = dir;
    // Only after the whole run are the chunk files where the records say:
    // before, a write's data may be there without the batch that commits it.
    const bool whole =
        !fx->canned.records.empty() && reopened_seq == fx->canned.records.back().seq();
    fo.metadata_only = !whole;
    absl::StatusOr<FsckReport> report = CheckVolume(fo);
    FUZZ_CHECK(report.ok(), "fsck of the copy: %s", report.status().ToString().c_str());
    if (!report->clean()) {
      for (const FsckProblem& p : report->problems) fprintf(stderr, "  %s\n", p.ToString().c_str());
    }
    FUZZ_CHECK(report->clean(), "the copy of a real stream (up to %llu) has problems: %s",
               (unsigned long long)reopened_seq, report->Summary().c_str());
  }
}

// Seeds: the whole real stream, a stream cut short, a resume, raw records.
std::vector<std::string> MakeSeeds() {
  const Canned& c = fx->canned;
  std::vector<std::string> seeds;
  FuzzInputWriter whole;
  whole.Byte(2).Byte(1).Byte(0);  // epoch 2; snapshot, all of it
  for (size_t i = 0; i < c.records.size(); i += 8) {
    whole.Byte(2).Byte(static_cast<uint8_t>(i)).Byte(7);
  }
  seeds.push_back(whole.str());
  FuzzInputWriter cut;
  cut.Byte(3).Byte(1).Byte(0x80 | 3);  // three pieces, then done
  seeds.push_back(cut.str());
  FuzzInputWriter resume;
  resume.Byte(1).Byte(1).Byte(0).Byte(2).Byte(0).Byte(3).Byte(4);  // snapshot, 4 records, resume
  seeds.push_back(resume.str());
  FuzzInputWriter raw;
  raw.Byte(1).Byte(1).Byte(0);
  proto::ReplRecord r;
  r.mutable_data()->set_ino(12);
  r.mutable_data()->set_offset(100);
  r.mutable_data()->set_data("raw");
  r.mutable_data()->set_sync(true);
  raw.Byte(3).Bytes(r.SerializeAsString());
  r.Clear();
  r.mutable_truncate()->set_ino(12);
  r.mutable_truncate()->set_a(10);
  r.mutable_truncate()->set_b(103);
  raw.Byte(3).Bytes(r.SerializeAsString());
  r.Clear();
  r.set_meta_batch(c.records.empty() ? "" : c.records.front().meta_batch());
  raw.Byte(3).Bytes(r.SerializeAsString());
  proto::ReplMessage m;
  m.add_snapshot()->set_path("meta/../x");
  raw.Byte(0).Bytes(m.SerializeAsString());
  seeds.push_back(raw.str());
  return seeds;
}

}  // namespace
}  // namespace grantfs

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  using grantfs::fx;
  // The replica logs every refusal; GRANTFS_FUZZ_LOG=1 keeps the logs.
  if (getenv("GRANTFS_FUZZ_LOG") == nullptr) FLAGS_minloglevel = 3;
  google::InitGoogleLogging("replica_apply_fuzz");
  fx = new grantfs::Fixture;
  std::string tmpl = grantfs::FuzzTempDir() + "/grantfs-replica-fuzz-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) abort();
  fx->base = tmpl;
  fx->canned = grantfs::MakeCanned(fx->base);
  grpc::ServerBuilder b;
  b.RegisterService(&fx->forward);
  b.SetMaxReceiveMessageSize(64 << 20);
  fx->server = b.BuildAndStart();
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 << 20);
  fx->stub = grantfs::proto::Replication::NewStub(fx->server->InProcessChannel(args));
  std::filesystem::create_directory(fx->base + "/run");
  grantfs::WriteSeedsIfEmpty(*argc, *argv, grantfs::MakeSeeds);
  // At exit (before LeakSanitizer's check, registered earlier): the server
  // stops and joins its threads, and the directory goes.
  atexit([] {
    grantfs::fx->stub.reset();
    grantfs::fx->server->Shutdown();
    grantfs::fx->server->Wait();
    grantfs::fx->server.reset();
    std::filesystem::remove_all(grantfs::fx->base);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  grantfs::RunInput(data, size);
  return 0;
}
