#include "client/filesystem.h"

#include <fcntl.h>

#include <cerrno>

#include "common/errno_status.h"
#include "common/secret.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace grantfs {

FileSystem::FileSystem(const FileSystemOptions& options, std::unique_ptr<RpcClient> rpc)
    : options_(options), rpc_(std::move(rpc)) {
  // A failover kicks the heartbeat. The hook takes mu_: no RPC may be made,
  // and no failover done, while holding it.
  rpc_->set_on_failover([this] {
    absl::MutexLock l(&mu_);
    kick_ = true;
  });
  if (options_.readahead.window_bytes > 0) {
    ReadAheadOptions ro = options_.readahead;
    ro.extent_bytes = options_.max_io_bytes;
    ra_ = std::make_unique<ReadAhead>(
        ro,
        [this](uint64_t ino, uint64_t offset, size_t size) {
          return PrefetchRpc(ino, offset, size);
        },
        // cache_ is set below, before any read can come.
        [this](uint64_t ino) { return cache_ && cache_->extent_count(ino) > 0; });
  }
  if (!options_.fastwrite) return;
  pool_ = std::make_unique<GrantPool>(
      options_.grants, [this](uint64_t wanted, uint64_t back) -> absl::StatusOr<uint64_t> {
        proto::GrantRequest req;
        req.set_wanted_bytes(wanted);
        req.set_return_bytes(back);
        proto::GrantReply reply;
        RETURN_IF_ERROR(rpc_->Call("Grant", &proto::GrantFs::Stub::Grant, &req, &reply));
        return reply.granted_bytes();
      });
  WriteCacheOptions cache_options = options_.cache;
  if (!cache_options.credit) cache_options.credit = [this] { return rpc_->credit_bytes(); };
  cache_ = std::make_unique<WriteCache>(
      cache_options, pool_.get(),
      [this](uint64_t ino, uint64_t offset,
             std::shared_ptr<const std::string> data) -> absl::StatusOr<WriteCache::FlushResult> {
        proto::WriteRequest req;
        req.set_ino(ino);
        req.set_offset(offset);
        req.set_from_grant(true);
        proto::WriteReply reply;
        RETURN_IF_ERROR(rpc_->Write(&req, std::move(data), &reply));
        WriteCache::FlushResult r;
        r.grant_used = reply.grant_used_bytes();
        r.size = reply.attr().size();
        r.mtime_ns = reply.attr().mtime_ns();
        r.ctime_ns = reply.attr().ctime_ns();
        return r;
      });
}

FileSystem::~FileSystem() { Stop(); }

template <typename Req>
void FileSystem::Stamp(const Creds& c, Req* req) {
  proto::Creds* pc = req->mutable_header()->mutable_creds();
  pc->set_uid(c.uid);
  pc->set_gid(c.gid);
  pc->set_pid(c.pid);
  for (uint32_t g : c.groups) pc->add_groups(g);
}

absl::Status FileSystem::Start(Invalidator* invalidator) {
  proto::OpenSessionRequest req;
  req.set_client_name(options_.client_name);
  proto::OpenSessionReply reply;
  const absl::Time sent = options_.grants.clock->Now();
  RETURN_IF_ERROR(rpc_->Call("OpenSession", &proto::GrantFs::Stub::OpenSession, &req, &reply));
  rpc_->set_client_id(reply.client_id());
  incarnation_ = reply.incarnation();
  if (reply.max_file_size() > 0) max_file_size_.store(reply.max_file_size());
  {
    absl::MutexLock l(&mu_);
    lease_ms_ = std::max<uint64_t>(reply.lease_ms(), 300);
    started_ = true;
  }
  LOG(INFO) << "session " << reply.client_id() << " with " << rpc_->address(rpc_->current())
            << ", lease " << reply.lease_ms() << " ms";
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  if (ra_) ra_->Start();
  if (cache_) {
    pool_->Renewed(LeaseEnd(sent));
    pool_->Start();
    cache_->Start();
  }
  if (invalidator != nullptr) {
    subscriber_ = std::thread([this, invalidator] { SubscribeLoop(invalidator); });
  }
  return absl::OkStatus();
}

