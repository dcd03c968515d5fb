#include "server/session_table.h"

#include <algorithm>
#include <random>

#include "glog/logging.h"

namespace grantfs {

SessionTable::SessionTable(Clock* clock, absl::Duration lease, size_t max_queued)
    : clock_(clock), lease_(lease), max_queued_(max_queued) {}

namespace {
uint64_t NonZeroRandom() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  uint64_t r;
  do {
    r = rng();
  } while (r == 0);
  return r;
}
}  // namespace

uint64_t SessionTable::Open(const std::string& client_name, const std::string& peer) {
  absl::MutexLock l(&mu_);
  uint64_t id;
  do {
    id = NonZeroRandom();
  } while (sessions_.count(id));
  Session& s = sessions_[id];
  s.name = client_name;
  s.peer = peer;
  s.expires = clock_->Now() + lease_;
  return id;
}

bool SessionTable::BelongsTo(uint64_t client_id, const std::string& peer) {
  if (client_id == 0) return true;
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(client_id);
  return it == sessions_.end() || it->second.peer.empty() || it->second.peer == peer;
}

SessionTable::TouchResult SessionTable::Touch(uint64_t client_id, const std::string& peer) {
  if (client_id == 0) return TouchResult::kRenewed;
  absl::MutexLock l(&mu_);
  if (forgetting_.count(client_id)) return TouchResult::kEnding;
  auto [it, created] = sessions_.try_emplace(client_id);
  if (created) {
    it->second.name = "(reconnected)";
    it->second.lost = NonZeroRandom();
  }
  if (it->second.peer.empty()) it->second.peer = peer;
  it->second.expires = clock_->Now() + lease_;
  return created ? TouchResult::kCreated : TouchResult::kRenewed;
}

uint64_t SessionTable::LostToken(uint64_t client_id, uint64_t acked) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(client_id);
  if (it == sessions_.end()) return 0;
  if (acked != 0 && it->second.lost == acked) it->second.lost = 0;
  return it->second.lost;
}

void SessionTable::MarkRecorded(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(client_id);
  if (it != sessions_.end()) it->second.recorded = true;
}

bool SessionTable::Recorded(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(client_id);
  return it != sessions_.end() && it->second.recorded;
}

void SessionTable::Restore(uint64_t client_id, const std::string& client_name,
                           const std::string& peer, bool recorded, absl::Duration lease) {
  if (client_id == 0) return;
  absl::MutexLock l(&mu_);
  Session& s = sessions_[client_id];
  s.recorded = s.recorded || recorded;
  if (s.name.empty() || s.name == "(reconnected)") s.name = client_name;
  if (s.peer.empty()) s.peer = peer;
  s.expires = std::max(s.expires, clock_->Now() + std::max(lease_, lease));
}

void SessionTable::StartGrace() {
  absl::MutexLock l(&mu_);
  for (auto& [id, s] : sessions_) {
    if (s.reclaiming) continue;
    s.reclaiming = true;
    reclaiming_.fetch_add(1, std::memory_order_release);
  }
}

bool SessionTable::Reclaimed(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(client_id);
  if (it == sessions_.end() || !it->second.reclaiming) return false;
  it->second.reclaiming = false;
  return reclaiming_.fetch_sub(1, std::memory_order_acq_rel) == 1;
}

std::vector<uint64_t> SessionTable::EndGrace() {
  absl::MutexLock l(&mu_);
  std::vector<uint64_t> ids;
  for (auto& [id, s] : sessions_) {
    if (!s.reclaiming) continue;
    s.reclaiming = false;
    reclaiming_.fetch_sub(1, std::memory_order_acq_rel);
    ids.push_back(id);
  }
  return ids;
}

void SessionTable::Forgotten(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  forgetting_.erase(client_id);
}

void SessionTable::RenewAll() {
  absl::MutexLock l(&mu_);
  const absl::Time expires = clock_->Now() + lease_;
  for (auto& [id, s] : sessions_) s.expires = std::max(s.expires, expires);
}

