#include "common/log_rotation.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

absl::Status Failed(int err, const std::string& what) {
  return ErrnoStatus(err, absl::StrCat(what, ": ", strerror(err)));
}

}  // namespace

LogRotation::LogRotation(std::string path, int fd, uint64_t max_bytes)
    : path_(std::move(path)), fd_(fd), max_bytes_(max_bytes) {}

LogRotation::~LogRotation() { Stop(); }

absl::Status LogRotation::Reopen() {
  const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    return Failed(err, absl::StrCat("open ", path_));
  }
  const int r = dup2(fd, fd_);  // dup2 clears O_CLOEXEC on fd_
  const int err = errno;
  close(fd);
  if (r < 0) return Failed(err, absl::StrCat("dup2 onto ", fd_));
  return absl::OkStatus();
}

absl::StatusOr<bool> LogRotation::Check() {
  absl::MutexLock l(&check_mu_);
  struct stat at_fd, at_path;
  if (fstat(fd_, &at_fd) != 0) {
    const int err = errno;
    return Failed(err, absl::StrCat("fstat of ", fd_));
  }
  if (stat(path_.c_str(), &at_path) != 0) {
    const int err = errno;
    if (err != ENOENT) return Failed(err, absl::StrCat("stat ", path_));
    RETURN_IF_ERROR(Reopen());  // removed: a new file
    return true;
  }
  if (at_fd.st_dev != at_path.st_dev || at_fd.st_ino != at_path.st_ino) {
    RETURN_IF_ERROR(Reopen());  // moved away: follow the name
    return true;
  }
  if (max_bytes_ == 0 || static_cast<uint64_t>(at_fd.st_size) <= max_bytes_) return false;
  const std::string old = path_ + ".1";
  if (rename(path_.c_str(), old.c_str()) != 0) {
    const int err = errno;
    return Failed(err, absl::StrCat("rename ", path_, " to ", old));
  }
  RETURN_IF_ERROR(Reopen());
  return true;
}

void LogRotation::Start(absl::Duration every) {
  {
    absl::MutexLock l(&mu_);
    if (thread_.joinable() || stopping_) return;
  }
  thread_ = std::thread([this, every] { Loop(every); });
}

void LogRotation::Loop(absl::Duration every) {
  std::string last_error;
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), every)) return;
    }
    absl::StatusOr<bool> r = Check();
    const std::string error = r.ok() ? "" : r.status().ToString();
    if (!error.empty() && error != last_error) {
      LOG(WARNING) << "log rotation of " << path_ << ": " << error;
    }
    last_error = error;
  }
}

void LogRotation::Stop() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace grantfs