void FileSystem::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (!started_ || stopping_) return;
    stopping_ = true;
    if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
    // Read-ahead is given up: its RPCs end now (PrefetchRpc starts no new
    // one once stopping_ is set), so joining its pool does not wait for a
    // deadline.
    for (grpc::ClientContext* ctx : prefetch_ctx_) ctx->TryCancel();
  }
  if (ra_) {
    ra_->Stop();
    const ReadAhead::Stats st = ra_->stats();
    LOG(INFO) << "read-ahead: " << st.fetches << " fetches (" << st.fetch_errors << " failed, "
              << st.discarded << " discarded), " << st.served_bytes << " bytes served from them, "
              << st.direct_reads << " direct reads, " << st.timeouts << " waits timed out";
  }
  if (cache_) {
    // Unmount: everything cached goes to the server first; the session's
    // unused grant goes back with CloseSession below.
    absl::Status s = cache_->FlushAll();
    if (!s.ok()) {
      LOG(ERROR) << "unmount: " << cache_->dirty_bytes()
                 << " cached bytes could not be written and are dropped: " << s;
      for (const std::string& line : cache_->DescribeDirty()) LOG(ERROR) << "unmount: " << line;
    }
    cache_->Stop();
    pool_->Stop();
  }
  if (heartbeat_.joinable()) heartbeat_.join();
  if (subscriber_.joinable()) subscriber_.join();
  // Each server gets one try: the primary may have moved since the last call.
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

void FileSystem::HeartbeatLoop() {
  int failures = 0;         // heartbeats failed in a row
  uint64_t lost_acked = 0;  // HeartbeatReply.session_lost acted on
  absl::MutexLock l(&mu_);
  while (!stopping_) {
    auto stop_or_kick = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || kick_; };
    mu_.AwaitWithTimeout(absl::Condition(&stop_or_kick), absl::Milliseconds(lease_ms_ / 3));
    if (kick_) {
      // At most one heartbeat per 100 ms while servers keep failing.
      kick_ = false;
      auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&stop), absl::Milliseconds(100));
    }
    if (stopping_) break;
    mu_.Unlock();
    proto::HeartbeatRequest req;
    proto::HeartbeatReply reply;
    req.mutable_header()->set_client_id(rpc_->client_id());
    req.set_lost_acked(lost_acked);
    grpc::ClientContext ctx;
    rpc_->PrepareContext(&ctx, absl::Seconds(5));
    const size_t index = rpc_->current();
    const absl::Time sent = options_.grants.clock->Now();
    grpc::Status s = rpc_->stub(index)->Heartbeat(&ctx, req, &reply);
    if (s.ok()) {
      failures = 0;
      if (pool_) {
        // The server may have released the grant while this mount was cut
        // off; else the grant is good for another lease from `sent`.
        if (reply.session_lost() != 0 && reply.session_lost() != lost_acked) {
          pool_->Lost();
          lost_acked = reply.session_lost();
        }
        pool_->Renewed(LeaseEnd(sent));
      }
      // A failed reclaim is tried again at the next heartbeat.
      NoteIncarnation(reply.incarnation());
      mu_.Lock();
      continue;
    }
    if (++failures == 1 || failures % 50 == 0) {
      LOG(WARNING) << "heartbeat to " << rpc_->address(index) << ": " << s.error_message() << " ("
                   << failures << " in a row)";
    }
    // The next heartbeat (and every call) goes to the next server, soon: a
    // restarted or new primary is found out about as fast as calls find it.
    const bool unreachable = rpc_->ShouldFailover(s);
    if (unreachable) rpc_->Failover(index, s);
    mu_.Lock();
    if (unreachable) kick_ = true;
  }
}

absl::Time FileSystem::LeaseEnd(absl::Time sent) {
  uint64_t lease_ms;
  {
    absl::MutexLock l(&mu_);
    lease_ms = lease_ms_;
  }
  // The server's lease started when the request arrived, after `sent`; a
  // tenth off covers the rate difference of the two monotonic clocks.
  return sent + absl::Milliseconds(lease_ms * 9 / 10);
}

