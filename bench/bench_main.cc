// grantfs-bench: benchmark programs. File-system workloads measure any
// directory the same way (a GrantFS mount, a FUSE passthrough, tmpfs, the
// local disk); RPC workloads talk to a grantfs-server directly. Each prints a
// readable summary and one machine-readable line starting with "CSV,".
// bench/suite.py runs them all and writes docs/benchmarks.md.
//
//   grantfs-bench dd    --dir=D [--mib=1024] [--bs_kib=512] [--zeros] [--runs=3]
//       one file written in bs-sized write() calls, fsync, close: the open /
//       write / fsync / close time split and MB/s (median of runs).
//       Data is a non-zero pattern unless --zeros (mkfile).
//       CSV,dd,DIR,MIB,BS_KIB,NONZERO,OPEN_S,WRITE_S,FSYNC_S,CLOSE_S,TOTAL_S
//   grantfs-bench meta  --dir=D [--files=10000] [--runs=3]
//       create (open O_CREAT|O_EXCL + close), stat, rename, unlink rates.
//       CSV,meta,DIR,FILES,CREATE,STAT,UNLINK,RENAME   (ops/s)
//   grantfs-bench smallfiles --dir=D [--files=100] [--file_kib=4] [--runs=3]
//       create+write+close, open+read+close, unlink of small non-zero files.
//       CSV,smallfiles,DIR,FILES,BYTES,CREATE,READ,UNLINK   (files/s)
//   grantfs-bench rpc   --server=H:P [--sizes=0,4096,...] [--secs=1] [--callers=16]
//       Echo round trips, one-way and request/reply, per payload size; then
//       messages/s of one-way calls with payloads <= 8 KiB from 1 and from
//       --callers concurrent callers.
//       CSV,rpc,oneway|reqreply,BYTES,CALLS,MEDIAN_US,P99_US,MIN_US,MB_S
//       CSV,rpcrate,BYTES,CALLERS,CALLS,MSGS_S,FAILED
//   grantfs-bench load  --server=H:P --rate=R [--secs=5] [--op=getattr|setattr|echo]
//       open-loop offered load; achieved ops/s and response times.
//       CSV,load,OP,RATE,SECS,OFFERED,DROPPED,OK,FAILED,ACHIEVED,MEAN_MS,P50_MS,P99_MS,
//           MAX_MS,MAX_SEND_LAG_MS,FAILURES (CODE:N;...)
//   grantfs-bench suite [--quick|--smoke] [suite.py options]
//       the whole suite: runs bench/suite.py of the source tree this binary was
//       built from, with --build set to its build directory.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/fs_bench.h"
#include "bench/load_gen.h"
#include "bench/rpc_bench.h"
#include "bench/stats.h"
#include "client/rpc_client.h"
#include "common/flag_help.h"
#include "common/transport_flags.h"

ABSL_FLAG(std::string, dir, "", "dd/meta/smallfiles: directory to measure");
ABSL_FLAG(int, mib, 1024, "dd: MiB to write");
ABSL_FLAG(int, bs_kib, 512, "dd: KiB per write() call");
ABSL_FLAG(bool, zeros, false, "dd: write zeros (mkfile) instead of a non-zero pattern");
ABSL_FLAG(int, files, 0, "meta: number of files (default 10000); smallfiles: (default 100)");
ABSL_FLAG(int, file_kib, 4, "smallfiles: KiB per file");
ABSL_FLAG(int, runs, 3, "dd/meta/smallfiles: runs; the median is reported with min and max");
ABSL_FLAG(std::string, server, "", "rpc/load: grantfs-server address HOST:PORT");
ABSL_FLAG(std::string, sizes, "0,4096,8192,65536,1048576", "rpc: payload sizes in bytes");
ABSL_FLAG(double, secs, 0, "rpc: seconds per measurement (default 1); load: seconds (default 5)");
ABSL_FLAG(int, callers, 8, "rpc: concurrent callers for messages/s");
ABSL_FLAG(std::string, op, "getattr", "load: getattr, setattr or echo");
ABSL_FLAG(double, rate, 0, "load: offered calls per second");
ABSL_FLAG(int, timeout_ms, 5000, "load: deadline of each call");
ABSL_FLAG(int, max_outstanding, 20000,
          "load: calls unanswered (sent or waiting to be) past which offers are dropped");
