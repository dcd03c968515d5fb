#include "client/meta_client.h"

#include <fcntl.h>

#include "common/status_macros.h"
#include "common/transport.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

template <typename Req>
void Stamp(const Creds& c, Req* req) {
  FillCreds(c, req->mutable_header()->mutable_creds());
}

}  // namespace

// --- the session ------------------------------------------------------------

absl::StatusOr<proto::OpenSessionReply> MetaClient::OpenSession(
    const std::string& client_name, const std::string& root,
    std::optional<absl::Duration> retry_for) {
  proto::OpenSessionRequest req;
  req.set_client_name(client_name);
  req.set_root(root);
  proto::OpenSessionReply reply;
  RETURN_IF_ERROR(
      rpc_->Call("OpenSession", &proto::GrantFs::Stub::OpenSession, &req, &reply, retry_for));
  rpc_->set_client_id(reply.client_id());
  return reply;
}

absl::StatusOr<proto::HeartbeatReply> MetaClient::Heartbeat(uint64_t lost_acked, bool* failed_over,
                                                            const proto::MountReport& report) {
  *failed_over = false;
  proto::HeartbeatRequest req;
  *req.mutable_report() = report;
  proto::HeartbeatReply reply;
  req.mutable_header()->set_client_id(rpc_->client_id());
  req.set_lost_acked(lost_acked);
  grpc::ClientContext ctx;
  rpc_->PrepareContext(&ctx, absl::Seconds(5));
  const size_t index = rpc_->current();
  grpc::Status s = rpc_->stub(index)->Heartbeat(&ctx, req, &reply);
  if (s.ok()) return reply;
  // The next heartbeat (and every call) goes to the next server, soon: a
  // restarted or new primary is found out about as fast as calls find it.
  if (rpc_->ShouldFailover(s)) {
    rpc_->Failover(index, s);
    *failed_over = true;
  }
  return absl::UnavailableError(rpc_->address(index) + ": " + s.error_message());
}

absl::StatusOr<proto::ReclaimReply> MetaClient::Reclaim(
    const std::vector<std::pair<uint64_t, uint64_t>>& opens) {
  proto::ReclaimRequest req;
  for (const auto& [ino, handle] : opens) {
    proto::ReclaimRequest::Open* o = req.add_opens();
    o->set_ino(ino);
    o->set_handle(handle);
  }
  proto::ReclaimReply reply;
  RETURN_IF_ERROR(rpc_->Call("Reclaim", &proto::GrantFs::Stub::Reclaim, &req, &reply));
  return reply;
}

void MetaClient::CloseSession() {
  proto::CloseSessionRequest req;
  req.mutable_header()->set_client_id(rpc_->client_id());
  for (size_t tries = 0; tries < rpc_->server_count(); ++tries) {
    proto::CloseSessionReply reply;
    grpc::ClientContext ctx;
    rpc_->PrepareContext(&ctx, absl::Seconds(5));
    const size_t index = rpc_->current();
    grpc::Status s = rpc_->stub(index)->CloseSession(&ctx, req, &reply);
    if (s.ok()) break;
    LOG(WARNING) << "closing the session on " << rpc_->address(index) << ": " << s.error_message();
    if (!rpc_->ShouldFailover(s)) break;
    rpc_->Failover(index, s);
  }
}

std::unique_ptr<grpc::ClientReader<proto::InvalidationBatch>> MetaClient::Subscribe(
    grpc::ClientContext* ctx, size_t* index, bool leases) {
  rpc_->options().transport.AddTo(ctx);
  proto::SubscribeRequest req;
  req.mutable_header()->set_client_id(rpc_->client_id());
  req.set_leases(leases);
  *index = rpc_->current();
  return rpc_->stub(*index)->Subscribe(ctx, req);
}

