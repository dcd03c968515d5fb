#include "common/metrics_http.h"

#include <httplib.h>
#include <sys/socket.h>

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace grantfs {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& addr, std::function<std::string()> render) {
  const size_t colon = addr.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(addr.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_addr must be HOST:PORT, not \"", addr, "\""));
  }
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [::1]
  }
  std::unique_ptr<MetricsServer> m(new MetricsServer);
  m->http_ = std::make_unique<httplib::Server>();
  m->http_->new_task_queue = [] { return new httplib::ThreadPool(2); };
  // httplib's default sets SO_REUSEPORT: a second process on the same port
  // would share it silently. Only SO_REUSEADDR (a restart binds at once).
  m->http_->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  m->http_->set_read_timeout(5, 0);
  m->http_->set_write_timeout(5, 0);
  m->http_->Get("/metrics",
                [render = std::move(render)](const httplib::Request&, httplib::Response& res) {
                  res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
                });
  if (port == 0) {
    m->port_ = m->http_->bind_to_any_port(host);
  } else if (m->http_->bind_to_port(host, port)) {
    m->port_ = port;
  } else {
    m->port_ = -1;
  }
  if (m->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for metrics on ", addr));
  }
  m->thread_ = std::thread([http = m->http_.get()] { http->listen_after_bind(); });
  // stop() ends only a server that runs: the destructor must not come
  // before listen_after_bind began.
  for (int i = 0; i < 5000 && !m->http_->is_running(); ++i) absl::SleepFor(absl::Milliseconds(1));
  LOG(INFO) << "metrics on http://"
            << (host.find(':') != std::string::npos ? "[" + host + "]" : host) << ":" << m->port_
            << "/metrics";
  return m;
}

MetricsServer::~MetricsServer() {
  if (http_ != nullptr) http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace grantfs
