#include "client/open_handles.h"

namespace grantfs {

uint64_t OpenHandleTable::BeginOpen(uint64_t ino) {
  absl::MutexLock l(&mu_);
  const uint64_t handle = ++next_handle_;
  handles_[handle] = Entry{ino, generation_, false};
  return handle;
}

void OpenHandleTable::EndOpen(uint64_t handle, bool ok) {
  absl::MutexLock l(&mu_);
  auto it = handles_.find(handle);
  if (it == handles_.end() || it->second.open) return;
  // A reclaim waits for this one (BeginReclaim).
  if (it->second.generation < generation_) --older_pending_;
  if (!ok) {
    handles_.erase(it);
    return;
  }
  it->second.open = true;
  // Its RPC may have reached a server other than the one the reclaim in
  // flight goes to, which does not know it.
  if (reclaiming_ && !named_.contains(handle)) needs_reclaim_ = true;
}

void OpenHandleTable::Release(uint64_t handle) {
  absl::MutexLock l(&mu_);
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  // The reclaim in flight may reach the server after this Release does,
  // and open the handle there again.
  if (reclaiming_ && named_.contains(handle)) release_again_.emplace_back(it->second.ino, handle);
  handles_.erase(it);
}

OpenHandleTable::Opens OpenHandleTable::BeginReclaim() {
  absl::MutexLock l(&mu_);
  ++generation_;
  older_pending_ = 0;
  for (const auto& [handle, e] : handles_) {
    if (!e.open) ++older_pending_;
  }
  needs_reclaim_ = false;
  // An Open in flight may have reached the server that is gone: once it
  // ends, its handle is named too. Opens begun from now on are not waited
  // for (no open waits for a reclaim, and no reclaim for a newer open).
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return older_pending_ == 0; };
  mu_.Await(absl::Condition(&settled));
  Opens opens;
  named_.clear();
  for (const auto& [handle, e] : handles_) {
    if (!e.open) continue;
    opens.emplace_back(e.ino, handle);
    named_.insert(handle);
  }
  reclaiming_ = true;
  return opens;
}

OpenHandleTable::Opens OpenHandleTable::EndReclaim(bool ok) {
  absl::MutexLock l(&mu_);
  reclaiming_ = false;
  named_.clear();
  if (!ok) needs_reclaim_ = true;
  Opens again;
  again.swap(release_again_);
  return again;
}

bool OpenHandleTable::NeedsReclaim() {
  absl::MutexLock l(&mu_);
  return needs_reclaim_;
}

uint64_t OpenHandleTable::generation() {
  absl::MutexLock l(&mu_);
  return generation_;
}

size_t OpenHandleTable::open_count() {
  absl::MutexLock l(&mu_);
  size_t n = 0;
  for (const auto& [handle, e] : handles_) n += e.open ? 1 : 0;
  return n;
}

bool OpenHandleTable::IsOpen(uint64_t ino) {
  absl::MutexLock l(&mu_);
  for (const auto& [handle, e] : handles_) {
    if (e.ino == ino) return true;
  }
  return false;
}

}  // namespace grantfs
