// A GrantFS volume on the primary: the metadata store, the chunk store, the
// lock manager and the client sessions, and the rules that tie them
// together: per-inode data locks, space reservation around data writes,
// orphan files kept while open, deferred freeing of deleted files' chunks,
// and cache invalidations pushed to the other clients after every change.
//
// Every method returns an errno status on failure (common/errno_status.h).
// Thread-safe. Lock order: a data lock (data_locks_) before anything the
// metadata store, SessionTable or LockManager take inside.
#ifndef GRANTFS_SERVER_VOLUME_H_
#define GRANTFS_SERVER_VOLUME_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/space_hold.h"
#include "proto/grantfs.pb.h"
#include "server/chunk_store.h"
#include "server/dedupe.h"
#include "server/flow_control.h"
#include "server/fsck.h"
#include "server/lease_table.h"
#include "server/lock_manager.h"
#include "server/metadata.h"
#include "server/session_table.h"

namespace grantfs {

struct VolumeOptions {
  // Data directory: holds `meta/` (RocksDB) and `chunks/`. Required, and
  // must exist (an empty one makes a new volume): a data disk that is not
  // mounted must not pass for a new volume (server/data_dir.h).
  std::string dir;
  // The witness epoch this server serves the volume at; 0 standalone
  // (MetaStoreOptions::epoch: the volume's data epoch is raised).
  uint64_t epoch = 0;
  // Bytes of file data the volume may hold, recorded in the volume when it
  // is created. 0 = the recorded capacity; for a new volume, the free space
  // of the file system holding `dir` less `metadata_reserve_bytes`. Another
  // value changes the recorded one (MetaStoreOptions::capacity_bytes).
  uint64_t capacity_bytes = 0;
  // Space of the data file system never promised to file data: room for
  // the metadata store (RocksDB, its WAL and compactions) to grow. It is
  // held on the disk with the grants (common/space_hold.h); every grant and
  // reservation also fits in the free space plus the hold less this
  // reserve, whatever the capacity says. Default 64 MiB.
  uint64_t metadata_reserve_bytes = 64ull << 20;
  // Client lease: a client not heard from for this long loses its session.
  absl::Duration lease = absl::Seconds(10);
  // Metadata leases (server/lease_table.h): a heartbeat renews a mount's
  // for this long. It bounds how long a change waits for a mount that does
  // not answer a recall (plus LeaseTableOptions::ack_wait), and how long a
  // new primary waits for the mounts of the last one to subscribe.
  absl::Duration meta_lease = absl::Seconds(3);
  // Recalls of one object within 1 s past which it is not leased for 2 s
  // (mounts treat it as with leases off meanwhile); 0: always leased.
  int lease_hot_recalls = 8;
  // Leases one mount may hold at the server (LeaseTableOptions::
  // max_leases_per_holder).
  size_t max_leases_per_mount = 1u << 20;
  // Largest read or write accepted in one request.
  uint32_t max_io_bytes = 8 << 20;
  // Time source. Default: the real clock. Not owned.
  Clock* clock = Clock::Real();  // timestamps (mtime, ctime, atime)
  // Leases, the grace period and every timeout: monotonic, so that a step of
  // the wall clock neither stretches nor cuts a client's lease.
  Clock* lease_clock = Clock::Monotonic();
  // Flow control: bytes of writes the server lets be in flight at once over
  // all clients (server/flow_control.h).
  uint64_t write_budget_bytes = 64ull << 20;
  // A write that finds no free space while other sessions hold grants
  // recalls them and waits up to this long for space before ENOSPC.
  absl::Duration recall_wait = absl::Seconds(1);
  // How long the record of an applied request is kept for its retries.
  absl::Duration dedupe_retention = absl::Minutes(5);
  // Where every change goes to be replicated (checkpoint/change_sink.h);
  // nullptr: no replica. Not owned.
  ChangeSink* change_sink = nullptr;
  // Large aligned data writes bypass the page cache (ChunkStoreOptions).
  bool direct_io = true;
  // The chunk store's file-system calls go through it (common/env.h; the
  // metadata store and the space hold call the OS themselves). Default: the
  // real file system. Not owned.
  Env* chunk_env = Env::Posix();
  // Every data write is fdatasync'd, here and on the replica, before it is
  // acknowledged (promise 3: a mount drops its copy on the ack, so a power
  // loss of both servers must not lose it). False: the data is in the page
  // cache of both servers at the ack, durable at the file's fsync().
  bool sync_data = true;
  // Run the background threads (chunk freeing, lease expiry). Unit tests
  // turn them off and call RunMaintenance() themselves.
  bool background = true;
  // Whether this server serves clients now (a primary whose lease lapsed
  // does not: checkpoint/replicator.h). While it does not, no client can
  // reach it, so their sessions are kept rather than expired. nullptr:
  // always.
  std::function<bool()> serving;
};

// Who sent a request: the session and the caller's credentials.
struct RequestContext {
  uint64_t client_id = 0;
  Caller caller;
  // The caller's node is read-only (common/transport.h CallerPolicy):
  // changes get EROFS.
  bool read_only = false;
  // The caller's node reaches only this directory and what is below it
  // (server/subtree.h); 0: the whole tree; kReachesNothing: no inode (its
  // subtree names no directory now).
  uint64_t top = 0;
  // The request's exactly-once tag (server/dedupe.h): every change of the
  // metadata store made for the request gets it. Null: the changes record
  // nothing (no session, a request that changes nothing, or a retry whose
  // first attempt was recorded). Not owned; outlives the call.
  RequestTag* tag = nullptr;
  // An entry of the caller's namespace log (ApplyLog), applied in
  // directories granted to it, or the data of a file it made in one
  // (WriteRequest.granted): its recalls do not wait for the sessions a
  // server that took over inherited (LeaseTable::Recall `in_grant`).
  bool log_entry = false;
};

class Volume {
 public:
  static absl::StatusOr<std::unique_ptr<Volume>> Open(const VolumeOptions& options);
  ~Volume();

