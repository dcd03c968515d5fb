// The client's write-back cache (fastwrite). write() copies its bytes into
// an extent here and returns; flusher threads send extents to the server in
// the background, several at once, coalesced up to `extent_bytes`.
//
// Space: every byte cached has been debited from the GrantPool first (the
// blocks it may newly allocate), so the server can always store it: a
// flush never fails for lack of space. When the pool cannot cover a write,
// Write() says so and the caller writes through instead.
//
// Order: extents of one inode are kept in write order; an extent is only
// sent when no older extent sharing a 4 KiB block with it is still
// unacknowledged, so the server applies overlapping writes in the order they
// were made and charges each newly allocated block to the extent that was
// debited for it.
//
// Memory: cached bytes never exceed `dirty_limit`; a writer above it waits
// for flushes (it does not fail and memory does not grow).
//
// Thread-safe. Lock order: mu_ before the GrantPool's lock (the pool is
// called outside mu_ for debits that may wait), and mu_ before Spares::mu
// (an extent is made or dropped under mu_); the mount's whole order is in
// filesystem.h.
#ifndef GRANTFS_CLIENT_WRITE_CACHE_H_
#define GRANTFS_CLIENT_WRITE_CACHE_H_

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/grant_pool.h"
#include "common/clock.h"
#include "proto/grantfs.pb.h"

namespace grantfs {

struct WriteCacheOptions {
  // Most bytes held in the cache (dirty and in flight). Default 256 MiB.
  uint64_t dirty_limit = 256ull << 20;
  // An extent is sent once it holds this much (at most 8 MiB). Default 4 MiB.
  uint64_t extent_bytes = 4ull << 20;
  // ... or once its oldest byte is this old.
  absl::Duration max_age = absl::Seconds(5);
  // Flusher threads sending in parallel.
  int flushers = 4;
  // Flow control: the server's in-flight credit in bytes (0 = unknown, no
  // limit). Flushers keep the bytes of unacknowledged extents within it,
  // except that one extent may always be in flight. Null = no limit.
  std::function<uint64_t()> credit;
  // Called, outside the cache's lock, before a flush waits for an extent
  // its FlushRpc handed elsewhere (FlushResult.later): sends what holds
  // it, and returns once it was answered (Settle called) or with the error
  // that kept it from going. Null: such waits take as long as the other
  // sender does.
  std::function<absl::Status(uint64_t ino)> hurry;
  Clock* clock = Clock::Real();
};

class WriteCache {
 public:
  // What the server said about a flushed extent.
  struct FlushResult {
    uint64_t grant_used = 0;  // bytes of the session's grant it consumed
    // The file on the server right after the write (0: not known).
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    // The extent was handed to another sender (the namespace log's next
    // batch, client/ns_grants.h): it stays in flight, and counts as sent
    // for flow control, until Settle() gives its outcome.
    bool later = false;
  };
  // The time a flush gives the file (WriteRequest.time_ns, keep_times):
  // when its latest cached write was made, or `keep` when its times were
  // set after that (TimesSet): the flush must leave them.
  struct WriteTime {
    int64_t ns = 0;
    bool keep = false;
  };
  // Sends one extent. `data` is never changed once it was handed to a
  // FlushRpc (an extent whose flush failed is sealed), so the RPC may keep
  // a reference to it past its return (gRPC does, until the bytes are on
  // the socket).
  using FlushRpc = std::function<absl::StatusOr<FlushResult>(
      uint64_t ino, uint64_t offset, std::shared_ptr<const std::string> data, WriteTime time)>;

  // `pool` must outlive the cache.
  WriteCache(const WriteCacheOptions& options, GrantPool* pool, FlushRpc flush);
  ~WriteCache();

  void Start();
  // Stops the flushers; call FlushAll() first to keep the data. Idempotent.
  void Stop();

  // Caches [offset, offset + size) of `ino`. Returns false, caching nothing,
  // when the grant pool cannot cover the bytes (the caller writes through,
  // after FlushInode). Waits while the cache is full.
  // `stamped` (may be null): the time the write was stamped with (the
  // time its flush gives the file, WriteTime).
  bool Write(uint64_t ino, uint64_t offset, const char* data, size_t size,
             int64_t* stamped = nullptr);

