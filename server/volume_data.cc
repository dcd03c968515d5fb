// Volume's file data path: open and release, read, write (reservation,
// chunk write, commit), grants and the space hold that keeps their promises,
// fsync and fallocate (server/volume.h; the rest of the class is in
// volume.cc and volume_sessions.cc).
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/dedupe.h"
#include "server/volume.h"

namespace grantfs {

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

absl::Status Volume::Release(const RequestContext& ctx, uint64_t ino, uint64_t handle,
                             bool* reaped) {
  sessions_.CloseFile(ctx.client_id, ino, handle);
  // As in Open: an orphan's record drops this open before the reply.
  absl::StatusOr<bool> r = SyncOrphan(ino);
  if (reaped != nullptr) *reaped = r.ok() && *r;
  return r.status();
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

void Volume::DropUncommitted(uint64_t ino, uint64_t offset, uint64_t length,
                             absl::string_view what) {
  if (length == 0) return;
  absl::StatusOr<proto::InodeRecord> rec = meta_->inodes().GetInode(ino);
  if (rec.ok() || ToErrno(rec.status()) != ENOENT) return;
  // Every chunk file of a removed inode is garbage (the background deleter
  // frees those its records name, perhaps at this moment: a second removal
  // is harmless), once the removal stays: one applied from a mount's log
  // may not be durable yet, and a crash before would bring the file back
  // (its fsync'd bytes too) without them.
  absl::Status s = meta_->store().WaitDurable(meta_->store().Applied());
  const uint64_t cs = chunks_->chunk_size();
  for (uint64_t c = offset / cs; s.ok() && c <= (offset + length - 1) / cs; ++c) {
    s = chunks_->RemoveChunk(ino, c);
  }
  if (s.ok()) s = chunks_->SyncRemovals({ino});
  LOG_IF(WARNING, !s.ok()) << "inode " << ino << " was removed during " << what
                           << ": deleting the chunk files it made failed: " << s
                           << " (they go at the next start)";
}

bool Volume::BeginStage(uint64_t client_id, uint64_t ino) {
  absl::StatusOr<proto::InodeRecord> rec = meta_->inodes().GetInode(ino);
  if (rec.ok() || ToErrno(rec.status()) != ENOENT) return false;
  absl::StatusOr<std::optional<proto::SessionRecord>> session =
      meta_->sessions().GetSession(client_id);
  if (!session.ok() || !*session) return false;
  bool unused = false;
  for (const auto& r : (*session)->ino_ranges()) {
    if (ino >= r.first() && ino < r.end()) unused = ino >= std::max(r.first(), r.next());
  }
  if (!unused) return false;
  absl::MutexLock l(&stage_mu_);
  return staging_.insert(ino).second;
}

void Volume::EndStage(uint64_t ino) {
  absl::MutexLock l(&stage_mu_);
  staging_.erase(ino);
}

absl::Status Volume::StageWrite(uint64_t ino, uint64_t offset, const std::string& data, bool sync) {
  if (data.size() > options_.max_io_bytes) return ErrnoStatus(EINVAL, "write too large");
  RETURN_IF_ERROR(ValidateRange(offset, data.size()));
  RETURN_IF_ERROR(
      chunks_->Write(ino, offset, data.data(), data.size(), sync || options_.sync_data));
  staged_writes_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

void Volume::UnstageWrite(uint64_t ino, uint64_t offset, uint64_t length) {
  if (length == 0) return;
  // Under the file's data lock: no write of it is under way meanwhile.
  absl::WriterMutexLock l(&DataLock(ino));
  absl::StatusOr<proto::InodeRecord> rec = meta_->inodes().GetInode(ino);
  const bool gone = !rec.ok() && ToErrno(rec.status()) == ENOENT;
  absl::Status s = rec.ok() || gone ? absl::OkStatus() : rec.status();
  std::vector<uint64_t> removed;
  const uint64_t cs = chunks_->chunk_size();
  for (uint64_t c = offset / cs; s.ok() && c <= (offset + length - 1) / cs; ++c) {
    if (!gone) {
      // A chunk a committed write holds keeps its file (what was staged in
      // it and not committed lies in blocks it does not count).
      absl::StatusOr<bool> held = meta_->space().HasChunk(ino, c);
      if (!held.ok()) {
        s = held.status();
        break;
      }
      if (*held) continue;
    }
    s = chunks_->RemoveChunk(ino, c);
    removed.push_back(c);
  }
  if (s.ok() && !removed.empty()) s = chunks_->SyncRemovals({ino});
  LOG_IF(WARNING, !s.ok()) << "inode " << ino
                           << ": deleting the chunk files of a write staged and not applied "
                              "failed: "
                           << s << " (they go at the next start, if no write commits them)";
}

absl::StatusOr<proto::Attr> Volume::Write(const RequestContext& ctx, uint64_t ino, uint64_t offset,
                                          const std::string& data, bool sync, bool from_grant,
                                          uint64_t* grant_used, bool staged) {
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
      if (offset > now.size()) {
        absl::Status z = ZeroTail(ino, now.size(), offset);
        // Removed meanwhile: the zeros may have made a chunk file again.
        DropUncommitted(ino, now.size(), offset - now.size(), "zeroing the tail before a write");
        RETURN_IF_ERROR(z);
      }
    }
  }
  // Under the inode's data lock; the recall of other nodes' leases after it
  // (it may wait for a node that stopped answering).
  auto locked = [&]() -> absl::StatusOr<proto::Attr> {
    absl::ReaderMutexLock l(&DataLock(ino));
    ASSIGN_OR_RETURN(proto::InodeRecord rec, meta_->inodes().GetInode(ino));
    if (S_ISDIR(rec.mode())) return ErrnoStatus(EISDIR, "write");
    if (!S_ISREG(rec.mode())) return ErrnoStatus(EINVAL, "write to a non-file");
    // Staged bytes are the file's only if nothing was written to it since
    // it was made (another writer may have reached it by its number):
    // otherwise they are written again, after that write.
    if (staged && (rec.size() != 0 || rec.allocated_blocks() != 0)) staged = false;
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
    absl::Status st =
        staged ? absl::OkStatus() : chunks_->Write(ino, offset, data.data(), data.size(), sync);
    // Space promised in a grant is held on the disk (common/space_hold.h):
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
    if (!committed.ok()) DropUncommitted(ino, offset, data.size(), "a write");
    return committed;
  };
  ASSIGN_OR_RETURN(proto::Attr attr, locked());
  Recall(ctx, {LeaseKey::Attr(ino)});
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
  // The grant's promise went to the replica with it (MetaStoreOptions::
  // promise_reserve_bytes), and the grant returned once the replica had
  // both; its hold grew before it acknowledged.
  bool held = added_blocks == 0 || CoverPromises();
  if (held && added_blocks > 0 && options_.change_sink != nullptr) {
    held = options_.change_sink->ReplicaHolds(meta_->store().promise_seq());
  }
  if (!held) {
    // The disk (this server's or the replica's) cannot hold what was just
    // promised (another program took the space): the promise is taken back.
    uint64_t ignored = 0;
    ASSIGN_OR_RETURN(blocks,
                     meta_->space().Grant(ctx.client_id, 0, added_blocks, &ignored, ctx.tag));
    *added = 0;
    CoverPromises();  // both holds follow the smaller promise
  }
  // Short of what was asked: others may sit on grants they do not need.
  if (*added < SpaceLedger::Bytes(SpaceLedger::BlocksWithin(wanted_bytes)))
    RecallGrants(ctx.client_id);
  return SpaceLedger::Bytes(blocks);
}

Volume::DiskSpace Volume::Disk() {
  DiskSpace d;
  d.held_bytes = hold_->held();
  absl::StatusOr<uint64_t> free = DiskFree(options_.dir);
  d.room_bytes = (free.ok() ? *free : 0) + d.held_bytes;
  return d;
}

bool Volume::CoverPromises() {
  absl::Status st;
  uint64_t promised;
  {
    // One at a time, so that a promise read earlier is not made later.
    absl::MutexLock c(&cover_mu_);
    promised = SpaceLedger::Bytes(meta_->space().GrantedBlocks()) + options_.metadata_reserve_bytes;
    st = hold_->Cover(promised);
  }
  meta_->store().Promise();  // and on the replica's disk
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
  auto locked = [&]() -> absl::StatusOr<proto::Attr> {  // as in Write
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
    absl::StatusOr<proto::Attr> committed =
        meta_->space().CommitWrite(ino, offset, length, true, r, ctx.tag);
    if (!committed.ok()) DropUncommitted(ino, offset, length, "a fallocate");
    return committed;
  };
  ASSIGN_OR_RETURN(proto::Attr attr, locked());
  Recall(ctx, {LeaseKey::Attr(ino)});
  Publish(ctx, ino, 0, "");
  return attr;
}

}  // namespace grantfs
