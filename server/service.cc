#include "server/service.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>

#include "checkpoint/meta_digest.h"
#include "common/errno_status.h"
#include "common/secret.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/dedupe.h"
#include "server/names.h"

namespace grantfs {
namespace {

// Sets reply->err from `s`. Outcomes that are part of normal use (ENOENT of
// a lookup, EEXIST of O_EXCL, ...) are not logged; anything that points at
// bad input or a server fault is.
template <typename Reply>
grpc::Status Done(const char* op, const absl::Status& s, Reply* reply) {
  // Not a file-system outcome: this server cannot acknowledge the change
  // (fenced, or the replica did not answer in time). The client retries,
  // on the next server if need be, with the same sequence number.
  if (absl::IsUnavailable(s) && !HasErrno(s)) {
    LOG(WARNING) << op << ": " << s << " (the client retries)";
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(s.message()));
  }
  // The client's session is being ended (its lease ran out): the client
  // retries on this server, and is answered once that is done.
  if (absl::IsResourceExhausted(s) && !HasErrno(s)) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, std::string(s.message()));
  }
  const int err = ToErrno(s);
  reply->set_err(err);
  switch (err) {
    case 0:
    case ENOENT:
    case EEXIST:
    case ENOTEMPTY:
    case ENODATA:
    case EACCES:
    case EPERM:
    case EAGAIN:
    case ENOSPC:
    case EISDIR:
    case ENOTDIR:
      break;
    default:
      LOG(WARNING) << op << ": " << s;
  }
  return grpc::Status::OK;
}

bool ValidIno(uint64_t ino) { return ino != 0; }

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

// Exactly-once for a request that changes something (server/dedupe.h):
// waits out an earlier attempt still running, finds the outcome of one that
// was applied, and otherwise gives the request's tag (tag()) for the
// RequestContext, so that the change records it.
class Once {
 public:
  Once(Volume* volume, const proto::RequestHeader& header) : volume_(volume) {
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
  ~Once() {
    if (entered_) volume_->in_flight().Leave(tag_.client_id, tag_.seq);
  }
  // UNAVAILABLE (the client retries) when an earlier attempt is still running.
  grpc::Status busy() const {
    if (tag_.client_id == 0 || tag_.seq == 0 || entered_) return grpc::Status::OK;
    LOG(WARNING) << "request " << tag_.client_id << "/" << tag_.seq
                 << " is still running; asking the client to retry";
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "an earlier attempt is still running");
  }
  const absl::Status& error() const { return error_; }
  // The record of an earlier attempt that was applied, if any.
  const std::optional<proto::DedupeRecord>& prior() const { return prior_; }
  // The tag the request's changes carry (RequestContext::tag): null unless
  // the request is to be applied and recorded now.
  RequestTag* tag() { return tagging_ ? &tag_ : nullptr; }

 private:
  Volume* const volume_;
  RequestTag tag_;
  bool entered_ = false;
  absl::Status error_;
  std::optional<proto::DedupeRecord> prior_;
  bool tagging_ = false;
};

}  // namespace

// Every reply carries the client's in-flight write credit as trailing
// metadata, computed as the handler ends (after its own write left the
// backlog).
class CreditOnReply {
 public:
  CreditOnReply(grpc::ServerContext* ctx, FlowControl* flow) : ctx_(ctx), flow_(flow) {}
  ~CreditOnReply() {
    if (client_id_ != 0) {
      ctx_->AddTrailingMetadata("x-grantfs-credit", std::to_string(flow_->Credit(client_id_)));
    }
  }
  void set_client_id(uint64_t id) { client_id_ = id; }

 private:
  grpc::ServerContext* const ctx_;
  FlowControl* const flow_;
  uint64_t client_id_ = 0;
};

GrantFsService::GrantFsService(Volume* volume, const ServiceOptions& options)
    : volume_(volume), options_(options) {}

grpc::Status GrantFsService::Gate() {
  std::string why;
  if (options_.server_role != nullptr && !options_.server_role->Serving(&why)) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the primary: " + why);
  }
  if (volume_ == nullptr) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the primary");
  return grpc::Status::OK;
}

