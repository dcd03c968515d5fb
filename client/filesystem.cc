#include "client/filesystem.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "common/errno_status.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace grantfs {

FileSystem::FileSystem(const FileSystemOptions& options, std::unique_ptr<RpcClient> rpc)
    : options_(options), rpc_(std::move(rpc)), meta_(rpc_.get(), options.statfs_max_age) {
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
  if (options_.fastwrite) {
    pool_ = std::make_unique<GrantPool>(options_.grants, [this](uint64_t wanted, uint64_t back) {
      return meta_.Grant(wanted, back);
    });
    WriteCacheOptions cache_options = options_.cache;
    if (!cache_options.credit) cache_options.credit = [this] { return rpc_->credit_bytes(); };
    // An extent handed to the namespace log goes with its next batch; a
    // wait for it sends the log that far.
    cache_options.hurry = [this](uint64_t ino) {
      return ns_ != nullptr ? ns_->SendWrites(ino) : absl::OkStatus();
    };
    cache_ = std::make_unique<WriteCache>(
        cache_options, pool_.get(),
        [this](uint64_t ino, uint64_t offset, std::shared_ptr<const std::string> data,
               WriteCache::WriteTime time) -> absl::StatusOr<WriteCache::FlushResult> {
          // Kept for re-reads once acknowledged, if the lease held before
          // this was sent still holds then (client/clean_cache.h).
          CleanCache::Token token;
          if (clean_) token = clean_->Begin(leases_->DataStamp(ino));
          std::shared_ptr<const std::string> kept = clean_ ? data : nullptr;
          // The reply's attributes are kept under the file's lease (below).
          LeaseCache::Ticket ticket;
          std::optional<WriteCache::AttrFetch> fetch;
          if (leases_) {
            ticket = leases_->Take();
            fetch.emplace(cache_.get());
          }
          // The data of a close that did not wait, in a granted directory:
          // in the namespace log's next batch when small (NsGrants::LogWrite;
          // the extent is settled when the batch is applied: LoggedWrite), or
          // a Write that says so.
          if (ns_ != nullptr && ns_->LogWrite(ino, offset, data, time.ns, time.keep,
                                              [this, ino, offset, key = data.get(), token,
                                               kept](absl::StatusOr<proto::WriteReply> r) {
                                                LoggedWrite(ino, offset, key, token, kept,
                                                            std::move(r));
                                              })) {
            WriteCache::FlushResult later;
            later.later = true;
            return later;
          }
          absl::StatusOr<proto::WriteReply> sent = meta_.WriteFromGrant(
              ino, offset, std::move(data), time.ns, time.keep, ns_ != nullptr && ns_->Owes(ino));
          // The server keeps this mount's lease on what its own write
          // changed: the leased attributes are dropped here, before the
          // cache forgets the extent (CachedAttr patches them with it until
          // then). Also after an error: the write may have landed.
          // A failed one may leave the kernel's pages holding bytes the
          // server will not have: not kept across opens (DataStamp).
          if (leases_) {
            leases_->AttrChanged(ino);
            if (!sent.ok()) leases_->DataUnsure(ino);
          }
          ASSIGN_OR_RETURN(proto::WriteReply reply, std::move(sent));
          // Before the cache forgets the extent: a read meanwhile finds the
          // bytes in one or the other.
          if (clean_) clean_->Put(ino, token, offset, std::move(kept), reply.attr().size());
          // They are the file's as the server has it after this write: kept
          // (no GetAttr at the next stat) unless the lease was recalled
          // meanwhile, or another extent of the file is cached, on its way
          // or was acknowledged meanwhile (its answer may be the newer one;
          // checked after the keep, so one that starts in between finds
          // them kept and drops them itself).
          if (leases_ && leases_->HoldsAttrLease(ino)) {
            KeepAttr(ticket, *fetch, reply.attr(), /*own=*/true);
            if (cache_->extent_count(ino) != 1 || fetch->Acked(ino)) leases_->AttrChanged(ino);
          }
          WriteCache::FlushResult r;
          r.grant_used = reply.grant_used_bytes();
          r.size = reply.attr().size();
          r.mtime_ns = reply.attr().mtime_ns();
          r.ctime_ns = reply.attr().ctime_ns();
          return r;
        });
  }
  if (options_.leases) leases_ = std::make_unique<LeaseCache>();
  if (leases_ && options_.listing_prefetch.window > 0) {
    prefetch_ = std::make_unique<ListingPrefetch>(
        options_.listing_prefetch,
        [this](const Creds& c, uint64_t dir) { return ReadWholeListing(c, dir); },
        // A directory granted here is listed by the mount itself.
        [this](uint64_t dir) {
          return leases_->ListingEpoch(dir) != 0 || (ns_ != nullptr && ns_->Holds(dir));
        });
  }
  if (cache_ && leases_ && options_.clean_cache_bytes > 0) {
    clean_ = std::make_unique<CleanCache>(options_.clean_cache_bytes);
  }
  if (options_.leases && options_.ns_grants) {
    ns_ = std::make_unique<NsGrants>(options_.ns, &meta_, leases_.get());
    if (cache_) {
      ns_->SetDataHooks({[this](const std::vector<uint64_t>& inos) {
                           return cache_->FlushNow(inos, /*report_dropped=*/false);
                         },
                         [this](uint64_t ino) { return cache_->CachedBytes(ino); },
                         [this](uint64_t ino) { cache_->Seal(ino); }});
    }
  }
  SessionOptions so;
  so.client_name = options_.client_name;
  so.root_path = options_.root_path;
  so.open_wait = options_.mount_wait;
  so.report = [this](proto::MountReport* r) {
    r->set_kernel_inodes(inodes_.Size());
    if (cache_ != nullptr) {
      r->set_dirty_bytes(cache_->dirty_bytes());
      r->set_dirty_limit_bytes(options_.cache.dirty_limit);
      r->set_writes_in_flight(cache_->in_flight());
    }
  };
  so.clock = options_.grants.clock;
  session_ = std::make_unique<Session>(so, &meta_, &handles_, pool_.get(), ra_.get(), leases_.get(),
                                       ns_.get());
}

