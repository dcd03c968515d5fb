// GrantFsService's file-system handlers, one per POSIX operation the mount
// sends: names (lookup, create, link, remove, rename, readdir), files (open,
// read, write, fsync, fallocate, space grants, statfs), extended attributes
// and file locks. Each is one Serve call, or ServeOnce for a call that
// changes something (server/service_call.h), over one Volume call.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>

#include "common/errno_status.h"
#include "common/status_macros.h"
#include "server/service.h"
#include "server/service_call.h"

namespace grantfs {
namespace {

using service_call::PriorAttr;
using service_call::PriorOk;

FileLock ToFileLock(const proto::LockRequest& req, uint64_t client_id) {
  FileLock l;
  l.type = static_cast<FileLock::Type>(std::min<uint32_t>(req.range().type(), 3));
  l.start = req.range().start();
  l.end = req.range().end();
  l.pid = req.range().pid();
  l.owner = {client_id, req.owner()};
  l.flock = req.flock();
  return l;
}

// Grants `client` a lease on `attr`, read after `epoch` was taken; marks
// attr->no_xattrs first (read under the same epoch) and only when leased.
bool GrantAttr(Volume* volume, const RequestContext& rc, uint64_t epoch, proto::Attr* attr) {
  LeaseTable& leases = volume->leases();
  if (!leases.Takes(rc.client_id)) return false;
  volume->MarkNoXattrs(attr);
  const bool leased = leases.Grant(rc.client_id, LeaseKey::Attr(attr->ino()), epoch);
  if (!leased) attr->clear_no_xattrs();
  return leased;
}

// A lease on the attributes of `reply->attr()` of an inode that existed
// before the change: read again after the change's recall (the reply's
// copy may predate another node's later change, recalled before this
// grant could see it).
void LeaseChangedAttr(Volume* volume, const RequestContext& rc, proto::AttrReply* reply) {
  LeaseTable& leases = volume->leases();
  if (!leases.Takes(rc.client_id)) return;
  const uint64_t epoch = leases.Epoch();
  absl::StatusOr<proto::Attr> now = volume->GetAttr(rc, reply->attr().ino());
  if (!now.ok()) return;
  *reply->mutable_attr() = *now;
  reply->set_leased(GrantAttr(volume, rc, epoch, reply->mutable_attr()));
}

// Leases on what a create made: its attributes and, for a directory, its
// (empty) list of names. `epoch`: from before the change; nothing could
// change the new inode before it was made.
void LeaseCreated(Volume* volume, const RequestContext& rc, uint64_t epoch,
                  proto::AttrReply* reply) {
  LeaseTable& leases = volume->leases();
  const uint64_t ino = reply->attr().ino();
  reply->set_leased(GrantAttr(volume, rc, epoch, reply->mutable_attr()));
  if (S_ISDIR(reply->attr().mode())) {
    reply->set_dir_leased(leases.Grant(rc.client_id, LeaseKey::Dir(ino), epoch));
  }
}

}  // namespace

namespace service_call {
std::vector<LeaseKey> ChangedKeys(const proto::SetAttrRequest& r) {
  return {LeaseKey::Attr(r.ino())};
}
std::vector<LeaseKey> ChangedKeys(const proto::MkNodRequest& r) {
  return {LeaseKey::Dir(r.parent()), LeaseKey::Attr(r.parent())};
}
std::vector<LeaseKey> ChangedKeys(const proto::SymlinkRequest& r) {
  return {LeaseKey::Dir(r.parent()), LeaseKey::Attr(r.parent())};
}
std::vector<LeaseKey> ChangedKeys(const proto::LinkRequest& r) {
  return {LeaseKey::Dir(r.new_parent()), LeaseKey::Attr(r.new_parent()), LeaseKey::Attr(r.ino())};
}
std::vector<LeaseKey> ChangedKeys(const proto::RemoveRequest& r) {
  // The removed inode: the one the mount meant (0 when it did not say).
  return {LeaseKey::Dir(r.parent()), LeaseKey::Attr(r.parent()), LeaseKey::Attr(r.expected_ino()),
          LeaseKey::Dir(r.is_dir() ? r.expected_ino() : 0)};
}
std::vector<LeaseKey> ChangedKeys(const proto::RenameRequest& r) {
  return {LeaseKey::Dir(r.parent()),
          LeaseKey::Attr(r.parent()),
          LeaseKey::Dir(r.new_parent()),
          LeaseKey::Attr(r.new_parent()),
          LeaseKey::Attr(r.expected_ino()),
          LeaseKey::Dir(r.expected_ino()),
          LeaseKey::Attr(r.expected_new_ino()),
          LeaseKey::Dir(r.expected_new_ino())};
}
std::vector<LeaseKey> ChangedKeys(const proto::OpenRequest& r) {
  if (!(r.flags() & O_TRUNC)) return {};
  return {LeaseKey::Attr(r.ino())};
}
std::vector<LeaseKey> ChangedKeys(const proto::WriteRequest& r) {
  return {LeaseKey::Attr(r.ino())};
}
std::vector<LeaseKey> ChangedKeys(const proto::FallocateRequest& r) {
  return {LeaseKey::Attr(r.ino())};
}
std::vector<LeaseKey> ChangedKeys(const proto::SetXattrRequest& r) {
  return {LeaseKey::Attr(r.ino())};
}
std::vector<LeaseKey> ChangedKeys(const proto::RemoveXattrRequest& r) {
  return {LeaseKey::Attr(r.ino())};
}
std::vector<LeaseKey> ChangedKeys(const proto::LockRequest&) { return {}; }
std::vector<LeaseKey> ChangedKeys(const proto::GrantRequest&) { return {}; }
std::vector<LeaseKey> ChangedKeys(const proto::InodeRangeRequest&) { return {}; }
}  // namespace service_call

grpc::Status GrantFsService::Lookup(Ctx* ctx, const proto::LookupRequest* req,
                                    proto::AttrReply* reply) {
  return Serve("Lookup", ctx, req, reply, {req->parent()}, [&](const RequestContext& rc) {
    // The name may be a directory granted to another session, whose
    // attributes its holder changes on its own.
    volume_->BreakGrants(rc, {req->parent()}, &req->name());
    LeaseTable& leases = volume_->leases();
    const uint64_t epoch = leases.Epoch();
    auto r = volume_->Lookup(rc, req->parent(), req->name());
    // ".." of the node's top, or a name another node linked in from
    // outside (server/subtree.h).
    if (r.ok()) {
      if (absl::Status in = Reaches(ctx, rc, "Lookup", r->ino()); !in.ok()) return in;
    }
    // "Not there" is leased too (a negative entry).
    if (r.ok() || ToErrno(r.status()) == ENOENT) {
      const LeaseKey dir = LeaseKey::Dir(req->parent());
      reply->set_dir_leased(leases.Grant(rc.client_id, dir, epoch));
      reply->set_dir_hot(!reply->dir_leased() && leases.Hot(dir));
    }
    if (r.ok()) {
      *reply->mutable_attr() = *r;
      reply->set_leased(GrantAttr(volume_, rc, epoch, reply->mutable_attr()));
      reply->set_hot(!reply->leased() && leases.Hot(LeaseKey::Attr(r->ino())));
    }
    return r.status();
  });
}

grpc::Status GrantFsService::GetAttr(Ctx* ctx, const proto::GetAttrRequest* req,
                                     proto::AttrReply* reply) {
  return Serve("GetAttr", ctx, req, reply, {req->ino()}, [&](const RequestContext& rc) {
    const uint64_t epoch = volume_->leases().Epoch();
    auto r = volume_->GetAttr(rc, req->ino());
    if (r.ok()) {
      *reply->mutable_attr() = *r;
      reply->set_leased(GrantAttr(volume_, rc, epoch, reply->mutable_attr()));
      reply->set_hot(!reply->leased() && volume_->leases().Hot(LeaseKey::Attr(r->ino())));
    }
    return r.status();
  });
}

grpc::Status GrantFsService::SetAttr(Ctx* ctx, const proto::SetAttrRequest* req,
                                     proto::AttrReply* reply) {
  return ServeOnce(
      "SetAttr", ctx, req, reply, {req->ino()},
      [&](const proto::DedupeRecord&, const RequestContext&) {
        return PriorAttr(volume_, req->ino(), reply);
      },
      [&](const RequestContext& rc, const proto::DedupeRecord*) {
        auto r = volume_->SetAttr(rc, *req);
        if (r.ok()) {
          *reply->mutable_attr() = *r;
          LeaseChangedAttr(volume_, rc, reply);
        }
        return r.status();
      });
}

grpc::Status GrantFsService::MkNod(Ctx* ctx, const proto::MkNodRequest* req,
                                   proto::AttrReply* reply) {
  return ServeOnce(
      "MkNod", ctx, req, reply, {req->parent()},
      [&](const proto::DedupeRecord& prior, const RequestContext&) {
        // A recorded first attempt made the inode (finding a name records
        // nothing); the record holds its number.
        reply->set_created(true);
        return PriorAttr(volume_, prior.value(), reply);
      },
      [&](const RequestContext& rc, const proto::DedupeRecord*) {
        bool created = false;
        const uint64_t epoch = volume_->leases().Epoch();
        auto r = volume_->MkNod(rc, *req, &created);
        // An existing name (no O_EXCL) may be a link from outside.
        if (r.ok() && !created) {
          if (absl::Status in = Reaches(ctx, rc, "MkNod", r->ino()); !in.ok()) return in;
        }
        if (r.ok()) {
          *reply->mutable_attr() = *r;
          if (created) {
            LeaseCreated(volume_, rc, epoch, reply);
          } else {
            LeaseChangedAttr(volume_, rc, reply);
          }
          if (created && req->want_grant() && S_ISDIR(r->mode())) {
            reply->set_granted(volume_->GrantNewDir(rc, r->ino(), epoch));
          }
        }
        reply->set_created(created);
        return r.status();
      });
}

grpc::Status GrantFsService::Symlink(Ctx* ctx, const proto::SymlinkRequest* req,
                                     proto::AttrReply* reply) {
  return ServeOnce(
      "Symlink", ctx, req, reply, {req->parent()},
      [&](const proto::DedupeRecord& prior, const RequestContext&) {
        return PriorAttr(volume_, prior.value(), reply);
      },
      [&](const RequestContext& rc, const proto::DedupeRecord*) {
        const uint64_t epoch = volume_->leases().Epoch();
        auto r = volume_->Symlink(rc, req->parent(), req->name(), req->target());
        if (r.ok()) {
          *reply->mutable_attr() = *r;
          LeaseCreated(volume_, rc, epoch, reply);
        }
        return r.status();
      });
}

grpc::Status GrantFsService::Link(Ctx* ctx, const proto::LinkRequest* req,
                                  proto::AttrReply* reply) {
  return ServeOnce(
      "Link", ctx, req, reply, {req->ino(), req->new_parent()},
      [&](const proto::DedupeRecord&, const RequestContext&) {
        return PriorAttr(volume_, req->ino(), reply);
      },
      [&](const RequestContext& rc, const proto::DedupeRecord*) {
        auto r = volume_->Link(rc, req->ino(), req->new_parent(), req->new_name());
        if (r.ok()) {
          *reply->mutable_attr() = *r;
          LeaseChangedAttr(volume_, rc, reply);
        }
        return r.status();
      });
}

grpc::Status GrantFsService::Remove(Ctx* ctx, const proto::RemoveRequest* req,
                                    proto::RemoveReply* reply) {
  return ServeOnce(
      "Remove", ctx, req, reply, {req->parent()}, PriorOk,
      [&](const RequestContext& rc, const proto::DedupeRecord*) -> absl::Status {
        // A directory granted to another session may hold names only its
        // holder knows yet.
        volume_->BreakGrants(rc, {req->parent()}, &req->name());
        // A node restricted to a subtree removes only what it
        // reaches: the name's inode is checked, then pinned.
        ASSIGN_OR_RETURN(uint64_t named,
                         ReachesName(ctx, rc, "Remove", req->parent(), req->name()));
        const uint64_t expected = req->expected_ino() != 0 ? req->expected_ino() : named;
        ASSIGN_OR_RETURN(Removed r,
                         volume_->Remove(rc, req->parent(), req->name(), req->is_dir(), expected));
        // A directory granted to the session is gone, and its grant.
        if (req->is_dir()) volume_->leases().Drop(rc.client_id, LeaseKey::NsGrant(r.ino));
        reply->set_known(true);
        reply->set_ino(r.ino);
        return absl::OkStatus();
      });
}

grpc::Status GrantFsService::Rename(Ctx* ctx, const proto::RenameRequest* req,
                                    proto::RenameReply* reply) {
  return ServeOnce("Rename", ctx, req, reply, {req->parent(), req->new_parent()}, PriorOk,
                   [&](const RequestContext& rc, const proto::DedupeRecord*) -> absl::Status {
                     // A node restricted to a subtree moves (or replaces)
                     // only what it reaches: a rename sets a file's
                     // directory, so a link from outside would come in.
                     // Both names' inodes are checked, then pinned.
                     volume_->BreakGrants(rc, {req->parent()}, &req->name());
                     volume_->BreakGrants(rc, {req->new_parent()}, &req->new_name());
                     proto::RenameRequest pinned = *req;
                     if (rc.top != 0) {
                       ASSIGN_OR_RETURN(uint64_t src,
                                        ReachesName(ctx, rc, "Rename", req->parent(), req->name()));
                       ASSIGN_OR_RETURN(
                           uint64_t dst,
                           ReachesName(ctx, rc, "Rename", req->new_parent(), req->new_name()));
                       if (pinned.expected_ino() == 0) pinned.set_expected_ino(src);
                       if (pinned.expected_new_ino() == 0) pinned.set_expected_new_ino(dst);
                     }
                     ASSIGN_OR_RETURN(Removed r, volume_->Rename(rc, pinned));
                     reply->set_known(true);
                     reply->set_moved(r.moved);
                     reply->set_replaced(r.exchanged != 0 ? r.exchanged : r.ino);
                     return absl::OkStatus();
                   });
}

grpc::Status GrantFsService::ReadLink(Ctx* ctx, const proto::ReadLinkRequest* req,
                                      proto::ReadLinkReply* reply) {
  return Serve("ReadLink", ctx, req, reply, {req->ino()}, [&](const RequestContext& rc) {
    auto r = volume_->ReadLink(rc, req->ino());
    if (r.ok()) reply->set_target(*r);
    return r.status();
  });
}

grpc::Status GrantFsService::ReadDir(Ctx* ctx, const proto::ReadDirRequest* req,
                                     proto::ReadDirReply* reply) {
  return Serve("ReadDir", ctx, req, reply, {req->ino()}, [&](const RequestContext& rc) {
    LeaseTable& leases = volume_->leases();
    uint64_t epoch = leases.Epoch();
    uint64_t cookie = req->cookie();
    // Granted before the listing is read: from then on only the session
    // changes it, so the listing it reads is what it will change.
    if (req->want_grant() && cookie == 0 && rc.top == 0) {
      // Only for a caller whose ids the server keeps: the mount makes the
      // changes with the ids it knows (a mapped root would be refused
      // later what it answered).
      const proto::Creds& asked = req->header().creds();
      const bool ids_kept = rc.caller.uid == asked.uid() && rc.caller.gid == asked.gid() &&
                            rc.caller.groups.size() == static_cast<size_t>(asked.groups_size());
      std::string why = "the node's ids are mapped";
      reply->set_granted(ids_kept && volume_->GrantDir(rc, req->ino(), epoch, &why));
      VLOG(1) << "grant of directory " << req->ino() << " to session " << rc.client_id << ": "
              << (reply->granted() ? "granted" : why);
      // Its recall of others' leases on the directory changed those keys:
      // the listing below is read after it.
      epoch = leases.Epoch();
    }
    absl::Status s = volume_->ReadDir(rc, req->ino(), cookie, req->max_entries(), reply);
    // Subdirectories granted to other sessions: their attributes change at
    // their holders; recalled, then the page is read again.
    for (int again = 0; s.ok() && again < 3 && leases.GrantsOut(); ++again) {
      std::vector<LeaseKey> granted;
      for (const proto::DirEntry& e : reply->entries()) {
        if (S_ISDIR(e.attr().mode()) && e.name() != "." && e.name() != "..") {
          granted.push_back(LeaseKey::NsGrant(e.attr().ino()));
        }
      }
      if (granted.empty() || !leases.HeldByOther(rc.client_id, granted)) break;
      leases.Recall(rc.client_id, granted);
      const bool dir_granted = reply->granted();
      reply->Clear();
      reply->set_granted(dir_granted);
      epoch = leases.Epoch();
      s = volume_->ReadDir(rc, req->ino(), cookie, req->max_entries(), reply);
    }
    // A node restricted to a subtree does not see links from outside: a
    // page left empty by them is followed by the next, as an empty page
    // that is not the last would end the kernel's listing.
    while (s.ok() && rc.top != 0) {
      const uint64_t last =
          reply->entries_size() > 0 ? reply->entries(reply->entries_size() - 1).cookie() : cookie;
      ConfineListing(rc, req->ino(), reply);
      if (reply->entries_size() > 0 || reply->eof() || last == cookie) break;
      cookie = last;
      proto::ReadDirReply next;
      s = volume_->ReadDir(rc, req->ino(), cookie, req->max_entries(), &next);
      *reply = std::move(next);
    }
    if (!s.ok()) {
      reply->clear_entries();
      if (reply->granted()) leases.Drop(rc.client_id, LeaseKey::NsGrant(req->ino()));
      reply->set_granted(false);
      return s;
    }
    if (leases.Takes(rc.client_id)) {
      reply->set_leased(leases.Grant(rc.client_id, LeaseKey::Dir(req->ino()), epoch));
      for (proto::DirEntry& e : *reply->mutable_entries()) {
        e.set_leased(GrantAttr(volume_, rc, epoch, e.mutable_attr()));
      }
    }
    return s;
  });
}

grpc::Status GrantFsService::Open(Ctx* ctx, const proto::OpenRequest* req,
                                  proto::OpenReply* reply) {
  return ServeOnce("Open", ctx, req, reply, {req->ino()}, nullptr,
                   [&](const RequestContext& rc, const proto::DedupeRecord* prior) {
                     // A resent open(O_TRUNC) whose first attempt truncated
                     // must not cut what was written since; the open itself
                     // counts once by its handle.
                     const uint32_t flags = prior ? req->flags() & ~O_TRUNC : req->flags();
                     if (rc.read_only && ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC))) {
                       return ErrnoStatus(EROFS, "open for writing on a read-only node");
                     }
                     auto r = volume_->Open(rc, req->ino(), flags, req->handle(), req->created());
                     if (r.ok()) *reply->mutable_attr() = *r;
                     return r.status();
                   });
}

