// File-system workloads that measure any directory the same way (a GrantFS
// mount, a FUSE passthrough, tmpfs, the local disk) with plain POSIX calls.
// Every function runs one measurement and leaves the directory as it found
// it on success. Errors are errno statuses naming the call and the path.
// Thread-compatible (each call uses its own files, named after the pid).
#ifndef GRANTFS_BENCH_FS_BENCH_H_
#define GRANTFS_BENCH_FS_BENCH_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace grantfs {
namespace bench {

struct DdOptions {
  std::string dir;                 // where the file is written; required
  uint64_t bytes = 1ull << 30;     // file size, a multiple of block_bytes
  size_t block_bytes = 512 << 10;  // bytes per write() call
  bool zeros = false;              // zeros (mkfile) instead of a non-zero pattern
};

// Seconds spent in each call of: open(O_CREAT|O_TRUNC), the write() calls,
// fsync, close. total covers all four.
struct DdTimes {
  double open_s = 0, write_s = 0, fsync_s = 0, close_s = 0, total_s = 0;
};

// Writes one file of `bytes` in `block_bytes` write() calls, fsyncs and
// closes it, then unlinks it and sync()s so the next run starts clean.
// Non-zero data differs in every block (a block number leads each block).
absl::StatusOr<DdTimes> RunDd(const DdOptions& options);

struct MetaOptions {
  std::string dir;  // a subdirectory is created in it; required
  int files = 10000;
};

// Operations per second of each phase over `files` files in one directory.
struct MetaRates {
  double create = 0;  // open(O_CREAT|O_EXCL) + close of an empty file
  double stat = 0;
  double rename = 0;  // to a new name in the same directory
  double unlink = 0;
};
absl::StatusOr<MetaRates> RunMeta(const MetaOptions& options);

struct SmallFilesOptions {
  std::string dir;  // a subdirectory is created in it; required
  int files = 100;
  size_t file_bytes = 4096;  // non-zero pattern, different in every file
};

// Files per second of each phase.
struct SmallFilesRates {
  double create = 0;  // open(O_CREAT|O_EXCL) + write the whole file + close
  double read = 0;    // open + read it whole (and check it) + close
  double unlink = 0;
};
absl::StatusOr<SmallFilesRates> RunSmallFiles(const SmallFilesOptions& options);

}  // namespace bench
}  // namespace grantfs

#endif  // GRANTFS_BENCH_FS_BENCH_H_
