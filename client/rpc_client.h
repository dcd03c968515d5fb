// The client's connection to the GrantFS servers: one gRPC channel per
// server, a deadline on every call, and the retry policy of the abseil status
// words. UNAVAILABLE (server unreachable or restarting, or a replica saying
// it is not the primary), and DEADLINE_EXCEEDED when there are several
// servers, move the client to the next server and retry there; with one
// server they are retried on it. RESOURCE_EXHAUSTED (all of the server's
// threads busy: gRPC refuses the call rather than queue it) is retried on the
// same server: it is alive, a replica would not serve the call. Retries
// resend the same request header (client id, seq): the servers deduplicate
// them, so each operation takes effect once. They go on with backoff until
// `retry_for` runs out; everything else is returned at once.
//
// A reply's `err` field becomes an errno status, so callers see one kind of
// error. Thread-safe.
#ifndef GRANTFS_CLIENT_RPC_CLIENT_H_
#define GRANTFS_CLIENT_RPC_CLIENT_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/impl/rpc_method.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/errno_status.h"
#include "common/grpc_status.h"
#include "common/transport.h"
#include "glog/logging.h"
#include "proto/grantfs.grpc.pb.h"

namespace grantfs {

// The servers of a comma-separated list "HOST[:PORT],...", each with port
// 7420 when it names none (empty names are skipped).
std::vector<std::string> ServerAddresses(absl::string_view list);

struct RpcClientOptions {
  // Server addresses, "host:port": the primary and its replica, in any order.
  // Calls go to the first until it fails, then to the next. Required.
  std::vector<std::string> servers;
  // TLS and the cluster secret (common/transport.h); default: neither.
  Transport transport;
  // Deadline of one attempt of one call.
  absl::Duration call_timeout = absl::Seconds(30);
  // How long transient failures are retried before the call fails with EIO
  // (ETIMEDOUT when the last attempt ran out of time).
  absl::Duration retry_for = absl::Seconds(60);
  // Measures `retry_for`: monotonic, so that a step of the wall clock
  // neither stretches nor cuts a call's retries. (The deadline of one
  // attempt, and the wait between attempts, are gRPC's and run on real
  // time.) Not owned.
  Clock* clock = Clock::Monotonic();
  // Makes the channel to one server from its address and the channel
  // arguments RpcClient chose. Unset (the default): transport.Connect. The
  // fuzz target of the mount's reply handling (client/reply_fuzz.cc) hands
  // an in-process channel to a fake server here.
  std::function<std::shared_ptr<grpc::Channel>(const std::string& address,
                                               const grpc::ChannelArguments& args)>
      connect;
};

class RpcClient {
 public:
  // InvalidArgument without servers. Connects lazily: a server that is down
  // is noticed by the first call.
  static absl::StatusOr<std::unique_ptr<RpcClient>> Create(const RpcClientOptions& options);

  // The current server's stub: for streams and calls made outside Call().
  // Such a caller reads current() first, uses stub(index) and, when the
  // call fails so that ShouldFailover() says so, calls Failover(index).
  proto::GrantFs::Stub* stub() { return stub(current()); }
  proto::GrantFs::Stub* stub(size_t index) { return servers_[index].stub.get(); }
  size_t current() const { return current_.load(); }
  size_t server_count() const { return servers_.size(); }
  const std::string& address(size_t index) const { return options_.servers[index]; }
  // The channel to one server (tests look at its connectivity).
  grpc::Channel* channel(size_t index) const { return servers_[index].channel.get(); }
  // True when a call that failed with `s` should be tried on the next server:
  // UNAVAILABLE, and DEADLINE_EXCEEDED when there are several servers.
  bool ShouldFailover(const grpc::Status& s) const;
  // Moves to the server after `seen` when `seen` is still the current one
  // (so that concurrent failures of one server advance once), logging the
  // switch with `why`. Returns the current server afterwards.
  size_t Failover(size_t seen, const grpc::Status& why);

  const RpcClientOptions& options() const { return options_; }
  // Called (on the failing caller's thread, with no lock held) after each
  // move to the next server. Set before the first call; not thread-safe.
  void set_on_failover(std::function<void()> fn) { on_failover_ = std::move(fn); }

  void set_client_id(uint64_t id) { client_id_.store(id); }
  uint64_t client_id() const { return client_id_.load(); }
  // A sequence number no request of this client carries: for an operation
  // sent later in a namespace log (proto LogEntry.seq), deduplicated by the
  // server like a request.
  uint64_t NextSeq() { return seq_.fetch_add(1) + 1; }

  // Stamps the header (client id, sequence), then calls `method` with the
  // deadline and the retry and failover policy. OK only when the RPC
  // succeeded and the reply's err is 0; otherwise an errno status (ToErrno()
  // gives the errno).
  template <typename Req, typename Reply>
  absl::Status Call(const char* name,
                    grpc::Status (proto::GrantFs::Stub::*method)(grpc::ClientContext*, const Req&,
                                                                 Reply*),
                    Req* req, Reply* reply,
                    std::optional<absl::Duration> retry_for = std::nullopt) {
    return CallWith(
        name, req, reply,
        [this, method](size_t index, grpc::ClientContext* ctx, const Req& r, Reply* out) {
          return (stub(index)->*method)(ctx, r, out);
        },
        retry_for);
  }