  SessionTable& sessions() { return sessions_; }
  LeaseTable& leases() { return leases_; }
  // After a change: the other mounts' leases on `keys` are recalled
  // (LeaseTable::Recall; keys of inode 0 are skipped).
  void Recall(const RequestContext& ctx, absl::Span<const LeaseKey> keys);
  absl::Duration meta_lease() const { return options_.meta_lease; }
  // VolumeOptions::sync_data: every acknowledged write is on disk here and
  // on the replica.
  bool syncs_data() const { return options_.sync_data; }
  const ChunkStore& chunks() const { return *chunks_; }
  FlowControl& flow() { return flow_; }
  InFlightRequests& in_flight() { return in_flight_; }
  // The online metadata check (server/fsck.h CheckMetadataSnapshot) of a
  // snapshot of the metadata store.
  absl::StatusOr<FsckReport> CheckMetadata();
  Metadata& meta() { return *meta_; }
  // The clock of timestamps (VolumeOptions::clock).
  Clock* clock() const { return options_.clock; }

  // --- namespace ---------------------------------------------------------
  absl::StatusOr<proto::Attr> Lookup(const RequestContext& ctx, uint64_t parent,
                                     const std::string& name);
  absl::StatusOr<proto::Attr> GetAttr(const RequestContext& ctx, uint64_t ino);
  absl::StatusOr<proto::Attr> SetAttr(const RequestContext& ctx, const proto::SetAttrRequest& req);
  // `created` (may be null): see Namespace::MkNod.
  absl::StatusOr<proto::Attr> MkNod(const RequestContext& ctx, const proto::MkNodRequest& req,
                                    bool* created = nullptr);
  absl::StatusOr<proto::Attr> Symlink(const RequestContext& ctx, uint64_t parent,
                                      const std::string& name, const std::string& target);
  absl::StatusOr<proto::Attr> Link(const RequestContext& ctx, uint64_t ino, uint64_t new_parent,
                                   const std::string& name);
  // `expected_ino`: see Namespace::Remove.
  // Both return what lost or moved a name (Namespace::Remove, Rename).
  absl::StatusOr<Removed> Remove(const RequestContext& ctx, uint64_t parent,
                                 const std::string& name, bool is_dir, uint64_t expected_ino = 0);
  absl::StatusOr<Removed> Rename(const RequestContext& ctx, const proto::RenameRequest& req);
  absl::StatusOr<std::string> ReadLink(const RequestContext& ctx, uint64_t ino);
  absl::Status ReadDir(const RequestContext& ctx, uint64_t ino, uint64_t cookie, uint32_t max,
                       proto::ReadDirReply* reply);

