#include "server/volume.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/data_dir.h"
#include "server/dedupe.h"
#include "server/names.h"
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

// Room a metadata write that found the disk full gets from the hold at once
// (a RocksDB memtable flush or WAL file at most, at the sizes meta_store.cc
// sets).
constexpr uint64_t kMetadataRoomBytes = 16ull << 20;
// What a data write that found the disk full borrows beyond its own blocks:
// the file system's own blocks for the chunk file (extent tree, indirect
// blocks).
constexpr uint64_t kWriteRoomMarginBytes = 1ull << 20;

uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (static_cast<uint64_t>(rd()) << 32) | rd();
  return id;
}

absl::StatusOr<uint64_t> DiskFree(const std::string& dir) {
  struct statvfs sv;
  if (statvfs(dir.c_str(), &sv) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("statvfs ", dir, ": ", strerror(errno)));
  }
  return static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize;
}

// The space of the data file system that file data may still take: its free
// space plus what the space hold keeps for promises (server/space_hold.h),
// both read at the same moment, at most every 50 ms (it is asked before
// every write's reservation). A failed statvfs counts as no space: nothing
// more is promised until it works again.
class DiskFreeCache {
 public:
  DiskFreeCache(std::string dir, const SpaceHold* hold) : dir_(std::move(dir)), hold_(hold) {}

  uint64_t Get() {
    absl::MutexLock l(&mu_);
    const absl::Time now = absl::Now();
    if (now - at_ >= absl::Milliseconds(50)) {
      absl::StatusOr<uint64_t> free = DiskFree(dir_);
      if (!free.ok()) {
        LOG_EVERY_N(ERROR, 100) << free.status();
      }
      bytes_ = free.ok() ? *free + hold_->held() : 0;
      at_ = now;
    }
    return bytes_;
  }

 private:
  const std::string dir_;
  const SpaceHold* const hold_;
  absl::Mutex mu_;
  absl::Time at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

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
  // The metadata reserve is part of the hold: file data gets the rest.
  mo.disk_available = [reserve, cache = std::make_shared<DiskFreeCache>(options.dir, hold.get())] {
    const uint64_t space = cache->Get();
    return space > reserve ? space - reserve : 0;
  };
  // A metadata write that found the disk full gets room from the
  // metadata reserve held for it.
  mo.make_room = [h = hold.get()] {
    const uint64_t lent = h->Lend(kMetadataRoomBytes);
    h->Repay(lent);  // RocksDB keeps the room; Cover grows the hold back once there is space
    return lent > 0;
  };
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
  std::set<uint64_t> recorded;
  for (const auto& [client_id, rec] : sessions) {
    sessions_.Restore(client_id, rec.client_name());
    recorded.insert(client_id);
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
    if (!recorded.count(info.client_id())) {
      RecordSession(info.client_id(), info.client_name()).IgnoreError();  // retried
    }
  }
  // Each of these clients may have files open that no record names (opens
  // of files that still had a name): unlinked files are kept until they
  // have said which (Reclaim) or their lease ran out.
  sessions_.StartGrace();
  grace_until_ = options_.lease_clock->Now() + 2 * options_.lease;
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
    Publish(ctx, req.ino(), 0, "");
    return attr;
  }
  // Truncation: no data I/O on this inode meanwhile. The chunk files are cut
  // before the size shrinks, so a crash in between leaves zeros in the file,
  // never stale bytes past the end that a later extension would uncover.
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
  ASSIGN_OR_RETURN(proto::Attr attr, meta_->inodes().SetAttr(ctx.caller, req, opened, ctx.tag));
  if (req.size() < rec.size() && req.size() % chunks_->chunk_size() != 0) {
    // The cut chunk may have lost its last allocated block (its record is
    // gone): then its file goes too (grantfsctl fsck found it left behind).
    const uint64_t index = req.size() / chunks_->chunk_size();
    ASSIGN_OR_RETURN(bool recorded, meta_->space().HasChunk(req.ino(), index));
    if (!recorded) RETURN_IF_ERROR(chunks_->RemoveChunk(req.ino(), index));
  }
  Publish(ctx, req.ino(), 0, "", /*data_changed=*/true);
  return attr;
}

