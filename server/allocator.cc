#include "server/allocator.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/status_macros.h"
#include "server/dedupe.h"
#include "server/inodes.h"
#include "server/keys.h"

namespace grantfs {
namespace {

// Chunk `c` of `ino` as the change `txn` sees it (empty: none yet).
absl::StatusOr<proto::ChunkRecord> ChunkIn(MetaTxn* txn, uint64_t ino, uint64_t c) {
  ASSIGN_OR_RETURN(std::optional<std::string> v, txn->Get(keys::Chunk(ino, c)));
  proto::ChunkRecord chunk;
  if (v && !chunk.ParseFromString(*v)) return ErrnoStatus(EIO, "corrupt chunk");
  return chunk;
}

// Calls fn(chunk_index, lo, hi) for each chunk that [offset, offset + length)
// touches, with the inclusive range of its blocks inside that chunk.
template <typename Fn>
absl::Status ForEachChunkRange(uint64_t offset, uint64_t length, uint64_t chunk_size, Fn fn) {
  if (length == 0) return absl::OkStatus();
  const uint64_t per_chunk = chunk_size / kBlockSize;
  const uint64_t first = offset / kBlockSize;
  const uint64_t last = (offset + length - 1) / kBlockSize;
  for (uint64_t c = first / per_chunk; c <= last / per_chunk; ++c) {
    const uint64_t base = c * per_chunk;
    const uint64_t lo = std::max(first, base) - base;
    const uint64_t hi = std::min(last, base + per_chunk - 1) - base;
    RETURN_IF_ERROR(fn(c, lo, hi));
  }
  return absl::OkStatus();
}

bool BitSet(const std::string& bitmap, uint64_t b) {
  return b / 8 < bitmap.size() && (bitmap[b / 8] >> (b % 8)) & 1;
}

}  // namespace

int CountBits(const std::string& bitmap) {
  int n = 0;
  for (unsigned char c : bitmap) n += __builtin_popcount(c);
  return n;
}

absl::Status CutAllocation(MetaTxn* txn, uint64_t chunk_size, uint64_t ino, proto::InodeRecord* rec,
                           uint64_t new_size) {
  const uint64_t cs = chunk_size;
  const uint64_t blocks_per_chunk = cs / kBlockSize;
  // First block wholly past new_size, counted within its chunk.
  const uint64_t first_chunk = new_size / cs;
  const uint64_t first_block = (new_size % cs + kBlockSize - 1) / kBlockSize;
  const std::string prefix = keys::Prefix('C', ino);
  uint64_t freed = 0;
  // The applied records: a change that cuts has written no chunk record
  // before (one Mutate, one SetAttr).
  RETURN_IF_ERROR(
      txn->Scan(keys::Chunk(ino, first_chunk), prefix,
                [&](absl::string_view key, absl::string_view value) -> absl::StatusOr<bool> {
                  const uint64_t index = keys::GetBigEndian64(key.data() + 9);
                  proto::ChunkRecord chunk;
                  if (!chunk.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
                    return ErrnoStatus(EIO, "corrupt chunk record");
                  }
                  std::string* bitmap = chunk.mutable_bitmap();
                  const int before = CountBits(*bitmap);
                  const uint64_t from = index == first_chunk ? first_block : 0;
                  for (uint64_t b = from; b < blocks_per_chunk && b / 8 < bitmap->size(); ++b) {
                    (*bitmap)[b / 8] &= ~(1 << (b % 8));
                  }
                  freed += before - CountBits(*bitmap);
                  if (CountBits(*bitmap) == 0) {
                    txn->Delete(std::string(key));
                  } else {
                    txn->Put(std::string(key), chunk.SerializeAsString());
                  }
                  return true;
                }));
  rec->set_allocated_blocks(rec->allocated_blocks() - freed);
  txn->ledger().FreeUsed(freed);
  return absl::OkStatus();
}

void PutGrant(MetaTxn* txn, uint64_t client_id, uint64_t blocks) {
  if (blocks == 0) {
    txn->Delete(keys::Grant(client_id));
  } else {
    proto::GrantRecord g;
    g.set_blocks(blocks);
    txn->Put(keys::Grant(client_id), g.SerializeAsString());
  }
}

absl::StatusOr<Reservation> Allocator::Reserve(uint64_t ino, uint64_t offset, uint64_t length,
                                               uint64_t grant_client) {
  return store_->Locked([&](MetaTxn* txn) -> absl::StatusOr<Reservation> {
    uint64_t blocks = 0;
    RETURN_IF_ERROR(ForEachChunkRange(offset, length, store_->chunk_size(),
                                      [&](uint64_t c, uint64_t lo, uint64_t hi) -> absl::Status {
                                        ASSIGN_OR_RETURN(proto::ChunkRecord chunk,
                                                         ChunkIn(txn, ino, c));
                                        for (uint64_t b = lo; b <= hi; ++b)
                                          blocks += !BitSet(chunk.bitmap(), b);
                                        return absl::OkStatus();
                                      }));
    return txn->ledger().Reserve(blocks, grant_client);
  });
}

void Allocator::Unreserve(const Reservation& r) {
  store_->Locked([&](MetaTxn* txn) { txn->ledger().Release(r); });
}

absl::StatusOr<proto::Attr> Allocator::CommitWrite(uint64_t ino, uint64_t offset, uint64_t length,
                                                   bool extend, const Reservation& r,
                                                   RequestTag* tag) {
  proto::Attr out;
  bool released = false;
  absl::Status st = store_->Mutate(tag, [&](MetaTxn* txn) -> absl::Status {
    // The reservation ends with this change whatever its outcome; only the
    // grant's debit is undone (with the ledger's durable part) if it fails.
    txn->ledger().Release(r);
    released = true;
    if (r.from_grant > 0) PutGrant(txn, r.client, txn->ledger().DebitGrant(r));
    ASSIGN_OR_RETURN(proto::InodeRecord rec, txn->GetInode(ino));
    if (!S_ISREG(rec.mode())) return ErrnoStatus(EINVAL, "write to a non-file");
    const uint64_t bitmap_bytes = store_->chunk_size() / kBlockSize / 8;
    uint64_t added = 0;
    RETURN_IF_ERROR(ForEachChunkRange(offset, length, store_->chunk_size(),
                                      [&](uint64_t c, uint64_t lo, uint64_t hi) -> absl::Status {
                                        ASSIGN_OR_RETURN(proto::ChunkRecord chunk,
                                                         ChunkIn(txn, ino, c));
                                        std::string* bitmap = chunk.mutable_bitmap();
                                        bitmap->resize(bitmap_bytes, '\0');
                                        for (uint64_t b = lo; b <= hi; ++b) {
                                          if (!BitSet(*bitmap, b)) {
                                            (*bitmap)[b / 8] |= static_cast<char>(1 << (b % 8));
                                            ++added;
                                          }
                                        }
                                        txn->Put(keys::Chunk(ino, c), chunk.SerializeAsString());
                                        return absl::OkStatus();
                                      }));
    txn->ledger().AddUsed(added);
    rec.set_allocated_blocks(rec.allocated_blocks() + added);
    if (extend && offset + length > rec.size()) rec.set_size(offset + length);
    // The write's time: the server's clock, or when the mount made it
    // (WriteRequest.time_ns); none when the mount set the times after it.
    // A write made before the file's last change (its flush came later:
    // a chmod in the mount's log went first, or another flush of the file
    // made later landed first) only raises mtime (client/ns_grants.cc
    // Wrote does the same).
    if (tag == nullptr || !tag->keep_times) {
      const int64_t t = txn->NowNanos();
      if (t >= rec.ctime_ns()) {
        rec.set_mtime_ns(t);
        rec.set_ctime_ns(t);
      } else {
        rec.set_mtime_ns(std::max(rec.mtime_ns(), t));
      }
    }
    txn->PutInode(ino, rec);
    out = ToAttr(ino, rec);
    return absl::OkStatus();
  });
  if (!released) Unreserve(r);
  RETURN_IF_ERROR(st);
  return out;
}

absl::StatusOr<bool> Allocator::HasChunk(uint64_t ino, uint64_t index) {
  ASSIGN_OR_RETURN(std::optional<std::string> value, store_->Get(keys::Chunk(ino, index)));
  return value.has_value();
}

absl::StatusOr<std::string> Allocator::ChunkBitmap(uint64_t ino, uint64_t index) {
  ASSIGN_OR_RETURN(std::optional<std::string> value, store_->Get(keys::Chunk(ino, index)));
  if (!value) return std::string();
  proto::ChunkRecord chunk;
  if (!chunk.ParseFromString(*value)) return ErrnoStatus(EIO, "corrupt chunk");
  return std::move(*chunk.mutable_bitmap());
}

absl::StatusOr<uint64_t> Allocator::Grant(uint64_t client_id, uint64_t wanted_blocks,
                                          uint64_t return_blocks, uint64_t* added,
                                          RequestTag* tag) {
  if (client_id == 0) return ErrnoStatus(EINVAL, "grant without a session");
  uint64_t total = 0;
  RETURN_IF_ERROR(store_->Mutate(tag, [&](MetaTxn* txn) -> absl::Status {
    // A grant belongs to a recorded session: one that ended while this
    // request was on its way (its grant already released) gets nothing, or
    // the space would stay granted to nobody. The retry re-creates it.
    if (wanted_blocks > 0) {
      ASSIGN_OR_RETURN(auto session, txn->Get(keys::Session(client_id)));
      if (!session) {
        return absl::ResourceExhaustedError(
            absl::StrCat("session ", client_id, " has ended; retry"));
      }
    }
    total = txn->ledger().Grant(client_id, wanted_blocks, return_blocks, added);
    if (tag != nullptr) tag->value = *added;
    PutGrant(txn, client_id, total);
    return absl::OkStatus();
  }));
  return total;
}

uint64_t Allocator::GrantOf(uint64_t client_id) {
  return store_->Locked([&](MetaTxn* txn) { return txn->ledger().GrantOf(client_id); });
}

uint64_t Allocator::GrantedBlocks() {
  return store_->Locked([](MetaTxn* txn) { return txn->ledger().granted(); });
}

std::vector<uint64_t> Allocator::GrantHolders() {
  return store_->Locked([](MetaTxn* txn) { return txn->ledger().Holders(); });
}

}  // namespace grantfs
