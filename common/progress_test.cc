#include "common/progress.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace grantfs {
namespace {

TEST(ProgressLine, SaysDoneTotalRateAndWhatIsLeft) {
  EXPECT_EQ(ProgressLine::Format("chunk files", 250, 1000, absl::Seconds(5)),
            "chunk files: 250 of 1000 (25%, 50/s, ETA 15 s)");
  EXPECT_EQ(ProgressLine::Format("chunk files", 1000, 1000, absl::Seconds(5)),
            "chunk files: 1000 of 1000 (100%, 200/s)");
  EXPECT_EQ(ProgressLine::Format("records", 300, 0, absl::Seconds(2)), "records: 300 (150/s)");
  EXPECT_EQ(ProgressLine::Format("records", 0, 10, absl::ZeroDuration()),
            "records: 0 of 10 (0%, 0/s)");
  // An estimated total that the count overtakes.
  EXPECT_EQ(ProgressLine::Format("records", 12, 10, absl::Seconds(1)),
            "records: 12 of 10 (100%, 12/s)");
}

TEST(ProgressLine, RedrawsAtMostFiveTimesASecondAndEndsWithANewline) {
  char* buf = nullptr;
  size_t len = 0;
  FILE* out = open_memstream(&buf, &len);
  FakeClock clock;
  {
    ProgressLine p(out, "x", &clock);
    for (int i = 1; i <= 100; ++i) {
      clock.Advance(absl::Milliseconds(10));
      p.Update(i, 100);
    }
    p.Finish();
    p.Finish();  // once
  }
  fclose(out);
  const std::string text(buf, len);
  free(buf);
  int draws = 0;
  for (char c : text) draws += c == '\r';
  EXPECT_EQ(draws, 5 + 1);  // one per 200 ms of the second (the first at once), the last
  EXPECT_EQ(text.back(), '\n');
  EXPECT_NE(text.find("x: 100 of 100 (100%, 100/s)"), std::string::npos) << text;
}

TEST(ElapsedLine, SaysHowLongItWaitedAndEndsWithANewline) {
  EXPECT_EQ(ElapsedLine::Format("fsck", absl::Milliseconds(12400)), "fsck: 12 s elapsed");
  char* buf = nullptr;
  size_t len = 0;
  FILE* out = open_memstream(&buf, &len);
  FakeClock clock;
  {
    ElapsedLine e(out, "waiting", &clock, absl::Milliseconds(1));
    clock.Advance(absl::Seconds(3));
    e.Finish();
    e.Finish();  // once
    clock.Advance(absl::Seconds(3));
  }  // and not again
  fclose(out);
  const std::string text(buf, len);
  free(buf);
  EXPECT_EQ(text.rfind("\rwaiting: 0 s elapsed", 0), 0u) << text;  // drawn at once
  const std::string last = "\rwaiting: 3 s elapsed\033[K\n";
  ASSERT_GE(text.size(), last.size());
  EXPECT_EQ(text.substr(text.size() - last.size()), last) << text;
}

}  // namespace
}  // namespace grantfs