  // --- namespace grants (docs/namespace-grants.md; volume_ns_grants.cc) ----
  // Most inode numbers one InodeRange call hands out.
  static constexpr uint32_t kMaxInodeRange = 65536;
  // `count` fresh inode numbers (at most kMaxInodeRange) for the creates the
  // session makes in its granted directories, recorded in its session
  // record; its ranges that end at or below `keep_from` are forgotten.
  absl::StatusOr<proto::SessionRecord::InodeRange> InodeRange(const RequestContext& ctx,
                                                              uint32_t count, uint64_t keep_from);
  // Grants directory `dir`, just made by the session, to it (`epoch`:
  // LeaseTable::Epoch() from before the mkdir). False when the session
  // takes no leases now, holds no inode range, or the directory is
  // recalled too often (hot) or was touched since `epoch`.
  bool GrantNewDir(const RequestContext& ctx, uint64_t dir, uint64_t epoch);
  // Grants directory `dir`, which exists, to the session when no other
  // session uses it: none holds the grant, nor the attributes of an inode
  // in it (the holder's removes and renames change those), and it holds at
  // most kMaxGrantedEntries names. Others' leases on the directory's names
  // and attributes are recalled (as for a new one). False as GrantNewDir,
  // or when it is in use or too large; `why` says which.
  bool GrantDir(const RequestContext& ctx, uint64_t dir, uint64_t epoch, std::string* why);
  static constexpr int kMaxGrantedEntries = 4096;
  // The session takes leases now and its record holds inode numbers.
  bool TakesGrants(const RequestContext& ctx);
  // Before the request of `ctx` reads or changes `inos` (and, with `name`,
  // the inode that name in the first of them names): the namespace grants
  // other sessions hold on them or on the directories holding them are
  // recalled, so that their holders apply their logs first. At once when
  // no session may hold a grant (LeaseTable::GrantsOut).
  void BreakGrants(const RequestContext& ctx, absl::Span<const uint64_t> inos,
                   const std::string* name = nullptr);

