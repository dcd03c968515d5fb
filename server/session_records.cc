#include "server/session_records.h"

#include <cerrno>
#include <optional>
#include <string>

#include "common/errno_status.h"
#include "common/status_macros.h"
#include "server/allocator.h"
#include "server/keys.h"

namespace grantfs {

absl::Status SessionRecords::PutSession(uint64_t client_id, const proto::SessionRecord& rec,
                                        RequestTag* tag) {
  return store_->Mutate(tag, [&](MetaTxn* txn) -> absl::Status {
    proto::SessionRecord put = rec;
    ASSIGN_OR_RETURN(std::optional<std::string> raw, txn->Get(keys::Session(client_id)));
    proto::SessionRecord old;
    if (raw && old.ParseFromString(*raw) && put.ino_ranges_size() == 0) {
      *put.mutable_ino_ranges() = old.ino_ranges();
    }
    txn->Put(keys::Session(client_id), put.SerializeAsString());
    return absl::OkStatus();
  });
}

absl::StatusOr<proto::SessionRecord::InodeRange> SessionRecords::AddInodeRange(uint64_t client_id,
                                                                               uint32_t count,
                                                                               uint64_t keep_from,
                                                                               RequestTag* tag) {
  proto::SessionRecord::InodeRange range;
  RETURN_IF_ERROR(store_->Mutate(tag, [&](MetaTxn* txn) -> absl::Status {
    ASSIGN_OR_RETURN(std::optional<std::string> raw, txn->Get(keys::Session(client_id)));
    proto::SessionRecord rec;
    if (!raw) return ErrnoStatus(EAGAIN, "the session is not recorded yet");
    if (!rec.ParseFromString(*raw)) return CorruptRecord(keys::Session(client_id));
    proto::SessionRecord kept = rec;
    kept.clear_ino_ranges();
    for (const auto& r : rec.ino_ranges()) {
      if (r.end() > keep_from) *kept.add_ino_ranges() = r;
    }
    // A mount that never says which it still uses gets no more: it makes
    // its creates the synchronous way until it does.
    if (kept.ino_ranges_size() >= kMaxInodeRanges) {
      return ErrnoStatus(EAGAIN,
                         "the session holds as many inode ranges as it may; keep_from"
                         " says which it is done with");
    }
    const uint64_t first = txn->counters().next_ino();
    txn->counters().set_next_ino(first + count);
    range.set_first(first);
    range.set_end(first + count);
    if (tag != nullptr) tag->value = first;  // a retry answers with this range
    *kept.add_ino_ranges() = range;
    txn->Put(keys::Session(client_id), kept.SerializeAsString());
    return absl::OkStatus();
  }));
  return range;
}

absl::StatusOr<std::optional<proto::SessionRecord>> SessionRecords::GetSession(uint64_t client_id) {
  ASSIGN_OR_RETURN(std::optional<std::string> raw, store_->Get(keys::Session(client_id)));
  if (!raw) return std::optional<proto::SessionRecord>();
  proto::SessionRecord rec;
  if (!rec.ParseFromString(*raw)) return CorruptRecord(keys::Session(client_id));
  return std::optional<proto::SessionRecord>(std::move(rec));
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