FileSystem::~FileSystem() { Stop(); }

absl::Status FileSystem::Start(Invalidator* invalidator) {
  absl::Time sent;
  ASSIGN_OR_RETURN(proto::OpenSessionReply reply, session_->Open(&sent));
  if (reply.max_file_size() > 0) max_file_size_.store(reply.max_file_size());
  if (reply.root_ino() != 0) {
    root_ino_.store(reply.root_ino());
  } else if (options_.root_path != "/") {
    // A server from before mounts of a directory would show the volume's
    // root instead.
    return absl::FailedPreconditionError("the server cannot mount a directory (" +
                                         options_.root_path + "): it is older than this mount");
  }
  {
    absl::MutexLock l(&mu_);
    started_ = true;
  }
  if (ra_) ra_->Start();
  if (cache_) {
    pool_->Renewed(session_->LeaseEnd(sent));
    pool_->Start();
    cache_->Start();
  }
  session_->Start(invalidator);
  if (ns_) ns_->Start();
  return absl::OkStatus();
}

void FileSystem::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (!started_ || stopping_) return;
    stopping_ = true;
    // Read-ahead is given up: its RPCs end now (PrefetchRpc starts no new
    // one once stopping_ is set), so joining its pool does not wait for a
    // deadline.
    for (grpc::ClientContext* ctx : prefetch_ctx_) ctx->TryCancel();
  }
  // The namespace log first, while the stream and the heartbeats still
  // run: a recall meanwhile is answered, and the grants stay renewed.
  if (ns_) ns_->Stop();
  if (cache_) {
    // Everything cached goes to the server while the stream and the
    // heartbeats still run (a recall meanwhile is answered, the grant and
    // the leases stay renewed); the session's unused grant goes back with
    // CloseSession below.
    absl::Status s = cache_->FlushAll();
    if (!s.ok()) LOG(WARNING) << "unmount: flushing cached writes: " << s << " (tried again below)";
  }
  if (prefetch_) {
    prefetch_->Stop();  // before the calls end
    const ListingPrefetch::Stats st = prefetch_->stats();
    LOG(INFO) << "listings read ahead of walks: " << st.fetched << " (" << st.failed << " failed, "
              << st.dropped << " dropped unread)";
  }
  session_->BeginStop();
  if (leases_) {
    const LeaseCache::Stats st = leases_->stats();
    LOG(INFO) << "metadata leases: " << st.hits << " answers from leases, " << st.misses
              << " asked the server, " << st.recalls << " recalls, " << st.refused
              << " leases of replies not kept (a change overtook them)";
  }
  if (ra_) {
    ra_->Stop();
    const ReadAhead::Stats st = ra_->stats();
    LOG(INFO) << "read-ahead: " << st.fetches << " fetches (" << st.fetch_errors << " failed, "
              << st.discarded << " discarded), " << st.served_bytes << " bytes served from them, "
              << st.direct_reads << " direct reads, " << st.timeouts << " waits timed out";
  }
  if (cache_) {
    // What is left (written during the flush above, or not sent then).
    absl::Status s = cache_->FlushAll();
    if (!s.ok()) {
      LOG(ERROR) << "unmount: " << cache_->dirty_bytes()
                 << " cached bytes could not be written and are dropped: " << s;
      for (const std::string& line : cache_->DescribeDirty()) LOG(ERROR) << "unmount: " << line;
    }
    cache_->Stop();
    pool_->Stop();
  }
  // What the flushes above left in the log (closes): applied.
  if (ns_) ns_->ApplyPending().IgnoreError();
  session_->Close();
}

// --- namespace ----------------------------------------------------------------

std::optional<proto::Attr> FileSystem::CachedAttr(uint64_t ino) {
  if (!leases_) return std::nullopt;
  // A file made here: what the server will say once it has the log and the
  // cached writes (NsGrants::Attr).
  if (ns_) {
    if (std::optional<proto::Attr> made = ns_->Attr(ino)) return made;
  }
  // Nothing cached or being flushed (looked at first: a flush drops the
  // lease before its extent leaves the cache): the lease as it is.
  if (!cache_ || cache_->extent_count(ino) == 0) return leases_->Attr(ino);
  // Cached writes: the server's leased attributes, patched with them; a
  // flush acknowledged after the fetch began is patched in from its reply.
  WriteCache::AttrFetch fetch(cache_.get());
  std::optional<proto::Attr> attr = leases_->Attr(ino);
  if (attr) fetch.Patch(&*attr);
  return attr;
}

void FileSystem::KeepAttr(const LeaseCache::Ticket& t, const WriteCache::AttrFetch& fetch,
                          const proto::Attr& attr, bool own) {
  if (leases_ && !fetch.Acked(attr.ino())) leases_->PutAttr(t, attr, own);
}

double FileSystem::AttrTimeout(const proto::Attr& attr) {
  if (!leases_) return -1;
  if (cache_ && cache_->extent_count(attr.ino()) > 0) return 0;
  absl::Duration left;
  std::optional<proto::Attr> leased = leases_->Attr(attr.ino(), &left);
  // Only the very attributes the lease covers (a recall drops them and the
  // kernel's copy together).
  if (!leased.has_value() || leased->SerializeAsString() != attr.SerializeAsString()) {
    // Recalled too often: cached by the kernel as without leases.
    return leases_->FallingBack({LeaseCache::Kind::kAttr, attr.ino()}) ? -1 : 0;
  }
  return std::max(0.0, absl::ToDoubleSeconds(left));
}

bool FileSystem::KernelKeepsName(uint64_t parent) {
  if (!leases_) return true;
  // Only a directory whose names this mount does not hold a lease on: a
  // recall of a leased one must reach every name the kernel holds.
  return leases_->FallingBack({LeaseCache::Kind::kDir, parent}) &&
         leases_->DirLeft(parent) <= absl::ZeroDuration();
}

double FileSystem::NameLeaseLeft(uint64_t dir) {
  if (!leases_) return 0;
  return std::max(0.0, absl::ToDoubleSeconds(leases_->DirLeft(dir)));
}

