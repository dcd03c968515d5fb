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
  Released released;
  absl::MutexLock l(&mu_);
  auto d = drops_.find(ino);
  const bool refused = t.gen < floor_ || (d != drops_.end() && d->second > t.gen);
  auto fit = files_.find(ino);
  const bool other_stamp = fit != files_.end() && fit->second.stamp != t.stamp;
  if (refused || other_stamp || t.stamp == 0 || data->size() > kMaxPiece || max_bytes_ == 0) {
    // Not kept: what is kept of the file may be older than these bytes,
    // and its size smaller than the one they gave the file. Whatever is
    // kept goes, and so does what flushes begun before would keep (their
    // sizes are not comparable with the ones after).
    DropLocked(ino, &released);
    return;
  }
  File& f = files_[ino];  // no other reference into files_ is held here
  f.stamp = t.stamp;
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
    it = ErasePieceLocked(&f, it, &released);
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
    auto oit = files_.find(old_ino);
    ErasePieceLocked(&oit->second, oit->second.pieces.find(old_offset), &released);
    // Erasing another element leaves `f` where it is. The file's size
    // stays with its last pieces: an empty file of this stamp still
    // answers the end of the file.
    if (oit->second.pieces.empty() && old_ino != ino) files_.erase(oit);
  }
}

void CleanCache::AddPieceLocked(uint64_t ino, File* f, uint64_t offset,
                                std::shared_ptr<const std::string> data, size_t skip, size_t len) {
  if (len < data->capacity() / 2) {
    data = std::make_shared<const std::string>(*data, skip, len);
    skip = 0;
  }
  lru_.emplace_back(ino, offset);
  // What it holds, not what it shows: the buffer stays until every piece
  // of it goes (two pieces cut from one count it twice).
  const size_t held = data->capacity();
  bytes_ += held;
  f->pieces.insert_or_assign(offset,
                             Piece{std::move(data), skip, len, held, std::prev(lru_.end())});
}

std::map<uint64_t, CleanCache::Piece>::iterator CleanCache::ErasePieceLocked(
    File* f, std::map<uint64_t, Piece>::iterator it, Released* released) {
  bytes_ -= it->second.held;
  lru_.erase(it->second.lru);
  released->push_back(std::move(it->second.data));
  return f->pieces.erase(it);
}

void CleanCache::DropLocked(uint64_t ino, Released* released) {
  if (auto it = files_.find(ino); it != files_.end()) {
    File& f = it->second;
    for (auto p = f.pieces.begin(); p != f.pieces.end();) p = ErasePieceLocked(&f, p, released);
    files_.erase(it);
  }
  if (drops_.size() >= kMaxDrops) {
    drops_.clear();
    floor_ = gen_ + 1;
  }
  drops_[ino] = ++gen_;
}

void CleanCache::Drop(uint64_t ino) {
  Released released;
  absl::MutexLock l(&mu_);
  DropLocked(ino, &released);
}

bool CleanCache::Read(uint64_t ino, uint64_t stamp, uint64_t offset, size_t size,
                      WriteCache::Overlay* out) {
  if (stamp == 0) return false;
  Released released;
  absl::MutexLock l(&mu_);
  auto fit = files_.find(ino);
  if (fit == files_.end()) return false;
  File& f = fit->second;
  if (f.stamp != stamp) {
    // Another node changed the file since (or this mount lost track).
    DropLocked(ino, &released);
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