ABSL_FLAG(int, max_in_flight, 256,
          "load: calls open on the channel at once; later ones wait in the generator");

namespace {

namespace gb = grantfs::bench;

int Usage(const std::string& why) {
  fprintf(stderr, "grantfs-bench: %s\nusage: %s\n", why.c_str(),
          std::string(absl::ProgramUsageMessage()).c_str());
  return 2;
}

int Error(const absl::Status& s) {
  fprintf(stderr, "grantfs-bench: %s\n", std::string(s.message()).c_str());
  return 1;
}

// Runs `once` --runs times and returns the samples of each named figure.
template <typename T>
absl::StatusOr<std::vector<T>> Repeat(const std::function<absl::StatusOr<T>()>& once) {
  std::vector<T> out;
  for (int i = 0; i < absl::GetFlag(FLAGS_runs); ++i) {
    absl::StatusOr<T> r = once();
    if (!r.ok()) return r.status();
    out.push_back(*r);
  }
  return out;
}

template <typename T>
gb::Summary Over(const std::vector<T>& runs, double T::*field) {
  std::vector<double> v;
  for (const T& r : runs) v.push_back(r.*field);
  return gb::Summarize(v);
}

int RunDd() {
  gb::DdOptions o;
  o.dir = absl::GetFlag(FLAGS_dir);
  o.bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_mib)) << 20;
  o.block_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_bs_kib)) << 10;
  o.zeros = absl::GetFlag(FLAGS_zeros);
  auto runs = Repeat<gb::DdTimes>([&] { return gb::RunDd(o); });
  if (!runs.ok()) return Error(runs.status());
  printf("dd %s: %d MiB in %zu KiB writes, %s data, %d runs (median, min..max)\n", o.dir.c_str(),
         absl::GetFlag(FLAGS_mib), o.block_bytes >> 10, o.zeros ? "zero" : "non-zero",
         absl::GetFlag(FLAGS_runs));
  const std::pair<const char*, double gb::DdTimes::*> rows[] = {{"open", &gb::DdTimes::open_s},
                                                                {"write", &gb::DdTimes::write_s},
                                                                {"fsync", &gb::DdTimes::fsync_s},
                                                                {"close", &gb::DdTimes::close_s},
                                                                {"total", &gb::DdTimes::total_s}};
  for (const auto& [name, field] : rows) {
    gb::Summary s = Over(*runs, field);
    printf("%-8s %10.3f s  (%.3f..%.3f)\n", name, s.median, s.min, s.max);
  }
  const double mb = o.bytes / 1e6;
  printf("write-phase %.1f MB/s, total %.1f MB/s\n", mb / Over(*runs, &gb::DdTimes::write_s).median,
         mb / Over(*runs, &gb::DdTimes::total_s).median);
  printf("CSV,dd,%s,%d,%zu,%d,%.6f,%.6f,%.6f,%.6f,%.6f\n", o.dir.c_str(), absl::GetFlag(FLAGS_mib),
         o.block_bytes >> 10, o.zeros ? 0 : 1, Over(*runs, &gb::DdTimes::open_s).median,
         Over(*runs, &gb::DdTimes::write_s).median, Over(*runs, &gb::DdTimes::fsync_s).median,
         Over(*runs, &gb::DdTimes::close_s).median, Over(*runs, &gb::DdTimes::total_s).median);
  return 0;
}