bool FileSystem::NoteIncarnation(uint64_t incarnation) {
  if (incarnation == incarnation_ || incarnation == 0) return true;
  // A restarted server, or one that took over: it knows of this mount's
  // opens only those of unlinked files. No Open or Release runs meanwhile.
  absl::WriterMutexLock rl(&reclaim_mu_);
  proto::ReclaimRequest req;
  {
    absl::MutexLock l(&handles_mu_);
    for (const auto& [handle, ino] : open_handles_) {
      proto::ReclaimRequest::Open* o = req.add_opens();
      o->set_ino(ino);
      o->set_handle(handle);
    }
  }
  proto::ReclaimReply reply;
  absl::Status s = rpc_->Call("Reclaim", &proto::GrantFs::Stub::Reclaim, &req, &reply);
  if (!s.ok()) {
    LOG(WARNING) << "reclaiming " << req.opens_size() << " open files: " << s;
    return false;
  }
  LOG(INFO) << "server " << rpc_->address(rpc_->current()) << " is new to this mount: reclaimed "
            << req.opens_size() << " open files";
  for (uint64_t ino : reply.lost()) {
    LOG(ERROR) << "open file " << ino << " was freed before this mount could reclaim it";
  }
  // The server that took the reclaim (a failover may have come in between).
  incarnation_ = reply.incarnation() != 0 ? reply.incarnation() : incarnation;
  return true;
}

void FileSystem::SubscribeLoop(Invalidator* invalidator) {
  // With several servers the stream follows a failover: the new primary is
  // found within a few short waits, while invalidations may be missed.
  const bool several = rpc_->server_count() > 1;
  const absl::Duration first_backoff = absl::Milliseconds(several ? 50 : 100);
  const absl::Duration max_backoff = several ? absl::Milliseconds(500) : absl::Seconds(2);
  absl::Duration backoff = first_backoff;
  for (;;) {
    grpc::ClientContext ctx;
    AddSecret(&ctx, rpc_->options().secret);
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
      stream_ctx_ = &ctx;
    }
    proto::SubscribeRequest req;
    req.mutable_header()->set_client_id(rpc_->client_id());
    const size_t index = rpc_->current();
    const absl::Time opened = absl::Now();
    std::unique_ptr<grpc::ClientReader<proto::InvalidationBatch>> reader =
        rpc_->stub(index)->Subscribe(&ctx, req);
    proto::InvalidationBatch batch;
    while (reader->Read(&batch)) {
      backoff = first_backoff;
      for (const proto::Invalidation& inv : batch.items()) {
        if (inv.parent() != 0) invalidator->InvalidateEntry(inv.parent(), inv.name());
        if (inv.ino() == 0) continue;
        // Read-ahead first: once the kernel drops its pages it may read
        // again at once, and must not get what was fetched before the change.
        if (inv.data_changed()) DataChanged(inv.ino());
        invalidator->InvalidateInode(inv.ino(), inv.data_changed());
      }
      if (batch.recall_bytes() > 0 && pool_) {
        // Other mounts need space: give back what cached data does not need.
        const uint64_t back = pool_->Recall(batch.recall_bytes());
        LOG(INFO) << "grant recall: gave back " << back << " bytes";
      }
      batch.Clear();
    }
    grpc::Status s = reader->Finish();
    // Changes pushed while the stream was down may be lost (a restarted
    // server, an overflowing queue, a failover): nothing fetched before is
    // trusted.
    if (ra_) ra_->InvalidateAll();
    // A stream that stood for a while was healthy, even without changes.
    if (absl::Now() - opened > absl::Seconds(1)) backoff = first_backoff;
    // Not under mu_: a failover takes it (to kick the heartbeat).
    size_t next = index;
    if (rpc_->ShouldFailover(s)) next = rpc_->Failover(index, s);
    absl::MutexLock l(&mu_);
    stream_ctx_ = nullptr;
    if (stopping_) return;
    LOG(WARNING) << "invalidation stream from " << rpc_->address(index) << " ended ("
                 << s.error_message() << "); reconnecting to " << rpc_->address(next);
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    if (mu_.AwaitWithTimeout(absl::Condition(&stop), backoff)) return;
    backoff = std::min(backoff * 2, max_backoff);
  }
}

