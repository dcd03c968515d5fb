#include "bench/fs_bench.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/errno_status.h"

namespace grantfs {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The errno of the call that just failed, with what was being done
// (ErrnoStatus adds strerror).
absl::Status Failed(const std::string& what) { return ErrnoStatus(errno, what); }

// Non-zero bytes: a pattern that depends on `seed`, led by `seed` itself in
// 7-bit digits with the top bit set, so no file system can store them as
// holes or zeros and no two blocks or files are alike.
void StampSeed(uint64_t seed, char* buf, size_t n) {
  for (size_t k = 0; k < 8 && k < n; ++k) {
    buf[k] = static_cast<char>(((seed >> (7 * k)) & 0x7f) | 0x80);
  }
}
void FillPattern(uint64_t seed, char* buf, size_t n) {
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<char>((i * 131 + seed * 31 + 7) | 1);
  StampSeed(seed, buf, n);
}

// A scratch subdirectory of `dir`, named after this process.
absl::StatusOr<std::string> MakeScratchDir(const std::string& dir, const char* what) {
  const std::string d = absl::StrFormat("%s/grantfs-bench-%s.%d", dir, what, getpid());
  if (mkdir(d.c_str(), 0755) != 0) return Failed("mkdir " + d);
  return d;
}

}  // namespace

absl::StatusOr<DdTimes> RunDd(const DdOptions& o) {
  if (o.block_bytes == 0 || o.bytes % o.block_bytes != 0) {
    return ErrnoStatus(EINVAL, "dd: size is not a multiple of the block size");
  }
  std::vector<char> buf(o.block_bytes, 0);
  if (!o.zeros) FillPattern(0, buf.data(), buf.size());
  const std::string path = absl::StrFormat("%s/grantfs-bench-dd.%d", o.dir, getpid());
  DdTimes t;
  const auto t0 = Clock::now();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Failed("open " + path);
  t.open_s = Since(t0);
  absl::Status status;
  const auto t1 = Clock::now();
  for (uint64_t block = 0; block < o.bytes / o.block_bytes; ++block) {
    if (!o.zeros) StampSeed(block, buf.data(), buf.size());
    const ssize_t n = write(fd, buf.data(), buf.size());
    if (n != static_cast<ssize_t>(buf.size())) {
      status = n < 0 ? Failed("write " + path)
                     : ErrnoStatus(EIO, absl::StrFormat("write %s: %d of %d bytes written", path, n,
                                                        buf.size()));
      break;
    }
  }
  t.write_s = Since(t1);
  const auto t2 = Clock::now();
  if (status.ok() && fsync(fd) != 0) status = Failed("fsync " + path);
  t.fsync_s = Since(t2);
  const auto t3 = Clock::now();
  if (close(fd) != 0 && status.ok()) status = Failed("close " + path);
  t.close_s = Since(t3);
  t.total_s = Since(t0);
  unlink(path.c_str());
  if (!status.ok()) return status;
  sync();  // the next run starts from a clean page cache state
  return t;
}

absl::StatusOr<MetaRates> RunMeta(const MetaOptions& o) {
  absl::StatusOr<std::string> d = MakeScratchDir(o.dir, "meta");
  if (!d.ok()) return d.status();
  auto name = [&](const char* prefix, int i) {
    return absl::StrFormat("%s/%s%07d", *d, prefix, i);
  };
  const int n = o.files;
  MetaRates r;
  auto t = Clock::now();
  for (int i = 0; i < n; ++i) {
    const int fd = open(name("f", i).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0 || close(fd) != 0) return Failed("create " + name("f", i));
  }
  r.create = n / Since(t);
  t = Clock::now();
  struct stat st;
  for (int i = 0; i < n; ++i) {
    if (stat(name("f", i).c_str(), &st) != 0) return Failed("stat " + name("f", i));
  }
  r.stat = n / Since(t);
  t = Clock::now();
  for (int i = 0; i < n; ++i) {
    if (rename(name("f", i).c_str(), name("r", i).c_str()) != 0) {
      return Failed("rename " + name("f", i));
    }
  }
  r.rename = n / Since(t);
  t = Clock::now();
  for (int i = 0; i < n; ++i) {
    if (unlink(name("r", i).c_str()) != 0) return Failed("unlink " + name("r", i));
  }
  r.unlink = n / Since(t);
  if (rmdir(d->c_str()) != 0) return Failed("rmdir " + *d);
  return r;
}

absl::StatusOr<SmallFilesRates> RunSmallFiles(const SmallFilesOptions& o) {
  absl::StatusOr<std::string> d = MakeScratchDir(o.dir, "small");
  if (!d.ok()) return d.status();
  auto name = [&](int i) { return absl::StrFormat("%s/s%06d", *d, i); };
  const int n = o.files;
  std::vector<char> buf(o.file_bytes), back(o.file_bytes + 1);
  SmallFilesRates r;
  auto t = Clock::now();
  for (int i = 0; i < n; ++i) {
    FillPattern(i, buf.data(), buf.size());
    const int fd = open(name(i).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) return Failed("create " + name(i));
    const ssize_t n = write(fd, buf.data(), buf.size());
    if (n != static_cast<ssize_t>(buf.size())) {
      absl::Status s = n < 0 ? Failed("write " + name(i))
                             : ErrnoStatus(EIO, "write " + name(i) + ": short write");
      close(fd);
      return s;
    }
    if (close(fd) != 0) return Failed("close " + name(i));
  }
  r.create = n / Since(t);
  t = Clock::now();
  for (int i = 0; i < n; ++i) {
    const int fd = open(name(i).c_str(), O_RDONLY);
    if (fd < 0) return Failed("open " + name(i));
    const ssize_t got = read(fd, back.data(), back.size());
    const int read_errno = errno;
    close(fd);
    if (got < 0) {
      errno = read_errno;
      return Failed("read " + name(i));
    }
    FillPattern(i, buf.data(), buf.size());
    if (static_cast<size_t>(got) != buf.size() || memcmp(buf.data(), back.data(), got) != 0) {
      return ErrnoStatus(EIO, "read " + name(i) + ": data differs from what was written");
    }
  }
  r.read = n / Since(t);
  t = Clock::now();
  for (int i = 0; i < n; ++i) {
    if (unlink(name(i).c_str()) != 0) return Failed("unlink " + name(i));
  }
  r.unlink = n / Since(t);
  if (rmdir(d->c_str()) != 0) return Failed("rmdir " + *d);
  return r;
}

}  // namespace bench
}  // namespace grantfs
