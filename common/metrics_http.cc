#include "common/metrics_http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

MHD_Result Reply(MHD_Connection* c, unsigned int code, const std::string& body, const char* type) {
  MHD_Response* r = MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()),
                                                    MHD_RESPMEM_MUST_COPY);
  if (r == nullptr) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  const MHD_Result ok = MHD_queue_response(c, code, r);
  MHD_destroy_response(r);
  return ok;
}

MHD_Result Handle(void* cls, MHD_Connection* c, const char* url, const char* method,
                  const char* /*version*/, const char* /*upload_data*/, size_t* upload_size,
                  void** /*state*/) {
  const auto* render = static_cast<const std::function<std::string()>*>(cls);
  // Answered at the first call, before any body is read: a request with
  // one is refused (and its connection closed), never buffered.
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return Reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "GET /metrics\n", "text/plain");
  }
  if (*upload_size != 0) return Reply(c, MHD_HTTP_BAD_REQUEST, "no body\n", "text/plain");
  if (strcmp(url, "/metrics") != 0)
    return Reply(c, MHD_HTTP_NOT_FOUND, "GET /metrics\n", "text/plain");
  return Reply(c, MHD_HTTP_OK, (*render)(), "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& addr, std::function<std::string()> render) {
  const size_t colon = addr.rfind(':');
  int port = -1;
  std::string host = colon == std::string::npos ? "" : addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [::1]
  }
  if (colon == std::string::npos || host.empty() ||
      !absl::SimpleAtoi(addr.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_addr must be HOST:PORT (a host is needed: 127.0.0.1, [::1], "
                     "0.0.0.0), not \"",
                     addr, "\""));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_addr: no address for \"", host, "\""));
  }
  sockaddr_storage sa{};
  memcpy(&sa, found->ai_addr, found->ai_addrlen);
  const bool v6 = found->ai_family == AF_INET6;
  freeaddrinfo(found);

  std::unique_ptr<MetricsServer> m(new MetricsServer);
  m->render_ = std::move(render);
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
  if (v6) flags |= MHD_USE_IPv6;
  m->daemon_ = MHD_start_daemon(
      flags, static_cast<uint16_t>(port), nullptr, nullptr, &Handle, &m->render_,
      MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&sa), MHD_OPTION_CONNECTION_LIMIT,
      static_cast<unsigned int>(16), MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      static_cast<unsigned int>(4), MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned int>(5),
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<size_t>(16 << 10), MHD_OPTION_END);
  if (m->daemon_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot listen for metrics on ", addr));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(m->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  m->port_ = info != nullptr && info->port != 0 ? info->port : port;
  LOG(INFO) << "metrics on http://" << (v6 ? "[" + host + "]" : host) << ":" << m->port_
            << "/metrics";
  return m;
}

MetricsServer::~MetricsServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace grantfs
