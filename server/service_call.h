// How the service serves one call, the machinery behind every handler of
// GrantFsService (server/service.h): the gate (only the serving primary
// answers), authentication and the session's renewal (Begin), the client's
// write credit on the reply (CreditOnReply), the errno of the outcome in the
// reply (Done), and exactly-once for calls that change something (Once,
// server/dedupe.h: the request's tag travels in the RequestContext). The
// Serve and ServeOnce templates are defined here for the handler files
// (service.cc, service_fs.cc); nothing else includes this header.
#ifndef GRANTFS_SERVER_SERVICE_CALL_H_
#define GRANTFS_SERVER_SERVICE_CALL_H_

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/errno_status.h"
#include "glog/logging.h"
#include "server/dedupe.h"
#include "server/service.h"

namespace grantfs {
namespace service_call {

// The metadata leases a change of this kind may have touched, from its
// request alone (for a retry: Volume recalls the exact ones on the first
// attempt). One for each request ServeOnce serves (service_fs.cc).
std::vector<LeaseKey> ChangedKeys(const proto::SetAttrRequest& r);
std::vector<LeaseKey> ChangedKeys(const proto::MkNodRequest& r);
std::vector<LeaseKey> ChangedKeys(const proto::SymlinkRequest& r);
std::vector<LeaseKey> ChangedKeys(const proto::LinkRequest& r);
std::vector<LeaseKey> ChangedKeys(const proto::RemoveRequest& r);
std::vector<LeaseKey> ChangedKeys(const proto::RenameRequest& r);
std::vector<LeaseKey> ChangedKeys(const proto::OpenRequest& r);
std::vector<LeaseKey> ChangedKeys(const proto::WriteRequest& r);
std::vector<LeaseKey> ChangedKeys(const proto::FallocateRequest& r);
std::vector<LeaseKey> ChangedKeys(const proto::SetXattrRequest& r);
std::vector<LeaseKey> ChangedKeys(const proto::RemoveXattrRequest& r);
std::vector<LeaseKey> ChangedKeys(const proto::LockRequest& r);
std::vector<LeaseKey> ChangedKeys(const proto::GrantRequest& r);
std::vector<LeaseKey> ChangedKeys(const proto::InodeRangeRequest& r);

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
  // The caller may not do this at all (server/subtree.h; logged where it
  // was decided).
  if (absl::IsPermissionDenied(s) && !HasErrno(s)) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, std::string(s.message()));
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

inline bool ValidIno(uint64_t ino) { return ino != 0; }

// Exactly-once for a request that changes something (server/dedupe.h):
// waits out an earlier attempt still running, finds the outcome of one that
// was applied, and otherwise gives the request's tag (tag()) for the
// RequestContext, so that the change records it. Lives on the stack of the
// one thread that serves the request.
class Once {
 public:
  Once(Volume* volume, const proto::RequestHeader& header);
  ~Once();
  Once(const Once&) = delete;
  Once& operator=(const Once&) = delete;
  // UNAVAILABLE (the client retries) when an earlier attempt is still running.
  grpc::Status busy() const;
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

// A retried request that was applied: the reply carries the inode's
// attributes as they are now.
template <typename Reply>
absl::Status PriorAttr(Volume* volume, uint64_t ino, Reply* reply) {
  auto a = volume->meta().inodes().GetAttr(ino);
  if (a.ok()) *reply->mutable_attr() = *a;
  return a.status();
}

// Answers a retry of an applied request that replies with nothing but err.
absl::Status PriorOk(const proto::DedupeRecord&, const RequestContext&);

// The caller a request's credentials stand for, under what the node's
// certificate allows (ids as reported, root squashed, or nobody).
Caller CallerOf(const proto::Creds& creds, const CallerPolicy& policy);

}  // namespace service_call

// Every reply carries the client's in-flight write credit as trailing
// metadata, computed as the handler ends (after its own write left the
// backlog).
class CreditOnReply {
 public:
  CreditOnReply(grpc::ServerContextBase* ctx, FlowControl* flow) : ctx_(ctx), flow_(flow) {}
  ~CreditOnReply() {
    if (client_id_ != 0) {
      ctx_->AddTrailingMetadata("x-grantfs-credit", std::to_string(flow_->Credit(client_id_)));
    }
  }
  void set_client_id(uint64_t id) { client_id_ = id; }

