// Serves Prometheus metrics over plain HTTP: GET /metrics answers with the
// text a callback writes (common/metrics.h). Plain text, no
// authentication: bind it to loopback or a management network
// (docs/metrics.md). GNU libmicrohttpd (Debian's libmicrohttpd-dev) does the
// HTTP, on one thread of its own, with hard bounds, so that no HTTP client
// can make the process that serves it (a server, a mount) use much memory,
// hold many descriptors or wait to exit: at most 16 connections (4 per
// address), 16 KiB of memory each, closed after 5 s idle; request bodies are
// refused, not read.
#ifndef GRANTFS_COMMON_METRICS_HTTP_H_
#define GRANTFS_COMMON_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

struct MHD_Daemon;

namespace grantfs {

class MetricsServer {
 public:
  // Listens on `addr` ("host:port", "[v6]:port"; port 0: any free one) and
  // serves `render()` at /metrics from its thread; `render` must be safe to
  // call from it until this is destroyed. An error when `addr` is not
  // HOST:PORT or cannot be bound (it is not shared: no SO_REUSEPORT).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& addr,
                                                              std::function<std::string()> render);
  // Closes every connection and joins the thread (a render under way ends
  // first).
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsServer() = default;
  std::function<std::string()> render_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
};

}  // namespace grantfs

#endif  // GRANTFS_COMMON_METRICS_HTTP_H_
