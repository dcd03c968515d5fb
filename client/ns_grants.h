// The mount's half of namespace grants (issue 17, docs/namespace-grants.md):
// which directories the server granted to this mount, the inode numbers it
// may give new files, and the creates and removals it does on its own in
// those directories, answered at once and sent to the server later, in
// order, as a log (client/ns_log.h).
//
// A directory is granted when this mount makes it (MkNod with want_grant)
// and while its grant lasts: until the server recalls it (another mount
// wants to look), the recall stream breaks, or the session's leases are not
// renewed. A change is made here only when it is certain to succeed on the
// server exactly as the mount answered: the directory's whole listing and
// attributes are leased here (LeaseCache), the caller owns the directory
// and may write and search it by its owner bits, and for a create the
// caller's ids are the directory's (so the new inode is the server's
// inode, bit for bit); anything else (another owner, a name that exists
// for open(O_CREAT), setuid/setgid bits, the log full, no inode numbers
// left) goes the synchronous way. The kernel serializes the changes of one
// directory (its i_rwsem), and every other call of the mount applies the
// log first (MetaClient::SetBarrier): the server never answers on a state
// older than what this mount already answered.
//
// A refused entry (a bug) stops the log: what came after it is dropped,
// every lease is dropped (the mount's view differs from the server's; the
// kernel's copies live out the short timeouts they were given, at most the
// metadata lease: it is not called from here, where a FUSE request may be
// waiting), no change is made here any more, and the next fsync reports
// the error.
//
// Thread-safe. mu_ is taken before LeaseCache's, NsLog's and
// OpenHandleTable's (leaves) and before the write cache's (DataHooks
// bytes and seal: WriteCache::mu_ is never held while NsGrants is called);
// no RPC is made under it.
#ifndef GRANTFS_CLIENT_NS_GRANTS_H_
#define GRANTFS_CLIENT_NS_GRANTS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/lease_cache.h"
#include "client/meta_client.h"
#include "client/ns_log.h"
#include "common/clock.h"
#include "proto/grantfs.pb.h"

namespace grantfs {

struct NsGrantsOptions {
  NsLogOptions log;
  // Inode numbers asked for at a time (the server gives at most 65,536).
  uint32_t range_size = 4096;
  // The wall clock the entries' times come from (the times the mount
  // shows, and the server keeps). Not owned.
  Clock* wall = Clock::Real();
  // Existing directories (WantDirGrant): a grant is asked for at the
  // `ask_after`th change made by a call in a directory within `use_window`,
  // and not again for `ask_again` after the server declined. Not owned.
  int ask_after = 2;
  absl::Duration use_window = absl::Seconds(1);
  absl::Duration ask_again = absl::Seconds(5);
  Clock* clock = Clock::Monotonic();
};

class NsGrants {
 public:
  // `meta` and `leases` must outlive it. Installs the barrier on `meta`.
  NsGrants(const NsGrantsOptions& options, MetaClient* meta, LeaseCache* leases);
  ~NsGrants();
  NsGrants(const NsGrants&) = delete;
  NsGrants& operator=(const NsGrants&) = delete;

  // Starts the log's ager. Inode numbers are asked for at the first mkdir
  // (WantGrant).
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Applies what is left of the log (unmount) and stops the ager.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // The data side, for closes that do not wait for their data
  // (DeferClose): the write cache. Set before Start, or never (every close
  // then waits, as without grants). `bytes` and `seal` are called under
  // mu_, `flush` outside it.
  struct DataHooks {
    // Sends the files' cached writes from the calling thread and waits for
    // them (WriteCache::FlushNow, errors the server made final not
    // consumed).
    std::function<absl::Status(const std::vector<uint64_t>& inos)> flush;
    // Bytes of the file cached (WriteCache::CachedBytes).
    std::function<uint64_t(uint64_t ino)> bytes;
    // Sends the file's cached writes soon, without waiting (WriteCache::Seal).
    std::function<void(uint64_t ino)> seal;
  };
  void SetDataHooks(DataHooks hooks) { hooks_ = std::move(hooks); }