  // --- files ---------------------------------------------------------------
  // `handle`: the client's id for this open (0: none); a resent Open or
  // Release with the same handle counts once (SessionTable::OpenFile).
  // `created`: see Inodes::CheckOpen.
  absl::StatusOr<proto::Attr> Open(const RequestContext& ctx, uint64_t ino, uint32_t flags,
                                   uint64_t handle = 0, bool created = false);
  // `reaped` (optional): this was the last open of a removed file, gone now.
  absl::Status Release(const RequestContext& ctx, uint64_t ino, uint64_t handle = 0,
                       bool* reaped = nullptr);
  absl::StatusOr<std::string> Read(const RequestContext& ctx, uint64_t ino, uint64_t offset,
                                   uint32_t size);
  // With `from_grant`, newly allocated blocks come out of the session's
  // space grant first.
  // `grant_used` (optional) gets the bytes taken from the grant.
  // `staged`: the bytes are in the chunk files already (StageWrite).
  absl::StatusOr<proto::Attr> Write(const RequestContext& ctx, uint64_t ino, uint64_t offset,
                                    const std::string& data, bool sync, bool from_grant = false,
                                    uint64_t* grant_used = nullptr, bool staged = false);
  // The data of one log batch's writes of files the same batch makes
  // (GrantFsService::ApplyLog), written and synced together before the
  // batch is applied in order (each write's data then on disk before its
  // commit, as Write keeps it). BeginStage claims `ino` for it: true only
  // for an inode number the session `client_id` holds unused in its ranges
  // (InodeRange), that is not a file and that no other batch stages now:
  // nobody else's bytes can be there, and no other session can make it.
  // StageWrite writes `data` at `offset` of `ino` (synced unless both
  // `sync` and options.sync_data are off); Write(..., staged=true) then
  // commits it, unless the file has size or blocks by then (another
  // writer reached it by its number): then the bytes are written again, in
  // order. Bytes staged that no Write committed (the entry refused, not
  // reached) are taken back with UnstageWrite (the chunk files of the
  // range that no committed write holds), then EndStage lets the claim go.
  // A server killed in between leaves chunk files no record names
  // (server/orphan_chunks.h).
  bool BeginStage(uint64_t client_id, uint64_t ino) ABSL_LOCKS_EXCLUDED(stage_mu_);
  void EndStage(uint64_t ino) ABSL_LOCKS_EXCLUDED(stage_mu_);
  absl::Status StageWrite(uint64_t ino, uint64_t offset, const std::string& data, bool sync);
  void UnstageWrite(uint64_t ino, uint64_t offset, uint64_t length);
  // Writes staged so far (StageWrite that succeeded).
  uint64_t staged_writes() const { return staged_writes_.load(std::memory_order_relaxed); }
  // Space grants: see Allocator::Grant. Returns the session's whole grant
  // in bytes; `added` gets the bytes this call granted.
  absl::StatusOr<uint64_t> Grant(const RequestContext& ctx, uint64_t wanted_bytes,
                                 uint64_t return_bytes, uint64_t* added);
  absl::Status Fsync(const RequestContext& ctx, uint64_t ino);
  absl::StatusOr<proto::Attr> Fallocate(const RequestContext& ctx, uint64_t ino, uint32_t mode,
                                        uint64_t offset, uint64_t length);
  SpaceInfo Space() { return meta_->store().Space(); }
  SpaceInfo SpaceCounts() { return meta_->store().SpaceCounts(); }
  // The data disk now: room file data may take (free + held) and held.
  struct DiskSpace {
    uint64_t room_bytes = 0;
    uint64_t held_bytes = 0;
  };
  DiskSpace Disk();

  // --- xattrs ----------------------------------------------------------------
  absl::Status SetXattr(const RequestContext& ctx, uint64_t ino, const std::string& name,
                        const std::string& value, uint32_t flags);
  absl::StatusOr<std::string> GetXattr(const RequestContext& ctx, uint64_t ino,
                                       const std::string& name);
  absl::StatusOr<std::vector<std::string>> ListXattr(const RequestContext& ctx, uint64_t ino);
  // Sets attr->no_xattrs when the inode has no xattrs (for a reply that
  // leases `attr`: read before the lease is granted, like the attributes).
  void MarkNoXattrs(proto::Attr* attr);
  absl::Status RemoveXattr(const RequestContext& ctx, uint64_t ino, const std::string& name);

  // --- locks -------------------------------------------------------------------
  // Every change of an inode's locks is written to the metadata store (and
  // so replicated) before SetLock returns; a server that starts or takes
  // over puts them back, and gives their sessions a lease to come back in.
  absl::StatusOr<FileLock> GetLock(const RequestContext& ctx, uint64_t ino, const FileLock& want);
  absl::Status SetLock(const RequestContext& ctx, uint64_t ino, const FileLock& want);

