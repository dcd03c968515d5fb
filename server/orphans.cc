#include "server/orphans.h"

#include <algorithm>
#include <cerrno>
#include <optional>

#include "common/errno_status.h"
#include "common/status_macros.h"
#include "server/allocator.h"
#include "server/keys.h"

namespace grantfs {

void Orphans::SetOpenHolders(std::function<proto::OrphanRecord(uint64_t)> holders) {
  open_holders_ = std::move(holders);
}

std::string Orphans::RecordOf(uint64_t ino) const {
  return open_holders_ ? open_holders_(ino).SerializeAsString() : std::string();
}

absl::Status Orphans::ReapIn(MetaTxn* txn, uint64_t ino, const proto::InodeRecord& rec) {
  txn->Delete(keys::Orphan(ino));
  txn->Delete(keys::Inode(ino));
  txn->Delete(keys::Locks(ino));
  txn->Put(keys::Garbage(ino), rec.SerializeAsString());
  const std::string prefix = keys::Prefix('X', ino);
  RETURN_IF_ERROR(txn->Scan(prefix, prefix,
                            [&](absl::string_view key, absl::string_view) -> absl::StatusOr<bool> {
                              txn->Delete(std::string(key));
                              return true;
                            }));
  txn->counters().set_inodes(txn->counters().inodes() - 1);
  return absl::OkStatus();
}

absl::Status Orphans::Reap(uint64_t ino) {
  return store_->Mutate(nullptr, [&](MetaTxn* txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto orphan, txn->Get(keys::Orphan(ino)));
    if (!orphan) return absl::OkStatus();
    ASSIGN_OR_RETURN(proto::InodeRecord rec, txn->GetInode(ino));
    if (rec.nlink() != 0) return absl::OkStatus();
    return ReapIn(txn, ino, rec);
  });
}

absl::StatusOr<bool> Orphans::SyncOrphan(uint64_t ino, bool keep_unheld, RequestTag* tag) {
  bool reaped = false;
  bool unchanged = false;
  absl::Status s = store_->Mutate(tag, [&](MetaTxn* txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto orphan, txn->Get(keys::Orphan(ino)));
    if (!orphan) return ErrnoStatus(ENOENT, "not an orphan");
    ASSIGN_OR_RETURN(proto::InodeRecord rec, txn->GetInode(ino));
    if (rec.nlink() != 0) return ErrnoStatus(ENOENT, "not an orphan");
    const std::string now = RecordOf(ino);
    proto::OrphanRecord holders;
    if (!holders.ParseFromString(now)) return ErrnoStatus(EIO, "orphan record");
    if (holders.holders_size() == 0 && !keep_unheld) {
      reaped = true;
      return ReapIn(txn, ino, rec);
    }
    if (now == *orphan) {
      unchanged = true;
      return ErrnoStatus(EEXIST, "unchanged");
    }
    txn->Put(keys::Orphan(ino), now);
    return absl::OkStatus();
  });
  // Nothing to write: not (or no longer) an orphan, or the same holders.
  if (!s.ok() && (unchanged || ToErrno(s) == ENOENT)) return false;
  RETURN_IF_ERROR(s);
  return reaped;
}

absl::StatusOr<std::vector<std::pair<uint64_t, proto::OrphanRecord>>> Orphans::ListOrphans() {
  return store_->ListRecords<proto::OrphanRecord>('O');
}

absl::StatusOr<std::vector<uint64_t>> Orphans::ListGarbage() {
  const std::string prefix(1, 'G');
  std::vector<uint64_t> out;
  RETURN_IF_ERROR(store_->Scan(
      prefix, prefix, [&](absl::string_view key, absl::string_view) -> absl::StatusOr<bool> {
        out.push_back(keys::GetBigEndian64(key.data() + 1));
        return true;
      }));
  return out;
}

absl::StatusOr<uint64_t> Orphans::GarbageChunkSpan(uint64_t ino) {
  ASSIGN_OR_RETURN(std::optional<std::string> v, store_->Get(keys::Garbage(ino)));
  if (!v) return ErrnoStatus(EIO, "get garbage: NotFound");
  proto::InodeRecord rec;
  if (!rec.ParseFromString(*v)) return ErrnoStatus(EIO, "corrupt garbage record");
  const uint64_t cs = store_->chunk_size();
  uint64_t span = (rec.size() + cs - 1) / cs;
  const std::string prefix = keys::Prefix('C', ino);
  RETURN_IF_ERROR(store_->Scan(
      prefix, prefix, [&](absl::string_view key, absl::string_view) -> absl::StatusOr<bool> {
        span = std::max(span, keys::GetBigEndian64(key.data() + 9) + 1);
        return true;
      }));
  return span;
}

absl::Status Orphans::FinishGarbage(uint64_t ino) {
  return store_->Mutate(nullptr, [&](MetaTxn* txn) -> absl::Status {
    const std::string prefix = keys::Prefix('C', ino);
    uint64_t freed = 0;
    RETURN_IF_ERROR(
        txn->Scan(prefix, prefix,
                  [&](absl::string_view key, absl::string_view value) -> absl::StatusOr<bool> {
                    proto::ChunkRecord chunk;
                    if (chunk.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
                      freed += CountBits(chunk.bitmap());
                    }
                    txn->Delete(std::string(key));
                    return true;
                  }));
    txn->Delete(keys::Garbage(ino));
    txn->ledger().FreeUsed(freed);
    return absl::OkStatus();
  });
}

}  // namespace grantfs
