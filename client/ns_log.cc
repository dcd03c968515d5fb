#include "client/ns_log.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "glog/logging.h"

namespace grantfs {

NsLog::NsLog(const NsLogOptions& options, Send send) : options_(options), send_(std::move(send)) {}

NsLog::~NsLog() { Stop(); }

void NsLog::Start() {
  absl::MutexLock l(&mu_);
  if (ager_.joinable() || stopping_) return;
  ager_ = std::thread([this] { AgeLoop(); });
}

void NsLog::Stop() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  if (ager_.joinable()) ager_.join();
}

absl::StatusOr<uint64_t> NsLog::Append(proto::LogEntry entry) {
  absl::MutexLock l(&mu_);
  const absl::Time give_up = options_.clock->Now() + options_.wait;
  while (error_.ok() && entries_.size() >= options_.max_entries) {
    if (options_.clock->Now() >= give_up) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the namespace log is full (", entries_.size(), " entries): ", send_error_.ToString()));
    }
    if (!sending_) {
      SendOne();
    } else {
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](bool* s) { return !*s; }, &sending_),
                           absl::Milliseconds(100));
    }
  }
  if (!error_.ok()) return error_;
  PushBack(std::move(entry), options_.clock->Now());
  return first_pos_ + entries_.size() - 1;
}

std::vector<uint64_t> NsLog::TouchedBy(const proto::LogEntry& e) {
  std::vector<uint64_t> out;
  if (e.ino() != 0) out.push_back(e.ino());
  switch (e.op_case()) {
    case proto::LogEntry::kMknod:
      out.push_back(e.mknod().parent());
      break;
    case proto::LogEntry::kSymlink:
      out.push_back(e.symlink().parent());
      break;
    case proto::LogEntry::kLink:
      out.push_back(e.link().ino());
      out.push_back(e.link().new_parent());
      break;
    case proto::LogEntry::kRemove:
      out.push_back(e.remove().parent());
      out.push_back(e.remove().expected_ino());
      break;
    case proto::LogEntry::kRename:
      out.push_back(e.rename().parent());
      out.push_back(e.rename().new_parent());
      out.push_back(e.rename().expected_ino());
      out.push_back(e.rename().expected_new_ino());
      break;
    case proto::LogEntry::kSetattr:
      out.push_back(e.setattr().ino());
      break;
    case proto::LogEntry::kWrite:
      out.push_back(e.write().ino());  // its size and times
      break;
    case proto::LogEntry::kOpen:
    case proto::LogEntry::kRelease:
      // An open handle changes nothing a lookup, getattr, readdir, read or
      // write is answered with; the calls that depend on handles (locks,
      // removes, releases) apply the whole log first.
      break;
    case proto::LogEntry::OP_NOT_SET:
      break;
  }
  out.erase(std::remove(out.begin(), out.end(), 0), out.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void NsLog::CountTouched(const std::vector<uint64_t>& inos, int delta) {
  for (uint64_t ino : inos) {
    if (delta > 0) {
      ++touched_[ino];
    } else if (auto it = touched_.find(ino); it != touched_.end() && --it->second == 0) {
      touched_.erase(it);
    }
  }
}

void NsLog::PushBack(proto::LogEntry entry, absl::Time now) {
  touched_of_.push_back(TouchedBy(entry));
  CountTouched(touched_of_.back(), 1);
  entries_.push_back(std::move(entry));
  appended_at_.push_back(now);
}

void NsLog::PopFront(size_t n) {
  for (size_t i = 0; i < n; ++i) {
    CountTouched(touched_of_.front(), -1);
    history_.push_back(std::move(touched_of_.front()));
    if (history_.size() > kHistory) history_.pop_front();
    touched_of_.pop_front();
    entries_.pop_front();
    appended_at_.pop_front();
  }
  first_pos_ += n;
}

bool NsLog::Dropped(uint64_t ino) {
  absl::MutexLock l(&mu_);
  return dropped_.contains(ino) || dropped_.size() >= kMaxDropped;
}

uint64_t NsLog::LastTouching(uint64_t ino) {
  absl::MutexLock l(&mu_);
  if (!touched_.contains(ino)) return 0;
  for (size_t i = touched_of_.size(); i-- > 0;) {
    if (std::binary_search(touched_of_[i].begin(), touched_of_[i].end(), ino)) {
      return first_pos_ + i;
    }
  }
  return 0;
}

bool NsLog::Touches(uint64_t ino) {
  absl::MutexLock l(&mu_);
  return touched_.contains(ino);
}

uint64_t NsLog::Mark() {
  absl::MutexLock l(&mu_);
  return first_pos_;
}

bool NsLog::TouchedSince(uint64_t mark, uint64_t ino) {
  absl::MutexLock l(&mu_);
  if (touched_.contains(ino)) return true;
  if (mark >= first_pos_) return false;                  // nothing applied since
  if (first_pos_ - mark > history_.size()) return true;  // forgotten: be safe
  for (size_t i = history_.size() - (first_pos_ - mark); i < history_.size(); ++i) {
    if (std::binary_search(history_[i].begin(), history_[i].end(), ino)) return true;
  }
  return false;
}

absl::StatusOr<uint64_t> NsLog::TryAppend(std::vector<proto::LogEntry> entries) {
  absl::MutexLock l(&mu_);
  if (!error_.ok()) return error_;
  if (entries_.size() + entries.size() > options_.max_entries) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the namespace log is full (", entries_.size(), " entries)"));
  }
  const absl::Time now = options_.clock->Now();
  for (proto::LogEntry& e : entries) PushBack(std::move(e), now);
  return first_pos_ + entries_.size() - 1;
}

absl::Status NsLog::Flush(uint64_t upto) {
  absl::MutexLock l(&mu_);
  const absl::Time give_up = options_.clock->Now() + options_.wait;
  for (;;) {
    // Entries before the refused one were applied.
    if (!error_.ok()) return upto < refused_pos_ ? absl::OkStatus() : error_;
    if (entries_.empty() || first_pos_ > upto) return absl::OkStatus();
    if (options_.clock->Now() >= give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("the namespace log could not be sent: ", send_error_.ToString()));
    }
    if (!sending_) {
      const uint64_t before = first_pos_;
      SendOne();
      // A batch that could not go: the RPC layer already retried (for its
      // retry_for) and failed over; the caller decides what comes next.
      if (first_pos_ == before && error_.ok() && !send_error_.ok()) {
        return absl::UnavailableError(
            absl::StrCat("the namespace log could not be sent: ", send_error_.ToString()));
      }
    } else {
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](bool* s) { return !*s; }, &sending_),
                           absl::Milliseconds(100));
    }
  }
}

