#include "server/chunk_store.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/errno_status.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

// `s` is the failure of an Env call (its message names the call and the
// path).
absl::Status IoError(const absl::Status& s) {
  LOG(ERROR) << "chunk store: " << s.message();
  // ENOSPC from the local disk stays ENOSPC; everything else is EIO.
  const int err = ToErrno(s);
  if (err == ENOSPC || err == EIO) return s;
  return ErrnoStatus(EIO, std::string(s.message()));
}

// Offsets, lengths and memory of O_DIRECT I/O are aligned to this (the
// largest logical block size of the disks we meet).
constexpr uint64_t kDirectAlign = 4096;

// Writes all `n` bytes of `buf` at `offset` of `file`. Returns the status of
// the call that failed (EIO for a write of 0 bytes); *done counts the bytes
// written before.
absl::Status WriteAll(File* file, const std::string& path, const char* buf, size_t n,
                      uint64_t offset, size_t* done) {
  *done = 0;
  while (*done < n) {
    absl::StatusOr<size_t> w = file->Write(offset + *done, buf + *done, n - *done);
    if (!w.ok()) return w.status();
    if (*w == 0) return ErrnoStatus(EIO, absl::StrCat("pwrite ", path, " wrote nothing"));
    *done += *w;
  }
  return absl::OkStatus();
}

// Holds a set of the chunk store's order_mu_ stripes, taken in increasing
// order. The analysis cannot follow locks picked by index at run time; the
// stripes guard no annotated field (they order writes, see chunk_store.h).
class StripeLocks {
 public:
  StripeLocks(std::array<absl::Mutex, 256>* mu,
              std::vector<size_t> stripes) ABSL_NO_THREAD_SAFETY_ANALYSIS
      : mu_(mu),
        stripes_(std::move(stripes)) {
    std::sort(stripes_.begin(), stripes_.end());
    stripes_.erase(std::unique(stripes_.begin(), stripes_.end()), stripes_.end());
    for (size_t s : stripes_) (*mu_)[s].Lock();
  }
  ~StripeLocks() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (auto s = stripes_.rbegin(); s != stripes_.rend(); ++s) (*mu_)[*s].Unlock();
  }
  StripeLocks(const StripeLocks&) = delete;
  StripeLocks& operator=(const StripeLocks&) = delete;

 private:
  std::array<absl::Mutex, 256>* const mu_;
  std::vector<size_t> stripes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ChunkStore>> ChunkStore::Create(const ChunkStoreOptions& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("chunk dir is empty");
  if (options.chunk_size == 0 || options.chunk_size % 4096 != 0) {
    return absl::InvalidArgumentError("chunk_size must be a multiple of 4096");
  }
  if (options.env == nullptr) return absl::InvalidArgumentError("no env");
  if (absl::Status s = options.env->CreateDir(options.dir); !s.ok()) return IoError(s);
  for (int i = 0; i < 256; ++i) {
    absl::Status s = options.env->CreateDir(absl::StrFormat("%s/%02x", options.dir, i));
    if (!s.ok()) return IoError(s);
  }
  return std::unique_ptr<ChunkStore>(new ChunkStore(options));
}

ChunkStore::~ChunkStore() {
  absl::MutexLock l(&buffers_mu_);
  for (char* b : buffers_) free(b);
}

char* ChunkStore::TakeBuffer() {
  {
    absl::MutexLock l(&buffers_mu_);
    if (!buffers_.empty()) {
      char* b = buffers_.back();
      buffers_.pop_back();
      return b;
    }
  }
  return static_cast<char*>(aligned_alloc(kDirectAlign, options_.chunk_size));
}

void ChunkStore::GiveBuffer(char* buf) {
  absl::MutexLock l(&buffers_mu_);
  if (buffers_.size() < kKeepBuffers) {
    buffers_.push_back(buf);
  } else {
    free(buf);
  }
}

absl::StatusOr<std::unique_ptr<File>> ChunkStore::OpenForWrite(const std::string& path, bool create,
                                                               bool direct) {
  OpenOptions o;
  o.write = true;
  o.create = create;
  o.direct = direct;
  return options_.env->Open(path, o);
}

