// Space held on the data disk for what the volume has promised and not yet
// written: the mounts' space grants and the metadata reserve. It is one
// file, `<data dir>/space.hold`, whose blocks are allocated (fallocate) but
// never written. Another program that fills the file system cannot take
// them; when a write the server promised finds the disk full, the hold lends
// it the blocks it needs (the file shrinks) and the write is tried again.
//
// The hold follows a target, the promised bytes less what is lent out:
// Cover() grows the file to the target before a promise is made good
// (ENOSPC when the disk cannot hold it: the promise is taken back), and
// shrinks it when it holds much more than the target, so that the space of
// written or returned grants goes back to the file system within a round.
//
// Thread-safe.
#ifndef GRANTFS_COMMON_SPACE_HOLD_H_
#define GRANTFS_COMMON_SPACE_HOLD_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace grantfs {

// What a write that found the disk full borrows from the hold beyond its own
// bytes (the file system's own blocks for it).
inline constexpr uint64_t kWriteRoomMarginBytes = 1ull << 20;
// What a metadata write that found the disk full borrows (a RocksDB memtable
// flush or WAL file at most, at the sizes server/meta_store.cc sets).
inline constexpr uint64_t kMetadataRoomBytes = 16ull << 20;

// Free bytes of the file system holding `dir` (statvfs: f_bavail).
absl::StatusOr<uint64_t> DiskFree(const std::string& dir);

struct SpaceHoldOptions {
  // The hold file; created if missing. Required.
  std::string path;
  // Cover() shrinks the file only when it holds more than the target plus
  // this much (a shrink per write would cost a syscall per write).
  uint64_t slack_bytes = 16ull << 20;
  // How the file grows: fallocate(fd, 0, offset, length) by default. Unit
  // tests inject failures here (returns 0 or an errno).
  std::function<int(int fd, uint64_t offset, uint64_t length)> allocate;
};

class SpaceHold {
 public:
  // Opens (or creates) the hold file. A file system without fallocate
  // (EOPNOTSUPP) gives a hold that holds nothing: every call succeeds and
  // held() stays 0; it logs this once.
  static absl::StatusOr<std::unique_ptr<SpaceHold>> Open(const SpaceHoldOptions& options);
  ~SpaceHold();

  // Makes the file hold at least `promised_bytes` less what is lent out,
  // and at most that plus the slack. ENOSPC (errno status) when the disk
  // cannot hold that much; the file then holds what it held before.
  absl::Status Cover(uint64_t promised_bytes);
  // A promised write that found the disk full asks for `bytes` of the held
  // space: the file shrinks by up to that much and the write is tried
  // again. Returns the bytes lent (0 when the hold is empty). Every loan is
  // ended with Repay once the write landed or failed.
  uint64_t Lend(uint64_t bytes);
  void Repay(uint64_t bytes);

  uint64_t held() const;
  uint64_t lent() const;
  // False on a file system without fallocate.
  bool enabled() const { return enabled_; }

 private:
  SpaceHold(const SpaceHoldOptions& options, int fd, uint64_t held, bool enabled);
  // Sets the file's size (and allocation) to `bytes`.
  absl::Status ResizeLocked(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SpaceHoldOptions options_;
  const int fd_;
  const bool enabled_;
  mutable absl::Mutex mu_;
  uint64_t held_ ABSL_GUARDED_BY(mu_);
  uint64_t lent_ ABSL_GUARDED_BY(mu_) = 0;
};

// The space of a data file system that file data may still take: its free
// space plus what a space hold keeps for promises, both read at the same
// moment, at most every `every` (it is asked before every write's
// reservation). A failed statvfs counts as no space: nothing more is
// promised until it works again. Thread-safe.
class DiskRoom {
 public:
  DiskRoom(std::string dir, const SpaceHold* hold, absl::Duration every = absl::Milliseconds(50))
      : dir_(std::move(dir)), hold_(hold), every_(every) {}

  uint64_t Get();

 private:
  const std::string dir_;
  const SpaceHold* const hold_;
  const absl::Duration every_;
  absl::Mutex mu_;
  absl::Time at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace grantfs

#endif  // GRANTFS_COMMON_SPACE_HOLD_H_
