// GrantFsService: the calls of namespace grants (docs/namespace-grants.md):
// inode ranges, and the log of operations a mount made on its own in the
// directories granted to it, applied in order, each exactly once, durable
// and replicated together.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/keys.h"
#include "server/service_call.h"

namespace grantfs {
namespace {

// Entries one ApplyLog may carry (a mount sends fewer: its batches are
// bounded by size and age).
constexpr int kMaxLogEntries = 4096;

// The directories an entry changes names in: the ones whose grants it
// needs.
std::vector<uint64_t> EntryDirs(const proto::LogEntry& e) {
  switch (e.op_case()) {
    case proto::LogEntry::kMknod:
      return {e.mknod().parent()};
    case proto::LogEntry::kSymlink:
      return {e.symlink().parent()};
    case proto::LogEntry::kLink:
      return {e.link().new_parent()};  // and the inode's (ApplyEntry)
    case proto::LogEntry::kRemove:
      return {e.remove().parent()};
    case proto::LogEntry::kRename:
      return {e.rename().parent(), e.rename().new_parent()};
    case proto::LogEntry::kSetattr:
    case proto::LogEntry::kOpen:
    case proto::LogEntry::kRelease:
    case proto::LogEntry::kWrite:
      return {};  // the inode's directory (ApplyEntry)
    case proto::LogEntry::OP_NOT_SET:
      break;
  }
  return {};
}

}  // namespace

// The BeginApply calls of one ApplyLog, ended once its batch is durable:
// until then no recall waiting for the session ends by its lease running
// out.
class LogPins {
 public:
  LogPins(LeaseTable* leases, uint64_t client_id) : leases_(leases), client_id_(client_id) {}
  ~LogPins() {
    if (n_ > 0) leases_->EndApply(client_id_, n_);
  }
  LogPins(const LogPins&) = delete;
  LogPins& operator=(const LogPins&) = delete;
  // BeginApply; counted when it succeeds.
  bool Begin(absl::Span<const LeaseKey> keys) {
    if (!leases_->BeginApply(client_id_, keys)) return false;
    ++n_;
    return true;
  }

 private:
  LeaseTable* const leases_;
  const uint64_t client_id_;
  int n_ = 0;
};

// The data of a batch's write entries for files the same batch makes,
// written to disk together, from several threads, before the batch is
// applied in order (Volume::StageWrite): the fdatasync of one small file's
// data after another is what a batch of them waited for, one at a time.
// Each staged inode is claimed (no other attempt of the batch stages it
// meanwhile); a staged write that is not committed (refused, not reached)
// is taken back when the batch ends, and its claim let go.
class StagedWrites {
 public:
  explicit StagedWrites(Volume* volume) : volume_(volume) {}
  ~StagedWrites() {
    for (const Item& i : items_) {
      if (i.staged && !i.applied) volume_->UnstageWrite(i.ino, i.offset, i.length);
      volume_->EndStage(i.ino);
    }
  }
  StagedWrites(const StagedWrites&) = delete;
  StagedWrites& operator=(const StagedWrites&) = delete;

