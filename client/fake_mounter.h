// A node's mounts in memory (client/node_mounts.h NodeMounter), for the
// node agent's unit tests and fuzz target. Test code only.
#ifndef GRANTFS_CLIENT_FAKE_MOUNTER_H_
#define GRANTFS_CLIENT_FAKE_MOUNTER_H_

#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/node_mounts.h"

namespace grantfs {

// A node's mounts in memory. Thread-safe.
class FakeMounter : public NodeMounter {
 public:
  // Every record Mount was called with passes this (the fuzz target's check).
  using MountCheck = bool (*)(const proto::GlobalMountRecord&);
  MountCheck check = nullptr;

  MountAt Probe(const std::string& path) override {
    absl::MutexLock l(&mu_);
    auto it = at_.find(path);
    return it == at_.end() ? MountAt::kNothing : it->second;
  }
  absl::Status Mount(const proto::GlobalMountRecord& rec) override {
    if (check != nullptr && !check(rec)) abort();
    absl::MutexLock l(&mu_);
    ++mounts_;
    if (!fail_.empty()) return absl::FailedPreconditionError(fail_);
    at_[rec.path()] = MountAt::kGrantFs;
    return absl::OkStatus();
  }
  absl::Status Unmount(const std::string& path, bool lazy) override {
    absl::MutexLock l(&mu_);
    ++unmounts_;
    if (lazy) ++lazy_;
    if (!busy_.empty() && !lazy) return absl::FailedPreconditionError(busy_);
    at_.erase(path);
    return absl::OkStatus();
  }
  bool OfThisCluster(const std::string& path) override {
    absl::MutexLock l(&mu_);
    return foreign_.count(path) == 0;
  }
  // The GrantFS mount at `path` is of another cluster (OfThisCluster false).
  void Foreign(const std::string& path) {
    absl::MutexLock l(&mu_);
    foreign_.insert(path);
  }
  void Set(const std::string& path, MountAt at) {
    absl::MutexLock l(&mu_);
    at_[path] = at;
  }
  void Fail(const std::string& why) {
    absl::MutexLock l(&mu_);
    fail_ = why;
  }
  void Busy(const std::string& who) {
    absl::MutexLock l(&mu_);
    busy_ = who;
  }
  int mounts() {
    absl::MutexLock l(&mu_);
    return mounts_;
  }
  int unmounts() {
    absl::MutexLock l(&mu_);
    return unmounts_;
  }
  int lazy() {
    absl::MutexLock l(&mu_);
    return lazy_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, MountAt> at_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> foreign_ ABSL_GUARDED_BY(mu_);
  std::string fail_ ABSL_GUARDED_BY(mu_), busy_ ABSL_GUARDED_BY(mu_);
  int mounts_ ABSL_GUARDED_BY(mu_) = 0;
  int unmounts_ ABSL_GUARDED_BY(mu_) = 0;
  int lazy_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_FAKE_MOUNTER_H_
