// The exposition format, and the HTTP endpoint on a loopback port.
#include "common/metrics.h"

#include <httplib.h>

#include <string>

#include "absl/strings/match.h"
#include "common/metrics_http.h"
#include "google/protobuf/wrappers.pb.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

TEST(MetricsText, HelpAndTypeOnceThenEverySample) {
  MetricsText t;
  t.Gauge("g", "a gauge", 3, "a=\"1\"");
  t.Gauge("g", "a gauge", 4.5, "a=\"2\"");
  t.Counter("c_total", "a counter", 1e12);
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
  const std::string& s = t.text();
  EXPECT_TRUE(absl::StrContains(s, "x_seconds_bucket{op=\"Lookup\",le=\"5e-05\"} 2\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "x_seconds_bucket{op=\"Lookup\",le=\"0.0025\"} 2\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "x_seconds_bucket{op=\"Lookup\",le=\"0.005\"} 3\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "x_seconds_bucket{op=\"Lookup\",le=\"10\"} 3\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "x_seconds_bucket{op=\"Lookup\",le=\"+Inf\"} 4\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "x_seconds_count{op=\"Lookup\"} 4\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "x_seconds_sum{op=\"Lookup\"} 60.00308\n")) << s;
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
  MetricsText none;
  spec.skip = {"value"};
  WriteProtoNumbers(&none, spec, v);
  EXPECT_EQ(none.text(), "");
}

TEST(MetricsServer, ServesTheTextAtSlashMetricsOnly) {
  int calls = 0;
  absl::StatusOr<std::unique_ptr<MetricsServer>> m = MetricsServer::Start(
      "127.0.0.1:0", [&calls] { return "up " + std::to_string(++calls) + "\n"; });
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_GT((*m)->port(), 0);
  httplib::Client client("127.0.0.1", (*m)->port());
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(5, 0);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "up 1\n");
  EXPECT_TRUE(absl::StartsWith(res->get_header_value("Content-Type"), "text/plain; version=0.0.4"));
  res = client.Get("/other");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  // A port in use, and an address that is not HOST:PORT, are errors.
  EXPECT_FALSE(
      MetricsServer::Start("127.0.0.1:" + std::to_string((*m)->port()), [] { return ""; }).ok());
  EXPECT_TRUE(
      absl::IsInvalidArgument(MetricsServer::Start("localhost", [] { return ""; }).status()));
  m->reset();  // stops and joins
}

}  // namespace
}  // namespace grantfs
