// The client's file-system logic, free of FUSE types: every POSIX operation
// of the mount as calls on the server (MetaClient), over the mount's caches.
// The session with the servers (heartbeats, reclaim, the invalidation
// stream) is Session's.
//
// Data path (docs/write-path.md): in fastwrite mode (the default) write()
// debits the session's space grant and copies into the write cache; flusher
// threads send the data on; flush (close) and fsync wait for it. In
// write-through mode every write() is one RPC that allocates at the server.
// Reads of a sequential reader are served from extents fetched ahead
// (ReadAhead); every change of a file's data drops what was fetched of it.
//
// Every method returns an errno status on failure (ToErrno()). Thread-safe.
#ifndef GRANTFS_CLIENT_FILESYSTEM_H_
#define GRANTFS_CLIENT_FILESYSTEM_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/clean_cache.h"
#include "client/grant_pool.h"
#include "client/inode_table.h"
#include "client/lease_cache.h"
#include "client/listing_prefetch.h"
#include "client/meta_client.h"
#include "client/name_cache.h"
#include "client/ns_grants.h"
#include "client/open_handles.h"
#include "client/read_ahead.h"
#include "client/rpc_client.h"
#include "client/session.h"
#include "client/write_cache.h"
#include "client/xattr_cache.h"
#include "common/metrics.h"
#include "proto/grantfs.pb.h"

namespace grantfs {

struct FileSystemOptions {
  // Name shown in the server's session list (host and mount point).
  std::string client_name;
  // The directory the mount shows as its root (`SERVERS:/PATH`): "/" or a
  // normalized path (common/names.h).
  std::string root_path = "/";
  // How long Start() waits for a server to open the session; nullopt: as
  // long as any call (RpcClientOptions::retry_for).
  std::optional<absl::Duration> mount_wait;
  // Largest read or write sent in one request.
  uint32_t max_io_bytes = 1 << 20;
  // Fastwrite (grants + write cache) or one RPC per write.
  bool fastwrite = true;
  WriteCacheOptions cache;
  GrantPoolOptions grants;
  // Read-ahead of sequential readers; window_bytes 0 turns it off. Its
  // extent size is max_io_bytes.
  ReadAheadOptions readahead;
  // Metadata leases (client/lease_cache.h): names and attributes answered
  // here while leased. False: every lookup, getattr and readdir asks the
  // server, and the kernel caches for its own timeouts.
  bool leases = true;
  // Namespace grants (client/ns_grants.h, docs/namespace-grants.md): creates
  // and removals in directories this mount made answered here and sent to
  // the server as a log. Needs leases.
  bool ns_grants = false;
  NsGrantsOptions ns;
  // Bytes of acknowledged small writes kept to answer re-reads
  // (client/clean_cache.h); with fastwrite and leases only. 0: none.
  uint64_t clean_cache_bytes = 16ull << 20;
  // Listings read ahead of a directory walk (client/listing_prefetch.h);
  // with leases only. window 0: none.
  ListingPrefetchOptions listing_prefetch;
  // How long statfs's counts are answered without a call
  // (client/statfs_cache.h). Zero: every statfs is a call.
  absl::Duration statfs_max_age = absl::ZeroDuration();
};

class FileSystem {
 public:
  FileSystem(const FileSystemOptions& options, std::unique_ptr<RpcClient> rpc);
  ~FileSystem();

  // Opens the session, then starts heartbeats and (if `invalidator` is not
  // null) the invalidation stream (Session). `invalidator` must outlive
  // Stop().
  absl::Status Start(Invalidator* invalidator);
  // Stops the threads and closes the session. Idempotent.
  void Stop();

