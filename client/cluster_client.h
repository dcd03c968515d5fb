// A client of the Cluster service (proto/cluster.proto) of whichever
// server is the primary: grantfsctl's global-mount commands and the node
// agent (client/node_agent.h) use it.
//
// Each call has a deadline. UNAVAILABLE (a replica, a fenced primary, a
// server down), DEADLINE_EXCEEDED and UNIMPLEMENTED (a witness, an older
// server) move the call to the next server; a
// round over every server that found no primary is tried again, after
// waiting up to a second for a connection, until `retry_for` ends. Every
// other status (INVALID_ARGUMENT, PERMISSION_DENIED, ...) and CANCELLED are
// returned at once. When no server answers, the status names each address
// tried and what it said.
//
// Thread-safe.
#ifndef GRANTFS_CLIENT_CLUSTER_CLIENT_H_
#define GRANTFS_CLIENT_CLUSTER_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "common/keepalive.h"
#include "common/transport.h"
#include "proto/cluster.grpc.pb.h"

namespace grantfs {

struct ClusterClientOptions {
  // "host:port" of every server (the primary and its replica). Required.
  std::vector<std::string> servers;
  // TLS and the cluster secret (common/transport.h).
  Transport transport;
  // Deadline of one attempt, beyond the time a call asks the server to
  // wait (Heartbeat's wait_ms). Default 5 s.
  absl::Duration call_timeout = absl::Seconds(5);
  // How long rounds over the servers are tried when none is the primary.
  // Default 0: one round.
  absl::Duration retry_for = absl::ZeroDuration();
};

class ClusterClient {
 public:
  // INVALID_ARGUMENT without servers or with an empty address.
  static absl::StatusOr<std::unique_ptr<ClusterClient>> Create(const ClusterClientOptions& options);

  template <typename Req, typename Reply>
  using Method = grpc::Status (proto::Cluster::Stub::*)(grpc::ClientContext*, const Req&, Reply*);

  // Called with each attempt's context before it starts, and with nullptr
  // when it ended: a caller that wants to cancel the call (TryCancel) from
  // another thread keeps it meanwhile.
  using ContextHook = std::function<void(grpc::ClientContext*)>;

  // Calls `method` on the primary. `extra` is added to the deadline of each
  // attempt (a long poll's wait). `*server` (if given) is set to the
  // address that answered.
  template <typename Req, typename Reply>
  absl::Status Call(Method<Req, Reply> method, const Req& req, Reply* reply,
                    absl::Duration extra = absl::ZeroDuration(), const ContextHook& hook = nullptr,
                    std::string* server = nullptr) {
    const absl::Time give_up = absl::Now() + options_.retry_for;
    for (;;) {
      std::vector<std::string> tried;
      const size_t first = preferred_.load();
      for (size_t k = 0; k < servers_.size(); ++k) {
        const size_t i = (first + k) % servers_.size();
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout + extra));
        options_.transport.AddTo(&ctx);
        if (hook) hook(&ctx);
        Reply attempt;
        grpc::Status s = (servers_[i].stub.get()->*method)(&ctx, req, &attempt);
        if (hook) hook(nullptr);
        if (s.ok()) {
          preferred_ = i;
          *reply = std::move(attempt);
          if (server != nullptr) *server = servers_[i].address;
          return absl::OkStatus();
        }
        // UNIMPLEMENTED: no Cluster service there (a witness listed by
        // mistake, or a server older than global mounts): not the primary.
        if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
            s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED &&
            s.error_code() != grpc::StatusCode::UNIMPLEMENTED) {
          if (server != nullptr) *server = servers_[i].address;
          return FromGrpcStatus(s);
        }
        tried.push_back(absl::StrCat(servers_[i].address, ": ",
                                     s.error_code() == grpc::StatusCode::UNIMPLEMENTED
                                         ? "no global mounts there (a witness, or an older server)"
                                         : s.error_message()));
      }
      if (absl::Now() >= give_up) {
        return absl::UnavailableError(
            absl::StrCat("no primary answered (", absl::StrJoin(tried, "; "), ")"));
      }
      WaitForAConnection(std::min(absl::Seconds(1), give_up - absl::Now()));
    }
  }

  // Waits up to `d` (at least 100 ms), polling each server's connection
  // (common/keepalive.h WaitForConnected): between rounds that found no
  // primary.
  void WaitForAConnection(absl::Duration d);

  const std::vector<std::string>& addresses() const { return addresses_; }

 private:
  struct Server {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<proto::Cluster::Stub> stub;
  };
  explicit ClusterClient(const ClusterClientOptions& options) : options_(options) {}

  // Constant after construction.
  const ClusterClientOptions options_;
  std::vector<Server> servers_;
  std::vector<std::string> addresses_;
  // The server that answered last: calls start there.
  std::atomic<size_t> preferred_{0};
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_CLUSTER_CLIENT_H_