absl::Status MetaClient::AckRecall(uint64_t seq, absl::Duration timeout) {
  grpc::ClientContext ctx;
  rpc_->PrepareContext(&ctx, timeout);
  proto::AckRecallRequest req;
  req.mutable_header()->set_client_id(rpc_->client_id());
  req.set_recall(seq);
  proto::ErrReply reply;
  return rpc_->CallOnce("AckRecall", &proto::GrantFs::Stub::AckRecall, &ctx, &req, &reply);
}

absl::StatusOr<uint64_t> MetaClient::Grant(uint64_t wanted, uint64_t back) {
  proto::GrantRequest req;
  req.set_wanted_bytes(wanted);
  req.set_return_bytes(back);
  proto::GrantReply reply;
  absl::Status s = rpc_->Call("Grant", &proto::GrantFs::Stub::Grant, &req, &reply);
  statfs_.Changed();  // what is available to others moved
  RETURN_IF_ERROR(s);
  return reply.granted_bytes();
}

absl::StatusOr<proto::InodeRangeReply> MetaClient::InodeRange(uint32_t count, uint64_t keep_from) {
  proto::InodeRangeRequest req;
  req.set_count(count);
  req.set_keep_from(keep_from);
  proto::InodeRangeReply reply;
  RETURN_IF_ERROR(rpc_->Call("InodeRange", &proto::GrantFs::Stub::InodeRange, &req, &reply));
  return reply;
}

absl::StatusOr<proto::ApplyLogReply> MetaClient::ApplyLog(proto::ApplyLogRequest* req) {
  proto::ApplyLogReply reply;
  const absl::Time sent = statfs_.Now();
  absl::Status s = rpc_->Call("ApplyLog", &proto::GrantFs::Stub::ApplyLog, req, &reply);
  NoteCounts(sent, s, reply.has_space() ? &reply.space() : nullptr);
  RETURN_IF_ERROR(s);
  return reply;
}

// --- the namespace ----------------------------------------------------------

namespace {
// At the end of a call that may change statfs's counts, and whose reply
// does not carry them: the mount's kept counts are stale from then on
// (client/statfs_cache.h). Also when it failed: it may have been applied.
class CountsChange {
 public:
  explicit CountsChange(StatFsCache* cache) : cache_(cache) {}
  CountsChange(const CountsChange&) = delete;
  CountsChange& operator=(const CountsChange&) = delete;
  ~CountsChange() {
    if (cache_ != nullptr) cache_->Changed();
  }

 private:
  StatFsCache* const cache_;
};

void TakeLeaseBits(const proto::AttrReply& reply, LeaseBits* leases) {
  if (leases == nullptr) return;
  leases->attr = reply.err() == 0 && reply.leased();
  leases->dir = reply.dir_leased();
  leases->attr_hot = reply.err() == 0 && reply.hot();
  leases->dir_hot = reply.dir_hot();
}
}  // namespace

absl::StatusOr<proto::Attr> MetaClient::Lookup(const Creds& c, uint64_t parent,
                                               const std::string& name, LeaseBits* leases) {
  RETURN_IF_ERROR(BarrierFor(parent));
  proto::LookupRequest req;
  Stamp(c, &req);
  req.set_parent(parent);
  req.set_name(name);
  proto::AttrReply reply;
  const uint64_t mark = Mark();
  absl::Status s = rpc_->Call("Lookup", &proto::GrantFs::Stub::Lookup, &req, &reply);
  if (s.ok() && TouchedSince(mark, reply.attr().ino())) {
    // The name's inode has changes in the log: asked again after it.
    RETURN_IF_ERROR(Barrier());
    reply.Clear();
    s = rpc_->Call("Lookup", &proto::GrantFs::Stub::Lookup, &req, &reply);
  }
  TakeLeaseBits(reply, leases);
  RETURN_IF_ERROR(s);
  return std::move(*reply.mutable_attr());
}

absl::StatusOr<proto::Attr> MetaClient::GetAttr(const Creds& c, uint64_t ino, LeaseBits* leases) {
  RETURN_IF_ERROR(BarrierFor(ino));
  proto::GetAttrRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  proto::AttrReply reply;
  RETURN_IF_ERROR(rpc_->Call("GetAttr", &proto::GrantFs::Stub::GetAttr, &req, &reply));
  TakeLeaseBits(reply, leases);
  return std::move(*reply.mutable_attr());
}

