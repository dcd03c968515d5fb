// The GrantFs gRPC service as the server registers it: gRPC's callback API
// in front of the handlers of GrantFsService (server/service.h). Each unary
// call is put on the RequestQueue (server/request_queue.h) from gRPC's own
// thread and answered by a worker; a call the queue refuses is answered
// RESOURCE_EXHAUSTED at once (the client retries with a backoff), and a call
// whose caller gave up (deadline passed or cancelled) while it waited is not
// run. A Subscribe stream gets a thread of its own for its life (it waits on
// the session's queue of invalidations), outside the queue's workers.
//
// Thread-safe. The service must outlive the endpoint; Stop() after the gRPC
// server has stopped (Server::Wait) and before the service goes.
#ifndef GRANTFS_SERVER_SERVICE_ENDPOINT_H_
#define GRANTFS_SERVER_SERVICE_ENDPOINT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "proto/grantfs.grpc.pb.h"
#include "server/request_queue.h"
#include "server/service.h"

namespace grantfs {

class GrantFsEndpoint final : public proto::GrantFs::CallbackService {
 public:
  GrantFsEndpoint(GrantFsService* service, const RequestQueueOptions& options);
  ~GrantFsEndpoint() override;

  // Runs the calls still queued and ends the workers.
  void Stop() { queue_.Stop(); }
  RequestQueueStats Stats() const { return queue_.Stats(); }
  // What Status answers: the request queue's counts and the service's.
  void FillStatus(proto::StatusReply* reply);
  bool has_volume() const { return service_->has_volume(); }

