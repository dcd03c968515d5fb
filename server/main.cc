// grantfs-server: serves one GrantFS volume. Roles (docs/failover.md):
//   standalone  --role=primary without --peer/--witness: no replica.
//   primary     --role=primary --peer=B --witness=W: streams every change to
//               the replica B before it answers.
//   replica     --role=replica --peer=A --witness=W: applies A's stream and
//               takes over when A is gone.
//   witness     --role=witness: the third vote (checkpoint/witness.h).
// With a witness, --role only matters for a new cluster (epoch 0): after that
// the witness says who is primary, and a server that learns another one owns
// the epoch (fenced), or is granted it (promoted), takes its new role in the
// same process (server/roles.h).
// The data directory must exist (an empty one makes a new volume); a server
// whose data the witness refuses (empty, of another volume, or older than
// the volume's) runs as the replica (docs/failover.md, "Whose data").
#include <malloc.h>
#include <pthread.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "common/flag_config.h"
#include "common/flag_help.h"
#include "common/metrics_http.h"
#include "common/mutex_checks.h"
#include "common/transport_flags.h"
#include "glog/logging.h"
#include "server/roles.h"

ABSL_FLAG(std::string, config, "",
          "a file of NAME = VALUE lines, one flag each (NAME as here, without dashes; '#' "
          "comments): the systemd units' /etc/grantfs/INSTANCE.conf; flags on the command line "
          "override it");
ABSL_FLAG(std::string, listen, "127.0.0.1:7420", "address:port to serve on");
ABSL_FLAG(std::string, metrics_addr, "",
          "address:port to serve Prometheus metrics on, over plain HTTP with no authentication "
          "(docs/metrics.md); empty: none");
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
ABSL_FLAG(bool, handover_on_stop, true,
          "on SIGTERM/SIGINT, a primary with an in-sync replica hands the role over to it "
          "(as grantfsctl switchover) before it exits, instead of leaving it to a failover");
ABSL_FLAG(int, lease_ms, 10000, "client lease in milliseconds");
ABSL_FLAG(int, meta_lease_ms, 3000,
          "metadata leases: a mount's heartbeat renews its cached names and attributes for this "
          "long; a change waits at most this plus 1 s for a mount that does not answer a recall");
ABSL_FLAG(int, lease_hot_recalls, 8,
          "metadata leases: an object recalled this many times within 1 s is not leased for "
          "2 s, and mounts cache it as with leases off (kernel timeouts, pushed "
          "invalidations) meanwhile; 0: always leased (exact, every change waits for recalls)");
ABSL_FLAG(int, max_leases_per_mount, 1 << 20,
          "metadata leases one mount may hold; past it, granting one more recalls some of its "
          "others (a mount forgets leases without telling the server; this keeps a long-lived "
          "mount from filling the server's table for everyone)");
ABSL_FLAG(int, threads, 64,
          "worker threads that run the file system's calls; calls wait for one in a bounded "
          "queue where clients take turns");
ABSL_FLAG(int, max_queued_calls, 8192,
          "calls that may wait for a worker; past it (or past --max_queued_calls_per_client "
          "of one client) a call is refused with RESOURCE_EXHAUSTED and the client retries it "
          "with a backoff");
ABSL_FLAG(int, max_queued_calls_per_client, 256,
          "calls of one client connection (a mount has one) that may wait for a worker; a "
          "connection has at most 256 calls open, so by default its excess waits in the "
          "client (refusing a cheap call costs the server as much as serving it)");
