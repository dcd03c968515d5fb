#include "client/ns_grants.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/write_cache.h"
#include "common/errno_status.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace grantfs {

NsGrants::NsGrants(const NsGrantsOptions& options, MetaClient* meta, LeaseCache* leases)
    : options_(options), meta_(meta), leases_(leases) {
  log_ = std::make_unique<NsLog>(options_.log,
                                 [this](proto::ApplyLogRequest* req) { return Send(req); });
  meta_->SetBarrier([this] { return ApplyPending(); });
  meta_->SetTouched([this] { return log_->Mark(); },
                    [this](uint64_t mark, uint64_t ino) { return log_->TouchedSince(mark, ino); });
}

NsGrants::~NsGrants() { log_->Stop(); }

void NsGrants::Start() {
  // No inode numbers yet: asked for at the first mkdir (WantGrant). A
  // session holding some is waited for by a server that takes over, so a
  // mount that never makes a directory does not hold a failover up.
  log_->Start();
}

void NsGrants::Stop() {
  {
    absl::MutexLock l(&mu_);
    granted_.clear();
  }
  log_->Stop();
  const size_t pending = log_->pending();
  absl::Status s = log_->Flush();
  if (!s.ok()) {
    LOG(ERROR) << "unmount: the namespace log (" << pending
               << " entries) could not be applied: " << s;
  }
  {
    // No data goes in the log any more (the write cache's last flushes
    // are calls); write entries left in it (the server could not be
    // reached) go when it is sent (a flush waiting for them sends it).
    absl::MutexLock l(&mu_);
    stopped_ = true;
  }
  const Stats st = stats();
  LOG(INFO) << "namespace grants: " << st.local << " changes made here, " << st.fallback
            << " in granted directories the synchronous way, " << st.recalls << " grants recalled";
}

absl::StatusOr<proto::ApplyLogReply> NsGrants::Send(proto::ApplyLogRequest* req) {
  absl::StatusOr<proto::ApplyLogReply> reply = meta_->ApplyLog(req);
  if (!reply.ok()) return reply;
  // The answers to write entries (LogWrite's `done`), called once the
  // lock is let go.
  std::vector<std::pair<WriteDone, absl::StatusOr<proto::WriteReply>>> answers;
  {
    absl::MutexLock l(&mu_);
    for (proto::LogWritten& w : *reply->mutable_written()) {
      auto it = log_writes_.find(w.seq());
      if (it == log_writes_.end()) continue;
      const uint64_t ino = it->second.ino;
      absl::StatusOr<proto::WriteReply> r;
      if (w.err() != 0) {
        // Refused (its grant gone, a disk error): only the data was not
        // stored. The retry is a Write call, with an answer of its own; the
        // file's later changes are calls too.
        LOG(WARNING) << "namespace log: the server refused the data of inode " << ino << ": "
                     << ErrnoStatus(w.err(), "write entry") << "; sent again as a call";
        made_.erase(ino);
        tracked_.erase(ino);
        r = absl::AbortedError(absl::StrCat("the server refused the data of inode ", ino,
                                            " in the namespace log (",
                                            ErrnoStatus(w.err(), "write").ToString(), ")"));
      } else {
        proto::WriteReply wr;
        *wr.mutable_attr() = std::move(*w.mutable_attr());
        wr.set_grant_used_bytes(w.grant_used_bytes());
        wr.set_synced_always(reply->synced_always());
        r = std::move(wr);
      }
      answers.emplace_back(std::move(it->second.done), std::move(r));
      logged_bytes_ -= it->second.data->size();
      log_writes_.erase(it);
    }
    // (As NsLog takes it: an entry answered with an errno, or not at all.)
    bool refused = reply->errs_size() < req->entries_size();
    for (int err : reply->errs()) refused = refused || err != 0;
    if (refused) {
      // The log drops the refused entry and every one after it (NsLog):
      // the write entries not answered above are among them.
      log_refused_ = true;
      for (auto& [seq, w] : log_writes_) {
        answers.emplace_back(std::move(w.done),
                             absl::AbortedError(absl::StrCat(
                                 "the data of inode ", w.ino,
                                 " was dropped with the namespace log (an entry before it was "
                                 "refused)")));
      }
      log_writes_.clear();
      logged_bytes_ = 0;
    }
  }
  for (auto& [done, r] : answers) done(std::move(r));
  for (uint64_t ino : reply->unleased()) {
    // Not leased to this mount by the server: not kept as if it were.
    leases_->Recall({LeaseCache::Kind::kAttr, ino});
    leases_->Recall({LeaseCache::Kind::kDir, ino});
  }
  return reply;
}

void NsGrants::Diverged() {
  {
    absl::MutexLock l(&mu_);
    if (diverged_) return;
    diverged_ = true;
    granted_.clear();
    tracked_.clear();
  }
  LOG(ERROR) << "namespace grants: the server refused an entry of the log (" << log_->error()
             << "); every lease is dropped and no change is made here any more";
  leases_->DropAll(/*stream_down=*/false);
}

bool NsGrants::WantGrant(uint64_t* ticket) {
  Refill();  // the first mkdir: inode numbers first
  absl::MutexLock l(&mu_);
  *ticket = gen_;
  return !diverged_ && numbers_left_ > 0;
}

