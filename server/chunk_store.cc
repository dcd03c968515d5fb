#include "server/chunk_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/errno_status.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

absl::Status IoError(const std::string& what, const std::string& path) {
  int err = errno;
  LOG(ERROR) << "chunk store: " << what << " " << path << ": " << strerror(err);
  // ENOSPC from the local disk stays ENOSPC; everything else is EIO.
  return ErrnoStatus(err == ENOSPC ? ENOSPC : EIO, absl::StrCat(what, " ", path));
}

// Closes a descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Offsets, lengths and memory of O_DIRECT I/O are aligned to this (the
// largest logical block size of the disks we meet).
constexpr uint64_t kDirectAlign = 4096;

// Writes all `n` bytes of `buf` at `offset` of `fd`. Returns 0, or the
// errno of the call that failed (EIO for a write of 0 bytes); *done counts
// the bytes written before.
int PwriteAll(int fd, const char* buf, size_t n, uint64_t offset, size_t* done) {
  *done = 0;
  while (*done < n) {
    ssize_t w = pwrite(fd, buf + *done, n - *done, offset + *done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return EIO;
    *done += w;
  }
  return 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChunkStore>> ChunkStore::Create(const ChunkStoreOptions& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("chunk dir is empty");
  if (options.chunk_size == 0 || options.chunk_size % 4096 != 0) {
    return absl::InvalidArgumentError("chunk_size must be a multiple of 4096");
  }
  if (mkdir(options.dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return IoError("mkdir", options.dir);
  }
  for (int i = 0; i < 256; ++i) {
    std::string sub = absl::StrFormat("%s/%02x", options.dir, i);
    if (mkdir(sub.c_str(), 0700) != 0 && errno != EEXIST) return IoError("mkdir", sub);
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

std::string ChunkStore::ChunkPath(uint64_t ino, uint64_t index) const {
  return absl::StrFormat("%s/%02x/%d.%d", options_.dir, ino % 256, ino, index);
}

absl::Status ChunkStore::Write(uint64_t ino, uint64_t offset, const char* data, size_t size,
                               bool sync) {
  const uint64_t cs = options_.chunk_size;
  while (size > 0) {
    uint64_t index = offset / cs, within = offset % cs;
    size_t n = std::min<uint64_t>(size, cs - within);
    if (options_.change_sink == nullptr) {
      RETURN_IF_ERROR(WritePiece(ino, index, within, data, n, sync));
    } else {
      absl::MutexLock l(&order_mu_[(ino * 31 + index) % order_mu_.size()]);
      RETURN_IF_ERROR(WritePiece(ino, index, within, data, n, sync));
      proto::ReplRecord rec;
      rec.mutable_data()->set_ino(ino);
      rec.mutable_data()->set_offset(offset);
      rec.mutable_data()->set_data(data, n);
      rec.mutable_data()->set_sync(sync);
      options_.change_sink->Append(std::move(rec));
    }
    offset += n;
    data += n;
    size -= n;
  }
  return absl::OkStatus();
}

absl::Status ChunkStore::WritePiece(uint64_t ino, uint64_t index, uint64_t within, const char* data,
                                    size_t n, bool sync) {
  std::string path = ChunkPath(ino, index);
  if (direct_ok_.load(std::memory_order_relaxed) && n >= options_.direct_min_bytes &&
      within % kDirectAlign == 0 && n % kDirectAlign == 0) {
    bool refused = false;
    absl::Status s = WriteDirect(path, within, data, n, sync, &refused);
    if (!refused) return s;
    if (direct_ok_.exchange(false)) {
      LOG(WARNING) << "chunk store: the file system of " << options_.dir
                   << " refuses O_DIRECT; writing through the page cache from now on";
    }
  }
  Fd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0) return IoError("open", path);
  size_t done;
  if (int err = PwriteAll(fd.get(), data, n, within, &done)) {
    errno = err;
    return IoError("pwrite", path);
  }
  // Durability: data must be on disk before the metadata that makes it
  // visible is acknowledged.
  if (sync) RETURN_IF_ERROR(DataSync(fd.get(), path));
  return absl::OkStatus();
}

absl::Status ChunkStore::WriteDirect(const std::string& path, uint64_t within, const char* data,
                                     size_t n, bool sync, bool* refused) {
  Fd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_DIRECT, 0600));
  if (fd.get() < 0) {
    if (errno == EINVAL) {
      *refused = true;
      return absl::OkStatus();
    }
    return IoError("open", path);
  }
  char* buf = TakeBuffer();
  if (buf == nullptr) return ErrnoStatus(ENOMEM, "direct write buffer");
  memcpy(buf, data, n);
  size_t done;
  const int err = PwriteAll(fd.get(), buf, n, within, &done);
  GiveBuffer(buf);
  if (err == EINVAL && done == 0) {
    *refused = true;  // nothing written: the caller writes buffered
    return absl::OkStatus();
  }
  if (err != 0) {
    errno = err;
    return IoError("pwrite (direct)", path);
  }
  direct_writes_.fetch_add(1, std::memory_order_relaxed);
  // Durability as for a buffered write: the device cache and the block
  // allocation are only stable after fdatasync.
  if (sync) RETURN_IF_ERROR(DataSync(fd.get(), path));
  return absl::OkStatus();
}

absl::Status ChunkStore::SyncChunk(uint64_t ino, uint64_t index) {
  const std::string path = ChunkPath(ino, index);
  Fd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno == ENOENT ? absl::OkStatus() : IoError("open", path);
  return DataSync(fd.get(), path);
}

absl::Status ChunkStore::DataSync(int fd, const std::string& path) {
  syncs_.fetch_add(1, std::memory_order_relaxed);
  if (fdatasync(fd) != 0) return IoError("fdatasync", path);
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
    Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    size_t done = 0;
    if (fd.get() < 0) {
      if (errno != ENOENT) return IoError("open", path);
    } else {
      while (done < n) {
        ssize_t r = pread(fd.get(), out + done, n - done, within + done);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return IoError("pread", path);
        if (r == 0) break;  // past the chunk file's end: a hole
        done += r;
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
    Fd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      if (errno == ENOENT) continue;
      return IoError("open", path);
    }
    RETURN_IF_ERROR(DataSync(fd.get(), path));
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
    Fd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    if (fd.get() < 0) return IoError("open", path);
    if (fallocate(fd.get(), FALLOC_FL_KEEP_SIZE, within, n) != 0) {
      return IoError("fallocate", path);
    }
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
  if (new_size % cs != 0) {
    // Cut the chunk holding new_size: drop its bytes past the cut, including
    // blocks preallocated beyond the chunk file's size (fallocate).
    const uint64_t cut = new_size % cs;
    std::string path = ChunkPath(ino, new_size / cs);
    Fd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      if (errno != ENOENT) return IoError("open", path);
    } else {
      struct stat st;
      if (fstat(fd.get(), &st) != 0) return IoError("fstat", path);
      // Never grows the chunk file; a truncate that does not grow it is also
      // what makes ext4 give back blocks preallocated past EOF (a hole punch
      // there is ignored). Preallocated blocks below the cut may go too: the
      // ledger still counts them, so the disk only ever has more room.
      const off_t keep = std::min<off_t>(st.st_size, cut);
      if (ftruncate(fd.get(), keep) != 0) return IoError("ftruncate", path);
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

absl::Status ChunkStore::Unlink(uint64_t ino, uint64_t index) {
  std::string path = ChunkPath(ino, index);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return IoError("unlink", path);
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
      return RemoveChunk(rec.remove_chunk().ino(), rec.remove_chunk().a());
    case proto::ReplRecord::kSync:
      return Sync(rec.sync().ino(), rec.sync().a());
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("change ", rec.seq(), " is not a chunk change (",
                                                 static_cast<int>(rec.op_case()), ")"));
}

}  // namespace grantfs
