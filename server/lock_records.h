// The durable, replicated copy of the file locks held on each inode ('P'
// records; server/lock_manager.h keeps the locks themselves in memory), on
// the metadata store (server/meta_store.h).
//
// Thread-safe. Errors are errno statuses (common/errno_status.h).
#ifndef GRANTFS_SERVER_LOCK_RECORDS_H_
#define GRANTFS_SERVER_LOCK_RECORDS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/store.pb.h"
#include "server/meta_store.h"

namespace grantfs {

class LockRecords {
 public:
  // `store` is not owned and outlives this.
  explicit LockRecords(MetaStore* store) : store_(store) {}
  LockRecords(const LockRecords&) = delete;
  LockRecords& operator=(const LockRecords&) = delete;

  // Records the file locks held on `ino`; an empty record deletes the key.
  // `tag`: the request the change is made for, or null (MetaStore::Mutate).
  absl::Status PutLocks(uint64_t ino, const proto::LockRecord& locks, RequestTag* tag = nullptr);
  absl::StatusOr<std::vector<std::pair<uint64_t, proto::LockRecord>>> ListLocks();

 private:
  MetaStore* const store_;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_LOCK_RECORDS_H_