  // Call() with the data of the request sent from `data`, without copying
  // it into the request or into gRPC's buffers: gRPC holds a reference to
  // `data` until the bytes are on the socket, which may be after this
  // returns, so the caller must not change the string afterwards (it may
  // drop its reference). `req` must have no data of its own.
  absl::Status Write(proto::WriteRequest* req, std::shared_ptr<const std::string> data,
                     proto::WriteReply* reply);

  // Call()'s retry and failover policy around `invoke(index, ctx, req,
  // reply)`, which makes one attempt on server `index`. `retry_for`, when
  // given, replaces the options' for this call and bounds each attempt's
  // deadline too (a mount that must come up or fail within a bound).
  template <typename Req, typename Reply, typename Invoke>
  absl::Status CallWith(const char* name, Req* req, Reply* reply, Invoke invoke,
                        std::optional<absl::Duration> retry_for = std::nullopt) {
    req->mutable_header()->set_client_id(client_id_.load());
    req->mutable_header()->set_seq(seq_.fetch_add(1) + 1);
    VLOG(3) << "rpc " << name;
    const absl::Time give_up = options_.clock->Now() + retry_for.value_or(options_.retry_for);
    absl::Duration backoff = absl::Milliseconds(20);
    size_t failed = 0;  // attempts since the last sleep
    for (;;) {
      const size_t index = current();
      grpc::ClientContext ctx;
      // A bound of its own holds for each attempt too (a server that
      // accepts the connection and never answers).
      PrepareContext(&ctx, retry_for ? std::clamp(give_up - options_.clock->Now(),
                                                  absl::Milliseconds(1), options_.call_timeout)
                                     : options_.call_timeout);
      grpc::Status s = invoke(index, &ctx, *req, reply);
      if (s.ok()) {
        NoteCredit(ctx);
        return ErrnoStatus(reply->err(), name);
      }
      // CANCELLED: this call's context is never cancelled here, so the
      // server dropped the call (it was shutting down for a role change,
      // server/roles.cc): like UNAVAILABLE, the next server is tried, and a
      // change the dropped call made is found by the retry (dedupe).
      const bool failover = ShouldFailover(s) || s.error_code() == grpc::StatusCode::CANCELLED;
      if (!failover && s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
        return Failed(name, index, s);
      }
      // Each server is tried once before sleeping: after a failover the
      // other server usually answers at once.
      const bool sleep = !failover || ++failed >= servers_.size();
      if (options_.clock->Now() + (sleep ? backoff : absl::ZeroDuration()) > give_up) {
        return Failed(name, index, s);
      }
      if (failover) Failover(index, s);
      if (sleep) {
        failed = 0;
        WaitForServer(backoff);
        backoff = std::min(backoff * 2, max_backoff_);
      }
    }
  }

  // The server's latest in-flight write credit for this client, in bytes
  // (trailing metadata "x-grantfs-credit" of every reply); 0 until the
  // server has said.
  uint64_t credit_bytes() const { return credit_bytes_.load(std::memory_order_relaxed); }
  // Takes the credit from a finished call's trailing metadata.
  void NoteCredit(const grpc::ClientContext& ctx);
  // One attempt of `method` on the current server, on a context the caller
  // prepared (PrepareContext) and may cancel from another thread
  // (TryCancel): for work that can be given up, such as read-ahead. No retry
  // and no log; a failure that ShouldFailover() moves later calls to the
  // next server. The status is as Call's.
  template <typename Req, typename Reply>
  absl::Status CallOnce(const char* name,
                        grpc::Status (proto::GrantFs::Stub::*method)(grpc::ClientContext*,
                                                                     const Req&, Reply*),
                        grpc::ClientContext* ctx, Req* req, Reply* reply) {
    req->mutable_header()->set_client_id(client_id_.load());
    req->mutable_header()->set_seq(seq_.fetch_add(1) + 1);
    const size_t index = current();
    grpc::Status s = (stub(index)->*method)(ctx, *req, reply);
    if (s.ok()) return ErrnoStatus(reply->err(), name);
    if (ShouldFailover(s)) Failover(index, s);
    return ToStatus(name, s);
  }

  // Waits `d`, or less if the current server's channel gets connected
  // meanwhile (true: try it at once), polling gRPC: WaitForConnected
  // (common/keepalive.h). Every wait between retries goes through here.
  bool WaitForServer(absl::Duration d);

  // Sets the deadline and the secret on a context (also for streams).
  void PrepareContext(grpc::ClientContext* ctx, absl::Duration timeout) const;

 private:
  struct Server {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<proto::GrantFs::Stub> stub;
    // GrantFs.Write, registered on `channel`, for Write()'s raw requests.
    std::unique_ptr<grpc::internal::RpcMethod> write_method;
  };

  explicit RpcClient(const RpcClientOptions& options);
  // Logs a failed RPC to server `index` and returns ToStatus().
  absl::Status Failed(const char* name, size_t index, const grpc::Status& s) const;
  // A failed RPC as an errno status: ETIMEDOUT, EACCES (refused: bad secret,
  // a certificate of the wrong kind) or EIO.
  static absl::Status ToStatus(const char* name, const grpc::Status& s);

  // Constant after construction.
  const RpcClientOptions options_;
  std::vector<Server> servers_;        // one per options_.servers, same order
  std::function<void()> on_failover_;  // set before the first call
  absl::Duration max_backoff_;         // between rounds of failed attempts

  std::atomic<size_t> current_{0};  // index into servers_
  std::atomic<uint64_t> client_id_{0};
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint64_t> credit_bytes_{0};
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_RPC_CLIENT_H_