grpc::Status GrantFsService::Authenticate(Ctx* ctx) {
  return CheckSecret(*ctx, options_.secret, "server");
}

grpc::Status GrantFsService::Begin(Ctx* ctx, const proto::RequestHeader& header,
                                   RequestContext* rc) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return auth;
  rc->client_id = header.client_id();
  rc->caller.uid = header.creds().uid();
  rc->caller.gid = header.creds().gid();
  rc->caller.groups.assign(header.creds().groups().begin(), header.creds().groups().end());
  if (absl::Status s = volume_->Touch(rc->client_id); !s.ok()) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, std::string(s.message()));
  }
  return grpc::Status::OK;
}

template <typename Req, typename Reply, typename Body>
grpc::Status GrantFsService::Serve(const char* op, Ctx* ctx, const Req* req, Reply* reply,
                                   std::initializer_list<uint64_t> inos, Body body) {
  if (grpc::Status gate = Gate(); !gate.ok()) return gate;
  RequestContext rc;
  CreditOnReply credit_on_reply(ctx, &volume_->flow());
  if (grpc::Status auth = Begin(ctx, req->header(), &rc); !auth.ok()) return auth;
  credit_on_reply.set_client_id(rc.client_id);
  for (uint64_t ino : inos) {
    if (!ValidIno(ino)) return Done(op, ErrnoStatus(EINVAL, "inode 0"), reply);
  }
  return Done(op, body(rc), reply);
}

template <typename Req, typename Reply, typename Prior, typename Body>
grpc::Status GrantFsService::ServeOnce(const char* op, Ctx* ctx, const Req* req, Reply* reply,
                                       std::initializer_list<uint64_t> inos, Prior prior,
                                       Body body) {
  // Once lives until the reply is built: it holds the request in flight
  // and owns the tag that the change records.
  std::optional<Once> once;
  grpc::Status busy;
  grpc::Status st = Serve(op, ctx, req, reply, inos, [&](const RequestContext& rc) -> absl::Status {
    once.emplace(volume_, req->header());
    if (busy = once->busy(); !busy.ok()) return absl::OkStatus();
    if (!once->error().ok()) return once->error();
    RequestContext tagged = rc;
    tagged.tag = once->tag();
    const proto::DedupeRecord* record = once->prior() ? &*once->prior() : nullptr;
    if constexpr (!std::is_same_v<Prior, std::nullptr_t>) {
      if (record != nullptr) return prior(*record, tagged);
    }
    return body(tagged, record);
  });
  return busy.ok() ? st : busy;
}

namespace {

// A retried request that was applied: the reply carries the inode's
// attributes as they are now.
template <typename Reply>
absl::Status PriorAttr(Volume* volume, uint64_t ino, Reply* reply) {
  auto a = volume->meta().inodes().GetAttr(ino);
  if (a.ok()) *reply->mutable_attr() = *a;
  return a.status();
}

// Answers a retry of an applied request that replies with nothing but err.
absl::Status PriorOk(const proto::DedupeRecord&, const RequestContext&) { return absl::OkStatus(); }

}  // namespace

grpc::Status GrantFsService::OpenSession(Ctx* ctx, const proto::OpenSessionRequest* req,
                                         proto::OpenSessionReply* reply) {
  return Serve("OpenSession", ctx, req, reply, {}, [&](const RequestContext&) -> absl::Status {
    absl::StatusOr<uint64_t> id = volume_->OpenSession(req->client_name());
    if (!id.ok()) return id.status();
    reply->set_client_id(*id);
    reply->set_lease_ms(absl::ToInt64Milliseconds(volume_->sessions().lease()));
    reply->set_incarnation(volume_->incarnation());
    reply->set_max_file_size(kMaxFileSize);
    LOG(INFO) << "session " << reply->client_id() << " opened for '" << req->client_name()
              << "' from " << ctx->peer();
    return absl::OkStatus();
  });
}

