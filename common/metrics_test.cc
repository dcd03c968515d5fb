// The exposition format, and the HTTP endpoint on a loopback port.
#include "common/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "common/metrics_http.h"
#include "google/protobuf/wrappers.pb.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

TEST(MetricsText, HelpAndTypeOnceThenEverySample) {
  MetricsText t;
  t.Gauge("g", "a gauge", 3, "a=\"1\"");
  t.Counter("c_total", "a counter", 1e12);
  t.Gauge("g", "a gauge", 4.5, "a=\"2\"");  // written with the other g
  EXPECT_EQ(t.text(),
            "# HELP g a gauge\n# TYPE g gauge\ng{a=\"1\"} 3\ng{a=\"2\"} 4.5\n"
            "# HELP c_total a counter\n# TYPE c_total counter\nc_total 1000000000000\n");
  EXPECT_EQ(LabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(LatencyHistogram, CumulativeBucketsSumAndCount) {
  LatencyHistogram h;
  h.Observe(absl::Microseconds(30));  // <= 50 us
  h.Observe(absl::Microseconds(50));  // <= 50 us (upper bounds are inclusive)
  h.Observe(absl::Milliseconds(3));   // <= 5 ms
  h.Observe(absl::Seconds(60));       // +Inf only
  MetricsText t;
  h.Write(&t, "x_seconds", "help", "op=\"Lookup\"");
  const std::string s = t.text();
  EXPECT_TRUE(absl::StrContains(s, "x_seconds_bucket{op=\"Lookup\",le=\"5e-05\"} 2\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "x_seconds_bucket{op=\"Lookup\",le=\"0.0025\"} 2\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "x_seconds_bucket{op=\"Lookup\",le=\"0.005\"} 3\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "x_seconds_bucket{op=\"Lookup\",le=\"10\"} 3\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "x_seconds_bucket{op=\"Lookup\",le=\"+Inf\"} 4\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "x_seconds_count{op=\"Lookup\"} 4\n")) << s;
  const std::string sum_line = "x_seconds_sum{op=\"Lookup\"} ";
  const size_t at = s.find(sum_line);
  ASSERT_NE(at, std::string::npos) << s;
  double sum = 0;
  ASSERT_TRUE(absl::SimpleAtod(
      s.substr(at + sum_line.size(), s.find('\n', at) - at - sum_line.size()), &sum));
  EXPECT_NEAR(sum, 60.00308, 1e-9);
  EXPECT_EQ(h.count(), 4u);
}

TEST(OpLatencies, OneHistogramPerOperation) {
  OpLatencies ops("ops_seconds", "ops");
  ops.For("Lookup")->Observe(absl::Milliseconds(1));
  ops.For("Lookup")->Observe(absl::Milliseconds(1));
  const std::string other = "Mk" + std::string("Nod");  // another address, same text
  ops.For("MkNod")->Observe(absl::Milliseconds(1));
  ops.For(other.c_str())->Observe(absl::Milliseconds(1));
  EXPECT_EQ(ops.For("Lookup")->count(), 2u);
  EXPECT_EQ(ops.For("MkNod")->count(), 2u);
  MetricsText t;
  ops.Write(&t);
  EXPECT_TRUE(absl::StrContains(t.text(), "ops_seconds_count{op=\"Lookup\"} 2\n")) << t.text();
  EXPECT_TRUE(absl::StrContains(t.text(), "ops_seconds_count{op=\"MkNod\"} 2\n")) << t.text();
}

TEST(WriteProtoNumbers, NumbersAsGaugesOrCounters) {
  google::protobuf::UInt64Value v;
  v.set_value(42);
  MetricsText t;
  ProtoMetricsSpec spec;
  spec.prefix = "p_";
  WriteProtoNumbers(&t, spec, v);
  EXPECT_TRUE(absl::StrContains(
      t.text(), "# HELP p_value UInt64Value.value\n# TYPE p_value gauge\np_value 42\n"))
      << t.text();
  MetricsText c;
  spec.counters = {"value"};
  spec.help = {{"value", "the value"}};
  WriteProtoNumbers(&c, spec, v, "x=\"y\"");
  EXPECT_TRUE(absl::StrContains(
      c.text(),
      "# HELP p_value_total the value\n# TYPE p_value_total counter\np_value_total{x=\"y\"} 42\n"))
      << c.text();
  // A name of its own; milliseconds are written as seconds.
  MetricsText ms;
  spec.names = {{"value", "q_wait_ms"}};
  spec.counters = {};
  WriteProtoNumbers(&ms, spec, v);
  EXPECT_TRUE(absl::StrContains(
      ms.text(),
      "# HELP q_wait_seconds the value\n# TYPE q_wait_seconds gauge\nq_wait_seconds 0.042"))
      << ms.text();
  MetricsText none;
  spec.skip = {"value"};
  WriteProtoNumbers(&none, spec, v);
  EXPECT_EQ(none.text(), "");
}

// A connected socket to 127.0.0.1:port (-1 when it fails).
int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Sends `request` and reads the whole answer (the server closes: HTTP/1.0).
std::string Ask(int port, const std::string& request) {
  int fd = Connect(port);
  if (fd < 0) return "";
  (void)!write(fd, request.data(), request.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

TEST(MetricsServer, ServesTheTextAtSlashMetricsOnly) {
  int calls = 0;
  absl::StatusOr<std::unique_ptr<MetricsServer>> m = MetricsServer::Start(
      "127.0.0.1:0", [&calls] { return "up " + std::to_string(++calls) + "\n"; });
  ASSERT_TRUE(m.ok()) << m.status();
  const int port = (*m)->port();
  ASSERT_GT(port, 0);
  std::string r = Ask(port, "GET /metrics HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.0 200") || absl::StartsWith(r, "HTTP/1.1 200")) << r;
  EXPECT_TRUE(absl::StrContains(r, "text/plain; version=0.0.4")) << r;
  EXPECT_TRUE(absl::EndsWith(r, "\r\n\r\nup 1\n")) << r;
  EXPECT_TRUE(absl::StrContains(Ask(port, "GET /other HTTP/1.0\r\n\r\n"), " 404 "));
  // A body is refused before it is read, however large it claims to be.
  r = Ask(port,
          "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3000000000\r\n\r\n"
          "some of the body");
  EXPECT_TRUE(absl::StrContains(r, " 405 ")) << r;
  // A port in use, and an address that is not HOST:PORT, are errors.
  EXPECT_FALSE(MetricsServer::Start("127.0.0.1:" + std::to_string(port), [] { return ""; }).ok());
  for (const char* bad : {"localhost", ":9100", "127.0.0.1:x", "127.0.0.1:70000"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(MetricsServer::Start(bad, [] { return ""; }).status()))
        << bad;
  }
  // Clients that connect and send nothing (or keep a connection open) do not
  // hold up the stop: the destructor closes them.
  int idle[3];
  for (int& fd : idle) fd = Connect(port);
  m->reset();
  for (int fd : idle) {
    if (fd >= 0) close(fd);
  }
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace grantfs
