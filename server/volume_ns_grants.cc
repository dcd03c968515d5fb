// Volume: namespace grants (docs/namespace-grants.md). A mount that holds
// the grant of a directory makes the changes of its names on its own, in an
// ordered log it applies later (GrantFsService::ApplyLog); the server keeps
// who holds what in the lease table (LeaseKey::kNsGrant) and recalls a grant
// before another session reads or changes what it covers.
#include <sys/stat.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/keys.h"
#include "server/volume.h"

namespace grantfs {

absl::StatusOr<proto::SessionRecord::InodeRange> Volume::InodeRange(const RequestContext& ctx,
                                                                    uint32_t count,
                                                                    uint64_t keep_from) {
  if (count == 0) return ErrnoStatus(EINVAL, "an inode range of 0 numbers");
  count = std::min(count, kMaxInodeRange);
  return meta_->sessions().AddInodeRange(ctx.client_id, count, keep_from, ctx.tag);
}

bool Volume::TakesGrants(const RequestContext& ctx) {
  if (!leases_.Takes(ctx.client_id)) return false;
  // Only a session whose record holds inode numbers takes grants: a server
  // that takes over knows from the record to wait for it (Recover).
  absl::StatusOr<std::optional<proto::SessionRecord>> rec =
      meta_->sessions().GetSession(ctx.client_id);
  return rec.ok() && *rec && (*rec)->ino_ranges_size() > 0;
}

bool Volume::GrantNewDir(const RequestContext& ctx, uint64_t dir, uint64_t epoch) {
  if (!TakesGrants(ctx)) return false;
  if (!leases_.Grant(ctx.client_id, LeaseKey::NsGrant(dir), epoch)) return false;
  // Registered first, then the others' leases on the directory recalled: a
  // read that comes after the registration recalls the grant itself
  // (BreakGrants), one before it is caught by this recall.
  leases_.Recall(ctx.client_id, {LeaseKey::Dir(dir), LeaseKey::Attr(dir)});
  return true;
}

bool Volume::GrantDir(const RequestContext& ctx, uint64_t dir, uint64_t epoch, std::string* why) {
  if (!TakesGrants(ctx)) {
    *why = "the session takes no grants now";
    return false;
  }
  absl::StatusOr<proto::InodeRecord> rec = meta_->inodes().GetInode(dir);
  if (!rec.ok() || !S_ISDIR(rec->mode())) {
    *why = "not a directory";
    return false;
  }
  // Registered first: a read or change by another session from now on
  // recalls it (BreakGrants), so what is checked below stays true.
  if (!leases_.Grant(ctx.client_id, LeaseKey::NsGrant(dir), epoch)) {
    *why = "held or recalled elsewhere, changed since the read began, or recalled too often";
    return false;
  }
  auto decline = [&](std::string reason) {
    *why = std::move(reason);
    leases_.Drop(ctx.client_id, LeaseKey::NsGrant(dir));
    return false;
  };
  // A change of its names (or of its own name) under way checked for
  // grants before this one was registered: it may land after the listing
  // the session is about to read.
  if (leases_.Changing(dir) || leases_.Changing(rec->parent())) {
    return decline("a change of it is under way");
  }
  std::vector<LeaseKey> inside;
  bool elsewhere = false;
  const std::string prefix = keys::Prefix('E', dir);
  absl::Status scanned = meta_->store().Scan(
      keys::DirCookie(dir, 3), prefix,
      [&](absl::string_view, absl::string_view value) -> absl::StatusOr<bool> {
        proto::DirentRecord d;
        if (!d.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
          return ErrnoStatus(EIO, "corrupt dirent record");
        }
        inside.push_back(LeaseKey::Attr(d.ino()));
        // A look at an inode recalls the grant of the
        // directory its record names (BreakGrants).
        absl::StatusOr<proto::InodeRecord> in = meta_->inodes().GetInode(d.ino());
        elsewhere = !in.ok() || in->parent() != dir;
        return !elsewhere && inside.size() <= static_cast<size_t>(kMaxGrantedEntries);
      });
  if (!scanned.ok()) return decline(std::string(scanned.message()));
  if (elsewhere) return decline("an inode in it is recorded in another directory (a link)");
  if (inside.size() > static_cast<size_t>(kMaxGrantedEntries)) {
    return decline(absl::StrCat("more than ", kMaxGrantedEntries, " names"));
  }
  // Reads under way lease none of them from now on; a lease already given
  // is seen here.
  leases_.Touch(inside);
  if (leases_.HeldByOther(ctx.client_id, inside)) {
    return decline("another session holds the attributes of an inode in it");
  }
  leases_.Recall(ctx.client_id, {LeaseKey::Dir(dir), LeaseKey::Attr(dir)});
  return true;
}

void Volume::BreakGrants(const RequestContext& ctx, absl::Span<const uint64_t> inos,
                         const std::string* name) {
  if (inos.empty() || !leases_.GrantsOut()) return;
  std::vector<LeaseKey> keys;
  auto add = [&](uint64_t ino) {
    if (ino == 0) return;
    keys.push_back(LeaseKey::NsGrant(ino));
    // The directory that holds it (a file's records name the one it was
    // made in or last moved to, a directory's its parent).
    absl::StatusOr<proto::InodeRecord> rec = meta_->inodes().GetInode(ino);
    if (rec.ok() && rec->parent() != 0) keys.push_back(LeaseKey::NsGrant(rec->parent()));
  };
  for (uint64_t ino : inos) add(ino);
  if (name != nullptr && !inos.empty()) {
    absl::StatusOr<std::optional<std::string>> raw =
        meta_->store().Get(keys::Dirent(*inos.begin(), *name));
    proto::DirentRecord d;
    if (raw.ok() && *raw && d.ParseFromString(**raw)) keys.push_back(LeaseKey::NsGrant(d.ino()));
  }
  // Nobody else holds them (nor, on a server that took over, may hold
  // them): nothing to wait for. Else the holders apply their logs first.
  if (!leases_.HeldByOther(ctx.client_id, keys)) return;
  leases_.Recall(ctx.client_id, keys, ctx.log_entry);
}

}  // namespace grantfs
