// File data on the server's local disk: each file's bytes are cut into
// fixed-size chunks (4 MiB by default), each chunk a sparse file
// `<dir>/<ino % 256 as two hex digits>/<ino>.<index>`. Inode numbers are never
// reused, so a chunk file name is never reused either.
//
// The chunk store knows nothing of sizes or allocation bookkeeping: the
// metadata store decides what is valid, this class only moves bytes.
// Large block-aligned writes bypass the page cache (O_DIRECT, see
// ChunkStoreOptions::direct_io): the mounts already cache what they write,
// and copying every byte once more into fresh page-cache memory was the
// largest CPU cost of a streaming write on the server. The kernel keeps
// direct and buffered I/O of one file coherent (a direct write first writes
// back and drops cached pages of its range), so reads and small writes stay
// buffered.
//
// Thread-safe: every call opens its own descriptors; callers order
// conflicting calls on one inode (server/volume.h holds the per-inode locks).
#ifndef GRANTFS_SERVER_CHUNK_STORE_H_
#define GRANTFS_SERVER_CHUNK_STORE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "checkpoint/change_sink.h"
#include "checkpoint/chunk_applier.h"
#include "common/env.h"

namespace grantfs {

struct ChunkStoreOptions {
  // Directory that holds the chunk files; created if missing. Required.
  std::string dir;
  // Bytes per chunk. Must be a multiple of 4096. Default 4 MiB.
  uint64_t chunk_size = 4 << 20;
  // Where every change goes to be replicated (checkpoint/change_sink.h);
  // nullptr: none. Not owned.
  ChangeSink* change_sink = nullptr;
  // Writes of whole 4 KiB blocks (offset and length) of at least
  // `direct_min_bytes` go to disk with O_DIRECT through an aligned bounce
  // buffer. If the file system refuses O_DIRECT (EINVAL), the store logs it
  // once and writes buffered from then on. Durability is unchanged: a
  // direct write is not durable until fdatasync either (device cache, block
  // allocation). Default on.
  bool direct_io = true;
  uint64_t direct_min_bytes = 256 << 10;
  // Every file-system call goes through it (common/env.h). Default: the
  // real file system. Not owned; outlives the store.
  Env* env = Env::Posix();
};

class ChunkStore : public ChunkApplier {
 public:
  static absl::StatusOr<std::unique_ptr<ChunkStore>> Create(const ChunkStoreOptions& options);
  ~ChunkStore() override;

  uint64_t chunk_size() const { return options_.chunk_size; }
  // Writes (pieces within one chunk) that went to disk with O_DIRECT.
  uint64_t direct_writes() const { return direct_writes_.load(std::memory_order_relaxed); }
  // fdatasync calls made (by writes with `sync` and by Sync).
  uint64_t syncs() const { return syncs_.load(std::memory_order_relaxed); }
  // False once the file system refused O_DIRECT (or direct_io was off).
  bool direct_io() const { return direct_ok_.load(std::memory_order_relaxed); }

  // Writes `size` bytes at `offset` of file `ino`. When `sync`, the data is
  // fdatasync'd before this returns. On failure (the OS error logged):
  // ENOSPC when the disk is full, EIO otherwise, and the write is undone in
  // every chunk it touched: each chunk file gets back the size it had (or
  // is removed when it was empty). Bytes within a chunk file's old size
  // that the write changed stay changed, as after any failed pwrite, and
  // are replicated as such.
  absl::Status Write(uint64_t ino, uint64_t offset, const char* data, size_t size, bool sync);

  // Reads exactly `size` bytes at `offset` into `out`; bytes never written
  // (holes, missing chunk files) read as zeros. The caller bounds the range
  // by the file size.
  absl::Status Read(uint64_t ino, uint64_t offset, size_t size, char* out);

  // fdatasyncs every existing chunk of `ino` below `size` bytes (and, with
  // a change sink, waits until the replica did the same).
  absl::Status Sync(uint64_t ino, uint64_t size);

  // ChunkApplier (not replicated): fdatasyncs the chunks that exist, and
  // fsyncs the directories of those that do not, once each.
  absl::Status SyncChunks(const ChunkSet& chunks) override;

  // ChunkApplier: a replica's copy applies the primary's data records.
  absl::Status ApplyRecord(const proto::ReplRecord& rec, ChunkSet* unsynced) override;

  // Reserves disk blocks for [offset, offset + length) (fallocate mode 0,
  // keeping chunk file sizes).
  absl::Status Allocate(uint64_t ino, uint64_t offset, uint64_t length);