grpc::Status GrantFsService::Release(Ctx* ctx, const proto::ReleaseRequest* req,
                                     proto::ReleaseReply* reply) {
  return Serve("Release", ctx, req, reply, {req->ino()}, [&](const RequestContext& rc) {
    bool reaped = false;
    absl::Status s = volume_->Release(rc, req->ino(), req->handle(), &reaped);
    reply->set_reaped(reaped);
    return s;
  });
}

grpc::Status GrantFsService::Read(Ctx* ctx, const proto::ReadRequest* req,
                                  proto::ReadReply* reply) {
  return Serve("Read", ctx, req, reply, {req->ino()}, [&](const RequestContext& rc) {
    auto r = volume_->Read(rc, req->ino(), req->offset(), req->size());
    if (r.ok()) {
      if (options_.metrics != nullptr) options_.metrics->AddRead(r->size());
      *reply->mutable_data() = std::move(*r);
    }
    return r.status();
  });
}

grpc::Status GrantFsService::Write(Ctx* ctx, const proto::WriteRequest* req,
                                   proto::WriteReply* reply) {
  auto grant_now = [&](const RequestContext& rc) {
    if (req->from_grant()) {
      reply->set_grant_bytes(SpaceLedger::Bytes(volume_->meta().space().GrantOf(rc.client_id)));
    }
  };
  auto prior = [&](const proto::DedupeRecord& prior, const RequestContext& rc) {
    // Applied before: the same grant use, the file's attributes now.
    reply->set_grant_used_bytes(prior.value());
    grant_now(rc);
    return PriorAttr(volume_, req->ino(), reply);
  };
  auto body = [&](const RequestContext& rc, const proto::DedupeRecord*) -> absl::Status {
    uint64_t grant_used = 0;
    auto r = StoreWrite(rc, *req, req->sync(), &grant_used);
    if (r.ok()) {
      *reply->mutable_attr() = *r;
      reply->set_synced_always(volume_->syncs_data());
      FillStatFs(reply->mutable_space());
    }
    reply->set_grant_used_bytes(grant_used);
    grant_now(rc);
    return r.status();
  };
  // (The data of a file made in a directory granted to the mount: Serve
  // checks WriteRequest.granted, GrantedWrite.)
  return ServeOnce("Write", ctx, req, reply, {req->ino()}, prior, body);
}