absl::StatusOr<proto::Attr> MetaClient::SetAttr(const Creds& c, proto::SetAttrRequest req,
                                                LeaseBits* leases) {
  CountsChange change(&statfs_);
  RETURN_IF_ERROR(Barrier());
  Stamp(c, &req);
  proto::AttrReply reply;
  RETURN_IF_ERROR(rpc_->Call("SetAttr", &proto::GrantFs::Stub::SetAttr, &req, &reply));
  TakeLeaseBits(reply, leases);
  return std::move(*reply.mutable_attr());
}

absl::StatusOr<proto::AttrReply> MetaClient::MkNod(const Creds& c, uint64_t parent,
                                                   const std::string& name, uint32_t mode,
                                                   uint64_t rdev, uint32_t umask, bool exclusive,
                                                   bool want_grant) {
  CountsChange change(&statfs_);
  RETURN_IF_ERROR(Barrier());
  proto::MkNodRequest req;
  req.set_want_grant(want_grant);
  Stamp(c, &req);
  req.set_parent(parent);
  req.set_name(name);
  req.set_mode(mode);
  req.set_rdev(rdev);
  req.set_umask(umask);
  req.set_exclusive(exclusive);
  proto::AttrReply reply;
  RETURN_IF_ERROR(rpc_->Call("MkNod", &proto::GrantFs::Stub::MkNod, &req, &reply));
  return reply;
}

absl::StatusOr<proto::Attr> MetaClient::Symlink(const Creds& c, uint64_t parent,
                                                const std::string& name, const std::string& target,
                                                LeaseBits* leases) {
  CountsChange change(&statfs_);
  RETURN_IF_ERROR(Barrier());
  proto::SymlinkRequest req;
  Stamp(c, &req);
  req.set_parent(parent);
  req.set_name(name);
  req.set_target(target);
  proto::AttrReply reply;
  RETURN_IF_ERROR(rpc_->Call("Symlink", &proto::GrantFs::Stub::Symlink, &req, &reply));
  TakeLeaseBits(reply, leases);
  return std::move(*reply.mutable_attr());
}

absl::StatusOr<proto::Attr> MetaClient::Link(const Creds& c, uint64_t ino, uint64_t new_parent,
                                             const std::string& new_name, LeaseBits* leases) {
  CountsChange change(&statfs_);
  RETURN_IF_ERROR(Barrier());
  proto::LinkRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_new_parent(new_parent);
  req.set_new_name(new_name);
  proto::AttrReply reply;
  RETURN_IF_ERROR(rpc_->Call("Link", &proto::GrantFs::Stub::Link, &req, &reply));
  TakeLeaseBits(reply, leases);
  return std::move(*reply.mutable_attr());
}

absl::StatusOr<proto::RemoveReply> MetaClient::Remove(const Creds& c, uint64_t parent,
                                                      const std::string& name, bool is_dir,
                                                      uint64_t expected_ino) {
  CountsChange change(&statfs_);
  RETURN_IF_ERROR(Barrier());
  proto::RemoveRequest req;
  Stamp(c, &req);
  req.set_parent(parent);
  req.set_name(name);
  req.set_is_dir(is_dir);
  req.set_expected_ino(expected_ino);
  proto::RemoveReply reply;
  RETURN_IF_ERROR(rpc_->Call("Remove", &proto::GrantFs::Stub::Remove, &req, &reply));
  return reply;
}