// --- namespace ----------------------------------------------------------------

absl::StatusOr<proto::Attr> FileSystem::Lookup(const Creds& c, uint64_t parent,
                                               const std::string& name) {
  proto::LookupRequest req;
  Stamp(c, &req);
  req.set_parent(parent);
  req.set_name(name);
  proto::AttrReply reply;
  WriteCache::AttrFetch fetch(cache_.get());
  RETURN_IF_ERROR(rpc_->Call("Lookup", &proto::GrantFs::Stub::Lookup, &req, &reply));
  fetch.Patch(reply.mutable_attr());
  names_.Set(parent, name, reply.attr().ino());
  return reply.attr();
}

absl::StatusOr<proto::Attr> FileSystem::GetAttr(const Creds& c, uint64_t ino) {
  proto::GetAttrRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  proto::AttrReply reply;
  WriteCache::AttrFetch fetch(cache_.get());
  absl::Status s = rpc_->Call("GetAttr", &proto::GrantFs::Stub::GetAttr, &req, &reply);
  // The kernel asks only about inodes it holds: one that no longer exists
  // (removed on another node) is a stale reference, and ESTALE makes the
  // kernel look its path up again (an open(O_CREAT) checking permission
  // then creates the file) instead of failing with ENOENT.
  if (!s.ok() && ToErrno(s) == ENOENT) return ErrnoStatus(ESTALE, "inode no longer exists");
  RETURN_IF_ERROR(s);
  const uint64_t server_size = reply.attr().size();
  fetch.Patch(reply.mutable_attr());
  VLOG(2) << "getattr " << ino << ": server size " << server_size << " ctime "
          << reply.attr().ctime_ns() << " -> size " << reply.attr().size();
  return reply.attr();
}

absl::StatusOr<proto::Attr> FileSystem::SetAttr(const Creds& c, proto::SetAttrRequest req) {
  // Cached writes go first: a size change applies to the data as the server
  // has it, and a flush after an explicit utimes would move mtime again.
  if (cache_) RETURN_IF_ERROR(Flush(req.ino()));
  Stamp(c, &req);
  proto::AttrReply reply;
  WriteCache::AttrFetch fetch(cache_.get());
  absl::Status s = rpc_->Call("SetAttr", &proto::GrantFs::Stub::SetAttr, &req, &reply);
  // After the server applied it (a truncate): what read-ahead fetched
  // before is dropped, and fetches still in flight are discarded.
  DataChanged(req.ino());
  RETURN_IF_ERROR(s);
  fetch.Patch(reply.mutable_attr());
  return reply.attr();
}

absl::StatusOr<proto::Attr> FileSystem::MkNod(const Creds& c, uint64_t parent,
                                              const std::string& name, uint32_t mode, uint64_t rdev,
                                              uint32_t umask, bool exclusive, bool* created) {
  proto::MkNodRequest req;
  Stamp(c, &req);
  req.set_parent(parent);
  req.set_name(name);
  req.set_mode(mode);
  req.set_rdev(rdev);
  req.set_umask(umask);
  req.set_exclusive(exclusive);
  proto::AttrReply reply;
  RETURN_IF_ERROR(rpc_->Call("MkNod", &proto::GrantFs::Stub::MkNod, &req, &reply));
  if (created != nullptr) *created = reply.created();
  names_.Set(parent, name, reply.attr().ino());
  return reply.attr();
}

absl::StatusOr<proto::Attr> FileSystem::Symlink(const Creds& c, uint64_t parent,
                                                const std::string& name,
                                                const std::string& target) {
  proto::SymlinkRequest req;
  Stamp(c, &req);
  req.set_parent(parent);
  req.set_name(name);
  req.set_target(target);
  proto::AttrReply reply;
  RETURN_IF_ERROR(rpc_->Call("Symlink", &proto::GrantFs::Stub::Symlink, &req, &reply));
  names_.Set(parent, name, reply.attr().ino());
  return reply.attr();
}

