// The metadata store: the whole namespace, the chunk allocation maps and the
// space counters of one GrantFS volume, in RocksDB (the only server code that
// includes RocksDB). Key layout: server/keys.h.
//
// Every change is one atomic WriteBatch, and a method that changes anything
// returns only once its batch is durable (the RocksDB WAL is fsync'd; several
// concurrent changes share one fsync). Permission checks use the caller's
// credentials against the current attributes. Errors are errno statuses
// (common/errno_status.h).
//
// Thread-safe. Changes are serialized by `mu_` while their batch is built and
// applied to RocksDB (memtable + WAL write, no fsync); the fsync happens after
// `mu_` is released (group commit, see WaitDurable). Readers do not take
// `mu_`: they see every applied batch whole, possibly a few milliseconds
// before it is durable.
#ifndef GRANTFS_SERVER_META_STORE_H_
#define GRANTFS_SERVER_META_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "checkpoint/change_sink.h"
#include "common/clock.h"
#include "proto/grantfs.pb.h"
#include "proto/store.pb.h"
#include "server/permissions.h"
#include "server/space_ledger.h"

namespace rocksdb {
class DB;
class Env;
class Snapshot;
class Status;
class WriteBatch;
}  // namespace rocksdb

namespace grantfs {

struct MetaStoreOptions {
  // RocksDB directory; created if missing. Required.
  std::string dir;
  // Bytes of file data the volume may hold, recorded in the volume. 0: keep
  // the recorded capacity (a new volume takes `new_volume_capacity_bytes`).
  // A value that differs from the recorded one changes it (logged), unless
  // it is below what is used and granted (then Open fails).
  uint64_t capacity_bytes = 0;
  // The capacity of a new volume when `capacity_bytes` is 0.
  uint64_t new_volume_capacity_bytes = 0;
  // Bytes the data directory's file system can still take for file data
  // (its free space less the reserve kept for metadata), asked before each
  // grant and reservation so that nothing is promised the disk cannot hold.
  // Null: no limit but the capacity.
  std::function<uint64_t()> disk_available;
  // Called when a metadata write found the disk full (RocksDB NoSpace):
  // makes room (server/space_hold.h lends the metadata reserve) and returns
  // whether it did; the store then resumes RocksDB and tries the write once
  // more. Null: the write fails with ENOSPC.
  std::function<bool()> make_room;
  // Bytes per chunk; must match the ChunkStore's. Default 4 MiB.
  uint64_t chunk_size = 4 << 20;
  // Time source for timestamps. Default: the real clock. Not owned.
  Clock* clock = Clock::Real();
  // Where each applied batch goes to be replicated (checkpoint/change_sink.h);
  // nullptr: no replication. Not owned.
  ChangeSink* change_sink = nullptr;
  // RocksDB's file system (tests wrap it to fail WAL writes and syncs).
  // nullptr: RocksDB's default. Not owned.
  rocksdb::Env* rocksdb_env = nullptr;
  // The witness epoch this server serves the volume at (0: standalone).
  // Open raises the volume's data epoch to max(data_epoch + 1, epoch)
  // (proto::VolumeIdentity), so that what it writes from now on is known to
  // be newer than every copy made before.
  uint64_t epoch = 0;
};

inline constexpr uint64_t kRootIno = 1;

// What a removal left behind.
struct Removed {
  uint64_t ino = 0;    // the inode whose link went away (0: none)
  uint32_t nlink = 0;  // its link count afterwards; 0 = now an orphan
};

// Totals for statfs and status.
struct SpaceInfo {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;      // allocated in the chunk store
  uint64_t reserved_bytes = 0;  // held for writes in progress, beyond grants
  uint64_t granted_bytes = 0;   // sum of the sessions' grants
  bool ledger_ok = true;        // used + granted + reserved <= capacity
  uint64_t inodes = 0;
  uint64_t next_ino = 0;
  uint64_t pending_deletes = 0;
};

class MetaStore {
 public:
  // Opens the store in options.dir, or creates a new volume there: the root
  // directory, the counters and the volume's identity, in one batch.
  static absl::StatusOr<std::unique_ptr<MetaStore>> Open(const MetaStoreOptions& options);
  // The identity recorded in the store in `dir`, read without writing
  // anything (RocksDB opened read-only; works while a server has it open).
  // nullopt: a volume from before identities were recorded (Open gives it
  // one). An error when `dir` holds no store or it cannot be read.
  static absl::StatusOr<std::optional<proto::VolumeIdentity>> ReadIdentity(const std::string& dir);
  ~MetaStore();
  MetaStore(const MetaStore&) = delete;
  MetaStore& operator=(const MetaStore&) = delete;