  InodeTable& inodes() { return inodes_; }
  // The inode the mount shows as its root (the kernel's node 1): the
  // volume's root, or what FileSystemOptions::root_path named when the
  // session opened.
  uint64_t root_ino() const { return root_ino_.load(std::memory_order_relaxed); }
  // The kernel dropped `n` references to `ino` (FUSE forget). True when it
  // holds none any more (it forgot the inode, and its cached pages).
  bool Forget(uint64_t ino, uint64_t n) {
    if (inodes_.Forget(ino, n) != 0) return false;
    names_.ForgetInode(ino);
    return true;
  }
  RpcClient& rpc() { return *rpc_; }
  // Null when read-ahead is off.
  ReadAhead* read_ahead() { return ra_.get(); }
  CleanCache* clean_cache() { return clean_.get(); }
  // Reads answered from kept acknowledged bytes, no call (CleanCache).
  uint64_t reads_kept() const { return reads_kept_.load(std::memory_order_relaxed); }
  // Null when leases are off.
  LeaseCache* leases() { return leases_.get(); }
  // Null when namespace grants are off.
  NsGrants* ns_grants() { return ns_.get(); }
  // The whole listing of `dir` made by the mount alone, while it holds the
  // directory's grant (nobody else changes it): "." and "..", then every
  // name (the order is the mount's), cookies 1, 2, 3, ...; each entry's
  // attributes hold only its inode number and mode. Only for a caller who
  // owns the directory and may read it by the owner bits (the server's
  // check, certain to pass). nullopt when any of that is not known here.
  std::optional<proto::ReadDirReply> LocalListing(const Creds& c, uint64_t dir);
  // What the cache, the grant and the kernel hold now, as metrics
  // (client/mount_metrics.cc, docs/metrics.md).
  void WriteMetrics(MetricsText* out);
  // How long the kernel may keep `attr`, which it is handed now: what is
  // left of its lease when these are the leased attributes (0 otherwise:
  // an older copy may have come back after a change). Leases off, or the
  // inode recalled too often (LeaseCache::FallBack): -1 (the mount's own
  // timeout applies).
  double AttrTimeout(const proto::Attr& attr);
  // Whether the kernel may cache names in `parent` for the mount's entry
  // timeout, as without leases: always without leases; with leases only
  // while the directory is recalled too often (LeaseCache::FallBack) and
  // not leased (fuse_ops.cc EntryTimeout says what happens otherwise).
  bool KernelKeepsName(uint64_t parent);
  // Seconds left of the lease on the names of `dir` (0: none held).
  double NameLeaseLeft(uint64_t dir);

  absl::StatusOr<proto::Attr> Lookup(const Creds& c, uint64_t parent, const std::string& name);
  // A program (`c`) starts reading `dir`'s listing from its start: the
  // listings a walk will want next are read ahead (client/listing_prefetch.h).
  void ReadingDir(const Creds& c, uint64_t dir);
  // Before the reply to a lookup in `parent` that found a directory the
  // kernel already holds: the kernel's names dropped by other nodes'
  // changes so far are gone from it, waited for at most `timeout`
  // (Session::AwaitEntryDrops). Else the kernel may still hold the
  // directory under the name it was moved from, and fail the lookup with
  // ESTALE when that name's directory is busy (client/fuse_ops.cc,
  // OpLookup). True when they are.
  bool AwaitKernelNameDrops(uint64_t parent, absl::Duration timeout);
  absl::StatusOr<proto::Attr> GetAttr(const Creds& c, uint64_t ino);
  // `req.ino` and `req.valid` say what to change.
  absl::StatusOr<proto::Attr> SetAttr(const Creds& c, proto::SetAttrRequest req);
  // `created` (may be null): whether this call made the inode (false when
  // a non-exclusive create found the name).
  absl::StatusOr<proto::Attr> MkNod(const Creds& c, uint64_t parent, const std::string& name,
                                    uint32_t mode, uint64_t rdev, uint32_t umask, bool exclusive,
                                    bool* created = nullptr);
  absl::StatusOr<proto::Attr> Symlink(const Creds& c, uint64_t parent, const std::string& name,
                                      const std::string& target);
  absl::StatusOr<proto::Attr> Link(const Creds& c, uint64_t ino, uint64_t new_parent,
                                   const std::string& new_name);
  absl::Status Remove(const Creds& c, uint64_t parent, const std::string& name, bool is_dir);
  absl::Status Rename(const Creds& c, uint64_t parent, const std::string& name, uint64_t new_parent,
                      const std::string& new_name, uint32_t flags);
  absl::StatusOr<std::string> ReadLink(const Creds& c, uint64_t ino);
  // Entries after `cookie`. A readdirplus that hands the kernel an entry
  // says so with HandedToKernel (a plain readdir hands it none).
  absl::StatusOr<proto::ReadDirReply> ReadDir(const Creds& c, uint64_t ino, uint64_t cookie,
                                              uint32_t max_entries);
  // The kernel was handed `name` in `parent` as `ino` (client/name_cache.h).
  void HandedToKernel(uint64_t parent, const std::string& name, uint64_t ino) {
    names_.Set(parent, name, ino);
  }