std::string ChunkStore::ChunkDir(uint64_t ino) const {
  return absl::StrFormat("%s/%02x", options_.dir, ino % 256);
}

std::string ChunkStore::ChunkPath(uint64_t ino, uint64_t index) const {
  return absl::StrFormat("%s/%d.%d", ChunkDir(ino), ino, index);
}

absl::Status ChunkStore::Write(uint64_t ino, uint64_t offset, const char* data, size_t size,
                               bool sync) {
  const uint64_t cs = options_.chunk_size;
  std::vector<Piece> pieces;
  for (uint64_t at = offset; at < offset + size;) {
    const uint64_t index = at / cs, within = at % cs;
    const size_t n = std::min<uint64_t>(offset + size - at, cs - within);
    pieces.push_back(Piece{index, within, data + (at - offset), n, 0, 0});
    at += n;
  }
  // Every chunk the write touches stays locked until its records are handed
  // to the replica, so that overlapping writes reach the replica in the
  // order they hit the disk and a failed piece undoes the earlier ones
  // before anyone sees them. Stripes are taken in increasing order (no
  // deadlock between two writes over the same chunks).
  std::vector<size_t> stripes;
  for (const Piece& p : pieces) stripes.push_back(Stripe(ino, p.index));
  StripeLocks locked(&order_mu_, std::move(stripes));
  absl::Status st;
  size_t written = 0;  // pieces wholly written
  for (; written < pieces.size(); ++written) {
    Piece& p = pieces[written];
    st = WritePiece(ino, p.index, p.within, p.data, p.n, sync, &p.before, &p.done);
    if (!st.ok()) break;
  }
  if (!st.ok()) {
    // The failed piece was undone; the earlier ones are undone here, and
    // what stays changed of them all (bytes within a chunk file's old size,
    // as after any failed pwrite) is replicated, so both copies agree.
    for (size_t i = 0; i < written; ++i) UndoWritten(ino, pieces[i]);
    for (size_t i = 0; i <= written && i < pieces.size(); ++i) {
      Piece& p = pieces[i];
      p.n = p.before > p.within ? std::min<uint64_t>(p.done, p.before - p.within) : 0;
    }
    pieces.resize(std::min(written + 1, pieces.size()));
  }
  for (const Piece& p : pieces) {
    if (p.n == 0) continue;
    proto::ReplRecord rec;
    rec.mutable_data()->set_ino(ino);
    rec.mutable_data()->set_offset(p.index * cs + p.within);
    rec.mutable_data()->set_data(p.data, p.n);
    rec.mutable_data()->set_sync(sync);
    Replicate(std::move(rec));
  }
  return st;
}

size_t ChunkStore::Stripe(uint64_t ino, uint64_t index) const {
  return (ino * 31 + index) % order_mu_.size();
}

void ChunkStore::UndoWritten(uint64_t ino, const Piece& piece) {
  const std::string path = ChunkPath(ino, piece.index);
  absl::StatusOr<std::unique_ptr<File>> file = OpenForWrite(path, /*create=*/false);
  if (!file.ok()) {
    LOG(WARNING) << "chunk store: undoing a failed write of " << path << ": " << file.status();
    return;
  }
  UndoPiece(file->get(), path, piece.before);
}

absl::Status ChunkStore::WritePiece(uint64_t ino, uint64_t index, uint64_t within, const char* data,
                                    size_t n, bool sync, uint64_t* before, size_t* done) {
  *before = 0;
  *done = 0;
  std::string path = ChunkPath(ino, index);
  if (direct_ok_.load(std::memory_order_relaxed) && n >= options_.direct_min_bytes &&
      within % kDirectAlign == 0 && n % kDirectAlign == 0) {
    bool refused = false;
    absl::Status s = WriteDirect(path, within, data, n, sync, &refused, before, done);
    if (!refused) return s;
    if (direct_ok_.exchange(false)) {
      LOG(WARNING) << "chunk store: the file system of " << options_.dir
                   << " refuses O_DIRECT; writing through the page cache from now on";
    }
  }
  absl::StatusOr<std::unique_ptr<File>> file = OpenForWrite(path, /*create=*/true);
  if (!file.ok()) return IoError(file.status());
  absl::Status st = WriteOrUndo(file->get(), path, within, data, n, sync, before, done);
  return ToErrno(st) == EINVAL ? IoError(st) : st;  // buffered: EINVAL is EIO as ever
}

