// The durable records of client sessions ('S': which clients may come back
// to reclaim after a restart or a takeover) and of applied requests ('Q':
// exactly-once, server/dedupe.h), on the metadata store
// (server/meta_store.h).
//
// Thread-safe. Errors are errno statuses (common/errno_status.h).
#ifndef GRANTFS_SERVER_SESSION_RECORDS_H_
#define GRANTFS_SERVER_SESSION_RECORDS_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/store.pb.h"
#include "server/meta_store.h"

namespace grantfs {

class SessionRecords {
 public:
  // Inode ranges one session's record keeps at most (AddInodeRange).
  static constexpr int kMaxInodeRanges = 16;

  // `store` is not owned and outlives this.
  explicit SessionRecords(MetaStore* store) : store_(store) {}
  SessionRecords(const SessionRecords&) = delete;
  SessionRecords& operator=(const SessionRecords&) = delete;

  // The durable record of an open session, so that a server that takes
  // over or restarts knows which clients may come back to reclaim. The
  // inode ranges of the record it replaces are kept.
  // `tag`: the request the change is made for, or null (MetaStore::Mutate).
  absl::Status PutSession(uint64_t client_id, const proto::SessionRecord& rec,
                          RequestTag* tag = nullptr);
  absl::StatusOr<std::vector<std::pair<uint64_t, proto::SessionRecord>>> ListSessions();
  // The record of one session (nullopt: none).
  absl::StatusOr<std::optional<proto::SessionRecord>> GetSession(uint64_t client_id);
  // `count` fresh inode numbers for the session's namespace grants, added to
  // its record (which keeps its earlier ranges that end above `keep_from`).
  // EAGAIN when the session has no record yet.
  absl::StatusOr<proto::SessionRecord::InodeRange> AddInodeRange(uint64_t client_id, uint32_t count,
                                                                 uint64_t keep_from,
                                                                 RequestTag* tag = nullptr);
  // A session ended: its grant goes back to free space and its record is
  // deleted, in one batch.
  absl::Status EndSession(uint64_t client_id);

  // Exactly-once: the record of request (client_id, seq), if it was
  // applied; and deletion of records older than `retention` (not synced: a
  // record that comes back after a crash only expires again).
  absl::StatusOr<std::optional<proto::DedupeRecord>> FindDedupe(uint64_t client_id, uint64_t seq);
  absl::StatusOr<int> ExpireDedupe(absl::Duration retention);

 private:
  MetaStore* const store_;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_SESSION_RECORDS_H_