grpc::Status GrantFsService::Heartbeat(Ctx* ctx, const proto::HeartbeatRequest* req,
                                       proto::HeartbeatReply* reply) {
  return Serve("Heartbeat", ctx, req, reply, {}, [&](const RequestContext& rc) {
    reply->set_incarnation(volume_->incarnation());
    const uint64_t lost = volume_->sessions().LostToken(rc.client_id, req->lost_acked());
    if (lost != 0) {
      LOG(WARNING) << "session " << rc.client_id
                   << " came back after its lease ran out: told that its grant is gone";
      reply->set_session_lost(lost);
    }
    return absl::OkStatus();
  });
}

grpc::Status GrantFsService::Reclaim(Ctx* ctx, const proto::ReclaimRequest* req,
                                     proto::ReclaimReply* reply) {
  return Serve("Reclaim", ctx, req, reply, {}, [&](const RequestContext& rc) -> absl::Status {
    if (rc.client_id == 0) return ErrnoStatus(EINVAL, "reclaim needs a session");
    std::vector<std::pair<uint64_t, uint64_t>> opens;
    opens.reserve(req->opens_size());
    for (const proto::ReclaimRequest::Open& o : req->opens()) {
      if (!ValidIno(o.ino())) return ErrnoStatus(EINVAL, "inode 0");
      opens.emplace_back(o.ino(), o.handle());
    }
    auto r = volume_->Reclaim(rc, opens);
    if (r.ok()) reply->mutable_lost()->Add(r->begin(), r->end());
    reply->set_incarnation(volume_->incarnation());
    return r.status();
  });
}

grpc::Status GrantFsService::CloseSession(Ctx* ctx, const proto::CloseSessionRequest* req,
                                          proto::CloseSessionReply* reply) {
  return Serve("CloseSession", ctx, req, reply, {}, [&](const RequestContext& rc) {
    LOG(INFO) << "session " << rc.client_id << " closed";
    return volume_->CloseSession(rc.client_id);
  });
}

grpc::Status GrantFsService::Subscribe(Ctx* ctx, const proto::SubscribeRequest* req,
                                       grpc::ServerWriter<proto::InvalidationBatch>* writer) {
  // A stream, not a unary call: Serve's reply does not apply.
  if (grpc::Status gate = Gate(); !gate.ok()) return gate;
  RequestContext rc;
  if (grpc::Status auth = Begin(ctx, req->header(), &rc); !auth.ok()) return auth;
  if (rc.client_id == 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "subscribe needs a session");
  }
  // Holds one server thread per mount for the life of the stream; ends when
  // the client goes away or its session ends.
  while (!ctx->IsCancelled()) {
    proto::InvalidationBatch batch;
    if (!volume_->sessions().Drain(rc.client_id, absl::Milliseconds(500), &batch)) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "session ended");
    }
    if ((batch.items_size() > 0 || batch.recall_bytes() > 0) && !writer->Write(batch)) break;
  }
  return grpc::Status::OK;
}

grpc::Status GrantFsService::Lookup(Ctx* ctx, const proto::LookupRequest* req,
                                    proto::AttrReply* reply) {
  return Serve("Lookup", ctx, req, reply, {req->parent()}, [&](const RequestContext& rc) {
    auto r = volume_->Lookup(rc, req->parent(), req->name());
    if (r.ok()) *reply->mutable_attr() = *r;
    return r.status();
  });
}

grpc::Status GrantFsService::GetAttr(Ctx* ctx, const proto::GetAttrRequest* req,
                                     proto::AttrReply* reply) {
  return Serve("GetAttr", ctx, req, reply, {req->ino()}, [&](const RequestContext& rc) {
    auto r = volume_->GetAttr(rc, req->ino());
    if (r.ok()) *reply->mutable_attr() = *r;
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
        if (r.ok()) *reply->mutable_attr() = *r;
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
        auto r = volume_->MkNod(rc, *req, &created);
        if (r.ok()) *reply->mutable_attr() = *r;
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
        auto r = volume_->Symlink(rc, req->parent(), req->name(), req->target());
        if (r.ok()) *reply->mutable_attr() = *r;
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
        if (r.ok()) *reply->mutable_attr() = *r;
        return r.status();
      });
}