void NsGrants::Granted(uint64_t dir, uint64_t ticket, bool existing) {
  absl::MutexLock l(&mu_);
  use_.erase(dir);
  if (diverged_ || ticket != gen_) return;
  if (existing) {
    // Granted before and recalled since: what was made in it then may
    // have changed elsewhere meanwhile (MadeHere).
    for (auto it = made_.begin(); it != made_.end();) {
      if (it->second == dir) {
        made_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  granted_.insert(dir);
}

bool NsGrants::WantDirGrant(uint64_t dir, uint64_t* ticket) {
  {
    absl::MutexLock l(&mu_);
    if (diverged_ || granted_.contains(dir)) return false;
    const absl::Time now = options_.clock->Now();
    if (use_.size() >= kMaxUse && !use_.contains(dir)) use_.clear();
    DirUse& u = use_[dir];
    if (now < u.declined_until) return false;
    if (u.changes == 0 || now - u.since > options_.use_window) {
      u.changes = 0;
      u.since = now;
    }
    if (++u.changes < options_.ask_after) return false;
    u.changes = 0;
  }
  return WantGrant(ticket);
}

void NsGrants::Declined(uint64_t dir) {
  absl::MutexLock l(&mu_);
  auto it = use_.find(dir);
  if (it != use_.end()) it->second.declined_until = options_.clock->Now() + options_.ask_again;
}

void NsGrants::DirRemoved(uint64_t dir) {
  absl::MutexLock l(&mu_);
  granted_.erase(dir);
}

void NsGrants::FileMoved(uint64_t ino) {
  absl::MutexLock l(&mu_);
  made_.erase(ino);
  tracked_.erase(ino);
  for (auto it = logged_opens_.begin(); it != logged_opens_.end();) {
    if (it->second.ino == ino) {
      logged_opens_.erase(it++);
    } else {
      ++it;
    }
  }
}

bool NsGrants::Holds(uint64_t dir) {
  absl::MutexLock l(&mu_);
  return granted_.contains(dir);
}

absl::Status NsGrants::Recall(uint64_t dir) {
  std::vector<std::pair<uint64_t, uint64_t>> data;
  {
    // Taken after any change in this directory that is being made: it is
    // in the log before the log is applied.
    absl::MutexLock l(&mu_);
    if (granted_.erase(dir) > 0) ++recalling_[dir];
    ++gen_;
    ++stats_.recalls;
    for (auto it = tracked_.begin(); it != tracked_.end();) {
      auto m = made_.find(it->first);
      if (m == made_.end() || m->second == dir) {
        tracked_.erase(it++);
      } else {
        ++it;
      }
    }
    // Files in it whose close did not wait: their data goes before the ack.
    data = DeferredIn(dir);
  }
  const absl::Status data_status = SendData(data);
  absl::Status s = log_->Flush(log_->last());
  {
    absl::MutexLock l(&mu_);
    auto r = recalling_.find(dir);
    if (r != recalling_.end() && --r->second == 0) recalling_.erase(r);
  }
  if (!log_->error().ok()) {
    Diverged();
    s = absl::OkStatus();  // nothing of it is left to apply
  }
  return s.ok() ? data_status : s;
}

std::vector<std::pair<uint64_t, uint64_t>> NsGrants::DeferredIn(std::optional<uint64_t> dir) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const auto& [ino, owed] : deferred_) {
    auto m = made_.find(ino);
    if (!dir.has_value() || m == made_.end() || m->second == *dir) out.emplace_back(ino, owed.gen);
  }
  return out;
}

void NsGrants::EraseDeferred(absl::flat_hash_map<uint64_t, Owed>::iterator it) {
  deferred_bytes_ -= it->second.bytes;
  deferred_.erase(it);
}

absl::Status NsGrants::SendData(const std::vector<std::pair<uint64_t, uint64_t>>& files) {
  if (files.empty()) return absl::OkStatus();
  std::vector<uint64_t> inos;
  for (const auto& [ino, gen] : files) inos.push_back(ino);
  // In parallel; each flush applies the log first (the barrier): the
  // files exist. Data the server refused for good is not this call's to
  // report (the next fsync of the file does).
  absl::Status s = hooks_.flush(inos);
  if (!s.ok() && !WriteCache::IsPermanentFlushError(s)) {
    return absl::UnavailableError("the data of closed files could not be sent: " + s.ToString());
  }
  // Sent: no longer owed, unless a close deferred them again since.
  absl::MutexLock l(&mu_);
  for (const auto& [ino, gen] : files) {
    auto it = deferred_.find(ino);
    if (it != deferred_.end() && it->second.gen == gen) EraseDeferred(it);
  }
  return absl::OkStatus();
}

absl::Status NsGrants::SendAllDeferred() {
  std::vector<std::pair<uint64_t, uint64_t>> data;
  {
    absl::MutexLock l(&mu_);
    data = DeferredIn(std::nullopt);
  }
  absl::Status s = SendData(data);
  absl::MutexLock l(&mu_);
  if (s.ok()) {
    send_failures_ = 0;
    return s;
  }
  // A file whose data keeps failing (EIO, ENOSPC: the cache retries it)
  // must not keep the mount from subscribing for good: after a few tries
  // it is no longer owed (its error is the next fsync's to report).
  if (++send_failures_ < kMaxSendFailures) return s;
  LOG(ERROR) << "namespace grants: the data of " << data.size()
             << " closed files could not be sent before subscribing, " << send_failures_
             << " times (" << s << "); subscribing without it (the write cache retries it)";
  for (const auto& [ino, gen] : data) {
    auto it = deferred_.find(ino);
    if (it != deferred_.end() && it->second.gen == gen) EraseDeferred(it);
  }
  send_failures_ = 0;
  return absl::OkStatus();
}

absl::Status NsGrants::SyncDir(uint64_t dir) {
  std::vector<std::pair<uint64_t, uint64_t>> data;
  {
    absl::MutexLock l(&mu_);
    data = DeferredIn(dir);
  }
  absl::Status d = SendData(data);
  absl::Status s = Sync();
  return s.ok() ? d : s;
}

bool NsGrants::DeferClose(uint64_t ino) {
  if (!hooks_.flush) return false;
  // Nothing cached: the close's own flush costs no call (and reports an
  // error the server gave earlier). More than a small file: the close
  // waits. What a recall sends before its ack stays small.
  const uint64_t bytes = hooks_.bytes(ino);
  if (bytes == 0 || bytes > kMaxDeferredFileBytes) return false;
  absl::MutexLock l(&mu_);
  if (OwnDir(ino) == 0) return false;
  auto owed = deferred_.find(ino);
  const uint64_t before = owed == deferred_.end() ? 0 : owed->second.bytes;
  if (owed == deferred_.end() || bytes > before) {
    if (deferred_.size() >= kMaxDeferred || deferred_bytes_ - before + bytes > kMaxDeferredBytes) {
      // Full: those with nothing cached any more are forgotten (the
      // cache's lock is taken after this one's).
      for (auto it = deferred_.begin(); it != deferred_.end();) {
        auto next = std::next(it);
        if (it->first != ino && hooks_.bytes(it->first) == 0) EraseDeferred(it);
        it = next;
      }
    }
    if (deferred_.size() >= kMaxDeferred + (owed != deferred_.end() ? 1 : 0) ||
        deferred_bytes_ - before + bytes > kMaxDeferredBytes) {
      return false;
    }
  }
  Owed& o = deferred_[ino];
  deferred_bytes_ += bytes - o.bytes;
  o.bytes = bytes;
  o.gen = ++defer_gen_;
  // Sent soon, not at the cache's age: the window in which a recall has it
  // to send, or a crash of the node loses it, stays short.
  hooks_.seal(ino);
  return true;
}

absl::Status NsGrants::FlushDeferred(uint64_t ino) {
  std::vector<std::pair<uint64_t, uint64_t>> data;
  {
    absl::MutexLock l(&mu_);
    auto it = deferred_.find(ino);
    if (it == deferred_.end()) return absl::OkStatus();
    data.emplace_back(ino, it->second.gen);
  }
  return SendData(data);
}

bool NsGrants::Owes(uint64_t ino) {
  absl::MutexLock l(&mu_);
  return deferred_.contains(ino);
}

bool NsGrants::TakeDeferred(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto it = deferred_.find(ino);
  if (it == deferred_.end()) return false;
  EraseDeferred(it);
  return true;
}

bool NsGrants::LogWrite(uint64_t ino, uint64_t offset, std::shared_ptr<const std::string> data,
                        int64_t time_ns, bool keep_times, WriteDone done) {
  // Whether the file's data may go in the log now (its directory granted
  // or being recalled: the server holds the grant until the recall's ack).
  auto eligible = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto m = made_.find(ino);
    return data->size() <= kMaxLogWriteBytes && log_writes_.size() < kMaxLogWrites &&
           logged_bytes_ + data->size() <= kMaxLoggedBytes && deferred_.contains(ino) &&
           m != made_.end() && !diverged_ && !log_refused_ && !stopped_ &&
           (granted_.contains(m->second) || recalling_.contains(m->second));
  };
  {
    absl::MutexLock l(&mu_);
    if (!eligible()) return false;
  }
  // The entry is made outside mu_ (its bytes are copied).
  std::vector<proto::LogEntry> entries;
  proto::LogEntry& e = entries.emplace_back(NewEntry(Creds(), time_ns));
  proto::WriteRequest* w = e.mutable_write();
  w->set_ino(ino);
  w->set_offset(offset);
  w->set_data(*data);
  w->set_from_grant(true);
  w->set_time_ns(time_ns);
  w->set_keep_times(keep_times);
  w->set_granted(true);
  absl::MutexLock l(&mu_);
  // Appended under mu_, checked again: a recall of the directory (which
  // takes mu_ first) applies it with the rest of the log, and an unlink
  // here (TakeDeferred) comes after it. Registered before the log can
  // send it (Send takes mu_ for the answer).
  if (!eligible()) return false;
  const uint64_t seq = e.seq();
  const size_t bytes = data->size();
  if (!log_->TryAppend(std::move(entries)).ok()) return false;  // full, or stopped: a call
  log_writes_[seq] = LoggedWrite{ino, std::move(data), std::move(done)};
  logged_bytes_ += bytes;
  return true;
}

