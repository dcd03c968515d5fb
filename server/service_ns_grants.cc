// GrantFsService: the calls of namespace grants (docs/namespace-grants.md):
// inode ranges, and the log of operations a mount made on its own in the
// directories granted to it, applied in order, each exactly once, durable
// and replicated together.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <vector>

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
      return {e.link().new_parent()};
    case proto::LogEntry::kRemove:
      return {e.remove().parent()};
    case proto::LogEntry::kRename:
      return {e.rename().parent(), e.rename().new_parent()};
    case proto::LogEntry::kSetattr:
      return {};  // of an inode in a granted directory: checked by its parent
    case proto::LogEntry::OP_NOT_SET:
      break;
  }
  return {};
}

// Ends what LeaseTable::BeginApply began.
class Applying {
 public:
  Applying(LeaseTable* leases, uint64_t client_id) : leases_(leases), client_id_(client_id) {}
  ~Applying() { leases_->EndApply(client_id_); }
  Applying(const Applying&) = delete;
  Applying& operator=(const Applying&) = delete;

 private:
  LeaseTable* const leases_;
  const uint64_t client_id_;
};

}  // namespace

grpc::Status GrantFsService::InodeRange(Ctx* ctx, const proto::InodeRangeRequest* req,
                                        proto::InodeRangeReply* reply) {
  return ServeOnce(
      "InodeRange", ctx, req, reply, {},
      [&](const proto::DedupeRecord& prior, const RequestContext&) {
        // The first attempt's range: the record keeps its first number,
        // and the session's record its end.
        absl::StatusOr<std::optional<std::string>> raw =
            volume_->meta().store().Get(keys::Session(req->header().client_id()));
        proto::SessionRecord rec;
        if (!raw.ok()) return raw.status();
        if (*raw && rec.ParseFromString(**raw)) {
          for (const auto& r : rec.ino_ranges()) {
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
    RequestTag::Durability durable;
    for (const proto::LogEntry& e : req->entries()) {
      absl::Status s = ApplyEntry(ctx, rc, policy, e, &durable);
      if (!s.ok() && (absl::IsUnavailable(s) || absl::IsResourceExhausted(s)) && !HasErrno(s)) {
        // Not an outcome of the entry: the mount sends the batch again
        // (what was applied is answered from its records).
        return s;
      }
      reply->add_errs(ToErrno(s));
    }
    // One WAL sync and one replica round trip for the whole batch.
    return volume_->meta().store().WaitDurable(durable);
  });
}

absl::Status GrantFsService::ApplyEntry(Ctx* ctx, const RequestContext& rc,
                                        const CallerPolicy& policy, const proto::LogEntry& e,
                                        RequestTag::Durability* durable) {
  if (e.seq() == 0 || e.op_case() == proto::LogEntry::OP_NOT_SET) {
    return ErrnoStatus(EINVAL, "a log entry without a sequence number or an operation");
  }
  const std::vector<uint64_t> dirs = EntryDirs(e);
  std::vector<LeaseKey> keys;
  for (uint64_t dir : dirs) {
    if (dir == 0) return ErrnoStatus(EINVAL, "log entry: inode 0");
    RETURN_IF_ERROR(Reaches(ctx, rc, "ApplyLog", dir));
    keys.push_back(LeaseKey::NsGrant(dir));
  }
  LeaseTable& leases = volume_->leases();
  if (!leases.BeginApply(rc.client_id, keys)) {
    LOG(WARNING) << "ApplyLog: session " << rc.client_id << " entry " << e.seq()
                 << ": the session holds no grant of its directory (never granted, recalled"
                 << " and acknowledged, or its lease ran out)";
    return ErrnoStatus(ESTALE, "the namespace grant of the entry's directory is gone");
  }
  Applying applying(&leases, rc.client_id);
  proto::RequestHeader header;
  header.set_client_id(rc.client_id);
  header.set_seq(e.seq());
  service_call::Once once(volume_, header);
  if (grpc::Status busy = once.busy(); !busy.ok()) {
    return absl::UnavailableError(busy.error_message());
  }
  RETURN_IF_ERROR(once.error());
  if (once.prior()) return absl::OkStatus();  // applied by an earlier attempt
  RequestContext erc = rc;
  erc.caller = service_call::CallerOf(e.creds(), policy);
  RequestTag* tag = once.tag();
  if (tag == nullptr) return ErrnoStatus(EINVAL, "log entry: no session");
  tag->time_ns = e.time_ns();
  tag->defer_durable = true;
  erc.tag = tag;
  absl::Status s;
  switch (e.op_case()) {
    case proto::LogEntry::kMknod: {
      proto::MkNodRequest r = e.mknod();
      r.set_exclusive(true);  // the mount found no such name
      r.set_want_grant(false);
      tag->ino = e.ino();
      if (tag->ino == 0) return ErrnoStatus(EINVAL, "log entry: a create without an inode number");
      const uint64_t epoch = leases.Epoch();
      bool created = false;
      absl::StatusOr<proto::Attr> a = volume_->MkNod(erc, r, &created);
      s = a.status();
      // A directory made in a granted one is granted too: nobody else can
      // know it yet, and the entries that follow may be in it.
      if (a.ok() && S_ISDIR(a->mode())) leases.GrantCreated(rc.client_id, a->ino(), epoch);
      break;
    }
    case proto::LogEntry::kSymlink: {
      tag->ino = e.ino();
      if (tag->ino == 0) return ErrnoStatus(EINVAL, "log entry: a create without an inode number");
      const proto::SymlinkRequest& r = e.symlink();
      s = volume_->Symlink(erc, r.parent(), r.name(), r.target()).status();
      break;
    }
    case proto::LogEntry::kLink: {
      const proto::LinkRequest& r = e.link();
      RETURN_IF_ERROR(Reaches(ctx, rc, "ApplyLog", r.ino()));
      s = volume_->Link(erc, r.ino(), r.new_parent(), r.new_name()).status();
      break;
    }
    case proto::LogEntry::kRemove: {
      const proto::RemoveRequest& r = e.remove();
      s = volume_->Remove(erc, r.parent(), r.name(), r.is_dir(), r.expected_ino()).status();
      break;
    }
    case proto::LogEntry::kRename:
      s = volume_->Rename(erc, e.rename()).status();
      break;
    case proto::LogEntry::kSetattr: {
      const proto::SetAttrRequest& r = e.setattr();
      if (r.ino() == 0) return ErrnoStatus(EINVAL, "log entry: inode 0");
      RETURN_IF_ERROR(Reaches(ctx, rc, "ApplyLog", r.ino()));
      // Only of an inode in a directory the session holds.
      ASSIGN_OR_RETURN(proto::InodeRecord rec, volume_->meta().inodes().GetInode(r.ino()));
      const uint64_t dir = S_ISDIR(rec.mode()) ? r.ino() : rec.parent();
      if (!leases.BeginApply(rc.client_id, {LeaseKey::NsGrant(dir)})) {
        return ErrnoStatus(ESTALE, "log entry: setattr of an inode outside the session's grants");
      }
      Applying also(&leases, rc.client_id);
      s = volume_->SetAttr(erc, r).status();
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