int RunMeta() {
  gb::MetaOptions o;
  o.dir = absl::GetFlag(FLAGS_dir);
  o.files = absl::GetFlag(FLAGS_files) > 0 ? absl::GetFlag(FLAGS_files) : 10000;
  auto runs = Repeat<gb::MetaRates>([&] { return gb::RunMeta(o); });
  if (!runs.ok()) return Error(runs.status());
  printf("meta %s: %d files, %d runs (median ops/s, min..max)\n", o.dir.c_str(), o.files,
         absl::GetFlag(FLAGS_runs));
  const std::pair<const char*, double gb::MetaRates::*> rows[] = {
      {"create", &gb::MetaRates::create},
      {"stat", &gb::MetaRates::stat},
      {"rename", &gb::MetaRates::rename},
      {"unlink", &gb::MetaRates::unlink}};
  for (const auto& [name, field] : rows) {
    gb::Summary s = Over(*runs, field);
    printf("%-8s %10.0f ops/s  (%.0f..%.0f)\n", name, s.median, s.min, s.max);
  }
  printf("CSV,meta,%s,%d,%.1f,%.1f,%.1f,%.1f\n", o.dir.c_str(), o.files,
         Over(*runs, &gb::MetaRates::create).median, Over(*runs, &gb::MetaRates::stat).median,
         Over(*runs, &gb::MetaRates::unlink).median, Over(*runs, &gb::MetaRates::rename).median);
  return 0;
}

int RunSmallFiles() {
  gb::SmallFilesOptions o;
  o.dir = absl::GetFlag(FLAGS_dir);
  o.files = absl::GetFlag(FLAGS_files) > 0 ? absl::GetFlag(FLAGS_files) : 100;
  o.file_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_file_kib)) << 10;
  auto runs = Repeat<gb::SmallFilesRates>([&] { return gb::RunSmallFiles(o); });
  if (!runs.ok()) return Error(runs.status());
  printf("smallfiles %s: %d files of %zu bytes, %d runs (median files/s, min..max)\n",
         o.dir.c_str(), o.files, o.file_bytes, absl::GetFlag(FLAGS_runs));
  const std::pair<const char*, double gb::SmallFilesRates::*> rows[] = {
      {"create", &gb::SmallFilesRates::create},
      {"read", &gb::SmallFilesRates::read},
      {"unlink", &gb::SmallFilesRates::unlink}};
  for (const auto& [name, field] : rows) {
    gb::Summary s = Over(*runs, field);
    printf("%-8s %10.1f files/s  (%.1f..%.1f)\n", name, s.median, s.min, s.max);
  }
  printf("CSV,smallfiles,%s,%d,%zu,%.2f,%.2f,%.2f\n", o.dir.c_str(), o.files, o.file_bytes,
         Over(*runs, &gb::SmallFilesRates::create).median,
         Over(*runs, &gb::SmallFilesRates::read).median,
         Over(*runs, &gb::SmallFilesRates::unlink).median);
  return 0;
}

absl::StatusOr<std::unique_ptr<grantfs::RpcClient>> Connect() {
  grantfs::RpcClientOptions o;
  o.servers = {absl::GetFlag(FLAGS_server)};
  absl::StatusOr<grantfs::Transport> transport =
      grantfs::TransportFromFlags("node", "grantfs-bench");
  if (!transport.ok()) return transport.status();
  o.transport = *std::move(transport);
  o.call_timeout = absl::Seconds(10);
  o.retry_for = absl::Seconds(5);  // the server may still be starting
  return grantfs::RpcClient::Create(o);
}