  // `handle` gets this open's id, unique in the mount: Release names it, and
  // the server counts a resent Open or Release with it once.
  // open(O_CREAT): makes the regular file `name` (or finds it, without
  // O_EXCL) and opens it with `flags`, as one step for the caller: when
  // another node removes or replaces the name between the two, it tries
  // again (a few times), as a local file system would never fail there.
  absl::StatusOr<proto::Attr> Create(const Creds& c, uint64_t parent, const std::string& name,
                                     uint32_t mode, uint32_t umask, uint32_t flags,
                                     uint64_t* handle);
  // `created`: the open of an open(O_CREAT) whose MkNod made the file (no
  // permission check, as in POSIX).
  absl::StatusOr<proto::Attr> Open(const Creds& c, uint64_t ino, uint32_t flags, uint64_t* handle,
                                   bool created = false);
  absl::Status Release(uint64_t ino, uint64_t handle);
  absl::StatusOr<std::string> Read(const Creds& c, uint64_t ino, uint64_t offset, size_t size);
  // Returns the bytes written (all of them, or an error).
  absl::StatusOr<size_t> Write(const Creds& c, uint64_t ino, uint64_t offset, const char* data,
                               size_t size);
  // Waits until this mount's cached writes of `ino` are on the server
  // (close-to-open: what one node has closed, the next open elsewhere sees).
  absl::Status Flush(uint64_t ino);
  // close(2) of `ino`: Flush, except for a file made here in a directory
  // granted here (NsGrants::DeferClose), whose data goes later (by age,
  // fsync, or before anyone else can open it: the grant's recall).
  absl::Status Close(uint64_t ino);
  absl::Status Fsync(const Creds& c, uint64_t ino);
  // fsync of a directory: what this mount did in it (the namespace log) is
  // durable and replicated when it returns, and so are the contents of the
  // files in it whose close did not wait for them (NsGrants::SyncDir).
  absl::Status FsyncDir(uint64_t ino);
  absl::Status Fallocate(const Creds& c, uint64_t ino, uint32_t mode, uint64_t offset,
                         uint64_t length);
  absl::StatusOr<proto::StatFsReply> StatFs(const Creds& c);

  absl::Status SetXattr(const Creds& c, uint64_t ino, const std::string& name,
                        const std::string& value, uint32_t flags);
  absl::StatusOr<std::string> GetXattr(const Creds& c, uint64_t ino, const std::string& name);
  // Drops what this mount remembers of `ino`'s xattrs (changed elsewhere).
  void ForgetXattrs(uint64_t ino) { xattrs_.Forget(ino); }
  absl::StatusOr<std::vector<std::string>> ListXattr(const Creds& c, uint64_t ino);
  absl::Status RemoveXattr(const Creds& c, uint64_t ino, const std::string& name);

  // Locks held for `owner` on the server. `range.type`: F_RDLCK, F_WRLCK,
  // F_UNLCK. With `wait`, a conflicting lock is polled until it is free or
  // `interrupted()` says the caller gave up (then EINTR).
  absl::StatusOr<proto::LockRange> GetLock(const Creds& c, uint64_t ino, uint64_t owner,
                                           const proto::LockRange& range);
  absl::Status SetLock(const Creds& c, uint64_t ino, uint64_t owner, bool flock,
                       const proto::LockRange& range, bool wait,
                       const std::function<bool()>& interrupted);

 private:
  // A page of `dir`'s listing from `cookie`, read by the walk or ahead of
  // it: its subdirectories go to the read-ahead (ListingPrefetch::Saw).
  void SawListing(uint64_t dir, uint64_t cookie, const proto::ReadDirReply& page);
  // Reads `dir`'s listing from its start through ReadDirPage (leasing it,
  // as a walk would), at most 4 pages of 1024 entries.
  absl::Status ReadWholeListing(const Creds& c, uint64_t dir);
  // ReadDir but for the wait for a read-ahead of the same listing;
  // `retry_for` as MetaClient::ReadDir's.
  absl::StatusOr<proto::ReadDirReply> ReadDirPage(
      const Creds& c, uint64_t ino, uint64_t cookie, uint32_t max_entries,
      std::optional<absl::Duration> retry_for = std::nullopt);
  // Reads from the server, one RPC per max_io_bytes.
  absl::StatusOr<std::string> ReadRpc(const Creds& c, uint64_t ino, uint64_t offset, size_t size);
  // One read-ahead fetch: a single attempt that Stop() cancels.
  absl::StatusOr<std::string> PrefetchRpc(uint64_t ino, uint64_t offset, size_t size);
  // The data of `ino` changed (here or elsewhere): nothing fetched before
  // is served any more.
  void DataChanged(uint64_t ino) {
    if (ra_) ra_->Invalidate(ino);
    if (clean_) clean_->Drop(ino);
    if (leases_) leases_->AttrChanged(ino);
  }
  // The inode `name` in `parent` is, as far as this mount knows (0: not
  // known).
  uint64_t KnownIno(uint64_t parent, const std::string& name);
  // Leased attributes of `ino`, patched with its cached writes.
  std::optional<proto::Attr> CachedAttr(uint64_t ino);
  // Keeps the attributes a reply leased (LeaseCache::PutAttr), unpatched,
  // when no flush of the file was acknowledged while it was out (`fetch`).
  // Remembers what a reply said was not leased for being recalled too
  // often (LeaseCache::FallBack); 0: none.
  void NoteHot(const LeaseBits& bits, uint64_t parent, uint64_t ino);
  // After a call changed `dir`: when it is granted here, its attributes
  // are read again (NsGrants makes changes only in a directory whose
  // attributes are leased here).
  void KeepGrantedDir(const Creds& c, uint64_t dir);
  // After a call changed the names of `dir`: KeepGrantedDir, and when the
  // directory is the caller's and not granted here, its grant is asked
  // for when NsGrants::WantDirGrant says so (with its whole listing).
  void ChangedNamesIn(const Creds& c, uint64_t dir);
  void KeepAttr(const LeaseCache::Ticket& t, const WriteCache::AttrFetch& fetch,
                const proto::Attr& attr, bool own = false);
  // The answer to the write entry NsGrants::LogWrite took for the write
  // cache's extent `key` of `ino` at `offset`: settles it there.
  void LoggedWrite(uint64_t ino, uint64_t offset, const std::string* key, CleanCache::Token token,
                   std::shared_ptr<const std::string> kept, absl::StatusOr<proto::WriteReply> sent);
  // `ino` lost its last name in the namespace log: data cached for a close
  // that did not wait is dropped, unless the file is still open here.
  void Gone(uint64_t ino);
  absl::StatusOr<size_t> WriteThrough(const Creds& c, uint64_t ino, uint64_t offset,
                                      const char* data, size_t size);

