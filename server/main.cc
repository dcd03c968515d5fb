// grantfs-server: serves one GrantFS volume. Roles (docs/failover.md):
//   standalone  --role=primary without --peer/--witness: no replica.
//   primary     --role=primary --peer=B --witness=W: streams every change to
//               the replica B before it answers.
//   replica     --role=replica --peer=A --witness=W: applies A's stream and
//               takes over when A is gone.
//   witness     --role=witness: the third vote (checkpoint/witness.h).
// With a witness, --role only matters for a new cluster (epoch 0): after that
// the witness says who is primary, and a server that learns another one owns
// the epoch (fenced), or is granted it (promoted), re-executes itself.
// The data directory must exist (an empty one makes a new volume); a server
// whose data the witness refuses (empty, of another volume, or older than
// the volume's) runs as the replica (docs/failover.md, "Whose data").
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <linux/close_range.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "checkpoint/replica.h"
#include "checkpoint/replicator.h"
#include "checkpoint/witness.h"
#include "common/clock.h"
#include "common/keepalive.h"
#include "common/secret.h"
#include "glog/logging.h"
#include "server/chunk_store.h"
#include "server/data_dir.h"
#include "server/keys.h"
#include "server/service.h"
#include "server/volume.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7420", "address:port to serve on");
ABSL_FLAG(std::string, data_dir, "/var/lib/grantfs", "data directory (meta/ and chunks/)");
ABSL_FLAG(std::string, capacity, "0",
          "bytes of file data to hold, with optional K/M/G/T suffix, recorded in the "
          "volume; 0 = the recorded capacity (a new volume: the free space of the data "
          "directory's file system less --metadata_reserve); another value changes it");
ABSL_FLAG(std::string, metadata_reserve, "64M",
          "free space of the data file system never promised to file data (room for "
          "the metadata store to grow)");
ABSL_FLAG(std::string, role, "primary", "primary, replica or witness (see docs/failover.md)");
ABSL_FLAG(std::string, peer, "",
          "the other server's address (primary: its replica; replica: its primary)");
ABSL_FLAG(std::string, witness, "", "the witness's address; required with --peer");
ABSL_FLAG(std::string, advertise, "",
          "this server's address as the peer, the witness and clients know it; default --listen");
ABSL_FLAG(int, primary_lease_ms, 1000,
          "the primary's lease: how long it serves without word from the witness or the replica, "
          "and the replica's silence before it claims the epoch; same on every server");
ABSL_FLAG(uint64_t, promoted_epoch, 0,
          "internal: set by a replica that re-executes itself as the primary of this epoch");
ABSL_FLAG(bool, handover_on_stop, true,
          "on SIGTERM/SIGINT, a primary with an in-sync replica hands the role over to it "
          "(as grantfsctl switchover) before it exits, instead of leaving it to a failover");
ABSL_FLAG(std::string, secret_file, "",
          "file holding the cluster secret every client must present");
ABSL_FLAG(int, lease_ms, 10000, "client lease in milliseconds");
ABSL_FLAG(int, threads, 256,
          "maximum gRPC server threads; each mount's invalidation stream holds one, and a "
          "call that finds none free is refused (clients retry it)");
ABSL_FLAG(int, write_backlog_mb, 64,
          "flow control: MiB of client writes the server lets be in flight at once");
ABSL_FLAG(bool, sync_data, true,
          "fdatasync every data write here and on the replica before it is acknowledged "
          "(false: acknowledged data sits in both servers' page cache until the file's fsync, "
          "and a power loss of both servers can lose it)");
ABSL_FLAG(bool, direct_io, true,
          "write large block-aligned pieces of file data with O_DIRECT, past the page cache "
          "(see docs/write-path.md)");
ABSL_FLAG(int, recall_wait_ms, 1000,
          "a write that finds the volume full waits this long for recalled grants");

namespace {

bool ParseSize(const std::string& text, uint64_t* out) {
  if (text.empty()) return false;
  uint64_t mult = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'K':
    case 'k':
      mult = 1ull << 10;
      break;
    case 'M':
    case 'm':
      mult = 1ull << 20;
      break;
    case 'G':
    case 'g':
      mult = 1ull << 30;
      break;
    case 'T':
    case 't':
      mult = 1ull << 40;
      break;
    default:
      mult = 1;
  }
  if (mult != 1) digits.pop_back();
  uint64_t n;
  if (!absl::SimpleAtoi(digits, &n)) return false;
  *out = n * mult;
  return true;
}

