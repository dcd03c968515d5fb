// The machine-readable form of a server's status (`grantfsctl status --json`).
//
// The same facts as the text form (grantfsctl_main.cc PrintStatus), named as
// in proto StatusReply: role, not_serving, volume_id, data_epoch, epoch, peer,
// witness, replica_state, log_seq, acked_seq, lag_bytes, repl_records,
// repl_messages, repl_round_trips; for a server that holds the volume (not a
// replica, fenced or isolated one) also the space ledger (capacity_bytes,
// used_bytes, granted_bytes, reserved_bytes, available_bytes, ledger_ok),
// inodes, next_ino, pending_deletes, meta_changes, meta_wal_syncs,
// write_backlog_bytes, write_budget_bytes, the lease counters and the
// sessions. Numbers are JSON
// numbers (exact up to 2^53); a session's client_id is a 16-digit hex string,
// as the text prints it. Stateless; safe from any thread.
#ifndef GRANTFS_CLIENT_STATUS_JSON_H_
#define GRANTFS_CLIENT_STATUS_JSON_H_

#include <string>

#include "google/protobuf/struct.pb.h"
#include "proto/grantfs.pb.h"

namespace grantfs {

// What `server` said, as one JSON object ("server" is the address asked).
google::protobuf::Struct StatusToStruct(const std::string& server, const proto::StatusReply& st);

// One mount session (`grantfsctl clients --json`, and each of "sessions"
// above): client_id (16 hex digits), client_name (host:mount point), node
// (its certificate's common name), address (HOST:PORT its latest session
// call came from; "" not yet known, or a server from before), open_files, locked_files,
// grant_bytes, credit_bytes, peak_writes, recalls, lease_left_ms, reclaiming, heartbeat_age_ms (-1:
// no heartbeat yet, or a server from before it was kept), and what its last heartbeat reported when
// it reported anything (absent otherwise: a mount from before reports): dirty_bytes,
// dirty_limit_bytes, writes_in_flight, kernel_inodes.
google::protobuf::Struct SessionToStruct(const proto::SessionInfo& ses);

// Bytes neither used, granted nor reserved (0 when the ledger is over).
uint64_t AvailableBytes(const proto::StatusReply& st);

// `value` printed as one line of JSON, field names as given.
std::string ToJsonLine(const google::protobuf::Struct& value);

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_STATUS_JSON_H_