absl::StatusOr<proto::Attr> FileSystem::Link(const Creds& c, uint64_t ino, uint64_t new_parent,
                                             const std::string& new_name) {
  proto::LinkRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_new_parent(new_parent);
  req.set_new_name(new_name);
  proto::AttrReply reply;
  WriteCache::AttrFetch fetch(cache_.get());
  RETURN_IF_ERROR(rpc_->Call("Link", &proto::GrantFs::Stub::Link, &req, &reply));
  fetch.Patch(reply.mutable_attr());
  names_.Set(new_parent, new_name, reply.attr().ino());
  return reply.attr();
}

absl::Status FileSystem::Remove(const Creds& c, uint64_t parent, const std::string& name,
                                bool is_dir) {
  proto::RemoveRequest req;
  Stamp(c, &req);
  req.set_parent(parent);
  req.set_name(name);
  req.set_is_dir(is_dir);
  req.set_expected_ino(names_.Get(parent, name));
  proto::ErrReply reply;
  RETURN_IF_ERROR(rpc_->Call("Remove", &proto::GrantFs::Stub::Remove, &req, &reply));
  names_.Erase(parent, name);
  return absl::OkStatus();
}

absl::Status FileSystem::Rename(const Creds& c, uint64_t parent, const std::string& name,
                                uint64_t new_parent, const std::string& new_name, uint32_t flags) {
  proto::RenameRequest req;
  Stamp(c, &req);
  req.set_parent(parent);
  req.set_name(name);
  req.set_new_parent(new_parent);
  req.set_new_name(new_name);
  req.set_flags(flags);
  req.set_expected_ino(names_.Get(parent, name));
  req.set_expected_new_ino(names_.Get(new_parent, new_name));
  proto::ErrReply reply;
  RETURN_IF_ERROR(rpc_->Call("Rename", &proto::GrantFs::Stub::Rename, &req, &reply));
  constexpr uint32_t kRenameExchange = 2;  // RenameRequest.flags
  names_.Rename(parent, name, new_parent, new_name, (flags & kRenameExchange) != 0);
  return absl::OkStatus();
}

absl::StatusOr<std::string> FileSystem::ReadLink(const Creds& c, uint64_t ino) {
  proto::ReadLinkRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  proto::ReadLinkReply reply;
  RETURN_IF_ERROR(rpc_->Call("ReadLink", &proto::GrantFs::Stub::ReadLink, &req, &reply));
  return reply.target();
}

absl::StatusOr<proto::ReadDirReply> FileSystem::ReadDir(const Creds& c, uint64_t ino,
                                                        uint64_t cookie, uint32_t max_entries) {
  proto::ReadDirRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_cookie(cookie);
  req.set_max_entries(max_entries);
  proto::ReadDirReply reply;
  WriteCache::AttrFetch fetch(cache_.get());
  RETURN_IF_ERROR(rpc_->Call("ReadDir", &proto::GrantFs::Stub::ReadDir, &req, &reply));
  for (proto::DirEntry& e : *reply.mutable_entries()) {
    fetch.Patch(e.mutable_attr());
    if (e.name() != "." && e.name() != "..") names_.Set(ino, e.name(), e.attr().ino());
  }
  return reply;
}

// --- files -------------------------------------------------------------------------

absl::StatusOr<proto::Attr> FileSystem::Create(const Creds& c, uint64_t parent,
                                               const std::string& name, uint32_t mode,
                                               uint32_t umask, uint32_t flags, uint64_t* handle) {
  constexpr int kAttempts = 8;
  absl::Status last;
  for (int i = 0; i < kAttempts; ++i) {
    bool created = false;
    ASSIGN_OR_RETURN(proto::Attr attr, MkNod(c, parent, name, S_IFREG | mode, 0, umask,
                                             (flags & O_EXCL) != 0, &created));
    // The name may have existed already (created on another node): it is
    // opened as open(2) would, O_TRUNC included (the server truncates).
    absl::StatusOr<proto::Attr> opened =
        Open(c, attr.ino(), flags & ~(O_CREAT | O_EXCL), handle, created);
    // ESTALE: removed by another node between the two calls.
    if (opened.ok() || ToErrno(opened.status()) != ESTALE) return opened;
    last = opened.status();
  }
  return last;
}

