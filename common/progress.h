// Progress lines for work longer than a few seconds (grantfsctl fsck).
//
// ProgressLine: "WHAT: DONE of TOTAL (PCT%, RATE/s, ETA Ns)", or "WHAT:
// DONE (RATE/s)" while the total is not known, redrawn in place on a
// terminal at most five times a second, and ended with a newline by
// Finish(). Not thread-safe: one thread reports.
//
// ElapsedLine: "WHAT: N s elapsed" for one long wait whose progress is not
// known (a single call), redrawn in place by a thread of its own until
// Finish(). Its methods are called from one thread.
#ifndef GRANTFS_COMMON_PROGRESS_H_
#define GRANTFS_COMMON_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace grantfs {

class ProgressLine {
 public:
  // Draws on `out` (not owned); `clock` for the rate and the pacing.
  ProgressLine(FILE* out, const std::string& what, Clock* clock = Clock::Monotonic());
  // `total` 0: not known.
  void Update(uint64_t done, uint64_t total);
  // The last figures, drawn whatever the pacing, then a newline.
  void Finish();
  // The text of the line for these figures after `elapsed`.
  static std::string Format(const std::string& what, uint64_t done, uint64_t total,
                            absl::Duration elapsed);

 private:
  void Draw();

  FILE* const out_;
  const std::string what_;
  Clock* const clock_;
  const absl::Time start_;
  absl::Time drawn_ = absl::InfinitePast();
  uint64_t done_ = 0;
  uint64_t total_ = 0;
  bool finished_ = false;
};

class ElapsedLine {
 public:
  // Draws on `out` (not owned) at once and then every `every` of real
  // time; `clock` for the elapsed time shown.
  ElapsedLine(FILE* out, const std::string& what, Clock* clock = Clock::Monotonic(),
              absl::Duration every = absl::Seconds(1));
  ~ElapsedLine() { Finish(); }
  ElapsedLine(const ElapsedLine&) = delete;
  ElapsedLine& operator=(const ElapsedLine&) = delete;
  // Stops the redrawing, draws the last time, then a newline. Once.
  void Finish();
  // The text of the line after `elapsed`.
  static std::string Format(const std::string& what, absl::Duration elapsed);

 private:
  void Draw();

  FILE* const out_;
  const std::string what_;
  Clock* const clock_;
  const absl::Time start_;
  absl::Notification stop_;
  std::thread thread_;  // draws every `every` until stop_
  bool finished_ = false;
};

}  // namespace grantfs

#endif  // GRANTFS_COMMON_PROGRESS_H_