absl::StatusOr<proto::Attr> GrantFsService::StoreWrite(const RequestContext& rc,
                                                       const proto::WriteRequest& req, bool sync,
                                                       uint64_t* grant_used, bool staged) {
  FlowControl::Scope in_flight(&volume_->flow(), rc.client_id, req.data().size());
  if (rc.tag != nullptr) {
    // The mount's time of the write, or its word that the file's times
    // were set after it (WriteRequest). A mount's clock ahead of the
    // server's by more than a second is not followed (a file's ctime
    // in the future would stop later writes from moving it).
    rc.tag->time_ns = ClampMountTime(req.time_ns());
    rc.tag->keep_times = req.keep_times();
  }
  absl::StatusOr<proto::Attr> r = volume_->Write(rc, req.ino(), req.offset(), req.data(), sync,
                                                 req.from_grant(), grant_used, staged);
  if (r.ok() && options_.metrics != nullptr) options_.metrics->AddWritten(req.data().size());
  return r;
}

bool GrantFsService::GrantedWrite(const RequestContext& rc, const proto::WriteRequest& req) {
  if (!req.granted() || rc.client_id == 0) return false;
  absl::StatusOr<proto::InodeRecord> rec = volume_->meta().inodes().GetInode(req.ino());
  if (!rec.ok() || rec->parent() == 0) return false;
  // As for its log entries: the session holds the directory's grant (or,
  // inherited by a server that took over, may apply into it).
  LeaseTable& leases = volume_->leases();
  const LeaseKey key = LeaseKey::NsGrant(rec->parent());
  if (!leases.BeginApply(rc.client_id, {&key, 1})) return false;
  leases.EndApply(rc.client_id);
  return true;
}