absl::StatusOr<proto::RenameReply> MetaClient::Rename(const Creds& c, uint64_t parent,
                                                      const std::string& name, uint64_t new_parent,
                                                      const std::string& new_name, uint32_t flags,
                                                      uint64_t expected_ino,
                                                      uint64_t expected_new_ino) {
  CountsChange change(&statfs_);
  RETURN_IF_ERROR(Barrier());
  proto::RenameRequest req;
  Stamp(c, &req);
  req.set_parent(parent);
  req.set_name(name);
  req.set_new_parent(new_parent);
  req.set_new_name(new_name);
  req.set_flags(flags);
  req.set_expected_ino(expected_ino);
  req.set_expected_new_ino(expected_new_ino);
  proto::RenameReply reply;
  RETURN_IF_ERROR(rpc_->Call("Rename", &proto::GrantFs::Stub::Rename, &req, &reply));
  return reply;
}

absl::StatusOr<std::string> MetaClient::ReadLink(const Creds& c, uint64_t ino) {
  RETURN_IF_ERROR(BarrierFor(ino));
  proto::ReadLinkRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  proto::ReadLinkReply reply;
  RETURN_IF_ERROR(rpc_->Call("ReadLink", &proto::GrantFs::Stub::ReadLink, &req, &reply));
  return std::move(*reply.mutable_target());
}

absl::StatusOr<proto::ReadDirReply> MetaClient::ReadDir(const Creds& c, uint64_t ino,
                                                        uint64_t cookie, uint32_t max_entries,
                                                        bool want_grant,
                                                        std::optional<absl::Duration> retry_for) {
  RETURN_IF_ERROR(BarrierFor(ino));
  proto::ReadDirRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_cookie(cookie);
  req.set_max_entries(max_entries);
  req.set_want_grant(want_grant);
  proto::ReadDirReply reply;
  const uint64_t mark = Mark();
  RETURN_IF_ERROR(rpc_->Call("ReadDir", &proto::GrantFs::Stub::ReadDir, &req, &reply, retry_for));
  for (const proto::DirEntry& e : reply.entries()) {
    if (TouchedSince(mark, e.attr().ino())) {
      // An entry's inode has changes in the log: the page again after it.
      RETURN_IF_ERROR(Barrier());
      reply.Clear();
      RETURN_IF_ERROR(
          rpc_->Call("ReadDir", &proto::GrantFs::Stub::ReadDir, &req, &reply, retry_for));
      break;
    }
  }
  return reply;
}

// --- files ------------------------------------------------------------------

absl::StatusOr<proto::Attr> MetaClient::Open(const Creds& c, uint64_t ino, uint32_t flags,
                                             uint64_t handle, bool created) {
  RETURN_IF_ERROR(BarrierFor(ino));
  proto::OpenRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_flags(flags);
  req.set_created(created);
  req.set_handle(handle);
  proto::OpenReply reply;
  CountsChange change((flags & O_TRUNC) ? &statfs_ : nullptr);  // frees space
  RETURN_IF_ERROR(rpc_->Call("Open", &proto::GrantFs::Stub::Open, &req, &reply));
  return std::move(*reply.mutable_attr());
}

absl::Status MetaClient::Release(uint64_t ino, uint64_t handle) {
  RETURN_IF_ERROR(Barrier());
  proto::ReleaseRequest req;
  req.set_ino(ino);
  req.set_handle(handle);
  proto::ReleaseReply reply;
  absl::Status s = rpc_->Call("Release", &proto::GrantFs::Stub::Release, &req, &reply);
  // The last close of a removed file: one inode less (and its space, soon).
  if (!s.ok() || reply.reaped()) statfs_.Changed();
  return s;
}

absl::StatusOr<std::string> MetaClient::Read(const Creds& c, uint64_t ino, uint64_t offset,
                                             size_t size) {
  RETURN_IF_ERROR(BarrierFor(ino));
  proto::ReadRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_offset(offset);
  req.set_size(size);
  proto::ReadReply reply;
  RETURN_IF_ERROR(rpc_->Call("Read", &proto::GrantFs::Stub::Read, &req, &reply));
  return std::move(*reply.mutable_data());
}