absl::Status NsGrants::SendWrites(uint64_t ino) {
  const uint64_t pos = log_->LastTouching(ino);
  if (pos == 0) return absl::OkStatus();
  absl::Status s = log_->Flush(pos);
  // Refused: the write entries were answered (dropped; sent again as calls).
  if (!log_->error().ok()) return absl::OkStatus();
  return s;
}

void NsGrants::DropAll() {
  absl::MutexLock l(&mu_);
  granted_.clear();
  recalling_.clear();  // the server may have let them go too
  tracked_.clear();
  made_.clear();  // as in Recall
  ++gen_;
}

absl::Status NsGrants::ApplyPending() {
  if (log_->pending() == 0) {
    // A refusal the background sender met empties the log: what the mount
    // shows differs from the server's from then on.
    if (!log_->error().ok()) Diverged();
    return absl::OkStatus();
  }
  // What was appended before this call: not what others append meanwhile.
  absl::Status s = log_->Flush(log_->last());
  if (!log_->error().ok()) {
    Diverged();
    return absl::OkStatus();
  }
  if (!s.ok()) {
    LOG(WARNING) << "namespace log: " << s;
    return ErrnoStatus(EIO, "the namespace log could not be applied: " + s.ToString());
  }
  return absl::OkStatus();
}

