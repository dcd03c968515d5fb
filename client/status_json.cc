#include "client/status_json.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"

namespace grantfs {

namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

void SetNumber(Struct& s, const char* name, double v) {
  (*s.mutable_fields())[name].set_number_value(v);
}

}  // namespace

google::protobuf::Struct SessionToStruct(const proto::SessionInfo& ses) {
  google::protobuf::Struct s;
  (*s.mutable_fields())["client_id"].set_string_value(absl::StrFormat("%016x", ses.client_id()));
  (*s.mutable_fields())["client_name"].set_string_value(ses.client_name());
  (*s.mutable_fields())["node"].set_string_value(ses.peer());
  (*s.mutable_fields())["address"].set_string_value(ses.address());
  SetNumber(s, "open_files", ses.open_files());
  SetNumber(s, "locked_files", ses.locked_files());
  SetNumber(s, "grant_bytes", ses.grant_bytes());
  SetNumber(s, "lease_left_ms", ses.lease_left_ms());
  SetNumber(s, "credit_bytes", ses.credit_bytes());
  SetNumber(s, "peak_writes", ses.peak_writes());
  SetNumber(s, "recalls", ses.recalls());
  (*s.mutable_fields())["reclaiming"].set_bool_value(ses.reclaiming());
  // -1 and no report: no heartbeat yet, or a server or mount from before
  // they were kept.
  SetNumber(s, "heartbeat_age_ms", ses.has_heartbeat_age_ms() ? ses.heartbeat_age_ms() : -1);
  if (ses.has_report()) {
    SetNumber(s, "dirty_bytes", ses.report().dirty_bytes());
    SetNumber(s, "dirty_limit_bytes", ses.report().dirty_limit_bytes());
    SetNumber(s, "writes_in_flight", ses.report().writes_in_flight());
    SetNumber(s, "kernel_inodes", ses.report().kernel_inodes());
  }
  return s;
}

uint64_t AvailableBytes(const proto::StatusReply& st) {
  const uint64_t taken = st.used_bytes() + st.granted_bytes() + st.reserved_bytes();
  return st.capacity_bytes() > taken ? st.capacity_bytes() - taken : 0;
}

Struct StatusToStruct(const std::string& server, const proto::StatusReply& st) {
  Struct out;
  auto& f = *out.mutable_fields();
  f["server"].set_string_value(server);
  f["role"].set_string_value(st.role());
  f["not_serving"].set_string_value(st.not_serving());
  f["volume_id"].set_string_value(st.volume_id());
  SetNumber(out, "data_epoch", st.data_epoch());
  // Replication: always present (the text prints it only for a replicated
  // server; here "epoch": 0 and "replica_state": "" say the same).
  SetNumber(out, "epoch", st.epoch());
  f["peer"].set_string_value(st.peer());
  f["witness"].set_string_value(st.witness());
  f["replica_state"].set_string_value(st.replica_state());
  SetNumber(out, "log_seq", st.log_seq());
  SetNumber(out, "acked_seq", st.acked_seq());
  SetNumber(out, "lag_bytes", st.lag_bytes());
  SetNumber(out, "repl_records", st.repl_records());
  SetNumber(out, "repl_messages", st.repl_messages());
  SetNumber(out, "repl_round_trips", st.repl_round_trips());
  // A replica holds a copy, not the volume: its space figures are the
  // primary's business, as in the text.
  if (st.role() == "replica" || st.role() == "fenced" || st.role() == "isolated") return out;
  SetNumber(out, "capacity_bytes", st.capacity_bytes());
  SetNumber(out, "used_bytes", st.used_bytes());
  SetNumber(out, "granted_bytes", st.granted_bytes());
  SetNumber(out, "reserved_bytes", st.reserved_bytes());
  SetNumber(out, "available_bytes", AvailableBytes(st));
  f["ledger_ok"].set_bool_value(st.ledger_ok());
  SetNumber(out, "disk_room_bytes", st.disk_room_bytes());
  SetNumber(out, "hold_bytes", st.hold_bytes());
  if (st.has_resync_elapsed_ms()) {
    f["resync_active"].set_bool_value(st.resync_active());
    SetNumber(out, "resync_done_bytes", st.resync_done_bytes());
    SetNumber(out, "resync_total_bytes", st.resync_total_bytes());
    SetNumber(out, "resync_elapsed_ms", st.resync_elapsed_ms());
  }
  if (st.has_replica_disk_room_bytes()) {
    SetNumber(out, "replica_disk_room_bytes", st.replica_disk_room_bytes());
    f["replica_hold_short"].set_bool_value(st.replica_hold_short());
  }
  SetNumber(out, "inodes", st.inodes());
  SetNumber(out, "next_ino", st.next_ino());
  SetNumber(out, "pending_deletes", st.pending_deletes());
  SetNumber(out, "meta_changes", st.meta_changes());
  SetNumber(out, "meta_wal_syncs", st.meta_wal_syncs());
  SetNumber(out, "write_backlog_bytes", st.write_backlog_bytes());
  SetNumber(out, "write_budget_bytes", st.write_budget_bytes());
  SetNumber(out, "leases_held", st.leases_held());
  SetNumber(out, "leases_granted", st.leases_granted());
  SetNumber(out, "lease_recalls", st.lease_recalls());
  SetNumber(out, "lease_recall_waits", st.lease_recall_waits());
  SetNumber(out, "lease_lapsed", st.lease_lapsed());
  SetNumber(out, "leases_refused_hot", st.leases_refused_hot());
  SetNumber(out, "leases_evicted", st.leases_evicted());
  SetNumber(out, "calls_queued", st.calls_queued());
  SetNumber(out, "calls_running", st.calls_running());
  SetNumber(out, "calls_admitted", st.calls_admitted());
  SetNumber(out, "calls_refused", st.calls_refused());
  SetNumber(out, "calls_peak_queued", st.calls_peak_queued());
  int reclaiming = 0;
  auto* sessions = f["sessions"].mutable_list_value();
  for (const proto::SessionInfo& ses : st.sessions()) {
    reclaiming += ses.reclaiming() ? 1 : 0;
    *sessions->add_values()->mutable_struct_value() = SessionToStruct(ses);
  }
  // Sessions of the last run not back yet: unlinked files are kept until
  // they are.
  SetNumber(out, "sessions_reclaiming", reclaiming);
  return out;
}

std::string ToJsonLine(const google::protobuf::Struct& value) {
  std::string json;
  google::protobuf::util::JsonPrintOptions po;
  po.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(value, &json, po).ok()) return "{}";
  return json;
}

}  // namespace grantfs