absl::StatusOr<std::string> MetaClient::ReadOnce(grpc::ClientContext* ctx, uint64_t ino,
                                                 uint64_t offset, size_t size) {
  RETURN_IF_ERROR(BarrierFor(ino));
  // No caller's credentials: the server checks none on Read (the kernel
  // checked access at open).
  proto::ReadRequest req;
  req.set_ino(ino);
  req.set_offset(offset);
  req.set_size(size);
  proto::ReadReply reply;
  RETURN_IF_ERROR(rpc_->CallOnce("Read", &proto::GrantFs::Stub::Read, ctx, &req, &reply));
  return std::move(*reply.mutable_data());
}

absl::Status MetaClient::Write(const Creds& c, uint64_t ino, uint64_t offset, const char* data,
                               size_t size) {
  RETURN_IF_ERROR(BarrierFor(ino));
  proto::WriteRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_offset(offset);
  req.set_data(std::string(data, size));
  proto::WriteReply reply;
  const absl::Time sent = statfs_.Now();
  absl::Status s = rpc_->Call("Write", &proto::GrantFs::Stub::Write, &req, &reply);
  NoteCounts(sent, s, reply.has_space() ? &reply.space() : nullptr);
  RETURN_IF_ERROR(s);
  NoteWritten(ino, &reply);
  return absl::OkStatus();
}

absl::StatusOr<proto::WriteReply> MetaClient::WriteFromGrant(
    uint64_t ino, uint64_t offset, std::shared_ptr<const std::string> data, int64_t time_ns,
    bool keep_times, bool granted) {
  RETURN_IF_ERROR(BarrierFor(ino));
  proto::WriteRequest req;
  req.set_ino(ino);
  req.set_offset(offset);
  req.set_from_grant(true);
  req.set_time_ns(time_ns);
  req.set_keep_times(keep_times);
  req.set_granted(granted);
  proto::WriteReply reply;
  const absl::Time sent = statfs_.Now();
  absl::Status s = rpc_->Write(&req, std::move(data), &reply);
  NoteCounts(sent, s, reply.has_space() ? &reply.space() : nullptr);
  RETURN_IF_ERROR(s);
  NoteWritten(ino, &reply);
  return reply;
}

void MetaClient::NoteCounts(absl::Time sent, const absl::Status& status,
                            const proto::StatFsReply* counts) {
  if (status.ok() && counts != nullptr) {
    statfs_.Note(sent, *counts);
  } else {
    statfs_.Changed();  // a failure may have been applied; an older server says nothing
  }
}

void MetaClient::NoteWritten(uint64_t ino, const proto::WriteReply* reply) {
  absl::MutexLock l(&unsynced_mu_);
  if (reply != nullptr) synced_always_ = reply->synced_always();
  if (reply != nullptr && reply->synced_always()) return;
  if (unsynced_.size() >= kMaxUnsynced) {
    all_unsynced_ = true;
    unsynced_.clear();
  }
  if (!all_unsynced_) unsynced_[ino] = ++unsynced_seq_;
}

absl::Status MetaClient::Fsync(const Creds& c, uint64_t ino) {
  uint64_t seq = 0;  // of the last unsynced write of `ino`, if any
  {
    absl::MutexLock l(&unsynced_mu_);
    auto it = unsynced_.find(ino);
    if (it != unsynced_.end()) seq = it->second;
    if (synced_always_ && !all_unsynced_ && seq == 0) return absl::OkStatus();
  }
  // The file must be on the server; other pending changes need not be.
  RETURN_IF_ERROR(BarrierFor(ino));
  proto::FsyncRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  proto::ErrReply reply;
  RETURN_IF_ERROR(rpc_->Call("Fsync", &proto::GrantFs::Stub::Fsync, &req, &reply));
  absl::MutexLock l(&unsynced_mu_);
  auto it = unsynced_.find(ino);
  if (it != unsynced_.end() && it->second == seq) unsynced_.erase(it);
  return absl::OkStatus();
}