absl::Status NsGrants::Sync(uint64_t ino) {
  const uint64_t upto = ino == 0 ? log_->last() : log_->LastTouching(ino);
  absl::Status s = upto == 0 ? absl::OkStatus() : log_->Flush(upto);
  if (log_->error().ok()) return s;
  Diverged();
  // A file: its own changes lost say so, every time; what it waited for
  // was applied otherwise.
  if (ino != 0) return log_->Dropped(ino) ? log_->error() : s;
  absl::MutexLock l(&mu_);
  if (error_reported_) return absl::OkStatus();
  error_reported_ = true;
  return log_->error();
}

NsGrants::Stats NsGrants::stats() {
  absl::MutexLock l(&mu_);
  Stats st = stats_;
  st.granted = granted_.size();
  st.pending = log_->pending();
  return st;
}

// --- inode numbers --------------------------------------------------------------

uint64_t NsGrants::TakeIno() {
  while (!ranges_.empty() && ranges_.front().first >= ranges_.front().second) ranges_.pop_front();
  if (ranges_.empty()) return 0;
  --numbers_left_;
  return ranges_.front().first++;
}

void NsGrants::Refill() {
  uint64_t keep_from;
  {
    absl::MutexLock l(&mu_);
    if (refilling_ || diverged_ || numbers_left_ >= options_.range_size / 2) return;
    refilling_ = true;
    // Ranges below the lowest number still at hand and the oldest create
    // not applied yet are done with.
    keep_from = UINT64_MAX;
    for (const auto& [next, end] : ranges_) {
      if (next < end) keep_from = std::min(keep_from, next);
    }
    const uint64_t pending = log_->OldestPendingIno();
    if (pending != 0) keep_from = std::min(keep_from, pending);
  }
  absl::StatusOr<proto::InodeRangeReply> r = meta_->InodeRange(options_.range_size, keep_from);
  absl::MutexLock l(&mu_);
  refilling_ = false;
  if (!r.ok() || r->count() == 0) {
    LOG(WARNING) << "namespace grants: no inode numbers: "
                 << (r.ok() ? absl::InternalError("an empty range") : r.status())
                 << " (creates go the synchronous way)";
    return;
  }
  ranges_.emplace_back(r->first(), r->first() + r->count());
  numbers_left_ += r->count();
}

// --- changes made here ----------------------------------------------------------

bool NsGrants::MadeHere(uint64_t ino, uint64_t dir) {
  auto it = made_.find(ino);
  return it != made_.end() && it->second == dir && granted_.contains(dir);
}

uint64_t NsGrants::OwnDir(uint64_t ino) {
  auto m = made_.find(ino);
  return diverged_ || m == made_.end() || !granted_.contains(m->second) ? 0 : m->second;
}

NsGrants::Tracked* NsGrants::OwnTracked(uint64_t ino) {
  auto tr = tracked_.find(ino);
  return tr == tracked_.end() || OwnDir(ino) == 0 ? nullptr : &tr->second;
}

std::optional<proto::Attr> NsGrants::WritableDir(const Creds& c, uint64_t parent) {
  if (diverged_ || !granted_.contains(parent)) return std::nullopt;
  std::optional<proto::Attr> dir;
  if (leases_->ListingEpoch(parent) != 0) dir = leases_->Attr(parent);
  // The server's permission check, certain to pass: the owner's bits.
  if (!dir || !S_ISDIR(dir->mode()) || dir->nlink() == 0 || dir->uid() != c.uid ||
      (dir->mode() & (S_IWUSR | S_IXUSR)) != (S_IWUSR | S_IXUSR)) {
    ++stats_.fallback;
    return std::nullopt;
  }
  return dir;
}

proto::LogEntry NsGrants::NewEntry(const Creds& c, int64_t now) {
  proto::LogEntry e;
  e.set_seq(meta_->rpc().NextSeq());
  FillCreds(c, e.mutable_creds());
  e.set_time_ns(now);
  return e;
}

