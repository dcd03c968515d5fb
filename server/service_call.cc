#include "server/service_call.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/transport.h"
#include "server/subtree.h"

namespace grantfs {
namespace service_call {

Once::Once(Volume* volume, const proto::RequestHeader& header) : volume_(volume) {
  tag_.client_id = header.client_id();
  tag_.seq = header.seq();
  if (tag_.client_id == 0 || tag_.seq == 0) return;  // no session: nothing to match
  entered_ = volume_->in_flight().Enter(tag_.client_id, tag_.seq, absl::Seconds(20));
  if (!entered_) return;
  absl::StatusOr<std::optional<proto::DedupeRecord>> r =
      volume_->meta().sessions().FindDedupe(tag_.client_id, tag_.seq);
  if (!r.ok()) {
    error_ = r.status();
    return;
  }
  prior_ = *r;
  if (!prior_) {
    tagging_ = true;
  } else {
    // The first attempt's change may still be on its way to the replica
    // (its reply was lost when the wait gave up): acknowledge the retry
    // only once it is replicated.
    error_ = volume_->meta().store().WaitReplicatedAll();
  }
}

Once::~Once() {
  if (entered_) volume_->in_flight().Leave(tag_.client_id, tag_.seq);
}

grpc::Status Once::busy() const {
  if (tag_.client_id == 0 || tag_.seq == 0 || entered_) return grpc::Status::OK;
  LOG(WARNING) << "request " << tag_.client_id << "/" << tag_.seq
               << " is still running; asking the client to retry";
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "an earlier attempt is still running");
}

absl::Status PriorOk(const proto::DedupeRecord&, const RequestContext&) { return absl::OkStatus(); }

Caller CallerOf(const proto::Creds& creds, const CallerPolicy& policy) {
  Caller c;
  c.uid = creds.uid();
  c.gid = creds.gid();
  c.groups.assign(creds.groups().begin(), creds.groups().end());
  // What the caller's certificate allows: ids as reported, root squashed
  // to nobody, or nobody whatever it reports.
  if (policy.anon) {
    c.uid = c.gid = kNobody;
    c.groups.clear();
  } else if (!policy.root) {
    if (c.uid == 0) c.uid = kNobody;
    if (c.gid == 0) c.gid = kNobody;
    c.groups.erase(std::remove(c.groups.begin(), c.groups.end(), 0u), c.groups.end());
  }
  return c;
}

}  // namespace service_call

grpc::Status GrantFsService::Gate() {
  std::string why;
  if (options_.server_role != nullptr && !options_.server_role->Serving(&why)) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the primary: " + why);
  }
  if (volume_ == nullptr) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the primary");
  return grpc::Status::OK;
}

grpc::Status GrantFsService::Authenticate(Ctx* ctx, int kinds) {
  return options_.transport.Authorize(*ctx, kinds, "server");
}

grpc::Status GrantFsService::Begin(Ctx* ctx, const proto::RequestHeader& header,
                                   RequestContext* rc) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return auth;
  rc->client_id = header.client_id();
  const CallerPolicy policy = options_.transport.PolicyOf(*ctx);
  rc->caller = service_call::CallerOf(header.creds(), policy);
  rc->read_only = policy.read_only;
  if (!policy.subtree.empty()) {
    // Looked up at each call: another node may rename or remove it.
    // When it names no directory now (renamed, removed, or a path that
    // could not be read), the node reaches no inode; its session goes on
    // (heartbeats, acks of recalls), so that it loses nothing it holds and
    // others' changes do not wait for it.
    absl::StatusOr<uint64_t> top =
        policy.subtree == kUnreachableSubtree
            ? absl::StatusOr<uint64_t>(absl::InvalidArgumentError("its path cannot be read"))
            : ResolveDirectory(&volume_->meta(), policy.subtree);
    rc->top = top.ok() ? *top : kReachesNothing;
  }
  // A session is its node's: another node that names it is refused.
  const std::string peer = options_.transport.PeerName(*ctx);
  if (!volume_->sessions().BelongsTo(rc->client_id, peer)) {
    LOG(WARNING) << "server: refused a call from " << ctx->peer() << " (\"" << peer
                 << "\"): session " << rc->client_id << " belongs to another node";
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "the session belongs to another node");
  }
  if (absl::Status s = volume_->Touch(rc->client_id, nullptr, peer); !s.ok()) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, std::string(s.message()));
  }
  return grpc::Status::OK;
}

