#include "common/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace grantfs {
namespace {

// The errno of the call that just failed, as a status naming it.
absl::Status Failed(const char* call, const std::string& path) {
  return ErrnoStatus(errno, absl::StrCat(call, " ", path));
}

class PosixFile : public File {
 public:
  PosixFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixFile() override { close(fd_); }

  absl::StatusOr<size_t> Write(uint64_t offset, const char* data, size_t n) override {
    for (;;) {
      const ssize_t w = pwrite(fd_, data, n, offset);
      if (w >= 0) return static_cast<size_t>(w);
      if (errno != EINTR) return Failed("pwrite", path_);
    }
  }

  absl::StatusOr<size_t> Read(uint64_t offset, size_t n, char* out) override {
    for (;;) {
      const ssize_t r = pread(fd_, out, n, offset);
      if (r >= 0) return static_cast<size_t>(r);
      if (errno != EINTR) return Failed("pread", path_);
    }
  }

  absl::Status DataSync() override {
    if (fdatasync(fd_) != 0) return Failed("fdatasync", path_);
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size() override {
    struct stat st;
    if (fstat(fd_, &st) != 0) return Failed("fstat", path_);
    return static_cast<uint64_t>(st.st_size);
  }

  absl::Status Truncate(uint64_t size) override {
    if (ftruncate(fd_, static_cast<off_t>(size)) != 0) return Failed("ftruncate", path_);
    return absl::OkStatus();
  }

  absl::Status Allocate(uint64_t offset, uint64_t length) override {
    if (fallocate(fd_, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(length)) != 0) {
      return Failed("fallocate", path_);
    }
    return absl::OkStatus();
  }

 private:
  const int fd_;
  const std::string path_;
};

class PosixEnv : public Env {
 public:
  absl::StatusOr<std::unique_ptr<File>> Open(const std::string& path,
                                             const OpenOptions& options) override {
    int flags = O_CLOEXEC | (options.write ? O_WRONLY : O_RDONLY);
    if (options.create) flags |= O_CREAT;
    if (options.direct) flags |= O_DIRECT;
    const int fd = open(path.c_str(), flags, 0600);
    if (fd < 0) return Failed("open", path);
    return std::make_unique<PosixFile>(fd, path);
  }

  absl::Status CreateDir(const std::string& path) override {
    if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return Failed("mkdir", path);
    return absl::OkStatus();
  }

  absl::Status Remove(const std::string& path) override {
    if (unlink(path.c_str()) != 0) return Failed("unlink", path);
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& path) override {
    const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Failed("open", path);
    const int r = fsync(fd);
    absl::Status s = r == 0 ? absl::OkStatus() : Failed("fsync", path);
    close(fd);
    return s;
  }

  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(path.c_str()), closedir);
    if (!d) return Failed("opendir", path);
    std::vector<std::string> names;
    errno = 0;
    while (struct dirent* de = readdir(d.get())) {
      const std::string name = de->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    if (errno != 0) return Failed("readdir", path);
    return names;
  }
};

}  // namespace

Env* Env::Posix() {
  static Env* env = new PosixEnv;
  return env;
}

}  // namespace grantfs