void NsLog::SendOne() {
  if (sending_ || entries_.empty() || !error_.ok()) return;
  const size_t most = std::min(entries_.size(), options_.batch_entries);
  std::vector<const proto::LogEntry*> batch;
  size_t n = 0, bytes = 0;
  for (; n < most; ++n) {
    bytes += entries_[n].ByteSizeLong();
    if (n > 0 && bytes > options_.batch_bytes) break;
    batch.push_back(&entries_[n]);
  }
  const uint64_t batch_first = first_pos_;
  sending_ = true;
  mu_.Unlock();
  // Copied outside mu_ (write entries carry data; appends go on): while
  // sending_ is set no other thread takes entries off the front, and an
  // append at the back moves no entry of a deque.
  proto::ApplyLogRequest req;
  for (const proto::LogEntry* e : batch) *req.add_entries() = *e;
  absl::StatusOr<proto::ApplyLogReply> reply = send_(&req);
  mu_.Lock();
  sending_ = false;
  // Only this thread took entries off the front since batch_first: none.
  DCHECK_EQ(first_pos_, batch_first);
  if (!reply.ok()) {
    send_error_ = reply.status();
    LOG(WARNING) << "namespace log: " << n << " entries not sent: " << reply.status()
                 << " (kept, sent again)";
    return;
  }
  send_error_ = absl::OkStatus();
  size_t applied = 0;
  int refused = 0;
  for (int i = 0; i < reply->errs_size() && applied < n; ++i) {
    if (reply->errs(i) != 0) {
      refused = reply->errs(i);
      break;
    }
    ++applied;
  }
  PopFront(applied);
  if (refused != 0 || applied < n) {
    const proto::LogEntry& bad = entries_.front();
    error_ =
        ErrnoStatus(refused != 0 ? refused : EIO,
                    absl::StrCat("the server refused entry ", bad.seq(), " of the namespace log; ",
                                 entries_.size(), " entries from it on are dropped"));
    proto::LogEntry shown = bad;
    if (shown.has_write()) shown.mutable_write()->clear_data();  // not its bytes
    LOG(ERROR) << "namespace log: " << error_ << ": " << shown.ShortDebugString();
    refused_pos_ = first_pos_;
    for (const std::vector<uint64_t>& inos : touched_of_) {
      if (dropped_.size() >= kMaxDropped) break;
      dropped_.insert(inos.begin(), inos.end());
    }
    PopFront(entries_.size());
  }
}

void NsLog::AgeLoop() {
  absl::MutexLock l(&mu_);
  while (!stopping_) {
    // Woken early by a full batch (not while one is out, nor right after
    // one could not go).
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](NsLog* log) ABSL_EXCLUSIVE_LOCKS_REQUIRED(log->mu_) {
                               return log->stopping_ ||
                                      (!log->sending_ && log->send_error_.ok() &&
                                       log->entries_.size() >= log->options_.batch_entries);
                             },
                             this),
                         options_.max_age / 4);
    if (stopping_) break;
    // Batches go while the oldest entry is past its age, or one is full.
    while (!stopping_ && !sending_ && error_.ok() && !entries_.empty() &&
           (options_.clock->Now() - appended_at_.front() >= options_.max_age ||
            entries_.size() >= options_.batch_entries)) {
      const uint64_t before = first_pos_;
      SendOne();
      if (first_pos_ == before) break;  // could not go: next round
    }
  }
}

absl::Status NsLog::error() {
  absl::MutexLock l(&mu_);
  return error_;
}

size_t NsLog::pending() {
  absl::MutexLock l(&mu_);
  return entries_.size();
}

uint64_t NsLog::last() {
  absl::MutexLock l(&mu_);
  return first_pos_ + entries_.size() - 1;
}

uint64_t NsLog::OldestPendingIno() {
  absl::MutexLock l(&mu_);
  for (const proto::LogEntry& e : entries_) {
    if (e.ino() != 0) return e.ino();
  }
  return 0;
}

}  // namespace grantfs
