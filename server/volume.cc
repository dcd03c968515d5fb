// Volume: opening and recovery, the namespace, xattrs and locks. The file
// data path is in volume_data.cc, sessions and background work in
// volume_sessions.cc (one class, server/volume.h).
#include "server/volume.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <set>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/data_dir.h"
#include "server/dedupe.h"
#include "server/orphan_chunks.h"

namespace grantfs {

namespace {

// A lock list as the metadata store keeps it ('P' records), and back.
proto::LockRecord ToLockRecord(const std::vector<FileLock>& locks) {
  proto::LockRecord rec;
  for (const FileLock& f : locks) {
    proto::LockRecord::Lock* r = rec.add_locks();
    r->set_type(f.type);
    r->set_start(f.start);
    r->set_end(f.end);
    r->set_pid(f.pid);
    r->set_client_id(f.owner.client_id);
    r->set_owner(f.owner.owner);
    r->set_flock(f.flock);
  }
  return rec;
}

std::vector<FileLock> FromLockRecord(const proto::LockRecord& rec) {
  std::vector<FileLock> out;
  for (const proto::LockRecord::Lock& r : rec.locks()) {
    FileLock l;
    l.type = static_cast<FileLock::Type>(r.type());
    l.start = r.start();
    l.end = r.end();
    l.pid = r.pid();
    l.owner = {r.client_id(), r.owner()};
    l.flock = r.flock();
    out.push_back(l);
  }
  return out;
}

uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (static_cast<uint64_t>(rd()) << 32) | rd();
  return id;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Volume>> Volume::Open(const VolumeOptions& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("data dir is empty");
  struct stat st;
  if (stat(options.dir.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("data directory ", options.dir, ": ", strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(options.dir, " is not a directory"));
  }
  if (access((options.dir + "/" + kPartialSnapshotFile).c_str(), F_OK) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.dir, " holds a replica's unfinished snapshot, not a volume"));
  }
  ASSIGN_OR_RETURN(uint64_t free_now, DiskFree(options.dir));
  const uint64_t reserve = options.metadata_reserve_bytes;
  SpaceHoldOptions ho;
  ho.path = options.dir + "/space.hold";
  ASSIGN_OR_RETURN(std::unique_ptr<SpaceHold> hold, SpaceHold::Open(ho));
  // What the hold keeps from an earlier run is free space for a new volume.
  free_now += hold->held();
  ChunkStoreOptions co;
  co.dir = options.dir + "/chunks";
  co.change_sink = options.change_sink;
  co.direct_io = options.direct_io;
  co.env = options.chunk_env;
  ASSIGN_OR_RETURN(std::unique_ptr<ChunkStore> chunks, ChunkStore::Create(co));
  MetaStoreOptions mo;
  mo.dir = options.dir + "/meta";
  mo.capacity_bytes = options.capacity_bytes;
  mo.new_volume_capacity_bytes = free_now > reserve ? free_now - reserve : 0;
  // The metadata reserve is part of the hold: file data gets the rest of
  // the smaller of this disk's room and the in-sync replica's (what is
  // accepted is stored on both: checkpoint/change_sink.h).
  mo.disk_available = [reserve, sink = options.change_sink,
                       cache = std::make_shared<DiskRoom>(options.dir, hold.get())] {
    uint64_t space = cache->Get();
    if (sink != nullptr) space = std::min(space, sink->ReplicaRoom().value_or(space));
    return space > reserve ? space - reserve : 0;
  };
  // A metadata write that found the disk full gets room from the
  // metadata reserve held for it.
  mo.make_room = [h = hold.get()] {
    const uint64_t lent = h->Lend(kMetadataRoomBytes);
    h->Repay(lent);  // RocksDB keeps the room; Cover grows the hold back once there is space
    return lent > 0;
  };
  mo.promise_reserve_bytes = reserve;
  mo.chunk_size = co.chunk_size;
  mo.clock = options.clock;
  mo.change_sink = options.change_sink;
  mo.epoch = options.epoch;
  ASSIGN_OR_RETURN(std::unique_ptr<Metadata> meta, Metadata::Open(mo));
  // Bytes of writes a crash cut off before they committed: nothing is in
  // flight yet, and their space is counted nowhere.
  RETURN_IF_ERROR(RemoveOrphanChunkFiles(chunks.get(), meta.get()).status());
  std::unique_ptr<Volume> v(
      new Volume(options, std::move(meta), std::move(chunks), std::move(hold)));
  v->meta_->orphans().SetOpenHolders(
      [p = v.get()](uint64_t ino) { return p->sessions_.Holders(ino); });
  // On a full disk the server still starts: it serves what it has and
  // promises nothing new until the hold is whole again.
  v->CoverPromises();
  RETURN_IF_ERROR(v->Recover());
  if (options.background) v->background_ = std::thread([p = v.get()] { p->BackgroundLoop(); });
  return v;
}

absl::Status Volume::Recover() {
  // Sessions, grants, open orphans and locks outlive a restart and a
  // failover. The sessions get a fresh lease to come back in; those that do
  // not release what they held when it runs out.
  ASSIGN_OR_RETURN(auto sessions, meta_->sessions().ListSessions());
  // Sessions that took namespace grants (they hold inode ranges) are
  // waited for longer (below): each must find this server and replay its
  // log, each entry of which a program was told had succeeded.
  const absl::Duration grants_window = std::max(options_.meta_lease, 2 * options_.lease);
  std::vector<uint64_t> with_grants;
  for (const auto& [client_id, rec] : sessions) {
    const bool grants = rec.ino_ranges_size() > 0;
    sessions_.Restore(client_id, rec.client_name(), rec.peer(), /*recorded=*/true,
                      grants ? grants_window : absl::ZeroDuration());
    if (grants) with_grants.push_back(client_id);
  }
  for (uint64_t client_id : meta_->space().GrantHolders())
    sessions_.Restore(client_id, "(restored)");
  ASSIGN_OR_RETURN(auto orphans, meta_->orphans().ListOrphans());
  for (const auto& [ino, rec] : orphans) {
    for (const proto::OrphanRecord::Holder& h : rec.holders()) {
      if (h.client_id() == 0) continue;  // no session could ever release it
      sessions_.Restore(h.client_id(), "(restored)");
      for (uint64_t handle : h.handles()) sessions_.OpenFile(h.client_id(), ino, handle);
    }
  }
  ASSIGN_OR_RETURN(auto locks, meta_->locks().ListLocks());
  size_t lock_count = 0;
  for (const auto& [ino, rec] : locks) {
    std::vector<FileLock> list;
    for (const FileLock& l : FromLockRecord(rec)) {
      if (l.owner.client_id == 0) continue;  // no session could ever release it
      sessions_.Restore(l.owner.client_id, "(restored)");
      list.push_back(l);
    }
    lock_count += list.size();
    locks_.Restore(ino, std::move(list));
  }
  // A session known only from a grant, a lock or an orphan (its record
  // was never written) gets one, so that the next server waits for it too.
  for (const proto::SessionInfo& info : sessions_.List()) {
    if (!sessions_.Recorded(info.client_id())) {
      RecordSession(info.client_id(), info.client_name(), nullptr, info.peer())
          .IgnoreError();  // retried
    }
  }
  // Each of these clients may have files open that no record names (opens
  // of files that still had a name): unlinked files are kept until they
  // have said which (Reclaim) or their lease ran out.
  sessions_.StartGrace();
  grace_until_ = options_.lease_clock->Now() + 2 * options_.lease;
  // The last server's metadata leases run out within meta_lease of its last
  // renewal, which came before this start (a primary stops serving before
  // another takes over). Sessions that took namespace grants are waited for
  // as long as for their reclaims (twice the session lease, and their
  // sessions live that long): a mount cut off from the old primary by a
  // partition learns of the failover only when its calls time out there.
  {
    std::vector<uint64_t> ids;
    for (const proto::SessionInfo& info : sessions_.List()) ids.push_back(info.client_id());
    const absl::Time now = options_.lease_clock->Now();
    leases_.Inherit(ids, now + options_.meta_lease);
    if (!with_grants.empty()) leases_.Inherit(with_grants, now + grants_window, true);
  }
  size_t kept = 0;
  for (const auto& [ino, rec] : orphans) {
    ASSIGN_OR_RETURN(bool reaped, SyncOrphan(ino));
    if (!reaped) ++kept;
  }
  if (sessions_.reclaiming() + kept + lock_count > 0) {
    LOG(INFO) << sessions_.reclaiming() << " sessions of the last run may come back to reclaim;"
              << " kept " << kept << " unlinked files and " << lock_count << " file locks";
  }
  return absl::OkStatus();
}

Volume::Volume(const VolumeOptions& options, std::unique_ptr<Metadata> meta,
               std::unique_ptr<ChunkStore> chunks, std::unique_ptr<SpaceHold> hold)
    : options_(options),
      incarnation_(NewIncarnation()),
      meta_(std::move(meta)),
      chunks_(std::move(chunks)),
      hold_(std::move(hold)),
      sessions_(options.lease_clock, options.lease),
      leases_(LeaseTableOptions{.clock = options.lease_clock,
                                .term = options.meta_lease,
                                .hot_recalls = options.lease_hot_recalls,
                                .max_leases_per_holder = options.max_leases_per_mount,
                                .recorded = [this](uint64_t id) { return Recorded(id); }},
              [this](uint64_t client_id, const proto::Invalidation& inv) {
                return sessions_.PushRecall(client_id, inv);
              }),
      flow_(FlowControlOptions{.budget_bytes = options.write_budget_bytes,
                               .clock = options.lease_clock}) {}

Volume::~Volume() {
  {
    absl::MutexLock l(&bg_mu_);
    stopping_ = true;
  }
  if (background_.joinable()) background_.join();
}

void Volume::Publish(const RequestContext& ctx, uint64_t ino, uint64_t parent,
                     const std::string& name, bool data_changed) {
  proto::Invalidation inv;
  inv.set_ino(ino);
  inv.set_parent(parent);
  inv.set_name(name);
  inv.set_data_changed(data_changed);
  sessions_.Publish(ctx.client_id, inv);
}

void Volume::Recall(const RequestContext& ctx, absl::Span<const LeaseKey> keys) {
  absl::InlinedVector<LeaseKey, 8> live;
  for (const LeaseKey& k : keys) {
    if (k.ino != 0) live.push_back(k);
  }
  leases_.Recall(ctx.client_id, live, ctx.log_entry);
}

// --- namespace ----------------------------------------------------------------

absl::StatusOr<proto::Attr> Volume::Lookup(const RequestContext& ctx, uint64_t parent,
                                           const std::string& name) {
  return meta_->names().Lookup(ctx.caller, parent, name);
}

absl::StatusOr<proto::Attr> Volume::GetAttr(const RequestContext& ctx, uint64_t ino) {
  return meta_->inodes().GetAttr(ino);
}

absl::StatusOr<proto::Attr> Volume::SetAttr(const RequestContext& ctx,
                                            const proto::SetAttrRequest& req) {
  if (!(req.valid() & proto::SetAttrRequest::SIZE)) {
    const bool opened =
        req.handle() != 0 && sessions_.HoldsOpen(ctx.client_id, req.ino(), req.handle());
    ASSIGN_OR_RETURN(proto::Attr attr, meta_->inodes().SetAttr(ctx.caller, req, opened, ctx.tag));
    Recall(ctx, {LeaseKey::Attr(req.ino())});
    Publish(ctx, req.ino(), 0, "");
    return attr;
  }
  // Truncation: no data I/O on this inode meanwhile. The chunk files are cut
  // before the size shrinks, so a crash in between leaves zeros in the file,
  // never stale bytes past the end that a later extension would uncover.
  // The other nodes' leases are recalled after the lock, and whenever the
  // new size was committed (also when the clean-up after it failed).
  bool committed = false;
  auto locked = [&]() -> absl::StatusOr<proto::Attr> {
    absl::WriterMutexLock l(&DataLock(req.ino()));
    // ftruncate: write access was checked when the handle was opened (the
    // kernel allows ftruncate only on a descriptor open for writing).
    const bool opened =
        req.handle() != 0 && sessions_.HoldsOpen(ctx.client_id, req.ino(), req.handle());
    ASSIGN_OR_RETURN(proto::InodeRecord rec,
                     meta_->inodes().CheckTruncate(ctx.caller, req.ino(), req.size(), opened));
    if (req.size() < rec.size()) {
      RETURN_IF_ERROR(chunks_->Truncate(req.ino(), req.size(), rec.size()));
    } else {
      RETURN_IF_ERROR(ZeroTail(req.ino(), rec.size(), req.size()));
    }
    absl::StatusOr<proto::Attr> set = meta_->inodes().SetAttr(ctx.caller, req, opened, ctx.tag);
    if (!set.ok() && req.size() > rec.size()) {
      // Removed meanwhile: the zeros may have made a chunk file again.
      DropUncommitted(req.ino(), rec.size(), req.size() - rec.size(),
                      "zeroing the tail before an extending truncate");
    }
    ASSIGN_OR_RETURN(proto::Attr attr, std::move(set));
    committed = true;
    if (req.size() < rec.size() && req.size() % chunks_->chunk_size() != 0) {
      // The cut chunk may have lost its last allocated block (its record is
      // gone): then its file goes too (grantfsctl fsck found it left behind).
      const uint64_t index = req.size() / chunks_->chunk_size();
      ASSIGN_OR_RETURN(bool recorded, meta_->space().HasChunk(req.ino(), index));
      if (!recorded) RETURN_IF_ERROR(chunks_->RemoveChunk(req.ino(), index));
    }
    return attr;
  };
  absl::StatusOr<proto::Attr> attr = locked();
  if (committed) {
    Recall(ctx, {LeaseKey::Attr(req.ino())});
    Publish(ctx, req.ino(), 0, "", /*data_changed=*/true);
  }
  return attr;
}

absl::StatusOr<proto::Attr> Volume::MkNod(const RequestContext& ctx, const proto::MkNodRequest& req,
                                          bool* created) {
  bool made = false;
  ASSIGN_OR_RETURN(proto::Attr attr,
                   meta_->names().MkNod(ctx.caller, req.parent(), req.name(), req.mode(),
                                        req.rdev(), req.umask(), req.exclusive(), &made, ctx.tag));
  if (created != nullptr) *created = made;
  if (made) Recall(ctx, {LeaseKey::Dir(req.parent()), LeaseKey::Attr(req.parent())});
  Publish(ctx, req.parent(), req.parent(), req.name());
  return attr;
}

absl::StatusOr<proto::Attr> Volume::Symlink(const RequestContext& ctx, uint64_t parent,
                                            const std::string& name, const std::string& target) {
  ASSIGN_OR_RETURN(proto::Attr attr,
                   meta_->names().Symlink(ctx.caller, parent, name, target, ctx.tag));
  Recall(ctx, {LeaseKey::Dir(parent), LeaseKey::Attr(parent)});
  Publish(ctx, parent, parent, name);
  return attr;
}

absl::StatusOr<proto::Attr> Volume::Link(const RequestContext& ctx, uint64_t ino,
                                         uint64_t new_parent, const std::string& name) {
  ASSIGN_OR_RETURN(proto::Attr attr,
                   meta_->names().Link(ctx.caller, ino, new_parent, name, ctx.tag));
  Recall(ctx, {LeaseKey::Dir(new_parent), LeaseKey::Attr(new_parent), LeaseKey::Attr(ino)});
  Publish(ctx, new_parent, new_parent, name);
  Publish(ctx, ino, 0, "");
  return attr;
}

absl::StatusOr<Removed> Volume::Remove(const RequestContext& ctx, uint64_t parent,
                                       const std::string& name, bool is_dir,
                                       uint64_t expected_ino) {
  ASSIGN_OR_RETURN(Removed removed,
                   meta_->names().Remove(ctx.caller, parent, name, is_dir, expected_ino, ctx.tag));
  Recall(ctx, {LeaseKey::Dir(parent), LeaseKey::Attr(parent), LeaseKey::Attr(removed.ino),
               LeaseKey::Dir(is_dir ? removed.ino : 0)});
  Publish(ctx, parent, parent, name);
  Publish(ctx, removed.ino, 0, "");
  if (removed.nlink == 0) RETURN_IF_ERROR(SyncOrphan(removed.ino, ctx.tag).status());
  return removed;
}

absl::StatusOr<Removed> Volume::Rename(const RequestContext& ctx, const proto::RenameRequest& req) {
  ASSIGN_OR_RETURN(
      Removed replaced,
      meta_->names().Rename(ctx.caller, req.parent(), req.name(), req.new_parent(), req.new_name(),
                            req.flags(), req.expected_ino(), req.expected_new_ino(), ctx.tag));
  // A directory replaced by the rename is gone with its names.
  const bool replaced_dir = replaced.ino != 0 && replaced.nlink == 0 && replaced.exchanged == 0;
  Recall(ctx, {LeaseKey::Dir(req.parent()), LeaseKey::Attr(req.parent()),
               LeaseKey::Dir(req.new_parent()), LeaseKey::Attr(req.new_parent()),
               LeaseKey::Attr(replaced.moved), LeaseKey::Attr(replaced.exchanged),
               LeaseKey::Attr(replaced.ino), LeaseKey::Dir(replaced_dir ? replaced.ino : 0)});
  if (req.parent() != req.new_parent()) {
    // A directory moved: its ".." is another (its listing says which).
    Recall(ctx, {LeaseKey::Dir(replaced.moved), LeaseKey::Dir(replaced.exchanged)});
  }
  Publish(ctx, req.parent(), req.parent(), req.name());
  Publish(ctx, req.new_parent(), req.new_parent(), req.new_name());
  if (replaced.ino != 0) {
    Publish(ctx, replaced.ino, 0, "");
    if (replaced.nlink == 0) RETURN_IF_ERROR(SyncOrphan(replaced.ino, ctx.tag).status());
  }
  return replaced;
}

absl::StatusOr<std::string> Volume::ReadLink(const RequestContext& ctx, uint64_t ino) {
  return meta_->names().ReadLink(ino);
}

absl::Status Volume::ReadDir(const RequestContext& ctx, uint64_t ino, uint64_t cookie, uint32_t max,
                             proto::ReadDirReply* reply) {
  return meta_->names().ReadDir(ctx.caller, ino, cookie, std::min<uint32_t>(max, 4096), reply);
}

absl::StatusOr<bool> Volume::SyncOrphan(uint64_t ino, RequestTag* tag) {
  ASSIGN_OR_RETURN(bool reaped, meta_->orphans().SyncOrphan(
                                    ino, /*keep_unheld=*/sessions_.reclaiming() > 0, tag));
  if (reaped) {
    absl::MutexLock l(&bg_mu_);
    garbage_waiting_ = true;
  }
  return reaped;
}

// --- xattrs --------------------------------------------------------------------

absl::Status Volume::SetXattr(const RequestContext& ctx, uint64_t ino, const std::string& name,
                              const std::string& value, uint32_t flags) {
  RETURN_IF_ERROR(meta_->inodes().SetXattr(ctx.caller, ino, name, value, flags, ctx.tag));
  Recall(ctx, {LeaseKey::Attr(ino)});
  Publish(ctx, ino, 0, "");
  return absl::OkStatus();
}

absl::StatusOr<std::string> Volume::GetXattr(const RequestContext& ctx, uint64_t ino,
                                             const std::string& name) {
  return meta_->inodes().GetXattr(ctx.caller, ino, name);
}

absl::StatusOr<std::vector<std::string>> Volume::ListXattr(const RequestContext& ctx,
                                                           uint64_t ino) {
  return meta_->inodes().ListXattr(ctx.caller, ino);
}

void Volume::MarkNoXattrs(proto::Attr* attr) {
  absl::StatusOr<bool> has = meta_->inodes().HasXattrs(attr->ino());
  attr->set_no_xattrs(has.ok() && !*has);
}

absl::Status Volume::RemoveXattr(const RequestContext& ctx, uint64_t ino, const std::string& name) {
  RETURN_IF_ERROR(meta_->inodes().RemoveXattr(ctx.caller, ino, name, ctx.tag));
  Recall(ctx, {LeaseKey::Attr(ino)});
  Publish(ctx, ino, 0, "");
  return absl::OkStatus();
}

// --- locks ---------------------------------------------------------------------------

absl::StatusOr<FileLock> Volume::GetLock(const RequestContext& ctx, uint64_t ino,
                                         const FileLock& want) {
  RETURN_IF_ERROR(meta_->inodes().GetInode(ino).status());
  return locks_.Test(ino, want);
}

absl::Status Volume::SetLock(const RequestContext& ctx, uint64_t ino, const FileLock& want) {
  if (want.type == FileLock::kUnlock && want.start == 0 && want.end == UINT64_MAX) {
    // Releases at close must work even for a file removed meanwhile.
    return ChangeLocks(
        ino,
        [&] {
          locks_.ReleaseOwner(ino, want.owner, want.flock);
          return absl::OkStatus();
        },
        ctx.tag);
  }
  RETURN_IF_ERROR(meta_->inodes().GetInode(ino).status());
  return ChangeLocks(
      ino, [&] { return locks_.Set(ino, want); }, ctx.tag);
}

absl::Status Volume::ChangeLocks(uint64_t ino, absl::FunctionRef<absl::Status()> change,
                                 RequestTag* tag) {
  absl::MutexLock l(&FileLockMu(ino));
  const std::vector<FileLock> before = locks_.Get(ino);
  RETURN_IF_ERROR(change());
  const std::vector<FileLock> after = locks_.Get(ino);
  if (after == before) return absl::OkStatus();  // e.g. a resent lock request
  absl::Status s = meta_->locks().PutLocks(ino, ToLockRecord(after), tag);
  // UNAVAILABLE: applied here, not known to be replicated; the resend finds
  // its dedupe record and waits for it. Any other error: not applied.
  if (!s.ok() && !absl::IsUnavailable(s)) locks_.Restore(ino, before);
  return s;
}

}  // namespace grantfs