absl::StatusOr<proto::Attr> FileSystem::Open(const Creds& c, uint64_t ino, uint32_t flags,
                                             uint64_t* handle, bool created) {
  // open(O_TRUNC) truncates at the server: cached writes go first.
  if (cache_ && (flags & O_TRUNC)) RETURN_IF_ERROR(Flush(ino));
  proto::OpenRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_flags(flags);
  req.set_created(created);
  *handle = next_handle_.fetch_add(1) + 1;
  req.set_handle(*handle);
  proto::OpenReply reply;
  absl::ReaderMutexLock rl(&reclaim_mu_);
  WriteCache::AttrFetch fetch(cache_.get());
  absl::Status s = rpc_->Call("Open", &proto::GrantFs::Stub::Open, &req, &reply);
  if (s.ok()) {
    absl::MutexLock l(&handles_mu_);
    open_handles_[*handle] = ino;
  }
  // Close-to-open (and O_TRUNC): an open drops what was fetched before it.
  if (ra_) {
    if (s.ok()) {
      ra_->Opened(ino, reply.attr().size());
    } else {
      ra_->Invalidate(ino);
    }
  }
  RETURN_IF_ERROR(s);
  fetch.Patch(reply.mutable_attr());
  return reply.attr();
}

absl::Status FileSystem::Release(uint64_t ino, uint64_t handle) {
  if (ra_) ra_->Released(ino);
  proto::ReleaseRequest req;
  req.set_ino(ino);
  req.set_handle(handle);
  proto::ErrReply reply;
  absl::ReaderMutexLock rl(&reclaim_mu_);
  {
    absl::MutexLock l(&handles_mu_);
    open_handles_.erase(handle);
  }
  return rpc_->Call("Release", &proto::GrantFs::Stub::Release, &req, &reply);
}

absl::StatusOr<std::string> FileSystem::Read(const Creds& c, uint64_t ino, uint64_t offset,
                                             size_t size) {
  // Read-your-writes: cached bytes are copied before the server read and
  // laid over it, so a flush finishing in between cannot hide them. What
  // read-ahead serves was fetched while this mount held no written data of
  // the file, and every write since dropped it (docs/write-path.md).
  WriteCache::Overlay cached;
  if (cache_) cached = cache_->Snapshot(ino, offset, size);
  std::string out;
  if (ra_) {
    ASSIGN_OR_RETURN(out,
                     ra_->Read(ino, offset, size, [this, &c](uint64_t i, uint64_t off, size_t n) {
                       return ReadRpc(c, i, off, n);
                     }));
  } else {
    ASSIGN_OR_RETURN(out, ReadRpc(c, ino, offset, size));
  }
  if (!cached.empty()) WriteCache::Apply(cached, offset, size, &out);
  return out;
}

absl::StatusOr<std::string> FileSystem::ReadRpc(const Creds& c, uint64_t ino, uint64_t offset,
                                                size_t size) {
  std::string out;
  while (out.size() < size) {
    proto::ReadRequest req;
    Stamp(c, &req);
    req.set_ino(ino);
    req.set_offset(offset + out.size());
    const size_t want = std::min<size_t>(size - out.size(), options_.max_io_bytes);
    req.set_size(want);
    proto::ReadReply reply;
    RETURN_IF_ERROR(rpc_->Call("Read", &proto::GrantFs::Stub::Read, &req, &reply));
    out += reply.data();
    if (reply.data().size() < want) break;  // end of file
  }
  return out;
}