int64_t GrantFsService::ClampMountTime(int64_t time_ns) const {
  const int64_t latest = volume_->clock()->NowNanos() + 1'000'000'000;
  return std::clamp<int64_t>(time_ns, 0, latest);
}

grpc::Status GrantFsService::Grant(Ctx* ctx, const proto::GrantRequest* req,
                                   proto::GrantReply* reply) {
  return ServeOnce(
      "Grant", ctx, req, reply, {},
      [&](const proto::DedupeRecord& prior, const RequestContext& rc) {
        reply->set_granted_bytes(SpaceLedger::Bytes(prior.value()));
        reply->set_grant_bytes(SpaceLedger::Bytes(volume_->meta().space().GrantOf(rc.client_id)));
        return absl::OkStatus();
      },
      [&](const RequestContext& rc, const proto::DedupeRecord*) {
        uint64_t added = 0;
        auto r = volume_->Grant(rc, req->wanted_bytes(), req->return_bytes(), &added);
        if (r.ok()) {
          reply->set_grant_bytes(*r);
          reply->set_granted_bytes(added);
        }
        SpaceInfo s = volume_->SpaceCounts();
        const uint64_t taken = s.used_bytes + s.granted_bytes + s.reserved_bytes;
        reply->set_available_bytes(s.capacity_bytes > taken ? s.capacity_bytes - taken : 0);
        return r.status();
      });
}