void FileSystem::NoteHot(const LeaseBits& bits, uint64_t parent, uint64_t ino) {
  if (!leases_) return;
  if (bits.dir_hot && parent != 0) leases_->FallBack({LeaseCache::Kind::kDir, parent});
  if (bits.attr_hot && ino != 0) leases_->FallBack({LeaseCache::Kind::kAttr, ino});
}

void FileSystem::KeepGrantedDir(const Creds& c, uint64_t dir) {
  // A call changed a directory granted here, and the lease cache dropped
  // its attributes (its times changed): without them no change is made
  // here, so they are read again now (the kernel would not ask).
  if (ns_ && ns_->Holds(dir)) GetAttr(c, dir).IgnoreError();
}

void FileSystem::ChangedNamesIn(const Creds& c, uint64_t dir) {
  KeepGrantedDir(c, dir);
  if (ns_ == nullptr || ns_->Holds(dir)) return;
  uint64_t ticket = 0;
  if (!ns_->WantDirGrant(dir, &ticket)) return;
  // Changes only the caller's own directory can take here (NsGrants): the
  // grant is not asked for another owner's.
  absl::StatusOr<proto::Attr> attr = GetAttr(c, dir);
  constexpr uint32_t kRwx = S_IRUSR | S_IWUSR | S_IXUSR;
  if (!attr.ok() || attr->uid() != c.uid || (attr->mode() & kRwx) != kRwx) {
    ns_->Declined(dir);
    return;
  }
  // The whole listing, read under the grant the first page asks for: from
  // then on only this mount changes it, so the listing stays whole here.
  constexpr uint32_t kPage = 1024;
  const LeaseCache::Ticket t = leases_->Take();
  WriteCache::AttrFetch fetch(cache_.get());
  uint64_t cookie = 0;
  for (;;) {
    absl::StatusOr<proto::ReadDirReply> page =
        meta_.ReadDir(c, dir, cookie, kPage, /*want_grant=*/cookie == 0);
    if (!page.ok()) {
      // (The server drops a grant whose first page failed; a grant held
      // there after a later page failed is recalled at the next look.)
      VLOG(1) << "grant of directory " << dir << ": " << page.status();
      ns_->Declined(dir);
      return;
    }
    if (cookie == 0 && !page->granted()) {
      ns_->Declined(dir);
      return;
    }
    leases_->PutPage(t, dir, cookie, *page);
    for (const proto::DirEntry& e : page->entries()) {
      if (e.leased()) KeepAttr(t, fetch, e.attr());
    }
    if (page->eof() || page->entries_size() == 0) break;
    cookie = page->entries(page->entries_size() - 1).cookie();
  }
  ns_->Granted(dir, ticket, /*existing=*/true);
  KeepGrantedDir(c, dir);
}

absl::StatusOr<proto::Attr> FileSystem::Lookup(const Creds& c, uint64_t parent,
                                               const std::string& name) {
  LeaseCache::Ticket t;
  if (leases_) {
    uint64_t ino = 0;
    switch (leases_->Lookup(parent, name, &ino)) {
      case LeaseCache::Name::kAbsent:
        return ErrnoStatus(ENOENT, name + " (leased)");
      case LeaseCache::Name::kPresent:
        if (std::optional<proto::Attr> attr = CachedAttr(ino)) {
          names_.Set(parent, name, ino);
          return *std::move(attr);
        }
        break;
      case LeaseCache::Name::kUnknown:
        break;
    }
    t = leases_->Take();
  }
  WriteCache::AttrFetch fetch(cache_.get());
  LeaseBits bits;
  absl::StatusOr<proto::Attr> r = meta_.Lookup(c, parent, name, &bits);
  NoteHot(bits, parent, r.ok() ? r->ino() : 0);
  if (leases_ && bits.dir && (r.ok() || ToErrno(r.status()) == ENOENT)) {
    leases_->PutName(t, parent, name, r.ok() ? r->ino() : 0);
  }
  ASSIGN_OR_RETURN(proto::Attr attr, std::move(r));
  if (bits.attr) KeepAttr(t, fetch, attr);
  fetch.Patch(&attr);
  names_.Set(parent, name, attr.ino());
  return attr;
}

bool FileSystem::AwaitKernelNameDrops(uint64_t parent, absl::Duration timeout) {
  return session_ == nullptr || session_->AwaitEntryDrops(parent, timeout);
}

absl::StatusOr<proto::Attr> FileSystem::GetAttr(const Creds& c, uint64_t ino) {
  if (std::optional<proto::Attr> attr = CachedAttr(ino)) return *std::move(attr);
  LeaseCache::Ticket t;
  if (leases_) t = leases_->Take();
  WriteCache::AttrFetch fetch(cache_.get());
  LeaseBits bits;
  absl::StatusOr<proto::Attr> attr = meta_.GetAttr(c, ino, &bits);
  NoteHot(bits, 0, ino);
  // The kernel asks only about inodes it holds: one that no longer exists
  // (removed on another node) is a stale reference, and ESTALE makes the
  // kernel look its path up again (an open(O_CREAT) checking permission
  // then creates the file) instead of failing with ENOENT.
  if (!attr.ok() && ToErrno(attr.status()) == ENOENT) {
    return ErrnoStatus(ESTALE, "inode no longer exists");
  }
  RETURN_IF_ERROR(attr.status());
  if (bits.attr) KeepAttr(t, fetch, *attr);
  const uint64_t server_size = attr->size();
  fetch.Patch(&*attr);
  VLOG(2) << "getattr " << ino << ": server size " << server_size << " ctime " << attr->ctime_ns()
          << " -> size " << attr->size();
  return attr;
}