absl::Status ChunkStore::WriteOrUndo(File* file, const std::string& path, uint64_t within,
                                     const char* data, size_t n, bool sync, uint64_t* before,
                                     size_t* done) {
  *done = 0;
  absl::StatusOr<uint64_t> size = file->Size();
  if (!size.ok()) return IoError(size.status());
  *before = *size;
  absl::Status st = WriteAll(file, path, data, n, within, done);
  if (!st.ok()) {
    // EINVAL with nothing written is O_DIRECT refused (WriteDirect then
    // writes buffered): returned as it is.
    if (ToErrno(st) != EINVAL || *done != 0) st = IoError(st);
  } else if (sync) {
    // Durability: data must be on disk before the metadata that makes it
    // visible is acknowledged.
    st = DataSync(file, path);
  }
  if (!st.ok()) UndoPiece(file, path, *before);
  return st;
}

void ChunkStore::UndoPiece(File* file, const std::string& path, uint64_t before) {
  // Bytes within `before` that the failed write changed stay changed (as
  // after any failed pwrite); blocks the write would have allocated read
  // as zeros until a write commits them (Volume::ZeroUnallocated).
  absl::Status st = before == 0 ? options_.env->Remove(path) : file->Truncate(before);
  if (!st.ok() && !absl::IsNotFound(st)) {
    LOG(WARNING) << "chunk store: undoing a failed write of " << path << ": " << st;
  }
}