absl::Status MetaClient::Fallocate(const Creds& c, uint64_t ino, uint32_t mode, uint64_t offset,
                                   uint64_t length) {
  RETURN_IF_ERROR(Barrier());
  proto::FallocateRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_mode(mode);
  req.set_offset(offset);
  req.set_length(length);
  proto::AttrReply reply;
  absl::Status s = rpc_->Call("Fallocate", &proto::GrantFs::Stub::Fallocate, &req, &reply);
  // Even a failed one may have allocated some.
  NoteWritten(ino, nullptr);
  statfs_.Changed();
  return s;
}

absl::StatusOr<proto::StatFsReply> MetaClient::StatFs(const Creds& c) {
  // No barrier: statfs's counts are a moment's anyway; the log's changes
  // show in them once sent (within its age bound of 1 s while the server
  // answers).
  if (std::optional<proto::StatFsReply> kept = statfs_.Get()) return *std::move(kept);
  proto::StatFsRequest req;
  Stamp(c, &req);
  proto::StatFsReply reply;
  const absl::Time sent = statfs_.Now();
  RETURN_IF_ERROR(rpc_->Call("StatFs", &proto::GrantFs::Stub::StatFs, &req, &reply));
  statfs_.Note(sent, reply);
  return reply;
}

// --- xattrs -----------------------------------------------------------------

absl::Status MetaClient::SetXattr(const Creds& c, uint64_t ino, const std::string& name,
                                  const std::string& value, uint32_t flags) {
  CountsChange change(&statfs_);
  RETURN_IF_ERROR(Barrier());
  proto::SetXattrRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_name(name);
  req.set_value(value);
  req.set_flags(flags);
  proto::ErrReply reply;
  return rpc_->Call("SetXattr", &proto::GrantFs::Stub::SetXattr, &req, &reply);
}

absl::StatusOr<std::string> MetaClient::GetXattr(const Creds& c, uint64_t ino,
                                                 const std::string& name) {
  RETURN_IF_ERROR(BarrierFor(ino));
  proto::GetXattrRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_name(name);
  proto::GetXattrReply reply;
  RETURN_IF_ERROR(rpc_->Call("GetXattr", &proto::GrantFs::Stub::GetXattr, &req, &reply));
  return std::move(*reply.mutable_value());
}

absl::StatusOr<std::vector<std::string>> MetaClient::ListXattr(const Creds& c, uint64_t ino) {
  RETURN_IF_ERROR(BarrierFor(ino));
  proto::ListXattrRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  proto::ListXattrReply reply;
  RETURN_IF_ERROR(rpc_->Call("ListXattr", &proto::GrantFs::Stub::ListXattr, &req, &reply));
  return std::vector<std::string>(reply.names().begin(), reply.names().end());
}

absl::Status MetaClient::RemoveXattr(const Creds& c, uint64_t ino, const std::string& name) {
  CountsChange change(&statfs_);
  RETURN_IF_ERROR(Barrier());
  proto::RemoveXattrRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_name(name);
  proto::ErrReply reply;
  return rpc_->Call("RemoveXattr", &proto::GrantFs::Stub::RemoveXattr, &req, &reply);
}

// --- locks ------------------------------------------------------------------

absl::StatusOr<proto::LockRange> MetaClient::GetLock(const Creds& c, uint64_t ino, uint64_t owner,
                                                     const proto::LockRange& range) {
  RETURN_IF_ERROR(Barrier());
  proto::LockRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_owner(owner);
  *req.mutable_range() = range;
  proto::GetLockReply reply;
  RETURN_IF_ERROR(rpc_->Call("GetLock", &proto::GrantFs::Stub::GetLock, &req, &reply));
  return std::move(*reply.mutable_conflict());
}

absl::Status MetaClient::SetLock(const Creds& c, uint64_t ino, uint64_t owner, bool flock,
                                 const proto::LockRange& range) {
  RETURN_IF_ERROR(Barrier());
  proto::LockRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_owner(owner);
  req.set_flock(flock);
  *req.mutable_range() = range;
  proto::ErrReply reply;
  return rpc_->Call("SetLock", &proto::GrantFs::Stub::SetLock, &req, &reply);
}

}  // namespace grantfs