absl::StatusOr<proto::Attr> FileSystem::SetAttr(const Creds& c, proto::SetAttrRequest req) {
  using V = proto::SetAttrRequest;
  // A size change, here or at the server: what was kept is not the file.
  if (clean_ && (req.valid() & V::SIZE)) clean_->Drop(req.ino());
  if (ns_) {
    // A file made here: chmod, chown, utimes in the log. Its cached writes
    // were made before: their flushes keep the times it sets (TimesSet
    // waits for those already on the way, which carry their own time).
    const bool times = (req.valid() & (V::MTIME | V::MTIME_NOW)) != 0;
    if (times && cache_ && ns_->MaySetAttr(c, req)) cache_->TimesSet(req.ino());
    if (auto local = ns_->SetAttr(c, req)) return *std::move(local);
    ns_->Untrack(req.ino());  // the server's attributes from now on
  }
  // Cached writes go first: a size change applies to the data as the server
  // has it, and a flush after an explicit utimes would move mtime again.
  if (cache_) RETURN_IF_ERROR(Flush(req.ino()));
  const uint64_t ino = req.ino();
  LeaseCache::Ticket t;
  if (leases_) t = leases_->Take();
  WriteCache::AttrFetch fetch(cache_.get());
  LeaseBits bits;
  absl::StatusOr<proto::Attr> attr = meta_.SetAttr(c, std::move(req), &bits);
  // After the server applied it (a truncate): what read-ahead fetched
  // before is dropped, and fetches still in flight are discarded.
  DataChanged(ino);
  // What was leased before is not what it is now, whether or not the reply
  // leases the new attributes (a local create checks a directory's mode).
  if (leases_) leases_->AttrChanged(ino);
  RETURN_IF_ERROR(attr.status());
  if (bits.attr) KeepAttr(t, fetch, *attr, /*own=*/true);
  if (!bits.attr) KeepGrantedDir(c, ino);
  fetch.Patch(&*attr);
  return attr;
}

namespace {
// Whether a change that failed with `s` may still have been applied (the
// reply was lost): anything but the server's refusal of it.
bool MayHaveApplied(const absl::Status& s) {
  switch (ToErrno(s)) {
    case 0:
    case EIO:
    case ETIMEDOUT:
    case EAGAIN:
    case EINTR:
    case ENOTCONN:
      return true;
    default:
      return false;
  }
}
}  // namespace

absl::StatusOr<proto::Attr> FileSystem::MkNod(const Creds& c, uint64_t parent,
                                              const std::string& name, uint32_t mode, uint64_t rdev,
                                              uint32_t umask, bool exclusive, bool* created) {
  if (ns_) {
    if (auto local = ns_->MkNod(c, parent, name, mode, rdev, umask, exclusive)) {
      ASSIGN_OR_RETURN(proto::Attr attr, *std::move(local));
      if (created != nullptr) *created = true;
      names_.Set(parent, name, attr.ino());
      return attr;
    }
  }
  LeaseCache::Ticket t;
  if (leases_) t = leases_->Take();
  uint64_t grant_ticket = 0;
  const bool want_grant = ns_ && S_ISDIR(mode) && ns_->WantGrant(&grant_ticket);
  absl::StatusOr<proto::AttrReply> r =
      meta_.MkNod(c, parent, name, mode, rdev, umask, exclusive, want_grant);
  if (leases_ && !r.ok() && MayHaveApplied(r.status())) leases_->DirChanged(parent);
  ASSIGN_OR_RETURN(proto::AttrReply reply, std::move(r));
  if (created != nullptr) *created = reply.created();
  names_.Set(parent, name, reply.attr().ino());
  if (leases_ && reply.created()) {
    // (A name that was there: its attributes may be changing on this node
    // meanwhile, e.g. appends; they are not kept.)
    leases_->NameAdded(parent, name, reply.attr().ino());
    if (reply.leased()) leases_->PutAttr(t, reply.attr(), /*own=*/true);
    if (reply.dir_leased()) leases_->PutEmptyDir(t, reply.attr().ino(), parent);
  }
  if (ns_ && reply.created() && reply.granted()) ns_->Granted(reply.attr().ino(), grant_ticket);
  if (reply.created()) ChangedNamesIn(c, parent);
  return std::move(*reply.mutable_attr());
}

absl::StatusOr<proto::Attr> FileSystem::Symlink(const Creds& c, uint64_t parent,
                                                const std::string& name,
                                                const std::string& target) {
  if (ns_) {
    if (auto local = ns_->Symlink(c, parent, name, target)) {
      ASSIGN_OR_RETURN(proto::Attr attr, *std::move(local));
      names_.Set(parent, name, attr.ino());
      return attr;
    }
  }
  LeaseCache::Ticket t;
  if (leases_) t = leases_->Take();
  LeaseBits bits;
  absl::StatusOr<proto::Attr> r = meta_.Symlink(c, parent, name, target, &bits);
  if (leases_ && !r.ok() && MayHaveApplied(r.status())) leases_->DirChanged(parent);
  ASSIGN_OR_RETURN(proto::Attr attr, std::move(r));
  names_.Set(parent, name, attr.ino());
  if (leases_) {
    leases_->NameAdded(parent, name, attr.ino());
    if (bits.attr) leases_->PutAttr(t, attr, /*own=*/true);
  }
  ChangedNamesIn(c, parent);
  return attr;
}

absl::StatusOr<proto::Attr> FileSystem::Link(const Creds& c, uint64_t ino, uint64_t new_parent,
                                             const std::string& new_name) {
  // A close in the log would need the grant of the file's first directory;
  // the new name is reachable without a recall of it: data first.
  if (ns_) {
    ns_->FileMoved(ino);  // first: no close defers it again meanwhile
    RETURN_IF_ERROR(ns_->FlushDeferred(ino));
  }
  LeaseCache::Ticket t;
  if (leases_) t = leases_->Take();
  WriteCache::AttrFetch fetch(cache_.get());
  LeaseBits bits;
  absl::StatusOr<proto::Attr> r = meta_.Link(c, ino, new_parent, new_name, &bits);
  if (leases_ && !r.ok() && MayHaveApplied(r.status())) {
    leases_->DirChanged(new_parent);
    leases_->AttrChanged(ino);
  }
  ASSIGN_OR_RETURN(proto::Attr attr, std::move(r));
  if (leases_) {
    leases_->AttrChanged(ino);  // its link count
    leases_->NameAdded(new_parent, new_name, ino);
    if (bits.attr) KeepAttr(t, fetch, attr, /*own=*/true);
  }
  fetch.Patch(&attr);
  names_.Set(new_parent, new_name, attr.ino());
  ChangedNamesIn(c, new_parent);
  return attr;
}