absl::StatusOr<proto::Attr> NsGrants::CreateLocked(const Creds& c, const proto::Attr& dir,
                                                   const std::string& name, uint32_t mode,
                                                   uint64_t rdev, uint32_t umask, bool exclusive,
                                                   const std::string& target,
                                                   proto::LogEntry* open) {
  const uint64_t parent = dir.ino();
  const LeaseCache::Ticket t = leases_->Take();
  const uint64_t ino = TakeIno();
  if (ino == 0) return absl::ResourceExhaustedError("no inode numbers at hand");
  const int64_t now = options_.wall->NowNanos();
  std::vector<proto::LogEntry> entries;
  proto::LogEntry& e = entries.emplace_back(NewEntry(c, now));
  e.set_ino(ino);
  const bool symlink = S_ISLNK(mode);
  if (symlink) {
    proto::SymlinkRequest* r = e.mutable_symlink();
    r->set_parent(parent);
    r->set_name(name);
    r->set_target(target);
  } else {
    proto::MkNodRequest* r = e.mutable_mknod();
    r->set_parent(parent);
    r->set_name(name);
    r->set_mode(mode);
    r->set_rdev(rdev);
    r->set_umask(umask);
    r->set_exclusive(exclusive);
  }
  if (open != nullptr) {
    open->set_seq(meta_->rpc().NextSeq());
    FillCreds(c, open->mutable_creds());
    open->set_time_ns(now);
    open->mutable_open()->set_ino(ino);
    entries.push_back(*open);
  }
  RETURN_IF_ERROR(log_->TryAppend(std::move(entries)).status());
  // The inode as the server makes it (server/namespace.cc NewInode).
  const uint32_t type = mode & S_IFMT;
  uint32_t perm = symlink ? 0777 : (mode & 07777 & ~umask);
  const bool setgid_dir = (dir.mode() & S_ISGID) != 0;
  if (type == S_IFDIR && setgid_dir) perm |= S_ISGID;
  proto::Attr attr;
  attr.set_ino(ino);
  attr.set_mode(type | perm);
  attr.set_nlink(type == S_IFDIR ? 2 : 1);
  attr.set_uid(c.uid);
  attr.set_gid(setgid_dir ? dir.gid() : c.gid);
  attr.set_size(symlink ? target.size() : 0);
  attr.set_atime_ns(now);
  attr.set_mtime_ns(now);
  attr.set_ctime_ns(now);
  attr.set_no_xattrs(true);
  proto::Attr d = dir;
  d.set_mtime_ns(now);
  d.set_ctime_ns(now);
  if (type == S_IFDIR) d.set_nlink(d.nlink() + 1);
  leases_->NameAdded(parent, name, ino);
  leases_->PutAttr(t, attr, /*own=*/true);
  leases_->PutAttr(t, d, /*own=*/true);
  if (type != S_IFDIR) {
    if (made_.size() >= kMaxMade) {
      made_.clear();  // bounded: only knowledge is lost
      tracked_.clear();
    }
    made_[ino] = parent;
  }
  if (type == S_IFREG && tracked_.size() < kMaxTracked) tracked_[ino] = Tracked{attr, true};
  // Root made a change here: the directory is root's at the server, so the
  // server does not map this node's root to nobody.
  if (c.uid == 0) root_honored_ = true;
  if (type == S_IFDIR) {
    leases_->PutEmptyDir(t, ino, parent);
    // The server grants it when it applies the entry (the parent's grant
    // is held then: nothing recalls it before the log is applied).
    granted_.insert(ino);
  }
  ++stats_.local;
  return attr;
}

namespace {
// Whether a create of `mode` can be made here: the types the server makes
// for anyone, without setuid/setgid bits (which depend on group membership
// the mount does not know).
bool LocalType(uint32_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
    case S_IFDIR:
    case S_IFIFO:
    case S_IFSOCK:
      return (mode & (S_ISUID | S_ISGID)) == 0;
    default:
      return false;
  }
}
}  // namespace

std::optional<absl::StatusOr<proto::Attr>> NsGrants::LocalCreate(
    const Creds& c, uint64_t parent, const std::string& name, uint32_t mode, uint64_t rdev,
    uint32_t umask, bool exclusive, const std::string& target, std::optional<uint32_t> open_flags,
    const std::function<uint64_t(uint64_t)>& begin_open, uint64_t* handle) {
  std::optional<absl::StatusOr<proto::Attr>> out;
  {
    absl::MutexLock l(&mu_);
    std::optional<proto::Attr> dir = WritableDir(c, parent);
    if (!dir) return std::nullopt;
    uint64_t ino = 0;
    const LeaseCache::Name known = leases_->Lookup(parent, name, &ino);
    const bool type_ok = S_ISLNK(mode) ? ValidateSymlinkTarget(target).ok() : LocalType(mode);
    // The new inode's group is the caller's here only when the server
    // makes it so (a setgid directory passes its own on).
    if (!type_ok || !ValidateName(name).ok() || known == LeaseCache::Name::kUnknown ||
        (!(dir->mode() & S_ISGID) && dir->gid() != c.gid)) {
      ++stats_.fallback;
      return std::nullopt;
    }
    if (known == LeaseCache::Name::kPresent) {
      if (!exclusive) {
        ++stats_.fallback;
        return std::nullopt;  // open(O_CREAT) of an existing file: opened by the server
      }
      return absl::StatusOr<proto::Attr>(ErrnoStatus(EEXIST, name + " (granted directory)"));
    }
    proto::LogEntry open;
    bool no_numbers = false;
    if (open_flags.has_value()) {
      // The handle is numbered before the entries are made: the number the
      // next inode gets is known (CreateLocked's TakeIno takes it).
      uint64_t next = 0;
      for (const auto& [n, end] : ranges_) {
        if (n < end) {
          next = n;
          break;
        }
      }
      if (next == 0) {
        ++stats_.fallback;
        no_numbers = true;  // (asked for below, by Refill)
      } else {
        *handle = begin_open(next);
        open.mutable_open()->set_flags(*open_flags);
        open.mutable_open()->set_handle(*handle);
        open.mutable_open()->set_created(true);
      }
    }
    absl::StatusOr<proto::Attr> attr =
        no_numbers ? absl::ResourceExhaustedError("no inode numbers at hand")
                   : CreateLocked(c, *dir, name, mode, rdev, umask, exclusive, target,
                                  open_flags ? &open : nullptr);
    if (no_numbers) {
      // (Counted above.)
    } else if (attr.ok()) {
      if (open_flags.has_value()) logged_opens_[*handle] = LoggedOpen{attr->ino(), parent};
      out = std::move(attr);
    } else {
      ++stats_.fallback;  // (a begun open is the caller's to end)
    }
  }
  Refill();
  if (!out && !log_->error().ok()) Diverged();
  return out;
}