  // Drops the bytes of `ino` at and past `new_size`: chunk files wholly past
  // it are deleted, the chunk holding it is cut, durably (directory fsync,
  // fdatasync) before this returns. `old_size` bounds the work.
  absl::Status Truncate(uint64_t ino, uint64_t new_size, uint64_t old_size);

  // Deletes chunk `index` of `ino`, if it exists.
  absl::Status RemoveChunk(uint64_t ino, uint64_t index);
  // Makes the deletions of chunk files of `inos` (RemoveChunk) durable: the
  // directory of each is fsync'd, once. Until then a crash may bring the
  // files back.
  absl::Status SyncRemovals(absl::Span<const uint64_t> inos);

  // Every chunk file in the store, as (inode, chunk index); names that are
  // not chunk files are skipped (fsck reports them).
  absl::StatusOr<std::vector<std::pair<uint64_t, uint64_t>>> ListChunkFiles();
  // Deletes chunk `index` of `ino` from this copy only (not replicated):
  // for a file only this copy has (server/orphan_chunks.h).
  absl::Status RemoveLocalChunk(uint64_t ino, uint64_t index) { return Unlink(ino, index); }

 private:
  explicit ChunkStore(const ChunkStoreOptions& options)
      : options_(options), direct_ok_(options.direct_io) {}
  std::string ChunkDir(uint64_t ino) const;  // where the chunk files of `ino` are
  std::string ChunkPath(uint64_t ino, uint64_t index) const;
  absl::Status Unlink(uint64_t ino, uint64_t index);
  // Writes one chunk's piece. A piece that fails (ENOSPC on a full disk,
  // EIO) is undone: the chunk file gets back the size it had (or is removed
  // when it was empty), so no byte of a write that was refused stays in it
  // (fsck: orphan_chunk_file; the space: counted nowhere). Called under the
  // chunk's order_mu_ stripe, so no other write of the chunk is under way.
  // *before: the chunk file's size before; *done: the bytes written.
  absl::Status WritePiece(uint64_t ino, uint64_t index, uint64_t within, const char* data, size_t n,
                          bool sync, uint64_t* before, size_t* done);
  // One chunk's part of a Write.
  struct Piece {
    uint64_t index;   // the chunk
    uint64_t within;  // offset in the chunk
    const char* data;
    size_t n;
    uint64_t before;  // the chunk file's size before the write
    size_t done;      // bytes written
  };
  // Undoes a piece that was written whole, because a later one failed.
  void UndoWritten(uint64_t ino, const Piece& piece);
  // The order_mu_ stripe of a chunk.
  size_t Stripe(uint64_t ino, uint64_t index) const;
  // The undo of a failed piece: `file` (open on `path`) back to `before`
  // bytes, removed when that is 0. Logs what it cannot do.
  void UndoPiece(File* file, const std::string& path, uint64_t before);
  // WritePiece with O_DIRECT. Sets *refused (and writes nothing) when the
  // file system does not take O_DIRECT.
  absl::Status WriteDirect(const std::string& path, uint64_t within, const char* data, size_t n,
                           bool sync, bool* refused, uint64_t* before, size_t* done);
  // What WritePiece and WriteDirect do once `file` is open: size, write,
  // sync, undo on failure. *before: the file's size before.
  absl::Status WriteOrUndo(File* file, const std::string& path, uint64_t within, const char* data,
                           size_t n, bool sync, uint64_t* before, size_t* done);
  // Opens `path` for writing (created if missing unless `create` is false).
  absl::StatusOr<std::unique_ptr<File>> OpenForWrite(const std::string& path, bool create,
                                                     bool direct = false);
  // Aligned bounce buffers of chunk_size bytes, reused (at most kKeepBuffers kept).
  char* TakeBuffer();
  void GiveBuffer(char* buf);
  void Replicate(proto::ReplRecord rec);

  const ChunkStoreOptions options_;
  // Held across a write of the chunk and the Append of its records to the
  // change sink, so that overlapping writes reach the replica in the order
  // they hit the disk and a failed write can be undone (Write).
  std::array<absl::Mutex, 256> order_mu_;

  std::atomic<bool> direct_ok_;
  std::atomic<uint64_t> direct_writes_{0};
  std::atomic<uint64_t> syncs_{0};
  // fdatasync of `file` (the chunk file `path`), counted. EIO on failure.
  absl::Status DataSync(File* file, const std::string& path);
  static constexpr size_t kKeepBuffers = 8;
  absl::Mutex buffers_mu_;
  std::vector<char*> buffers_ ABSL_GUARDED_BY(buffers_mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_CHUNK_STORE_H_