uint64_t FileSystem::KnownIno(uint64_t parent, const std::string& name) {
  uint64_t ino = names_.Get(parent, name);
  if (ino == 0 && leases_ && leases_->Lookup(parent, name, &ino) != LeaseCache::Name::kPresent) {
    ino = 0;
  }
  return ino;
}

absl::Status FileSystem::Remove(const Creds& c, uint64_t parent, const std::string& name,
                                bool is_dir) {
  if (ns_) {
    uint64_t removed = 0;
    if (std::optional<absl::Status> local = ns_->Remove(c, parent, name, is_dir, &removed)) {
      RETURN_IF_ERROR(*local);
      names_.Erase(parent, name);
      Gone(removed);
      return absl::OkStatus();
    }
  }
  uint64_t ino = KnownIno(parent, name);
  // Sent before the call, as it would have been at close; and the file is
  // not the mount's own any more (its attributes are the server's).
  if (ns_ && !is_dir && ino != 0) {
    ns_->FileMoved(ino);
    RETURN_IF_ERROR(ns_->FlushDeferred(ino));
  }
  // A directory removed by a call loses its grant at the server: not used
  // here from before the call on (a close in the log would need it).
  if (ns_ && is_dir && ino != 0) ns_->DirRemoved(ino);
  absl::StatusOr<proto::RemoveReply> r =
      meta_.Remove(c, parent, name, is_dir, names_.Get(parent, name));
  const absl::Status s = r.status();
  // The server says which inode lost the name, unless it answered a retry.
  if (r.ok() && r->known()) ino = r->ino();
  if (leases_ && s.ok() && ino != 0) {
    leases_->NameRemoved(parent, name);
    leases_->AttrChanged(ino);  // its link count
    if (is_dir) leases_->DirChanged(ino);
  } else if (leases_ && (s.ok() || MayHaveApplied(s))) {
    // What changed is not known here: drop what it may have touched (any
    // inode's link count).
    leases_->DirChanged(parent);
    leases_->DropAttrs();
  }
  RETURN_IF_ERROR(s);
  if (ns_ && is_dir && ino != 0) ns_->DirRemoved(ino);  // (the reply's, if unknown before)
  names_.Erase(parent, name);
  ChangedNamesIn(c, parent);
  return absl::OkStatus();
}

absl::Status FileSystem::Rename(const Creds& c, uint64_t parent, const std::string& name,
                                uint64_t new_parent, const std::string& new_name, uint32_t flags) {
  if (ns_) {
    uint64_t moved = 0, replaced = 0;
    if (std::optional<absl::Status> local =
            ns_->Rename(c, parent, name, new_parent, new_name, flags, &moved, &replaced)) {
      RETURN_IF_ERROR(*local);
      names_.Rename(parent, name, new_parent, new_name, /*exchange=*/false);
      if (replaced != 0) Gone(replaced);
      return absl::OkStatus();
    }
    // By a call: the files' closes go as calls too (a close in the log
    // needs the grant of the directory the file is in then), and their
    // data first (a name outside a granted directory needs no recall to be
    // reached); a directory replaced loses its grant.
    for (uint64_t ino : {KnownIno(parent, name), KnownIno(new_parent, new_name)}) {
      if (ino == 0) continue;
      ns_->FileMoved(ino);  // first: no close defers it again meanwhile
      RETURN_IF_ERROR(ns_->FlushDeferred(ino));
    }
    if (uint64_t over = KnownIno(new_parent, new_name); over != 0) ns_->DirRemoved(over);
  }
  uint64_t moved = KnownIno(parent, name);
  uint64_t replaced = KnownIno(new_parent, new_name);
  absl::StatusOr<proto::RenameReply> r =
      meta_.Rename(c, parent, name, new_parent, new_name, flags, names_.Get(parent, name),
                   names_.Get(new_parent, new_name));
  const absl::Status s = r.status();
  // The server says which inodes moved and were replaced, unless it
  // answered a retry; then what it touched is not known here.
  const bool known = r.ok() && r->known();
  if (known) {
    moved = r->moved();
    replaced = r->replaced();
  }
  constexpr uint32_t kRenameExchange = 2;  // RenameRequest.flags
  const bool exchange = (flags & kRenameExchange) != 0;
  if (leases_ && (s.ok() || MayHaveApplied(s)) && !known) leases_->DropAttrs();
  if (leases_ && (s.ok() || MayHaveApplied(s))) {
    if (s.ok() && moved != 0 && !exchange) {
      leases_->NameRemoved(parent, name);
      leases_->NameAdded(new_parent, new_name, moved);
    } else {
      leases_->DirChanged(parent);
      leases_->DirChanged(new_parent);
    }
    for (uint64_t ino : {moved, replaced}) {
      if (ino == 0) continue;
      leases_->AttrChanged(ino);  // ctime; link count of the one replaced
      leases_->DirChanged(ino);   // a directory's ".." moved, or it is gone
    }
  }
  RETURN_IF_ERROR(s);
  names_.Rename(parent, name, new_parent, new_name, exchange);
  ChangedNamesIn(c, parent);
  if (new_parent != parent) ChangedNamesIn(c, new_parent);
  return absl::OkStatus();
}

absl::StatusOr<std::string> FileSystem::ReadLink(const Creds& c, uint64_t ino) {
  return meta_.ReadLink(c, ino);
}

void FileSystem::ReadingDir(const Creds& c, uint64_t dir) {
  if (prefetch_) prefetch_->Reading(c, dir);
}

void FileSystem::SawListing(uint64_t dir, uint64_t cookie, const proto::ReadDirReply& page) {
  if (!prefetch_) return;
  std::vector<uint64_t> subdirs;
  for (const proto::DirEntry& e : page.entries()) {
    if (S_ISDIR(e.attr().mode()) && e.name() != "." && e.name() != "..") {
      subdirs.push_back(e.attr().ino());
    }
  }
  prefetch_->Saw(dir, cookie, subdirs);
}

