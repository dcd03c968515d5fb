// The space ledger of one volume, in 4 KiB blocks: what the volume may hold
// (its capacity), what is used (allocated in the chunk store), what is
// granted (to each session, for writes at local speed) and what is reserved
// (held for writes in progress: inside their session's grant, or beyond
// it). The invariant, always: used + granted + reserved <= capacity; and
// what is granted or reserved, not yet on disk, fits on the disk too.
// Promise 1 of DESIGN.md rests on it.
//
// The ledger is the one place that converts bytes and blocks (Blocks*,
// Bytes): callers ask it rather than multiply by kBlockSize themselves.
//
// It keeps figures only. The metadata store (server/meta_store.h; its users
// reach the ledger through a MetaTxn) calls it under its mutex while it
// builds a change, writes the durable part (used,
// and each session's grant) in that change's batch, and puts it back with
// Restore() when the change is abandoned. Reservations are in memory only:
// a crash before a write commits leaves every grant and the usage as they
// were. Not thread-safe.
#ifndef GRANTFS_SERVER_SPACE_LEDGER_H_
#define GRANTFS_SERVER_SPACE_LEDGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/status/statusor.h"

namespace grantfs {

inline constexpr uint64_t kBlockSize = 4096;  // allocation unit

// Blocks held for one write in progress (SpaceLedger::Reserve), until it is
// committed or given up.
struct Reservation {
  uint64_t blocks = 0;      // blocks of the range not yet allocated
  uint64_t from_grant = 0;  // of them, held inside `client`'s grant
  uint64_t client = 0;      // whose grant (0: none)
};

class SpaceLedger {
 public:
  // Blocks that hold `bytes` (rounded up), and whole blocks within `bytes`
  // (rounded down); the bytes of `blocks`.
  static uint64_t BlocksCovering(uint64_t bytes) {
    return bytes / kBlockSize + (bytes % kBlockSize != 0);
  }
  static uint64_t BlocksWithin(uint64_t bytes) { return bytes / kBlockSize; }
  static uint64_t Bytes(uint64_t blocks) { return blocks * kBlockSize; }

  // `disk_available`: bytes the data directory's file system can still take
  // for file data, asked at every grant and reservation; null: no limit but
  // the capacity.
  explicit SpaceLedger(std::function<uint64_t()> disk_available = nullptr)
      : disk_available_(std::move(disk_available)) {}

  // The durable figures, as loaded from the store. The granted total is
  // derived from the sessions' grants (the truth).
  void Load(uint64_t capacity, uint64_t used, std::map<uint64_t, uint64_t> grants);
  void set_capacity(uint64_t blocks) { capacity_ = blocks; }

  // What a change may have to undo: used and the grants (reservations are
  // not part of it; they end with the change whatever its outcome).
  struct Durable {
    uint64_t used = 0;
    std::map<uint64_t, uint64_t> grants;
    uint64_t granted = 0;
  };
  Durable Save() const { return {used_, grants_, granted_}; }
  void Restore(Durable d);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  uint64_t granted() const { return granted_; }
  uint64_t reserved() const { return reserved_; }  // beyond grants
  uint64_t GrantOf(uint64_t client) const;
  // Sessions that hold a grant.
  std::vector<uint64_t> Holders() const;

  // Blocks nobody holds: capacity - used - granted - reserved, and no more
  // than the disk can take beyond what is already promised.
  uint64_t FreeBlocks() const;
  // Whether the invariant holds; logs loudly when it does not.
  bool Check() const;

  // Holds `blocks` for a write: inside `grant_client`'s grant first (what
  // its other writes in progress do not hold already), the rest out of free
  // space. ENOSPC when free space cannot cover the rest.
  absl::StatusOr<Reservation> Reserve(uint64_t blocks, uint64_t grant_client);
  // Ends reservation `r`: its blocks are no longer held for it.
  void Release(const Reservation& r);
  // The write of `r` committed: the grant's part of it is debited from the
  // grant (call after Release). Returns the client's grant afterwards.
  uint64_t DebitGrant(const Reservation& r);
  void AddUsed(uint64_t blocks) { used_ += blocks; }
  // Frees `blocks` of used space (never below zero).
  void FreeUsed(uint64_t blocks);

  // Gives `return_blocks` of the session's grant back (not what its writes
  // in progress hold), then grants up to `wanted_blocks` more by the grant
  // policy (server/grant_policy.h). Returns the session's grant; `*added`
  // gets what this call granted.
  uint64_t Grant(uint64_t client, uint64_t wanted_blocks, uint64_t return_blocks, uint64_t* added);
  // The session ended: its grant goes back, except what its writes in
  // progress hold (settled when they commit or are given up). Returns the
  // grant it keeps.
  uint64_t EndSession(uint64_t client);

 private:
  // Blocks of `client`'s grant its writes in progress hold.
  uint64_t BusyOf(uint64_t client) const;
  void SetGrant(uint64_t client, uint64_t blocks);

  std::function<uint64_t()> disk_available_;
  uint64_t capacity_ = 0;
  uint64_t used_ = 0;
  uint64_t granted_ = 0;                         // the sum of grants_
  std::map<uint64_t, uint64_t> grants_;          // client id -> blocks
  uint64_t reserved_ = 0;                        // held for writes beyond grants
  std::map<uint64_t, uint64_t> grant_reserved_;  // held inside each grant
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_SPACE_LEDGER_H_
