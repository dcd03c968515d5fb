// Serves Prometheus metrics over plain HTTP: GET /metrics answers with the
// text a callback writes (common/metrics.h). Plain text, no
// authentication: bind it to loopback or a management network
// (docs/metrics.md). cpp-httplib (Debian's libcpp-httplib-dev) does the HTTP.
#ifndef GRANTFS_COMMON_METRICS_HTTP_H_
#define GRANTFS_COMMON_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace grantfs {

class MetricsServer {
 public:
  // Listens on `addr` ("host:port"; port 0: any free one) and serves
  // `render()` at /metrics from its own threads; `render` must be safe to
  // call from them until this is destroyed. An error when it cannot listen.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& addr,
                                                              std::function<std::string()> render);
  ~MetricsServer();  // stops listening and joins its threads
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace grantfs

#endif  // GRANTFS_COMMON_METRICS_HTTP_H_
