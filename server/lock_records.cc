#include "server/lock_records.h"

#include "server/keys.h"

namespace grantfs {

absl::Status LockRecords::PutLocks(uint64_t ino, const proto::LockRecord& locks, RequestTag* tag) {
  return store_->Mutate(tag, [&](MetaTxn* txn) -> absl::Status {
    if (locks.locks_size() == 0) {
      txn->Delete(keys::Locks(ino));
    } else {
      txn->Put(keys::Locks(ino), locks.SerializeAsString());
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<std::pair<uint64_t, proto::LockRecord>>> LockRecords::ListLocks() {
  return store_->ListRecords<proto::LockRecord>('P');
}

}  // namespace grantfs
