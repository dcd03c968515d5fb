#include "client/write_cache.h"

#include <algorithm>
#include <cstring>

#include "common/errno_status.h"
#include "glog/logging.h"

namespace grantfs {
namespace {
constexpr uint64_t kBlock = 4096;
constexpr uint64_t kMaxExtent = 8ull << 20;  // the server's largest write
}  // namespace

WriteCache::WriteCache(const WriteCacheOptions& options, GrantPool* pool, FlushRpc flush)
    : options_(options),
      pool_(pool),
      flush_(std::move(flush)),
      spares_(std::make_shared<Spares>()) {
  spares_->buffer_bytes = std::min(options_.extent_bytes, kMaxExtent);
  spares_->max_buffers =
      std::min<uint64_t>(options_.dirty_limit / 8, 64ull << 20) / spares_->buffer_bytes;
}

std::shared_ptr<WriteCache::Extent> WriteCache::NewExtent(bool streaming) {
  std::string buffer;
  if (streaming) {
    {
      absl::MutexLock l(&spares_->mu);
      if (!spares_->buffers.empty()) {
        buffer = std::move(spares_->buffers.back());
        spares_->buffers.pop_back();
      }
    }
    if (buffer.capacity() < spares_->buffer_bytes) buffer.reserve(spares_->buffer_bytes);
  }
  Extent* e = new Extent;
  e->data = std::move(buffer);
  std::shared_ptr<Spares> spares = spares_;
  return std::shared_ptr<Extent>(e, [spares](Extent* x) {
    if (x->data.capacity() == spares->buffer_bytes) {
      x->data.clear();  // keeps the capacity
      absl::MutexLock l(&spares->mu);
      if (spares->buffers.size() < spares->max_buffers)
        spares->buffers.push_back(std::move(x->data));
    }
    delete x;
  });
}

uint64_t WriteCache::spare_bytes() {
  absl::MutexLock l(&spares_->mu);
  return spares_->buffers.size() * spares_->buffer_bytes;
}

WriteCache::~WriteCache() { Stop(); }

void WriteCache::Start() {
  for (int i = 0; i < std::max(1, options_.flushers); ++i) {
    flushers_.emplace_back([this] { FlusherLoop(); });
  }
}

void WriteCache::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  for (std::thread& t : flushers_) t.join();
  flushers_.clear();
}

uint64_t WriteCache::NewBlockBytes(const Inode& inode, uint64_t offset, size_t size) {
  if (size == 0) return 0;
  const uint64_t b0 = offset / kBlock, b1 = (offset + size - 1) / kBlock;
  std::vector<std::pair<uint64_t, uint64_t>> covered;
  for (const auto& e : inode.extents) {
    // Sharing a block is enough: that block was debited by the older extent.
    if (e->data.empty() || (e->end() - 1) / kBlock < b0 || e->offset / kBlock > b1) continue;
    covered.emplace_back(std::max(b0, e->offset / kBlock), std::min(b1, (e->end() - 1) / kBlock));
  }
  std::sort(covered.begin(), covered.end());
  uint64_t n = 0, next = b0;  // blocks [b0, next) are accounted for
  for (const auto& [lo, hi] : covered) {
    if (hi < next) continue;
    n += std::max(lo, next) - next;
    next = hi + 1;
  }
  n += b1 + 1 - std::min(next, b1 + 1);
  return n * kBlock;
}

bool WriteCache::Write(uint64_t ino, uint64_t offset, const char* data, size_t size,
                       int64_t* stamped) {
  // No extent is larger than the server takes in one write.
  const uint64_t max_extent = std::min(options_.extent_bytes, kMaxExtent);
  for (size_t done = 0; done < size;) {
    const size_t n = std::min<uint64_t>(size - done, max_extent);
    // A piece the pool cannot cover: the caller writes the whole range
    // through, which rewrites the pieces cached so far with the same bytes.
    if (!WritePiece(ino, offset + done, data + done, n, stamped)) return false;
    done += n;
  }
  return true;
}