  // --- reads ---------------------------------------------------------------
  absl::StatusOr<proto::Attr> Lookup(const Caller& caller, uint64_t parent,
                                     const std::string& name);
  absl::StatusOr<proto::Attr> GetAttr(uint64_t ino);
  absl::StatusOr<proto::InodeRecord> GetInode(uint64_t ino);
  absl::StatusOr<std::string> ReadLink(uint64_t ino);
  // Up to `max` entries after `cookie` ("." and ".." first), eof when done.
  absl::Status ReadDir(const Caller& caller, uint64_t ino, uint64_t cookie, uint32_t max,
                       proto::ReadDirReply* reply);
  absl::StatusOr<std::string> GetXattr(const Caller& caller, uint64_t ino, const std::string& name);
  absl::StatusOr<std::vector<std::string>> ListXattr(const Caller& caller, uint64_t ino);
  // Checks that `caller` may open `ino` with open(2) `flags`; fresh attrs.
  // `created`: the open of open(O_CREAT) that made the file, which needs no
  // permission (the mode applies to later opens) when `caller` owns it.
  absl::StatusOr<proto::Attr> CheckOpen(const Caller& caller, uint64_t ino, uint32_t flags,
                                        bool created = false);
  SpaceInfo Space();
  // The volume's identity, as Open left it (data epoch raised).
  const proto::VolumeIdentity& identity() const { return identity_; }

  // --- namespace changes -----------------------------------------------------
  // Creates a file, directory, fifo, socket or device node. With `exclusive`
  // false and a regular file already there, returns it (open O_CREAT).
  // `created` (may be null) says which of the two happened.
  absl::StatusOr<proto::Attr> MkNod(const Caller& caller, uint64_t parent, const std::string& name,
                                    uint32_t mode, uint64_t rdev, uint32_t umask, bool exclusive,
                                    bool* created = nullptr);
  absl::StatusOr<proto::Attr> Symlink(const Caller& caller, uint64_t parent,
                                      const std::string& name, const std::string& target);
  absl::StatusOr<proto::Attr> Link(const Caller& caller, uint64_t ino, uint64_t new_parent,
                                   const std::string& new_name);
  // `expected_ino`: the inode the caller believes `name` is (0: any); when
  // the name points elsewhere now, ESTALE.
  absl::StatusOr<Removed> Remove(const Caller& caller, uint64_t parent, const std::string& name,
                                 bool is_dir, uint64_t expected_ino = 0);
  // rename(2) / renameat2(2) with RENAME_NOREPLACE (1) or RENAME_EXCHANGE (2).
  // `expected_ino`, `expected_new_ino`: as in Remove, for both names.
  absl::StatusOr<Removed> Rename(const Caller& caller, uint64_t parent, const std::string& name,
                                 uint64_t new_parent, const std::string& new_name, uint32_t flags,
                                 uint64_t expected_ino = 0, uint64_t expected_new_ino = 0);
  // chmod/chown/utimes and the metadata half of truncate. For a size change
  // the caller has already cut the chunk files (see Volume). `opened`: the
  // change comes through a handle the caller's mount holds open for writing
  // (ftruncate), so a size change needs no write permission now.
  absl::StatusOr<proto::Attr> SetAttr(const Caller& caller, const proto::SetAttrRequest& req,
                                      bool opened = false);
  // The permission and type checks of a size change, without changing anything.
  absl::StatusOr<proto::InodeRecord> CheckTruncate(const Caller& caller, uint64_t ino,
                                                   uint64_t size, bool opened = false);
  absl::Status SetXattr(const Caller& caller, uint64_t ino, const std::string& name,
                        const std::string& value, uint32_t flags);
  absl::Status RemoveXattr(const Caller& caller, uint64_t ino, const std::string& name);