  // --- sessions ----------------------------------------------------------------
  // A new session, recorded durably (and so replicated) before it is
  // returned. Returns the client id.
  // It belongs to `peer` (SessionTable::BelongsTo).
  absl::StatusOr<uint64_t> OpenSession(const std::string& client_name,
                                       const std::string& peer = "");
  // Renews the lease of `client_id` (every request does); a session the
  // server had forgotten is re-created and recorded again (a failed record
  // is retried by the maintenance round). ResourceExhausted while the
  // session is being ended: the client retries.
  // `tag`: the request it is done for, if any (RequestContext::tag).
  // A re-created session belongs to `peer`.
  absl::Status Touch(uint64_t client_id, RequestTag* tag = nullptr, const std::string& peer = "");
  absl::Status CloseSession(uint64_t client_id);
  // This volume's serving incarnation: random and never 0. Clients that see
  // it change reclaim their open files (Reclaim).
  uint64_t incarnation() const { return incarnation_; }
  // For every session that holds locks: on how many files (grantfsctl
  // clients).
  std::map<uint64_t, size_t> LockedFiles() { return locks_.LockedFilesByClient(); }
  // A client that was connected to the server before (the last run of this
  // one, or the primary this one took over from) names the files it has
  // open, (ino, handle) pairs. Each is counted as if opened here again (a
  // pair already counted counts once); those whose inode no longer exists
  // (or cannot be read) are returned. Ends the client's grace
  // (SessionTable::StartGrace): once no session is in grace, unlinked files
  // nobody holds are freed again. Grace ends for every session at the
  // latest two leases after the server started serving, so that a client
  // that never reclaims cannot keep unlinked files forever.
  absl::StatusOr<std::vector<uint64_t>> Reclaim(
      const RequestContext& ctx, const std::vector<std::pair<uint64_t, uint64_t>>& opens);

  // One round of background work: expire leases, free deleted chunks.
  // Returns the number of garbage inodes freed.
  absl::StatusOr<int> RunMaintenance();

 private:
  // Zeros the bytes of `*data` (read at `offset` of `ino`) that lie in blocks
  // no committed write allocated: a write whose commit a crash cut may have
  // left its bytes in the chunk file, and a hole must read as zeros.
  absl::Status ZeroUnallocated(uint64_t ino, uint64_t offset, std::string* data);
  // The file grows from `size` to at least `upto` without a write there:
  // zeros the rest of the block holding `size` (up to `upto`), where such a
  // lost write may also have left bytes. Whole blocks past it are holes
  // (ZeroUnallocated). REQUIRES: the inode's data lock held exclusively.
  absl::Status ZeroTail(uint64_t ino, uint64_t size, uint64_t upto);
  // `what` (a write, a fallocate, the zeroing of a tail) put bytes of
  // [offset, offset + length) in the chunk files of `ino` and made no record
  // of them (its commit failed, or it came first). If the inode is gone
  // (removed meanwhile: a mount's flush of a closed file racing its unlink),
  // no record will ever name those chunk files: once the removal is durable
  // and replicated, they are deleted, durably, and the deletions are sent
  // to the replica. Otherwise nothing changes (bytes no record allocates
  // read as zeros: ZeroUnallocated). Errors are logged (the open after a
  // restart deletes what is left: server/orphan_chunks.h).
  void DropUncommitted(uint64_t ino, uint64_t offset, uint64_t length, absl::string_view what);
  Volume(const VolumeOptions& options, std::unique_ptr<Metadata> meta,
         std::unique_ptr<ChunkStore> chunks, std::unique_ptr<SpaceHold> hold);

  absl::Mutex& DataLock(uint64_t ino) { return data_locks_[ino % data_locks_.size()]; }
  absl::Mutex& FileLockMu(uint64_t ino) { return file_lock_mu_[ino % file_lock_mu_.size()]; }
  // Puts back what the last run recorded: the sessions, orphans kept for
  // the sessions that hold them open and file locks. The sessions are in
  // grace until they reclaim or expire; without any, orphans nobody holds
  // are reaped.
  absl::Status Recover();
  // After the open set of orphan `ino` changed: records who holds it now,
  // or turns it into garbage when nobody does and no session is in grace
  // (one may still have it open). Returns whether it was reaped.
  // `tag`: the request it is done for, if any (RequestContext::tag).
  absl::StatusOr<bool> SyncOrphan(uint64_t ino, RequestTag* tag = nullptr);
  // Counts an open of `ino` by the client, re-creating its session if it
  // ended since the request came in (ResourceExhausted while it is ending).
  absl::Status CountOpen(const RequestContext& ctx, uint64_t ino, uint64_t handle);
  // Writes the session record of `client_id`; when that fails, returns the
  // error and remembers the session for the next maintenance round.
  absl::Status RecordSession(uint64_t client_id, const std::string& client_name,
                             RequestTag* tag = nullptr, const std::string& peer = "");
  // Applies `change` to the locks of `ino` and writes the result to the
  // metadata store when it changed anything (for request `tag`, if any).
  absl::Status ChangeLocks(uint64_t ino, absl::FunctionRef<absl::Status()> change,
                           RequestTag* tag = nullptr);
  void ForgetClient(uint64_t client_id, const std::map<uint64_t, uint32_t>& open_files);
  void Publish(const RequestContext& ctx, uint64_t ino, uint64_t parent, const std::string& name,
               bool data_changed = false);