std::unique_ptr<grpc::Server> g_server;
std::vector<std::string> g_args;  // the command line, for re-executing
// Set once a stop signal arrived: no role change re-executes the process
// after that (it would undo the stop). Guarded by g_reexec_mu, which a
// re-execution holds into execv.
absl::Mutex g_reexec_mu;
bool g_stopping ABSL_GUARDED_BY(g_reexec_mu) = false;

// Replaces this process with a fresh grantfs-server of the same command
// line plus `extra` (role changes: fenced -> replica, promoted -> primary).
// Nothing is carried over but the data directory.
// Returns only when the process is stopping.
void Reexec(const std::vector<std::string>& extra) {
  absl::MutexLock l(&g_reexec_mu);
  if (g_stopping) {
    LOG(INFO) << "stopping: not re-executing for the role change";
    return;
  }
  std::vector<std::string> args;
  for (const std::string& a : g_args) {
    if (a.rfind("--promoted_epoch", 0) != 0) args.push_back(a);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  LOG(WARNING) << "re-executing: " << absl::StrJoin(args, " ");
  // Sockets, RocksDB and chunk descriptors must not leak into the new image.
  syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
  execv("/proc/self/exe", argv.data());
  PLOG(FATAL) << "execv";
  abort();
}

// Re-executes after `delay` (lets the replies under way go out first).
void ReexecSoon(std::vector<std::string> extra, absl::Duration delay) {
  std::thread([extra, delay] {
    absl::SleepFor(delay);
    Reexec(extra);
  }).detach();
}

grantfs::WitnessCall MakeWitnessCall(const std::string& witness, const std::string& self,
                                     const std::string& secret) {
  auto client = std::make_shared<grantfs::WitnessClient>(witness, secret);
  return [client, self](grantfs::proto::WitnessRequest req) {
    req.set_server(self);
    return client->Update(req);
  };
}

// Server-side settings every role shares.
void ConfigureBuilder(grpc::ServerBuilder* builder, grpc::ResourceQuota* quota) {
  builder->SetMaxReceiveMessageSize(16 << 20);
  builder->SetMaxSendMessageSize(16 << 20);
  // Clients and the primary ping every second to notice a server that is cut
  // off; answering those pings must not count as abuse.
  grantfs::AllowClientKeepalive(builder);
  quota->SetMaxThreads(absl::GetFlag(FLAGS_threads));
  builder->SetResourceQuota(*quota);
}

// Serves until SIGTERM/SIGINT; `on_stop` runs first.
int ServeUntilSignal(grpc::ServerBuilder* builder, const sigset_t& stop_signals,
                     std::function<void()> on_stop) {
  int port = 0;
  builder->AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials(), &port);
  g_server = builder->BuildAndStart();
  if (!g_server || port == 0) {
    LOG(ERROR) << "cannot listen on " << absl::GetFlag(FLAGS_listen);
    return 1;
  }
  std::thread([stop_signals, on_stop] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    LOG(INFO) << "signal " << sig << ": shutting down";
    if (!g_reexec_mu.TryLock()) {
      // A role change is re-executing the process at this moment. The
      // signal goes to the new image: raised again, it stays pending (it is
      // blocked in every thread), a pending signal survives execv, and the
      // new image takes it as soon as it serves, and stops.
      LOG(INFO) << "signal " << sig << " came during a re-execution: passing it on";
      kill(getpid(), sig);
      g_reexec_mu.Lock();  // execv replaces the process first
    }
    g_stopping = true;
    g_reexec_mu.Unlock();
    on_stop();
    g_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }).detach();
  g_server->Wait();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "grantfs-server --data_dir=DIR --listen=ADDR:PORT [--role=primary|replica --peer=ADDR "
      "--witness=ADDR | --role=witness]");
  for (int i = 0; i < argc; ++i) g_args.push_back(argv[i]);
  // Every Write and replication message brings buffers of up to 8 MiB (gRPC's
  // and the parsed request's). glibc would map each one fresh and unmap it
  // after the reply, or trim it off the heap, so the kernel faulted in and
  // zeroed every page of every request again: a tenth of the server's CPU
  // in a streaming write. Kept on the heap instead (below 32 MiB), not
  // trimmed below 128 MiB free, in at most 4 arenas (so what is kept is
  // bounded: about 4 x the requests in flight at once).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
  mallopt(M_ARENA_MAX, 4);
  absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  // SIGTERM/SIGINT are taken by one thread (below); block them everywhere
  // before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const std::string role = absl::GetFlag(FLAGS_role);
  const std::string peer = absl::GetFlag(FLAGS_peer);
  const std::string witness = absl::GetFlag(FLAGS_witness);
  const std::string self = absl::GetFlag(FLAGS_advertise).empty() ? absl::GetFlag(FLAGS_listen)
                                                                  : absl::GetFlag(FLAGS_advertise);
  absl::StatusOr<std::string> secret = grantfs::ReadSecretFile(absl::GetFlag(FLAGS_secret_file));
  if (!secret.ok()) {
    LOG(ERROR) << secret.status();
    return 2;
  }
  if (role == "witness") {
    grantfs::WitnessOptions wo;
    wo.dir = absl::GetFlag(FLAGS_data_dir);
    wo.secret = *secret;
    wo.lease = absl::Milliseconds(absl::GetFlag(FLAGS_primary_lease_ms));
    wo.stall_tick = wo.lease / 10;
    auto w = grantfs::WitnessService::Open(wo);
    if (!w.ok()) {
      LOG(ERROR) << "cannot open the witness state in " << wo.dir << ": " << w.status();
      return 1;
    }
    grpc::ServerBuilder builder;
    grpc::ResourceQuota quota("grantfs-witness");
    ConfigureBuilder(&builder, &quota);
    builder.RegisterService(w->get());
    const grantfs::proto::WitnessState ws = (*w)->state();
    LOG(INFO) << "grantfs-server: witness on " << absl::GetFlag(FLAGS_listen) << ", epoch "
              << ws.epoch() << " owned by '" << ws.primary() << "', state in " << wo.dir;
    return ServeUntilSignal(&builder, stop_signals, [] {});
  }
  if (role != "primary" && role != "replica") {
    LOG(ERROR) << "unknown --role '" << role << "': use primary, replica or witness";
    return 2;
  }
  const bool replicated = !peer.empty() || !witness.empty();
  if (replicated && (peer.empty() || witness.empty())) {
    LOG(ERROR) << "--peer and --witness go together (a replica needs the witness's vote)";
    return 2;
  }
  if (role == "replica" && !replicated) {
    LOG(ERROR) << "--role=replica needs --peer (the primary) and --witness";
    return 2;
  }
  if (absl::GetFlag(FLAGS_primary_lease_ms) < 100) {
    LOG(ERROR) << "--primary_lease_ms must be >= 100";
    return 2;
  }
  const absl::Duration lease = absl::Milliseconds(absl::GetFlag(FLAGS_primary_lease_ms));

  grantfs::VolumeOptions vo;
  vo.dir = absl::GetFlag(FLAGS_data_dir);
  if (!ParseSize(absl::GetFlag(FLAGS_capacity), &vo.capacity_bytes)) {
    LOG(ERROR) << "bad --capacity '" << absl::GetFlag(FLAGS_capacity) << "'";
    return 2;
  }
  if (!ParseSize(absl::GetFlag(FLAGS_metadata_reserve), &vo.metadata_reserve_bytes)) {
    LOG(ERROR) << "bad --metadata_reserve '" << absl::GetFlag(FLAGS_metadata_reserve) << "'";
    return 2;
  }
  vo.lease = absl::Milliseconds(absl::GetFlag(FLAGS_lease_ms));
  if (absl::GetFlag(FLAGS_write_backlog_mb) < 1 || absl::GetFlag(FLAGS_recall_wait_ms) < 0) {
    LOG(ERROR) << "--write_backlog_mb must be >= 1 and --recall_wait_ms >= 0";
    return 2;
  }
  vo.write_budget_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_write_backlog_mb)) << 20;
  vo.recall_wait = absl::Milliseconds(absl::GetFlag(FLAGS_recall_wait_ms));
  vo.direct_io = absl::GetFlag(FLAGS_direct_io);
  vo.sync_data = absl::GetFlag(FLAGS_sync_data);

  // What the data directory holds, before anything opens or creates it.
  absl::StatusOr<grantfs::DataDirInfo> data = grantfs::InspectDataDir(vo.dir);
  if (!data.ok()) {
    LOG(ERROR) << "cannot use the data directory " << vo.dir << ": " << data.status();
    return 1;
  }
  switch (data->state) {
    case grantfs::DataDirState::kMissing:
      LOG(ERROR) << "data directory " << vo.dir
                 << " does not exist: refusing to start (is the data disk mounted?). For a new "
                    "volume, create the directory first (mkdir -p "
                 << vo.dir << ")";
      return 1;
    case grantfs::DataDirState::kForeign:
      LOG(ERROR) << "data directory " << vo.dir << " holds " << data->detail
                 << ", not a GrantFS volume: refusing to start. Point --data_dir at the volume, "
                    "or at an empty directory for a new one";
      return 1;
    case grantfs::DataDirState::kEmpty:
      LOG(INFO) << "data directory " << vo.dir << " holds no volume"
                << (data->detail.empty() ? "" : " (" + data->detail + ")")
                << (replicated ? "" : ": a new volume");
      break;
    case grantfs::DataDirState::kVolume:
      LOG(INFO) << "data directory " << vo.dir << " holds volume "
                << (data->identity ? data->identity->volume_id() : "(from before identities)")
                << ", data epoch " << (data->identity ? data->identity->data_epoch() : 0);
      break;
  }
  // A witness request of `op` at `epoch`, with this server's data.
  auto request = [&data](grantfs::proto::WitnessRequest::Op op, uint64_t epoch) {
    grantfs::proto::WitnessRequest req;
    req.set_op(op);
    req.set_epoch(epoch);
    if (data->state == grantfs::DataDirState::kVolume) {
      req.mutable_data();  // a volume, even one from before identities
      if (data->identity) *req.mutable_data() = *data->identity;
    }
    return req;
  };

  // Which role: the witness decides.
  grantfs::WitnessCall witness_call;
  uint64_t epoch = 0;
  absl::Time granted_at;
  bool be_primary = !replicated;
  if (replicated) {
    witness_call = MakeWitnessCall(witness, self, *secret);
    absl::Time last_log = absl::InfinitePast();
    for (;;) {
      // The lease is counted on the monotonic clock (ReplicatorOptions).
      const absl::Time sent = grantfs::Clock::Monotonic()->Now();
      absl::StatusOr<grantfs::proto::WitnessReply> st =
          witness_call(request(grantfs::proto::WitnessRequest::GET, 0));
      if (!st.ok()) {
        if (absl::Now() - last_log > absl::Seconds(5)) {
          LOG(WARNING) << "waiting for the witness " << witness << ": " << st.status();
          last_log = absl::Now();
        }
        absl::SleepFor(absl::Milliseconds(200));
        continue;
      }
      const grantfs::proto::WitnessState& ws = st->state();
      grantfs::proto::WitnessRequest::Op op = grantfs::proto::WitnessRequest::GET;
      uint64_t want = 0;
      if (absl::GetFlag(FLAGS_promoted_epoch) != 0 && ws.primary() == self &&
          ws.epoch() == absl::GetFlag(FLAGS_promoted_epoch)) {
        op = grantfs::proto::WitnessRequest::RENEW;  // promoted: the lease starts now
        want = ws.epoch();
      } else if ((ws.epoch() == 0 && role == "primary") || ws.primary() == self) {
        op = grantfs::proto::WitnessRequest::CLAIM;  // a new cluster, or this primary restarting
        want = ws.epoch();
      }
      if (op == grantfs::proto::WitnessRequest::GET) break;  // another server is primary
      st = witness_call(request(op, want));
      if (st.ok() && st->granted()) {
        be_primary = true;
        epoch = st->state().epoch();
        granted_at = sent;
        break;
      }
      if (st.ok() && st->refused_data()) {
        LOG(ERROR) << "the witness refused the primary role to this server's data: " << st->reason()
                   << ". Running as the replica: it takes the volume from the "
                   << "primary when this server's copy is empty or older (see "
                   << "docs/operations.md, \"Refusals\")";
        break;
      }
      LOG(WARNING) << "the witness did not grant the epoch: "
                   << (st.ok() ? st->reason() : std::string(st.status().message()));
      absl::SleepFor(absl::Milliseconds(200));
    }
  }

  grpc::ServerBuilder builder;
  grpc::ResourceQuota quota("grantfs");
  ConfigureBuilder(&builder, &quota);
  grantfs::ServiceOptions so;
  so.secret = *secret;

  if (!be_primary) {
    grantfs::ReplicaOptions ro;
    ro.self = self;
    ro.peer = peer;
    ro.witness = witness;
    ro.secret = *secret;
    ro.data_dir = vo.dir;
    ro.open_chunks =
        [direct_io = vo.direct_io](
            const std::string& dir) -> absl::StatusOr<std::unique_ptr<grantfs::ChunkApplier>> {
      grantfs::ChunkStoreOptions co;
      co.dir = dir;
      co.direct_io = direct_io;
      return grantfs::ChunkStore::Create(co);
    };
    ro.identity_key = grantfs::keys::Identity();
    ro.witness_call = witness_call;
    ro.failover_timeout = lease;
    ro.on_promoted = [](uint64_t e) { Reexec({absl::StrCat("--promoted_epoch=", e)}); };
    auto replica = grantfs::Replica::Open(ro);
    if (!replica.ok()) {
      LOG(ERROR) << "cannot open the replica's copy: " << replica.status();
      return 1;
    }
    so.server_role = replica->get();
    grantfs::GrantFsService service(nullptr, so);
    builder.RegisterService(&service);
    builder.RegisterService(replica->get());
    (*replica)->Start();
    LOG(INFO) << "grantfs-server: replica on " << absl::GetFlag(FLAGS_listen) << " (as " << self
              << "), primary " << peer << ", witness " << witness << ", data in " << vo.dir;
    grantfs::Replica* r = replica->get();
    return ServeUntilSignal(&builder, stop_signals, [r] { r->Stop(); });
  }

  std::unique_ptr<grantfs::Replicator> replicator;
  grantfs::Volume* volume_ptr = nullptr;
  if (replicated) {
    grantfs::ReplicatorOptions ro;
    ro.self = self;
    ro.peer = peer;
    ro.witness = witness;
    ro.secret = *secret;
    ro.epoch = epoch;
    ro.data_dir = vo.dir;
    ro.witness_call = witness_call;
    ro.lease = lease;
    ro.replica_timeout = lease;
    ro.granted_at = granted_at;
    ro.capacity_bytes = vo.capacity_bytes;
    ro.checkpoint = [&volume_ptr](const std::string& dir) {
      return volume_ptr->meta().Checkpoint(dir);
    };
    ro.identity = [&volume_ptr] { return volume_ptr->meta().identity(); };
    ro.on_fenced = [] { ReexecSoon({}, absl::Milliseconds(300)); };
    replicator = std::make_unique<grantfs::Replicator>(ro);
    vo.change_sink = replicator.get();
    vo.serving = [r = replicator.get()] {
      std::string why;
      return r->Serving(&why);
    };
    so.server_role = replicator.get();
  }
  vo.epoch = epoch;
  auto volume = grantfs::Volume::Open(vo);
  if (!volume.ok()) {
    LOG(ERROR) << "cannot open volume: " << volume.status();
    return 1;
  }
  volume_ptr = volume->get();
  grantfs::SpaceInfo space = (*volume)->Space();
  if (replicator) replicator->Start();
  grantfs::GrantFsService service(volume->get(), so);
  builder.RegisterService(&service);
  LOG(INFO) << "grantfs-server: " << (replicated ? "primary" : "standalone") << " on "
            << absl::GetFlag(FLAGS_listen) << (replicated ? absl::StrCat(" epoch ", epoch) : "")
            << ", data in " << vo.dir << " (volume " << (*volume)->meta().identity().volume_id()
            << ", data epoch " << (*volume)->meta().identity().data_epoch() << "), capacity "
            << space.capacity_bytes << " bytes, used " << space.used_bytes;
  grantfs::Volume* vol = volume->get();
  grantfs::Replicator* rep = replicator.get();
  return ServeUntilSignal(&builder, stop_signals, [vol, rep] {
    // A planned stop of the primary is a switchover when it can be: the
    // replica takes over at once with nothing lost, instead of after the
    // lease. Without an in-sync replica it just stops.
    if (rep != nullptr && absl::GetFlag(FLAGS_handover_on_stop)) {
      absl::Status s = rep->Switchover();
      if (s.ok()) {
        LOG(INFO) << "stop: handed the primary role over to " << absl::GetFlag(FLAGS_peer);
      } else {
        LOG(WARNING) << "stop: no handover (" << s << "); stopping without one";
      }
    }
    vol->sessions().Shutdown();  // ends the Subscribe streams
    if (rep != nullptr) rep->Stop();
  });
}