ABSL_FLAG(int, max_running_calls_per_client, 0,
          "calls of one client connection that may run at once (0: half of --threads)");
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

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "grantfs-server --data_dir=DIR --listen=ADDR:PORT [--role=primary|replica --peer=ADDR "
      "--witness=ADDR | --role=witness]");
  // --help lists every flag (the server's and the TLS ones).
  absl::FlagsUsageConfig usage;
  grantfs::ListFlagsFrom({"server/"}, &usage);
  absl::SetFlagsUsageConfig(usage);
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
  // --config=FILE: the flags from a file (the systemd units'), the command
  // line's own parsed after it.
  if (absl::Status s = grantfs::ApplyFlagConfig(argc, argv); !s.ok()) {
    fprintf(stderr, "grantfs-server: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  absl::ParseCommandLine(argc, argv);
  grantfs::ApplyMutexDeadlockCheck();
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
  absl::StatusOr<grantfs::Transport> transport =
      grantfs::TransportFromFlags("server", "grantfs-server");
  if (!transport.ok()) {
    LOG(ERROR) << transport.status();
    return 2;
  }
  if (transport->secure() && transport->kind() != grantfs::kServerPeer) {
    LOG(ERROR) << "the certificate of --identity names \"" << transport->common_name()
               << "\", not a server (server:NAME)";
    return 2;
  }
  grantfs::ServerConfig config;
  config.listen = absl::GetFlag(FLAGS_listen);
  config.self = self;
  config.role = role;
  config.peer = peer;
  config.witness = witness;
  config.transport = *std::move(transport);
  config.queue.workers = absl::GetFlag(FLAGS_threads);
  config.queue.max_queued = static_cast<size_t>(std::max(1, absl::GetFlag(FLAGS_max_queued_calls)));
  config.queue.max_queued_per_source =
      static_cast<size_t>(std::max(1, absl::GetFlag(FLAGS_max_queued_calls_per_client)));
  config.queue.max_running_per_source =
      std::max(0, absl::GetFlag(FLAGS_max_running_calls_per_client));
  config.handover_on_stop = absl::GetFlag(FLAGS_handover_on_stop);
  // Before any role: its metrics show from the start, and end last.
  grantfs::ServerMetrics metrics;
  std::unique_ptr<grantfs::MetricsServer> metrics_server;
  if (const std::string addr = absl::GetFlag(FLAGS_metrics_addr); !addr.empty()) {
    absl::StatusOr<std::unique_ptr<grantfs::MetricsServer>> m =
        grantfs::MetricsServer::Start(addr, [&metrics] { return metrics.Render(); });
    if (!m.ok()) {
      LOG(ERROR) << m.status();
      return 2;
    }
    metrics_server = *std::move(m);
    config.metrics = &metrics;
  }
  if (role == "witness") {
    config.witness_dir = absl::GetFlag(FLAGS_data_dir);
    config.lease = absl::Milliseconds(absl::GetFlag(FLAGS_primary_lease_ms));
    return grantfs::RunServer(config, stop_signals);
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
  config.lease = absl::Milliseconds(absl::GetFlag(FLAGS_primary_lease_ms));

  grantfs::VolumeOptions& vo = config.volume;
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
  // A session that expires holds no lease: the metadata lease is at most the
  // session's.
  vo.lease_hot_recalls = std::max(0, absl::GetFlag(FLAGS_lease_hot_recalls));
  vo.max_leases_per_mount = std::max(1, absl::GetFlag(FLAGS_max_leases_per_mount));
  vo.meta_lease =
      std::min(absl::Milliseconds(std::max(absl::GetFlag(FLAGS_meta_lease_ms), 300)), vo.lease);
  if (absl::GetFlag(FLAGS_write_backlog_mb) < 1 || absl::GetFlag(FLAGS_recall_wait_ms) < 0) {
    LOG(ERROR) << "--write_backlog_mb must be >= 1 and --recall_wait_ms >= 0";
    return 2;
  }
  vo.write_budget_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_write_backlog_mb)) << 20;
  vo.recall_wait = absl::Milliseconds(absl::GetFlag(FLAGS_recall_wait_ms));
  vo.direct_io = absl::GetFlag(FLAGS_direct_io);
  vo.sync_data = absl::GetFlag(FLAGS_sync_data);
  return grantfs::RunServer(config, stop_signals);
}
