// The metadata store's engine: the RocksDB store of one volume (the only
// server code that includes RocksDB is meta_store.cc), one atomic batch per
// change, group commit of the WAL fsync, replication of each batch,
// checkpoints. Key layout: server/keys.h. What the records mean is in the
// classes over it (server/metadata.h lists them).
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
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "checkpoint/change_sink.h"
#include "common/big_endian.h"
#include "common/clock.h"
#include "proto/grantfs.pb.h"
#include "proto/store.pb.h"
#include "server/dedupe.h"
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
  // makes room (common/space_hold.h lends the metadata reserve) and returns
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
  // What the volume promised is held on the replica's disk too
  // (ChangeSink::Promise): the grants plus these bytes (the metadata
  // reserve). A change that raises the grants sends the new promise right
  // after its batch, under mu_: promises reach the replica in the order of
  // the ledger, in the same round trip as the change, which returns only once
  // the replica has both.
  uint64_t promise_reserve_bytes = 0;
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
  // Orders the snapshots of these counts: a later one has a larger number
  // (within one server process). Replies carry it (StatFsReply.counts_seq)
  // so a mount keeps the newest counts, not the ones whose request was
  // sent last: concurrent requests' counts are taken in any order.
  uint64_t counts_seq = 0;
};

// What the group commit did since the store was opened (for Status and for
// checking that concurrent changes share fsyncs).
struct CommitStats {
  // Changes made by Mutate that became durable (DeleteUnsynced's batches and
  // the batches written at Open are not counted).
  uint64_t changes = 0;
  // WAL fsyncs the group commit ran for them: one covers every change
  // applied before it started, so under concurrent load this is below
  // `changes`.
  uint64_t wal_syncs = 0;
};

// EIO for a record of `key` that does not parse.
absl::Status CorruptRecord(absl::string_view key);

// One change being built (MetaStore::Mutate), or a look at the in-memory
// state under the store's mutex (MetaStore::Locked). Reads see the change's
// own earlier writes; Scan sees only what is applied to RocksDB.
//
// A MetaTxn exists only while the store's mutex is held (Mutate and Locked
// make it and destroy it under the mutex): holding one is what gives access
// to the counters and the space ledger. Never keep one past its callback.
class MetaTxn {
 public:
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key);
  void Put(const std::string& key, const std::string& value);
  void Delete(const std::string& key);
  // Calls fn(key, value) for the applied records from `from` on, as long as
  // their keys start with `prefix` and fn returns true.
  absl::Status Scan(
      const std::string& from, const std::string& prefix,
      absl::FunctionRef<absl::StatusOr<bool>(absl::string_view key, absl::string_view value)> fn);

  // Typed records (server/keys.h).
  absl::StatusOr<proto::InodeRecord> GetInode(uint64_t ino);
  void PutInode(uint64_t ino, const proto::InodeRecord& rec);
  absl::StatusOr<std::optional<proto::DirentRecord>> GetDirent(uint64_t parent,
                                                               const std::string& name);
  // Adds or replaces the entry `name` of `parent`, keeping its cookie.
  void PutDirent(uint64_t parent, const std::string& name, const proto::DirentRecord& d);
  void DeleteDirent(uint64_t parent, const std::string& name, const proto::DirentRecord& d);

  // The store's counters (next inode, next cookie, inode count) and space
  // ledger: a failed change puts both back as they were.
  proto::Counters& counters() { return *counters_; }
  SpaceLedger& ledger() { return *ledger_; }
  // The change's time: the clock's, or the one of the logged operation it
  // applies (RequestTag::time_ns).
  int64_t NowNanos() const { return time_ns_ != 0 ? time_ns_ : clock_->NowNanos(); }

 private:
  friend class MetaStore;
  MetaTxn(rocksdb::DB* db, proto::Counters* counters, SpaceLedger* ledger, Clock* clock);
  ~MetaTxn();
  MetaTxn(const MetaTxn&) = delete;
  MetaTxn& operator=(const MetaTxn&) = delete;

  rocksdb::DB* const db_;
  proto::Counters* const counters_;
  SpaceLedger* const ledger_;
  Clock* const clock_;
  int64_t time_ns_ = 0;
  std::unique_ptr<rocksdb::WriteBatch> batch_;
  std::map<std::string, std::optional<std::string>> pending_;
};

