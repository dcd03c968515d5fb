// Summaries of repeated measurements: the median with min and max (every
// figure of the benchmark report), and percentiles of latency samples.
// Pure functions; thread-compatible.
#ifndef GRANTFS_BENCH_STATS_H_
#define GRANTFS_BENCH_STATS_H_

#include <cstddef>
#include <vector>

namespace grantfs {
namespace bench {

struct Summary {
  size_t n = 0;       // number of samples; all fields are 0 when n == 0
  double median = 0;  // the middle sample, or the mean of the two middle ones
  double min = 0;
  double max = 0;
  double mean = 0;
};

// Summarizes `samples` (any order).
Summary Summarize(std::vector<double> samples);

// The p-th percentile (0 < p <= 100) of `sorted` (ascending) by the
// nearest-rank method: the smallest sample with at least p% of the samples
// at or below it. 0 for an empty vector.
double Percentile(const std::vector<double>& sorted, double p);

}  // namespace bench
}  // namespace grantfs

#endif  // GRANTFS_BENCH_STATS_H_