bool WriteCache::WritePiece(uint64_t ino, uint64_t offset, const char* data, size_t size,
                            int64_t* stamped) {
  uint64_t debit;
  {
    absl::MutexLock l(&mu_);
    // Memory bound: wait for room (a write larger than the limit goes in
    // alone once everything else is out).
    auto room = [this, size]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || dirty_bytes_ == 0 || dirty_bytes_ + size <= options_.dirty_limit;
    };
    if (!room()) {
      ++waiting_writers_;
      ++throttled_writes_;
      while (!room()) mu_.AwaitWithTimeout(absl::Condition(&room), absl::Seconds(1));
      --waiting_writers_;
    }
    dirty_bytes_ += size;  // held now so concurrent writers cannot overshoot
    debit = NewBlockBytes(inodes_[ino], offset, size);
  }
  if (!pool_->Debit(debit)) {
    absl::MutexLock l(&mu_);
    dirty_bytes_ -= size;
    return false;
  }
  absl::MutexLock l(&mu_);
  Inode& inode = inodes_[ino];
  const uint64_t end = offset + size;
  std::shared_ptr<Extent> last = inode.extents.empty() ? nullptr : inode.extents.back();
  const uint64_t max_extent = std::min(options_.extent_bytes, kMaxExtent);
  if (last && !last->flushing && !last->sealed && offset >= last->offset && offset <= last->end() &&
      std::max(end, last->end()) - last->offset <= max_extent) {
    // Coalesce into the newest extent (it is newer than everything it
    // overlaps, so order is kept).
    const uint64_t overlap = std::min(end, last->end()) - offset;
    if (offset == last->end()) {
      last->data.append(data, size);  // streaming: no zero-fill first
    } else {
      if (end > last->end()) last->data.resize(end - last->offset);
      memcpy(&last->data[offset - last->offset], data, size);
    }
    last->debit += debit;
    dirty_bytes_ -= overlap;
    if (last->data.size() >= max_extent) last->sealed = true;
    if (last->sealed || last->data.size() >= options_.extent_bytes) recheck_.insert(ino);
  } else {
    if (last && !last->flushing) {
      last->sealed = true;
      recheck_.insert(ino);
    }
    std::shared_ptr<Extent> e = NewExtent(/*streaming=*/size >= 64 * 1024);
    e->offset = offset;
    e->data.assign(data, size);
    e->debit = debit;
    e->born = options_.clock->Now();
    next_due_ = std::min(next_due_, e->born + options_.max_age);
    if (e->data.size() >= options_.extent_bytes) recheck_.insert(ino);
    inode.extents.push_back(std::move(e));
  }
  inode.mtime_ns = options_.clock->NowNanos();
  inode.times_set = false;
  if (stamped != nullptr) *stamped = inode.mtime_ns;
  return true;
}

uint64_t WriteCache::CachedEnd(const Inode& inode) {
  uint64_t end = 0;
  for (const auto& e : inode.extents) end = std::max(end, e->end());
  return end;
}

bool WriteCache::Sendable(const Inode& inode, const Extent& e) const {
  // In write order per block, not only per byte: the server charges a newly
  // allocated block to whichever write reaches it first, and the debit for
  // it was made by the older extent, so the older one must land first.
  const uint64_t b0 = e.offset / kBlock, b1 = (e.end() - 1) / kBlock;
  for (const auto& x : inode.extents) {
    if (x.get() == &e) return true;
    if (x->offset / kBlock <= b1 && b0 <= (x->end() - 1) / kBlock) return false;
  }
  return true;
}