  // Stages the write entries of `req` (from the session's space grant)
  // that are the only data entry of a regular file an earlier entry of it
  // makes, in a number the session holds unused (Volume::BeginStage), when
  // there are at least two and the session's grant covers them all.
  void Stage(uint64_t client_id, const proto::ApplyLogRequest& req) {
    absl::flat_hash_map<uint64_t, int> made;  // ino -> its mknod's index
    absl::flat_hash_map<uint64_t, int> writes, resized;
    for (int k = 0; k < req.entries_size(); ++k) {
      const proto::LogEntry& e = req.entries(k);
      if (e.has_mknod() && S_ISREG(e.mknod().mode()) && e.ino() != 0) made.emplace(e.ino(), k);
      if (e.has_write()) ++writes[e.write().ino()];
      if (e.has_setattr() && (e.setattr().valid() & proto::SetAttrRequest::SIZE)) {
        ++resized[e.setattr().ino()];
      }
    }
    std::vector<int> wanted;
    uint64_t blocks = 0;
    for (int k = 0; k < req.entries_size(); ++k) {
      const proto::LogEntry& e = req.entries(k);
      if (!e.has_write() || e.write().data().empty() || !e.write().from_grant()) continue;
      const uint64_t ino = e.write().ino();
      auto m = made.find(ino);
      if (m == made.end() || m->second > k || writes[ino] != 1 || resized.contains(ino)) continue;
      wanted.push_back(k);
      const uint64_t first = e.write().offset() / kBlock;
      const uint64_t last = (e.write().offset() + e.write().data().size() - 1) / kBlock;
      blocks += last - first + 1;
    }
    // Not past what the session was promised (its grant): the disk has room
    // for it, and nobody can make the server write more than that here.
    if (wanted.size() < 2 || blocks > volume_->meta().space().GrantOf(client_id)) return;
    for (int k : wanted) {
      const proto::WriteRequest& w = req.entries(k).write();
      if (!volume_->BeginStage(client_id, w.ino())) continue;
      items_.push_back(Item{k, w.ino(), w.offset(), w.data().size(), &w.data()});
    }
    if (items_.size() < 2) return;
    const size_t n = std::min<size_t>(kThreads, items_.size());
    std::atomic<bool> failed{false};
    auto work = [this, n, &failed](size_t t) {
      for (size_t i = t; i < items_.size() && !failed.load(); i += n) {
        Item& it = items_[i];
        absl::Status s = volume_->StageWrite(it.ino, it.offset, *it.data, /*sync=*/false);
        it.staged = s.ok();
        if (!s.ok()) {
          // (A full disk, most likely: the rest are written as they are
          // applied, where a write from a grant may borrow the space hold.)
          failed = true;
          LOG_EVERY_N(WARNING, 100) << "ApplyLog: staging the data of inode " << it.ino << ": " << s
                                    << " (written when its entry is applied)";
        }
      }
    };
    std::vector<std::thread> threads;
    try {
      for (size_t t = 1; t < n; ++t) threads.emplace_back(work, t);
    } catch (const std::system_error& e) {
      LOG_EVERY_N(WARNING, 100) << "ApplyLog: no thread to stage writes with (" << e.what()
                                << "); fewer are used";
    }
    // Items of threads that could not start are simply not staged.
    work(0);
    for (std::thread& t : threads) t.join();
  }
  // Whether the data of entry `index` (of the request) is staged; Applied:
  // its write committed it.
  bool staged(int index) const {
    const Item* i = Find(index);
    return i != nullptr && i->staged;
  }
  void Applied(int index) {
    if (Item* i = Find(index)) i->applied = true;
  }

