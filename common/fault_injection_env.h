// An Env for tests (common/env.h) that wraps another and can
//  - fail calls: the next N calls of one kind (pwrite, fdatasync, open, ...)
//    fail with a chosen errno (ENOSPC, EIO, ...) without reaching the disk;
//  - refuse O_DIRECT, as a file system without it does (EINVAL at open);
//  - lose what was not synced, as a power loss does (in the manner of
//    leveldb's FaultInjectionTestEnv): it remembers what each file it
//    touched held at its last fdatasync, and DropUnsyncedData() puts every
//    such file back to that.
//
// The power-loss model, per path written, truncated, created or removed
// through this Env (other files are left alone):
//  - A file's bytes and size are durable at its DataSync (whatever wrote
//    them: buffered or O_DIRECT). fallocate is not modelled (blocks only).
//  - A file made through this Env exists after a power loss once it was
//    DataSync'd (ext4, XFS and btrfs log a new file's name with its first
//    fsync; POSIX asks for a directory fsync too) or its directory was
//    SyncDir'd (then with the bytes of its last DataSync, none if never).
//  - A removal is durable only once its directory was SyncDir'd; until then
//    the power loss brings the file back with its last synced bytes.
//  - A file that existed before this Env first touched it counts as synced
//    as it was then.
// Not modelled: a failed fdatasync that drops dirty pages (the next one
// then succeeds without them), torn writes within a block, the directory
// tree itself (mkdir is taken as durable).
//
// Thread-safe. Keeps a copy of every file it tracks, read whole at each
// DataSync, under one mutex: for tests with small files only.
#ifndef GRANTFS_COMMON_FAULT_INJECTION_ENV_H_
#define GRANTFS_COMMON_FAULT_INJECTION_ENV_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/env.h"

namespace grantfs {

// The calls of Env and File, for choosing which to fail.
enum class FileOp {
  kOpen,
  kWrite,
  kRead,
  kDataSync,
  kSize,
  kTruncate,
  kAllocate,
  kCreateDir,
  kRemove,
  kSyncDir,
};
inline constexpr size_t kFileOpCount = 10;

class FaultInjectionEnv : public Env {
 public:
  // `base`: where calls go when they are not failed; not owned.
  explicit FaultInjectionEnv(Env* base = Env::Posix()) : base_(base) {}

  // After `skip` more calls of `op` succeed, the next `count` fail with
  // `err` (an errno) without reaching the base Env; count < 0: every call
  // until ClearFaults(). Replaces an earlier rule for `op`.
  void FailNext(FileOp op, int err, int count = 1, int skip = 0);
  void FailAlways(FileOp op, int err) { FailNext(op, err, -1); }
  // Ends every rule of FailNext and set_refuse_direct.
  void ClearFaults();
  // Opens with OpenOptions::direct fail with EINVAL, as on a file system
  // without O_DIRECT.
  void set_refuse_direct(bool refuse);
  // `fn` runs before every call of `op` (its path as the argument), outside
  // this Env's lock: a test makes another change at that very moment (e.g.
  // between a write's data and its commit). Null: none.
  void set_before(FileOp op, std::function<void(const std::string&)> fn);

  // Calls of `op` made through this Env, failed or not.
  int64_t calls(FileOp op) const;
  // Calls failed by a rule.
  int64_t injected() const;

  // A power loss (see above): every tracked file goes back to what stable
  // storage holds. The caller has closed the files it wrote (a ChunkStore
  // holds none between calls). The Env goes on tracking from there, with
  // every file synced. An error when the base Env failed to put one back.
  absl::Status DropUnsyncedData();
  // The tracked paths whose bytes or existence DropUnsyncedData would change.
  std::vector<std::string> UnsyncedFiles();

  // Env.
  absl::StatusOr<std::unique_ptr<File>> Open(const std::string& path,
                                             const OpenOptions& options) override;
  absl::Status CreateDir(const std::string& path) override;
  absl::Status Remove(const std::string& path) override;
  absl::Status SyncDir(const std::string& path) override;
  // Not failed by any rule (no FileOp for it).
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    return base_->ListDir(path);
  }

  // For the Files it opens: the rule for a call of `op` on `path`.
  absl::Status Inject(FileOp op, const std::string& path);
  // A File of this Env synced `path`: its bytes now are durable.
  void NoteSynced(const std::string& path);

 private:
  // What stable storage holds for one path.
  struct Durable {
    bool exists = false;
    std::string data;
  };
  struct Rule {
    int err = 0;
    int64_t skip = 0;
    int64_t count = 0;  // < 0: for ever
  };

  // Starts tracking `path` (as it is now) unless it is tracked already.
  void TrackLocked(const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The file as the base Env has it now.
  absl::StatusOr<Durable> ReadNow(const std::string& path);

  Env* const base_;
  mutable absl::Mutex mu_;
  std::array<Rule, kFileOpCount> rules_ ABSL_GUARDED_BY(mu_);
  std::array<int64_t, kFileOpCount> calls_ ABSL_GUARDED_BY(mu_) = {};
  int64_t injected_ ABSL_GUARDED_BY(mu_) = 0;
  bool refuse_direct_ ABSL_GUARDED_BY(mu_) = false;
  std::array<std::function<void(const std::string&)>, kFileOpCount> before_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Durable> durable_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_COMMON_FAULT_INJECTION_ENV_H_