std::shared_ptr<WriteCache::Extent> WriteCache::PickLocked(uint64_t* ino) {
  const absl::Time now = options_.clock->Now();
  const bool pressure = dirty_bytes_ > options_.dirty_limit / 2;
  // The flushers' wait condition runs at every release of mu_: with many
  // files cached (closes that did not wait), a scan of every file each
  // time would cost O(files) per write or acknowledgement. So: the files
  // waited on (urgent_), the files where something changed (recheck_), and
  // a scan of all only when an extent may have come of age (next_due_) or
  // on pressure, stop or FlushAll.
  auto due = [&](const Inode& inode, const Extent& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return inode.urgent > 0 || e.sealed || pressure || stopping_ ||
           e.data.size() >= options_.extent_bytes || now - e.born >= options_.max_age;
  };
  auto pick_in = [&](uint64_t id, Inode& inode)
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> std::shared_ptr<Extent> {
    for (const auto& e : inode.extents) {
      if (!e->flushing && due(inode, *e) && Sendable(inode, *e)) {
        *ino = id;
        return e;
      }
    }
    return nullptr;
  };
  for (uint64_t id : urgent_) {  // someone waits on these first
    auto it = inodes_.find(id);
    if (it == inodes_.end()) continue;
    if (std::shared_ptr<Extent> e = pick_in(id, it->second)) return e;
  }
  if (maybe_ready_ || pressure || stopping_ || now >= next_due_) {
    absl::Time next = absl::InfiniteFuture();
    for (auto& [id, inode] : inodes_) {
      if (std::shared_ptr<Extent> e = pick_in(id, inode)) return e;
      for (const auto& e : inode.extents) {
        // Its age deadline, whatever else made it due (pressure and
        // urgency pass; one waiting for an older extent of its file is
        // rechecked at that one's acknowledgement).
        if (!e->flushing && now - e->born < options_.max_age) {
          next = std::min(next, e->born + options_.max_age);
        }
      }
    }
    maybe_ready_ = false;
    next_due_ = next;
    recheck_.clear();
    return nullptr;
  }
  for (auto it = recheck_.begin(); it != recheck_.end();) {
    const uint64_t id = *it;
    auto in = inodes_.find(id);
    if (in != inodes_.end()) {
      if (std::shared_ptr<Extent> e = pick_in(id, in->second)) return e;  // kept: maybe more
      for (const auto& e : in->second.extents) {  // its age deadlines are kept
        if (!e->flushing && now - e->born < options_.max_age) {
          next_due_ = std::min(next_due_, e->born + options_.max_age);
        }
      }
    }
    recheck_.erase(it++);
  }
  return nullptr;
}

void WriteCache::FlusherLoop() {
  absl::MutexLock l(&mu_);
  absl::Duration backoff = absl::ZeroDuration();
  for (;;) {
    uint64_t ino = 0;
    std::shared_ptr<Extent> e;
    auto work = [this, &e, &ino]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (stopping_) return true;
      e = PickLocked(&ino);
      if (e != nullptr && in_flight_ > 0 && options_.credit) {
        // Flow control: stay within the server's credit (one extent always goes).
        const uint64_t credit = options_.credit();
        if (credit > 0 && in_flight_bytes_ + e->data.size() > credit) e = nullptr;
      }
      return e != nullptr;
    };
    // The timeout lets extents come of age without a writer waking us.
    mu_.AwaitWithTimeout(absl::Condition(&work), absl::Milliseconds(100));
    if (stopping_) return;
    if (!e) continue;
    if (SendLocked(ino, e, backoff)) {
      backoff = absl::ZeroDuration();
    } else {
      backoff = std::min(std::max(backoff * 2, absl::Milliseconds(100)), absl::Seconds(2));
    }
  }
}

bool WriteCache::SendLocked(uint64_t ino, const std::shared_ptr<Extent>& e,
                            absl::Duration backoff) {
  e->flushing = true;
  ++in_flight_;
  in_flight_bytes_ += e->data.size();
  peak_in_flight_ = std::max(peak_in_flight_, in_flight_);
  mu_.Unlock();
  // After a failure: a pause before the retry (the extent stays taken).
  if (backoff > absl::ZeroDuration()) absl::SleepFor(backoff);
  WriteTime time;
  {
    // The file's time as of the send (a write during the pause moved it).
    absl::MutexLock l(&mu_);
    const Inode& sent = inodes_[ino];
    time = WriteTime{sent.times_set ? 0 : sent.mtime_ns, sent.times_set};
  }
  absl::StatusOr<FlushResult> r =
      flush_(ino, e->offset, std::shared_ptr<const std::string>(e, &e->data), time);
  mu_.Lock();
  recheck_.insert(ino);  // its file's next extent may be sendable now
  --in_flight_;
  in_flight_bytes_ -= e->data.size();
  if (r.ok() && r->later) {
    e->handed = true;  // still flushing, until Settle
    ++e->handoffs;
    if (e->early) {  // Settle came first
      absl::StatusOr<FlushResult> early = *std::move(e->early);
      e->early.reset();
      return SettleHanded(ino, e, early);
    }
    return true;
  }
  e->early.reset();  // (a Settle for a FlushRpc that did not hand it: ignored)
  return SettleLocked(ino, e, r);
}

void WriteCache::Settle(uint64_t ino, const std::string* data, absl::StatusOr<FlushResult> result) {
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return;
  for (const auto& e : it->second.extents) {
    if (&e->data != data || !e->flushing) continue;
    if (result.ok() && result->later) result = absl::InternalError("settled as `later` again");
    if (!e->handed) {
      // Answered before its FlushRpc returned `later` (the batch went at
      // once): SendLocked settles it when it does.
      e->early = std::move(result);
      return;
    }
    const std::shared_ptr<Extent> keep = e;  // SettleLocked takes it off the list
    SettleHanded(ino, keep, result);
    return;
  }
}

