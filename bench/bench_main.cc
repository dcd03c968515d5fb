// grantfs-bench: file-system benchmarks that measure any directory the same
// way (a GrantFS mount, a FUSE passthrough, the local disk).
//
//   grantfs-bench dd   --dir=D [--mib=1024] [--bs_kib=512] [--zeros] [--runs=3]
//       writes one file in bs-sized write() calls, fsync, close; reports the
//       open / write / fsync / close time split and MB/s (median of runs).
//       Data is a non-zero pattern unless --zeros.
//   grantfs-bench meta --dir=D [--files=10000] [--runs=3]
//       create (open O_CREAT|O_EXCL + close), stat, unlink rates of N files.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"

ABSL_FLAG(std::string, dir, "", "directory to measure (a mount point or a local directory)");
ABSL_FLAG(int, mib, 1024, "dd: MiB to write");
ABSL_FLAG(int, bs_kib, 512, "dd: KiB per write() call");
ABSL_FLAG(bool, zeros, false, "dd: write zeros instead of a non-zero pattern");
ABSL_FLAG(int, files, 10000, "meta: number of files");
ABSL_FLAG(int, runs, 3, "runs per figure; the median is reported with min and max");

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Stats {
  double median, min, max;
};
Stats Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

int Fail(const std::string& what) {
  fprintf(stderr, "grantfs-bench: %s: %s\n", what.c_str(), strerror(errno));
  return 1;
}

int RunDd(const std::string& dir) {
  const size_t bs = static_cast<size_t>(absl::GetFlag(FLAGS_bs_kib)) << 10;
  const uint64_t total = static_cast<uint64_t>(absl::GetFlag(FLAGS_mib)) << 20;
  std::vector<char> buf(bs);
  // A pattern no file system can compress away as zeros.
  for (size_t i = 0; i < bs; ++i) buf[i] = absl::GetFlag(FLAGS_zeros) ? 0 : char(i * 131 + 7) | 1;
  std::vector<double> open_s, write_s, fsync_s, close_s, total_s;
  for (int run = 0; run < absl::GetFlag(FLAGS_runs); ++run) {
    const std::string path = absl::StrFormat("%s/grantfs-bench-dd.%d", dir, getpid());
    auto t0 = Clock::now();
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return Fail("open " + path);
    open_s.push_back(Since(t0));
    auto t1 = Clock::now();
    for (uint64_t done = 0; done < total; done += bs) {
      if (write(fd, buf.data(), bs) != static_cast<ssize_t>(bs)) return Fail("write " + path);
    }
    write_s.push_back(Since(t1));
    auto t2 = Clock::now();
    if (fsync(fd) != 0) return Fail("fsync " + path);
    fsync_s.push_back(Since(t2));
    auto t3 = Clock::now();
    if (close(fd) != 0) return Fail("close " + path);
    close_s.push_back(Since(t3));
    total_s.push_back(Since(t0));
    unlink(path.c_str());
    sync();  // start the next run from a clean page cache state
  }
  const double mb = total / 1e6;
  auto row = [&](const char* name, const std::vector<double>& v) {
    Stats s = Summarize(v);
    printf("%-8s %10.3f s  (min %.3f, max %.3f)\n", name, s.median, s.min, s.max);
  };
  printf("dd %s: %d MiB in %zu KiB writes, %s data, %d runs (medians)\n", dir.c_str(),
         absl::GetFlag(FLAGS_mib), bs >> 10, absl::GetFlag(FLAGS_zeros) ? "zero" : "non-zero",
         absl::GetFlag(FLAGS_runs));
  row("open", open_s);
  row("write", write_s);
  row("fsync", fsync_s);
  row("close", close_s);
  row("total", total_s);
  Stats w = Summarize(write_s), t = Summarize(total_s);
  printf("write-phase %.1f MB/s, total %.1f MB/s\n", mb / w.median, mb / t.median);
  printf("CSV,dd,%s,%d,%zu,%d,%.6f,%.6f,%.6f,%.6f,%.6f\n", dir.c_str(), absl::GetFlag(FLAGS_mib),
         bs >> 10, absl::GetFlag(FLAGS_zeros) ? 0 : 1, Summarize(open_s).median, w.median,
         Summarize(fsync_s).median, Summarize(close_s).median, t.median);
  return 0;
}

int RunMeta(const std::string& dir) {
  const int n = absl::GetFlag(FLAGS_files);
  std::vector<double> create_r, stat_r, unlink_r;
  for (int run = 0; run < absl::GetFlag(FLAGS_runs); ++run) {
    const std::string d = absl::StrFormat("%s/grantfs-bench-meta.%d", dir, getpid());
    if (mkdir(d.c_str(), 0755) != 0) return Fail("mkdir " + d);
    auto name = [&](int i) { return absl::StrFormat("%s/f%07d", d, i); };
    auto t = Clock::now();
    for (int i = 0; i < n; ++i) {
      int fd = open(name(i).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
      if (fd < 0 || close(fd) != 0) return Fail("create " + name(i));
    }
    create_r.push_back(n / Since(t));
    t = Clock::now();
    struct stat st;
    for (int i = 0; i < n; ++i) {
      if (stat(name(i).c_str(), &st) != 0) return Fail("stat " + name(i));
    }
    stat_r.push_back(n / Since(t));
    t = Clock::now();
    for (int i = 0; i < n; ++i) {
      if (unlink(name(i).c_str()) != 0) return Fail("unlink " + name(i));
    }
    unlink_r.push_back(n / Since(t));
    if (rmdir(d.c_str()) != 0) return Fail("rmdir " + d);
  }
  printf("meta %s: %d files, %d runs (median ops/s, min..max)\n", dir.c_str(), n,
         absl::GetFlag(FLAGS_runs));
  for (auto& [label, v] : std::vector<std::pair<const char*, std::vector<double>*>>{
           {"create", &create_r}, {"stat", &stat_r}, {"unlink", &unlink_r}}) {
    Stats s = Summarize(*v);
    printf("%-8s %10.0f ops/s  (%.0f..%.0f)\n", label, s.median, s.min, s.max);
  }
  printf("CSV,meta,%s,%d,%.1f,%.1f,%.1f\n", dir.c_str(), n, Summarize(create_r).median,
         Summarize(stat_r).median, Summarize(unlink_r).median);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("grantfs-bench dd|meta --dir=DIR [options]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  if (args.size() != 2 || dir.empty() || absl::GetFlag(FLAGS_runs) < 1) {
    fprintf(stderr, "usage: %s\n", std::string(absl::ProgramUsageMessage()).c_str());
    return 2;
  }
  const std::string cmd = args[1];
  if (cmd == "dd") return RunDd(dir);
  if (cmd == "meta") return RunMeta(dir);
  fprintf(stderr, "grantfs-bench: unknown command '%s'\n", cmd.c_str());
  return 2;
}