  void BackgroundLoop();
  // Asks every other session holding a grant to give back what it does not
  // need (at most every 200 ms). Returns whether any other session holds one.
  bool RecallGrants(uint64_t origin);

  // Makes the space hold cover every grant and the metadata reserve (grows
  // it, or shrinks it once grants were written or returned), and sends the
  // promise to the replica, whose hold does the same on its disk
  // (MetaStore::Promise). Returns false when this server's disk cannot hold
  // them; logs when that starts and ends.
  bool CoverPromises();

  // Reserve for a write, recalling other sessions' grants and waiting up to
  // options_.recall_wait when the volume is full.
  absl::StatusOr<Reservation> ReserveForWrite(const RequestContext& ctx, uint64_t ino,
                                              uint64_t offset, uint64_t length,
                                              uint64_t grant_client);

  // Constant after construction.
  const VolumeOptions options_;
  const uint64_t incarnation_;
  const std::unique_ptr<Metadata> meta_;
  const std::unique_ptr<ChunkStore> chunks_;
  std::atomic<uint64_t> staged_writes_{0};
  absl::Mutex stage_mu_;
  absl::flat_hash_set<uint64_t> staging_ ABSL_GUARDED_BY(stage_mu_);  // BeginStage
  const std::unique_ptr<SpaceHold> hold_;
  absl::Mutex cover_mu_;  // CoverPromises: read the promise and cover it
  absl::Mutex hold_mu_;
  bool hold_whole_ ABSL_GUARDED_BY(hold_mu_) = true;  // as of the last CoverPromises

  // Reader lock: reads and writes of file data; writer lock: truncation.
  std::array<absl::Mutex, 1024> data_locks_;
  // Held while an inode's locks change and are written, so that the
  // writes of one inode's lock lists land in the order of the changes.
  // Lock order: before the LockManager's and the metadata store's mutexes.
  std::array<absl::Mutex, 64> file_lock_mu_;
  LockManager locks_;
  SessionTable sessions_;
  LeaseTable leases_;
  FlowControl flow_;
  InFlightRequests in_flight_;

  // When grace ends for every session still reclaiming: set by Recover,
  // before the background thread starts; read by RunMaintenance.
  absl::Time grace_until_ = absl::InfinitePast();
  // Whether the session's record is durable (SessionTable::Recorded).
  bool Recorded(uint64_t client_id);
  // Sessions whose record could not be written yet (retried by maintenance).
  absl::Mutex unrecorded_mu_;
  std::set<uint64_t> unrecorded_ ABSL_GUARDED_BY(unrecorded_mu_);

  absl::Mutex recall_mu_;
  absl::Time last_recall_ ABSL_GUARDED_BY(recall_mu_) = absl::InfinitePast();

  // The background thread runs maintenance every second, and within this
  // of a file being reaped (one round for all reaped meanwhile).
  static constexpr absl::Duration kGarbageBatch = absl::Milliseconds(100);
  absl::Mutex bg_mu_;
  bool stopping_ ABSL_GUARDED_BY(bg_mu_) = false;
  bool garbage_waiting_ ABSL_GUARDED_BY(bg_mu_) = false;
  // Only RunMaintenance (one caller at a time) uses them.
  absl::Time last_dedupe_expiry_ = absl::InfinitePast();
  bool in_grace_ = false;  // as of the last round
  std::thread background_;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_VOLUME_H_