absl::StatusOr<proto::Attr> Volume::MkNod(const RequestContext& ctx, const proto::MkNodRequest& req,
                                          bool* created) {
  ASSIGN_OR_RETURN(proto::Attr attr, meta_->names().MkNod(ctx.caller, req.parent(), req.name(),
                                                          req.mode(), req.rdev(), req.umask(),
                                                          req.exclusive(), created, ctx.tag));
  Publish(ctx, req.parent(), req.parent(), req.name());
  return attr;
}

absl::StatusOr<proto::Attr> Volume::Symlink(const RequestContext& ctx, uint64_t parent,
                                            const std::string& name, const std::string& target) {
  ASSIGN_OR_RETURN(proto::Attr attr,
                   meta_->names().Symlink(ctx.caller, parent, name, target, ctx.tag));
  Publish(ctx, parent, parent, name);
  return attr;
}

absl::StatusOr<proto::Attr> Volume::Link(const RequestContext& ctx, uint64_t ino,
                                         uint64_t new_parent, const std::string& name) {
  ASSIGN_OR_RETURN(proto::Attr attr,
                   meta_->names().Link(ctx.caller, ino, new_parent, name, ctx.tag));
  Publish(ctx, new_parent, new_parent, name);
  Publish(ctx, ino, 0, "");
  return attr;
}

absl::Status Volume::Remove(const RequestContext& ctx, uint64_t parent, const std::string& name,
                            bool is_dir, uint64_t expected_ino) {
  ASSIGN_OR_RETURN(Removed removed,
                   meta_->names().Remove(ctx.caller, parent, name, is_dir, expected_ino, ctx.tag));
  Publish(ctx, parent, parent, name);
  Publish(ctx, removed.ino, 0, "");
  if (removed.nlink == 0) RETURN_IF_ERROR(SyncOrphan(removed.ino, ctx.tag).status());
  return absl::OkStatus();
}