grpc::Status GrantFsService::Fsync(Ctx* ctx, const proto::FsyncRequest* req,
                                   proto::ErrReply* reply) {
  return Serve("Fsync", ctx, req, reply, {req->ino()},
               [&](const RequestContext& rc) { return volume_->Fsync(rc, req->ino()); });
}

grpc::Status GrantFsService::Fallocate(Ctx* ctx, const proto::FallocateRequest* req,
                                       proto::AttrReply* reply) {
  return ServeOnce(
      "Fallocate", ctx, req, reply, {req->ino()},
      [&](const proto::DedupeRecord&, const RequestContext&) {
        return PriorAttr(volume_, req->ino(), reply);
      },
      [&](const RequestContext& rc, const proto::DedupeRecord*) {
        auto r = volume_->Fallocate(rc, req->ino(), req->mode(), req->offset(), req->length());
        if (r.ok()) *reply->mutable_attr() = *r;
        return r.status();
      });
}

void GrantFsService::FillStatFs(proto::StatFsReply* reply) {
  SpaceInfo s = volume_->SpaceCounts();
  reply->set_block_size(kBlockSize);
  reply->set_capacity_bytes(s.capacity_bytes);
  reply->set_used_bytes(s.used_bytes);
  // Available = what a new grant could get: nothing granted to any session
  // or held by a write in progress counts as free.
  const uint64_t taken = s.used_bytes + s.granted_bytes + s.reserved_bytes;
  reply->set_available_bytes(s.capacity_bytes > taken ? s.capacity_bytes - taken : 0);
  reply->set_inodes(s.inodes);
  reply->set_name_max(255);
  reply->set_counts_seq(s.counts_seq);
  reply->set_incarnation(volume_->incarnation());
}

