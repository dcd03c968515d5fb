// The file system as the server's data path sees it: the few calls the chunk
// store makes (open, pwrite, pread, fdatasync, fstat, ftruncate, fallocate,
// mkdir, unlink, directory fsync), behind an interface in the manner of
// leveldb's Env and RocksDB's FileSystem, so that tests can inject faults
// (ENOSPC, EIO) and power losses (FaultInjectionEnv, common/fault_env.h)
// without real disks failing.
//
// Errors are errno statuses (common/errno_status.h) whose message names the
// call and the path; callers decide what to log and what errno to return.
#ifndef GRANTFS_COMMON_ENV_H_
#define GRANTFS_COMMON_ENV_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace grantfs {

// How a file is opened (the open(2) flags the data path uses).
struct OpenOptions {
  // O_WRONLY; false: O_RDONLY.
  bool write = false;
  // O_CREAT (mode 0600): a missing file is made. Without it, a missing file
  // is ENOENT.
  bool create = false;
  // O_DIRECT: the page cache is bypassed. The caller aligns offsets, lengths
  // and memory to the disk's logical block size. A file system that does
  // not take O_DIRECT answers EINVAL, at the open or at the first write.
  bool direct = false;
};

// One open file (one descriptor, closed when the object is destroyed).
// Calls on one object are not synchronized: one thread uses it at a time.
class File {
 public:
  virtual ~File() = default;

  // pwrite(2): writes up to `n` bytes of `data` at `offset` and returns how
  // many it wrote (possibly fewer; 0 only for n == 0). EINTR is retried.
  virtual absl::StatusOr<size_t> Write(uint64_t offset, const char* data, size_t n) = 0;
  // pread(2): reads up to `n` bytes at `offset` into `out`; 0 at end of file.
  virtual absl::StatusOr<size_t> Read(uint64_t offset, size_t n, char* out) = 0;
  // fdatasync(2): what was written to this file (through any descriptor)
  // and the size it needs are on stable storage when this returns OK.
  virtual absl::Status DataSync() = 0;
  // fstat(2)'s st_size.
  virtual absl::StatusOr<uint64_t> Size() = 0;
  // ftruncate(2).
  virtual absl::Status Truncate(uint64_t size) = 0;
  // fallocate(2) with FALLOC_FL_KEEP_SIZE: reserves blocks for
  // [offset, offset + length) without changing the file's size.
  virtual absl::Status Allocate(uint64_t offset, uint64_t length) = 0;
};

// Thread-safe.
class Env {
 public:
  virtual ~Env() = default;

  // The process-wide Env of the real file system; never deleted.
  static Env* Posix();

  virtual absl::StatusOr<std::unique_ptr<File>> Open(const std::string& path,
                                                     const OpenOptions& options) = 0;
  // mkdir(2) with mode 0700; a directory that exists already is OK.
  virtual absl::Status CreateDir(const std::string& path) = 0;
  // unlink(2). ENOENT when there is no such file.
  virtual absl::Status Remove(const std::string& path) = 0;
  // fsync(2) of directory `path`: the names made or removed in it are on
  // stable storage when this returns OK.
  virtual absl::Status SyncDir(const std::string& path) = 0;
  // The names in directory `path` (without "." and ".."), in no order.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) = 0;
};

}  // namespace grantfs

#endif  // GRANTFS_COMMON_ENV_H_