absl::Status Volume::Rename(const RequestContext& ctx, const proto::RenameRequest& req) {
  ASSIGN_OR_RETURN(
      Removed replaced,
      meta_->names().Rename(ctx.caller, req.parent(), req.name(), req.new_parent(), req.new_name(),
                            req.flags(), req.expected_ino(), req.expected_new_ino(), ctx.tag));
  Publish(ctx, req.parent(), req.parent(), req.name());
  Publish(ctx, req.new_parent(), req.new_parent(), req.new_name());
  if (replaced.ino != 0) {
    Publish(ctx, replaced.ino, 0, "");
    if (replaced.nlink == 0) RETURN_IF_ERROR(SyncOrphan(replaced.ino, ctx.tag).status());
  }
  return absl::OkStatus();
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

// --- files -----------------------------------------------------------------------

absl::StatusOr<proto::Attr> Volume::Open(const RequestContext& ctx, uint64_t ino, uint32_t flags,
                                         uint64_t handle, bool created) {
  absl::StatusOr<proto::Attr> checked = meta_->inodes().CheckOpen(ctx.caller, ino, flags, created);
  // An inode that is gone, or a file removed elsewhere (unless this client
  // still holds it open: a second open of an unlinked file on the same
  // node), was reached through a name the node's kernel cached before the
  // removal: ESTALE makes the kernel look the name up again and retry the
  // open (open(O_CREAT) then creates the file, a plain open says ENOENT).
  if (!checked.ok() && ToErrno(checked.status()) == ENOENT) {
    return ErrnoStatus(ESTALE, "inode no longer exists");
  }
  ASSIGN_OR_RETURN(proto::Attr attr, std::move(checked));
  if (attr.nlink() == 0 && sessions_.OpenCountBy(ctx.client_id, ino) == 0) {
    return ErrnoStatus(ESTALE, "file was removed");
  }
  if ((flags & O_TRUNC) && S_ISREG(attr.mode()) && attr.size() > 0) {
    // open(O_TRUNC): the kernel passes it here (atomic O_TRUNC) instead of
    // sending a truncate first.
    proto::SetAttrRequest cut;
    cut.set_ino(ino);
    cut.set_valid(proto::SetAttrRequest::SIZE);
    cut.set_size(0);
    absl::StatusOr<proto::Attr> truncated = SetAttr(ctx, cut);
    // Removed (and freed) by another node since the check above: as there.
    if (!truncated.ok() && ToErrno(truncated.status()) == ENOENT) {
      return ErrnoStatus(ESTALE, "inode no longer exists");
    }
    ASSIGN_OR_RETURN(attr, std::move(truncated));
  }
  RETURN_IF_ERROR(CountOpen(ctx, ino, handle));
  // The last link may have gone since the check above. The orphan's record
  // is brought up to date under the metadata store's mutex, so it names
  // this open before the open is answered whichever way the two interleave
  // (a removal computes the holders under that mutex too). An error leaves
  // the open counted: the record may already name it, and a resend with the
  // same handle counts once.
  RETURN_IF_ERROR(SyncOrphan(ino, ctx.tag).status());
  if (!meta_->inodes().GetInode(ino).ok()) {  // reaped before this open was counted
    sessions_.CloseFile(ctx.client_id, ino, handle);
    return ErrnoStatus(ESTALE, "file was removed");
  }
  return attr;
}

absl::Status Volume::Release(const RequestContext& ctx, uint64_t ino, uint64_t handle) {
  sessions_.CloseFile(ctx.client_id, ino, handle);
  // As in Open: an orphan's record drops this open before the reply.
  return SyncOrphan(ino).status();
}

absl::StatusOr<std::string> Volume::Read(const RequestContext& ctx, uint64_t ino, uint64_t offset,
                                         uint32_t size) {
  if (size > options_.max_io_bytes) return ErrnoStatus(EINVAL, "read too large");
  absl::ReaderMutexLock l(&DataLock(ino));
  ASSIGN_OR_RETURN(proto::InodeRecord rec, meta_->inodes().GetInode(ino));
  if (S_ISDIR(rec.mode())) return ErrnoStatus(EISDIR, "read");
  if (!S_ISREG(rec.mode())) return ErrnoStatus(EINVAL, "read of a non-file");
  if (offset >= rec.size()) return std::string();
  const uint64_t n = std::min<uint64_t>(size, rec.size() - offset);
  std::string data(n, '\0');
  RETURN_IF_ERROR(chunks_->Read(ino, offset, n, data.data()));
  RETURN_IF_ERROR(ZeroUnallocated(ino, offset, &data));
  return data;
}

absl::Status Volume::ZeroTail(uint64_t ino, uint64_t size, uint64_t upto) {
  if (size % kBlockSize == 0 || upto <= size) return absl::OkStatus();
  // An unallocated block reads as zeros anyway (and gets no chunk file).
  const uint64_t cs = chunks_->chunk_size();
  const uint64_t block = (size % cs) / kBlockSize;
  ASSIGN_OR_RETURN(std::string bitmap, meta_->space().ChunkBitmap(ino, size / cs));
  if (block / 8 >= bitmap.size() ||
      !((static_cast<unsigned char>(bitmap[block / 8]) >> (block % 8)) & 1)) {
    return absl::OkStatus();
  }
  const uint64_t end = std::min(upto, (size / kBlockSize + 1) * kBlockSize);
  const std::string zeros(end - size, '\0');
  return chunks_->Write(ino, size, zeros.data(), zeros.size(), options_.sync_data);
}

absl::Status Volume::ZeroUnallocated(uint64_t ino, uint64_t offset, std::string* data) {
  const uint64_t cs = chunks_->chunk_size();
  const uint64_t end = offset + data->size();
  for (uint64_t c = offset / cs; c * cs < end; ++c) {
    ASSIGN_OR_RETURN(std::string bitmap, meta_->space().ChunkBitmap(ino, c));
    const uint64_t lo = std::max(offset, c * cs), hi = std::min(end, (c + 1) * cs);
    for (uint64_t at = lo; at < hi;) {
      const uint64_t block = (at - c * cs) / kBlockSize;
      const uint64_t block_end = std::min(hi, c * cs + (block + 1) * kBlockSize);
      const bool set = block / 8 < bitmap.size() &&
                       (static_cast<unsigned char>(bitmap[block / 8]) >> (block % 8)) & 1;
      if (!set) memset(data->data() + (at - offset), 0, block_end - at);
      at = block_end;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::Attr> Volume::Write(const RequestContext& ctx, uint64_t ino, uint64_t offset,
                                          const std::string& data, bool sync, bool from_grant,
                                          uint64_t* grant_used) {
  if (data.size() > options_.max_io_bytes) return ErrnoStatus(EINVAL, "write too large");
  RETURN_IF_ERROR(ValidateRange(offset, data.size()));
  {
    // A write past the end that leaves a gap in the last block: the gap is
    // zeroed first, under this inode's exclusive lock (rare: the size is
    // rarely not block-aligned when a write lands past it).
    ASSIGN_OR_RETURN(proto::InodeRecord now, meta_->inodes().GetInode(ino));
    if (offset > now.size() && now.size() % kBlockSize != 0 && S_ISREG(now.mode())) {
      absl::WriterMutexLock wl(&DataLock(ino));
      ASSIGN_OR_RETURN(now, meta_->inodes().GetInode(ino));
      if (offset > now.size()) RETURN_IF_ERROR(ZeroTail(ino, now.size(), offset));
    }
  }
  absl::ReaderMutexLock l(&DataLock(ino));
  ASSIGN_OR_RETURN(proto::InodeRecord rec, meta_->inodes().GetInode(ino));
  if (S_ISDIR(rec.mode())) return ErrnoStatus(EISDIR, "write");
  if (!S_ISREG(rec.mode())) return ErrnoStatus(EINVAL, "write to a non-file");
  // Reserve first so that ENOSPC is decided before any byte lands; the data
  // is on disk (fdatasync'd, here and on the replica, unless both `sync`
  // and options.sync_data are off) before the metadata that makes it part
  // of the file is committed.
  const uint64_t grant_client = from_grant ? ctx.client_id : 0;
  ASSIGN_OR_RETURN(Reservation r, ReserveForWrite(ctx, ino, offset, data.size(), grant_client));
  if (grant_used != nullptr) *grant_used = SpaceLedger::Bytes(r.from_grant);
  // A retry of this write answers with the grant it used (server/dedupe.h).
  if (ctx.tag != nullptr) ctx.tag->value = SpaceLedger::Bytes(r.from_grant);
  sync = sync || options_.sync_data;
  absl::Status st = chunks_->Write(ino, offset, data.data(), data.size(), sync);
  // Space promised in a grant is held on the disk (server/space_hold.h):
  // if another program filled the disk meanwhile, the write borrows it.
  uint64_t lent = 0;
  for (int attempt = 0; !st.ok() && ToErrno(st) == ENOSPC && r.from_grant > 0 && attempt < 3;
       ++attempt) {
    const uint64_t got = hold_->Lend(SpaceLedger::Bytes(r.blocks) + kWriteRoomMarginBytes);
    if (got == 0) break;
    lent += got;
    LOG_EVERY_N(WARNING, 100) << "the data disk is full: a write of inode " << ino
                              << " promised in a grant borrows " << got
                              << " bytes of the space hold";
    st = chunks_->Write(ino, offset, data.data(), data.size(), sync);
  }
  if (!st.ok()) {
    hold_->Repay(lent);
    meta_->space().Unreserve(r);  // the grant's part goes back to the grant
    if (grant_used != nullptr) *grant_used = 0;
    return st;
  }
  absl::StatusOr<proto::Attr> committed =
      meta_->space().CommitWrite(ino, offset, data.size(), true, r, ctx.tag);
  hold_->Repay(lent);
  ASSIGN_OR_RETURN(proto::Attr attr, std::move(committed));
  Publish(ctx, ino, 0, "", /*data_changed=*/true);
  return attr;
}

absl::StatusOr<uint64_t> Volume::Grant(const RequestContext& ctx, uint64_t wanted_bytes,
                                       uint64_t return_bytes, uint64_t* added) {
  // Bytes are rounded to whole blocks: down for what is asked, up for what
  // is given back, so a client never holds more than it was told.
  uint64_t added_blocks = 0;
  ASSIGN_OR_RETURN(
      uint64_t blocks,
      meta_->space().Grant(ctx.client_id, SpaceLedger::BlocksWithin(wanted_bytes),
                           SpaceLedger::BlocksCovering(return_bytes), &added_blocks, ctx.tag));
  *added = SpaceLedger::Bytes(added_blocks);
  if (added_blocks > 0 && !CoverPromises()) {
    // The disk cannot hold what was just promised (another program took
    // the space): the promise is taken back.
    uint64_t ignored = 0;
    ASSIGN_OR_RETURN(blocks,
                     meta_->space().Grant(ctx.client_id, 0, added_blocks, &ignored, ctx.tag));
    *added = 0;
  }
  // Short of what was asked: others may sit on grants they do not need.
  if (*added < SpaceLedger::Bytes(SpaceLedger::BlocksWithin(wanted_bytes)))
    RecallGrants(ctx.client_id);
  return SpaceLedger::Bytes(blocks);
}

bool Volume::CoverPromises() {
  const uint64_t promised =
      SpaceLedger::Bytes(meta_->space().GrantedBlocks()) + options_.metadata_reserve_bytes;
  absl::Status st = hold_->Cover(promised);
  absl::MutexLock l(&hold_mu_);
  if (!st.ok() && hold_whole_) {
    LOG(WARNING) << "the data disk is full: " << promised << " bytes are promised (grants and "
                 << "the metadata reserve), " << hold_->held() << " are held for them; no new "
                 << "grants until there is space (" << st << ")";
  } else if (st.ok() && !hold_whole_) {
    LOG(INFO) << "the data disk has space again: every promise is held";
  }
  hold_whole_ = st.ok();
  return st.ok();
}

bool Volume::RecallGrants(uint64_t origin) {
  std::vector<uint64_t> holders;
  for (uint64_t id : meta_->space().GrantHolders()) {
    if (id != origin && meta_->space().GrantOf(id) > 0) holders.push_back(id);
  }
  if (holders.empty()) return false;
  {
    absl::MutexLock l(&recall_mu_);
    const absl::Time now = options_.lease_clock->Now();
    if (now - last_recall_ < absl::Milliseconds(200)) return true;
    last_recall_ = now;
  }
  for (uint64_t id : holders) {
    const uint64_t bytes = SpaceLedger::Bytes(meta_->space().GrantOf(id));
    if (sessions_.Recall(id, bytes)) {
      VLOG(1) << "recalling up to " << bytes << " bytes of grant from session " << id;
    }
  }
  return true;
}

absl::StatusOr<Reservation> Volume::ReserveForWrite(const RequestContext& ctx, uint64_t ino,
                                                    uint64_t offset, uint64_t length,
                                                    uint64_t grant_client) {
  // Counted in attempts, not clock time, so that a FakeClock cannot stall it.
  constexpr absl::Duration kPoll = absl::Milliseconds(20);
  const int64_t attempts = options_.recall_wait / kPoll;
  for (int64_t i = 0;; ++i) {
    absl::StatusOr<Reservation> r = meta_->space().Reserve(ino, offset, length, grant_client);
    if (r.ok() || ToErrno(r.status()) != ENOSPC || i >= attempts) return r;
    if (!RecallGrants(ctx.client_id)) return r;  // nobody else holds space
    absl::SleepFor(kPoll);
  }
}

absl::Status Volume::Fsync(const RequestContext& ctx, uint64_t ino) {
  absl::ReaderMutexLock l(&DataLock(ino));
  ASSIGN_OR_RETURN(proto::InodeRecord rec, meta_->inodes().GetInode(ino));
  if (!S_ISREG(rec.mode())) return absl::OkStatus();  // metadata is always durable
  return chunks_->Sync(ino, rec.size());
}

absl::StatusOr<proto::Attr> Volume::Fallocate(const RequestContext& ctx, uint64_t ino,
                                              uint32_t mode, uint64_t offset, uint64_t length) {
  if (mode != 0) return ErrnoStatus(EOPNOTSUPP, "fallocate mode");
  if (length == 0) return ErrnoStatus(EINVAL, "fallocate length 0");
  RETURN_IF_ERROR(ValidateRange(offset, length));
  absl::ReaderMutexLock l(&DataLock(ino));
  ASSIGN_OR_RETURN(proto::InodeRecord rec, meta_->inodes().GetInode(ino));
  if (S_ISDIR(rec.mode())) return ErrnoStatus(EISDIR, "fallocate");
  if (!S_ISREG(rec.mode())) return ErrnoStatus(ENODEV, "fallocate of a non-file");
  ASSIGN_OR_RETURN(Reservation r, ReserveForWrite(ctx, ino, offset, length, 0));
  absl::Status st = chunks_->Allocate(ino, offset, length);
  if (!st.ok()) {
    meta_->space().Unreserve(r);
    return st;
  }
  ASSIGN_OR_RETURN(proto::Attr attr,
                   meta_->space().CommitWrite(ino, offset, length, true, r, ctx.tag));
  Publish(ctx, ino, 0, "");
  return attr;
}

// --- xattrs --------------------------------------------------------------------

absl::Status Volume::SetXattr(const RequestContext& ctx, uint64_t ino, const std::string& name,
                              const std::string& value, uint32_t flags) {
  RETURN_IF_ERROR(meta_->inodes().SetXattr(ctx.caller, ino, name, value, flags, ctx.tag));
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

absl::Status Volume::RemoveXattr(const RequestContext& ctx, uint64_t ino, const std::string& name) {
  RETURN_IF_ERROR(meta_->inodes().RemoveXattr(ctx.caller, ino, name, ctx.tag));
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

// --- sessions and background work -------------------------------------------------

void Volume::ForgetClient(uint64_t client_id, const std::map<uint64_t, uint32_t>& open_files) {
  for (uint64_t ino : locks_.InodesOf(client_id)) {
    absl::Status s = ChangeLocks(ino, [&] {
      locks_.ReleaseClient(ino, client_id);
      return absl::OkStatus();
    });
    if (!s.ok()) LOG(ERROR) << "releasing the locks of client " << client_id << ": " << s;
  }
  flow_.Forget(client_id);
  if (absl::Status s = meta_->sessions().EndSession(client_id); !s.ok()) {
    LOG(ERROR) << "ending session " << client_id << " (its record and grant): " << s;
  }
  for (const auto& [ino, n] : open_files) {
    absl::StatusOr<proto::InodeRecord> rec = meta_->inodes().GetInode(ino);
    if (rec.ok() && rec->nlink() == 0) {
      absl::Status s = SyncOrphan(ino).status();
      if (!s.ok()) LOG(WARNING) << "releasing orphan " << ino << ": " << s;
    }
  }
  sessions_.Forgotten(client_id);
}

absl::StatusOr<uint64_t> Volume::OpenSession(const std::string& client_name) {
  const uint64_t client_id = sessions_.Open(client_name);
  if (absl::Status s = RecordSession(client_id, client_name); !s.ok()) {
    ForgetClient(client_id, sessions_.Close(client_id));
    return s;
  }
  return client_id;
}

absl::Status Volume::Touch(uint64_t client_id, RequestTag* tag) {
  switch (sessions_.Touch(client_id)) {
    case SessionTable::TouchResult::kRenewed:
      return absl::OkStatus();
    case SessionTable::TouchResult::kEnding:
      return absl::ResourceExhaustedError(
          absl::StrCat("session ", client_id, " is ending (lease expired); retry"));
    case SessionTable::TouchResult::kCreated:
      RecordSession(client_id, "(reconnected)", tag).IgnoreError();  // retried by maintenance
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Volume::RecordSession(uint64_t client_id, const std::string& client_name,
                                   RequestTag* tag) {
  proto::SessionRecord rec;
  rec.set_client_name(client_name);
  absl::Status s = meta_->sessions().PutSession(client_id, rec, tag);
  absl::MutexLock l(&unrecorded_mu_);
  if (s.ok()) {
    unrecorded_.erase(client_id);
    return s;
  }
  // Without the record, a server taking over would not wait for this
  // client's reclaim; the session itself works.
  LOG(WARNING) << "recording session " << client_id << ": " << s << " (retried)";
  unrecorded_.insert(client_id);
  return s;
}

absl::Status Volume::CountOpen(const RequestContext& ctx, uint64_t ino, uint64_t handle) {
  if (sessions_.OpenFile(ctx.client_id, ino, handle)) return absl::OkStatus();
  // The session ended after this request renewed it.
  RETURN_IF_ERROR(Touch(ctx.client_id, ctx.tag));
  if (sessions_.OpenFile(ctx.client_id, ino, handle)) return absl::OkStatus();
  return absl::ResourceExhaustedError("session ended during the request; retry");
}

absl::Status Volume::CloseSession(uint64_t client_id) {
  ForgetClient(client_id, sessions_.Close(client_id));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> Volume::Reclaim(
    const RequestContext& ctx, const std::vector<std::pair<uint64_t, uint64_t>>& opens) {
  std::vector<uint64_t> lost;
  for (const auto& [ino, handle] : opens) {
    absl::StatusOr<proto::InodeRecord> rec = meta_->inodes().GetInode(ino);
    if (!rec.ok()) {
      if (ToErrno(rec.status()) != ENOENT) {
        LOG(ERROR) << "reclaim of inode " << ino << " by client " << ctx.client_id << ": "
                   << rec.status();
      }
      lost.push_back(ino);
      continue;
    }
    RETURN_IF_ERROR(CountOpen(ctx, ino, handle));
    // As in Open: an orphan's record names this open before the reply.
    if (rec->nlink() == 0) RETURN_IF_ERROR(SyncOrphan(ino).status());
  }
  LOG(INFO) << "client " << ctx.client_id << " reclaimed " << opens.size() - lost.size()
            << " open files" << (lost.empty() ? "" : absl::StrCat(", ", lost.size(), " gone"));
  if (sessions_.Reclaimed(ctx.client_id)) {
    LOG(INFO) << "every session of the last run has reclaimed: unlinked files are freed again";
  }
  return lost;
}

absl::StatusOr<int> Volume::RunMaintenance() {
  if (options_.serving && !options_.serving()) {
    // Cut off from the replica and the witness: the clients cannot reach
    // this server either. Their sessions wait for it (or for the server that
    // takes over) instead of losing their locks, open files and grants.
    sessions_.RenewAll();
    return 0;
  }
  for (auto& [client_id, open_files] : sessions_.Expire()) {
    LOG(WARNING) << "client " << client_id << ": lease expired; releasing its " << open_files.size()
                 << " open files and its locks";
    ForgetClient(client_id, open_files);
  }
  if (sessions_.reclaiming() > 0 && options_.lease_clock->Now() >= grace_until_) {
    for (uint64_t id : sessions_.EndGrace()) {
      LOG(WARNING) << "client " << id << " did not reclaim within two leases of the start;"
                   << " files it may have open are no longer kept";
    }
  }
  const bool in_grace = sessions_.reclaiming() > 0;
  if (in_grace_ && !in_grace) LOG(INFO) << "grace over: unlinked files are freed again";
  in_grace_ = in_grace;
  std::set<uint64_t> unrecorded;
  {
    absl::MutexLock l(&unrecorded_mu_);
    unrecorded.swap(unrecorded_);
  }
  for (const proto::SessionInfo& info : sessions_.List()) {
    if (unrecorded.count(info.client_id())) {
      RecordSession(info.client_id(), info.client_name()).IgnoreError();  // again next round
    }
  }
  // Every orphan record brought up to date (an unchanged one costs no
  // write): one whose update failed after a removal or a release (the
  // replica did not answer) is reaped or corrected here.
  ASSIGN_OR_RETURN(auto orphans, meta_->orphans().ListOrphans());
  for (const auto& [ino, rec] : orphans) {
    absl::Status s = SyncOrphan(ino).status();
    if (!s.ok()) LOG(WARNING) << "orphan " << ino << ": " << s;
  }
  if (options_.clock->Now() - last_dedupe_expiry_ >= absl::Minutes(1)) {
    last_dedupe_expiry_ = options_.clock->Now();
    absl::StatusOr<int> n = meta_->sessions().ExpireDedupe(options_.dedupe_retention);
    if (!n.ok()) LOG(WARNING) << "expiring request records: " << n.status();
  }
  ASSIGN_OR_RETURN(std::vector<uint64_t> garbage, meta_->orphans().ListGarbage());
  for (uint64_t ino : garbage) {
    ASSIGN_OR_RETURN(uint64_t span, meta_->orphans().GarbageChunkSpan(ino));
    for (uint64_t i = 0; i < span; ++i) RETURN_IF_ERROR(chunks_->RemoveChunk(ino, i));
    RETURN_IF_ERROR(meta_->orphans().FinishGarbage(ino));
  }
  return static_cast<int>(garbage.size());
}

void Volume::BackgroundLoop() {
  absl::MutexLock l(&bg_mu_);
  while (!stopping_) {
    auto wake = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(bg_mu_) { return stopping_ || garbage_waiting_; };
    bg_mu_.AwaitWithTimeout(absl::Condition(&wake), absl::Seconds(1));
    if (stopping_) break;
    garbage_waiting_ = false;
    bg_mu_.Unlock();
    absl::StatusOr<int> done = RunMaintenance();
    if (!done.ok()) LOG(ERROR) << "background maintenance: " << done.status();
    CoverPromises();  // the space of written and returned grants goes back
    bg_mu_.Lock();
  }
}

absl::StatusOr<FsckReport> Volume::CheckMetadata() {
  std::optional<absl::StatusOr<FsckReport>> report;
  RETURN_IF_ERROR(meta_->store().ReadSnapshot([&](rocksdb::DB* db, const rocksdb::Snapshot* snap) {
    report = CheckMetadataSnapshot(db, snap, options_.dir + " (online, metadata)",
                                   chunks_->chunk_size());
    return absl::OkStatus();
  }));
  return *std::move(report);
}

}  // namespace grantfs
