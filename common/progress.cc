#include "common/progress.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace grantfs {

ProgressLine::ProgressLine(FILE* out, const std::string& what, Clock* clock)
    : out_(out), what_(what), clock_(clock), start_(clock->Now()) {}

std::string ProgressLine::Format(const std::string& what, uint64_t done, uint64_t total,
                                 absl::Duration elapsed) {
  const double secs = absl::ToDoubleSeconds(elapsed);
  const double rate = secs > 0 ? done / secs : 0;
  std::string line = absl::StrCat(what, ": ", done);
  if (total > 0) {
    absl::StrAppend(&line, " of ", total,
                    absl::StrFormat(" (%.0f%%", 100.0 * std::min(done, total) / total));
  } else {
    absl::StrAppend(&line, " (");
  }
  absl::StrAppend(&line, total > 0 ? ", " : "", absl::StrFormat("%.0f/s", rate));
  if (total > 0 && done < total && rate > 0) {
    absl::StrAppend(&line, absl::StrFormat(", ETA %.0f s", (total - done) / rate));
  }
  return line + ")";
}

void ProgressLine::Update(uint64_t done, uint64_t total) {
  done_ = done;
  total_ = total;
  const absl::Time now = clock_->Now();
  if (now - drawn_ < absl::Milliseconds(200)) return;
  drawn_ = now;
  Draw();
}

void ProgressLine::Finish() {
  if (finished_) return;
  finished_ = true;
  Draw();
  fputc('\n', out_);
  fflush(out_);
}

void ProgressLine::Draw() {
  // "\r" and clear to the end of the line: redrawn in place.
  fprintf(out_, "\r%s\033[K", Format(what_, done_, total_, clock_->Now() - start_).c_str());
  fflush(out_);
}

ElapsedLine::ElapsedLine(FILE* out, const std::string& what, Clock* clock, absl::Duration every)
    : out_(out), what_(what), clock_(clock), start_(clock->Now()) {
  Draw();
  thread_ = std::thread([this, every] {
    while (!stop_.WaitForNotificationWithTimeout(every)) Draw();
  });
}

std::string ElapsedLine::Format(const std::string& what, absl::Duration elapsed) {
  return absl::StrFormat("%s: %.0f s elapsed", what, absl::ToDoubleSeconds(elapsed));
}

void ElapsedLine::Finish() {
  if (finished_) return;
  finished_ = true;
  stop_.Notify();
  thread_.join();
  Draw();
  fputc('\n', out_);
  fflush(out_);
}

void ElapsedLine::Draw() {
  fprintf(out_, "\r%s\033[K", Format(what_, clock_->Now() - start_).c_str());
  fflush(out_);
}

}  // namespace grantfs
