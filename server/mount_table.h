// The cluster's global mount table (docs/operations.md, "Global mounts"):
// one GlobalMountRecord per path in the metadata store (key 'T' + path,
// server/keys.h), written like every other record (one durable batch,
// replicated before the change returns), so it survives restarts and
// failovers.
//
// A record is added (`grantfsctl mount -g`), marked for removal (`umount
// -g`: the nodes unmount it) and then forgotten (deleted, once the nodes
// are done). Every change bumps the table's in-memory version and wakes the
// callers of WaitChanged: the node agents' long polls (server/cluster_service.h).
//
// What List serves is the published table: a change shows there only once
// its Mutate returned, that is once it is durable here and on the replica.
// So no agent mounts (or unmounts) after a change that a failover could
// still undo. Changes are published one at a time, in the order they were
// committed (change_mu_).
//
// Thread-safe. Changes are checked and written in one MetaStore::Mutate, so
// two concurrent changes of one path cannot both pass the checks.
#ifndef GRANTFS_SERVER_MOUNT_TABLE_H_
#define GRANTFS_SERVER_MOUNT_TABLE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/cluster.pb.h"
#include "server/meta_store.h"

namespace grantfs {

class MountTable {
 public:
  // `store` must outlive the table. Each table gets a random incarnation:
  // a primary that starts (or takes over) has a table agents have not seen.
  explicit MountTable(MetaStore* store);
  MountTable(const MountTable&) = delete;
  MountTable& operator=(const MountTable&) = delete;

  // Every published record, sorted by path, with the incarnation and
  // version. The first call reads the store (a primary that just started
  // or took over: all it holds was replicated).
  absl::StatusOr<proto::GlobalMountTable> List() ABSL_LOCKS_EXCLUDED(mu_);

  struct Added {
    proto::GlobalMountRecord mount;
    bool existed = false;  // the same path, directory and options were recorded
  };
  // Records a global mount. INVALID_ARGUMENT for a bad path, directory or
  // options (common/mount_spec.h); ALREADY_EXISTS when the path holds
  // another mount; FAILED_PRECONDITION when the path is being removed, or
  // nests with another global mount's path (one inside the other).
  absl::StatusOr<Added> Add(const std::string& path, const std::string& subdir,
                            const std::string& options, const std::string& created_by)
      ABSL_LOCKS_EXCLUDED(change_mu_, mu_);
  // Marks the mount at `path` for removal (a new generation), with `force`
  // (detach where busy); marking one already marked again is allowed (to add
  // -f). NOT_FOUND when there is none; INVALID_ARGUMENT for a bad path.
  absl::StatusOr<proto::GlobalMountRecord> MarkRemoving(const std::string& path, bool force)
      ABSL_LOCKS_EXCLUDED(change_mu_, mu_);
  // Deletes the record of `path`, which must be marked for removal and, when
  // `generation` is not 0, be of that generation (FAILED_PRECONDITION
  // otherwise). NOT_FOUND when there is none.
  absl::Status Forget(const std::string& path, uint64_t generation)
      ABSL_LOCKS_EXCLUDED(change_mu_, mu_);

  uint64_t incarnation() const { return incarnation_; }
  uint64_t version() ABSL_LOCKS_EXCLUDED(mu_);
  // Returns once the table's (incarnation, version) differs from the given
  // one, `timeout` has passed, or Shutdown was called.
  void WaitChanged(uint64_t incarnation, uint64_t version, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes every WaitChanged, now and later (the server stops).
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Publishes the outcome of one change: `rec` as the record of `path`
  // (nullopt: none).
  void Publish(const std::string& path, std::optional<proto::GlobalMountRecord> rec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(change_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // After a Mutate that failed past its checks (it may have committed here
  // without reaching the replica): the published copy stays as it was, and
  // the next change first waits until everything applied here is
  // replicated, then reads the table from the store again.
  void Unsure() ABSL_EXCLUSIVE_LOCKS_REQUIRED(change_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // Fills published_ from the store when it was never loaded (the first
  // List or change of this primary: all the store holds then was
  // replicated). Never while a change is in flight: every change loads
  // first (LoadBeforeChange), under change_mu_, before its Mutate.
  absl::Status LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadBeforeChange() ABSL_EXCLUSIVE_LOCKS_REQUIRED(change_mu_)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  MetaStore* const store_;
  const uint64_t incarnation_;

  // Held across a change's Mutate and its Publish: one change at a time,
  // published in commit order. It is held across the Mutate's fsync and
  // replica round trip (STYLE.md's exception for a lock that orders rare
  // admin changes: grantfsctl mount -g / umount -g; no call of a mount or
  // heartbeat takes it).
  absl::Mutex change_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex mu_;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;
  bool stale_ ABSL_GUARDED_BY(mu_) = false;  // Unsure(): reload at the next change
  std::map<std::string, proto::GlobalMountRecord> published_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_MOUNT_TABLE_H_