std::map<uint64_t, uint32_t> SessionTable::ForgetOpens(uint64_t client_id, const Session& s) {
  forgetting_.insert(client_id);
  if (s.reclaiming) reclaiming_.fetch_sub(1, std::memory_order_acq_rel);
  std::map<uint64_t, uint32_t> counts;
  for (const auto& [ino, handles] : s.open) {
    const uint32_t n = static_cast<uint32_t>(handles.size());
    counts[ino] = n;
    auto it = open_total_.find(ino);
    if (it == open_total_.end()) continue;
    it->second -= std::min(it->second, n);
    if (it->second == 0) open_total_.erase(it);
  }
  return counts;
}

std::map<uint64_t, uint32_t> SessionTable::Close(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(client_id);
  if (it == sessions_.end()) return {};
  std::map<uint64_t, uint32_t> open = ForgetOpens(it->first, it->second);
  sessions_.erase(it);
  return open;
}

std::vector<std::pair<uint64_t, std::map<uint64_t, uint32_t>>> SessionTable::Expire() {
  absl::MutexLock l(&mu_);
  const absl::Time now = clock_->Now();
  std::vector<std::pair<uint64_t, std::map<uint64_t, uint32_t>>> gone;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second.expires > now) {
      ++it;
      continue;
    }
    gone.emplace_back(it->first, ForgetOpens(it->first, it->second));
    it = sessions_.erase(it);
  }
  return gone;
}

bool SessionTable::OpenFile(uint64_t client_id, uint64_t ino, uint64_t handle) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(client_id);
  if (it == sessions_.end()) return false;
  std::vector<uint64_t>& handles = it->second.open[ino];
  if (handle != 0 && std::find(handles.begin(), handles.end(), handle) != handles.end()) {
    return true;
  }
  handles.push_back(handle);
  ++open_total_[ino];
  return true;
}

uint32_t SessionTable::CloseFile(uint64_t client_id, uint64_t ino, uint64_t handle) {
  absl::MutexLock l(&mu_);
  auto sit = sessions_.find(client_id);
  if (sit != sessions_.end()) {
    auto oit = sit->second.open.find(ino);
    if (oit != sit->second.open.end()) {
      std::vector<uint64_t>& handles = oit->second;
      auto h = std::find(handles.begin(), handles.end(), handle);
      if (h != handles.end()) {
        handles.erase(h);
        if (handles.empty()) sit->second.open.erase(oit);
        auto tit = open_total_.find(ino);
        if (tit != open_total_.end() && --tit->second == 0) open_total_.erase(tit);
      }
    }
  }
  auto tit = open_total_.find(ino);
  return tit == open_total_.end() ? 0 : tit->second;
}

uint32_t SessionTable::OpenCount(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto it = open_total_.find(ino);
  return it == open_total_.end() ? 0 : it->second;
}

bool SessionTable::HoldsOpen(uint64_t client_id, uint64_t ino, uint64_t handle) {
  if (handle == 0) return false;
  absl::MutexLock l(&mu_);
  auto sit = sessions_.find(client_id);
  if (sit == sessions_.end()) return false;
  auto oit = sit->second.open.find(ino);
  if (oit == sit->second.open.end()) return false;
  return std::find(oit->second.begin(), oit->second.end(), handle) != oit->second.end();
}

uint32_t SessionTable::OpenCountBy(uint64_t client_id, uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto sit = sessions_.find(client_id);
  if (sit == sessions_.end()) return 0;
  auto oit = sit->second.open.find(ino);
  return oit == sit->second.open.end() ? 0 : static_cast<uint32_t>(oit->second.size());
}

proto::OrphanRecord SessionTable::Holders(uint64_t ino) {
  absl::MutexLock l(&mu_);
  proto::OrphanRecord out;
  if (open_total_.count(ino) == 0) return out;
  for (const auto& [id, s] : sessions_) {
    auto oit = s.open.find(ino);
    if (oit == s.open.end()) continue;
    proto::OrphanRecord::Holder* h = out.add_holders();
    h->set_client_id(id);
    for (uint64_t handle : oit->second) h->add_handles(handle);
  }
  return out;
}