absl::Status ChunkStore::WriteDirect(const std::string& path, uint64_t within, const char* data,
                                     size_t n, bool sync, bool* refused, uint64_t* before,
                                     size_t* done) {
  absl::StatusOr<std::unique_ptr<File>> file = OpenForWrite(path, /*create=*/true, /*direct=*/true);
  if (!file.ok()) {
    if (ToErrno(file.status()) == EINVAL) {
      *refused = true;
      return absl::OkStatus();
    }
    return IoError(file.status());
  }
  char* buf = TakeBuffer();
  if (buf == nullptr) return ErrnoStatus(ENOMEM, "direct write buffer");
  memcpy(buf, data, n);
  // Durability as for a buffered write: the device cache and the block
  // allocation are only stable after fdatasync.
  const absl::Status written = WriteOrUndo(file->get(), path, within, buf, n, sync, before, done);
  GiveBuffer(buf);
  if (ToErrno(written) == EINVAL && *done == 0) {
    *refused = true;  // nothing written: the caller writes buffered
    return absl::OkStatus();
  }
  if (!written.ok()) return written;
  direct_writes_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status ChunkStore::SyncChunks(const ChunkSet& chunks) {
  std::vector<uint64_t> removed;
  for (const auto& [ino, index] : chunks) {
    const std::string path = ChunkPath(ino, index);
    absl::StatusOr<std::unique_ptr<File>> file = OpenForWrite(path, /*create=*/false);
    if (!file.ok()) {
      if (ToErrno(file.status()) != ENOENT) return IoError(file.status());
      removed.push_back(ino);
      continue;
    }
    RETURN_IF_ERROR(DataSync(file->get(), path));
  }
  return SyncRemovals(removed);
}

absl::Status ChunkStore::DataSync(File* file, const std::string& path) {
  syncs_.fetch_add(1, std::memory_order_relaxed);
  if (absl::Status s = file->DataSync(); !s.ok()) return IoError(s);
  return absl::OkStatus();
}

void ChunkStore::Replicate(proto::ReplRecord rec) {
  if (options_.change_sink != nullptr) options_.change_sink->Append(std::move(rec));
}

absl::Status ChunkStore::Read(uint64_t ino, uint64_t offset, size_t size, char* out) {
  const uint64_t cs = options_.chunk_size;
  while (size > 0) {
    uint64_t index = offset / cs, within = offset % cs;
    size_t n = std::min<uint64_t>(size, cs - within);
    std::string path = ChunkPath(ino, index);
    absl::StatusOr<std::unique_ptr<File>> file = options_.env->Open(path, OpenOptions{});
    size_t done = 0;
    if (!file.ok()) {
      if (ToErrno(file.status()) != ENOENT) return IoError(file.status());
    } else {
      while (done < n) {
        absl::StatusOr<size_t> r = (*file)->Read(within + done, n - done, out + done);
        if (!r.ok()) return IoError(r.status());
        if (*r == 0) break;  // past the chunk file's end: a hole
        done += *r;
      }
    }
    memset(out + done, 0, n - done);
    offset += n;
    out += n;
    size -= n;
  }
  return absl::OkStatus();
}

absl::Status ChunkStore::Sync(uint64_t ino, uint64_t size) {
  const uint64_t chunks = (size + options_.chunk_size - 1) / options_.chunk_size;
  for (uint64_t i = 0; i < chunks; ++i) {
    std::string path = ChunkPath(ino, i);
    absl::StatusOr<std::unique_ptr<File>> file = OpenForWrite(path, /*create=*/false);
    if (!file.ok()) {
      if (ToErrno(file.status()) == ENOENT) continue;
      return IoError(file.status());
    }
    RETURN_IF_ERROR(DataSync(file->get(), path));
  }
  if (options_.change_sink != nullptr) {
    proto::ReplRecord rec;
    rec.mutable_sync()->set_ino(ino);
    rec.mutable_sync()->set_a(size);
    return options_.change_sink->WaitReplicated(options_.change_sink->Append(std::move(rec)));
  }
  return absl::OkStatus();
}

absl::Status ChunkStore::Allocate(uint64_t ino, uint64_t offset, uint64_t length) {
  const uint64_t cs = options_.chunk_size;
  while (length > 0) {
    uint64_t index = offset / cs, within = offset % cs;
    uint64_t n = std::min<uint64_t>(length, cs - within);
    std::string path = ChunkPath(ino, index);
    absl::StatusOr<std::unique_ptr<File>> file = OpenForWrite(path, /*create=*/true);
    if (!file.ok()) return IoError(file.status());
    if (absl::Status s = (*file)->Allocate(within, n); !s.ok()) return IoError(s);
    proto::ReplRecord rec;
    rec.mutable_allocate()->set_ino(ino);
    rec.mutable_allocate()->set_a(offset);
    rec.mutable_allocate()->set_b(n);
    Replicate(std::move(rec));
    offset += n;
    length -= n;
  }
  return absl::OkStatus();
}

absl::Status ChunkStore::Truncate(uint64_t ino, uint64_t new_size, uint64_t old_size) {
  const uint64_t cs = options_.chunk_size;
  const uint64_t first_gone = (new_size + cs - 1) / cs;  // wholly past new_size
  const uint64_t old_chunks = (old_size + cs - 1) / cs;
  for (uint64_t i = first_gone; i < old_chunks; ++i) {
    if (absl::Status s = Unlink(ino, i); !s.ok()) return s;
  }
  // Durability: the caller commits the smaller size once this returns, and
  // a chunk file that came back after a power loss would show its old bytes
  // when the file is extended again. The removals are durable with their
  // directory's fsync (all chunks of an inode share one directory).
  if (first_gone < old_chunks) {
    if (absl::Status s = options_.env->SyncDir(ChunkDir(ino)); !s.ok()) return IoError(s);
  }
  if (new_size % cs != 0) {
    // Cut the chunk holding new_size: drop its bytes past the cut, including
    // blocks preallocated beyond the chunk file's size (fallocate).
    const uint64_t cut = new_size % cs;
    std::string path = ChunkPath(ino, new_size / cs);
    absl::StatusOr<std::unique_ptr<File>> file = OpenForWrite(path, /*create=*/false);
    if (!file.ok()) {
      if (ToErrno(file.status()) != ENOENT) return IoError(file.status());
    } else {
      absl::StatusOr<uint64_t> size = (*file)->Size();
      if (!size.ok()) return IoError(size.status());
      // Never grows the chunk file; a truncate that does not grow it is also
      // what makes ext4 give back blocks preallocated past EOF (a hole punch
      // there is ignored). Preallocated blocks below the cut may go too: the
      // ledger still counts them, so the disk only ever has more room.
      const uint64_t keep = std::min<uint64_t>(*size, cut);
      if (absl::Status s = (*file)->Truncate(keep); !s.ok()) return IoError(s);
      // Durable before the size is committed, as the removals above.
      if (keep < *size) RETURN_IF_ERROR(DataSync(file->get(), path));
    }
  }
  // Queued after the cut is done: a snapshot cut in between (replicator)
  // replays it.
  proto::ReplRecord rec;
  rec.mutable_truncate()->set_ino(ino);
  rec.mutable_truncate()->set_a(new_size);
  rec.mutable_truncate()->set_b(old_size);
  Replicate(std::move(rec));
  return absl::OkStatus();
}

absl::Status ChunkStore::RemoveChunk(uint64_t ino, uint64_t index) {
  RETURN_IF_ERROR(Unlink(ino, index));
  proto::ReplRecord rec;
  rec.mutable_remove_chunk()->set_ino(ino);
  rec.mutable_remove_chunk()->set_a(index);
  Replicate(std::move(rec));
  return absl::OkStatus();
}

absl::Status ChunkStore::SyncRemovals(absl::Span<const uint64_t> inos) {
  absl::flat_hash_set<std::string> dirs;
  for (uint64_t ino : inos) dirs.insert(ChunkDir(ino));
  for (const std::string& dir : dirs) {
    if (absl::Status s = options_.env->SyncDir(dir); !s.ok()) return IoError(s);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<uint64_t, uint64_t>>> ChunkStore::ListChunkFiles() {
  std::vector<std::pair<uint64_t, uint64_t>> files;
  for (int sub = 0; sub < 256; ++sub) {
    const std::string dir = absl::StrFormat("%s/%02x", options_.dir, sub);
    absl::StatusOr<std::vector<std::string>> names = options_.env->ListDir(dir);
    if (!names.ok()) return IoError(names.status());
    for (const std::string& name : *names) {
      uint64_t ino = 0, index = 0;
      const std::vector<std::string> parts = absl::StrSplit(name, '.');
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &ino) ||
          !absl::SimpleAtoi(parts[1], &index) || ChunkPath(ino, index) != dir + "/" + name) {
        continue;
      }
      files.emplace_back(ino, index);
    }
  }
  return files;
}

absl::Status ChunkStore::Unlink(uint64_t ino, uint64_t index) {
  absl::Status s = options_.env->Remove(ChunkPath(ino, index));
  if (!s.ok() && ToErrno(s) != ENOENT) return IoError(s);
  return absl::OkStatus();
}

absl::Status ChunkStore::ApplyRecord(const proto::ReplRecord& rec, ChunkSet* unsynced) {
  switch (rec.op_case()) {
    case proto::ReplRecord::kData: {
      const proto::ReplData& d = rec.data();
      RETURN_IF_ERROR(Write(d.ino(), d.offset(), d.data().data(), d.data().size(), /*sync=*/false));
      if (d.sync() && !d.data().empty()) {
        const uint64_t cs = options_.chunk_size;
        for (uint64_t i = d.offset() / cs; i <= (d.offset() + d.data().size() - 1) / cs; ++i) {
          unsynced->emplace(d.ino(), i);
        }
      }
      return absl::OkStatus();
    }
    case proto::ReplRecord::kTruncate:
      return Truncate(rec.truncate().ino(), rec.truncate().a(), rec.truncate().b());
    case proto::ReplRecord::kAllocate:
      return Allocate(rec.allocate().ino(), rec.allocate().a(), rec.allocate().b());
    case proto::ReplRecord::kRemoveChunk:
      RETURN_IF_ERROR(RemoveChunk(rec.remove_chunk().ino(), rec.remove_chunk().a()));
      unsynced->emplace(rec.remove_chunk().ino(), rec.remove_chunk().a());  // its removal
      return absl::OkStatus();
    case proto::ReplRecord::kSync:
      return Sync(rec.sync().ino(), rec.sync().a());
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("change ", rec.seq(), " is not a chunk change (",
                                                 static_cast<int>(rec.op_case()), ")"));
}

}  // namespace grantfs