bool WriteCache::SettleHanded(uint64_t ino, const std::shared_ptr<Extent>& e,
                              const absl::StatusOr<FlushResult>& r) {
  e->handed = false;
  recheck_.insert(ino);
  if (absl::IsAborted(r.status())) {
    // Nothing of it was stored: sent again, and no failure to report.
    e->flushing = false;
    e->sealed = true;
    return true;
  }
  return SettleLocked(ino, e, r);
}

bool WriteCache::SettleLocked(uint64_t ino, const std::shared_ptr<Extent>& e,
                              const absl::StatusOr<FlushResult>& r) {
  Inode& inode = inodes_[ino];
  if (r.ok()) {
    ++ack_seq_;
    if (!fetches_.empty() && r->ctime_ns != 0) {
      Ack& a = acks_[ino];
      a.size = std::max(a.size, r->size);
      a.mtime_ns = std::max(a.mtime_ns, r->mtime_ns);
      a.ctime_ns = std::max(a.ctime_ns, r->ctime_ns);
      a.seq = ack_seq_;
    }
    VLOG(2) << "flush ack " << ino << " [" << e->offset << ", " << e->end() << "): size " << r->size
            << " ctime " << r->ctime_ns << " seq " << ack_seq_ << " fetches " << fetches_.size();
    inode.extents.remove(e);
    dirty_bytes_ -= e->data.size();
    flushed_bytes_ += e->data.size();
    pool_->Settle(e->debit, r->grant_used);
    if (inode.extents.empty() && inode.urgent == 0 && inode.dropped.ok()) inodes_.erase(ino);
    return true;
  }
  if (IsPermanentFlushError(r.status())) {
    // No retry can store it: dropped, said once in the log and once to
    // the next flush or fsync of the file. The server stored none of it,
    // so its whole debit goes back to the pool. A file discarded (gone)
    // is expected to be refused: nothing is said.
    if (!inode.discarded) {
      LOG(ERROR) << "inode " << ino << ": cached bytes [" << e->offset << ", " << e->end()
                 << ") dropped, the server refused them: " << r.status();
      if (inode.dropped.ok()) inode.dropped = r.status();
    }
    inode.extents.remove(e);
    dirty_bytes_ -= e->data.size();
    pool_->Refund(e->debit);
    if (inode.extents.empty() && inode.urgent == 0 && inode.dropped.ok()) inodes_.erase(ino);
    return true;  // (not the transport's fault: no backoff)
  }
  // Kept and retried; waiters learn of the error. Sealed: the RPC may
  // still hold its bytes, so later writes go to a new extent.
  e->flushing = false;
  e->sealed = true;
  ++e->failures;
  e->last_error = r.status();
  LOG(WARNING) << "flush of inode " << ino << " [" << e->offset << ", " << e->end()
               << "): " << r.status() << "; will retry";
  return false;
}

absl::Status WriteCache::FlushNow(const std::vector<uint64_t>& ids, bool report_dropped) {
  return FlushMany(ids, report_dropped, /*here=*/true);
}

void WriteCache::TimesSet(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return;
  it->second.times_set = true;
  it->second.mtime_ns = 0;
  // Looked up each time: the flushers erase an inode whose last extent
  // was acknowledged.
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stopping_) return true;
    auto i = inodes_.find(ino);
    if (i == inodes_.end()) return true;
    for (const auto& e : i->second.extents) {
      // One handed to the namespace log is there before the setattr that
      // follows this call: applied first.
      if (e->flushing && !e->handed) return false;
    }
    return true;
  };
  mu_.Await(absl::Condition(&settled));
}

void WriteCache::Discard(uint64_t ino, bool still_open) {
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return;
  it->second.discarded = true;
  it->second.dropped = absl::OkStatus();
  if (!still_open) DiscardLocked(it);
}

void WriteCache::DiscardLocked(std::map<uint64_t, Inode>::iterator it) {
  Inode& inode = it->second;
  for (auto e = inode.extents.begin(); e != inode.extents.end();) {
    if ((*e)->flushing) {
      ++e;
      continue;
    }
    dirty_bytes_ -= (*e)->data.size();
    pool_->Refund((*e)->debit);
    e = inode.extents.erase(e);
  }
  if (inode.extents.empty() && inode.urgent == 0) inodes_.erase(it);
}