std::optional<absl::StatusOr<proto::Attr>> NsGrants::MkNod(const Creds& c, uint64_t parent,
                                                           const std::string& name, uint32_t mode,
                                                           uint64_t rdev, uint32_t umask,
                                                           bool exclusive) {
  // Anything but a regular file fails on an existing name, as the server.
  return LocalCreate(c, parent, name, mode, rdev, umask, exclusive || !S_ISREG(mode), "",
                     std::nullopt, nullptr, nullptr);
}

std::optional<absl::StatusOr<proto::Attr>> NsGrants::Create(
    const Creds& c, uint64_t parent, const std::string& name, uint32_t mode, uint32_t umask,
    uint32_t flags, const std::function<uint64_t(uint64_t)>& begin_open, uint64_t* handle) {
  *handle = 0;
  // (O_TRUNC of a new file: nothing to truncate.)
  return LocalCreate(c, parent, name, S_IFREG | mode, 0, umask, (flags & O_EXCL) != 0, "",
                     flags & ~(O_CREAT | O_EXCL | O_TRUNC), begin_open, handle);
}

std::optional<absl::StatusOr<proto::Attr>> NsGrants::Symlink(const Creds& c, uint64_t parent,
                                                             const std::string& name,
                                                             const std::string& target) {
  return LocalCreate(c, parent, name, S_IFLNK | 0777, 0, 0, true, target, std::nullopt, nullptr,
                     nullptr);
}

std::optional<absl::Status> NsGrants::Remove(const Creds& c, uint64_t parent,
                                             const std::string& name, bool is_dir, uint64_t* ino) {
  absl::MutexLock l(&mu_);
  std::optional<proto::Attr> dir = WritableDir(c, parent);
  if (!dir) return std::nullopt;
  if (name == "." || name == ".." || !ValidateName(name).ok()) {
    ++stats_.fallback;
    return std::nullopt;
  }
  const LeaseCache::Ticket t = leases_->Take();
  *ino = 0;
  switch (leases_->Lookup(parent, name, ino)) {
    case LeaseCache::Name::kAbsent:
      return ErrnoStatus(ENOENT, name + " (granted directory)");
    case LeaseCache::Name::kUnknown:
      ++stats_.fallback;
      return std::nullopt;
    case LeaseCache::Name::kPresent:
      break;
  }
  std::optional<proto::Attr> victim = leases_->Attr(*ino);
  // A file with other names: a look at one of those elsewhere recalls
  // the grants of that name's directory, not this one's (the server finds
  // an inode's directory by its first name), so it is removed by a call.
  // A file made here needs no attributes (dropped by its writes): it is
  // no directory and has one name.
  const bool ok = victim ? (S_ISDIR(victim->mode()) == is_dir &&
                            (is_dir ? leases_->KnownEmpty(*ino) : victim->nlink() == 1))
                         : (!is_dir && MadeHere(*ino, parent));
  if (!ok) {
    ++stats_.fallback;
    return std::nullopt;
  }
  const int64_t now = options_.wall->NowNanos();
  std::vector<proto::LogEntry> entries;
  proto::LogEntry& e = entries.emplace_back(NewEntry(c, now));
  proto::RemoveRequest* r = e.mutable_remove();
  r->set_parent(parent);
  r->set_name(name);
  r->set_is_dir(is_dir);
  r->set_expected_ino(*ino);
  if (!log_->TryAppend(std::move(entries)).ok()) {
    ++stats_.fallback;
    return std::nullopt;
  }
  proto::Attr d = *dir;
  d.set_mtime_ns(now);
  d.set_ctime_ns(now);
  if (is_dir) d.set_nlink(d.nlink() - 1);
  leases_->NameRemoved(parent, name);
  leases_->AttrChanged(*ino);
  if (is_dir) {
    leases_->DirChanged(*ino);
    granted_.erase(*ino);
  }
  made_.erase(*ino);
  tracked_.erase(*ino);
  leases_->PutAttr(t, d, /*own=*/true);
  ++stats_.local;
  return absl::OkStatus();
}