absl::StatusOr<std::string> FileSystem::PrefetchRpc(uint64_t ino, uint64_t offset, size_t size) {
  // No caller's credentials: the server checks none on Read (the kernel
  // checked access at open).
  proto::ReadRequest req;
  req.set_ino(ino);
  req.set_offset(offset);
  req.set_size(size);
  proto::ReadReply reply;
  grpc::ClientContext ctx;
  rpc_->PrepareContext(&ctx, rpc_->options().call_timeout);
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return absl::CancelledError("unmounting");
    prefetch_ctx_.insert(&ctx);
  }
  absl::Status s = rpc_->CallOnce("Read", &proto::GrantFs::Stub::Read, &ctx, &req, &reply);
  {
    absl::MutexLock l(&mu_);
    prefetch_ctx_.erase(&ctx);
  }
  RETURN_IF_ERROR(s);
  return std::move(*reply.mutable_data());
}

absl::StatusOr<size_t> FileSystem::Write(const Creds& c, uint64_t ino, uint64_t offset,
                                         const char* data, size_t size) {
  // The file size limit is checked before a byte is accepted (no cached
  // byte may become unflushable): as in Linux, a write that crosses it
  // stores what lies below it and returns that count; one at or past it
  // fails with EFBIG.
  const uint64_t limit = max_file_size_.load();
  if (offset >= limit) return ErrnoStatus(EFBIG, "write at or past the maximum file size");
  size = std::min<uint64_t>(size, limit - offset);
  // Read-ahead is dropped after the data is in the cache or on the server:
  // a fetch issued before then is discarded, and one issued after sees the
  // cached data and starts no read-ahead (ReadAhead::Read).
  if (cache_) {
    if (cache_->Write(ino, offset, data, size)) {
      DataChanged(ino);
      return size;
    }
    // The grant cannot cover it (the volume is nearly full): allocate at the
    // server, exactly, after what is cached for this file (order).
    RETURN_IF_ERROR(cache_->FlushInode(ino));
  }
  absl::StatusOr<size_t> r = WriteThrough(c, ino, offset, data, size);
  DataChanged(ino);  // also after an error: some of it may have landed
  return r;
}

absl::Status FileSystem::Flush(uint64_t ino) {
  return cache_ ? cache_->FlushInode(ino) : absl::OkStatus();
}

absl::StatusOr<size_t> FileSystem::WriteThrough(const Creds& c, uint64_t ino, uint64_t offset,
                                                const char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const size_t n = std::min<size_t>(size - done, options_.max_io_bytes);
    proto::WriteRequest req;
    Stamp(c, &req);
    req.set_ino(ino);
    req.set_offset(offset + done);
    req.set_data(std::string(data + done, n));
    proto::WriteReply reply;
    RETURN_IF_ERROR(rpc_->Call("Write", &proto::GrantFs::Stub::Write, &req, &reply));
    done += n;
  }
  return done;
}

absl::Status FileSystem::Fsync(const Creds& c, uint64_t ino) {
  RETURN_IF_ERROR(Flush(ino));
  proto::FsyncRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  proto::ErrReply reply;
  return rpc_->Call("Fsync", &proto::GrantFs::Stub::Fsync, &req, &reply);
}

absl::Status FileSystem::Fallocate(const Creds& c, uint64_t ino, uint32_t mode, uint64_t offset,
                                   uint64_t length) {
  proto::FallocateRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_mode(mode);
  req.set_offset(offset);
  req.set_length(length);
  proto::AttrReply reply;
  absl::Status s = rpc_->Call("Fallocate", &proto::GrantFs::Stub::Fallocate, &req, &reply);
  DataChanged(ino);  // a punched hole reads as zeros from now on
  return s;
}

absl::StatusOr<proto::StatFsReply> FileSystem::StatFs(const Creds& c) {
  proto::StatFsRequest req;
  Stamp(c, &req);
  proto::StatFsReply reply;
  RETURN_IF_ERROR(rpc_->Call("StatFs", &proto::GrantFs::Stub::StatFs, &req, &reply));
  return reply;
}

// --- xattrs ----------------------------------------------------------------------

absl::Status FileSystem::SetXattr(const Creds& c, uint64_t ino, const std::string& name,
                                  const std::string& value, uint32_t flags) {
  ForgetXattrs(ino);
  proto::SetXattrRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_name(name);
  req.set_value(value);
  req.set_flags(flags);
  proto::ErrReply reply;
  return rpc_->Call("SetXattr", &proto::GrantFs::Stub::SetXattr, &req, &reply);
}