 private:
  static constexpr size_t kThreads = 8;
  static constexpr uint64_t kBlock = 4096;
  struct Item {
    int index;  // in the request
    uint64_t ino;
    uint64_t offset;
    uint64_t length;
    const std::string* data;
    bool staged = false;
    bool applied = false;
  };
  const Item* Find(int index) const {
    // (Items are in the request's order: a binary search.)
    auto it = std::lower_bound(items_.begin(), items_.end(), index,
                               [](const Item& i, int k) { return i.index < k; });
    return it != items_.end() && it->index == index ? &*it : nullptr;
  }
  Item* Find(int index) { return const_cast<Item*>(std::as_const(*this).Find(index)); }
  Volume* const volume_;
  std::vector<Item> items_;
};

grpc::Status GrantFsService::InodeRange(Ctx* ctx, const proto::InodeRangeRequest* req,
                                        proto::InodeRangeReply* reply) {
  return ServeOnce(
      "InodeRange", ctx, req, reply, {},
      [&](const proto::DedupeRecord& prior, const RequestContext&) {
        // The first attempt's range: the record keeps its first number,
        // and the session's record its end.
        ASSIGN_OR_RETURN(std::optional<proto::SessionRecord> rec,
                         volume_->meta().sessions().GetSession(req->header().client_id()));
        if (rec) {
          for (const auto& r : rec->ino_ranges()) {
            if (r.first() == prior.value()) {
              reply->set_first(r.first());
              reply->set_count(static_cast<uint32_t>(r.end() - r.first()));
              return absl::OkStatus();
            }
          }
        }
        return ErrnoStatus(ESTALE, "the range of the first attempt is no longer held");
      },
      [&](const RequestContext& rc, const proto::DedupeRecord*) -> absl::Status {
        // The tag records the range's first number (AddInodeRange).
        ASSIGN_OR_RETURN(proto::SessionRecord::InodeRange r,
                         volume_->InodeRange(rc, req->count(), req->keep_from()));
        reply->set_first(r.first());
        reply->set_count(static_cast<uint32_t>(r.end() - r.first()));
        return absl::OkStatus();
      });
}

grpc::Status GrantFsService::ApplyLog(Ctx* ctx, const proto::ApplyLogRequest* req,
                                      proto::ApplyLogReply* reply) {
  return Serve("ApplyLog", ctx, req, reply, {}, [&](const RequestContext& rc) -> absl::Status {
    if (rc.read_only) return ErrnoStatus(EROFS, "a read-only node");
    if (req->entries_size() > kMaxLogEntries) {
      return ErrnoStatus(EINVAL, absl::StrCat(req->entries_size(), " log entries in one call (",
                                              kMaxLogEntries, " at most)"));
    }
    const CallerPolicy policy = options_.transport.PolicyOf(*ctx);
    LogPins pins(&volume_->leases(), rc.client_id);
    StagedWrites staged(volume_);
    staged.Stage(rc.client_id, *req);
    RequestTag::Durability durable;
    for (int k = 0; k < req->entries_size(); ++k) {
      const proto::LogEntry& e = req->entries(k);
      absl::Status s = ApplyEntry(ctx, rc, policy, e, &pins, &durable, reply, &staged, k);
      if (!s.ok() && (absl::IsUnavailable(s) || absl::IsResourceExhausted(s)) && !HasErrno(s)) {
        // Not an outcome of the entry: the mount sends the batch again
        // (what was applied is answered from its records).
        RETURN_IF_ERROR(volume_->meta().store().WaitDurable(durable));
        return s;
      }
      if (!s.ok() && e.has_write()) {
        // Only its data is not stored: the namespace is as the mount made
        // it, and the mount sends the data again as a Write.
        proto::LogWritten* w = reply->add_written();
        w->set_seq(e.seq());
        w->set_err(ToErrno(s));
        reply->add_errs(0);
        continue;
      }
      reply->add_errs(ToErrno(s));
      // The entries after it were made on a state the server does not
      // have: none is applied (the mount fails the directory's next fsync).
      if (!s.ok()) break;
    }
    // One WAL sync and one replica round trip for the whole batch.
    RETURN_IF_ERROR(volume_->meta().store().WaitDurable(durable));
    FillStatFs(reply->mutable_space());
    if (reply->written_size() > 0) reply->set_synced_always(volume_->syncs_data());
    return absl::OkStatus();
  });
}

absl::Status GrantFsService::ApplyEntry(Ctx* ctx, const RequestContext& rc,
                                        const CallerPolicy& policy, const proto::LogEntry& e,
                                        LogPins* pins, RequestTag::Durability* durable,
                                        proto::ApplyLogReply* reply, StagedWrites* staged,
                                        int index) {
  if (e.seq() == 0 || e.op_case() == proto::LogEntry::OP_NOT_SET) {
    return ErrnoStatus(EINVAL, "a log entry without a sequence number or an operation");
  }
  std::vector<uint64_t> dirs = EntryDirs(e);
  // A link or a change of attributes changes the inode, which others may
  // reach by its number: only in a directory the session holds.
  uint64_t target = 0;
  if (e.has_link()) target = e.link().ino();
  if (e.has_setattr()) target = e.setattr().ino();
  if (e.has_open()) target = e.open().ino();
  if (e.has_release()) target = e.release().ino();
  if (e.has_write()) target = e.write().ino();
  if (target != 0) {
    RETURN_IF_ERROR(Reaches(ctx, rc, "ApplyLog", target));
    ASSIGN_OR_RETURN(proto::InodeRecord rec, volume_->meta().inodes().GetInode(target));
    dirs.push_back(S_ISDIR(rec.mode()) ? target : rec.parent());
  } else if (e.has_link() || e.has_setattr() || e.has_open() || e.has_release() || e.has_write()) {
    return ErrnoStatus(EINVAL, "log entry: inode 0");
  }
  std::vector<LeaseKey> keys;
  for (uint64_t dir : dirs) {
    if (dir == 0) return ErrnoStatus(EINVAL, "log entry: inode 0");
    RETURN_IF_ERROR(Reaches(ctx, rc, "ApplyLog", dir));
    keys.push_back(LeaseKey::NsGrant(dir));
  }
  LeaseTable& leases = volume_->leases();
  proto::RequestHeader header;
  header.set_client_id(rc.client_id);
  header.set_seq(e.seq());
  service_call::Once once(volume_, header);
  if (grpc::Status busy = once.busy(); !busy.ok()) {
    return absl::UnavailableError(busy.error_message());
  }
  RETURN_IF_ERROR(once.error());
  if (once.prior()) {
    // Applied by an earlier attempt, whose batch may not be durable yet:
    // this one waits for everything applied so far. A directory it made is
    // the session's again while it holds the one it is in.
    const RequestTag::Durability now = volume_->meta().store().Applied();
    durable->ticket = std::max(durable->ticket, now.ticket);
    durable->replicated_seq = std::max(durable->replicated_seq, now.replicated_seq);
    if (e.has_mknod() && S_ISDIR(e.mknod().mode()) && pins->Begin(keys)) {
      leases.GrantCreated(rc.client_id, e.ino());
    }
    if (e.has_write()) {
      // As Write answers a retry: the same grant use, the file now.
      proto::LogWritten* w = reply->add_written();
      w->set_seq(e.seq());
      w->set_grant_used_bytes(once.prior()->value());
      if (auto a = volume_->meta().inodes().GetAttr(target); a.ok()) *w->mutable_attr() = *a;
    }
    return absl::OkStatus();
  }
  if (!pins->Begin(keys)) {
    LOG(WARNING) << "ApplyLog: session " << rc.client_id << " entry " << e.seq()
                 << ": the session holds no grant of its directory (never granted, recalled"
                 << " and acknowledged, or its lease ran out)";
    return ErrnoStatus(ESTALE, "the namespace grant of the entry's directory is gone");
  }
  RequestContext erc = rc;
  erc.caller = service_call::CallerOf(e.creds(), policy);
  RequestTag* tag = once.tag();
  if (tag == nullptr) return ErrnoStatus(EINVAL, "log entry: no session");
  tag->time_ns = ClampMountTime(e.time_ns());
  // A truncation frees chunk files after its commit: that commit must be
  // durable first (the others wait once for the whole batch).
  tag->defer_durable = !(e.has_setattr() && (e.setattr().valid() & proto::SetAttrRequest::SIZE));
  erc.tag = tag;
  erc.log_entry = true;
  // The leases of what a create makes: as for a call (LeaseCreated).
  const uint64_t epoch = leases.Epoch();
  auto lease_created = [&](const proto::Attr& a) {
    bool leased =
        leases.Takes(rc.client_id) && leases.Grant(rc.client_id, LeaseKey::Attr(a.ino()), epoch);
    if (S_ISDIR(a.mode())) {
      leased = leased && leases.Grant(rc.client_id, LeaseKey::Dir(a.ino()), epoch);
    }
    if (!leased) reply->add_unleased(a.ino());
  };
  absl::Status s;
  switch (e.op_case()) {
    case proto::LogEntry::kMknod: {
      proto::MkNodRequest r = e.mknod();
      r.set_exclusive(true);  // the mount found no such name
      r.set_want_grant(false);
      tag->ino = e.ino();
      if (tag->ino == 0) return ErrnoStatus(EINVAL, "log entry: a create without an inode number");
      absl::StatusOr<proto::Attr> a = volume_->MkNod(erc, r);
      s = a.status();
      if (!a.ok()) break;
      lease_created(*a);
      // A directory made in a granted one is granted too: nobody else can
      // know it yet, and the entries that follow may be in it.
      if (S_ISDIR(a->mode())) leases.GrantCreated(rc.client_id, a->ino());
      break;
    }
    case proto::LogEntry::kSymlink: {
      tag->ino = e.ino();
      if (tag->ino == 0) return ErrnoStatus(EINVAL, "log entry: a create without an inode number");
      const proto::SymlinkRequest& r = e.symlink();
      absl::StatusOr<proto::Attr> a = volume_->Symlink(erc, r.parent(), r.name(), r.target());
      s = a.status();
      if (a.ok()) lease_created(*a);
      break;
    }
    case proto::LogEntry::kLink: {
      const proto::LinkRequest& r = e.link();
      s = volume_->Link(erc, r.ino(), r.new_parent(), r.new_name()).status();
      break;
    }
    case proto::LogEntry::kRemove: {
      const proto::RemoveRequest& r = e.remove();
      absl::StatusOr<Removed> removed =
          volume_->Remove(erc, r.parent(), r.name(), r.is_dir(), r.expected_ino());
      s = removed.status();
      if (removed.ok() && r.is_dir()) leases.Drop(rc.client_id, LeaseKey::NsGrant(removed->ino));
      break;
    }
    case proto::LogEntry::kRename: {
      absl::StatusOr<Removed> moved = volume_->Rename(erc, e.rename());
      s = moved.status();
      // A directory it replaced is gone, and its grant with it.
      if (moved.ok() && moved->ino != 0 && moved->exchanged == 0) {
        leases.Drop(rc.client_id, LeaseKey::NsGrant(moved->ino));
      }
      break;
    }
    case proto::LogEntry::kSetattr:
      s = volume_->SetAttr(erc, e.setattr()).status();
      break;
    case proto::LogEntry::kOpen: {
      const proto::OpenRequest& r = e.open();
      s = volume_->Open(erc, r.ino(), r.flags(), r.handle(), r.created()).status();
      break;
    }
    case proto::LogEntry::kRelease:
      s = volume_->Release(erc, e.release().ino(), e.release().handle());
      break;
    case proto::LogEntry::kWrite: {
      // As a Write (service_fs.cc), with the batch's one wait for
      // durability.
      uint64_t grant_used = 0;
      absl::StatusOr<proto::Attr> a =
          StoreWrite(erc, e.write(), /*sync=*/false, &grant_used, staged->staged(index));
      s = a.status();
      if (!a.ok()) break;
      staged->Applied(index);
      proto::LogWritten* w = reply->add_written();
      w->set_seq(e.seq());
      w->set_grant_used_bytes(grant_used);
      *w->mutable_attr() = *std::move(a);
      break;
    }
    case proto::LogEntry::OP_NOT_SET:
      break;
  }
  durable->ticket = std::max(durable->ticket, tag->durable.ticket);
  durable->replicated_seq = std::max(durable->replicated_seq, tag->durable.replicated_seq);
  if (!s.ok() && HasErrno(s)) {
    LOG(WARNING) << "ApplyLog: session " << rc.client_id << " entry " << e.seq()
                 << " refused: " << s;
  }
  return s;
}

}  // namespace grantfs