std::optional<absl::Status> NsGrants::Rename(const Creds& c, uint64_t parent,
                                             const std::string& name, uint64_t new_parent,
                                             const std::string& new_name, uint32_t flags,
                                             uint64_t* moved, uint64_t* replaced) {
  constexpr uint32_t kNoReplace = 1;  // RenameRequest.flags
  absl::MutexLock l(&mu_);
  *moved = *replaced = 0;
  std::optional<proto::Attr> src_dir = WritableDir(c, parent);
  if (!src_dir) return std::nullopt;
  std::optional<proto::Attr> dst_dir = new_parent == parent ? src_dir : WritableDir(c, new_parent);
  if (!dst_dir) return std::nullopt;
  auto fallback = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> std::optional<absl::Status> {
    ++stats_.fallback;
    return std::nullopt;
  };
  if ((flags & ~kNoReplace) != 0 || name == "." || name == ".." || new_name == "." ||
      new_name == ".." || !ValidateName(name).ok() || !ValidateName(new_name).ok()) {
    return fallback();
  }
  const LeaseCache::Ticket t = leases_->Take();
  uint64_t src = 0, dst = 0;
  switch (leases_->Lookup(parent, name, &src)) {
    case LeaseCache::Name::kAbsent:
      return ErrnoStatus(ENOENT, name + " (granted directory)");
    case LeaseCache::Name::kUnknown:
      return fallback();
    case LeaseCache::Name::kPresent:
      break;
  }
  const LeaseCache::Name target = leases_->Lookup(new_parent, new_name, &dst);
  if (target == LeaseCache::Name::kUnknown) return fallback();
  std::optional<proto::Attr> src_attr = leases_->Attr(src);
  // (Files with other names, files made here: as in Remove.)
  if (src_attr ? (S_ISDIR(src_attr->mode()) || src_attr->nlink() != 1) : !MadeHere(src, parent)) {
    return fallback();
  }
  std::optional<proto::Attr> dst_attr;
  if (target == LeaseCache::Name::kPresent) {
    if (flags & kNoReplace) return ErrnoStatus(EEXIST, new_name + " (granted directory)");
    dst_attr = leases_->Attr(dst);
    // Over a directory (EISDIR), or onto another name of the same inode
    // (nothing, or ESTALE): the server's answer.
    if (dst == src || (dst_attr ? (S_ISDIR(dst_attr->mode()) || dst_attr->nlink() != 1)
                                : !MadeHere(dst, new_parent))) {
      return fallback();
    }
  } else {
    dst = 0;
  }
  const int64_t now = options_.wall->NowNanos();
  std::vector<proto::LogEntry> entries;
  proto::LogEntry& e = entries.emplace_back(NewEntry(c, now));
  proto::RenameRequest* r = e.mutable_rename();
  r->set_parent(parent);
  r->set_name(name);
  r->set_new_parent(new_parent);
  r->set_new_name(new_name);
  r->set_flags(flags);
  r->set_expected_ino(src);
  r->set_expected_new_ino(dst);
  if (!log_->TryAppend(std::move(entries)).ok()) return fallback();
  // As the server changes them (server/namespace.cc Rename).
  leases_->NameRemoved(parent, name);
  leases_->NameAdded(new_parent, new_name, src);
  leases_->AttrChanged(src);
  if (src_attr) {
    proto::Attr moved_attr = *src_attr;
    moved_attr.set_ctime_ns(now);
    leases_->PutAttr(t, moved_attr, /*own=*/true);
  }
  if (made_.contains(src)) made_[src] = new_parent;
  if (auto tr = tracked_.find(src); tr != tracked_.end()) {
    tr->second.attr.set_ctime_ns(now);  // as the server's rename does
  }
  if (dst != 0) {
    leases_->AttrChanged(dst);
    made_.erase(dst);
    tracked_.erase(dst);
  }
  // Its closes need the grant of the directory it is in now (both held).
  for (auto& [handle, open] : logged_opens_) {
    if (open.ino == src) open.dir = new_parent;
  }
  for (proto::Attr d : {*src_dir, *dst_dir}) {
    d.set_mtime_ns(now);
    d.set_ctime_ns(now);
    leases_->PutAttr(t, d, /*own=*/true);
    if (new_parent == parent) break;
  }
  *moved = src;
  *replaced = dst;
  ++stats_.local;
  return absl::OkStatus();
}

// --- attributes of files made here ----------------------------------------------

NsGrants::Tracked* NsGrants::SettableHere(const Creds& c, const proto::SetAttrRequest& req,
                                          bool* refused) {
  using V = proto::SetAttrRequest;
  *refused = false;
  const uint32_t valid = req.valid();
  constexpr uint32_t kHere =
      V::MODE | V::UID | V::GID | V::ATIME | V::MTIME | V::ATIME_NOW | V::MTIME_NOW;
  if (valid == 0 || (valid & ~kHere) != 0) return nullptr;
  Tracked* tr = OwnTracked(req.ino());
  if (tr == nullptr) return nullptr;
  const proto::Attr& a = tr->attr;
  // The server's rules (server/inodes.cc SetAttr), where they are certain
  // to pass: the owner or root; no set-id or sticky bits (their rules
  // depend on groups); owner and group changed by root only.
  // Root's privileges only where the server is known to grant them to this
  // node (root_honored_; a node whose root is mapped to nobody gets none).
  const bool root = c.uid == 0 && root_honored_;
  const bool uid_change = (valid & V::UID) && req.uid() != a.uid();
  const bool gid_change = (valid & V::GID) && req.gid() != a.gid();
  if ((!root && c.uid != a.uid()) || ((valid & V::MODE) && (req.mode() & 07000) != 0) ||
      (!root && (uid_change || gid_change))) {
    *refused = true;
    return nullptr;
  }
  return tr;
}

std::optional<absl::StatusOr<proto::Attr>> NsGrants::Open(
    const Creds& c, uint64_t ino, uint32_t flags,
    const std::function<uint64_t(uint64_t)>& begin_open, uint64_t* handle) {
  *handle = 0;
  if (flags & (O_CREAT | O_TRUNC)) return std::nullopt;
  absl::MutexLock l(&mu_);
  const uint64_t dir = OwnDir(ino);
  Tracked* tr = OwnTracked(ino);
  if (tr == nullptr) return std::nullopt;
  const proto::Attr& a = tr->attr;
  // The server's check (server/inodes.cc CheckOpen, CheckAccess) where it
  // is certain: root, or the owner by the owner bits.
  uint32_t need = 0;
  switch (flags & O_ACCMODE) {
    case O_RDONLY:
      need = S_IRUSR;
      break;
    case O_WRONLY:
      need = S_IWUSR;
      break;
    default:
      need = S_IRUSR | S_IWUSR;
  }
  if (!(c.uid == 0 && root_honored_) && (c.uid != a.uid() || (a.mode() & need) != need)) {
    ++stats_.fallback;
    return std::nullopt;
  }
  const uint64_t h = begin_open(ino);
  std::vector<proto::LogEntry> entries;
  proto::LogEntry& e = entries.emplace_back(NewEntry(c, options_.wall->NowNanos()));
  e.mutable_open()->set_ino(ino);
  e.mutable_open()->set_flags(flags);
  e.mutable_open()->set_handle(h);
  *handle = h;  // the caller ends the open it began, whatever the outcome
  if (!log_->TryAppend(std::move(entries)).ok()) {
    ++stats_.fallback;
    return std::nullopt;
  }
  logged_opens_[h] = LoggedOpen{ino, dir};
  ++stats_.local;
  return WithBlocks(*tr);
}

