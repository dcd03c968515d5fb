#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"

namespace grantfs {

namespace {

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  // Integers as integers (byte counts past 2^53 lose only their last digits).
  if (v == std::floor(v) && std::fabs(v) < 1e18) return absl::StrCat(static_cast<int64_t>(v));
  return absl::StrFormat("%.17g", v);
}

}  // namespace

void MetricsText::Sample(const std::string& name, const char* type, const std::string& help,
                         const std::string& labels, double value, const char* suffix) {
  auto [it, added] = family_of_.emplace(name, families_.size());
  if (added) {
    families_.push_back(
        absl::StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n"));
  }
  absl::StrAppend(&families_[it->second], name, suffix, labels.empty() ? "" : "{", labels,
                  labels.empty() ? "" : "}", " ", Number(value), "\n");
}

std::string MetricsText::text() const { return absl::StrJoin(families_, ""); }

std::string LabelValue(absl::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void LatencyHistogram::Observe(absl::Duration d) {
  const double s = absl::ToDoubleSeconds(d);
  const size_t i = std::lower_bound(kBounds.begin(), kBounds.end(), s) - kBounds.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void LatencyHistogram::Write(MetricsText* out, const std::string& name, const std::string& help,
                             const std::string& labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= kBounds.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    const std::string le = i < kBounds.size() ? absl::StrCat(kBounds[i]) : "+Inf";
    out->Sample(name, "histogram", help, absl::StrCat(labels, sep, "le=\"", le, "\""),
                static_cast<double>(cumulative), "_bucket");
  }
  // The buckets were read one by one while others may observe: the count
  // is their sum, so that +Inf and _count agree.
  out->Sample(name, "histogram", help, labels,
              static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9, "_sum");
  out->Sample(name, "histogram", help, labels, static_cast<double>(cumulative), "_count");
}

OpLatencies::OpLatencies(std::string name, std::string help)
    : name_(std::move(name)), help_(std::move(help)) {}

LatencyHistogram* OpLatencies::For(const char* op) {
  {
    absl::ReaderMutexLock l(&mu_);
    auto it = by_address_.find(op);
    if (it != by_address_.end()) return it->second;
  }
  absl::MutexLock l(&mu_);
  std::unique_ptr<LatencyHistogram>& h = by_name_[op];
  if (h == nullptr) h = std::make_unique<LatencyHistogram>();
  by_address_[op] = h.get();
  return h.get();
}

void OpLatencies::Write(MetricsText* out) const {
  absl::ReaderMutexLock l(&mu_);
  for (const auto& [op, h] : by_name_) {
    h->Write(out, name_, help_, absl::StrCat("op=\"", LabelValue(op), "\""));
  }
}

void WriteProtoNumbers(MetricsText* out, const ProtoMetricsSpec& spec,
                       const google::protobuf::Message& m, const std::string& labels) {
  using FD = google::protobuf::FieldDescriptor;
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FD* f = d->field(i);
    if (f->is_repeated() || spec.skip.count(f->name())) continue;
    if (f->has_presence() && !r->HasField(m, f)) continue;
    double v;
    switch (f->cpp_type()) {
      case FD::CPPTYPE_INT32:
        v = r->GetInt32(m, f);
        break;
      case FD::CPPTYPE_INT64:
        v = static_cast<double>(r->GetInt64(m, f));
        break;
      case FD::CPPTYPE_UINT32:
        v = r->GetUInt32(m, f);
        break;
      case FD::CPPTYPE_UINT64:
        v = static_cast<double>(r->GetUInt64(m, f));
        break;
      case FD::CPPTYPE_DOUBLE:
        v = r->GetDouble(m, f);
        break;
      case FD::CPPTYPE_FLOAT:
        v = r->GetFloat(m, f);
        break;
      case FD::CPPTYPE_BOOL:
        v = r->GetBool(m, f) ? 1 : 0;
        break;
      default:
        continue;  // strings, enums, messages
    }
    auto h = spec.help.find(f->name());
    const std::string help =
        h != spec.help.end() ? h->second : absl::StrCat(d->name(), ".", f->name());
    auto n = spec.names.find(f->name());
    std::string name = n != spec.names.end() ? n->second : spec.prefix + f->name();
    if (absl::EndsWith(name, "_ms")) {
      name = absl::StrCat(name.substr(0, name.size() - 3), "_seconds");
      v /= 1000;
    }
    if (spec.counters.count(f->name())) {
      out->Counter(name + "_total", help, v, labels);
    } else {
      out->Gauge(name, help, v, labels);
    }
  }
}

}  // namespace grantfs