absl::Status FileSystem::ReadWholeListing(const Creds& c, uint64_t dir) {
  // A large directory is left to the walk itself: what is read ahead stays
  // a few calls.
  constexpr int kMaxPages = 4;
  constexpr uint32_t kPage = 1024;
  uint64_t cookie = 0;
  for (int page = 0; page < kMaxPages; ++page) {
    // Retried briefly: an unmount waits for it (ListingPrefetch::Stop).
    ASSIGN_OR_RETURN(proto::ReadDirReply r, ReadDirPage(c, dir, cookie, kPage, absl::Seconds(2)));
    if (r.eof() || r.entries().empty()) return absl::OkStatus();
    cookie = r.entries(r.entries_size() - 1).cookie();
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::ReadDirReply> FileSystem::ReadDir(const Creds& c, uint64_t ino,
                                                        uint64_t cookie, uint32_t max_entries) {
  // Being read ahead: that read, rather than a second one.
  if (prefetch_ && cookie == 0) prefetch_->Await(ino, absl::Seconds(1));
  return ReadDirPage(c, ino, cookie, max_entries);
}

absl::StatusOr<proto::ReadDirReply> FileSystem::ReadDirPage(
    const Creds& c, uint64_t ino, uint64_t cookie, uint32_t max_entries,
    std::optional<absl::Duration> retry_for) {
  proto::ReadDirReply reply;
  bool dirty = false;
  if (leases_ && leases_->List(ino, cookie, max_entries, &reply)) {
    // Entries with cached writes need the patch of a fetch: asked below.
    for (const proto::DirEntry& e : reply.entries()) {
      dirty = dirty || (cache_ && cache_->extent_count(e.attr().ino()) > 0);
    }
    if (!dirty) {
      SawListing(ino, cookie, reply);
      return reply;
    }
  }
  LeaseCache::Ticket t;
  if (leases_) t = leases_->Take();
  WriteCache::AttrFetch fetch(cache_.get());
  ASSIGN_OR_RETURN(reply, meta_.ReadDir(c, ino, cookie, max_entries, false, retry_for));
  if (leases_) leases_->PutPage(t, ino, cookie, reply);
  for (proto::DirEntry& e : *reply.mutable_entries()) {
    if (e.leased()) KeepAttr(t, fetch, e.attr());
    fetch.Patch(e.mutable_attr());
  }
  SawListing(ino, cookie, reply);
  return reply;
}

std::optional<proto::ReadDirReply> FileSystem::LocalListing(const Creds& c, uint64_t dir) {
  if (!ns_ || !ns_->Holds(dir)) return std::nullopt;
  std::optional<proto::Attr> attr = leases_->Attr(dir);
  if (!attr || attr->uid() != c.uid ||
      (attr->mode() & (S_IRUSR | S_IXUSR)) != (S_IRUSR | S_IXUSR)) {
    return std::nullopt;
  }
  std::vector<std::pair<std::string, uint64_t>> names;
  uint64_t parent = 0;
  if (!leases_->AllNames(dir, &names, &parent)) return std::nullopt;
  proto::ReadDirReply out;
  auto add = [&](const std::string& name, uint64_t ino, uint32_t mode) {
    proto::DirEntry* e = out.add_entries();
    e->set_name(name);
    e->set_cookie(out.entries_size());
    e->mutable_attr()->set_ino(ino);
    e->mutable_attr()->set_mode(mode);
  };
  add(".", dir, S_IFDIR);
  add("..", parent, S_IFDIR);
  for (const auto& [name, ino] : names) {
    uint32_t mode = ns_->Mode(ino);
    if (mode == 0) mode = leases_->Type(ino);
    if (mode == 0) return std::nullopt;
    add(name, ino, mode);
  }
  out.set_eof(true);
  return out;
}

// --- files -------------------------------------------------------------------------

absl::StatusOr<proto::Attr> FileSystem::Create(const Creds& c, uint64_t parent,
                                               const std::string& name, uint32_t mode,
                                               uint32_t umask, uint32_t flags, uint64_t* handle) {
  if (ns_) {
    std::optional<absl::StatusOr<proto::Attr>> local = ns_->Create(
        c, parent, name, mode, umask, flags,
        [this](uint64_t ino) { return handles_.BeginOpen(ino); }, handle);
    if (local.has_value()) {
      if (*handle != 0) handles_.EndOpen(*handle, local->ok());
      ASSIGN_OR_RETURN(proto::Attr attr, *std::move(local));
      names_.Set(parent, name, attr.ino());
      if (ra_) ra_->Opened(attr.ino(), 0);
      return attr;
    }
    if (*handle != 0) handles_.EndOpen(*handle, false);
  }
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
  if (ns_ && (flags & O_TRUNC)) ns_->Untrack(ino);  // truncated at the server
  if (ns_ && !created) {
    // What a close left owed goes first, unless this open cannot write: a
    // recall sends the cached writes of the files it owes, and those of an
    // open that writes would be unbounded (a program that streams into it).
    if ((flags & O_ACCMODE) != O_RDONLY) RETURN_IF_ERROR(ns_->FlushDeferred(ino));
    // A file made here: opened in the log.
    std::optional<absl::StatusOr<proto::Attr>> local = ns_->Open(
        c, ino, flags, [this](uint64_t i) { return handles_.BeginOpen(i); }, handle);
    if (*handle != 0) handles_.EndOpen(*handle, local.has_value() && local->ok());
    if (local.has_value()) {
      ASSIGN_OR_RETURN(proto::Attr attr, *std::move(local));
      if (ra_) ra_->Opened(ino, attr.size());
      return attr;
    }
    // Opened by a call: what a close left owed goes first.
    RETURN_IF_ERROR(ns_->FlushDeferred(ino));
  }
  // open(O_TRUNC) truncates at the server: cached writes go first.
  if (cache_ && (flags & O_TRUNC)) RETURN_IF_ERROR(Flush(ino));
  if (clean_ && (flags & O_TRUNC)) clean_->Drop(ino);
  // A reclaim running meanwhile does not hold this open up, nor lose it
  // (OpenHandleTable).
  *handle = handles_.BeginOpen(ino);
  WriteCache::AttrFetch fetch(cache_.get());
  absl::StatusOr<proto::Attr> attr = meta_.Open(c, ino, flags, *handle, created);
  handles_.EndOpen(*handle, attr.ok());
  if (leases_ && (flags & O_TRUNC)) leases_->AttrChanged(ino);  // truncated at the server
  // Also after: a write through another descriptor may have been flushed
  // (and kept) between the drop above and the truncate.
  if (clean_ && (flags & O_TRUNC)) clean_->Drop(ino);
  // Close-to-open (and O_TRUNC): an open drops what was fetched before it.
  if (ra_) {
    if (attr.ok()) {
      ra_->Opened(ino, attr->size());
    } else {
      ra_->Invalidate(ino);
    }
  }
  RETURN_IF_ERROR(attr.status());
  fetch.Patch(&*attr);
  return attr;
}

absl::Status FileSystem::Release(uint64_t ino, uint64_t handle) {
  if (ra_) ra_->Released(ino);
  handles_.Release(handle);
  // A file removed here while open: its bytes go with its last close.
  if (cache_ && ns_ && cache_->Discarded(ino) && !handles_.IsOpen(ino)) {
    cache_->Released(ino);
  }
  if (ns_ && ns_->Release(ino, handle)) return absl::OkStatus();  // in the log
  return meta_.Release(ino, handle);
}

absl::StatusOr<std::string> FileSystem::Read(const Creds& c, uint64_t ino, uint64_t offset,
                                             size_t size) {
  // Read-your-writes: cached bytes are copied before the server read and
  // laid over it, so a flush finishing in between cannot hide them. What
  // read-ahead serves was fetched while this mount held no written data of
  // the file, and every write since dropped it (docs/write-path.md).
  // A file made here, whose size is known exactly: at its end, or with
  // every byte asked for still cached, no call.
  std::optional<uint64_t> known;
  if (ns_ && cache_) known = ns_->TrackedSize(ino);
  WriteCache::Overlay cached;
  if (cache_) cached = cache_->Snapshot(ino, offset, size);
  // Acknowledged bytes kept here, under the lease held since their flush
  // (client/clean_cache.h): their file's size is the server's last answer,
  // or the end of the cached writes. Taken after the cached writes: a
  // flush moves bytes from those to these (kept before the cache forgets
  // them), so a flush in between leaves them in both, never in neither;
  // the cached ones are laid over the kept ones.
  WriteCache::Overlay clean;
  const bool kept = clean_ && clean_->Read(ino, leases_->DataStamp(ino), offset, size, &clean);
  std::string out;
  if (kept && !known.has_value()) known = std::max(clean.end, cached.end);
  if (known.has_value()) {
    const uint64_t end = std::min<uint64_t>(offset + size, *known);
    if (end <= offset) return out;
    WriteCache::Overlay both = std::move(clean);  // oldest first: cached writes win
    both.end = cached.end;
    both.pieces.insert(both.pieces.end(), cached.pieces.begin(), cached.pieces.end());
    if (WriteCache::Covers(both, offset, end)) {
      WriteCache::Apply(both, offset, size, &out);
      out.resize(end - offset);
      if (kept && both.pieces.size() > cached.pieces.size()) {
        reads_kept_.fetch_add(1, std::memory_order_relaxed);
      }
      return out;
    }
  }
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
    const size_t want = std::min<size_t>(size - out.size(), options_.max_io_bytes);
    ASSIGN_OR_RETURN(std::string data, meta_.Read(c, ino, offset + out.size(), want));
    out += data;
    if (data.size() < want) break;  // end of file
  }
  return out;
}

absl::StatusOr<std::string> FileSystem::PrefetchRpc(uint64_t ino, uint64_t offset, size_t size) {
  grpc::ClientContext ctx;
  rpc_->PrepareContext(&ctx, rpc_->options().call_timeout);
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return absl::CancelledError("unmounting");
    prefetch_ctx_.insert(&ctx);
  }
  absl::StatusOr<std::string> data = meta_.ReadOnce(&ctx, ino, offset, size);
  {
    absl::MutexLock l(&mu_);
    prefetch_ctx_.erase(&ctx);
  }
  return data;
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
    int64_t stamped = 0;
    if (cache_->Write(ino, offset, data, size, &stamped)) {
      // The server's attributes did not change: a lease on them stays
      // (CachedAttr patches them with the cache).
      if (ra_) ra_->Invalidate(ino);
      if (ns_) ns_->Wrote(ino, offset, size, stamped);
      return size;
    }
    // The grant cannot cover it (the volume is nearly full): allocate at the
    // server, exactly, after what is cached for this file (order). Some
    // pieces may be cached: the size is the server's from here on.
    if (ns_) ns_->Untrack(ino);
    RETURN_IF_ERROR(cache_->FlushInode(ino));
  }
  if (ns_) ns_->Untrack(ino);  // the server stamps a write-through
  absl::StatusOr<size_t> r = WriteThrough(c, ino, offset, data, size);
  DataChanged(ino);  // also after an error: some of it may have landed
  return r;
}

