#include "server/lease_table.h"

#include <algorithm>
#include <utility>

namespace grantfs {

LeaseTable::LeaseTable(const LeaseTableOptions& options, Push push)
    : options_(options), push_(std::move(push)) {}

void LeaseTable::DropKeys(Holder& h, uint64_t client_id) {
  for (const LeaseKey& key : h.keys) {
    CountGrant(key, -1);
    auto it = leases_.find(key);
    if (it == leases_.end()) continue;
    it->second.erase(client_id);
    if (it->second.empty()) leases_.erase(it);
  }
  held_ -= std::min(held_, h.keys.size());
  h.keys.clear();
}

void LeaseTable::ForgetRecalls(Holder& h, uint64_t client_id, uint64_t seq) {
  while (!h.recalling.empty() && h.recalling.front().first <= seq) {
    const auto [s, key] = h.recalling.front();
    h.recalling.pop_front();
    CountGrant(key, -1);
    auto it = recalling_.find(key);
    if (it == recalling_.end()) continue;
    auto& v = it->second;
    v.erase(std::remove(v.begin(), v.end(), std::make_pair(client_id, s)), v.end());
    if (v.empty()) recalling_.erase(it);
  }
}

uint64_t LeaseTable::StreamUp(uint64_t client_id, bool leases) {
  absl::MutexLock l(&mu_);
  if (!leases) {
    auto it = holders_.find(client_id);
    if (it != holders_.end()) {
      DropKeys(it->second, client_id);
      ForgetRecalls(it->second, client_id, UINT64_MAX);
      holders_.erase(it);
    }
    return 0;
  }
  Holder& h = holders_[client_id];
  // The mount keeps only leases of requests it sent after it received this
  // stream's first batch, sent after this: registered after this.
  DropKeys(h, client_id);
  h.up = true;
  h.token = ++next_token_;
  ++h.streams;
  h.inherited = false;
  // A subscription renews like a heartbeat (the mount counts from when it
  // sent it).
  h.until = std::max(h.until, options_.clock->Now() + options_.term);
  // Recalls sent before are moot: the mount dropped everything.
  ForgetRecalls(h, client_id, UINT64_MAX);
  h.acked = h.sent;
  h.unacked_sent.clear();
  return h.token;
}

void LeaseTable::StreamDown(uint64_t client_id, uint64_t token) {
  absl::MutexLock l(&mu_);
  auto it = holders_.find(client_id);
  if (it == holders_.end() || it->second.token != token) return;
  // Its leases stay until they run out: the mount may not have noticed yet.
  it->second.up = false;
}

bool LeaseTable::Renew(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  auto it = holders_.find(client_id);
  if (it == holders_.end()) return false;
  Holder& h = it->second;
  const absl::Time now = options_.clock->Now();
  if (!h.up) return false;
  if (!h.unacked_sent.empty() && now - h.unacked_sent.front() > options_.ack_wait) return false;
  // Leases that ran out here may have missed recalls (Recall skips them):
  // renewed from now on, but the mount is told no, and drops what it has.
  const bool continuous = h.until > now;
  h.until = std::max(h.until, now + options_.term);
  return continuous;
}

void LeaseTable::Forget(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  auto it = holders_.find(client_id);
  if (it == holders_.end()) return;
  DropKeys(it->second, client_id);
  ForgetRecalls(it->second, client_id, UINT64_MAX);
  holders_.erase(it);
}

void LeaseTable::Inherit(absl::Span<const uint64_t> client_ids, absl::Time until,
                         bool with_grants) {
  absl::MutexLock l(&mu_);
  for (uint64_t id : client_ids) {
    Holder& h = holders_[id];
    h.inherited = true;
    h.inherited_until = std::max(h.inherited_until, until);
  }
  inherited_until_ = std::max(inherited_until_, until);
  if (with_grants) {
    inherited_grants_until_ns_.store(
        std::max(inherited_grants_until_ns_.load(), absl::ToUnixNanos(until)));
  }
}

bool LeaseTable::GrantsOut() const {
  if (grants_out_.load(std::memory_order_acquire) > 0) return true;
  const int64_t inherited = inherited_grants_until_ns_.load(std::memory_order_acquire);
  return inherited != 0 && absl::ToUnixNanos(options_.clock->Now()) < inherited;
}

void LeaseTable::CountGrant(const LeaseKey& key, int delta) {
  if (key.kind == LeaseKey::kNsGrant) grants_out_.fetch_add(delta, std::memory_order_acq_rel);
}

bool LeaseTable::HeldByOther(uint64_t origin, absl::Span<const LeaseKey> keys) {
  absl::MutexLock l(&mu_);
  const absl::Time now = options_.clock->Now();
  if (inherited_until_ > now) {
    for (const auto& [id, h] : holders_) {
      if (h.inherited && h.inherited_until > now && id != origin) return true;  // may hold anything
    }
  }
  for (const LeaseKey& key : keys) {
    if (HeldByOtherLocked(origin, key)) return true;
  }
  return false;
}

bool LeaseTable::BeginApply(uint64_t client_id, absl::Span<const LeaseKey> keys) {
  absl::MutexLock l(&mu_);
  auto it = holders_.find(client_id);
  if (it == holders_.end()) return false;
  Holder& h = it->second;
  const absl::Time now = options_.clock->Now();
  const bool inherited = h.inherited && h.inherited_until > now;
  if (inherited) {
    // It may replay into what it held; not into what this server granted
    // to another since.
    for (const LeaseKey& key : keys) {
      if (HeldByOtherLocked(client_id, key)) return false;
    }
  } else {
    if (h.until <= now) return false;
    for (const LeaseKey& key : keys) {
      if (h.keys.contains(key)) continue;
      bool recalled = false;
      for (const auto& [seq, k] : h.recalling) recalled = recalled || (k == key && seq > h.acked);
      if (!recalled) return false;
    }
  }
  ++h.applying;
  return true;
}

void LeaseTable::GrantCreated(uint64_t client_id, uint64_t dir) {
  absl::MutexLock l(&mu_);
  const LeaseKey key = LeaseKey::NsGrant(dir);
  auto it = holders_.find(client_id);
  if (it == holders_.end()) return;
  Holder& h = it->second;
  const absl::Time now = options_.clock->Now();
  if (h.until <= now && !(h.inherited && h.inherited_until > now)) return;
  if (h.keys.insert(key).second) {
    leases_[key].insert(client_id);
    ++held_;
    CountGrant(key, +1);
  }
}

void LeaseTable::EndApply(uint64_t client_id, int n) {
  absl::MutexLock l(&mu_);
  auto it = holders_.find(client_id);
  if (it != holders_.end()) it->second.applying = std::max(0, it->second.applying - n);
}

void LeaseTable::Drop(uint64_t client_id, const LeaseKey& key) {
  absl::MutexLock l(&mu_);
  auto it = holders_.find(client_id);
  if (it == holders_.end() || !it->second.keys.erase(key)) return;
  auto held = leases_.find(key);
  if (held != leases_.end()) {
    held->second.erase(client_id);
    if (held->second.empty()) leases_.erase(held);
  }
  --held_;
  CountGrant(key, -1);
}

bool LeaseTable::HeldByOtherLocked(uint64_t origin, const LeaseKey& key) {
  if (auto it = leases_.find(key); it != leases_.end()) {
    for (uint64_t id : it->second) {
      if (id != origin) return true;
    }
  }
  if (auto r = recalling_.find(key); r != recalling_.end()) {
    for (const auto& [id, seq] : r->second) {
      if (id != origin) return true;
    }
  }
  return false;
}

bool LeaseTable::Takes(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  auto it = holders_.find(client_id);
  return it != holders_.end() && it->second.up && it->second.until > options_.clock->Now();
}

uint64_t LeaseTable::Epoch() {
  absl::MutexLock l(&mu_);
  return epoch_;
}

bool LeaseTable::Grant(uint64_t client_id, const LeaseKey& key, uint64_t epoch) {
  absl::MutexLock l(&mu_);
  auto changed = changed_.find(key);
  if ((changed == changed_.end() ? floor_ : changed->second) >= epoch) return false;
  auto it = holders_.find(client_id);
  if (it == holders_.end()) return false;
  Holder& h = it->second;
  const absl::Time now = options_.clock->Now();
  if (!h.up || h.until <= now) return false;
  if (options_.recorded && !options_.recorded(client_id)) return false;
  // Another session's namespace grant covers the directory: its holder
  // changes it on its own, so nobody else caches it, and nobody else is
  // granted it (one holder at a time).
  if (grants_out_.load(std::memory_order_acquire) > 0 &&
      HeldByOtherLocked(client_id, LeaseKey::NsGrant(key.ino))) {
    return false;
  }
  auto heat = heat_.find(key);
  if (heat != heat_.end() && heat->second.hot_until > now) {
    ++stats_.refused_hot;
    return false;
  }
  if (h.keys.insert(key).second) {
    if (held_ >= options_.max_leases) {
      h.keys.erase(key);
      return false;
    }
    leases_[key].insert(client_id);
    ++held_;
    CountGrant(key, +1);
    if (h.keys.size() > options_.max_leases_per_holder) Evict(h, client_id, key, now);
  }
  ++stats_.granted;
  return true;
}

void LeaseTable::Evict(Holder& h, uint64_t client_id, const LeaseKey& keep, absl::Time now) {
  const size_t n = std::clamp<size_t>(options_.max_leases_per_holder / 16, 1, 1024);
  // Attribute leases first: a directory's recall costs the mount more (its
  // kernel names are checked again). Which ones is arbitrary (the server
  // does not know which the mount still uses).
  std::vector<LeaseKey> victims;
  victims.reserve(n);
  for (LeaseKey::Kind kind : {LeaseKey::kAttr, LeaseKey::kDir}) {
    for (const LeaseKey& k : h.keys) {
      if (victims.size() == n) break;
      if (k.kind == kind && !(k == keep)) victims.push_back(k);
    }
  }
  for (const LeaseKey& k : victims) {
    h.keys.erase(k);
    auto it = leases_.find(k);
    if (it != leases_.end()) {
      it->second.erase(client_id);
      if (it->second.empty()) leases_.erase(it);
    }
    --held_;
    SendRecall(h, client_id, k, now);
  }
  stats_.evicted += victims.size();
}

uint64_t LeaseTable::SendRecall(Holder& h, uint64_t client_id, const LeaseKey& key,
                                absl::Time now) {
  ++h.sent;
  h.unacked_sent.push_back(now);
  h.recalling.emplace_back(h.sent, key);
  recalling_[key].emplace_back(client_id, h.sent);
  proto::Invalidation inv;
  inv.set_recall(h.sent);
  switch (key.kind) {
    case LeaseKey::kAttr:
      inv.set_ino(key.ino);
      break;
    case LeaseKey::kDir:
      inv.set_dir(key.ino);
      break;
    case LeaseKey::kNsGrant:
      inv.set_grant(key.ino);
      break;
  }
  // A push that fails ends the stream: the mount re-subscribes, having
  // dropped everything.
  push_(client_id, inv);
  ++stats_.recalls;
  return h.sent;
}

uint64_t LeaseTable::ChangeEpochLocked() {
  const uint64_t epoch = epoch_++;
  if (changed_.size() > (1u << 20)) {
    changed_.clear();
    floor_ = epoch;
  }
  return epoch;
}

void LeaseTable::Touch(absl::Span<const LeaseKey> keys) {
  absl::MutexLock l(&mu_);
  const uint64_t epoch = ChangeEpochLocked();
  for (const LeaseKey& key : keys) changed_[key] = epoch;
}

void LeaseTable::BeginChange(absl::Span<const uint64_t> inos) {
  absl::MutexLock l(&mu_);
  for (uint64_t ino : inos) ++changing_[ino];
}

void LeaseTable::EndChange(absl::Span<const uint64_t> inos) {
  absl::MutexLock l(&mu_);
  for (uint64_t ino : inos) {
    auto it = changing_.find(ino);
    if (it != changing_.end() && --it->second <= 0) changing_.erase(it);
  }
}

bool LeaseTable::Changing(uint64_t ino) {
  absl::MutexLock l(&mu_);
  return changing_.contains(ino);
}

bool LeaseTable::Hot(const LeaseKey& key) {
  absl::MutexLock l(&mu_);
  auto heat = heat_.find(key);
  return heat != heat_.end() && heat->second.hot_until > options_.clock->Now();
}

void LeaseTable::CountRecall(const LeaseKey& key, absl::Time now) {
  if (options_.hot_recalls <= 0) return;
  if (heat_.size() > 65536) {
    for (auto it = heat_.begin(); it != heat_.end();) {
      auto cur = it++;
      if (cur->second.hot_until <= now && now - cur->second.window_start > options_.hot_window) {
        heat_.erase(cur);
      }
    }
  }
  Heat& ht = heat_[key];
  if (now - ht.window_start > options_.hot_window) {
    ht.window_start = now;
    ht.recalls = 0;
  }
  if (++ht.recalls >= options_.hot_recalls) ht.hot_until = now + options_.cool_down;
}

bool LeaseTable::Done(const Wait& w, absl::Time now) {
  auto it = holders_.find(w.client_id);
  if (it == holders_.end()) return true;
  const Holder& h = it->second;
  if (h.streams != w.streams) return true;  // it re-subscribed: holds nothing old
  // A session still applying its log is waited for even past its lease
  // (BeginApply): what it applies was acknowledged to its programs.
  // An inherited session is waited for only for the window: two that
  // replay their logs may wait for each other.
  if (w.seq == 0) return !h.inherited || h.inherited_until <= now;
  return h.acked >= w.seq || (h.until <= now && h.applying == 0);
}

void LeaseTable::Recall(uint64_t origin, absl::Span<const LeaseKey> keys, bool in_grant) {
  if (keys.empty()) return;
  absl::MutexLock l(&mu_);
  const absl::Time now = options_.clock->Now();
  const uint64_t epoch = ChangeEpochLocked();
  std::vector<Wait> waits;
  for (const LeaseKey& key : keys) {
    changed_[key] = epoch;
    // Holders an earlier recall of this key (a change, an eviction) has not
    // reached yet may still answer from their copy: waited for too.
    if (auto r = recalling_.find(key); r != recalling_.end()) {
      for (const auto& [id, seq] : r->second) {
        auto hit = holders_.find(id);
        if (id != origin && hit != holders_.end()) waits.push_back({id, seq, hit->second.streams});
      }
    }
    auto it = leases_.find(key);
    if (it == leases_.end()) continue;
    bool others = false;
    for (auto c = it->second.begin(); c != it->second.end();) {
      const uint64_t id = *c;
      if (id == origin) {
        ++c;
        continue;
      }
      others = true;
      it->second.erase(c++);
      --held_;
      auto hit = holders_.find(id);
      if (hit == holders_.end()) {
        CountGrant(key, -1);
        continue;
      }
      Holder& h = hit->second;
      h.keys.erase(key);
      if (h.until <= now && h.applying == 0) {  // its leases ran out
        CountGrant(key, -1);
        continue;
      }
      // The wait ends when the mount acknowledges, re-subscribes or its
      // leases run out.
      const uint64_t seq = SendRecall(h, id, key, now);
      waits.push_back({id, seq, h.streams});
    }
    if (it->second.empty()) leases_.erase(it);
    if (others) CountRecall(key, now);
  }
  if (inherited_until_ > now && !in_grant) {
    for (const auto& [id, h] : holders_) {
      if (h.inherited && h.inherited_until > now && id != origin) {
        waits.push_back({id, 0, h.streams});
      }
    }
  }
  if (waits.empty()) return;
  ++stats_.recall_waits;
  for (;;) {
    const absl::Time t = options_.clock->Now();
    bool all = true;
    for (const Wait& w : waits) all = all && Done(w, t);
    if (all) break;
    // Wakes on an ack, a new stream, a forgotten session; time-based ends
    // (a lease running out) are polled on the injected clock.
    auto changed = [this, &waits, t]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const Wait& w : waits) {
        if (!Done(w, t)) return false;
      }
      return true;
    };
    mu_.AwaitWithTimeout(absl::Condition(&changed), absl::Milliseconds(20));
  }
  for (const Wait& w : waits) {
    auto it = holders_.find(w.client_id);
    if (it != holders_.end() && it->second.streams == w.streams && w.seq != 0 &&
        it->second.acked < w.seq) {
      ++stats_.lapsed;
    }
  }
}

void LeaseTable::Ack(uint64_t client_id, uint64_t seq) {
  absl::MutexLock l(&mu_);
  auto it = holders_.find(client_id);
  if (it == holders_.end()) return;
  Holder& h = it->second;
  seq = std::min(seq, h.sent);
  while (h.acked < seq) {
    ++h.acked;
    if (!h.unacked_sent.empty()) h.unacked_sent.pop_front();
  }
  ForgetRecalls(h, client_id, h.acked);
}

LeaseStats LeaseTable::Stats() {
  absl::MutexLock l(&mu_);
  LeaseStats s = stats_;
  s.held = held_;
  return s;
}

size_t LeaseTable::HeldBy(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  auto it = holders_.find(client_id);
  return it == holders_.end() ? 0 : it->second.keys.size();
}

}  // namespace grantfs
