// grantfsctl: operator's view of a GrantFS cluster.
//
//   grantfsctl [--server=HOST:PORT[,HOST:PORT...]] status [--json]
//                                   role, replication, space, sessions; with --json
//                                   one line {"servers": [...], "unreachable": [...]}
//                                   (client/status_json.h names the fields)
//   grantfsctl [--server=HOST:PORT[,HOST:PORT...]] df [--json]   capacity, used, available
//   grantfsctl [--server=HOST:PORT[,HOST:PORT...]] clients [--json]
//                                   each mount: node, address, mount point, last heartbeat,
//                                   open and locked files, grant, dirty bytes, writes
//                                   in flight, credit, lease (client/status_json.h
//                                   SessionToStruct names the --json fields)
//   grantfsctl [--server=HOST:PORT[,HOST:PORT...]] switchover [--json]
//                                   moves the primary role to the in-sync replica;
//                                   with --json one line {"done", "server",
//                                   "new_primary", "took_ms", "error", "tried"}
//   grantfsctl fsck --data_dir=DIR [--repair] [--json] [--progress]
//                                   checks a stopped server's data directory
//                                   (server/fsck.h); exit 0 clean, 1 problems
//                                   (with --repair: problems left), 2 cannot run
//   grantfsctl init [--tls_dir=DIR] [--servers=A,B] [--nodes=N1,N2] [--admins=OPS]
//                                   makes the cluster's CA, certificates and secret
//                                   in DIR (default $GRANTFS_TLS_DIR, else
//                                   /etc/grantfs; client/cluster_keys.h); again on
//                                   the same DIR, adds what is missing
//   grantfsctl [--server=...] fsck [--json] [--progress]
//                                   online, read-only: the primary checks a snapshot
//                                   of its metadata and compares a digest of it
//                                   with the in-sync replica's; exit 0 clean and
//                                   equal (or no replica), 1 problems or differences,
//                                   2 cannot run
//   grantfsctl mount -g [-o OPTIONS] [SUBDIR] PATH | umount -g [-f] PATH | mounts | nodes
//                                   global mounts on every node and the node
//                                   agents (client/global_mounts_cli.h)
//
// Flags not given default to /etc/grantfs/cluster.conf (--config=FILE;
// client/cluster_config.h): servers, tls_dir, secret_file, insecure.
//
// With several servers, `status` shows every server that answers (the
// primary and its replica), one block each (--json: one object each, in the
// order given); `df` and `clients` ask the serving primary. Exit codes: 0
// done, 1 no server answered as needed (each address tried is named on
// stderr), 2 bad usage or keys.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/cluster_config.h"
#include "client/cluster_keys.h"
#include "client/global_mounts_cli.h"
#include "client/rpc_client.h"
#include "client/status_json.h"
#include "common/flag_help.h"
#include "common/progress.h"
#include "common/transport_flags.h"
#include "google/protobuf/struct.pb.h"
#include "server/fsck.h"

ABSL_FLAG(std::string, server, "127.0.0.1:7420",
          "server addresses, comma-separated (HOST[:PORT], port 7420 by default)");
ABSL_FLAG(std::string, servers, "", "init: names of servers to make certificates for too");
ABSL_FLAG(std::string, nodes, "", "init: names of nodes to make certificates for too");
ABSL_FLAG(std::string, admins, "", "init: names of admins to make certificates for too");
ABSL_FLAG(std::string, node_options, "",
          "init: options of the node certificates made now: root (no root squash), ro "
          "(read-only), anon (every caller is nobody); docs/security.md");
ABSL_FLAG(int, valid_days, 825,
          "init: days the certificates made now are valid (0: they expire at once)");
ABSL_FLAG(std::string, data_dir, "",
          "fsck: the data directory of a stopped server (holds meta/ and chunks/)");
ABSL_FLAG(bool, repair, false,
          "fsck: fix what has one right answer (counters, link counts, allocated blocks, "
          "records of inodes that do not exist, chunk files without a record)");