// The transaction and group-commit engine of the metadata store: opens the
// RocksDB store of one volume, applies each change as one atomic batch and
// returns once it is durable (and replicated), cuts checkpoints. What the
// records mean is in the classes over it (server/metadata.h).
//
// Every change is one atomic WriteBatch, and Mutate returns only once its
// batch is durable (the RocksDB WAL is fsync'd; several concurrent changes
// share one fsync). Errors are errno statuses (common/errno_status.h).
//
// Thread-safe. Changes are serialized by `mu_` while their batch is built and
// applied to RocksDB (memtable + WAL write, no fsync); the fsync happens after
// `mu_` is released (group commit, see WaitDurable). Readers do not take
// `mu_`: they see every applied batch whole, possibly a few milliseconds
// before it is durable.
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

  // The volume's identity, as Open left it (data epoch raised).
  const proto::VolumeIdentity& identity() const { return identity_; }
  // Constant after construction.
  uint64_t chunk_size() const { return options_.chunk_size; }
  Clock* clock() const { return options_.clock; }
  // The ledger's totals and the inode counters, under mu_: cheap enough for
  // every statfs and grant.
  SpaceInfo SpaceCounts() ABSL_LOCKS_EXCLUDED(mu_);
  // SpaceCounts, plus the ledger's invariant check and a scan of the pending
  // deletes (outside mu_; their tombstones make it slow after many
  // unlinks): for Status and the metrics.
  SpaceInfo Space() ABSL_LOCKS_EXCLUDED(mu_);
  // Totals since Open; cheap (two atomic loads), no lock.
  CommitStats Commits() const;
  // Sends the promise (MetaStoreOptions::promise_reserve_bytes) to the
  // replica when it changed, also when it went down (Mutate sends only
  // rises). Returns the seq of the newest promise record (0: none).
  uint64_t Promise() ABSL_LOCKS_EXCLUDED(mu_);
  // The seq of the newest promise record (0: none).
  uint64_t promise_seq() const { return promise_seq_.load(); }

  // --- changes -------------------------------------------------------------
  // Builds one change with `fn` under mu_, applies it (with the counters and
  // the ledger's durable part), then waits until it is durable and
  // replicated. `fn` returns non-OK to abandon the change: nothing is
  // written, the counters and the ledger are put back. A disk found full is
  // retried once after MetaStoreOptions::make_room.
  // `tag`: the request the change is made for (server/dedupe.h), or null.
  // While it is active, its dedupe record rides in the same batch and the
  // tag is marked recorded once the batch is applied. Used only by the
  // calling thread, under mu_; not kept.
  // With tag->defer_durable the change returns once applied, and
  // tag->durable says what to wait for (WaitDurable below).
  absl::Status Mutate(RequestTag* tag, absl::FunctionRef<absl::Status(MetaTxn*)> fn)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until the changes made with RequestTag::defer_durable up to `d`
  // (and every change applied before them) are durable and replicated.
  absl::Status WaitDurable(const RequestTag::Durability& d) ABSL_LOCKS_EXCLUDED(mu_);
  // What to wait for so that every change applied so far is durable and
  // replicated (with WaitDurable).
  RequestTag::Durability Applied() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `fn` under mu_ with a MetaTxn whose writes are dropped: for the
  // ledger's in-memory changes (reservations) and reads of the counters.
  template <typename Fn>
  auto Locked(Fn fn) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    MetaTxn txn(db_, &counters_, &ledger_, options_.clock);
    return fn(&txn);
  }
  // Deletes `keys` in one batch, applied and queued for the replica but
  // neither synced nor waited for (a record that comes back after a crash
  // must be harmless: expired dedupe records).
  absl::Status DeleteUnsynced(const std::vector<std::string>& keys, const char* what)
      ABSL_LOCKS_EXCLUDED(mu_);

  // --- reads of applied records --------------------------------------------
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key);
  // As MetaTxn::Scan.
  absl::Status Scan(
      const std::string& from, const std::string& prefix,
      absl::FunctionRef<absl::StatusOr<bool>(absl::string_view key, absl::string_view value)> fn);
  // Every record of `kind` (one byte, then a 64-bit id) as (id, record).
  template <typename Rec>
  absl::StatusOr<std::vector<std::pair<uint64_t, Rec>>> ListRecords(char kind);

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

 private:
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
  absl::Status WaitDurable(uint64_t ticket);
  // Sends the ledger's promise when it rose (or, `exact`, changed); returns
  // its record's seq, 0 when nothing was sent.
  uint64_t PromiseLocked(bool exact) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SpaceInfo SpaceCountsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

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
  uint64_t counts_seq_ ABSL_GUARDED_BY(mu_) = 0;           // SpaceInfo.counts_seq
  std::optional<uint64_t> promised_ ABSL_GUARDED_BY(mu_);  // as last sent
  std::atomic<uint64_t> promise_seq_{0};

  // Group commit of WAL fsyncs.
  std::atomic<uint64_t> applied_ticket_{0};  // batches applied to RocksDB
  absl::Mutex sync_mu_;
  uint64_t durable_ticket_ ABSL_GUARDED_BY(sync_mu_) = 0;
  bool sync_running_ ABSL_GUARDED_BY(sync_mu_) = false;
  // CommitStats; counted outside the locks.
  std::atomic<uint64_t> changes_durable_{0};
  std::atomic<uint64_t> wal_syncs_{0};
};

template <typename Rec>
absl::StatusOr<std::vector<std::pair<uint64_t, Rec>>> MetaStore::ListRecords(char kind) {
  const std::string prefix(1, kind);
  std::vector<std::pair<uint64_t, Rec>> out;
  absl::Status s = Scan(
      prefix, prefix, [&](absl::string_view key, absl::string_view value) -> absl::StatusOr<bool> {
        if (key.size() != 9) return true;
        Rec rec;
        if (!rec.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
          return CorruptRecord(key);
        }
        out.emplace_back(GetBigEndian64(key.data() + 1), std::move(rec));
        return true;
      });
  if (!s.ok()) return s;
  return out;
}

}  // namespace grantfs

#endif  // GRANTFS_SERVER_META_STORE_H_
