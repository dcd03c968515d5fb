#include "server/service_endpoint.h"

#include <functional>
#include <string>
#include <system_error>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

// One Subscribe stream. GrantFsService::Subscribe blocks for the life of the
// stream (it waits on the session's queue), so it runs on a thread of its
// own, never on gRPC's callback threads nor on the request queue's workers;
// it sends each batch through Write, which waits for gRPC to take it.
class SubscribeReactor final : public grpc::ServerWriteReactor<proto::InvalidationBatch> {
 public:
  SubscribeReactor(GrantFsService* service, grpc::CallbackServerContext* ctx,
                   const proto::SubscribeRequest* req) {
    // Detached: the thread's last act is Finish, after which gRPC calls
    // OnDone, which deletes the reactor; the server's Wait() returns only
    // after every OnDone, so the service outlives the thread's work.
    try {
      std::thread([this, service, ctx, req] {
        grpc::Status s = service->Subscribe(
            ctx, req, [this](const proto::InvalidationBatch& b) { return Write(b); });
        Finish(s);
      }).detach();
    } catch (const std::system_error& e) {
      LOG(ERROR) << "cannot start a thread for a Subscribe stream: " << e.what();
      Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no thread for the stream"));
    }
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock l(&mu_);
    write_ok_ = ok;
    writing_ = false;
  }
  void OnDone() override { delete this; }

 private:
  // Sends `batch`; false when the stream broke (the client went away).
  bool Write(const proto::InvalidationBatch& batch) {
    {
      absl::MutexLock l(&mu_);
      writing_ = true;
    }
    // Outside mu_: gRPC may run OnWriteDone before StartWrite returns.
    StartWrite(&batch);
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](bool* writing) { return !*writing; }, &writing_));
    return write_ok_;
  }

  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace

GrantFsEndpoint::GrantFsEndpoint(GrantFsService* service, const RequestQueueOptions& options)
    : service_(service), queue_(options) {}

GrantFsEndpoint::~GrantFsEndpoint() { queue_.Stop(); }

void GrantFsEndpoint::FillQueueStatus(proto::StatusReply* reply) {
  const RequestQueueStats q = queue_.Stats();
  reply->set_calls_queued(q.queued);
  reply->set_calls_running(q.running);
  reply->set_calls_admitted(q.admitted);
  reply->set_calls_refused(q.refused);
  reply->set_calls_peak_queued(q.peak_queued);
}

void GrantFsEndpoint::FillStatus(proto::StatusReply* reply) {
  FillQueueStatus(reply);
  service_->FillStatus(reply);
}

uint64_t GrantFsEndpoint::SourceOf(const Ctx& ctx) {
  // "ipv4:127.0.0.1:40312": the client's address and port, one per
  // connection.
  return std::hash<std::string>()(ctx.peer());
}

grpc::ServerUnaryReactor* GrantFsEndpoint::Status(Ctx* ctx, const proto::StatusRequest* req,
                                                  proto::StatusReply* reply) {
  // Taken when the call is made, so a busy queue shows as it was, not as
  // it is after this call waited its turn.
  FillQueueStatus(reply);
  return Queue(Lane::kControl, ctx, req, reply, &GrantFsService::Status);
}

grpc::ServerWriteReactor<proto::InvalidationBatch>* GrantFsEndpoint::Subscribe(
    Ctx* ctx, const proto::SubscribeRequest* req) {
  return new SubscribeReactor(service_, ctx, req);
}

}  // namespace grantfs
