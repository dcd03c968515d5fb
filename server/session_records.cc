#include "server/session_records.h"

#include <cerrno>
#include <string>

#include "common/errno_status.h"
#include "common/status_macros.h"
#include "server/allocator.h"
#include "server/keys.h"

namespace grantfs {

absl::Status SessionRecords::PutSession(uint64_t client_id, const proto::SessionRecord& rec,
                                        RequestTag* tag) {
  return store_->Mutate(tag, [&](MetaTxn* txn) -> absl::Status {
    txn->Put(keys::Session(client_id), rec.SerializeAsString());
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<std::pair<uint64_t, proto::SessionRecord>>>
SessionRecords::ListSessions() {
  return store_->ListRecords<proto::SessionRecord>('S');
}

absl::Status SessionRecords::EndSession(uint64_t client_id) {
  return store_->Mutate(nullptr, [&](MetaTxn* txn) -> absl::Status {
    txn->Delete(keys::Session(client_id));
    if (txn->ledger().GrantOf(client_id) == 0) return absl::OkStatus();
    PutGrant(txn, client_id, txn->ledger().EndSession(client_id));
    return absl::OkStatus();
  });
}

absl::StatusOr<std::optional<proto::DedupeRecord>> SessionRecords::FindDedupe(uint64_t client_id,
                                                                              uint64_t seq) {
  ASSIGN_OR_RETURN(std::optional<std::string> v, store_->Get(keys::Dedupe(client_id, seq)));
  if (!v) return std::optional<proto::DedupeRecord>();
  proto::DedupeRecord d;
  if (!d.ParseFromString(*v)) return ErrnoStatus(EIO, "corrupt dedupe record");
  return std::optional<proto::DedupeRecord>(d);
}

absl::StatusOr<int> SessionRecords::ExpireDedupe(absl::Duration retention) {
  const int64_t cutoff = store_->clock()->NowNanos() - absl::ToInt64Nanoseconds(retention);
  std::vector<std::string> expired;
  RETURN_IF_ERROR(store_->Scan(
      "Q", "Q", [&](absl::string_view key, absl::string_view value) -> absl::StatusOr<bool> {
        proto::DedupeRecord d;
        if (!d.ParseFromArray(value.data(), static_cast<int>(value.size())) ||
            d.time_ns() < cutoff) {
          expired.emplace_back(key);
        }
        return true;
      }));
  // Not synced: a record that comes back after a crash only expires again.
  RETURN_IF_ERROR(store_->DeleteUnsynced(expired, "dedupe expiry"));
  return static_cast<int>(expired.size());
}

}  // namespace grantfs