uint64_t WriteCache::CachedBytes(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return 0;
  uint64_t n = 0;
  for (const auto& e : it->second.extents) n += e->data.size();
  return n;
}

void WriteCache::Seal(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return;
  for (const auto& e : it->second.extents) {
    if (!e->flushing) e->sealed = true;
  }
  recheck_.insert(ino);
}

bool WriteCache::Discarded(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(ino);
  return it != inodes_.end() && it->second.discarded;
}

void WriteCache::Released(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(ino);
  if (it != inodes_.end() && it->second.discarded) DiscardLocked(it);
}

absl::Status WriteCache::FlushInode(uint64_t ino) {
  absl::MutexLock l(&mu_);
  return FlushLocked(ino, /*report_dropped=*/true);
}

absl::Status WriteCache::FlushLocked(uint64_t ino, bool report_dropped) {
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return absl::OkStatus();
  Inode& inode = it->second;  // not erased while urgent > 0
  // The extents to wait for, with their failures so far: only a failure
  // after this call began ends the wait (an old one was already reported,
  // or the retry since may have worked).
  std::vector<std::pair<std::shared_ptr<Extent>, uint64_t>> mine;
  for (const auto& e : inode.extents) mine.emplace_back(e, e->failures);
  if (inode.urgent++ == 0) urgent_.insert(ino);
  auto pending = [&](const std::shared_ptr<Extent>& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::find(inode.extents.begin(), inode.extents.end(), e) != inode.extents.end();
  };
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stopping_) return true;
    // Done when all are stored, or one failed since the call and every
    // other attempt in flight has finished (a failed extent may already be
    // in its retry: that is not waited for).
    bool failed = false, left = false, in_flight = false;
    for (const auto& [e, failures] : mine) {
      if (!pending(e)) continue;
      left = true;
      if (e->failures > failures) {
        failed = true;
      } else if (e->flushing) {
        in_flight = true;
      }
    }
    return !left || (failed && !in_flight);
  };
  // An extent handed elsewhere goes when its sender sends it: hurried once
  // per hand-off (an error ends the wait: the extent stays handed, to go
  // later).
  Hurried hurried;
  absl::Status hurry_error;
  auto handed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!options_.hurry) return false;
    for (const auto& [e, failures] : mine) {
      if (hurried.Due(*e) && pending(e)) return true;
    }
    return false;
  };
  auto done_or_handed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done() || handed(); };
  for (;;) {
    mu_.Await(absl::Condition(&done_or_handed));
    if (done()) break;
    for (const auto& [e, failures] : mine) hurried.Mark(*e);
    mu_.Unlock();
    hurry_error = options_.hurry(ino);
    mu_.Lock();
    if (!hurry_error.ok()) break;
  }
  if (!hurry_error.ok()) {
    // The handed extents could not be sent now (they stay, to go later):
    // what else is in flight is waited for, and the error stands only
    // while one of them is still not stored.
    auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (done()) return true;
      for (const auto& [e, failures] : mine) {
        if (pending(e) && e->flushing && !e->handed) return false;
      }
      return true;
    };
    mu_.Await(absl::Condition(&settled));
    if (done()) hurry_error = absl::OkStatus();
  }
  if (--inode.urgent == 0) urgent_.erase(ino);
  absl::Status err = hurry_error;
  for (const auto& [e, failures] : mine) {
    if (pending(e) && e->failures > failures) {
      err = e->last_error;
      break;
    }
  }
  if (err.ok()) {
    for (const auto& [e, failures] : mine) {
      if (pending(e)) {
        err = absl::UnavailableError("write cache stopped");
        break;
      }
    }
  }
  if (report_dropped && !inode.dropped.ok()) {  // reported once, whatever else is returned
    if (err.ok()) err = inode.dropped;
    inode.dropped = absl::OkStatus();
  }
  if (inode.extents.empty() && inode.urgent == 0) inodes_.erase(ino);
  return err;
}

bool WriteCache::IsPermanentFlushError(const absl::Status& s) {
  // Only the server's own answers are final; a transport error, EIO or
  // ENOSPC (a disk that may recover) is worth retrying.
  if (!HasErrno(s)) return false;
  switch (ToErrno(s)) {
    case ENOENT:
    case ESTALE:
    case EFBIG:
    case EINVAL:
    case EISDIR:
    case EBADF:
    case EPERM:
    case EACCES:
    case EROFS:
      return true;
    default:
      return false;
  }
}