int RunRpc() {
  std::vector<uint32_t> sizes;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',')) {
    uint32_t n;
    if (!absl::SimpleAtoi(part, &n) || n > (8u << 20)) {
      return Usage("--sizes: '" + std::string(part) + "' is not a byte count from 0 to 8388608");
    }
    sizes.push_back(n);
  }
  if (absl::GetFlag(FLAGS_callers) < 1 || absl::GetFlag(FLAGS_callers) > 1024) {
    return Usage("--callers must be from 1 to 1024");
  }
  const double secs = absl::GetFlag(FLAGS_secs) > 0 ? absl::GetFlag(FLAGS_secs) : 1;
  auto rpc = Connect();
  if (!rpc.ok()) return Error(rpc.status());
  printf("rpc %s: Echo round trips, %.2f s per point\n", absl::GetFlag(FLAGS_server).c_str(), secs);
  printf("%-9s %9s %9s %10s %10s %10s %10s\n", "mode", "bytes", "calls", "median us", "p99 us",
         "min us", "MB/s");
  for (bool request_reply : {false, true}) {
    for (uint32_t bytes : sizes) {
      auto r = gb::MeasureEchoLatency(rpc->get(), bytes, request_reply, absl::Seconds(secs));
      if (!r.ok()) return Error(r.status());
      const char* mode = request_reply ? "reqreply" : "oneway";
      printf("%-9s %9u %9llu %10.1f %10.1f %10.1f %10.1f\n", mode, bytes,
             (unsigned long long)r->calls, r->median_us, r->p99_us, r->min_us, r->mb_per_s);
      printf("CSV,rpc,%s,%u,%llu,%.2f,%.2f,%.2f,%.3f\n", mode, bytes, (unsigned long long)r->calls,
             r->median_us, r->p99_us, r->min_us, r->mb_per_s);
    }
  }
  std::set<int> callers = {1, absl::GetFlag(FLAGS_callers)};
  for (uint32_t bytes : sizes) {
    if (bytes > 8192) continue;  // messages/s is a figure for small messages
    for (int c : callers) {
      auto r = gb::MeasureEchoRate(rpc->get(), bytes, c, absl::Seconds(secs));
      if (!r.ok()) return Error(r.status());
      printf("one-way %u B, %d callers: %.0f msgs/s%s%s\n", bytes, c, r->msgs_per_s,
             r->failed ? absl::StrFormat(", %d calls failed, first: ", r->failed).c_str() : "",
             r->first_failure.c_str());
      printf("CSV,rpcrate,%u,%d,%llu,%.1f,%llu\n", bytes, c, (unsigned long long)r->calls,
             r->msgs_per_s, (unsigned long long)r->failed);
    }
  }
  return 0;
}

int RunLoadCmd() {
  gb::LoadOptions o;
  o.op = absl::GetFlag(FLAGS_op);
  o.rate = absl::GetFlag(FLAGS_rate);
  o.duration = absl::Seconds(absl::GetFlag(FLAGS_secs) > 0 ? absl::GetFlag(FLAGS_secs) : 5);
  o.call_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  o.max_outstanding = absl::GetFlag(FLAGS_max_outstanding);
  o.max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  if (o.op != "getattr" && o.op != "setattr" && o.op != "echo") {
    return Usage("--op must be getattr, setattr or echo");
  }
  if (!(o.rate > 0)) return Usage("--rate (calls per second) must be given and positive");
  if (absl::GetFlag(FLAGS_timeout_ms) < 1) return Usage("--timeout_ms must be positive");
  if (o.max_outstanding < 1) return Usage("--max_outstanding must be positive");
  if (o.max_in_flight < 1) return Usage("--max_in_flight must be positive");
  auto rpc = Connect();
  if (!rpc.ok()) return Error(rpc.status());
  auto r = gb::RunLoad(rpc->get(), o);
  if (!r.ok()) return Error(r.status());
  std::vector<std::string> failures;
  for (const auto& [code, n] : r->failures) failures.push_back(absl::StrFormat("%s:%d", code, n));
  const double secs = absl::ToDoubleSeconds(o.duration);
  printf("load %s %s: offered %.0f/s for %.1f s: %llu calls, %llu ok, %llu failed, %llu dropped\n",
         o.op.c_str(), absl::GetFlag(FLAGS_server).c_str(), o.rate, secs,
         (unsigned long long)r->offered, (unsigned long long)r->ok, (unsigned long long)r->failed,
         (unsigned long long)r->dropped);
  printf(
      "achieved %.0f ops/s; response ms: mean %.3f, p50 %.3f, p99 %.3f, max %.3f; "
      "generator lag max %.3f ms%s%s\n",
      r->achieved_per_s, r->mean_ms, r->p50_ms, r->p99_ms, r->max_ms, r->max_send_lag_ms,
      failures.empty() ? "" : "; failures ", absl::StrJoin(failures, " ").c_str());
  printf("CSV,load,%s,%.1f,%.3f,%llu,%llu,%llu,%llu,%.1f,%.4f,%.4f,%.4f,%.4f,%.4f,%s\n",
         o.op.c_str(), o.rate, secs, (unsigned long long)r->offered, (unsigned long long)r->dropped,
         (unsigned long long)r->ok, (unsigned long long)r->failed, r->achieved_per_s, r->mean_ms,
         r->p50_ms, r->p99_ms, r->max_ms, r->max_send_lag_ms, absl::StrJoin(failures, ";").c_str());
  return 0;
}