namespace {
constexpr char kCapability[] = "security.capability";
// How long an absent security.capability is trusted without asking; changes
// made elsewhere also drop it at once through the invalidation stream.
constexpr absl::Duration kNoCapabilityTtl = absl::Seconds(1);
}  // namespace

void FileSystem::ForgetXattrs(uint64_t ino) {
  absl::MutexLock l(&xattr_mu_);
  no_capability_.erase(ino);
}

absl::StatusOr<std::string> FileSystem::GetXattr(const Creds& c, uint64_t ino,
                                                 const std::string& name) {
  const bool capability = name == kCapability;
  if (capability) {
    absl::MutexLock l(&xattr_mu_);
    auto it = no_capability_.find(ino);
    if (it != no_capability_.end() && absl::Now() < it->second) {
      return ErrnoStatus(ENODATA, "security.capability (cached)");
    }
  }
  absl::StatusOr<std::string> value = GetXattrRpc(c, ino, name);
  if (capability && ToErrno(value.status()) == ENODATA) {
    absl::MutexLock l(&xattr_mu_);
    if (no_capability_.size() > 100000) no_capability_.clear();  // bounded memory
    no_capability_[ino] = absl::Now() + kNoCapabilityTtl;
  }
  return value;
}

absl::StatusOr<std::string> FileSystem::GetXattrRpc(const Creds& c, uint64_t ino,
                                                    const std::string& name) {
  proto::GetXattrRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_name(name);
  proto::GetXattrReply reply;
  RETURN_IF_ERROR(rpc_->Call("GetXattr", &proto::GrantFs::Stub::GetXattr, &req, &reply));
  return reply.value();
}

absl::StatusOr<std::vector<std::string>> FileSystem::ListXattr(const Creds& c, uint64_t ino) {
  proto::ListXattrRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  proto::ListXattrReply reply;
  RETURN_IF_ERROR(rpc_->Call("ListXattr", &proto::GrantFs::Stub::ListXattr, &req, &reply));
  return std::vector<std::string>(reply.names().begin(), reply.names().end());
}

absl::Status FileSystem::RemoveXattr(const Creds& c, uint64_t ino, const std::string& name) {
  ForgetXattrs(ino);
  proto::RemoveXattrRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_name(name);
  proto::ErrReply reply;
  return rpc_->Call("RemoveXattr", &proto::GrantFs::Stub::RemoveXattr, &req, &reply);
}

// --- locks -------------------------------------------------------------------------

absl::StatusOr<proto::LockRange> FileSystem::GetLock(const Creds& c, uint64_t ino, uint64_t owner,
                                                     const proto::LockRange& range) {
  proto::LockRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_owner(owner);
  *req.mutable_range() = range;
  proto::GetLockReply reply;
  RETURN_IF_ERROR(rpc_->Call("GetLock", &proto::GrantFs::Stub::GetLock, &req, &reply));
  return reply.conflict();
}

absl::Status FileSystem::SetLock(const Creds& c, uint64_t ino, uint64_t owner, bool flock,
                                 const proto::LockRange& range, bool wait,
                                 const std::function<bool()>& interrupted) {
  proto::LockRequest req;
  Stamp(c, &req);
  req.set_ino(ino);
  req.set_owner(owner);
  req.set_flock(flock);
  *req.mutable_range() = range;
  // The server never blocks a call on a lock; a waiting caller polls, with a
  // backoff capped at 100 ms, until the lock is free or it is interrupted.
  absl::Duration backoff = absl::Milliseconds(2);
  for (;;) {
    proto::ErrReply reply;
    absl::Status s = rpc_->Call("SetLock", &proto::GrantFs::Stub::SetLock, &req, &reply);
    if (!wait || ToErrno(s) != EAGAIN) return s;
    if (interrupted && interrupted()) return ErrnoStatus(EINTR, "lock wait interrupted");
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(100));
  }
}

}  // namespace grantfs