absl::Status FileSystem::Flush(uint64_t ino) {
  return cache_ ? cache_->FlushInode(ino) : absl::OkStatus();
}

absl::Status FileSystem::Close(uint64_t ino) {
  if (ns_ && ns_->DeferClose(ino)) return absl::OkStatus();
  return Flush(ino);
}

void FileSystem::LoggedWrite(uint64_t ino, uint64_t offset, const std::string* key,
                             CleanCache::Token token, std::shared_ptr<const std::string> kept,
                             absl::StatusOr<proto::WriteReply> sent) {
  // As the write cache's FlushRpc does after a Write call (the
  // constructor), without keeping the reply's attributes.
  if (sent.ok()) meta_.NoteWritten(ino, &*sent);
  if (leases_) {
    leases_->AttrChanged(ino);
    // (ABORTED: nothing of it was stored; it is sent again.)
    if (!sent.ok() && !absl::IsAborted(sent.status())) leases_->DataUnsure(ino);
  }
  if (!sent.ok()) {
    cache_->Settle(ino, key, sent.status());
    return;
  }
  if (clean_) clean_->Put(ino, token, offset, std::move(kept), sent->attr().size());
  WriteCache::FlushResult r;
  r.grant_used = sent->grant_used_bytes();
  r.size = sent->attr().size();
  r.mtime_ns = sent->attr().mtime_ns();
  r.ctime_ns = sent->attr().ctime_ns();
  cache_->Settle(ino, key, r);
}