std::vector<std::string> WriteCache::DescribeDirty() {
  std::vector<std::string> out;
  absl::MutexLock l(&mu_);
  for (const auto& [ino, inode] : inodes_) {
    uint64_t bytes = 0;
    for (const auto& e : inode.extents) bytes += e->data.size();
    if (bytes == 0) continue;
    const absl::Status& why =
        inode.extents.empty() ? absl::OkStatus() : inode.extents.front()->last_error;
    out.push_back("inode " + std::to_string(ino) + ": " + std::to_string(bytes) + " bytes in " +
                  std::to_string(inode.extents.size()) + " extents" +
                  (why.ok() ? "" : ", last error: " + why.ToString()));
  }
  return out;
}

absl::Status WriteCache::FlushAll() {
  std::vector<uint64_t> ids;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [id, inode] : inodes_) ids.push_back(id);
  }
  return FlushInodes(ids, /*report_dropped=*/true);
}

absl::Status WriteCache::FlushInodes(const std::vector<uint64_t>& ids, bool report_dropped) {
  return FlushMany(ids, report_dropped, /*here=*/false);
}

absl::Status WriteCache::FlushMany(const std::vector<uint64_t>& ids, bool report_dropped,
                                   bool here) {
  absl::MutexLock l(&mu_);
  // All of them urgent at once (kept while this runs), so the flushers
  // send them in parallel while each is waited for in turn.
  std::vector<uint64_t> held;
  for (uint64_t id : ids) {
    auto it = inodes_.find(id);
    if (it == inodes_.end()) continue;
    held.push_back(id);
    if (it->second.urgent++ == 0) urgent_.insert(id);
  }
  absl::Status first;
  for (uint64_t id : held) {
    // `here`: sent from this thread too, one extent at a time in write
    // order (the flushers may all be held up by the server).
    // An extent handed elsewhere (FlushResult.later) is hurried, once per
    // hand-off, and the round goes on: what waited behind it (an
    // overlapping later write, one sent again) goes from here too.
    Hurried hurried;
    for (bool sent = here; sent && !stopping_;) {
      sent = false;
      Inode& inode = inodes_[id];
      bool hurry = false;
      for (const auto& e : inode.extents) {
        hurry = hurry || (options_.hurry && hurried.Due(*e));
        if (e->flushing || !Sendable(inode, *e)) continue;
        const std::shared_ptr<Extent> keep = e;  // the list may change meanwhile
        if (SendLocked(id, keep, absl::ZeroDuration())) {
          sent = true;
        } else if (first.ok()) {
          first = keep->last_error;
        }
        break;
      }
      if (sent || !hurry) continue;
      for (const auto& e : inode.extents) hurried.Mark(*e);
      mu_.Unlock();
      absl::Status h = options_.hurry(id);
      mu_.Lock();
      if (h.ok()) {
        sent = true;
      } else if (first.ok()) {
        first = h;
      }
    }
    // And what the flushers have in flight.
    absl::Status s = FlushLocked(id, report_dropped);
    if (first.ok()) first = s;
    // Done with it: no longer urgent for this call.
    auto it = inodes_.find(id);
    if (it == inodes_.end()) continue;
    if (--it->second.urgent == 0) urgent_.erase(id);
    if (it->second.extents.empty() && it->second.urgent == 0 && it->second.dropped.ok()) {
      inodes_.erase(it);
    }
  }
  return first;
}

WriteCache::Overlay WriteCache::Snapshot(uint64_t ino, uint64_t offset, size_t size) {
  Overlay out;
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end() || it->second.extents.empty()) return out;
  out.end = CachedEnd(it->second);
  const uint64_t end = offset + size;
  for (const auto& e : it->second.extents) {  // oldest first: later ones win
    const uint64_t lo = std::max(offset, e->offset), hi = std::min(end, e->end());
    if (lo >= hi) continue;
    out.pieces.push_back({lo, e->data.substr(lo - e->offset, hi - lo)});
  }
  return out;
}