  // --- space and data ------------------------------------------------------------
  // The ledger (server/space_ledger.h): used + sum(grants) + reserved <=
  // capacity, always; its durable part is written with each change.
  //
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
  absl::StatusOr<proto::Attr> CommitWrite(uint64_t ino, uint64_t offset, uint64_t length,
                                          bool extend, const Reservation& r);
  // Gives `return_blocks` of the session's grant back to free space, then
  // grants up to `wanted_blocks` more by the grant policy
  // (server/grant_policy.h). Returns the session's whole grant; `added`
  // gets what this call granted. RESOURCE_EXHAUSTED (retry) when more is
  // wanted for a session with no record (PutSession): it has ended.
  absl::StatusOr<uint64_t> Grant(uint64_t client_id, uint64_t wanted_blocks, uint64_t return_blocks,
                                 uint64_t* added);
  // A session ended: its grant goes back to free space and its record
  // (PutSession) is deleted, in one batch.
  absl::Status EndSession(uint64_t client_id);
  uint64_t GrantOf(uint64_t client_id);
  // The sum of the sessions' grants, in blocks.
  uint64_t GrantedBlocks();
  // Sessions that hold a grant (persisted; they survive a restart).
  std::vector<uint64_t> GrantHolders();

  // --- sessions ----------------------------------------------------------------
  // The durable record of an open session ('S'), so that a server that
  // takes over or restarts knows which clients may come back to reclaim.
  absl::Status PutSession(uint64_t client_id, const proto::SessionRecord& rec);
  absl::StatusOr<std::vector<std::pair<uint64_t, proto::SessionRecord>>> ListSessions();

  // Exactly-once (server/dedupe.h): the record of request (client_id, seq),
  // if it was applied; and deletion of records older than `retention`.
  absl::StatusOr<std::optional<proto::DedupeRecord>> FindDedupe(uint64_t client_id, uint64_t seq);
  absl::StatusOr<int> ExpireDedupe(absl::Duration retention);