// `suite`: hands over to bench/suite.py (its own options, not absl flags).
int ExecSuite(int argc, char** argv) {
  const std::string script = std::string(GRANTFS_SOURCE_DIR) + "/bench/suite.py";
  std::vector<std::string> args = {"python3", script, "--build", GRANTFS_BUILD_DIR};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  execvp("python3", cargs.data());
  fprintf(stderr, "grantfs-bench: cannot run python3 %s: %s\n", script.c_str(), strerror(errno));
  return 2;
}

struct Command {
  std::function<int()> run;
  std::set<std::string> flags;  // the flags it reads; others are refused
  bool needs_dir;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "suite") return ExecSuite(argc, argv);
  absl::SetProgramUsageMessage(
      "grantfs-bench dd|meta|smallfiles --dir=DIR [options]\n"
      "       grantfs-bench rpc|load --server=HOST:PORT [options]\n"
      "       grantfs-bench suite [--quick|--smoke] [bench/suite.py options]\n"
      "(see the comment at the top of bench/bench_main.cc)");
  // --help lists every flag (the bench's and the TLS ones).
  absl::FlagsUsageConfig usage;
  grantfs::ListFlagsFrom({"bench/"}, &usage);
  absl::SetFlagsUsageConfig(usage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) return Usage("expected exactly one command");
  const std::map<std::string, Command> commands = {
      {"dd", {RunDd, {"dir", "mib", "bs_kib", "zeros", "runs"}, true}},
      {"meta", {RunMeta, {"dir", "files", "runs"}, true}},
      {"smallfiles", {RunSmallFiles, {"dir", "files", "file_kib", "runs"}, true}},
      {"rpc",
       {RunRpc,
        {"server", "secret_file", "tls_dir", "identity", "insecure", "sizes", "secs", "callers"},
        false}},
      {"load",
       {RunLoadCmd,
        {"server", "secret_file", "tls_dir", "identity", "insecure", "secs", "op", "rate",
         "timeout_ms", "max_outstanding", "max_in_flight"},
        false}},
  };
  auto it = commands.find(args[1]);
  if (it == commands.end()) return Usage(std::string("unknown command '") + args[1] + "'");
  const Command& cmd = it->second;
  static const char* const kFlags[] = {
      "dir",     "mib",         "bs_kib",  "zeros",      "files",           "file_kib",     "runs",
      "server",  "secret_file", "tls_dir", "identity",   "insecure",        "sizes",        "secs",
      "callers", "op",          "rate",    "timeout_ms", "max_outstanding", "max_in_flight"};
  for (const char* name : kFlags) {
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
    // A flag given a value for another command is a mistake worth saying.
    if (f != nullptr && f->CurrentValue() != f->DefaultValue() && cmd.flags.count(name) == 0) {
      return Usage(absl::StrFormat("--%s does not apply to '%s'", name, it->first));
    }
  }
  if (cmd.needs_dir && absl::GetFlag(FLAGS_dir).empty()) return Usage("--dir is required");
  if (!cmd.needs_dir && absl::GetFlag(FLAGS_server).empty()) return Usage("--server is required");
  if (absl::GetFlag(FLAGS_runs) < 1) return Usage("--runs must be at least 1");
  if (absl::GetFlag(FLAGS_mib) < 1) return Usage("--mib must be at least 1");
  if (absl::GetFlag(FLAGS_bs_kib) < 1 || absl::GetFlag(FLAGS_bs_kib) > 65536) {
    return Usage("--bs_kib must be from 1 to 65536");
  }
  if (absl::GetFlag(FLAGS_files) < 0) return Usage("--files must be positive");
  if (absl::GetFlag(FLAGS_file_kib) < 0 || absl::GetFlag(FLAGS_file_kib) > 65536) {
    return Usage("--file_kib must be from 0 to 65536");
  }
  if (absl::GetFlag(FLAGS_secs) < 0) return Usage("--secs must be positive");
  return cmd.run();
}