void WriteCache::Apply(const Overlay& overlay, uint64_t offset, size_t size, std::string* data) {
  if (overlay.end > offset) {
    // Bytes below the cached end exist, whatever the server's size says.
    const uint64_t want = std::min<uint64_t>(overlay.end - offset, size);
    if (data->size() < want) data->resize(want, '\0');
  }
  for (const Piece& p : overlay.pieces) {
    const uint64_t rel = p.offset - offset;
    if (rel + p.data.size() > data->size()) {
      data->resize(std::min<uint64_t>(rel + p.data.size(), size), '\0');
    }
    memcpy(&(*data)[rel], p.data.data(), p.data.size());
  }
}

bool WriteCache::Covers(const Overlay& overlay, uint64_t offset, uint64_t end) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const Piece& p : overlay.pieces) ranges.emplace_back(p.offset, p.offset + p.data.size());
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = offset;
  for (const auto& [lo, hi] : ranges) {
    if (at >= end) break;
    if (lo > at) return false;
    at = std::max(at, hi);
  }
  return at >= end;
}

void WriteCache::PatchAttr(proto::Attr* attr) {
  absl::MutexLock l(&mu_);
  PatchAttrLocked(attr);
}

void WriteCache::PatchAttrLocked(proto::Attr* attr) {
  auto it = inodes_.find(attr->ino());
  if (it == inodes_.end() || it->second.extents.empty()) return;
  attr->set_size(std::max<uint64_t>(attr->size(), CachedEnd(it->second)));
  attr->set_mtime_ns(std::max<int64_t>(attr->mtime_ns(), it->second.mtime_ns));
  attr->set_ctime_ns(std::max<int64_t>(attr->ctime_ns(), it->second.mtime_ns));
}

WriteCache::AttrFetch::AttrFetch(WriteCache* cache) : cache_(cache) {
  if (cache_ == nullptr) return;
  absl::MutexLock l(&cache_->mu_);
  since_ = cache_->ack_seq_;
  cache_->fetches_.insert(since_);
}

WriteCache::AttrFetch::~AttrFetch() {
  if (cache_ == nullptr) return;
  absl::MutexLock l(&cache_->mu_);
  cache_->fetches_.erase(cache_->fetches_.find(since_));
  // Acknowledgements no fetch in flight predates are not needed any more.
  const uint64_t oldest = cache_->fetches_.empty() ? cache_->ack_seq_ : *cache_->fetches_.begin();
  for (auto it = cache_->acks_.begin(); it != cache_->acks_.end();) {
    it = it->second.seq <= oldest ? cache_->acks_.erase(it) : std::next(it);
  }
}

void WriteCache::AttrFetch::Patch(proto::Attr* attr) {
  if (cache_ == nullptr) return;
  // One critical section: a flush acknowledged between a look at the acks
  // and a look at the cache would be in neither (its extent gone, its ack
  // not seen), and the size would go back.
  absl::MutexLock l(&cache_->mu_);
  auto it = cache_->acks_.find(attr->ino());
  // Equal ctimes too: a flush carries the time its write was made, and one
  // that lands after a later change of the file leaves ctime as that change
  // set it (Allocator::CommitWrite), so a reply read just before it has the
  // same ctime. (A change after the flush has a later ctime.)
  if (it != cache_->acks_.end() && it->second.seq > since_ &&
      attr->ctime_ns() <= it->second.ctime_ns) {
    // The server answered before that flush landed.
    attr->set_size(std::max(attr->size(), it->second.size));
    attr->set_mtime_ns(std::max(attr->mtime_ns(), it->second.mtime_ns));
    attr->set_ctime_ns(it->second.ctime_ns);
  }
  cache_->PatchAttrLocked(attr);
}

bool WriteCache::AttrFetch::Acked(uint64_t ino) const {
  if (cache_ == nullptr) return false;
  absl::MutexLock l(&cache_->mu_);
  auto ack = cache_->acks_.find(ino);
  return ack != cache_->acks_.end() && ack->second.seq > since_;
}

uint64_t WriteCache::dirty_bytes() {
  absl::MutexLock l(&mu_);
  return dirty_bytes_;
}

WriteCache::Counters WriteCache::counters() {
  absl::MutexLock l(&mu_);
  return Counters{flushed_bytes_, waiting_writers_, throttled_writes_};
}

int WriteCache::in_flight() {
  absl::MutexLock l(&mu_);
  return in_flight_;
}

int WriteCache::peak_in_flight() {
  absl::MutexLock l(&mu_);
  return peak_in_flight_;
}

size_t WriteCache::extent_count(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(ino);
  return it == inodes_.end() ? 0 : it->second.extents.size();
}

}  // namespace grantfs