  const FileSystemOptions options_;
  const std::unique_ptr<RpcClient> rpc_;
  MetaClient meta_;  // every RPC of the mount, through rpc_
  InodeTable inodes_;
  NameCache names_;                     // what the kernel was told each name is
  XattrCache xattrs_;                   // absent security.capability, for a second
  std::unique_ptr<LeaseCache> leases_;  // null when leases are off
  std::unique_ptr<NsGrants> ns_;        // null when namespace grants are off
  // The server's largest file size (OpenSession); 1 TiB until it says.
  std::atomic<uint64_t> max_file_size_{uint64_t{1} << 40};
  std::atomic<uint64_t> root_ino_{1};  // set once, by Start
  // Open handles: what a reclaim names (Session), given out by Open.
  OpenHandleTable handles_;
  std::unique_ptr<GrantPool> pool_;    // fastwrite only
  std::unique_ptr<WriteCache> cache_;  // fastwrite only
  std::unique_ptr<CleanCache> clean_;  // fastwrite with leases only
  std::atomic<uint64_t> reads_kept_{0};

  // Lock order of the mount. Every lock of the client is a leaf (nothing
  // else is taken while it is held; none is held across an RPC, a wait for
  // the server, or a call into another of these objects), except:
  //   WriteCache::mu_ before GrantPool::mu_ (a flush acknowledged settles
  //   its debit under the cache's lock) and before WriteCache::Spares::mu
  //   (an extent's buffer is taken or given back under it); write_cache.h.
  //   Both are leaves. They are in other objects, so no
  //   ABSL_ACQUIRED_BEFORE can name them: the order is written here.
  //   FuseAdapter::mu_ before InodeTable's (FuseAdapter::Forgotten
  //   counts the kernel's references under it).
  //   NsGrants::mu_ before WriteCache::mu_ (a deferred close counts and
  //   seals the file's cached bytes under it: NsGrants::DataHooks), and
  //   before LeaseCache's, NsLog's and OpenHandleTable's.
  //   No lock is held when a namespace log batch's answers to its write
  //   entries settle them (NsGrants::Send -> LoggedWrite -> WriteCache::
  //   Settle, LeaseCache, CleanCache, MetaClient::NoteWritten), on the
  //   thread sending the batch: none of these applies or waits for the
  //   log, which that thread is sending. WriteCache calls its hurry (which
  //   sends the log) with its own lock let go.
  // The leaves: mu_ here; Session::mu_ (RpcClient's failover hook takes it,
  // and RpcClient calls the hook with no lock held); OpenHandleTable::mu_
  // (a reclaim waits on it, released); XattrCache::mu_; NameCache's and
  // InodeTable's; ReadAhead's (its fetches, PrefetchRpc, run outside it).
  // So FileSystem takes mu_ only around its own fields.
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // Read-ahead RPCs in flight, cancelled by Stop().
  absl::flat_hash_set<grpc::ClientContext*> prefetch_ctx_ ABSL_GUARDED_BY(mu_);
  // Declared last: destroyed (its pool joined) before what its fetches use.
  std::unique_ptr<ReadAhead> ra_;              // null when off
  std::unique_ptr<ListingPrefetch> prefetch_;  // null when off
  // Holds pointers to the above; its threads end in Stop().
  std::unique_ptr<Session> session_;
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_FILESYSTEM_H_