  // Waits until every byte of `ino` cached before the call is acknowledged
  // by the server, or until a flush of some of them failed after the call
  // began and no other flush of the file is in flight. Returns OK only when
  // all of them are on the server. On error, data that may yet be stored
  // (the server unreachable, EIO, ENOSPC) stays cached and is retried, so a
  // later call waits for the retry and says how it went; data the server
  // refused for good (the file is gone, EFBIG, EINVAL: IsPermanentFlushError)
  // is dropped with one log line naming the file, and that error is
  // returned once, to the next call for the file.
  absl::Status FlushInode(uint64_t ino);
  // The same for every inode.
  absl::Status FlushAll();
  // The same for `ids`, sent in parallel. Without `report_dropped`, data
  // the server refused for good is not reported here (it stays to be
  // reported to the next FlushInode of the file: a recall or fsyncdir
  // sends data it does not own the errors of).
  absl::Status FlushInodes(const std::vector<uint64_t>& ids, bool report_dropped);
  // The outcome of an extent of `ino` whose FlushRpc answered `later`
  // (`data`: the pointer its FlushRpc got), settled as if its FlushRpc had
  // returned `result` now (result.later must be false). Nothing when no
  // such extent is in flight.
  void Settle(uint64_t ino, const std::string* data, absl::StatusOr<FlushResult> result)
      ABSL_LOCKS_EXCLUDED(mu_);
  // FlushInodes, with the files' extents sent from the calling thread, one
  // at a time in order (the flushers may all be held up by the server),
  // then what the flushers had in flight waited for. A failed send is
  // not retried here (the flushers retry it): its error is returned.
  absl::Status FlushNow(const std::vector<uint64_t>& ids, bool report_dropped);

