// The client's connection to the GrantFS server: one gRPC channel, a
// deadline on every call, and the retry policy of the abseil status words:
// UNAVAILABLE (server unreachable or restarting) and RESOURCE_EXHAUSTED
// (all of the server's threads busy: gRPC refuses the call rather than queue
// it) are retried with backoff
// until `retry_for` runs out; everything else is returned at once.
//
// A reply's `err` field becomes an errno status, so callers see one kind of
// error. Thread-safe.
#ifndef GRANTFS_CLIENT_RPC_CLIENT_H_
#define GRANTFS_CLIENT_RPC_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/errno_status.h"
#include "common/grpc_status.h"
#include "proto/grantfs.grpc.pb.h"

namespace grantfs {

struct RpcClientOptions {
  // Server addresses, "host:port". The first is used; the others are for
  // failover. Required.
  std::vector<std::string> servers;
  // Cluster secret sent with every call ("" = none).
  std::string secret;
  // Deadline of one attempt of one call.
  absl::Duration call_timeout = absl::Seconds(30);
  // How long UNAVAILABLE / RESOURCE_EXHAUSTED are retried before the call
  // fails with EIO.
  absl::Duration retry_for = absl::Seconds(60);
};

class RpcClient {
 public:
  static absl::StatusOr<std::unique_ptr<RpcClient>> Create(const RpcClientOptions& options);

  proto::GrantFs::Stub* stub() { return stub_.get(); }
  const RpcClientOptions& options() const { return options_; }

  void set_client_id(uint64_t id) { client_id_.store(id); }
  uint64_t client_id() const { return client_id_.load(); }

  // Stamps the header (client id, sequence), then calls `method` with the
  // deadline and retry policy. OK only when the RPC succeeded and the reply's
  // err is 0; otherwise an errno status (ToErrno() gives the errno).
  template <typename Req, typename Reply>
  absl::Status Call(const char* name,
                    grpc::Status (proto::GrantFs::Stub::*method)(grpc::ClientContext*, const Req&,
                                                                 Reply*),
                    Req* req, Reply* reply) {
    req->mutable_header()->set_client_id(client_id_.load());
    req->mutable_header()->set_seq(seq_.fetch_add(1) + 1);
    const absl::Time give_up = absl::Now() + options_.retry_for;
    absl::Duration backoff = absl::Milliseconds(20);
    for (;;) {
      grpc::ClientContext ctx;
      PrepareContext(&ctx, options_.call_timeout);
      grpc::Status s = (stub_.get()->*method)(&ctx, *req, reply);
      if (s.ok()) {
        NoteCredit(ctx);
        return ErrnoStatus(reply->err(), name);
      }
      const bool transient = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
      if (!transient || absl::Now() + backoff > give_up) {
        return Failed(name, s);
      }
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(1));
    }
  }

  // The server's latest in-flight write credit for this client, in bytes
  // (trailing metadata "x-grantfs-credit" of every reply); 0 until the
  // server has said.
  uint64_t credit_bytes() const { return credit_bytes_.load(std::memory_order_relaxed); }
  // Takes the credit from a finished call's trailing metadata.
  void NoteCredit(const grpc::ClientContext& ctx);
  // One attempt of `method` on a context the caller prepared (PrepareContext)
  // and may cancel from another thread (TryCancel): for work that can be
  // given up, such as read-ahead. No retry and no log; the status is as
  // Call's.
  template <typename Req, typename Reply>
  absl::Status CallOnce(const char* name,
                        grpc::Status (proto::GrantFs::Stub::*method)(grpc::ClientContext*,
                                                                     const Req&, Reply*),
                        grpc::ClientContext* ctx, Req* req, Reply* reply) {
    req->mutable_header()->set_client_id(client_id_.load());
    req->mutable_header()->set_seq(seq_.fetch_add(1) + 1);
    grpc::Status s = (stub_.get()->*method)(ctx, *req, reply);
    if (s.ok()) return ErrnoStatus(reply->err(), name);
    return ToStatus(name, s);
  }

  // Sets the deadline and the secret on a context (also for streams).
  void PrepareContext(grpc::ClientContext* ctx, absl::Duration timeout) const;

 private:
  explicit RpcClient(const RpcClientOptions& options) : options_(options) {}
  // Logs a failed RPC and returns ToStatus().
  absl::Status Failed(const char* name, const grpc::Status& s) const;
  // A failed RPC as an errno status: ETIMEDOUT, EACCES (bad secret) or EIO.
  static absl::Status ToStatus(const char* name, const grpc::Status& s);

  const RpcClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::GrantFs::Stub> stub_;
  std::atomic<uint64_t> client_id_{0};
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint64_t> credit_bytes_{0};
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_RPC_CLIENT_H_