absl::Status GrantFsService::Reaches(Ctx* ctx, const RequestContext& rc, const char* op,
                                     uint64_t ino) {
  if (rc.top == 0) return absl::OkStatus();
  absl::StatusOr<bool> below = IsBelow(&volume_->meta(), rc.top, ino);
  if (!below.ok()) return below.status();
  if (*below) return absl::OkStatus();
  LOG(WARNING) << "server: refused " << op << " from " << ctx->peer() << " (\""
               << options_.transport.PeerName(*ctx) << "\"): inode " << ino
               << " is outside the node's subtree"
               << (rc.top == kReachesNothing ? " (which names no directory now)" : "");
  return absl::PermissionDeniedError(absl::StrCat("inode ", ino, " is outside the node's subtree"));
}

void GrantFsService::ConfineListing(const RequestContext& rc, uint64_t dir,
                                    proto::ReadDirReply* reply) {
  auto* entries = reply->mutable_entries();
  std::optional<proto::Attr> self;  // `dir`'s attributes, when needed
  int kept = 0;
  for (int i = 0; i < entries->size(); ++i) {
    proto::DirEntry& e = (*entries)[i];
    bool keep = true;
    if (e.name() == "..") {
      if (dir == rc.top) {
        if (!self) {
          absl::StatusOr<proto::Attr> a = volume_->meta().inodes().GetAttr(dir);
          if (a.ok()) self = *a;
        }
        if (self) {
          *e.mutable_attr() = *self;
        } else {
          keep = false;
        }
      }
    } else if (e.name() != ".") {
      // Most entries were made in `dir`: one step; a link from elsewhere
      // walks up from where its file was made.
      absl::StatusOr<bool> here = IsBelow(&volume_->meta(), dir, e.attr().ino());
      keep = here.ok() && *here;
      if (!keep) {
        absl::StatusOr<bool> below = IsBelow(&volume_->meta(), rc.top, e.attr().ino());
        keep = below.ok() && *below;
      }
    }
    if (keep) {
      if (kept != i) entries->SwapElements(kept, i);
      ++kept;
    }
  }
  entries->DeleteSubrange(kept, entries->size() - kept);
}

absl::StatusOr<uint64_t> GrantFsService::ReachesName(Ctx* ctx, const RequestContext& rc,
                                                     const char* op, uint64_t parent,
                                                     const std::string& name) {
  if (rc.top == 0 || name == "." || name == "..") return 0;  // Namespace refuses the dots
  absl::StatusOr<proto::Attr> a = volume_->meta().names().Lookup(Caller(), parent, name);
  if (!a.ok()) return uint64_t{0};  // no such name (the change says so itself)
  RETURN_IF_ERROR(Reaches(ctx, rc, op, a->ino()));
  return a->ino();
}

std::vector<LeaseKey> GrantFsService::Reachable(const RequestContext& rc,
                                                std::vector<LeaseKey> keys) {
  if (rc.top == 0) return keys;
  keys.erase(std::remove_if(keys.begin(), keys.end(),
                            [&](const LeaseKey& k) {
                              absl::StatusOr<bool> in = IsBelow(&volume_->meta(), rc.top, k.ino);
                              return k.ino != 0 && !(in.ok() && *in);
                            }),
             keys.end());
  return keys;
}

void GrantFsService::ConfineBatch(const RequestContext& rc, proto::InvalidationBatch* batch) {
  auto reached = [&](uint64_t ino) {
    if (ino == 0) return true;
    absl::StatusOr<bool> in = IsBelow(&volume_->meta(), rc.top, ino);
    return in.ok() && *in;
  };
  auto* items = batch->mutable_items();
  int kept = 0;
  for (int i = 0; i < items->size(); ++i) {
    const proto::Invalidation& it = (*items)[i];
    // A recall is of a lease it was granted: always its own.
    if (it.recall() != 0 || (reached(it.ino()) && reached(it.parent()))) {
      if (kept != i) items->SwapElements(kept, i);
      ++kept;
    }
  }
  items->DeleteSubrange(kept, items->size() - kept);
}

}  // namespace grantfs