void SessionTable::Publish(uint64_t origin, const proto::Invalidation& inv) {
  absl::MutexLock l(&mu_);
  for (auto& [id, s] : sessions_) {
    if (id == origin) continue;
    s.queue.push_back(inv);
    if (s.queue.size() > max_queued_) {
      // A recall is never dropped: the stream is ended instead.
      if (s.queue.front().recall() != 0) s.overflowed = true;
      s.queue.pop_front();
    }
  }
}

bool SessionTable::PushRecall(uint64_t client_id, const proto::Invalidation& inv) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(client_id);
  if (it == sessions_.end()) return false;
  if (it->second.queue.size() >= max_queued_) {
    if (!it->second.overflowed) {
      LOG(WARNING) << "session " << client_id << ": recall queue full; its stream is ended";
    }
    it->second.overflowed = true;
    return false;
  }
  it->second.queue.push_back(inv);
  return true;
}

uint64_t SessionTable::NewStream(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(client_id);
  if (it == sessions_.end()) return 0;
  return ++it->second.stream;
}

bool SessionTable::Drain(uint64_t client_id, absl::Duration timeout, proto::InvalidationBatch* out,
                         uint64_t stream) {
  absl::MutexLock l(&mu_);
  auto stale = [this, client_id, stream]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = sessions_.find(client_id);
    return stream != 0 && it != sessions_.end() && it->second.stream != stream;
  };
  auto ready = [this, client_id, &stale]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = sessions_.find(client_id);
    return shutting_down_ || it == sessions_.end() || !it->second.queue.empty() ||
           it->second.recall_bytes > 0 || it->second.overflowed || stale();
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  auto it = sessions_.find(client_id);
  if (shutting_down_ || it == sessions_.end() || stale()) return false;
  if (it->second.overflowed) {
    // The mount re-subscribes and drops every lease: what is queued is moot.
    it->second.overflowed = false;
    it->second.queue.clear();
    return false;
  }
  constexpr size_t kMaxBatch = 1024;
  while (!it->second.queue.empty() && out->items_size() < static_cast<int>(kMaxBatch)) {
    *out->add_items() = std::move(it->second.queue.front());
    it->second.queue.pop_front();
  }
  if (it->second.recall_bytes > 0) {
    out->set_recall_bytes(it->second.recall_bytes);
    it->second.recall_bytes = 0;
    ++it->second.recalls;
    grant_recalls_.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

bool SessionTable::Recall(uint64_t client_id, uint64_t bytes) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(client_id);
  if (it == sessions_.end() || bytes == 0) return false;
  it->second.recall_bytes = std::max(it->second.recall_bytes, bytes);
  return true;
}

void SessionTable::Shutdown() {
  absl::MutexLock l(&mu_);
  shutting_down_ = true;
}

void SessionTable::Reported(uint64_t client_id, const proto::MountReport& report) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(client_id);
  if (it == sessions_.end()) return;
  it->second.report = report;
  it->second.reported = clock_->Now();
}

void SessionTable::CameFrom(uint64_t client_id, const std::string& address) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(client_id);
  if (it != sessions_.end()) it->second.address = address;
}

std::vector<proto::SessionInfo> SessionTable::List() {
  absl::MutexLock l(&mu_);
  std::vector<proto::SessionInfo> out;
  for (const auto& [id, s] : sessions_) {
    proto::SessionInfo info;
    info.set_client_id(id);
    info.set_client_name(s.name);
    info.set_peer(s.peer);
    info.set_address(s.address);
    const absl::Duration left = s.expires - clock_->Now();
    info.set_lease_left_ms(absl::ToInt64Milliseconds(left));
    info.set_lease_expires_ms(absl::ToUnixMillis(absl::Now() + left));
    uint64_t n = 0;
    for (const auto& [ino, handles] : s.open) n += handles.size();
    info.set_open_files(n);
    info.set_recalls(s.recalls);
    info.set_reclaiming(s.reclaiming);
    if (s.reported != absl::InfinitePast()) {
      info.set_heartbeat_age_ms(absl::ToInt64Milliseconds(clock_->Now() - s.reported));
      *info.mutable_report() = s.report;
    }
    out.push_back(info);
  }
  return out;
}

}  // namespace grantfs
