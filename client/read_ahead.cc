#include "client/read_ahead.h"

#include <algorithm>
#include <utility>

#include "glog/logging.h"

namespace grantfs {

ReadAhead::ReadAhead(const ReadAheadOptions& options, ReadFn fetch, DirtyFn has_dirty)
    : options_(options),
      extent_(std::max<uint64_t>(options.extent_bytes, 4096)),
      window_(std::max(options.window_bytes, extent_)),
      memory_limit_(std::max(options.memory_limit, window_ + 2 * extent_)),
      max_streams_(std::max<uint64_t>(1, options.memory_limit / (window_ + 2 * extent_))),
      fetch_(std::move(fetch)),
      has_dirty_(std::move(has_dirty)) {}

ReadAhead::~ReadAhead() { Stop(); }

void ReadAhead::Start() {
  absl::MutexLock l(&mu_);
  if (!workers_.empty() || stopping_) return;
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

void ReadAhead::Stop() {
  std::vector<std::thread> workers;
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    stopping_ = true;
    // Queued fetches are never sent; their extents stay unserved (Read()
    // checks stopping_ first).
    queue_.clear();
    workers.swap(workers_);
  }
  for (std::thread& t : workers) t.join();
}

absl::StatusOr<std::string> ReadAhead::Read(uint64_t ino, uint64_t offset, size_t size,
                                            const ReadFn& direct) {
  if (size == 0) return std::string();
  const uint64_t end = offset + size;
  std::shared_ptr<Stream> s;
  bool sequential = false;
  uint64_t gen = 0, from = 0;
  {
    absl::MutexLock l(&mu_);
    if (!stopping_ && end > offset) {
      s = StreamLocked(ino);
      s->last_use = ++tick_;
      const uint64_t prev_end = s->run_end;
      sequential = NoteReadLocked(s.get(), offset, end);
      // The read's own extents too, but not extents this run has consumed
      // already (a late read behind them reads directly).
      from = std::max(offset, prev_end) / extent_ * extent_;
      sequential = sequential && options_.clock->Now() >= s->retry_at;
      gen = s->gen;
    }
  }
  // Asked after the generation was taken: a write that this check misses
  // bumps the generation afterwards, and what was issued is discarded.
  const bool prefetch = sequential && !(has_dirty_ && has_dirty_(ino));

  std::string out;
  uint64_t pos = offset;
  bool eof = false;
  if (s) {
    absl::MutexLock l(&mu_);
    if (prefetch && !stopping_ && !s->dead && s->gen == gen) IssueLocked(s, from);
    eof = ServeLocked(s.get(), end, &pos, &out);
    if (sequential && !s->dead) {
      // Extents the run has read past are done with, but the one just before
      // the extent being read (a read the kernel sent with the current one
      // may come late).
      for (auto it = s->extents.begin();
           it != s->extents.end() && it->first + 2 * extent_ <= s->run_end;) {
        auto next = std::next(it);
        if (it->second->state == Extent::kDone || it->second->state == Extent::kFailed) {
          DropLocked(s.get(), it);
        }
        it = next;
      }
    }
  }
  if (eof || pos >= end) return out;

  absl::StatusOr<std::string> rest = direct(ino, pos, end - pos);
  {
    absl::MutexLock l(&mu_);
    ++stats_.direct_reads;
  }
  if (!rest.ok()) return rest.status();
  if (out.empty()) return rest;
  out += *rest;
  return out;
}

bool ReadAhead::ServeLocked(Stream* s, uint64_t end, uint64_t* pos, std::string* out) {
  // One generation per read: a change during the read sends the rest of it
  // to the server.
  const uint64_t gen = s->gen;
  while (*pos < end) {
    if (stopping_ || s->dead || s->gen != gen) return false;
    if (*pos >= s->eof) return true;
    auto it = s->extents.find(*pos / extent_ * extent_);
    if (it == s->extents.end()) return false;
    std::shared_ptr<Extent> e = it->second;
    if (e->state == Extent::kQueued || e->state == Extent::kFetching) {
      ++stats_.waits;
      auto ready = [this, &e]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return e->state == Extent::kDone || e->state == Extent::kFailed || e->dropped || stopping_;
      };
      if (!mu_.AwaitWithTimeout(absl::Condition(&ready), options_.wait_timeout)) {
        ++stats_.timeouts;
        return false;
      }
      continue;  // look again: it may have been dropped or the data changed
    }
    if (e->state == Extent::kFailed) return false;
    const uint64_t have = e->offset + e->data.size();
    const uint64_t stop = std::min({end, have, s->eof});
    if (*pos < stop) {
      out->append(e->data, *pos - e->offset, stop - *pos);
      stats_.served_bytes += stop - *pos;
      *pos = stop;
    }
    // A short extent is the end of the file.
    if (*pos >= have && e->data.size() < e->size) return true;
  }
  return false;
}