 private:
  grpc::ServerContextBase* const ctx_;
  FlowControl* const flow_;
  uint64_t client_id_ = 0;
};

template <bool kChange, typename Req, typename Reply, typename Body>
grpc::Status GrantFsService::Serve(const char* op, Ctx* ctx, const Req* req, Reply* reply,
                                   std::initializer_list<uint64_t> inos, Body body) {
  if (options_.refuse) {
    if (grpc::Status refused = options_.refuse(op); !refused.ok()) return refused;
  }
  OpTimer timer(options_.metrics != nullptr ? options_.metrics->calls().For(op) : nullptr);
  if (grpc::Status gate = Gate(); !gate.ok()) return gate;
  RequestContext rc;
  CreditOnReply credit_on_reply(ctx, &volume_->flow());
  if (grpc::Status auth = Begin(ctx, req->header(), &rc); !auth.ok()) return auth;
  credit_on_reply.set_client_id(rc.client_id);
  for (uint64_t ino : inos) {
    if (!service_call::ValidIno(ino))
      return service_call::Done(op, ErrnoStatus(EINVAL, "inode 0"), reply);
    if (absl::Status in = Reaches(ctx, rc, op, ino); !in.ok())
      return service_call::Done(op, in, reply);
  }
  if constexpr (std::is_same_v<Req, proto::WriteRequest>) rc.log_entry = GrantedWrite(rc, *req);
  const absl::Span<const uint64_t> named = absl::MakeConstSpan(inos.begin(), inos.size());
  // A change is seen by a grant of an existing directory asked for while
  // it is under way (Volume::GrantDir), which would miss it otherwise: it
  // checked for grants before there was one.
  if constexpr (kChange) volume_->leases().BeginChange(named);
  // Another session's namespace grant covering them is recalled first.
  volume_->BreakGrants(rc, named);
  const absl::Status done = body(rc);
  if constexpr (kChange) volume_->leases().EndChange(named);
  return service_call::Done(op, done, reply);
}

template <typename Req, typename Reply, typename Prior, typename Body>
grpc::Status GrantFsService::ServeOnce(const char* op, Ctx* ctx, const Req* req, Reply* reply,
                                       std::initializer_list<uint64_t> inos, Prior prior,
                                       Body body) {
  // Once lives until the reply is built: it holds the request in flight
  // and owns the tag that the change records.
  std::optional<service_call::Once> once;
  grpc::Status busy;
  grpc::Status st =
      Serve<true>(op, ctx, req, reply, inos, [&](const RequestContext& rc) -> absl::Status {
        // A read-only node changes nothing; Open and SetLock change only what
        // a reader may (Open checks its flags itself).
        if (rc.read_only && std::string_view(op) != "Open" && std::string_view(op) != "SetLock") {
          return ErrnoStatus(EROFS, "a read-only node");
        }
        once.emplace(volume_, req->header());
        if (busy = once->busy(); !busy.ok()) return absl::OkStatus();
        if (!once->error().ok()) return once->error();
        RequestContext tagged = rc;
        tagged.tag = once->tag();
        const proto::DedupeRecord* record = once->prior() ? &*once->prior() : nullptr;
        // A retry of a change that was applied (its first reply was lost, or
        // its replication was not confirmed then): the other nodes' leases on
        // what it changed are recalled before this answer, as the first attempt
        // may not have got to it.
        if (record != nullptr)
          volume_->Recall(tagged, Reachable(rc, service_call::ChangedKeys(*req)));
        if constexpr (!std::is_same_v<Prior, std::nullptr_t>) {
          if (record != nullptr) return prior(*record, tagged);
        }
        absl::Status done = body(tagged, record);
        // Applied here, not known to be replicated: the change returned before
        // its own recall, and the client retries (or gives up); other nodes'
        // leases on it go now.
        if (absl::IsUnavailable(done) && !HasErrno(done)) {
          volume_->Recall(tagged, Reachable(rc, service_call::ChangedKeys(*req)));
        }
        return done;
      });
  return busy.ok() ? st : busy;
}

}  // namespace grantfs

#endif  // GRANTFS_SERVER_SERVICE_CALL_H_