  // The file's times are being set (at the mount, in its namespace log)
  // after its cached writes: their flushes from now on leave the times
  // alone, and attributes are no longer patched with the writes' time; a
  // later write undoes it. Waits for flushes of the file already on the
  // way (they carry the writes' time and must land before the setattr).
  void TimesSet(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // The file lost its last name (an unlink in the namespace log, sent
  // later): the server refusing its flushes is expected, and not reported.
  // With no open left (`still_open` false) its cached bytes are dropped
  // unsent, their debit refunded; an open one keeps them (it may read
  // them, and the server keeps the file until its close).
  void Discard(uint64_t ino, bool still_open) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether Discard marked `ino` gone (its bytes still cached).
  bool Discarded(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // The last open of a file Discard found open was released: its bytes
  // are dropped now.
  void Released(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes of `ino` cached (not yet acknowledged).
  uint64_t CachedBytes(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // Sends `ino`'s cached bytes soon, without waiting (a close that does
  // not wait for them).
  void Seal(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether the server refused a flush in a way no retry can change.
  static bool IsPermanentFlushError(const absl::Status& s);

  // One line per file still holding unflushed bytes (unmount logs them).
  std::vector<std::string> DescribeDirty();

  // Read-your-writes, in two steps around the server read: Snapshot copies
  // the cached bytes overlapping [offset, offset + size) and the file's
  // cached end; Apply lays them over what the server returned. The server
  // has not seen cached writes, so its data may stop short: Apply extends it
  // with zeros up to the cached end (a hole below a cached write past the
  // server's end of file reads as zeros, not as end of file).
  struct Piece {
    uint64_t offset;
    std::string data;
  };
  struct Overlay {
    std::vector<Piece> pieces;  // oldest first: later ones win
    uint64_t end = 0;           // end of the file's cached writes; 0: none cached
    bool empty() const { return end == 0; }
  };
  Overlay Snapshot(uint64_t ino, uint64_t offset, size_t size);
  static void Apply(const Overlay& overlay, uint64_t offset, size_t size, std::string* data);
  // Whether the overlay's pieces hold every byte of [offset, end).
  static bool Covers(const Overlay& overlay, uint64_t offset, uint64_t end);

  // Makes attributes from the server reflect cached writes (size, mtime).
  void PatchAttr(proto::Attr* attr) ABSL_LOCKS_EXCLUDED(mu_);

  // Attributes fetched from the server while flushes complete: a reply
  // the server computed before a flush landed, read after the flush left
  // the cache, would make the size go backwards (and the kernel drop pages
  // and misplace O_APPEND writes). An AttrFetch spans the RPC: its Patch
  // also raises an attribute to what any flush acknowledged since the
  // fetch began said the file was, when the reply is not newer (by the
  // server's ctime: equal counts, since a flush landing after a later
  // change leaves ctime as it was) than that flush. `cache` may be null.
  class AttrFetch {
   public:
    explicit AttrFetch(WriteCache* cache);
    ~AttrFetch();
    AttrFetch(const AttrFetch&) = delete;
    AttrFetch& operator=(const AttrFetch&) = delete;
    void Patch(proto::Attr* attr);
    // A flush of `ino` was acknowledged since the fetch began (the server's
    // attributes of it may be older than that flush). False without a cache.
    bool Acked(uint64_t ino) const;

   private:
    WriteCache* const cache_;
    uint64_t since_ = 0;  // acknowledgements numbered above this are newer
  };

  uint64_t dirty_bytes();
  // Since the cache started: bytes the server acknowledged, and writes that
  // waited for room (the dirty limit); and writers waiting now.
  struct Counters {
    uint64_t flushed_bytes = 0;
    uint64_t waiting_writers = 0;
    uint64_t throttled_writes = 0;
  };
  Counters counters() ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes of idle extent buffers kept for reuse (at most
  // min(dirty_limit / 8, 64 MiB)).
  uint64_t spare_bytes();
  // Extents being written to the server now, and the most there were at once.
  int in_flight();
  int peak_in_flight();
  size_t extent_count(uint64_t ino);

 private:
  struct Extent {
    uint64_t offset = 0;
    std::string data;
    uint64_t debit = 0;  // bytes debited from the pool for it
    absl::Time born;
    bool flushing = false;
    bool handed = false;    // flushing, its FlushRpc answered `later`: waits for Settle
    uint64_t handoffs = 0;  // times it was handed
    // A Settle that came before its FlushRpc returned `later`.
    std::optional<absl::StatusOr<FlushResult>> early;
    bool sealed = false;
    uint64_t failures = 0;    // flush attempts that failed
    absl::Status last_error;  // of the latest failed attempt
    uint64_t end() const { return offset + data.size(); }
  };
  struct Inode {
    std::list<std::shared_ptr<Extent>> extents;  // oldest first
    int64_t mtime_ns = 0;                        // time of the last cached write
    bool times_set = false;                      // TimesSet since that write
    bool discarded = false;                      // Discard: refusals are expected
    int urgent = 0;                              // FlushInode callers waiting
    absl::Status dropped;                        // data refused for good, not yet reported
  };
  // The hand-offs one flush has hurried already (WriteCacheOptions.hurry):
  // each is hurried once; an extent handed again is due again.
  class Hurried {
   public:
    bool Due(const Extent& e) const {
      auto h = seen_.find(&e);
      return e.handed && (h == seen_.end() || h->second != e.handoffs);
    }
    void Mark(const Extent& e) {
      if (e.handed) seen_[&e] = e.handoffs;
    }

   private:
    std::map<const Extent*, uint64_t> seen_;
  };

  // End of the bytes still cached (not yet acknowledged) of `inode`; 0 when
  // none. Acknowledged bytes are in the server's size.
  static uint64_t CachedEnd(const Inode& inode);
  // FlushInodes (`here`: FlushNow).
  absl::Status FlushMany(const std::vector<uint64_t>& ids, bool report_dropped, bool here)
      ABSL_LOCKS_EXCLUDED(mu_);
  // FlushInode with mu_ held (released while it waits).
  absl::Status FlushLocked(uint64_t ino, bool report_dropped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the file's cached bytes not in flight, refunding their debit.
  void DiscardLocked(std::map<uint64_t, Inode>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PatchAttr with mu_ held (AttrFetch::Patch does both looks under one lock).
  void PatchAttrLocked(proto::Attr* attr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Write() for at most one extent's worth of bytes.
  bool WritePiece(uint64_t ino, uint64_t offset, const char* data, size_t size, int64_t* stamped);
  // Bytes of [offset, offset + size) rounded to blocks that no cached
  // extent of `inode` has debited already. REQUIRES: mu_.
  uint64_t NewBlockBytes(const Inode& inode, uint64_t offset, size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Extent to send next, or null. REQUIRES: mu_.
  std::shared_ptr<Extent> PickLocked(uint64_t* ino) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Sendable(const Inode& inode, const Extent& e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlusherLoop();
  // Sends `e` (not flushing, sendable) after `backoff`, and settles the
  // outcome; mu_ is released meanwhile. False when it failed and is kept
  // for a retry.
  bool SendLocked(uint64_t ino, const std::shared_ptr<Extent>& e, absl::Duration backoff)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Settles handed extent `e` with `r` (ABORTED: not stored, sent again).
  bool SettleHanded(uint64_t ino, const std::shared_ptr<Extent>& e,
                    const absl::StatusOr<FlushResult>& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SendLocked's settling of `e`'s FlushRpc outcome `r` (not `later`).
  bool SettleLocked(uint64_t ino, const std::shared_ptr<Extent>& e,
                    const absl::StatusOr<FlushResult>& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Buffers of streaming extents, kept for the next extent after a flush:
  // a buffer the allocator hands back to the kernel has to be faulted in
  // and zeroed again, page by page. Shared with the extents (an extent may
  // outlive the cache while gRPC holds its bytes).
  struct Spares {
    absl::Mutex mu;  // taken after WriteCache::mu_, or alone; a leaf
    std::vector<std::string> buffers ABSL_GUARDED_BY(mu);
    size_t max_buffers = 0;
    size_t buffer_bytes = 0;
  };
  // A new extent, whose buffer goes back to spares_ when it is destroyed.
  std::shared_ptr<Extent> NewExtent(bool streaming);

  const WriteCacheOptions options_;
  GrantPool* const pool_;
  const FlushRpc flush_;
  const std::shared_ptr<Spares> spares_;

  // What the latest acknowledged flush of a file said it was, kept while an
  // AttrFetch that began before it is in flight.
  struct Ack {
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    uint64_t seq = 0;
  };

  absl::Mutex mu_;
  uint64_t ack_seq_ ABSL_GUARDED_BY(mu_) = 0;             // acknowledgements so far
  std::multiset<uint64_t> fetches_ ABSL_GUARDED_BY(mu_);  // ack_seq_ at each fetch's start
  std::map<uint64_t, Ack> acks_ ABSL_GUARDED_BY(mu_);     // by inode
  std::map<uint64_t, Inode> inodes_ ABSL_GUARDED_BY(mu_);
  uint64_t dirty_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t flushed_bytes_ ABSL_GUARDED_BY(mu_) = 0;     // Counters
  uint64_t waiting_writers_ ABSL_GUARDED_BY(mu_) = 0;   // Counters
  uint64_t throttled_writes_ ABSL_GUARDED_BY(mu_) = 0;  // Counters
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t in_flight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int peak_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // What PickLocked looks at without a scan of every file: files someone
  // waits on (urgent > 0), files where an extent may have become due
  // (sealed, full, an acknowledgement or failure of one of its flushes).
  // Every file is scanned only when maybe_ready_ (at the start), under
  // pressure or stop, or from next_due_ on (the earliest time a cached
  // extent comes of age); a scan that finds nothing resets these.
  absl::flat_hash_set<uint64_t> urgent_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> recheck_ ABSL_GUARDED_BY(mu_);
  bool maybe_ready_ ABSL_GUARDED_BY(mu_) = true;
  absl::Time next_due_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::vector<std::thread> flushers_;
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_WRITE_CACHE_H_
