// Volume's sessions: opening, renewing, closing and reclaiming them, what a
// session that ends releases, and the background round (server/volume.h;
// the rest of the class is in volume.cc and volume_data.cc).
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/volume.h"

namespace grantfs {

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
  leases_.Forget(client_id);
  sessions_.Forgotten(client_id);
  absl::MutexLock l(&unrecorded_mu_);
  unrecorded_.erase(client_id);  // nothing to record any more
}

absl::StatusOr<uint64_t> Volume::OpenSession(const std::string& client_name,
                                             const std::string& peer) {
  const uint64_t client_id = sessions_.Open(client_name, peer);
  if (absl::Status s = RecordSession(client_id, client_name, nullptr, peer); !s.ok()) {
    ForgetClient(client_id, sessions_.Close(client_id));
    return s;
  }
  return client_id;
}

absl::Status Volume::Touch(uint64_t client_id, RequestTag* tag, const std::string& peer) {
  switch (sessions_.Touch(client_id, peer)) {
    case SessionTable::TouchResult::kRenewed:
      return absl::OkStatus();
    case SessionTable::TouchResult::kEnding:
      return absl::ResourceExhaustedError(
          absl::StrCat("session ", client_id, " is ending (lease expired); retry"));
    case SessionTable::TouchResult::kCreated:
      // No lease until the record is durable (LeaseTableOptions::recorded:
      // the session table made it unrecorded when it re-created it).
      RecordSession(client_id, "(reconnected)", tag, peer).IgnoreError();  // retried by maintenance
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

bool Volume::Recorded(uint64_t client_id) { return sessions_.Recorded(client_id); }

absl::Status Volume::RecordSession(uint64_t client_id, const std::string& client_name,
                                   RequestTag* tag, const std::string& peer) {
  proto::SessionRecord rec;
  rec.set_client_name(client_name);
  rec.set_peer(peer);
  absl::Status s = meta_->sessions().PutSession(client_id, rec, tag);
  if (s.ok()) sessions_.MarkRecorded(client_id);
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
    unrecorded = unrecorded_;  // each leaves the set once recorded
  }
  for (const proto::SessionInfo& info : sessions_.List()) {
    if (unrecorded.count(info.client_id())) {
      RecordSession(info.client_id(), info.client_name(), nullptr, info.peer())
          .IgnoreError();  // again next round
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
  // A removal applied from a mount's log may not be durable yet (its batch
  // waits once for all): the data goes only once the removal stays.
  if (!garbage.empty()) RETURN_IF_ERROR(meta_->store().WaitDurable(meta_->store().Applied()));
  std::vector<uint64_t> freed;    // whose chunk files are all removed
  std::vector<uint64_t> removed;  // of those, the ones that had any
  for (uint64_t ino : garbage) {
    absl::StatusOr<uint64_t> span = meta_->orphans().GarbageChunkSpan(ino);
    absl::Status s = span.status();
    for (uint64_t i = 0; s.ok() && i < *span; ++i) s = chunks_->RemoveChunk(ino, i);
    if (!s.ok()) {
      // The others are freed all the same; this one is tried again.
      LOG_EVERY_N(WARNING, 100) << "freeing the data of deleted inode " << ino << ": " << s
                                << " (tried again at the next round)";
      continue;
    }
    freed.push_back(ino);
    if (*span > 0) removed.push_back(ino);
  }
  // The files' deletions are durable before the records that name them go:
  // a crash in between deletes them again; the other order could leave
  // files no record names (fsck: orphan_chunk_file, space counted nowhere).
  RETURN_IF_ERROR(chunks_->SyncRemovals(removed));
  for (uint64_t ino : freed) RETURN_IF_ERROR(meta_->orphans().FinishGarbage(ino));
  return static_cast<int>(freed.size());
}

void Volume::BackgroundLoop() {
  absl::MutexLock l(&bg_mu_);
  while (!stopping_) {
    auto wake = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(bg_mu_) { return stopping_ || garbage_waiting_; };
    bg_mu_.AwaitWithTimeout(absl::Condition(&wake), absl::Seconds(1));
    if (stopping_) break;
    if (garbage_waiting_) {
      // One round for the files reaped within kGarbageBatch: each round
      // scans the orphan and garbage records, and after many unlinks those
      // scans walk their tombstones (a round per close of an unlinked file
      // took a sixth of the server's CPU under dbench).
      auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(bg_mu_) { return stopping_; };
      bg_mu_.AwaitWithTimeout(absl::Condition(&stop), kGarbageBatch);
      if (stopping_) break;
    }
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