grpc::Status GrantFsService::StatFs(Ctx* ctx, const proto::StatFsRequest* req,
                                    proto::StatFsReply* reply) {
  return Serve("StatFs", ctx, req, reply, {}, [&](const RequestContext&) {
    FillStatFs(reply);
    return absl::OkStatus();
  });
}

grpc::Status GrantFsService::SetXattr(Ctx* ctx, const proto::SetXattrRequest* req,
                                      proto::ErrReply* reply) {
  return ServeOnce("SetXattr", ctx, req, reply, {req->ino()}, PriorOk,
                   [&](const RequestContext& rc, const proto::DedupeRecord*) {
                     return volume_->SetXattr(rc, req->ino(), req->name(), req->value(),
                                              req->flags());
                   });
}

grpc::Status GrantFsService::GetXattr(Ctx* ctx, const proto::GetXattrRequest* req,
                                      proto::GetXattrReply* reply) {
  return Serve("GetXattr", ctx, req, reply, {req->ino()}, [&](const RequestContext& rc) {
    auto r = volume_->GetXattr(rc, req->ino(), req->name());
    if (r.ok()) reply->set_value(*r);
    return r.status();
  });
}

grpc::Status GrantFsService::ListXattr(Ctx* ctx, const proto::ListXattrRequest* req,
                                       proto::ListXattrReply* reply) {
  return Serve("ListXattr", ctx, req, reply, {req->ino()}, [&](const RequestContext& rc) {
    auto r = volume_->ListXattr(rc, req->ino());
    if (r.ok()) {
      for (auto& n : *r) reply->add_names(n);
    }
    return r.status();
  });
}