bool ReadAhead::NoteReadLocked(Stream* s, uint64_t offset, uint64_t end) {
  // Within the window: from two extents behind the furthest byte read (reads
  // the kernel sent together may arrive out of order) to one extent past
  // what was read or fetched.
  const uint64_t reach = std::max(s->run_end, s->fetch_end) + extent_;
  const bool sequential = s->reads > 0 && offset <= reach && offset + 2 * extent_ >= s->run_end;
  if (!sequential) {
    if (s->reads > 0) DropAllLocked(s);  // a new run
    s->reads = 1;
    s->run_end = end;
    s->fetch_end = 0;
    s->window = 0;
    return false;
  }
  const uint64_t old_end = s->run_end;
  ++s->reads;
  s->run_end = std::max(s->run_end, end);
  if (s->window == 0) {
    s->window = std::clamp<uint64_t>(options_.initial_window_bytes, 1, window_);
  } else if ((s->run_end - 1) / extent_ > (old_end - 1) / extent_) {
    // Like the kernel's on-demand read-ahead: the longer the run, the more
    // is in flight ahead of it.
    s->window = std::min(window_, s->window * 2);
  }
  return true;
}

void ReadAhead::IssueLocked(const std::shared_ptr<Stream>& s, uint64_t from) {
  const uint64_t target = std::min({s->eof, s->size_hint, s->run_end + s->window});
  for (uint64_t o = from; o < target; o += extent_) {
    auto it = s->extents.find(o);
    if (it != s->extents.end()) {
      if (it->second->state != Extent::kFailed) continue;
      DropLocked(s.get(), it);  // failed before retry_at: try again
    }
    if (s->held + extent_ > window_ + 2 * extent_ || held_ + extent_ > memory_limit_) break;
    auto e = std::make_shared<Extent>();
    e->offset = o;
    e->size = extent_;
    e->gen = s->gen;
    s->extents.emplace(o, e);
    s->held += extent_;
    held_ += extent_;
    s->fetch_end = std::max(s->fetch_end, o + extent_);
    queue_.push_back({s, std::move(e)});
    ++stats_.issued;
  }
}

void ReadAhead::DropLocked(Stream* s, std::map<uint64_t, std::shared_ptr<Extent>>::iterator it) {
  Extent* e = it->second.get();
  e->dropped = true;
  s->held -= e->size;
  // A fetch in progress keeps its bytes counted until it returns.
  if (e->state != Extent::kFetching) {
    held_ -= e->size;
    std::string().swap(e->data);
  }
  s->extents.erase(it);
}

void ReadAhead::DropAllLocked(Stream* s) {
  while (!s->extents.empty()) DropLocked(s, s->extents.begin());
}

void ReadAhead::RemoveStreamLocked(uint64_t ino) {
  auto it = streams_.find(ino);
  if (it == streams_.end()) return;
  it->second->dead = true;
  DropAllLocked(it->second.get());
  streams_.erase(it);
}

std::shared_ptr<ReadAhead::Stream> ReadAhead::StreamLocked(uint64_t ino) {
  auto it = streams_.find(ino);
  if (it != streams_.end()) return it->second;
  if (streams_.size() >= max_streams_) {
    auto victim = streams_.begin();
    for (auto i = streams_.begin(); i != streams_.end(); ++i) {
      if (i->second->last_use < victim->second->last_use) victim = i;
    }
    RemoveStreamLocked(victim->first);
  }
  auto s = std::make_shared<Stream>();
  s->ino = ino;
  auto open = opens_.find(ino);
  if (open != opens_.end()) s->size_hint = open->second.size;
  streams_.emplace(ino, s);
  return s;
}

