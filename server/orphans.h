// Orphans and garbage: a file whose last link went away while it was open
// is an orphan ('O' record: who has it open) until nobody has; it then
// becomes garbage ('G': its inode record) whose chunks the background
// deleter frees. On the metadata store (server/meta_store.h).
//
// Thread-safe once SetOpenHolders has been called (before the first
// change). Errors are errno statuses (common/errno_status.h).
#ifndef GRANTFS_SERVER_ORPHANS_H_
#define GRANTFS_SERVER_ORPHANS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/store.pb.h"
#include "server/meta_store.h"

namespace grantfs {

class Orphans {
 public:
  // `store` is not owned and outlives this.
  explicit Orphans(MetaStore* store) : store_(store) {}
  Orphans(const Orphans&) = delete;
  Orphans& operator=(const Orphans&) = delete;

  // The orphan record lists who has the file open; it is written in the
  // same batch as the removal and whenever that set changes, so a server
  // that takes over or restarts keeps the file for them. `holders` tells
  // who has an inode open now; it is called inside a change (under the
  // store's mutex). Set it before the first change.
  void SetOpenHolders(std::function<proto::OrphanRecord(uint64_t ino)> holders);
  // The record of the new orphan `ino`: who has it open now. Called inside
  // the change that removes its last link.
  std::string RecordOf(uint64_t ino) const;

  // Rewrites the orphan record of `ino` from the holders, or turns the
  // orphan into garbage (Reap) when nobody has it open any more, unless
  // `keep_unheld` (then the record lists no holder and the file stays).
  // Returns whether it was reaped; false too when `ino` is not an orphan.
  // `tag`: the request the change is made for, or null (MetaStore::Mutate).
  absl::StatusOr<bool> SyncOrphan(uint64_t ino, bool keep_unheld = false,
                                  RequestTag* tag = nullptr);
  // Turns the orphan `ino` (nlink 0) into garbage whose chunks are freed by
  // the background deleter. A no-op when `ino` is not an orphan.
  absl::Status Reap(uint64_t ino);
  // Every orphan and who had it open, as recorded.
  absl::StatusOr<std::vector<std::pair<uint64_t, proto::OrphanRecord>>> ListOrphans();

  // Inodes whose chunks wait to be freed.
  absl::StatusOr<std::vector<uint64_t>> ListGarbage();
  // The number of chunks garbage inode `ino` may have files for: what its
  // size spans, or more when chunk records lie past it.
  absl::StatusOr<uint64_t> GarbageChunkSpan(uint64_t ino);
  // Forgets garbage inode `ino` after its chunk files are gone; credits its
  // blocks back to free space.
  absl::Status FinishGarbage(uint64_t ino);

 private:
  // Turns orphan `ino` into garbage within `txn`.
  absl::Status ReapIn(MetaTxn* txn, uint64_t ino, const proto::InodeRecord& rec);

  MetaStore* const store_;
  std::function<proto::OrphanRecord(uint64_t)> open_holders_;  // set before changes
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_ORPHANS_H_
