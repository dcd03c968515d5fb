#include "client/clean_cache.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace grantfs {

CleanCache::Token CleanCache::Begin(uint64_t stamp) {
  absl::MutexLock l(&mu_);
  return Token{gen_, stamp};
}

void CleanCache::Put(uint64_t ino, const Token& t, uint64_t offset,
                     std::shared_ptr<const std::string> data, uint64_t size) {
  if (data == nullptr || data->empty()) return;
  // A streaming extent's buffer is reserved far past its bytes and goes
  // back to the write cache's spares when let go: copied instead of held.
  if (data->size() <= kMaxPiece && data->capacity() > 2 * data->size()) {
    data = std::make_shared<const std::string>(*data);
  }
  absl::MutexLock l(&mu_);
  // A drop of this inode after Begin (or one forgotten since): what this
  // flush sent may no longer be the file's bytes.
  if (t.gen < floor_) return DropLocked(ino);
  if (auto d = drops_.find(ino); d != drops_.end() && d->second > t.gen) return;
  // Not kept: what is kept of the file may be older than these bytes.
  if (t.stamp == 0 || data->size() > kMaxPiece || max_bytes_ == 0) return DropLocked(ino);
  File& f = files_[ino];  // no other reference into files_ is held here
  if (f.stamp != t.stamp) {
    // Kept under another stamp: not comparable with this one.
    while (!f.pieces.empty()) ErasePieceLocked(&f, f.pieces.begin());
    f.stamp = t.stamp;
    f.size = 0;
  }
  const uint64_t end = offset + data->size();
  // Older pieces this one overlaps are cut to what it leaves of them.
  auto it = f.pieces.lower_bound(offset);
  if (it != f.pieces.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.len > offset) it = prev;
  }
  std::vector<std::pair<uint64_t, Piece>> cut;
  while (it != f.pieces.end() && it->first < end) {
    cut.emplace_back(it->first, it->second);
    it = ErasePieceLocked(&f, it);
  }
  for (const auto& [lo, old] : cut) {
    const uint64_t hi = lo + old.len;
    if (lo < offset) AddPieceLocked(ino, &f, lo, old.data, old.skip, offset - lo);
    if (hi > end) AddPieceLocked(ino, &f, end, old.data, old.skip + (end - lo), hi - end);
  }
  f.size = std::max(f.size, size);
  const size_t n = data->size();
  AddPieceLocked(ino, &f, offset, std::move(data), 0, n);
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    const auto [old_ino, old_offset] = lru_.front();
    auto fit = files_.find(old_ino);
    ErasePieceLocked(&fit->second, fit->second.pieces.find(old_offset));
    // Erasing another element leaves `f` where it is.
    if (fit->second.pieces.empty() && old_ino != ino) files_.erase(fit);
  }
}

void CleanCache::AddPieceLocked(uint64_t ino, File* f, uint64_t offset,
                                std::shared_ptr<const std::string> data, size_t skip, size_t len) {
  if (len < data->size() / 2) {
    data = std::make_shared<const std::string>(*data, skip, len);
    skip = 0;
  }
  lru_.emplace_back(ino, offset);
  bytes_ += len;
  f->pieces.insert_or_assign(offset, Piece{std::move(data), skip, len, std::prev(lru_.end())});
}

std::map<uint64_t, CleanCache::Piece>::iterator CleanCache::ErasePieceLocked(
    File* f, std::map<uint64_t, Piece>::iterator it) {
  bytes_ -= it->second.len;
  lru_.erase(it->second.lru);
  return f->pieces.erase(it);
}

void CleanCache::DropLocked(uint64_t ino) {
  auto it = files_.find(ino);
  if (it == files_.end()) return;
  File& f = it->second;
  for (auto p = f.pieces.begin(); p != f.pieces.end();) p = ErasePieceLocked(&f, p);
  files_.erase(it);
}

void CleanCache::Drop(uint64_t ino) {
  absl::MutexLock l(&mu_);
  DropLocked(ino);
  if (drops_.size() >= kMaxDrops) {
    drops_.clear();
    floor_ = gen_ + 1;
  }
  drops_[ino] = ++gen_;
}

bool CleanCache::Read(uint64_t ino, uint64_t stamp, uint64_t offset, size_t size,
                      WriteCache::Overlay* out) {
  if (stamp == 0) return false;
  absl::MutexLock l(&mu_);
  auto fit = files_.find(ino);
  if (fit == files_.end()) return false;
  File& f = fit->second;
  if (f.stamp != stamp) {
    // Another node changed the file since (or this mount lost track).
    DropLocked(ino);
    return false;
  }
  out->pieces.clear();
  out->end = f.size;
  const uint64_t end = offset + size;
  auto it = f.pieces.lower_bound(offset);
  if (it != f.pieces.begin()) it = std::prev(it);
  for (; it != f.pieces.end() && it->first < end; ++it) {
    const Piece& p = it->second;
    const uint64_t lo = std::max(offset, it->first), hi = std::min(end, it->first + p.len);
    if (lo >= hi) continue;
    out->pieces.push_back({lo, p.data->substr(p.skip + (lo - it->first), hi - lo)});
  }
  return true;
}

uint64_t CleanCache::bytes() {
  absl::MutexLock l(&mu_);
  return bytes_;
}

}  // namespace grantfs
