// Prometheus text metrics (the text exposition format, version 0.0.4):
// what servers and mounts serve on --metrics_addr (common/metrics_http.h).
// docs/metrics.md lists every metric.
//
// LatencyHistogram counts durations in fixed buckets with atomics only.
// OpLatencies is a family of them, one per operation name (finding one
// takes a reader lock). MetricsText writes the exposition: each metric's
// HELP and TYPE once, then its samples.
#ifndef GRANTFS_COMMON_METRICS_H_
#define GRANTFS_COMMON_METRICS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"

namespace grantfs {

// The exposition being written.
class MetricsText {
 public:
  // One sample of metric `name` of `type` ("counter", "gauge",
  // "histogram"): its HELP and TYPE lines come first, once, and every
  // sample of a metric is written together (the format wants each family
  // in one group), families in the order first seen. `labels`: "" or
  // `a="x",b="y"` (values escaped with LabelValue). `suffix` is appended to
  // the sample's name (a histogram's "_bucket").
  void Sample(const std::string& name, const char* type, const std::string& help,
              const std::string& labels, double value, const char* suffix = "");
  void Gauge(const std::string& name, const std::string& help, double value,
             const std::string& labels = "") {
    Sample(name, "gauge", help, labels, value);
  }
  // `name` should end in "_total".
  void Counter(const std::string& name, const std::string& help, double value,
               const std::string& labels = "") {
    Sample(name, "counter", help, labels, value);
  }
  // The exposition.
  std::string text() const;

 private:
  std::vector<std::string> families_;        // header and samples, in order
  std::map<std::string, size_t> family_of_;  // name -> index in families_
};

// `v` as a label value: backslash, double quote and newline escaped.
std::string LabelValue(absl::string_view v);

// Durations in buckets from 50 us to 10 s (upper bounds, seconds).
class LatencyHistogram {
 public:
  static constexpr std::array<double, 17> kBounds = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10};

  void Observe(absl::Duration d);
  // Writes name_bucket{labels,le="..."} (cumulative), name_sum and
  // name_count.
  void Write(MetricsText* out, const std::string& name, const std::string& help,
             const std::string& labels) const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};  // last: +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<int64_t> sum_ns_{0};
};

// One histogram per operation, made at its first use.
class OpLatencies {
 public:
  // `name` and `help` of the histogram; each operation is its label `op`.
  OpLatencies(std::string name, std::string help);
  // The histogram of `op`. `op` must live as long as this (a literal).
  LatencyHistogram* For(const char* op) ABSL_LOCKS_EXCLUDED(mu_);
  void Write(MetricsText* out) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::string name_, help_;
  mutable absl::Mutex mu_;
  // By the literal's address first (the common path), then by its text.
  std::map<const char*, LatencyHistogram*> by_address_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<LatencyHistogram>> by_name_ ABSL_GUARDED_BY(mu_);
};

// Times one operation into a histogram (nothing when it is null), on the
// monotonic clock.
class OpTimer {
 public:
  explicit OpTimer(LatencyHistogram* h)
      : h_(h),
        start_(h != nullptr ? std::chrono::steady_clock::now()
                            : std::chrono::steady_clock::time_point()) {}
  ~OpTimer() {
    if (h_ != nullptr) h_->Observe(absl::FromChrono(std::chrono::steady_clock::now() - start_));
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  LatencyHistogram* const h_;
  const std::chrono::steady_clock::time_point start_;
};

// How WriteProtoNumbers shows the fields of a message.
struct ProtoMetricsSpec {
  std::string prefix;              // of every metric's name
  std::set<std::string> counters;  // these fields are counters ("_total")
  std::set<std::string> skip;      // these are left out
  // A field's help; one not here gets "Type.field".
  std::map<std::string, std::string> help;
  // A field's whole metric name, instead of prefix + the field's name
  // ("_total" is still added to a counter's).
  std::map<std::string, std::string> names = {};
};

// Every number of `m` that is set or not optional (not repeated, not
// messages), as a gauge named prefix + the field's name, or a counter
// (prefix + name + "_total"). Booleans are 0 or 1; strings are left to the
// caller. A field in milliseconds (its name ends in "_ms") is written in
// seconds, "_ms" replaced with "_seconds" (Prometheus's base unit).
void WriteProtoNumbers(MetricsText* out, const ProtoMetricsSpec& spec,
                       const google::protobuf::Message& m, const std::string& labels = "");

}  // namespace grantfs

#endif  // GRANTFS_COMMON_METRICS_H_
