#include "common/space_hold.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "glog/logging.h"

namespace grantfs {

absl::StatusOr<uint64_t> DiskFree(const std::string& dir) {
  struct statvfs sv;
  if (statvfs(dir.c_str(), &sv) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("statvfs ", dir, ": ", strerror(errno)));
  }
  return static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize;
}

uint64_t DiskRoom::Get() {
  absl::MutexLock l(&mu_);
  const absl::Time now = absl::Now();
  if (now - at_ >= every_) {
    absl::StatusOr<uint64_t> free = DiskFree(dir_);
    if (!free.ok()) {
      LOG_EVERY_N(ERROR, 100) << free.status();
    }
    bytes_ = free.ok() ? *free + hold_->held() : 0;
    at_ = now;
  }
  return bytes_;
}

absl::StatusOr<std::unique_ptr<SpaceHold>> SpaceHold::Open(const SpaceHoldOptions& options) {
  const int fd = open(options.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("open ", options.path, ": ", strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat("stat ", options.path, ": ", strerror(err)));
  }
  // Can this file system hold space without writing it? Try one block past
  // the end (given back by the first Cover when not needed).
  SpaceHoldOptions o = options;
  if (!o.allocate) {
    o.allocate = [](int fd, uint64_t offset, uint64_t length) {
      return fallocate(fd, 0, offset, length) == 0 ? 0 : errno;
    };
  }
  bool enabled = true;
  const int err = o.allocate(fd, st.st_size, 4096);
  if (err == EOPNOTSUPP) {
    LOG(WARNING) << "space hold: " << options.path << ": the file system cannot allocate without "
                 << "writing (fallocate: " << strerror(err) << "); promised space is not held "
                 << "against other programs filling the data disk";
    enabled = false;
  } else if (err == 0 && ftruncate(fd, st.st_size) != 0) {
    const int e = errno;
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("truncate ", options.path, ": ", strerror(e)));
  }
  // ENOSPC here is a full disk: the hold starts from what it holds.
  return std::unique_ptr<SpaceHold>(
      new SpaceHold(o, fd, enabled ? static_cast<uint64_t>(st.st_size) : 0, enabled));
}

SpaceHold::SpaceHold(const SpaceHoldOptions& options, int fd, uint64_t held, bool enabled)
    : options_(options), fd_(fd), enabled_(enabled), held_(held) {}

SpaceHold::~SpaceHold() { close(fd_); }

absl::Status SpaceHold::ResizeLocked(uint64_t bytes) {
  if (bytes > held_) {
    const int err = options_.allocate(fd_, held_, bytes - held_);
    if (err != 0) {
      // A failed fallocate may leave blocks past the old end: cut them.
      if (ftruncate(fd_, held_) != 0) {
        PLOG(ERROR) << "space hold: truncate " << options_.path;
      }
      return ErrnoStatus(
          err == ENOSPC ? ENOSPC : EIO,
          absl::StrCat("holding ", bytes, " bytes in ", options_.path, ": ", strerror(err)));
    }
  } else if (ftruncate(fd_, bytes) != 0) {
    const int err = errno;
    LOG(ERROR) << "space hold: truncate " << options_.path << ": " << strerror(err);
    return ErrnoStatus(EIO, absl::StrCat("truncate ", options_.path, ": ", strerror(err)));
  }
  held_ = bytes;
  return absl::OkStatus();
}

absl::Status SpaceHold::Cover(uint64_t promised_bytes) {
  if (!enabled_) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  const uint64_t target = promised_bytes > lent_ ? promised_bytes - lent_ : 0;
  if (held_ < target) return ResizeLocked(target);
  if (held_ > target + options_.slack_bytes) return ResizeLocked(target);
  return absl::OkStatus();
}

uint64_t SpaceHold::Lend(uint64_t bytes) {
  if (!enabled_) return 0;
  absl::MutexLock l(&mu_);
  const uint64_t n = std::min(bytes, held_);
  if (n == 0 || !ResizeLocked(held_ - n).ok()) return 0;
  lent_ += n;
  return n;
}

void SpaceHold::Repay(uint64_t bytes) {
  if (bytes == 0) return;
  absl::MutexLock l(&mu_);
  lent_ = bytes > lent_ ? 0 : lent_ - bytes;
}

uint64_t SpaceHold::held() const {
  absl::MutexLock l(&mu_);
  return held_;
}

uint64_t SpaceHold::lent() const {
  absl::MutexLock l(&mu_);
  return lent_;
}

}  // namespace grantfs
