// What this mount wrote and the server acknowledged, kept to answer a
// re-read without a call (the clean half of the write cache, which forgets
// an extent at its ack).
//
// The kernel keeps only the whole pages a write filled; a program that
// writes a small file and reads it back (dbench, a compiler's object files
// read by the linker) asks the mount for the partial last page, or for all
// of it after an open that dropped the kernel's pages. Each was a Read call
// after the flush.
//
// A kept extent is served only while nothing else can have changed those
// bytes:
//   - the mount holds the file's attribute lease, unbroken since before the
//     flush was sent: LeaseCache::DataStamp, quoted when the flush starts
//     (Begin) and compared at each read; a write on another node recalls the
//     lease first, and a failed flush (DataUnsure) changes it too;
//   - no change of the file's data made here without the cache (a size
//     change, a write through, fallocate, open(O_TRUNC)) came after Begin:
//     each calls Drop, which also refuses the Puts of flushes begun before.
// Only extents of at most kMaxPiece bytes are kept, in at most max_bytes
// (oldest dropped first): the data is shared with the write cache's extent,
// not copied (unless its buffer is much larger). A newer piece cuts the
// older ones it overlaps.
//
// Thread-safe: one mutex, held only over the maps.
#ifndef GRANTFS_CLIENT_CLEAN_CACHE_H_
#define GRANTFS_CLIENT_CLEAN_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "client/write_cache.h"

namespace grantfs {

class CleanCache {
 public:
  // Larger extents are not kept (a streaming writer would only churn).
  static constexpr size_t kMaxPiece = 1 << 20;

  explicit CleanCache(uint64_t max_bytes) : max_bytes_(max_bytes) {}
  CleanCache(const CleanCache&) = delete;
  CleanCache& operator=(const CleanCache&) = delete;

  // Quoted by the Put of a flush; taken before the flush is sent.
  struct Token {
    uint64_t gen = 0;
    uint64_t stamp = 0;  // LeaseCache::DataStamp then (0: not held)
  };
  Token Begin(uint64_t stamp) ABSL_LOCKS_EXCLUDED(mu_);
  // The server acknowledged `data` at `offset` of `ino` and said the file's
  // size is now `size`. Kept if the token still holds (no Drop since
  // Begin, the stamp non-zero and the one the file's kept bytes have) and
  // the piece is small enough; it cuts older kept bytes it overlaps.
  // Otherwise it is a Drop: the file's kept bytes go, and so does what any
  // flush begun before would keep (the sizes those answered could be older
  // than this one's).
  void Put(uint64_t ino, const Token& t, uint64_t offset, std::shared_ptr<const std::string> data,
           uint64_t size) ABSL_LOCKS_EXCLUDED(mu_);
  // The file's data changed here outside the write cache: nothing kept is
  // served, and flushes begun before keep nothing.
  void Drop(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);

  // What is kept of [offset, offset + size) of `ino`, if the mount's
  // DataStamp is still `stamp` (non-zero): pieces in `out` (end: the size
  // the server last said, at least), true. False when nothing is kept.
  bool Read(uint64_t ino, uint64_t stamp, uint64_t offset, size_t size, WriteCache::Overlay* out)
      ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t bytes() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Bytes [skip, skip + len) of `data`, at the offset that keys it.
  struct Piece {
    std::shared_ptr<const std::string> data;
    size_t skip = 0;
    size_t len = 0;
    size_t held = 0;  // counted in bytes_: the buffer's capacity
    std::list<std::pair<uint64_t, uint64_t>>::iterator lru;  // (ino, offset)
  };
  struct File {
    uint64_t stamp = 0;
    uint64_t size = 0;                 // the server's, at the last Put
    std::map<uint64_t, Piece> pieces;  // by offset, not overlapping
  };
  // Buffers let go under mu_, freed after it is released (the last
  // reference to a write cache extent takes the cache's spares lock).
  using Released = std::vector<std::shared_ptr<const std::string>>;
  // Keeps [skip, skip + len) of `data` at `offset` (newest in the LRU
  // order); copied out when it is under half of the buffer.
  void AddPieceLocked(uint64_t ino, File* f, uint64_t offset,
                      std::shared_ptr<const std::string> data, size_t skip, size_t len)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets one piece (the File stays, possibly empty); the next piece.
  std::map<uint64_t, Piece>::iterator ErasePieceLocked(File* f,
                                                       std::map<uint64_t, Piece>::iterator it,
                                                       Released* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the file and refuses the Puts of flushes begun before.
  void DropLocked(uint64_t ino, Released* released) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t max_bytes_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, File> files_ ABSL_GUARDED_BY(mu_);
  // Oldest first.
  std::list<std::pair<uint64_t, uint64_t>> lru_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Drop numbers: the last of each inode (bounded: when it grows past
  // kMaxDrops it is cleared and floor_ raised, which refuses every Put
  // begun before).
  static constexpr size_t kMaxDrops = 4096;
  uint64_t gen_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t floor_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, uint64_t> drops_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_CLEAN_CACHE_H_