grpc::Status GrantFsService::RemoveXattr(Ctx* ctx, const proto::RemoveXattrRequest* req,
                                         proto::ErrReply* reply) {
  return ServeOnce("RemoveXattr", ctx, req, reply, {req->ino()}, PriorOk,
                   [&](const RequestContext& rc, const proto::DedupeRecord*) {
                     return volume_->RemoveXattr(rc, req->ino(), req->name());
                   });
}

grpc::Status GrantFsService::GetLock(Ctx* ctx, const proto::LockRequest* req,
                                     proto::GetLockReply* reply) {
  return Serve("GetLock", ctx, req, reply, {req->ino()}, [&](const RequestContext& rc) {
    auto r = volume_->GetLock(rc, req->ino(), ToFileLock(*req, rc.client_id));
    if (r.ok()) {
      proto::LockRange* c = reply->mutable_conflict();
      c->set_type(r->type);
      c->set_start(r->start);
      c->set_end(r->end);
      c->set_pid(r->pid);
    }
    return r.status();
  });
}

grpc::Status GrantFsService::SetLock(Ctx* ctx, const proto::LockRequest* req,
                                     proto::ErrReply* reply) {
  // A resent lock or unlock is harmless to apply again, but one whose first
  // attempt changed the locks must not be answered before that change is
  // replicated (Once waits for it).
  return ServeOnce("SetLock", ctx, req, reply, {req->ino()}, PriorOk,
                   [&](const RequestContext& rc, const proto::DedupeRecord*) {
                     return volume_->SetLock(rc, req->ino(), ToFileLock(*req, rc.client_id));
                   });
}

}  // namespace grantfs
