// The blocks of file data: reservations for writes in progress, the chunk
// allocation maps (which 4 KiB blocks of each chunk hold data) and the
// sessions' space grants, kept with the space ledger (server/space_ledger.h:
// used + sum(grants) + reserved <= capacity, always; its durable part is
// written with each change) on the metadata store (server/meta_store.h).
//
// Thread-safe (each change is one MetaStore::Mutate; the in-memory ledger is
// read and changed under the store's mutex). Errors are errno statuses.
#ifndef GRANTFS_SERVER_ALLOCATOR_H_
#define GRANTFS_SERVER_ALLOCATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/grantfs.pb.h"
#include "proto/store.pb.h"
#include "server/meta_store.h"
#include "server/space_ledger.h"

namespace grantfs {

class Allocator {
 public:
  // `store` is not owned and outlives this.
  explicit Allocator(MetaStore* store) : store_(store) {}
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Holds the blocks of [offset, offset + length) of `ino` that are not yet
  // allocated, for a write in progress. With `grant_client` != 0 they are
  // held inside that session's grant first (the grant is only debited when
  // the write commits) and out of free space only for the rest. ENOSPC when
  // free space cannot cover it. Held in memory only: a crash before the
  // commit leaves every grant and the usage as they were.
  absl::StatusOr<Reservation> Reserve(uint64_t ino, uint64_t offset, uint64_t length,
                                      uint64_t grant_client = 0);
  // Gives up a reservation (the write failed): its blocks go back where
  // they came from, the grant's part to the grant.
  void Unreserve(const Reservation& r);
  // Records that [offset, offset + length) of `ino` now holds data: marks
  // the blocks allocated, extends the size (when `extend`), sets mtime/ctime,
  // and turns the blocks of `r` into used ones, debiting the grant's part
  // from the grant in the same batch as the usage.
  // `tag`: the request the change is made for, or null (MetaStore::Mutate).
  absl::StatusOr<proto::Attr> CommitWrite(uint64_t ino, uint64_t offset, uint64_t length,
                                          bool extend, const Reservation& r,
                                          RequestTag* tag = nullptr);
  // Whether chunk `index` of `ino` has a record (some block allocated).
  absl::StatusOr<bool> HasChunk(uint64_t ino, uint64_t index);
  // The allocation bitmap of chunk `index` of `ino` (bit b set: block b
  // holds committed data); empty when the chunk has no record.
  absl::StatusOr<std::string> ChunkBitmap(uint64_t ino, uint64_t index);

  // Gives `return_blocks` of the session's grant back to free space, then
  // grants up to `wanted_blocks` more by the grant policy
  // (server/grant_policy.h). Returns the session's whole grant; `added`
  // gets what this call granted. RESOURCE_EXHAUSTED (retry) when more is
  // wanted for a session with no record (SessionRecords::PutSession): it
  // has ended. `tag`: the request the change is made for, or null
  // (MetaStore::Mutate); it keeps `added` for a retry.
  absl::StatusOr<uint64_t> Grant(uint64_t client_id, uint64_t wanted_blocks, uint64_t return_blocks,
                                 uint64_t* added, RequestTag* tag = nullptr);
  uint64_t GrantOf(uint64_t client_id);
  // The sum of the sessions' grants, in blocks.
  uint64_t GrantedBlocks();
  // Sessions that hold a grant (persisted; they survive a restart).
  std::vector<uint64_t> GrantHolders();

 private:
  MetaStore* const store_;
};

// Within `txn`: frees the allocation of `ino` at and past `new_size` (its
// chunk records and their blocks in the ledger; `rec`'s count of allocated
// blocks).
absl::Status CutAllocation(MetaTxn* txn, uint64_t chunk_size, uint64_t ino, proto::InodeRecord* rec,
                           uint64_t new_size);
// Within `txn`: writes the grant record of `client_id` (deleted at 0 blocks).
void PutGrant(MetaTxn* txn, uint64_t client_id, uint64_t blocks);
// The blocks a chunk bitmap marks allocated.
int CountBits(const std::string& bitmap);

}  // namespace grantfs

#endif  // GRANTFS_SERVER_ALLOCATOR_H_
