#include "server/server_metrics.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "proto/grantfs.pb.h"
#include "server/service_endpoint.h"

namespace grantfs {
namespace {

// StatusReply's numbers (docs/metrics.md): counts since the server, or its
// role, started are counters; the rest are levels now.
const ProtoMetricsSpec& StatusSpec() {
  static const ProtoMetricsSpec* spec = new ProtoMetricsSpec{
      "grantfs_server_",
      {"leases_granted", "lease_recalls", "lease_recall_waits", "lease_lapsed",
       "leases_refused_hot", "leases_evicted", "meta_changes", "meta_wal_syncs", "repl_records",
       "repl_messages", "repl_round_trips", "calls_admitted", "calls_refused", "grant_recalls"},
      {"err"},
      {{"capacity_bytes", "bytes of file data the volume holds at most"},
       {"used_bytes", "bytes of file data stored (4 KiB blocks)"},
       {"inodes", "files, directories and links in the volume"},
       {"next_ino", "the next inode number to be given out"},
       {"pending_deletes", "removed files whose blocks are still to be freed"},
       {"granted_bytes", "space granted to mounts and not yet used (sum of every grant)"},
       {"reserved_bytes", "space held by writes in progress"},
       {"ledger_ok", "1 when used + granted + reserved <= capacity"},
       {"write_backlog_bytes", "bytes of writes being applied now"},
       {"write_budget_bytes", "flow-control budget of writes in progress (--write_backlog_mb)"},
       {"epoch", "the witness epoch this server serves or follows"},
       {"log_seq", "newest change of this epoch in the replication log"},
       {"acked_seq", "newest change the replica has made durable"},
       {"lag_bytes", "bytes of changes sent or queued for the replica, not yet acknowledged"},
       {"data_epoch", "how far this copy of the volume's history has gone"},
       {"leases_held", "metadata leases held by mounts now"},
       {"leases_granted", "metadata leases granted"},
       {"lease_recalls", "metadata lease recall messages sent"},
       {"lease_recall_waits", "changes that waited for a recall"},
       {"lease_lapsed", "recalls that ended by a lease running out"},
       {"leases_refused_hot", "leases not granted: the object was recalled too often"},
       {"leases_evicted", "leases recalled from a mount over --max_leases_per_mount"},
       {"meta_changes", "metadata changes made durable"},
       {"meta_wal_syncs", "WAL fsyncs those changes needed (group commit)"},
       {"repl_records", "records logged for the replica (metadata and data changes)"},
       {"repl_messages", "replication stream messages that carried records"},
       {"repl_round_trips", "replica acknowledgements that advanced acked_seq"},
       {"calls_queued", "calls waiting for a worker now"},
       {"calls_running", "calls running now"},
       {"calls_admitted", "calls admitted to the request queue"},
       {"calls_refused", "calls refused (RESOURCE_EXHAUSTED): a queue bound was reached"},
       {"calls_peak_queued", "most calls that waited at once"},
       {"disk_room_bytes", "room file data may still take on the data disk"},
       {"hold_bytes", "space the space hold keeps for promises made"},
       {"replica_disk_room_bytes", "room on the in-sync replica's data disk, as it last said"},
       {"replica_hold_short",
        "1 when the replica's hold does not cover what was promised (no new grants)"},
       {"resync_active", "1 while a snapshot is being sent to the replica (a resync)"},
       {"resync_done_bytes", "bytes of the latest resync's files read so far"},
       {"resync_total_bytes", "bytes of the latest resync's files, as they were when it began"},
       {"resync_elapsed_ms", "how long the latest resync ran (runs)"},
       {"grants_outstanding", "mount sessions holding a space grant now"},
       {"grant_recalls", "space grant recalls sent to mounts"}},
      // The space ledger (docs/metrics.md): names of its own.
      {{"capacity_bytes", "grantfs_ledger_capacity_bytes"},
       {"used_bytes", "grantfs_ledger_used_bytes"},
       {"granted_bytes", "grantfs_ledger_granted_bytes"},
       {"reserved_bytes", "grantfs_ledger_reserved_bytes"}}};
  return *spec;
}

// The fields of StatusReply that only a server holding the volume sets
// (GrantFsService::FillStatus); a replica's would read as zeros.
const ProtoMetricsSpec& ReplicaStatusSpec() {
  static const ProtoMetricsSpec* spec = [] {
    auto* s = new ProtoMetricsSpec(StatusSpec());
    for (const char* f :
         {"capacity_bytes",      "used_bytes",         "inodes",         "next_ino",
          "pending_deletes",     "granted_bytes",      "reserved_bytes", "ledger_ok",
          "write_backlog_bytes", "write_budget_bytes", "leases_held",    "leases_granted",
          "lease_recalls",       "lease_recall_waits", "lease_lapsed",   "leases_refused_hot",
          "leases_evicted",      "meta_changes",       "meta_wal_syncs", "disk_room_bytes",
          "hold_bytes",          "grants_outstanding", "grant_recalls"}) {
      s->skip.insert(f);
    }
    return s;
  }();
  return *spec;
}

const ProtoMetricsSpec& ReportSpec() {
  static const ProtoMetricsSpec* spec = new ProtoMetricsSpec{
      "grantfs_session_",
      {},
      {},
      {{"dirty_bytes", "bytes written on the mount, not yet on the server (its last heartbeat)"},
       {"dirty_limit_bytes", "the most its write cache holds (its last heartbeat)"},
       {"kernel_inodes", "inodes its kernel holds (its last heartbeat)"},
       {"writes_in_flight", "write RPCs it had under way (its last heartbeat)"}}};
  return *spec;
}

const ProtoMetricsSpec& SessionSpec() {
  static const ProtoMetricsSpec* spec = new ProtoMetricsSpec{
      "grantfs_session_",
      {"recalls"},
      {"client_id", "lease_expires_ms"},
      {{"open_files", "files the mount has open"},
       {"grant_bytes", "the mount's space grant"},
       {"credit_bytes", "in-flight write credit it would get now"},
       {"peak_writes", "most writes it had in flight at once"},
       {"recalls", "grant recalls sent to it"},
       {"reclaiming", "1 while it has not reclaimed its open files after a restart or failover"},
       {"lease_left_ms", "seconds until its session lease runs out"},
       {"heartbeat_age_ms", "seconds since its last heartbeat"},
       {"locked_files", "files it holds locks on"}}};
  return *spec;
}

}  // namespace

void ServerMetrics::SetEndpoint(GrantFsEndpoint* endpoint, const std::string& role) {
  absl::MutexLock l(&mu_);
  if (endpoint != nullptr) {
    // A role starting; "primary" after another role of this process is a
    // takeover (a promotion, or taking the role back).
    if (role == "primary" && roles_started_ > 0) ++takeovers_;
    ++roles_started_;
  }
  endpoint_ = endpoint;
  role_ = role;
}

std::string ServerMetrics::Render() {
  MetricsText t;
  calls_.Write(&t);
  t.Counter("grantfs_server_read_bytes_total", "bytes of file data read by mounts",
            read_bytes_.load(std::memory_order_relaxed));
  t.Counter("grantfs_server_write_bytes_total",
            "bytes of file data written by mounts (applied, retries counted once)",
            written_bytes_.load(std::memory_order_relaxed));
  absl::MutexLock l(&mu_);
  t.Counter("grantfs_server_takeovers_total",
            "times this process became the primary after another role (a failover, a "
            "switchover, or taking the role back), not at its first start as primary",
            static_cast<double>(takeovers_));
  proto::StatusReply s;
  if (endpoint_ != nullptr) endpoint_->FillStatus(&s);
  const std::string role = s.role().empty() ? role_ : s.role();
  t.Gauge("grantfs_server_role", "1 for the role this server has now (label role)", 1,
          absl::StrCat("role=\"", LabelValue(role), "\""));
  if (endpoint_ == nullptr) return t.text();
  t.Gauge("grantfs_server_info", "1, labelled with the volume and the addresses of the cluster", 1,
          absl::StrCat("volume=\"", LabelValue(s.volume_id()), "\",server=\"",
                       LabelValue(s.server()), "\",peer=\"", LabelValue(s.peer()), "\",witness=\"",
                       LabelValue(s.witness()), "\""));
  if (!s.replica_state().empty()) {
    t.Gauge("grantfs_server_replica_state", "1 for the replication state now (label state)", 1,
            absl::StrCat("state=\"", LabelValue(s.replica_state()), "\""));
  }
  t.Gauge("grantfs_server_serving", "1 when this server takes changes (not fenced or isolated)",
          s.not_serving().empty() && (role == "primary" || role == "standalone") ? 1 : 0);
  WriteProtoNumbers(&t, endpoint_->has_volume() ? StatusSpec() : ReplicaStatusSpec(), s);
  t.Gauge("grantfs_server_sessions", "mount sessions open", s.sessions_size());
  for (const proto::SessionInfo& ses : s.sessions()) {
    const std::string labels =
        absl::StrCat("client_id=\"", absl::Hex(ses.client_id(), absl::kZeroPad16), "\",client=\"",
                     LabelValue(ses.client_name()), "\"");
    WriteProtoNumbers(&t, SessionSpec(), ses, labels);
    if (ses.has_report()) WriteProtoNumbers(&t, ReportSpec(), ses.report(), labels);
  }
  return t.text();
}

}  // namespace grantfs