grpc::Status GrantFsService::Remove(Ctx* ctx, const proto::RemoveRequest* req,
                                    proto::ErrReply* reply) {
  return ServeOnce("Remove", ctx, req, reply, {req->parent()}, PriorOk,
                   [&](const RequestContext& rc, const proto::DedupeRecord*) {
                     return volume_->Remove(rc, req->parent(), req->name(), req->is_dir(),
                                            req->expected_ino());
                   });
}

grpc::Status GrantFsService::Rename(Ctx* ctx, const proto::RenameRequest* req,
                                    proto::ErrReply* reply) {
  return ServeOnce("Rename", ctx, req, reply, {req->parent(), req->new_parent()}, PriorOk,
                   [&](const RequestContext& rc, const proto::DedupeRecord*) {
                     return volume_->Rename(rc, *req);
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
    absl::Status s = volume_->ReadDir(rc, req->ino(), req->cookie(), req->max_entries(), reply);
    if (!s.ok()) reply->clear_entries();
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
                     auto r = volume_->Open(rc, req->ino(), flags, req->handle(), req->created());
                     if (r.ok()) *reply->mutable_attr() = *r;
                     return r.status();
                   });
}

grpc::Status GrantFsService::Release(Ctx* ctx, const proto::ReleaseRequest* req,
                                     proto::ErrReply* reply) {
  return Serve("Release", ctx, req, reply, {req->ino()}, [&](const RequestContext& rc) {
    return volume_->Release(rc, req->ino(), req->handle());
  });
}