  // --- replication ---------------------------------------------------------
  // Writes a consistent copy of the store into the new directory `dir`
  // (a RocksDB checkpoint) and returns the change sink's Head() at that
  // moment: the copy holds exactly the batches up to it. 0 without a sink.
  absl::StatusOr<uint64_t> Checkpoint(const std::string& dir);
  // A digest of the metadata (checkpoint/meta_digest.h) as of now, labelled
  // with the digest mark appended to the change sink at exactly this point
  // (its seq; 0 without a sink): the replica digests its copy at the mark.
  // Reads the whole store, outside mu_ (on a snapshot).
  absl::StatusOr<proto::MetaDigest> DigestWithMark() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `fn` on the store as of a snapshot taken now (a consistent moment:
  // every batch is atomic), outside mu_; for the online check (server/fsck.h
  // CheckMetadataSnapshot). Writes nothing.
  absl::Status ReadSnapshot(
      const std::function<absl::Status(rocksdb::DB* db, const rocksdb::Snapshot* snapshot)>& fn);
  // Waits until every change appended so far is replicated (a retried
  // request answered from its dedupe record must not be acknowledged before
  // the change itself is). OK at once without a sink.
  absl::Status WaitReplicatedAll();

  // --- orphans and deferred deletion ---------------------------------------
  // An orphan is a file whose last link went away while it was open. Its
  // record ('O') lists who has it open, written in the same batch as the
  // removal and whenever that set changes, so a server that takes over or
  // restarts keeps it for them. `holders` tells who has an inode open now;
  // it is called under the store's mutex. Set it before the first change.
  void SetOpenHolders(std::function<proto::OrphanRecord(uint64_t ino)> holders);
  // Rewrites the orphan record of `ino` from `holders`, or turns the orphan
  // into garbage (Reap) when nobody has it open any more, unless
  // `keep_unheld` (then the record lists no holder and the file stays).
  // Returns whether it was reaped; false too when `ino` is not an orphan.
  absl::StatusOr<bool> SyncOrphan(uint64_t ino, bool keep_unheld = false);
  // Turns the orphan `ino` (nlink 0) into garbage whose chunks are freed by
  // the background deleter. A no-op when `ino` is not an orphan.
  absl::Status Reap(uint64_t ino);
  // Every orphan and who had it open, as recorded.
  absl::StatusOr<std::vector<std::pair<uint64_t, proto::OrphanRecord>>> ListOrphans();

  // --- file locks ------------------------------------------------------------
  // The file locks held on `ino` (server/lock_manager.h keeps them in
  // memory; this is their durable, replicated copy). An empty record
  // deletes the key.
  absl::Status PutLocks(uint64_t ino, const proto::LockRecord& locks);
  absl::StatusOr<std::vector<std::pair<uint64_t, proto::LockRecord>>> ListLocks();
  // Inodes whose chunks wait to be freed.
  absl::StatusOr<std::vector<uint64_t>> ListGarbage();
  // The chunk indexes recorded for garbage inode `ino`, and the number of
  // chunks its size spans (chunk files may exist without a record).
  absl::StatusOr<uint64_t> GarbageChunkSpan(uint64_t ino);
  // Whether chunk `index` of `ino` has a record (some block allocated).
  absl::StatusOr<bool> HasChunk(uint64_t ino, uint64_t index);
  // The allocation bitmap of chunk `index` of `ino` (bit b set: block b
  // holds committed data); empty when the chunk has no record.
  absl::StatusOr<std::string> ChunkBitmap(uint64_t ino, uint64_t index);
  // Forgets garbage inode `ino` after its chunk files are gone; credits its
  // blocks back to free space.
  absl::Status FinishGarbage(uint64_t ino);

 private:
  class Txn;
  MetaStore(const MetaStoreOptions& options, rocksdb::DB* db);

  absl::Status Init();
  // Raises the data epoch (MetaStoreOptions::epoch) of the identity read
  // from the store, or gives a volume from before identities one, and
  // writes it. REQUIRES: mu_ held, counters_ loaded.
  absl::Status RaiseDataEpoch(std::optional<proto::VolumeIdentity> recorded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies `batch` durably and queues it for the replica: Init's changes,
  // made before any client is served. REQUIRES: mu_ held.
  absl::Status WriteAtOpen(rocksdb::WriteBatch* batch, const char* what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Builds one change under mu_ with `fn`, applies it, then waits until it
  // is durable. `fn` returns non-OK to abandon the change; it runs with mu_
  // held, so a lambda passed here is marked ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_).
  template <typename Fn>
  absl::Status Mutate(Fn fn) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status WaitDurable(uint64_t ticket);
  // db_->Resume() after make_room, waiting for a recovery RocksDB started by
  // itself. REQUIRES: mu_ held.
  rocksdb::Status ResumeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  proto::Attr ToAttr(uint64_t ino, const proto::InodeRecord& rec) const;
  proto::InodeRecord NewInode(const Caller& caller, const proto::InodeRecord& dir, uint32_t mode);
  absl::StatusOr<proto::Attr> CreateEntry(const Caller& caller, uint64_t parent,
                                          const std::string& name, proto::InodeRecord rec);
  // Frees allocation of `ino` at and past `new_size`. REQUIRES: mu_ held.
  absl::Status CutAllocation(Txn* txn, uint64_t ino, proto::InodeRecord* rec, uint64_t new_size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<bool> DirIsEmpty(uint64_t ino);
  // ENOTDIR/EINVAL unless `dir` is not `ancestor` nor below it.
  absl::StatusOr<bool> IsAncestor(Txn* txn, uint64_t ancestor, uint64_t dir);
  // The record of the new orphan `ino`: who has it open now.
  std::string OrphanValue(uint64_t ino) const;
  // Turns orphan `ino` into garbage within `txn`. REQUIRES: mu_ held.
  absl::Status ReapIn(Txn* txn, uint64_t ino, const proto::InodeRecord& rec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Scans every record of `kind` (one byte) into (id, parsed record) pairs.
  template <typename Rec>
  absl::StatusOr<std::vector<std::pair<uint64_t, Rec>>> ListRecords(char kind);
  // Writes the grant record of `client_id` (deleted at 0 blocks).
  void PutGrant(Txn* txn, uint64_t client_id, uint64_t blocks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const MetaStoreOptions options_;
  rocksdb::DB* const db_;
  proto::VolumeIdentity identity_;  // set by Init(), then constant

  // Serializes changes. Lock order: mu_ before sync_mu_.
  absl::Mutex mu_;
  // The counters record; its used, granted and capacity figures are the
  // ledger's, copied in at each change.
  proto::Counters counters_ ABSL_GUARDED_BY(mu_);
  SpaceLedger ledger_ ABSL_GUARDED_BY(mu_);
  std::function<proto::OrphanRecord(uint64_t)> open_holders_;  // set before changes

  // Group commit of WAL fsyncs.
  std::atomic<uint64_t> applied_ticket_{0};  // batches applied to RocksDB
  absl::Mutex sync_mu_;
  uint64_t durable_ticket_ ABSL_GUARDED_BY(sync_mu_) = 0;
  bool sync_running_ ABSL_GUARDED_BY(sync_mu_) = false;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_META_STORE_H_