  // --- grants ----------------------------------------------------------------
  // Whether a mkdir should ask for a grant (the log is healthy and inode
  // numbers are at hand; none: asks for some first). `*ticket` is taken
  // for Granted.
  bool WantGrant(uint64_t* ticket) ABSL_LOCKS_EXCLUDED(mu_);
  // The server granted `dir` (the reply to a mkdir with want_grant, or to
  // the first page of a readdir with it, sent after `ticket` was taken).
  // Not kept when a recall or a drop came since: it may have been this very
  // grant's, handled before the reply.
  // `existing`: a directory that was there before (WantDirGrant).
  void Granted(uint64_t dir, uint64_t ticket, bool existing = false) ABSL_LOCKS_EXCLUDED(mu_);
  // Grants of existing directories (docs/namespace-grants.md): a change in
  // `dir`, not granted here, was made by a call. True when the mount should
  // ask for its grant now (a readdir of it from cookie 0 with want_grant):
  // WantGrant's conditions hold, it is the options' ask_after'th such
  // change within use_window, and the server did not decline it within
  // ask_again. `*ticket` is taken for Granted.
  bool WantDirGrant(uint64_t dir, uint64_t* ticket) ABSL_LOCKS_EXCLUDED(mu_);
  // The server declined the grant WantDirGrant asked for.
  void Declined(uint64_t dir) ABSL_LOCKS_EXCLUDED(mu_);
  // `dir` was removed by a call, or a file opened in the log was renamed
  // or linked by one: what this mount remembers of it here is dropped (a
  // removed directory's grant, the file's opens: their closes go as
  // calls).
  void DirRemoved(uint64_t dir) ABSL_LOCKS_EXCLUDED(mu_);
  void FileMoved(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // The server recalls the grant of `dir`: no change is made in it from
  // now on, the data of files in it whose close did not wait is sent, and
  // the log is applied (returns when all of it is, or failed).
  absl::Status Recall(uint64_t dir) ABSL_LOCKS_EXCLUDED(mu_);
  // Every grant is gone (the stream broke, the leases were not renewed).
  // The log stays, to be applied (ApplyPending).
  void DropAll() ABSL_LOCKS_EXCLUDED(mu_);
  // Applies the log as far as it goes now: before the mount subscribes
  // again (a new primary waits for it before other mounts' calls go on),
  // and the barrier. An error when it could not be sent (the entries stay);
  // OK when it was applied, or refused (the log stopped: nothing is left).
  absl::Status ApplyPending() ABSL_LOCKS_EXCLUDED(mu_);
  // fsyncdir, syncfs (`ino` 0): applies the log; fsync of file `ino`: the
  // log up to the last entry that touches it (NsLog::LastTouching: its
  // create, renames, attributes, data; every entry before it goes too),
  // not what came after. The error of a refused entry is returned to every
  // fsync of a file whose changes were dropped with it (NsLog::Dropped),
  // and once to the first fsyncdir or syncfs after it happened.
  absl::Status Sync(uint64_t ino = 0) ABSL_LOCKS_EXCLUDED(mu_);
  // Sends the data of every file whose close did not wait: before the
  // mount subscribes again (a server that took over lets other mounts'
  // looks go on once it has).
  absl::Status SendAllDeferred() ABSL_LOCKS_EXCLUDED(mu_);
  // fsyncdir of `dir`: Sync, after sending the data of the files in it
  // whose close did not wait (what a close sent before them: a program
  // that writes files and fsyncs their directory finds their contents
  // after a crash of the mount, as it did when close sent them).
  absl::Status SyncDir(uint64_t dir) ABSL_LOCKS_EXCLUDED(mu_);
  bool Holds(uint64_t dir) ABSL_LOCKS_EXCLUDED(mu_);
  // Position of the last entry appended to the log (0: none), and whether
  // every entry up to position `pos` was applied (or dropped: refused).
  uint64_t LogLast() { return log_->last(); }
  bool LogAppliedThrough(uint64_t pos) { return log_->Mark() > pos; }

  // --- changes made here -------------------------------------------------
  // Each returns nullopt when the change cannot be made here for certain:
  // the caller makes it with the synchronous call instead. Otherwise the
  // change's outcome, as the server will see it.
  //
  // mknod/mkdir (`exclusive` as MkNodRequest's). A directory made here is
  // granted too (the server grants it when it applies the entry).
  std::optional<absl::StatusOr<proto::Attr>> MkNod(const Creds& c, uint64_t parent,
                                                   const std::string& name, uint32_t mode,
                                                   uint64_t rdev, uint32_t umask, bool exclusive)
      ABSL_LOCKS_EXCLUDED(mu_);
  // open(O_CREAT) of a name not there: the file made and opened with
  // `flags` as one change (two entries). `begin_open` gives the handle
  // (OpenHandleTable::BeginOpen) once the inode number is chosen; `*handle`
  // is 0 unless it was called (a nullopt then leaves the open begun to
  // the caller to end).
  std::optional<absl::StatusOr<proto::Attr>> Create(
      const Creds& c, uint64_t parent, const std::string& name, uint32_t mode, uint32_t umask,
      uint32_t flags, const std::function<uint64_t(uint64_t)>& begin_open, uint64_t* handle)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<absl::StatusOr<proto::Attr>> Symlink(const Creds& c, uint64_t parent,
                                                     const std::string& name,
                                                     const std::string& target)
      ABSL_LOCKS_EXCLUDED(mu_);
  // unlink, rmdir (only of an empty directory whose listing is leased
  // here). `*ino` gets the inode that lost the name.
  std::optional<absl::Status> Remove(const Creds& c, uint64_t parent, const std::string& name,
                                     bool is_dir, uint64_t* ino) ABSL_LOCKS_EXCLUDED(mu_);
  // rename of a file, symlink, fifo or socket (not a directory) within or
  // between granted directories, flags 0 or RENAME_NOREPLACE, over nothing
  // or over a name that is not a directory. `*moved` and `*replaced` (0:
  // none) get the inodes.
  std::optional<absl::Status> Rename(const Creds& c, uint64_t parent, const std::string& name,
                                     uint64_t new_parent, const std::string& new_name,
                                     uint32_t flags, uint64_t* moved, uint64_t* replaced)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The close of `handle`: true when it went into the log (its open did,
  // and its directory is still granted); false: the caller sends Release.
  bool Release(uint64_t ino, uint64_t handle) ABSL_LOCKS_EXCLUDED(mu_);

  // --- attributes of files made here ------------------------------------------
  // A regular file made here has its attributes tracked here: what the
  // server will hold once the log and the file's cached writes are applied
  // (all but the blocks the writes allocate), while its directory stays
  // granted and no call changes it.
  //
  // chmod, chown, utimes (no truncate) of a tracked file, by its owner or
  // root, that the server's rules make certain (no setuid/setgid/sticky
  // bits; a non-root caller changes no owner or group): made here as a
  // log entry, answered with the new attributes (their `blocks` an
  // estimate: not for the kernel to keep). nullopt: a call.
  std::optional<absl::StatusOr<proto::Attr>> SetAttr(const Creds& c,
                                                     const proto::SetAttrRequest& req)
      ABSL_LOCKS_EXCLUDED(mu_);
  // open(2) (no O_CREAT, no O_TRUNC) of a tracked file by its owner with
  // the owner bits the flags need, or by root: an open entry, the handle
  // from `begin_open` (as Create's), answered with the tracked
  // attributes. nullopt: a call (`*handle` stays 0).
  std::optional<absl::StatusOr<proto::Attr>> Open(
      const Creds& c, uint64_t ino, uint32_t flags,
      const std::function<uint64_t(uint64_t)>& begin_open, uint64_t* handle)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether SetAttr would make `req` here now.
  bool MaySetAttr(const Creds& c, const proto::SetAttrRequest& req) ABSL_LOCKS_EXCLUDED(mu_);
  // A cached write of a tracked file, stamped `time_ns` (the time its
  // flush gives the file: WriteCache::WriteTime): its size grows to the
  // write's end, its times move as the server's commit moves them
  // (server/allocator.cc CommitWrite).
  void Wrote(uint64_t ino, uint64_t offset, uint64_t size, int64_t time_ns)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The attributes of a tracked file that never had a hole (so the blocks
  // its writes allocate are known: every block up to its size), exactly as
  // the server will give them; nullopt otherwise.
  std::optional<proto::Attr> Attr(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // The file type and mode bits of a tracked file (0: not tracked).
  uint32_t Mode(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // The size of a tracked file (exact: every write of it went through
  // this mount), or nullopt.
  std::optional<uint64_t> TrackedSize(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the server would answer "no such xattr" to `c` for `name` of
  // `ino` ("": a listing, empty): a tracked file, made here, has none but
  // what a call set (which untracks it).
  bool NoXattrs(const Creds& c, uint64_t ino, const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // A call changed `ino` (a truncate, fallocate, write-through, setattr):
  // its attributes are the server's again, no longer tracked here.
  void Untrack(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);

  // --- closes that do not wait for their data ---------------------------------
  // close(2) waits for a file's cached writes so that the next open on any
  // node sees them. A file made here, in a directory still granted here,
  // can be opened elsewhere only through that directory, whose grant is
  // recalled first: the recall sends its data (Recall), and its close need
  // not wait. True when the close of `ino` may return at once (the file is
  // remembered until a recall, FlushDeferred or TakeDeferred).
  bool DeferClose(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // Before a call makes `ino` reachable without a recall of its directory
  // (a link, a rename by a call): its deferred data goes first.
  absl::Status FlushDeferred(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the data of `ino` is owed by a close that did not wait (its
  // flushes say so: WriteRequest.granted).
  bool Owes(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // `ino` lost its name here (an unlink or rename over it in the log):
  // whether its close was deferred (its cached bytes may be dropped).
  bool TakeDeferred(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // A flush of the write cache (its FlushRpc), for a file whose data is
  // owed here: the extent goes in the log as a write entry, after the
  // entries that made the file, and is answered when its batch is applied
  // (one ApplyLog and one sync for the file and its data, not a Write call
  // after the log's own): then `done` is called, once, by the thread that
  // sent the batch, with no lock held (it must not apply the log itself:
  // no call through MetaClient). True when the entry was appended; false:
  // the caller sends a Write (the file's directory not granted here nor
  // being recalled, the piece over kMaxLogWriteBytes, kMaxLogWrites or
  // kMaxLoggedBytes in the log already, the log full or stopped).
  // `done` gets the reply's attr, grant_used_bytes and synced_always, as a
  // Write's; or ABORTED when the entry was refused or dropped with the log
  // (nothing of it stored: the caller sends it again, as a Write, and
  // reports no failure); nothing while the batch cannot be sent (the entry
  // stays in the log). `data` is held until then.
  using WriteDone = std::function<void(absl::StatusOr<proto::WriteReply>)>;
  bool LogWrite(uint64_t ino, uint64_t offset, std::shared_ptr<const std::string> data,
                int64_t time_ns, bool keep_times, WriteDone done) ABSL_LOCKS_EXCLUDED(mu_);
  // Sends the log up to the last entry touching `ino` (its write entries
  // among them) and returns once that was applied: the write cache's wait
  // for an extent LogWrite took (WriteCacheOptions.hurry). OK also when the
  // log was refused (the entries' `done` was called).
  absl::Status SendWrites(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    uint64_t local = 0;     // changes made here
    uint64_t fallback = 0;  // changes in a granted directory that went the synchronous way
    uint64_t recalls = 0;
    size_t granted = 0;  // directories held now
    size_t pending = 0;  // log entries not applied yet
  };
  Stats stats() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What the caller may do in `parent` here: its leased attributes when
  // the grant is held, its listing leased, and the caller owns it with
  // write and search by the owner bits; nullopt otherwise.
  std::optional<proto::Attr> WritableDir(const Creds& c, uint64_t parent)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `ino` is a file (not a directory) this mount made in `dir`,
  // which has been granted here ever since: it has one name (a link of it
  // is a call: FileMoved), whatever its attributes (the lease cache may
  // have none: an own change drops them). Sound because what was made in
  // a directory is forgotten when it is granted again (Granted `existing`)
  // or every grant is dropped: a grant that comes back starts anew.
  bool MadeHere(uint64_t ino, uint64_t dir) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next inode number (0: none left).
  uint64_t TakeIno() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // MkNod, Create and Symlink: the checks they share (the directory
  // writable here, the type, the name valid and known not there), then
  // CreateLocked. With `open_flags`, the open of the new file too, its
  // handle from `begin_open` into `*handle`.
  std::optional<absl::StatusOr<proto::Attr>> LocalCreate(
      const Creds& c, uint64_t parent, const std::string& name, uint32_t mode, uint64_t rdev,
      uint32_t umask, bool exclusive, const std::string& target, std::optional<uint32_t> open_flags,
      const std::function<uint64_t(uint64_t)>& begin_open, uint64_t* handle)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A create's entries appended and its inode put in the lease cache.
  // `open` (may be null): the open entry appended after it.
  absl::StatusOr<proto::Attr> CreateLocked(const Creds& c, const proto::Attr& dir,
                                           const std::string& name, uint32_t mode, uint64_t rdev,
                                           uint32_t umask, bool exclusive,
                                           const std::string& target, proto::LogEntry* open)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks for more inode numbers when few are left (outside mu_).
  void Refill() ABSL_LOCKS_EXCLUDED(mu_);
  proto::LogEntry NewEntry(const Creds& c, int64_t now);
  // The log's Send: ApplyLog, then the reply's unleased inodes.
  absl::StatusOr<proto::ApplyLogReply> Send(proto::ApplyLogRequest* req);
  // The log stopped: everything dropped once.
  void Diverged() ABSL_LOCKS_EXCLUDED(mu_);

  const NsGrantsOptions options_;
  MetaClient* const meta_;
  LeaseCache* const leases_;
  std::unique_ptr<NsLog> log_;

  absl::Mutex mu_;
  absl::flat_hash_set<uint64_t> granted_ ABSL_GUARDED_BY(mu_);
  // Directories being recalled (Recall runs), with how many recalls: the
  // server holds their grants until the recall's ack, so the data of
  // their files still goes in the log (LogWrite).
  absl::flat_hash_map<uint64_t, int> recalling_ ABSL_GUARDED_BY(mu_);
  // Changes made by calls in directories not granted here (WantDirGrant):
  // how many since `since`, and until when the server's no stands. At most
  // kMaxUse directories: past it, forgotten.
  struct DirUse {
    int changes = 0;
    absl::Time since;
    absl::Time declined_until = absl::InfinitePast();
  };
  static constexpr size_t kMaxUse = 4096;
  absl::flat_hash_map<uint64_t, DirUse> use_ ABSL_GUARDED_BY(mu_);
  // Inode numbers at hand: [next, end) ranges, used in order.
  std::deque<std::pair<uint64_t, uint64_t>> ranges_ ABSL_GUARDED_BY(mu_);
  uint64_t numbers_left_ ABSL_GUARDED_BY(mu_) = 0;
  bool refilling_ ABSL_GUARDED_BY(mu_) = false;
  // Handles opened in the log: their file and its directory.
  struct LoggedOpen {
    uint64_t ino;
    uint64_t dir;
  };
  absl::flat_hash_map<uint64_t, LoggedOpen> logged_opens_ ABSL_GUARDED_BY(mu_);
  // Files (not directories) made here, and the directory each is in now
  // (MadeHere). At most kMaxMade: past it, forgotten. A directory's go
  // when it is granted again (Granted `existing`).
  static constexpr size_t kMaxMade = 1 << 20;
  absl::flat_hash_map<uint64_t, uint64_t> made_ ABSL_GUARDED_BY(mu_);
  // Tracked attributes of regular files made here (SetAttr), at most
  // kMaxTracked (past it, files made are not tracked).
  static constexpr size_t kMaxTracked = 1 << 16;
  struct Tracked {
    proto::Attr attr;
    bool dense = true;  // no write ever began past the end of the file
  };
  absl::flat_hash_map<uint64_t, Tracked> tracked_ ABSL_GUARDED_BY(mu_);
  // The files (and their deferral's number) of `dir` whose close did not
  // wait, those whose directory is not known any more too; all of them
  // without `dir`.
  std::vector<std::pair<uint64_t, uint64_t>> DeferredIn(std::optional<uint64_t> dir)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends their data; once sent, those not deferred again since are no
  // longer owed. An error when some could not be sent (they stay owed).
  absl::Status SendData(const std::vector<std::pair<uint64_t, uint64_t>>& files)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The granted directory that `ino`, a file made here, is in now; 0 when
  // it is not made here, its directory is no longer granted, or the log
  // stopped (what every change made here to a file it made first asks).
  uint64_t OwnDir(uint64_t ino) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Its tracked attributes when OwnDir says so; null otherwise.
  Tracked* OwnTracked(uint64_t ino) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `t`'s attributes with the blocks its writes allocate.
  static proto::Attr WithBlocks(const Tracked& t);
  // The tracked file `req` may change here (SetAttr), or null; `*refused`:
  // null because the server's rules are not certain to pass (a fallback).
  Tracked* SettableHere(const Creds& c, const proto::SetAttrRequest& req, bool* refused)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Files whose close did not wait for their data (DeferClose), each with
  // the number of its latest deferral. At most kMaxDeferred: past it,
  // those with nothing cached any more are forgotten, and if that is not
  // enough, closes wait again. Files with more than kMaxDeferredFileBytes
  // cached are not deferred (what a recall sends stays small).
  static constexpr size_t kMaxDeferred = 4096;
  static constexpr uint64_t kMaxDeferredFileBytes = 1 << 20;
  // And at most this much cached for them, as counted at their closes:
  // what a recall sends before its ack goes well within the server's
  // wait for it.
  static constexpr uint64_t kMaxDeferredBytes = 16 << 20;
  struct Owed {
    uint64_t gen = 0;    // its latest deferral's number
    uint64_t bytes = 0;  // cached at that close
  };
  absl::flat_hash_map<uint64_t, Owed> deferred_ ABSL_GUARDED_BY(mu_);
  // Erases an entry of deferred_ and its bytes.
  void EraseDeferred(absl::flat_hash_map<uint64_t, Owed>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t deferred_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t defer_gen_ ABSL_GUARDED_BY(mu_) = 0;
  // Write entries in the log (LogWrite), by sequence number, until
  // answered or dropped (Send). At most kMaxLogWrites and kMaxLoggedBytes
  // of data: past them, flushes are calls.
  static constexpr uint64_t kMaxLogWriteBytes = 256 << 10;
  static constexpr size_t kMaxLogWrites = 256;
  static constexpr uint64_t kMaxLoggedBytes = 16 << 20;
  struct LoggedWrite {
    uint64_t ino = 0;
    std::shared_ptr<const std::string> data;
    WriteDone done;
  };
  absl::flat_hash_map<uint64_t, LoggedWrite> log_writes_ ABSL_GUARDED_BY(mu_);
  uint64_t logged_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The server refused an entry (Send saw it): nothing more goes in the
  // log from LogWrite; stopped_: Stop began.
  bool log_refused_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // SendAllDeferred's failures in a row; at kMaxSendFailures what is owed
  // is given up (the mount subscribes without it).
  static constexpr int kMaxSendFailures = 3;
  int send_failures_ ABSL_GUARDED_BY(mu_) = 0;
  // This node's root is root at the server (a root create was made here).
  bool root_honored_ ABSL_GUARDED_BY(mu_) = false;
  DataHooks hooks_;  // set before Start
  // Recalls and drops so far (Granted's ticket).
  uint64_t gen_ ABSL_GUARDED_BY(mu_) = 0;
  bool diverged_ ABSL_GUARDED_BY(mu_) = false;
  bool error_reported_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_NS_GRANTS_H_