ABSL_FLAG(bool, progress, false,
          "fsck: show its progress on stderr (always on a terminal): with --data_dir a line per "
          "phase, online how long the primary's check has taken so far");
ABSL_FLAG(bool, json, false,
          "status, df, clients, switchover, fsck, mounts, nodes, mount -g, umount -g: print "
          "one JSON object on one line (status: every server that answered, and the error of "
          "each that did not; switchover: also when it was not done); docs/operations.md has "
          "the shapes");

namespace {

std::string Human(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = bytes;
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return absl::StrFormat("%.1f %s", v, units[u]);
}

// A primary's latest snapshot for its replica: while it runs, how far, how
// fast and about how long is left; after, how much in how long.
std::string ResyncLine(const grantfs::proto::StatusReply& st) {
  const double secs = st.resync_elapsed_ms() / 1000.0;
  const uint64_t done = st.resync_done_bytes(), total = st.resync_total_bytes();
  const double rate = secs > 0 ? done / secs : 0;
  if (!st.resync_active()) {
    return absl::StrFormat("last one sent %s in %.1f s (%s/s)", Human(done), secs, Human(rate));
  }
  const double pct = total > 0 ? 100.0 * std::min(done, total) / total : 0;
  std::string eta = "?";
  if (rate > 0 && total > done) eta = absl::StrFormat("about %.0f s left", (total - done) / rate);
  if (total <= done) eta = "finishing";
  return absl::StrFormat("sending a snapshot to the replica: %.0f%% (%s of %s) at %s/s, %s", pct,
                         Human(done), Human(total), Human(rate), eta);
}

// A client of `server` alone (no failover to another one).
absl::StatusOr<std::unique_ptr<grantfs::RpcClient>> ClientOf(const std::string& server,
                                                             const grantfs::Transport& transport,
                                                             absl::Duration call_timeout,
                                                             absl::Duration retry_for) {
  grantfs::RpcClientOptions o;
  o.servers = {server};
  o.transport = transport;
  o.call_timeout = call_timeout;
  o.retry_for = retry_for;
  return grantfs::RpcClient::Create(o);
}

// The Status of one server.
absl::StatusOr<grantfs::proto::StatusReply> AskStatus(const std::string& server,
                                                      const grantfs::Transport& transport) {
  absl::StatusOr<std::unique_ptr<grantfs::RpcClient>> rpc =
      ClientOf(server, transport, absl::Seconds(5), absl::Seconds(2));
  if (!rpc.ok()) return rpc.status();
  grantfs::proto::StatusRequest req;
  grantfs::proto::StatusReply st;
  absl::Status s = (*rpc)->Call("Status", &grantfs::proto::GrantFs::Stub::Status, &req, &st);
  if (!s.ok()) return s;
  return st;
}

void PrintStatus(const std::string& server, const grantfs::proto::StatusReply& st) {
  const uint64_t avail = grantfs::AvailableBytes(st);
  printf("server:          %s\n", server.c_str());
  printf("role:            %s\n", st.role().c_str());
  if (!st.not_serving().empty()) printf("not serving:     %s\n", st.not_serving().c_str());
  if (!st.volume_id().empty()) {
    // Which volume, and how new this server's data of it is (a replica:
    // its copy's); docs/failover.md, "Whose data".
    printf("volume:          %s\n", st.volume_id().c_str());
    printf("data epoch:      %llu\n", (unsigned long long)st.data_epoch());
  }
  if (st.epoch() > 0 || !st.replica_state().empty()) {
    printf("epoch:           %llu\n", (unsigned long long)st.epoch());
    if (!st.peer().empty()) printf("peer:            %s\n", st.peer().c_str());
    if (!st.witness().empty()) printf("witness:         %s\n", st.witness().c_str());
    printf("replica state:   %s\n", st.replica_state().c_str());
    // Changes of this epoch: the newest logged (a replica: applied), the
    // newest the replica made durable, and the bytes between.
    printf("log seq:         %llu\n", (unsigned long long)st.log_seq());
    printf("acked seq:       %llu\n", (unsigned long long)st.acked_seq());
    printf("lag bytes:       %llu\n", (unsigned long long)st.lag_bytes());
    if (st.repl_records() > 0) {
      // How many records one replica round trip carried (the group commit
      // of the replication stream).
      printf("replication:     %llu records in %llu messages, %llu round trips (%.2f per record)\n",
             (unsigned long long)st.repl_records(), (unsigned long long)st.repl_messages(),
             (unsigned long long)st.repl_round_trips(),
             static_cast<double>(st.repl_round_trips()) / st.repl_records());
    }
    if (st.has_resync_elapsed_ms()) printf("resync:          %s\n", ResyncLine(st).c_str());
  }
  // A replica holds a copy, not the volume: its space figures are the
  // primary's business.
  if (st.role() == "replica" || st.role() == "fenced" || st.role() == "isolated") return;
  printf("capacity:        %s (%llu bytes)\n", Human(st.capacity_bytes()).c_str(),
         (unsigned long long)st.capacity_bytes());
  printf("used:            %s (%llu bytes)\n", Human(st.used_bytes()).c_str(),
         (unsigned long long)st.used_bytes());
  printf("granted:         %s (%llu bytes)\n", Human(st.granted_bytes()).c_str(),
         (unsigned long long)st.granted_bytes());
  printf("reserved:        %llu bytes\n", (unsigned long long)st.reserved_bytes());
  printf("available:       %s (%llu bytes)\n", Human(avail).c_str(), (unsigned long long)avail);
  printf("data disk:       %s of room for file data (free + held), %s held for promises\n",
         Human(st.disk_room_bytes()).c_str(), Human(st.hold_bytes()).c_str());
  if (st.has_replica_disk_room_bytes()) {
    printf("replica disk:    %s of room; %s\n", Human(st.replica_disk_room_bytes()).c_str(),
           st.replica_hold_short() ? "CANNOT hold what is promised: no new grants until it can"
                                   : "holds every promise");
  }
  printf("ledger:          %s\n", st.ledger_ok() ? "ok (used + granted + reserved <= capacity)"
                                                 : "BROKEN (used + granted + reserved > capacity)");
  printf("inodes:          %llu (next number %llu)\n", (unsigned long long)st.inodes(),
         (unsigned long long)st.next_ino());
  printf("pending deletes: %llu\n", (unsigned long long)st.pending_deletes());
  // Concurrent changes share WAL fsyncs: fewer syncs than changes.
  printf(
      "group commit:    %llu changes, %llu WAL syncs (%.2f per change)\n",
      (unsigned long long)st.meta_changes(), (unsigned long long)st.meta_wal_syncs(),
      st.meta_changes() > 0 ? static_cast<double>(st.meta_wal_syncs()) / st.meta_changes() : 0.0);
  printf("write backlog:   %llu of %llu bytes (flow-control budget)\n",
         (unsigned long long)st.write_backlog_bytes(), (unsigned long long)st.write_budget_bytes());
  printf(
      "metadata leases: %llu held; %llu granted, %llu recalls (%llu changes waited, %llu ran "
      "out), %llu refused (recalled too often), %llu evicted (a mount over its cap)\n",
      (unsigned long long)st.leases_held(), (unsigned long long)st.leases_granted(),
      (unsigned long long)st.lease_recalls(), (unsigned long long)st.lease_recall_waits(),
      (unsigned long long)st.lease_lapsed(), (unsigned long long)st.leases_refused_hot(),
      (unsigned long long)st.leases_evicted());
  printf(
      "calls:           %llu waiting, %llu running; %llu admitted, %llu refused (server busy, "
      "retried by clients), at most %llu waited at once\n",
      (unsigned long long)st.calls_queued(), (unsigned long long)st.calls_running(),
      (unsigned long long)st.calls_admitted(), (unsigned long long)st.calls_refused(),
      (unsigned long long)st.calls_peak_queued());
  int reclaiming = 0;
  for (const auto& ses : st.sessions()) reclaiming += ses.reclaiming() ? 1 : 0;
  printf("sessions:        %d", st.sessions_size());
  if (reclaiming > 0) {
    printf(" (%d of the last run not back yet: unlinked files are kept until they are)",
           reclaiming);
  }
  printf("\n");
  for (const auto& ses : st.sessions()) {
    printf(
        "  %016llx  %-40s open files %-6llu grant %-12llu lease %+.1fs credit %llu "
        "peak writes %u recalls %llu%s\n",
        (unsigned long long)ses.client_id(), ses.client_name().c_str(),
        (unsigned long long)ses.open_files(), (unsigned long long)ses.grant_bytes(),
        ses.lease_left_ms() / 1000.0, (unsigned long long)ses.credit_bytes(), ses.peak_writes(),
        (unsigned long long)ses.recalls(), ses.reclaiming() ? " reclaiming" : "");
  }
}

// `grantfsctl clients`: one line per mount session of the serving primary.
void PrintClients(const std::string& server, const grantfs::proto::StatusReply& st) {
  printf("%d mounts on %s (%s)\n", st.sessions_size(), server.c_str(), st.role().c_str());
  if (st.sessions_size() == 0) return;
  printf("%-16s  %-14s %-21s %-32s %9s %5s %6s %10s %10s %9s %10s %7s\n", "client", "node",
         "address", "mount", "heartbeat", "open", "locked", "grant", "dirty", "in flight", "credit",
         "lease");
  for (const auto& ses : st.sessions()) {
    const std::string beat = !ses.has_heartbeat_age_ms()
                                 ? "-"
                                 : absl::StrFormat("%.1fs ago", ses.heartbeat_age_ms() / 1000.0);
    // "-": not reported (no heartbeat yet, or a mount from before reports).
    const std::string dirty = ses.has_report() ? Human(ses.report().dirty_bytes()) : "-";
    const std::string in_flight =
        ses.has_report() ? absl::StrCat(ses.report().writes_in_flight()) : "-";
    printf("%016llx  %-14s %-21s %-32s %9s %5llu %6llu %10s %10s %9s %10s %+6.1fs%s\n",
           (unsigned long long)ses.client_id(), ses.peer().empty() ? "-" : ses.peer().c_str(),
           ses.address().empty() ? "-" : ses.address().c_str(), ses.client_name().c_str(),
           beat.c_str(), (unsigned long long)ses.open_files(),
           (unsigned long long)ses.locked_files(), Human(ses.grant_bytes()).c_str(), dirty.c_str(),
           in_flight.c_str(), Human(ses.credit_bytes()).c_str(), ses.lease_left_ms() / 1000.0,
           ses.reclaiming() ? " reclaiming" : "");
  }
}

void PrintDf(const std::string& server, const grantfs::proto::StatusReply& st) {
  const uint64_t avail = grantfs::AvailableBytes(st);
  printf("%-22s %14s %14s %14s %5s\n", "server", "capacity", "used", "available", "use%");
  printf("%-22s %14llu %14llu %14llu %4.0f%%\n", server.c_str(),
         (unsigned long long)st.capacity_bytes(), (unsigned long long)st.used_bytes(),
         (unsigned long long)avail,
         st.capacity_bytes() ? 100.0 * st.used_bytes() / st.capacity_bytes() : 0.0);
}

// `grantfsctl fsck`: the report on stdout, one problem per line, then a
// summary line. Exit 0 clean (with --repair: nothing left unrepaired), 1
// problems, 2 when the check could not run.
int Fsck() {
  grantfs::FsckOptions o;
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.repair = absl::GetFlag(FLAGS_repair);
  // A line per phase on stderr, redrawn in place: asked for, or on a
  // terminal.
  std::unique_ptr<grantfs::ProgressLine> line;
  std::string phase;
  if (absl::GetFlag(FLAGS_progress) || isatty(STDERR_FILENO)) {
    o.progress = [&](const char* now, uint64_t done, uint64_t total) {
      if (phase != now) {
        if (line) line->Finish();
        phase = now;
        line = std::make_unique<grantfs::ProgressLine>(stderr, "fsck: " + phase);
      }
      line->Update(done, total);
    };
  }
  absl::StatusOr<grantfs::FsckReport> report = grantfs::CheckVolume(o);
  if (line) line->Finish();
  if (!report.ok()) {
    fprintf(stderr, "grantfsctl fsck: %s\n", std::string(report.status().message()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_json)) {
    printf("%s\n", report->ToJson().c_str());
  } else {
    for (const grantfs::FsckProblem& p : report->problems) printf("%s\n", p.ToString().c_str());
    printf("%s\n", report->Summary().c_str());
  }
  if (o.repair) return report->unrepaired() == 0 ? 0 : 1;
  return report->clean() ? 0 : 1;
}

// `s` as a JSON string, quotes included.
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// `grantfsctl fsck` without --data_dir: asks the primary (wherever it is in
// the list) for the online check.
std::vector<std::string> Names(const std::string& list) {
  return absl::StrSplit(list, ',', absl::SkipEmpty());
}

// grantfsctl init: the cluster's CA, certificates and secret (client/cluster_keys.h).
int Init() {
  grantfs::ClusterKeysOptions o;
  o.dir = grantfs::TlsDirFromFlags();
  o.servers = Names(absl::GetFlag(FLAGS_servers));
  o.nodes = Names(absl::GetFlag(FLAGS_nodes));
  o.admins = Names(absl::GetFlag(FLAGS_admins));
  o.valid_for = absl::Hours(24) * absl::GetFlag(FLAGS_valid_days);
  o.node_options = absl::GetFlag(FLAGS_node_options);
  std::string unknown;
  grantfs::ParseNodeOptions(o.node_options, &unknown);
  if (!unknown.empty()) {
    fprintf(stderr, "grantfsctl init: unknown --node_options: %s (root, ro, anon, subtree=/PATH)\n",
            unknown.c_str());
    return 2;
  }
  absl::StatusOr<std::vector<std::string>> written = grantfs::MakeClusterKeys(o);
  if (!written.ok()) {
    fprintf(stderr, "grantfsctl init: %s\n", written.status().ToString().c_str());
    return 2;
  }
  for (const std::string& f : *written) printf("wrote %s\n", f.c_str());
  if (written->empty()) printf("%s already holds every key asked for\n", o.dir.c_str());
  const std::string& d = o.dir;
  printf(
      "\nCopy to each node, into %s (or point --tls_dir / $GRANTFS_TLS_DIR at them):\n"
      "  servers and the witness: ca.crt server.crt server.key secret\n"
      "  nodes (mounts):          ca.crt node.crt node.key secret\n"
      "  operators (grantfsctl):  ca.crt admin.crt admin.key secret\n"
      "Start servers with --secret_file=%s/secret, mounts and grantfsctl with the same.\n"
      "Keep %s/ca.key here: it makes more certificates (grantfsctl init --nodes=NAME).\n",
      d.c_str(), d.c_str(), d.c_str());
  return 0;
}

int OnlineFsck(const std::vector<std::string>& servers, const grantfs::Transport& transport) {
  for (const std::string& server : servers) {
    absl::StatusOr<grantfs::proto::StatusReply> st = AskStatus(server, transport);
    if (!st.ok() || (st->role() != "primary" && st->role() != "standalone")) continue;
    absl::StatusOr<std::unique_ptr<grantfs::RpcClient>> rpc =
        ClientOf(server, transport, absl::Seconds(120), absl::Seconds(1));
    if (!rpc.ok()) break;
    grantfs::proto::CheckRequest req;
    grantfs::proto::CheckReply reply;
    absl::Status s;
    {
      // One long call: how long it has waited, on stderr (asked for, or on
      // a terminal), redrawn in place until the reply.
      std::optional<grantfs::ElapsedLine> waiting;
      if (absl::GetFlag(FLAGS_progress) || isatty(STDERR_FILENO)) {
        waiting.emplace(stderr, absl::StrCat("fsck: ", server,
                                             " checks its metadata and compares the replica's"));
      }
      s = (*rpc)->Call("Check", &grantfs::proto::GrantFs::Stub::Check, &req, &reply);
    }
    if (!s.ok()) {
      fprintf(stderr, "grantfsctl fsck: %s: %s\n", server.c_str(), s.ToString().c_str());
      return 2;
    }
    const bool compared = reply.replica_error().empty();
    const bool equal = compared && reply.differences_size() == 0;
    if (absl::GetFlag(FLAGS_json)) {
      // The metadata report, with the digest comparison added.
      std::string json = reply.report_json();
      if (!json.empty() && json.back() == '}') {
        json.pop_back();
        absl::StrAppend(&json, ",\"server\":", JsonString(server),
                        ",\"digest_seq\":", reply.primary().seq(),
                        ",\"replica_compared\":", compared ? "true" : "false",
                        ",\"digests_equal\":", equal ? "true" : "false",
                        ",\"digest_differences\":", reply.differences_size(),
                        ",\"replica_error\":", JsonString(reply.replica_error()), "}");
      }
      printf("%s\n", json.c_str());
    } else {
      for (const std::string& p : reply.problems()) printf("%s\n", p.c_str());
      printf("%s\n", reply.summary().c_str());
      for (const std::string& d : reply.differences()) printf("digest_mismatch: %s\n", d.c_str());
      uint64_t records = 0;
      for (const auto& k : reply.primary().kinds()) records += k.records();
      if (!compared) {
        printf("digest of %llu records at change %llu: not compared (%s)\n",
               (unsigned long long)records, (unsigned long long)reply.primary().seq(),
               reply.replica_error().c_str());
      } else {
        printf("digest of %llu records at change %llu: %s\n", (unsigned long long)records,
               (unsigned long long)reply.primary().seq(),
               equal ? "the replica's is the same" : "the replica's DIFFERS");
      }
    }
    return reply.clean() && (equal || !compared) ? 0 : 1;
  }
  fprintf(stderr,
          "grantfsctl fsck: no primary among %s (a stopped server's data directory is checked "
          "with --data_dir=DIR)\n",
          absl::GetFlag(FLAGS_server).c_str());
  return 2;
}

// `grantfsctl switchover`: asks the primary, wherever it is in the list,
// to hand its role to its in-sync replica. Exit 0 done, 1 not done (no
// primary answered, or it refused); each address tried is named with what
// it said. --json: one object (docs/operations.md, "switchover --json"):
// {"done", "server" (the primary asked, "" none), "new_primary", "took_ms",
// "error" ("" when done), "tried": [{"server", "role" ("" no answer),
// "error"}]}, whether it was done or not.
int Switchover(const std::vector<std::string>& servers, const grantfs::Transport& transport) {
  google::protobuf::Struct out;
  auto& f = *out.mutable_fields();
  auto* tried = f["tried"].mutable_list_value();
  std::vector<std::string> why;  // "ADDRESS: what it said", in the order tried
  auto note = [&](const std::string& server, const std::string& role, const std::string& error) {
    auto& t = *tried->add_values()->mutable_struct_value()->mutable_fields();
    t["server"].set_string_value(server);
    t["role"].set_string_value(role);
    t["error"].set_string_value(error);
    why.push_back(absl::StrCat(server, ": ", error.empty() ? role : error));
  };
  std::string primary, new_primary, error;
  double took_ms = 0;
  for (const std::string& server : servers) {
    absl::StatusOr<grantfs::proto::StatusReply> st = AskStatus(server, transport);
    if (!st.ok()) {
      note(server, "", st.status().ToString());
      continue;
    }
    if (st->role() != "primary") {
      note(server, st->role(), absl::StrCat(st->role(), ", not the primary"));
      continue;
    }
    note(server, st->role(), "");
    primary = server;
    new_primary = st->peer();
    absl::StatusOr<std::unique_ptr<grantfs::RpcClient>> rpc =
        ClientOf(server, transport, absl::Seconds(30), absl::Seconds(1));
    absl::Status s = rpc.status();
    const absl::Time began = absl::Now();
    if (rpc.ok()) {
      grantfs::proto::SwitchoverRequest req;
      grantfs::proto::ErrReply reply;
      s = (*rpc)->Call("Switchover", &grantfs::proto::GrantFs::Stub::Switchover, &req, &reply);
    }
    took_ms = absl::ToDoubleMilliseconds(absl::Now() - began);
    if (!s.ok()) error = absl::StrCat("switchover refused by ", server, ": ", s.ToString());
    break;
  }
  if (primary.empty()) {
    error = absl::StrCat("no primary among ", absl::GetFlag(FLAGS_server), " (",
                         absl::StrJoin(why, "; "), ")");
  }
  const bool done = error.empty();
  if (absl::GetFlag(FLAGS_json)) {
    f["done"].set_bool_value(done);
    f["server"].set_string_value(primary);
    f["new_primary"].set_string_value(new_primary);
    f["took_ms"].set_number_value(done ? std::round(took_ms) : 0);
    f["error"].set_string_value(error);
    printf("%s\n", grantfs::ToJsonLine(out).c_str());
  }
  if (!done) {
    fprintf(stderr, "grantfsctl: %s\n", error.c_str());
    return 1;
  }
  if (!absl::GetFlag(FLAGS_json)) {
    printf("switchover: %s handed the primary role to %s in %.0f ms\n", primary.c_str(),
           new_primary.c_str(), took_ms);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "grantfsctl [--config=FILE] [--server=HOST:PORT[,HOST:PORT...]] [--json] "
      "status|df|clients|switchover|fsck|mounts|nodes\n"
      "       grantfsctl [--json] mount -g [-o OPTIONS] [SUBDIR] PATH\n"
      "       grantfsctl [--json] umount -g [-f] PATH\n"
      "       grantfsctl fsck --data_dir=DIR [--repair] [--json] [--progress]\n"
      "       grantfsctl init [--tls_dir=DIR] [--servers=A,B] [--nodes=N1,N2] [--admins=OPS]");
  // --help lists every flag grantfsctl takes (the global-mount commands',
  // the configuration file's and the TLS ones too).
  absl::FlagsUsageConfig usage;
  grantfs::ListFlagsFrom({"client/"}, &usage);
  absl::SetFlagsUsageConfig(usage);
  // The configuration file's values first: the command line's override them.
  if (absl::StatusOr<std::optional<grantfs::ClusterConfig>> conf =
          grantfs::ApplyClusterConfig(argc, argv);
      !conf.ok()) {
    fprintf(stderr, "grantfsctl: %s\n", std::string(conf.status().message()).c_str());
    return 2;
  }
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2 || (args.size() != 2 && !grantfs::IsGlobalMountCommand(args[1]))) {
    fprintf(stderr, "usage: %s\n", std::string(absl::ProgramUsageMessage()).c_str());
    return 2;
  }
  const std::string cmd = args[1];
  if (cmd == "fsck" && !absl::GetFlag(FLAGS_data_dir).empty()) return Fsck();
  if (cmd == "init") return Init();
  if (cmd != "status" && cmd != "df" && cmd != "clients" && cmd != "switchover" && cmd != "fsck" &&
      !grantfs::IsGlobalMountCommand(cmd)) {
    fprintf(stderr, "grantfsctl: unknown command '%s'\nusage: %s\n", cmd.c_str(),
            std::string(absl::ProgramUsageMessage()).c_str());
    return 2;
  }
  std::vector<std::string> servers = grantfs::ServerAddresses(absl::GetFlag(FLAGS_server));
  if (servers.empty()) {
    fprintf(stderr, "grantfsctl: --server names no server\n");
    return 2;
  }
  absl::StatusOr<grantfs::Transport> transport = grantfs::TransportFromFlags("admin", "grantfsctl");
  if (!transport.ok()) {
    fprintf(stderr, "grantfsctl: %s\n", transport.status().ToString().c_str());
    return 2;
  }

  if (grantfs::IsGlobalMountCommand(cmd)) {
    return grantfs::RunGlobalMountCommand(cmd,
                                          std::vector<std::string>(args.begin() + 2, args.end()),
                                          servers, *transport, absl::GetFlag(FLAGS_json));
  }

  if (cmd == "status") {
    // Every server that answers, whatever its role: operators want to see
    // the primary and the replica side by side.
    const bool json = absl::GetFlag(FLAGS_json);
    google::protobuf::Struct out;
    auto* answers = (*out.mutable_fields())["servers"].mutable_list_value();
    auto* unreachable = (*out.mutable_fields())["unreachable"].mutable_list_value();
    int answered = 0;
    for (const std::string& server : servers) {
      absl::StatusOr<grantfs::proto::StatusReply> st = AskStatus(server, *transport);
      if (!st.ok()) {
        fprintf(stderr, "grantfsctl: %s: %s\n", server.c_str(), st.status().ToString().c_str());
        auto& e = *unreachable->add_values()->mutable_struct_value()->mutable_fields();
        e["server"].set_string_value(server);
        e["error"].set_string_value(st.status().ToString());
        continue;
      }
      if (json) {
        *answers->add_values()->mutable_struct_value() = grantfs::StatusToStruct(server, *st);
        ++answered;
        continue;
      }
      if (answered++ > 0) printf("\n");
      PrintStatus(server, *st);
    }
    if (json) printf("%s\n", grantfs::ToJsonLine(out).c_str());
    return answered > 0 ? 0 : 1;
  }

  if (cmd == "fsck") {
    if (absl::GetFlag(FLAGS_repair)) {
      fprintf(stderr, "grantfsctl fsck: --repair needs --data_dir (a stopped server)\n");
      return 2;
    }
    return OnlineFsck(servers, *transport);
  }

  if (cmd == "switchover") return Switchover(servers, *transport);

  // df: the serving primary's view (a replica's may lag, and a fenced or
  // isolated server's is stale). The first server that answers as primary
  // or standalone.
  for (const std::string& server : servers) {
    absl::StatusOr<grantfs::proto::StatusReply> st = AskStatus(server, *transport);
    if (!st.ok()) {
      fprintf(stderr, "grantfsctl: %s: %s\n", server.c_str(), st.status().ToString().c_str());
      continue;
    }
    if (st->role() != "primary" && st->role() != "standalone") continue;
    if (cmd == "clients") {
      if (absl::GetFlag(FLAGS_json)) {
        google::protobuf::Struct out;
        (*out.mutable_fields())["server"].set_string_value(server);
        auto* list = (*out.mutable_fields())["clients"].mutable_list_value();
        for (const auto& ses : st->sessions()) {
          *list->add_values()->mutable_struct_value() = grantfs::SessionToStruct(ses);
        }
        printf("%s\n", grantfs::ToJsonLine(out).c_str());
      } else {
        PrintClients(server, *st);
      }
      return 0;
    }
    if (absl::GetFlag(FLAGS_json)) {
      google::protobuf::Struct out;
      (*out.mutable_fields())["server"].set_string_value(server);
      for (const auto& [name, v] :
           {std::pair<const char*, uint64_t>{"capacity_bytes", st->capacity_bytes()},
            {"used_bytes", st->used_bytes()},
            {"available_bytes", grantfs::AvailableBytes(*st)}}) {
        (*out.mutable_fields())[name].set_number_value(static_cast<double>(v));
      }
      printf("%s\n", grantfs::ToJsonLine(out).c_str());
      return 0;
    }
    PrintDf(server, *st);
    return 0;
  }
  fprintf(stderr, "grantfsctl: no serving primary among %s\n", absl::GetFlag(FLAGS_server).c_str());
  return 1;
}