void ReadAhead::Invalidate(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto open = opens_.find(ino);
  if (open != opens_.end()) open->second.size = UINT64_MAX;  // the file may have grown
  auto it = streams_.find(ino);
  if (it != streams_.end()) InvalidateLocked(it->second.get());
}

void ReadAhead::InvalidateAll() {
  absl::MutexLock l(&mu_);
  for (auto& [ino, open] : opens_) open.size = UINT64_MAX;
  for (auto& [ino, s] : streams_) InvalidateLocked(s.get());
}

void ReadAhead::InvalidateLocked(Stream* s) {
  // Every extent of the old generation goes; fetches of it still in flight
  // are discarded when they return (WorkerLoop).
  ++s->gen;
  DropAllLocked(s);
  s->eof = UINT64_MAX;
  s->size_hint = UINT64_MAX;  // the file may have grown
  s->retry_at = absl::InfinitePast();
  s->fetch_end = 0;
  if (s->window != 0) s->window = std::clamp<uint64_t>(options_.initial_window_bytes, 1, window_);
}

void ReadAhead::Opened(uint64_t ino, uint64_t size) {
  absl::MutexLock l(&mu_);
  Open& open = opens_[ino];
  ++open.count;
  open.size = size;
  auto it = streams_.find(ino);
  if (it == streams_.end()) return;
  InvalidateLocked(it->second.get());
  it->second->size_hint = size;
}

void ReadAhead::Released(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto it = opens_.find(ino);
  if (it == opens_.end()) return;
  if (--it->second.count > 0) return;
  opens_.erase(it);
  RemoveStreamLocked(ino);
}

void ReadAhead::WorkerLoop() {
  absl::MutexLock l(&mu_);
  for (;;) {
    auto work = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stopping_; };
    mu_.Await(absl::Condition(&work));
    if (stopping_) return;
    Task t = std::move(queue_.front());
    queue_.pop_front();
    Stream* s = t.stream.get();
    Extent* e = t.extent.get();
    if (e->dropped) continue;  // its bytes were freed when it was dropped
    e->state = Extent::kFetching;
    mu_.Unlock();
    absl::StatusOr<std::string> r = fetch_(s->ino, e->offset, e->size);
    mu_.Lock();
    ++stats_.fetches;
    e->state = r.ok() ? Extent::kDone : Extent::kFailed;
    if (e->dropped) {
      // Stale (the data changed since it was issued: a generation bump drops
      // every extent of the stream) or no longer wanted.
      ++stats_.discarded;
      held_ -= e->size;
      continue;
    }
    if (!r.ok()) {
      ++stats_.fetch_errors;
      if (!s->error_logged && !stopping_) {
        LOG(WARNING) << "read-ahead of inode " << s->ino << " at " << e->offset << ": "
                     << r.status() << "; reading directly for "
                     << absl::FormatDuration(options_.retry_after);
        s->error_logged = true;
      }
      s->retry_at = options_.clock->Now() + options_.retry_after;
      continue;
    }
    s->error_logged = false;
    e->data = std::move(*r);
    if (e->data.size() < e->size) {
      // End of file at this generation: nothing past it is fetched or served.
      const uint64_t eof = e->offset + e->data.size();
      s->eof = std::min(s->eof, eof);
      for (auto it = s->extents.upper_bound(eof); it != s->extents.end();) {
        auto next = std::next(it);
        DropLocked(s, it);
        it = next;
      }
      // An extent starting exactly at the end (empty) stays: it says EOF.
    }
  }
}

ReadAhead::Stats ReadAhead::stats() {
  absl::MutexLock l(&mu_);
  Stats st = stats_;
  st.held_bytes = held_;
  st.streams = streams_.size();
  return st;
}

}  // namespace grantfs