void FileSystem::Gone(uint64_t ino) {
  if (cache_ && ns_->TakeDeferred(ino)) {
    const bool open = handles_.IsOpen(ino);
    cache_->Discard(ino, open);
  }
}

absl::StatusOr<size_t> FileSystem::WriteThrough(const Creds& c, uint64_t ino, uint64_t offset,
                                                const char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const size_t n = std::min<size_t>(size - done, options_.max_io_bytes);
    RETURN_IF_ERROR(meta_.Write(c, ino, offset + done, data + done, n));
    done += n;
  }
  return done;
}

absl::Status FileSystem::Fsync(const Creds& c, uint64_t ino) {
  RETURN_IF_ERROR(Flush(ino));
  // Its create, if this mount made it on its own, goes first (and what the
  // log holds before it; not what came after).
  if (ns_) RETURN_IF_ERROR(ns_->Sync(ino));
  return meta_.Fsync(c, ino);
}

absl::Status FileSystem::FsyncDir(uint64_t ino) {
  // Every change the server answered was durable and replicated before it
  // answered; what this mount answered itself is in its log.
  return ns_ ? ns_->SyncDir(ino) : absl::OkStatus();
}

absl::Status FileSystem::Fallocate(const Creds& c, uint64_t ino, uint32_t mode, uint64_t offset,
                                   uint64_t length) {
  if (ns_) ns_->Untrack(ino);
  absl::Status s = meta_.Fallocate(c, ino, mode, offset, length);
  DataChanged(ino);  // and its size or blocks  // a punched hole reads as zeros from now on
  return s;
}

absl::StatusOr<proto::StatFsReply> FileSystem::StatFs(const Creds& c) { return meta_.StatFs(c); }

// --- xattrs ----------------------------------------------------------------------

absl::Status FileSystem::SetXattr(const Creds& c, uint64_t ino, const std::string& name,
                                  const std::string& value, uint32_t flags) {
  if (ns_) ns_->Untrack(ino);  // its xattrs are the server's
  // A name or value the server refuses, refused here as it would
  // (common/names.h), before anything is forgotten or sent.
  RETURN_IF_ERROR(ValidateXattr(name, value.size()));
  ForgetXattrs(ino);
  absl::Status s = meta_.SetXattr(c, ino, name, value, flags);
  if (leases_) leases_->XattrsChanged(ino);  // and ctime
  KeepGrantedDir(c, ino);
  return s;
}

absl::StatusOr<std::string> FileSystem::GetXattr(const Creds& c, uint64_t ino,
                                                 const std::string& name) {
  // The server refuses a name outside the namespaces it stores (e.g. the
  // ACLs `ls -l` asks for: EOPNOTSUPP) before it looks: so does the mount.
  RETURN_IF_ERROR(ValidateXattr(name, 0));
  if (ns_ && ns_->NoXattrs(c, ino, name)) return ErrnoStatus(ENODATA, name + " (made here)");
  if (leases_) {
    // Known absent under the attribute lease: the kernel asks for
    // security.capability before every write, `ls -l` for ACLs and labels.
    if (leases_->XattrAbsent(ino, name)) return ErrnoStatus(ENODATA, name + " (leased)");
    // Remembered only if the attribute lease was held before the request
    // went out (a change of the xattr elsewhere is then recalled here).
    const bool held = leases_->HoldsAttrLease(ino);
    const LeaseCache::Ticket t = leases_->Take();
    absl::StatusOr<std::string> value = meta_.GetXattr(c, ino, name);
    if (held && ToErrno(value.status()) == ENODATA) leases_->PutXattrAbsent(t, ino, name);
    return value;
  }
  if (xattrs_.KnownAbsent(ino, name)) return ErrnoStatus(ENODATA, name + " (cached)");
  absl::StatusOr<std::string> value = meta_.GetXattr(c, ino, name);
  if (ToErrno(value.status()) == ENODATA) xattrs_.NoteAbsent(ino, name);
  return value;
}

absl::StatusOr<std::vector<std::string>> FileSystem::ListXattr(const Creds& c, uint64_t ino) {
  if ((leases_ && leases_->NoXattrs(ino)) || (ns_ && ns_->NoXattrs(c, ino, ""))) {
    return std::vector<std::string>();
  }
  return meta_.ListXattr(c, ino);
}

absl::Status FileSystem::RemoveXattr(const Creds& c, uint64_t ino, const std::string& name) {
  if (ns_) ns_->Untrack(ino);  // its xattrs are the server's
  RETURN_IF_ERROR(ValidateXattr(name, 0));
  ForgetXattrs(ino);
  absl::Status s = meta_.RemoveXattr(c, ino, name);
  if (leases_) leases_->XattrsChanged(ino);  // and ctime
  KeepGrantedDir(c, ino);
  return s;
}

// --- locks -------------------------------------------------------------------------

absl::StatusOr<proto::LockRange> FileSystem::GetLock(const Creds& c, uint64_t ino, uint64_t owner,
                                                     const proto::LockRange& range) {
  return meta_.GetLock(c, ino, owner, range);
}

absl::Status FileSystem::SetLock(const Creds& c, uint64_t ino, uint64_t owner, bool flock,
                                 const proto::LockRange& range, bool wait,
                                 const std::function<bool()>& interrupted) {
  // The server never blocks a call on a lock; a waiting caller polls, with a
  // backoff capped at 100 ms, until the lock is free or it is interrupted.
  absl::Duration backoff = absl::Milliseconds(2);
  for (;;) {
    absl::Status s = meta_.SetLock(c, ino, owner, flock, range);
    if (!wait || ToErrno(s) != EAGAIN) return s;
    if (interrupted && interrupted()) return ErrnoStatus(EINTR, "lock wait interrupted");
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(100));
  }
}

}  // namespace grantfs