bool NsGrants::MaySetAttr(const Creds& c, const proto::SetAttrRequest& req) {
  absl::MutexLock l(&mu_);
  bool refused;
  return SettableHere(c, req, &refused) != nullptr;
}

std::optional<absl::StatusOr<proto::Attr>> NsGrants::SetAttr(const Creds& c,
                                                             const proto::SetAttrRequest& req) {
  using V = proto::SetAttrRequest;
  const uint32_t valid = req.valid();
  const uint64_t ino = req.ino();
  absl::MutexLock l(&mu_);
  bool refused;
  Tracked* tr = SettableHere(c, req, &refused);
  if (tr == nullptr) {
    if (refused) ++stats_.fallback;
    return std::nullopt;
  }
  proto::Attr a = tr->attr;
  const int64_t now = options_.wall->NowNanos();
  std::vector<proto::LogEntry> entries;
  proto::LogEntry& e = entries.emplace_back(NewEntry(c, now));
  *e.mutable_setattr() = req;
  e.mutable_setattr()->clear_header();
  if (!log_->TryAppend(std::move(entries)).ok()) {
    ++stats_.fallback;
    return std::nullopt;
  }
  if (valid & V::MODE) a.set_mode((a.mode() & S_IFMT) | (req.mode() & 07777));
  if (valid & V::UID) a.set_uid(req.uid());
  if (valid & V::GID) a.set_gid(req.gid());
  if (valid & V::ATIME_NOW) {
    a.set_atime_ns(now);
  } else if (valid & V::ATIME) {
    a.set_atime_ns(req.atime_ns());
  }
  if (valid & V::MTIME_NOW) {
    a.set_mtime_ns(now);
  } else if (valid & V::MTIME) {
    a.set_mtime_ns(req.mtime_ns());
  }
  a.set_ctime_ns(now);
  tr->attr = a;
  leases_->AttrChanged(ino);
  ++stats_.local;
  return WithBlocks(*tr);
}

proto::Attr NsGrants::WithBlocks(const Tracked& t) {
  // Without a hole, every 4 KiB block below the size is allocated
  // (server/inodes.cc ToAttr counts 512-byte units). With one, a guess.
  proto::Attr a = t.attr;
  a.set_blocks((a.size() + 4095) / 4096 * 8);
  return a;
}

std::optional<proto::Attr> NsGrants::Attr(uint64_t ino) {
  absl::MutexLock l(&mu_);
  const Tracked* tr = OwnTracked(ino);
  if (tr == nullptr || !tr->dense) return std::nullopt;
  return WithBlocks(*tr);
}

uint32_t NsGrants::Mode(uint64_t ino) {
  absl::MutexLock l(&mu_);
  const Tracked* tr = OwnTracked(ino);
  return tr == nullptr ? 0 : tr->attr.mode();
}

void NsGrants::Wrote(uint64_t ino, uint64_t offset, uint64_t size, int64_t time_ns) {
  absl::MutexLock l(&mu_);
  auto tr = tracked_.find(ino);
  if (tr == tracked_.end()) return;
  proto::Attr& a = tr->second.attr;
  if (offset > a.size()) tr->second.dense = false;
  a.set_size(std::max<uint64_t>(a.size(), offset + size));
  // As the commit of its flush does (Allocator::CommitWrite).
  if (time_ns >= a.ctime_ns()) {
    a.set_mtime_ns(time_ns);
    a.set_ctime_ns(time_ns);
  } else {
    a.set_mtime_ns(std::max(a.mtime_ns(), time_ns));
  }
}

std::optional<uint64_t> NsGrants::TrackedSize(uint64_t ino) {
  absl::MutexLock l(&mu_);
  const Tracked* tr = OwnTracked(ino);
  if (tr == nullptr) return std::nullopt;
  return tr->attr.size();
}

bool NsGrants::NoXattrs(const Creds& c, uint64_t ino, const std::string& name) {
  absl::MutexLock l(&mu_);
  const Tracked* tr = OwnTracked(ino);
  if (tr == nullptr) return false;
  // Where the server's answer would be "none" whoever asks: a listing,
  // security.* (the kernel's question before each write), or user.* by
  // the owner who may read it.
  const proto::Attr& a = tr->attr;
  return name.empty() || absl::StartsWith(name, "security.") ||
         (absl::StartsWith(name, "user.") && c.uid == a.uid() && (a.mode() & S_IRUSR));
}

void NsGrants::Untrack(uint64_t ino) {
  absl::MutexLock l(&mu_);
  tracked_.erase(ino);
}

bool NsGrants::Release(uint64_t ino, uint64_t handle) {
  absl::MutexLock l(&mu_);
  auto it = logged_opens_.find(handle);
  if (it == logged_opens_.end()) return false;
  const uint64_t parent = it->second.dir;
  logged_opens_.erase(it);
  // Its directory's grant is gone: the open was applied when it went (the
  // recall applied the log), and the close goes as a call.
  if (diverged_ || !granted_.contains(parent)) return false;
  std::vector<proto::LogEntry> entries;
  proto::LogEntry& e = entries.emplace_back(NewEntry(Creds(), 0));
  e.mutable_release()->set_ino(ino);
  e.mutable_release()->set_handle(handle);
  return log_->TryAppend(std::move(entries)).ok();
}

}  // namespace grantfs