  using Ctx = grpc::CallbackServerContext;
  using Unary = grpc::ServerUnaryReactor;
  using S = GrantFsService;
  // The liveness lane (server/request_queue.h): never behind anything else,
  // and run even when the caller gave up while they waited (both are
  // harmless late, and a late ack still ends a change's wait).
  Unary* Heartbeat(Ctx* c, const proto::HeartbeatRequest* q, proto::HeartbeatReply* r) override {
    return Queue(Lane::kLiveness, c, q, r, &S::Heartbeat);
  }
  Unary* AckRecall(Ctx* c, const proto::AckRecallRequest* q, proto::ErrReply* r) override {
    return Queue(Lane::kLiveness, c, q, r, &S::AckRecall);
  }
  // The control lane: sessions, the operators' calls, space given back.
  Unary* OpenSession(Ctx* c, const proto::OpenSessionRequest* q,
                     proto::OpenSessionReply* r) override {
    return Queue(Lane::kControl, c, q, r, &S::OpenSession);
  }
  Unary* Reclaim(Ctx* c, const proto::ReclaimRequest* q, proto::ReclaimReply* r) override {
    return Queue(Lane::kControl, c, q, r, &S::Reclaim);
  }
  Unary* CloseSession(Ctx* c, const proto::CloseSessionRequest* q,
                      proto::CloseSessionReply* r) override {
    return Queue(Lane::kControl, c, q, r, &S::CloseSession);
  }
  // The service's Status, and this queue's figures.
  Unary* Status(Ctx* c, const proto::StatusRequest* q, proto::StatusReply* r) override;
  Unary* Switchover(Ctx* c, const proto::SwitchoverRequest* q, proto::ErrReply* r) override {
    return Queue(Lane::kControl, c, q, r, &S::Switchover);
  }
  Unary* Check(Ctx* c, const proto::CheckRequest* q, proto::CheckReply* r) override {
    return Queue(Lane::kControl, c, q, r, &S::Check);
  }
  // The file system's calls, and Echo (it measures their path).
  Unary* Lookup(Ctx* c, const proto::LookupRequest* q, proto::AttrReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::Lookup);
  }
  Unary* GetAttr(Ctx* c, const proto::GetAttrRequest* q, proto::AttrReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::GetAttr);
  }
  Unary* SetAttr(Ctx* c, const proto::SetAttrRequest* q, proto::AttrReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::SetAttr);
  }
  Unary* MkNod(Ctx* c, const proto::MkNodRequest* q, proto::AttrReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::MkNod);
  }
  Unary* Symlink(Ctx* c, const proto::SymlinkRequest* q, proto::AttrReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::Symlink);
  }
  Unary* Link(Ctx* c, const proto::LinkRequest* q, proto::AttrReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::Link);
  }
  Unary* Remove(Ctx* c, const proto::RemoveRequest* q, proto::RemoveReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::Remove);
  }
  Unary* Rename(Ctx* c, const proto::RenameRequest* q, proto::RenameReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::Rename);
  }
  Unary* InodeRange(Ctx* c, const proto::InodeRangeRequest* q, proto::InodeRangeReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::InodeRange);
  }
  // A mount's log is how it answers the recall of a namespace grant, which
  // calls of the work lane may be waiting for: never queued behind them.
  Unary* ApplyLog(Ctx* c, const proto::ApplyLogRequest* q, proto::ApplyLogReply* r) override {
    return Queue(Lane::kControl, c, q, r, &S::ApplyLog);
  }
  Unary* ReadLink(Ctx* c, const proto::ReadLinkRequest* q, proto::ReadLinkReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::ReadLink);
  }
  Unary* ReadDir(Ctx* c, const proto::ReadDirRequest* q, proto::ReadDirReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::ReadDir);
  }
  Unary* Open(Ctx* c, const proto::OpenRequest* q, proto::OpenReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::Open);
  }
  Unary* Release(Ctx* c, const proto::ReleaseRequest* q, proto::ReleaseReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::Release);
  }
  Unary* Read(Ctx* c, const proto::ReadRequest* q, proto::ReadReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::Read);
  }
  Unary* Write(Ctx* c, const proto::WriteRequest* q, proto::WriteReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::Write);
  }
  // A Grant that only gives space back is what writers waiting for space
  // (on workers) wait for: the control lane.
  Unary* Grant(Ctx* c, const proto::GrantRequest* q, proto::GrantReply* r) override {
    const bool gives_back = q->wanted_bytes() == 0 && q->return_bytes() > 0;
    return Queue(gives_back ? Lane::kControl : Lane::kWork, c, q, r, &S::Grant);
  }
  Unary* Fsync(Ctx* c, const proto::FsyncRequest* q, proto::ErrReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::Fsync);
  }
  Unary* Fallocate(Ctx* c, const proto::FallocateRequest* q, proto::AttrReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::Fallocate);
  }
  Unary* StatFs(Ctx* c, const proto::StatFsRequest* q, proto::StatFsReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::StatFs);
  }
  Unary* SetXattr(Ctx* c, const proto::SetXattrRequest* q, proto::ErrReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::SetXattr);
  }
  Unary* GetXattr(Ctx* c, const proto::GetXattrRequest* q, proto::GetXattrReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::GetXattr);
  }
  Unary* ListXattr(Ctx* c, const proto::ListXattrRequest* q, proto::ListXattrReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::ListXattr);
  }
  Unary* RemoveXattr(Ctx* c, const proto::RemoveXattrRequest* q, proto::ErrReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::RemoveXattr);
  }
  Unary* GetLock(Ctx* c, const proto::LockRequest* q, proto::GetLockReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::GetLock);
  }
  Unary* SetLock(Ctx* c, const proto::LockRequest* q, proto::ErrReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::SetLock);
  }
  Unary* Echo(Ctx* c, const proto::EchoRequest* q, proto::EchoReply* r) override {
    return Queue(Lane::kWork, c, q, r, &S::Echo);
  }

  grpc::ServerWriteReactor<proto::InvalidationBatch>* Subscribe(
      Ctx* c, const proto::SubscribeRequest* q) override;

 private:
  template <typename Req, typename Reply>
  using Handler = grpc::Status (GrantFsService::*)(GrantFsService::Ctx*, const Req*, Reply*);

  // Who the call counts against: the client connection it came on (a
  // mount has one per server), which a caller cannot choose to be another's.
  static uint64_t SourceOf(const Ctx& ctx);
  void FillQueueStatus(proto::StatusReply* reply);

  template <typename Req, typename Reply>
  Unary* Queue(Lane lane, Ctx* ctx, const Req* req, Reply* reply, Handler<Req, Reply> handler) {
    Unary* reactor = ctx->DefaultReactor();
    const bool queued = queue_.Submit(
        lane, SourceOf(*ctx),
        [=, service = service_] {
          // The caller gave up (cancelled, or its deadline passed) while the
          // call waited: nothing was done, and nobody waits for the answer.
          if (lane != Lane::kLiveness && ctx->IsCancelled()) {
            reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "gave up while queued"));
            return;
          }
          reactor->Finish((service->*handler)(ctx, req, reply));
        },
        req->ByteSizeLong());
    if (!queued) {
      reactor->Finish(
          grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "server busy: retry with a backoff"));
    }
    return reactor;
  }

  GrantFsService* const service_;
  RequestQueue queue_;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_SERVICE_ENDPOINT_H_
