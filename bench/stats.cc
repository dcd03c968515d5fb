#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace grantfs {
namespace bench {

Summary Summarize(std::vector<double> samples) {
  Summary s;
  s.n = samples.size();
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const size_t mid = s.n / 2;
  s.median = s.n % 2 == 1 ? samples[mid] : (samples[mid - 1] + samples[mid]) / 2;
  s.min = samples.front();
  s.max = samples.back();
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / s.n;
  return s;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double rank = std::ceil(p / 100.0 * sorted.size());
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return sorted[std::min(i, sorted.size() - 1)];
}

}  // namespace bench
}  // namespace grantfs
