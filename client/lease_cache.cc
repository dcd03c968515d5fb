#include "client/lease_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

namespace grantfs {
namespace {
constexpr size_t kMaxAbsentXattrs = 8;
}  // namespace

LeaseCache::LeaseCache(const LeaseCacheOptions& options) : options_(options) {}

LeaseCache::Ticket LeaseCache::Take() {
  absl::MutexLock l(&mu_);
  return Ticket{seq_};
}

void LeaseCache::SetTerm(absl::Duration term) {
  absl::MutexLock l(&mu_);
  // 5 % for the rates of the two clocks, which measure the same term.
  term_ = term - term / 20;
}

void LeaseCache::Renewed(absl::Time sent, std::optional<absl::Duration> term) {
  absl::MutexLock l(&mu_);
  if (term.has_value()) term_ = *term - *term / 20;
  end_ = std::max(end_, sent + term_);
}

void LeaseCache::Subscribed(absl::Time sent, std::optional<absl::Duration> term) {
  absl::MutexLock l(&mu_);
  if (term.has_value()) term_ = *term - *term / 20;
  subscribed_ = true;
  mark_ = ++seq_;
  // Only this stream's server counts now: not max() with what an earlier
  // server's renewal said (its term may have been longer).
  end_ = sent + term_;
}

std::vector<uint64_t> LeaseCache::DropAll(bool stream_down) {
  absl::MutexLock l(&mu_);
  std::vector<uint64_t> inos;
  inos.reserve(attrs_.size());
  for (const auto& [ino, attr] : attrs_) inos.push_back(ino);
  attrs_.clear();
  held_.clear();
  no_xattr_.clear();
  attr_order_.clear();
  dirs_.clear();
  dir_order_.clear();
  pending_.clear();
  names_ = 0;
  mark_ = ++seq_;
  if (stream_down) subscribed_ = false;
  return inos;
}

void LeaseCache::DropAttrs() {
  absl::MutexLock l(&mu_);
  attrs_.clear();
  no_xattr_.clear();
  attr_order_.clear();
  mark_ = ++seq_;
}

bool LeaseCache::Valid() { return subscribed_ && options_.clock->Now() < end_; }

bool LeaseCache::Keeps(const Ticket& t, Kind kind, uint64_t ino, bool own) {
  if (t.seq < mark_ || !Valid()) return false;
  const auto& changes = own ? recalled_ : changed_;
  auto it = changes.find(KeyId{ino, static_cast<uint8_t>(kind)});
  const uint64_t last = it == changes.end() ? floor_ : it->second;
  if (last >= t.seq) {
    ++stats_.refused;
    return false;
  }
  return true;
}

void LeaseCache::Note(Kind kind, uint64_t ino, bool foreign) {
  if (changed_.size() >= options_.max_changed || recalled_.size() >= options_.max_changed) {
    changed_.clear();
    recalled_.clear();
    floor_ = seq_;
  }
  const uint64_t seq = seq_++;
  const KeyId id{ino, static_cast<uint8_t>(kind)};
  changed_[id] = seq;
  if (foreign) recalled_[id] = seq;
}

void LeaseCache::DropDir(uint64_t dir) {
  auto it = dirs_.find(dir);
  if (it != dirs_.end()) {
    names_ -= std::min(names_, it->second.names.size());
    dirs_.erase(it);
  }
  pending_.erase(dir);
}

void LeaseCache::Trim() {
  while (attrs_.size() > options_.max_attrs && !attr_order_.empty()) {
    attrs_.erase(attr_order_.front());
    held_.erase(attr_order_.front());
    no_xattr_.erase(attr_order_.front());
    attr_order_.pop_front();
  }
  if (held_.size() > 2 * options_.max_attrs) {  // own changes dropped their attributes
    held_.clear();
    no_xattr_.clear();
  }
  if (attr_order_.size() > 2 * options_.max_attrs + 16) {
    attr_order_.clear();
    for (const auto& [ino, attr] : attrs_) attr_order_.push_back(ino);
  }
  while (names_ > options_.max_names && !dir_order_.empty()) {
    DropDir(dir_order_.front());
    dir_order_.pop_front();
  }
  if (dir_order_.size() > 2 * dirs_.size() + 16) {
    dir_order_.clear();
    for (const auto& [ino, dir] : dirs_) dir_order_.push_back(ino);
  }
}

std::optional<proto::Attr> LeaseCache::Attr(uint64_t ino, absl::Duration* left) {
  absl::MutexLock l(&mu_);
  auto it = attrs_.find(ino);
  if (it == attrs_.end() || !Valid()) {
    ++stats_.misses;
    return std::nullopt;
  }
  ++stats_.hits;
  if (left != nullptr) *left = end_ - options_.clock->Now();
  return it->second;
}

LeaseCache::Name LeaseCache::Lookup(uint64_t dir, const std::string& name, uint64_t* ino) {
  absl::MutexLock l(&mu_);
  auto it = dirs_.find(dir);
  if (it == dirs_.end() || !Valid()) {
    ++stats_.misses;
    return Name::kUnknown;
  }
  auto n = it->second.names.find(name);
  if (n == it->second.names.end()) {
    if (!it->second.all_names) {
      ++stats_.misses;
      return Name::kUnknown;
    }
    ++stats_.hits;
    return Name::kAbsent;
  }
  ++stats_.hits;
  if (n->second.ino == 0) return Name::kAbsent;
  *ino = n->second.ino;
  return Name::kPresent;
}

uint64_t LeaseCache::ListingEpoch(uint64_t dir) {
  absl::MutexLock l(&mu_);
  auto it = dirs_.find(dir);
  if (it == dirs_.end() || !it->second.all_names || !attrs_.contains(dir) || !Valid()) return 0;
  return it->second.epoch;
}

bool LeaseCache::KnownEmpty(uint64_t dir) {
  absl::MutexLock l(&mu_);
  auto it = dirs_.find(dir);
  if (it == dirs_.end() || !it->second.all_names || !attrs_.contains(dir) || !Valid()) {
    return false;
  }
  for (const auto& [name, e] : it->second.names) {
    if (e.ino != 0) return false;
  }
  return true;
}

bool LeaseCache::List(uint64_t dir, uint64_t cookie, size_t max, proto::ReadDirReply* out) {
  absl::MutexLock l(&mu_);
  auto it = dirs_.find(dir);
  // Only with the directory's attributes leased too: the kernel stamps its
  // copy of a listing with the directory's mtime (and drops the copy when
  // that changes), so the listing must never be newer-looking than the
  // change it misses: a getattr that reached the server (new mtime) beside
  // a listing answered here (old names) would make a stale copy look fresh.
  if (it == dirs_.end() || !it->second.ordered || !attrs_.contains(dir) || !Valid()) {
    ++stats_.misses;
    return false;
  }
  const auto& order = it->second.order;
  out->Clear();
  for (auto e = order.upper_bound(cookie); e != order.end(); ++e) {
    if (static_cast<size_t>(out->entries_size()) >= max) return true;
    auto attr = attrs_.find(e->second.second);
    if (attr == attrs_.end()) {  // its attributes were recalled: ask the server
      ++stats_.misses;
      out->Clear();
      return false;
    }
    proto::DirEntry* d = out->add_entries();
    d->set_name(e->second.first);
    d->set_cookie(e->first);
    *d->mutable_attr() = attr->second;
  }
  out->set_eof(true);
  ++stats_.hits;
  return true;
}

uint32_t LeaseCache::Type(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto it = types_.find(ino);
  return it == types_.end() ? 0 : it->second;
}

bool LeaseCache::AllNames(uint64_t dir, std::vector<std::pair<std::string, uint64_t>>* names,
                          uint64_t* parent) {
  absl::MutexLock l(&mu_);
  auto it = dirs_.find(dir);
  if (it == dirs_.end() || !it->second.all_names || !Valid()) return false;
  // ".." as the server listed it (or as a new directory's was set).
  auto up = it->second.order.find(2);
  if (up == it->second.order.end() || up->second.first != "..") return false;
  *parent = up->second.second;
  names->clear();
  names->reserve(it->second.names.size());
  for (const auto& [name, e] : it->second.names) {
    if (e.ino != 0) names->emplace_back(name, e.ino);
  }
  return true;
}

void LeaseCache::PutAttr(const Ticket& t, const proto::Attr& attr, bool own) {
  absl::MutexLock l(&mu_);
  if (!Keeps(t, Kind::kAttr, attr.ino(), own)) return;
  auto [it, added] = attrs_.insert_or_assign(attr.ino(), attr);
  if (added) attr_order_.push_back(attr.ino());
  held_.insert(attr.ino());
  if (types_.size() >= options_.max_attrs) types_.clear();
  types_[attr.ino()] = attr.mode() & S_IFMT;
  Trim();
}

bool LeaseCache::NoXattrsLocked(uint64_t ino) {
  if (!Valid()) return false;
  auto attr = attrs_.find(ino);
  return attr != attrs_.end() && attr->second.no_xattrs();
}

bool LeaseCache::NoXattrs(uint64_t ino) {
  absl::MutexLock l(&mu_);
  return NoXattrsLocked(ino);
}

bool LeaseCache::XattrAbsent(uint64_t ino, const std::string& name) {
  absl::MutexLock l(&mu_);
  if (!Valid()) return false;
  if (name.rfind("user.", 0) != 0 && NoXattrsLocked(ino)) return true;
  auto it = no_xattr_.find(ino);
  if (it == no_xattr_.end()) return false;
  for (const std::string& n : it->second) {
    if (n == name) return true;
  }
  return false;
}

bool LeaseCache::HoldsAttrLease(uint64_t ino) {
  absl::MutexLock l(&mu_);
  return Valid() && held_.contains(ino);
}

uint64_t LeaseCache::DataStamp(uint64_t ino) {
  absl::MutexLock l(&mu_);
  if (!Valid() || !held_.contains(ino)) return 0;
  // The last recall (a key whose last recall was forgotten counts as
  // recalled at floor_, which is past every number given before), or the
  // last drop of everything, whichever came later: a change numbered
  // mark_ came after the drop (Note gives seq_ as it is, a drop ++seq_).
  auto it = recalled_.find(KeyId{ino, static_cast<uint8_t>(Kind::kAttr)});
  const uint64_t recalled = it != recalled_.end() ? it->second : floor_;
  return recalled >= mark_ ? 2 * recalled + 1 : 2 * mark_;
}

void LeaseCache::DataUnsure(uint64_t ino) {
  absl::MutexLock l(&mu_);
  Note(Kind::kAttr, ino, /*foreign=*/true);
  attrs_.erase(ino);
}

void LeaseCache::PutXattrAbsent(const Ticket& t, uint64_t ino, const std::string& name) {
  absl::MutexLock l(&mu_);
  // Any change of the inode since the ticket (an own write too) and the
  // answer is not kept: an own setxattr may have raced it.
  if (!held_.contains(ino) || !Keeps(t, Kind::kAttr, ino, /*own=*/false)) return;
  std::vector<std::string>& names = no_xattr_[ino];
  if (names.size() >= kMaxAbsentXattrs) names.erase(names.begin());
  names.push_back(name);
}

void LeaseCache::XattrsChanged(uint64_t ino) {
  absl::MutexLock l(&mu_);
  // As a recall: an own reply sent before (a setattr, a link) may carry
  // attributes read before this change, no_xattrs among them; not kept.
  Note(Kind::kAttr, ino, /*foreign=*/true);
  attrs_.erase(ino);
  no_xattr_.erase(ino);
}

void LeaseCache::PutName(const Ticket& t, uint64_t dir, const std::string& name, uint64_t ino) {
  absl::MutexLock l(&mu_);
  if (!Keeps(t, Kind::kDir, dir, /*own=*/false)) return;
  auto [it, added] = dirs_.try_emplace(dir);
  if (added) dir_order_.push_back(dir);
  Dir& d = it->second;
  auto [n, fresh] = d.names.try_emplace(name);
  if (fresh) ++names_;
  if (n->second.ino != ino) {
    // Another inode than the listing says: the listing is not to be served.
    if (n->second.cookie != 0) d.ordered = false;
    n->second = Entry{ino, 0};
  }
  Trim();
}

void LeaseCache::PutEmptyDir(const Ticket& t, uint64_t dir, uint64_t parent) {
  absl::MutexLock l(&mu_);
  if (!Keeps(t, Kind::kDir, dir, /*own=*/true)) return;
  DropDir(dir);
  Dir& d = dirs_[dir];
  dir_order_.push_back(dir);
  d.all_names = true;
  d.ordered = true;
  d.epoch = ++listing_epochs_;
  // As the server lists them (server/namespace.cc ReadDir).
  d.order[1] = {".", dir};
  d.order[2] = {"..", parent};
}

void LeaseCache::PutPage(const Ticket& t, uint64_t dir, uint64_t cookie,
                         const proto::ReadDirReply& page) {
  absl::MutexLock l(&mu_);
  if (cookie == 0) {
    if (pending_.size() >= options_.max_pending && !pending_.contains(dir)) {
      pending_.erase(pending_.begin());  // bounded: some listing is given up
    }
    pending_[dir] = Pending{t, 0, true, {}};
  }
  auto it = pending_.find(dir);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  if (p.next_cookie != cookie) {  // not the continuation of the listing read
    pending_.erase(it);
    return;
  }
  // Two readers of one directory (a walk and its read-ahead) may join
  // pages: the listing is kept only if no change came since the oldest
  // page's request.
  if (t.seq < p.ticket.seq) p.ticket = t;
  p.leased = p.leased && page.leased();
  for (const proto::DirEntry& e : page.entries()) {
    p.entries.push_back({e.name(), {e.cookie(), e.attr().ino()}});
    p.next_cookie = e.cookie();
  }
  if (!p.leased || p.entries.size() > options_.max_names) {
    pending_.erase(it);
    return;
  }
  if (!page.eof()) return;
  Pending done = std::move(p);
  pending_.erase(it);
  if (!Keeps(done.ticket, Kind::kDir, dir, /*own=*/false)) return;
  DropDir(dir);
  Dir& d = dirs_[dir];
  dir_order_.push_back(dir);
  d.all_names = true;
  d.ordered = true;
  d.epoch = ++listing_epochs_;
  for (auto& [name, ci] : done.entries) {
    d.order[ci.first] = {name, ci.second};
    if (name == "." || name == "..") continue;
    d.names[name] = Entry{ci.second, ci.first};
  }
  names_ += d.names.size();
  Trim();
}

void LeaseCache::Recall(const Key& key) {
  absl::MutexLock l(&mu_);
  ++stats_.recalls;
  Note(key.kind, key.ino, /*foreign=*/true);
  if (key.kind == Kind::kAttr) {
    attrs_.erase(key.ino);
    held_.erase(key.ino);
    no_xattr_.erase(key.ino);
  } else {
    DropDir(key.ino);
  }
}

void LeaseCache::AttrChanged(uint64_t ino) {
  absl::MutexLock l(&mu_);
  Note(Kind::kAttr, ino, /*foreign=*/false);
  attrs_.erase(ino);
}

LeaseCache::Dir* LeaseCache::OwnNameChange(uint64_t dir) {
  Note(Kind::kAttr, dir, false);  // its mtime, ctime, size (and nlink)
  attrs_.erase(dir);
  Note(Kind::kDir, dir, false);
  pending_.erase(dir);
  auto it = dirs_.find(dir);
  return it == dirs_.end() ? nullptr : &it->second;
}

void LeaseCache::NameAdded(uint64_t dir, const std::string& name, uint64_t ino) {
  absl::MutexLock l(&mu_);
  Dir* cached = OwnNameChange(dir);
  if (cached == nullptr) return;
  Dir& d = *cached;
  auto [n, fresh] = d.names.try_emplace(name);
  if (fresh) ++names_;
  if (n->second.cookie != 0) d.order.erase(n->second.cookie);
  n->second = Entry{ino, 0};
  // Its place in the listing (cookie) is the server's: readdir asks again.
  d.ordered = false;
}

void LeaseCache::NameRemoved(uint64_t dir, const std::string& name) {
  absl::MutexLock l(&mu_);
  Dir* cached = OwnNameChange(dir);
  if (cached == nullptr) return;
  Dir& d = *cached;
  auto n = d.names.find(name);
  if (n != d.names.end() && n->second.cookie != 0) d.order.erase(n->second.cookie);
  if (d.all_names) {
    if (n != d.names.end()) {
      d.names.erase(n);
      --names_;
    }
  } else if (n != d.names.end()) {
    n->second = Entry{0, 0};
  } else {
    d.names[name] = Entry{0, 0};
    ++names_;
  }
}

void LeaseCache::DirChanged(uint64_t dir) {
  absl::MutexLock l(&mu_);
  Note(Kind::kAttr, dir, false);
  attrs_.erase(dir);
  Note(Kind::kDir, dir, false);
  DropDir(dir);
}

void LeaseCache::FallBack(const Key& key) {
  absl::MutexLock l(&mu_);
  const absl::Time now = options_.clock->Now();
  if (fall_back_.size() >= 4096) {
    absl::erase_if(fall_back_, [now](const auto& kv) { return kv.second <= now; });
  }
  if (fall_back_.size() < 4096) {
    fall_back_[KeyId(key.ino, static_cast<uint8_t>(key.kind))] = now + kFallBack;
  }
}

absl::Duration LeaseCache::DirLeft(uint64_t dir) {
  absl::MutexLock l(&mu_);
  if (!Valid() || dirs_.find(dir) == dirs_.end()) return absl::ZeroDuration();
  return end_ - options_.clock->Now();
}

bool LeaseCache::FallingBack(const Key& key) {
  absl::MutexLock l(&mu_);
  auto it = fall_back_.find(KeyId(key.ino, static_cast<uint8_t>(key.kind)));
  return it != fall_back_.end() && it->second > options_.clock->Now();
}

LeaseCache::Stats LeaseCache::stats() {
  absl::MutexLock l(&mu_);
  Stats s = stats_;
  s.attrs = attrs_.size();
  s.names = names_;
  return s;
}

}  // namespace grantfs
