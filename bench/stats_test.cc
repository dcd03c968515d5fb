#include "bench/stats.h"

#include "gtest/gtest.h"

namespace grantfs {
namespace bench {
namespace {

TEST(SummarizeTest, OddCountTakesTheMiddleSample) {
  Summary s = Summarize({5, 1, 3});
  EXPECT_EQ(s.n, 3u);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_DOUBLE_EQ(s.mean, 3);
}

TEST(SummarizeTest, EvenCountAveragesTheTwoMiddleSamples) {
  Summary s = Summarize({4, 1, 2, 10});
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_DOUBLE_EQ(s.mean, 4.25);
}

TEST(SummarizeTest, OneAndNoSamples) {
  Summary one = Summarize({7});
  EXPECT_DOUBLE_EQ(one.median, 7);
  EXPECT_DOUBLE_EQ(one.min, 7);
  EXPECT_DOUBLE_EQ(one.max, 7);
  Summary none = Summarize({});
  EXPECT_EQ(none.n, 0u);
  EXPECT_DOUBLE_EQ(none.median, 0);
}

TEST(PercentileTest, NearestRank) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 50);
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 99);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 100);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.1), 1);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3}, 99), 3);
  EXPECT_DOUBLE_EQ(Percentile({}, 99), 0);
}

}  // namespace
}  // namespace bench
}  // namespace grantfs
