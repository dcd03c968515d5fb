// Keeps a log file that a process writes through one of its descriptors
// (the stderr of a background grantfs-mount, which the node agent points at
// a log per global mount) within a size, with no help from outside:
//
// - when the file has grown past `max_bytes`, it is renamed to PATH.1 (the
//   previous PATH.1 goes) and the descriptor reopened on a new PATH;
// - when PATH was moved or removed by someone else (logrotate without
//   copytruncate), the descriptor is reopened on PATH.
//
// The descriptor is replaced with dup2, atomically: a line written by
// another thread meanwhile lands in the old file or the new one, whole.
// So a mount that runs for months keeps at most about 2 x max_bytes of log,
// as long as PATH can be created again (a failed reopen is retried at the
// next check, and logged; meanwhile the lines go on into the moved file).
#ifndef GRANTFS_COMMON_LOG_ROTATION_H_
#define GRANTFS_COMMON_LOG_ROTATION_H_

#include <cstdint>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace grantfs {

class LogRotation {
 public:
  // `fd` writes to `path` (opened with O_APPEND); not owned. `max_bytes` 0:
  // never rotated for size (a moved file is still followed).
  LogRotation(std::string path, int fd, uint64_t max_bytes);
  ~LogRotation();  // Stop()
  LogRotation(const LogRotation&) = delete;
  LogRotation& operator=(const LogRotation&) = delete;

  // Rotates or reopens when needed (above). Whether it did; an errno status
  // when a rename or open failed (the descriptor then stays as it was).
  absl::StatusOr<bool> Check() ABSL_LOCKS_EXCLUDED(mu_);

  // Calls Check every `every` on a thread of its own (failures are logged
  // once each time they change), until Stop.
  void Start(absl::Duration every) ABSL_LOCKS_EXCLUDED(mu_);
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop(absl::Duration every) ABSL_LOCKS_EXCLUDED(mu_);
  // Opens `path_` and puts it at `fd_`.
  absl::Status Reopen() ABSL_EXCLUSIVE_LOCKS_REQUIRED(check_mu_);

  const std::string path_;
  const int fd_;
  const uint64_t max_bytes_;

  absl::Mutex check_mu_;  // one Check at a time
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started and joined by the owner's thread
};

}  // namespace grantfs

#endif  // GRANTFS_COMMON_LOG_ROTATION_H_