grpc::Status GrantFsService::Read(Ctx* ctx, const proto::ReadRequest* req,
                                  proto::ReadReply* reply) {
  return Serve("Read", ctx, req, reply, {req->ino()}, [&](const RequestContext& rc) {
    auto r = volume_->Read(rc, req->ino(), req->offset(), req->size());
    if (r.ok()) *reply->mutable_data() = std::move(*r);
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
  return ServeOnce(
      "Write", ctx, req, reply, {req->ino()},
      [&](const proto::DedupeRecord& prior, const RequestContext& rc) {
        // Applied before: the same grant use, the file's attributes now.
        reply->set_grant_used_bytes(prior.value());
        grant_now(rc);
        return PriorAttr(volume_, req->ino(), reply);
      },
      [&](const RequestContext& rc, const proto::DedupeRecord*) {
        uint64_t grant_used = 0;
        FlowControl::Scope in_flight(&volume_->flow(), rc.client_id, req->data().size());
        auto r = volume_->Write(rc, req->ino(), req->offset(), req->data(), req->sync(),
                                req->from_grant(), &grant_used);
        if (r.ok()) *reply->mutable_attr() = *r;
        reply->set_grant_used_bytes(grant_used);
        grant_now(rc);
        return r.status();
      });
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
        SpaceInfo s = volume_->Space();
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

grpc::Status GrantFsService::StatFs(Ctx* ctx, const proto::StatFsRequest* req,
                                    proto::StatFsReply* reply) {
  return Serve("StatFs", ctx, req, reply, {}, [&](const RequestContext&) {
    SpaceInfo s = volume_->Space();
    reply->set_block_size(kBlockSize);
    reply->set_capacity_bytes(s.capacity_bytes);
    reply->set_used_bytes(s.used_bytes);
    // Available = what a new grant could get: nothing granted to any session
    // or held by a write in progress counts as free.
    const uint64_t taken = s.used_bytes + s.granted_bytes + s.reserved_bytes;
    reply->set_available_bytes(s.capacity_bytes > taken ? s.capacity_bytes - taken : 0);
    reply->set_inodes(s.inodes);
    reply->set_name_max(255);
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

grpc::Status GrantFsService::Status(Ctx* ctx, const proto::StatusRequest* req,
                                    proto::StatusReply* reply) {
  // Every role answers Status, also a replica and a fenced primary.
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return auth;
  reply->set_role(options_.role);
  if (options_.server_role != nullptr) options_.server_role->FillStatus(reply);
  if (volume_ == nullptr) return grpc::Status::OK;
  reply->set_volume_id(volume_->meta().store().identity().volume_id());
  reply->set_data_epoch(volume_->meta().store().identity().data_epoch());
  SpaceInfo s = volume_->Space();
  reply->set_capacity_bytes(s.capacity_bytes);
  reply->set_used_bytes(s.used_bytes);
  reply->set_inodes(s.inodes);
  reply->set_next_ino(s.next_ino);
  reply->set_pending_deletes(s.pending_deletes);
  reply->set_granted_bytes(s.granted_bytes);
  reply->set_reserved_bytes(s.reserved_bytes);
  reply->set_ledger_ok(s.ledger_ok);
  reply->set_write_backlog_bytes(volume_->flow().backlog_bytes());
  reply->set_write_budget_bytes(volume_->flow().budget());
  for (auto& info : volume_->sessions().List()) {
    info.set_grant_bytes(SpaceLedger::Bytes(volume_->meta().space().GrantOf(info.client_id())));
    info.set_credit_bytes(volume_->flow().Credit(info.client_id()));
    info.set_peak_writes(volume_->flow().PeakWrites(info.client_id()));
    *reply->add_sessions() = info;
  }
  return grpc::Status::OK;
}

grpc::Status GrantFsService::Switchover(Ctx* ctx, const proto::SwitchoverRequest* req,
                                        proto::ErrReply* reply) {
  return Serve("Switchover", ctx, req, reply, {}, [&](const RequestContext&) {
    if (options_.server_role == nullptr) {
      return ErrnoStatus(ENOTSUP, "standalone server: no replica");
    }
    return options_.server_role->Switchover();
  });
}

grpc::Status GrantFsService::Check(Ctx* ctx, const proto::CheckRequest* req,
                                   proto::CheckReply* reply) {
  return Serve("Check", ctx, req, reply, {}, [&](const RequestContext&) -> absl::Status {
    ASSIGN_OR_RETURN(FsckReport report, volume_->CheckMetadata());
    reply->set_clean(report.clean());
    for (const FsckProblem& p : report.problems) reply->add_problems(p.ToString());
    reply->set_summary(report.Summary());
    reply->set_report_json(report.ToJson());
    ASSIGN_OR_RETURN(*reply->mutable_primary(), volume_->meta().store().DigestWithMark());
    if (options_.server_role == nullptr) {
      reply->set_replica_error("standalone server: no replica");
      return absl::OkStatus();
    }
    // The replica digests its copy when it applies the mark.
    absl::Status replicated = volume_->meta().store().WaitReplicatedAll();
    absl::StatusOr<proto::MetaDigest> theirs =
        replicated.ok() ? options_.server_role->ReplicaDigest(reply->primary().seq()) : replicated;
    if (!theirs.ok()) {
      reply->set_replica_error(std::string(theirs.status().message()));
      return absl::OkStatus();
    }
    *reply->mutable_replica() = *std::move(theirs);
    for (std::string& d : CompareDigests(reply->primary(), reply->replica())) {
      LOG(ERROR) << "check: the replica's metadata differs from the primary's: " << d;
      reply->add_differences(std::move(d));
    }
    return absl::OkStatus();
  });
}

grpc::Status GrantFsService::Echo(Ctx* ctx, const proto::EchoRequest* req,
                                  proto::EchoReply* reply) {
  return Serve("Echo", ctx, req, reply, {}, [&](const RequestContext&) {
    constexpr uint32_t kMaxEchoReply = 8 << 20;
    const uint32_t n = req->reply_bytes();
    if (n > kMaxEchoReply) {
      return ErrnoStatus(EINVAL, "reply_bytes " + std::to_string(n) + " > 8 MiB");
    }
    const std::string& in = req->payload();
    std::string* out = reply->mutable_payload();
    if (in.empty()) {
      out->assign(n, '\x5a');
    } else {
      out->reserve(n);
      while (out->size() < n) out->append(in, 0, std::min<size_t>(in.size(), n - out->size()));
    }
    return absl::OkStatus();
  });
}

}  // namespace grantfs
