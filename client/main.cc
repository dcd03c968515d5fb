// grantfs-mount: mounts a GrantFS volume over FUSE.
//
//   grantfs-mount [flags] SERVER[:PORT][,SERVER2...]:/[PATH] MOUNTPOINT [-o opt,...] [-f]
//
// PATH (default "/") is the directory of the volume the mount shows as its
// root; a node whose certificate restricts it to a subtree may name only
// that subtree or a directory below it.
//
// Also works as mount.grantfs (`cmake --install` puts that link in /sbin), so
// `mount -t grantfs SERVER:/ /mnt/x -o leases=off` and /etc/fstab entries
// use it: a -o option that names a flag sets it, the rest go to FUSE.
// Without -f (or --foreground) it returns once the mount is up and keeps
// serving in the background.
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/filesystem.h"
#include "client/fuse_ops.h"
#include "client/rpc_client.h"
#include "common/flag_help.h"
#include "common/log_rotation.h"
#include "common/metrics_http.h"
#include "common/mutex_checks.h"
#include "common/names.h"
#include "common/transport_flags.h"
#include "glog/logging.h"

ABSL_FLAG(bool, foreground, false, "stay in the foreground (same as -f)");
ABSL_FLAG(std::string, log_file, "/var/log/grantfs-mount.log",
          "where a background mount writes its log");
ABSL_FLAG(int, log_max_mb, 64,
          "a background mount's log past this size moves to LOG_FILE.1 (the older .1 goes) and "
          "a new one starts; a log moved away by another (logrotate) is followed; 0: no limit");
ABSL_FLAG(double, attr_timeout, 1.0,
          "with --leases=false: seconds the kernel may cache attributes");
ABSL_FLAG(double, entry_timeout, 1.0, "with --leases=false: seconds the kernel may cache names");
ABSL_FLAG(std::string, ns_grants, "off",
          "namespace grants (needs leases): on: creates, mkdirs, symlinks and removals in "
          "directories this mount made are answered at once and sent to the server as a log, "
          "in batches (at most 1 s old; fsync and fsyncdir wait for it); off: every change is "
          "a call, durable and replicated before it returns (docs/namespace-grants.md)");
ABSL_FLAG(std::string, leases, "on",
          "metadata leases: on: names and attributes are answered by the mount while the server "
          "leases them, and every other node's change recalls them first (exact); off (or "
          "false): asked every time, cached by the kernel for --attr_timeout/--entry_timeout");
ABSL_FLAG(int, rpc_timeout_ms, 30000, "deadline of one RPC attempt");
ABSL_FLAG(int, retry_ms, 60000, "how long an unreachable server is retried before EIO");
ABSL_FLAG(int, mount_wait_ms, 0,
          "how long mounting waits for a server to answer before it fails (exit 1); 0: as long "
          "as --retry_ms");
ABSL_FLAG(int, threads, 16, "maximum FUSE worker threads");
ABSL_FLAG(std::string, write_mode, "fastwrite",
          "fastwrite (space grants + write-back cache) or writethrough (one RPC per write)");
ABSL_FLAG(int, dirty_limit_mb, 0,
          "fastwrite: most MiB of written data held before writers wait; 0 = 1/8 of the "
          "machine's memory, between 256 MiB and 2 GiB");
ABSL_FLAG(int, flushers, 4, "fastwrite: threads sending cached data in parallel");
ABSL_FLAG(int, extent_kib, 4096, "fastwrite: extent size sent at once (1024..8192 KiB)");
ABSL_FLAG(double, flush_age_s, 5.0, "fastwrite: cached data older than this is sent");
ABSL_FLAG(int, readahead_kib, 8192,
          "KiB fetched ahead of a sequential reader, in 1 MiB reads in parallel (0 = off)");
ABSL_FLAG(int, clean_cache_mb, 16,
          "MiB of acknowledged small writes kept to answer re-reads while the file's lease "
          "holds (0 = off)");
ABSL_FLAG(int, readdir_ahead, 8,
          "with leases: once a walk (find, du, ls -R) enters a subdirectory, the listings of "
          "this many subdirectories after it are read ahead (0 = off)");
ABSL_FLAG(int, statfs_max_age_ms, 1000,
          "statfs answers with the counts the server sent with its last write, log batch or "
          "statfs reply for this long, unless a call of this mount changed them since; a "
          "change made on another node shows within it (0 = every statfs asks the server)");
ABSL_FLAG(std::string, metrics_addr, "",
          "address:port to serve Prometheus metrics on, over plain HTTP with no authentication "
          "(docs/metrics.md); empty: none");
ABSL_FLAG(int, grant_mb, 64,
          "fastwrite: first grant refill size in MiB (grows with the write rate)");

namespace {

struct Args {
  std::vector<std::string> servers;
  std::string mountpoint;
  std::string root = "/";  // SERVERS:/PATH: the directory shown as the mount's root
  std::vector<std::string> fuse_opts;
  bool foreground = false;
  bool fake = false;  // mount -f: checks only
};

std::string Basename(const char* path) {
  const std::string p(path);
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// A -o option that names one of this program's flags ("leases=off",
// "tls_dir=/etc/grantfs"; a boolean one bare, "insecure", or negated,
// "noinsecure"): set like --NAME=VALUE, after the command line's flags. So
// an /etc/fstab line can say everything a command line can. False (with
// *error) when it names a flag but cannot set it; *taken says whether it
// named one.
bool SetFlagOption(const std::string& option, bool* taken, std::string* error) {
  const size_t eq = option.find('=');
  std::string name = option.substr(0, eq);
  std::string value = eq == std::string::npos ? "" : option.substr(eq + 1);
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr && eq == std::string::npos && absl::StartsWith(name, "no")) {
    flag = absl::FindCommandLineFlag(name.substr(2));
    if (flag != nullptr && flag->IsOfType<bool>()) {
      name = name.substr(2);
      value = "false";
    } else {
      flag = nullptr;
    }
  }
  *taken = flag != nullptr;
  if (flag == nullptr) return true;
  // absl's own flags read other sources when parsed from a command line; a
  // -o option arrives after that.
  if (name == "flagfile" || name == "fromenv" || name == "tryfromenv" || name == "undefok") {
    *error = absl::StrCat("-o ", option, ": not an option of grantfs-mount");
    return false;
  }
  // mount(8) and systemd wait for the helper to return.
  if (name == "foreground") {
    *error = absl::StrCat("-o ", option, ": a mount through mount(8) runs in the background");
    return false;
  }
  if (eq == std::string::npos && value.empty()) {
    if (!flag->IsOfType<bool>()) {
      *error = absl::StrCat("-o ", option, ": needs a value (", name, "=...)");
      return false;
    }
    value = "true";
  }
  if (!flag->ParseFrom(value, error)) {
    *error = absl::StrCat("-o ", option, ": ", *error);
    return false;
  }
  return true;
}

// Splits mount(8)-style arguments from the absl flags.
bool ParseArgs(int argc, char** argv, Args* out) {
  std::vector<char*> rest = {argv[0]};
  std::vector<std::string> positional;
  std::vector<std::string> options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-o" && i + 1 < argc) {
      for (auto& o : absl::StrSplit(argv[++i], ',', absl::SkipEmpty())) options.emplace_back(o);
    } else if (a == "-f") {
      // To mount(8), whose helper this is when called mount.grantfs, -f
      // means "fake": do everything but mount.
      if (absl::StartsWith(Basename(argv[0]), "mount.")) {
        out->fake = true;
      } else {
        out->foreground = true;
      }
    } else if (a == "-n" || a == "-s" || a == "-v") {
      // mount(8) helper flags: no mtab, sloppy, verbose.
    } else if ((a == "-t" || a == "-N") && i + 1 < argc) {
      ++i;  // mount(8) helper: type.subtype, namespace
    } else if (a.rfind("-", 0) == 0) {
      rest.push_back(argv[i]);
    } else {
      positional.push_back(a);
    }
  }
  std::vector<char*> parsed_rest;
  for (char* p : absl::ParseCommandLine(rest.size(), rest.data())) parsed_rest.push_back(p);
  for (const std::string& o : options) {
    bool taken = false;
    std::string error;
    if (!SetFlagOption(o, &taken, &error)) {
      fprintf(stderr, "grantfs-mount: %s\n", error.c_str());
      return false;
    }
    if (!taken) out->fuse_opts.push_back(o);
  }
  if (positional.size() != 2) return false;
  std::string spec = positional[0];
  // SERVERS:/ or SERVERS:/PATH (no server address holds ":/").
  const size_t colon_slash = spec.find(":/");
  if (colon_slash != std::string::npos) {
    absl::StatusOr<std::string> root = grantfs::NormalizePath(spec.substr(colon_slash + 1));
    if (!root.ok()) {
      fprintf(stderr, "grantfs-mount: %s\n", std::string(root.status().message()).c_str());
      return false;
    }
    out->root = *root;
    spec = spec.substr(0, colon_slash);
  }
  out->servers = grantfs::ServerAddresses(spec);
  out->mountpoint = positional[1];
  out->foreground = out->foreground || absl::GetFlag(FLAGS_foreground);
  return !out->servers.empty();
}

// Mount options the kernel or fusermount understand; GrantFS's own are dropped.
std::vector<std::string> FuseMountOptions(const Args& args) {
  // libfuse splits -o at commas unless escaped: "A\,B" keeps a server list
  // whole in the file system's name.
  std::vector<std::string> keep = {"default_permissions", "allow_other",
                                   "fsname=grantfs:" + absl::StrJoin(args.servers, "\\,"),
                                   "subtype=grantfs"};
  // mount(8)'s and systemd's own, and atime policies FUSE does not take (a
  // FUSE mount keeps the kernel's default, relatime).
  static const char* const kDropped[] = {
      "rw",       "defaults",   "_netdev",     "auto",          "noauto",   "user",      "nouser",
      "users",    "nousers",    "owner",       "noowner",       "group",    "nogroup",   "nofail",
      "relatime", "norelatime", "strictatime", "nostrictatime", "lazytime", "nolazytime"};
  for (const std::string& o : args.fuse_opts) {
    if (std::find(std::begin(kDropped), std::end(kDropped), o) != std::end(kDropped) ||
        absl::StartsWith(o, "x-") || absl::StartsWith(o, "comment=")) {
      continue;
    }
    keep.push_back(o);
  }
  return keep;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "grantfs-mount [flags] SERVER[:PORT][,SERVER...]:/[PATH] MOUNTPOINT [-o opts] [-f]");
  // --help lists every flag (the mount's and the TLS ones).
  absl::FlagsUsageConfig usage;
  grantfs::ListFlagsFrom({"client/"}, &usage);
  absl::SetFlagsUsageConfig(usage);
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    fprintf(stderr, "usage: %s\n", std::string(absl::ProgramUsageMessage()).c_str());
    return 2;
  }
  if (args.fake) return 0;
  if (absl::GetFlag(FLAGS_log_max_mb) < 0) {
    fprintf(stderr, "grantfs-mount: --log_max_mb must be >= 0\n");
    return 2;
  }
  grantfs::ApplyMutexDeadlockCheck();
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  std::unique_ptr<grantfs::LogRotation> log_rotation;  // background mode: keeps the log bounded

  // Background mode: the parent returns once the child reports the mount up.
  int ready_pipe[2] = {-1, -1};
  if (!args.foreground) {
    if (pipe(ready_pipe) != 0) return 1;
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid > 0) {
      close(ready_pipe[1]);
      char status = 1;
      if (read(ready_pipe[0], &status, 1) != 1) status = 1;
      if (status != 0) {
        fprintf(stderr, "grantfs-mount: mount failed, see %s\n",
                absl::GetFlag(FLAGS_log_file).c_str());
      }
      return status;
    }
    close(ready_pipe[0]);
    setsid();
    if (freopen(absl::GetFlag(FLAGS_log_file).c_str(), "a", stderr) == nullptr) {
      freopen("/dev/null", "a", stderr);
    }
    // A reopened stderr is fully buffered: make each log line reach the file
    // before the parent reports success or failure.
    setvbuf(stderr, nullptr, _IOLBF, 0);
    log_rotation = std::make_unique<grantfs::LogRotation>(
        absl::GetFlag(FLAGS_log_file), STDERR_FILENO,
        static_cast<uint64_t>(absl::GetFlag(FLAGS_log_max_mb)) << 20);
    freopen("/dev/null", "r", stdin);
    freopen("/dev/null", "a", stdout);
  }
  auto report = [&](char status) {
    if (ready_pipe[1] >= 0) {
      (void)!write(ready_pipe[1], &status, 1);
      close(ready_pipe[1]);
      ready_pipe[1] = -1;
    }
  };

  // Only FUSE threads take SIGTERM/SIGINT/SIGHUP (they end the loop); the
  // gRPC threads started below inherit a mask that blocks them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // Its thread, like gRPC's, inherits the mask: the stop signals reach the
  // FUSE loop only.
  if (log_rotation) log_rotation->Start(absl::Seconds(10));

  grantfs::RpcClientOptions ro;
  ro.servers = args.servers;
  absl::StatusOr<grantfs::Transport> transport =
      grantfs::TransportFromFlags("node", "grantfs-mount");
  if (!transport.ok()) {
    LOG(ERROR) << transport.status();
    report(2);
    return 2;
  }
  ro.transport = *std::move(transport);
  ro.call_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_rpc_timeout_ms));
  ro.retry_for = absl::Milliseconds(absl::GetFlag(FLAGS_retry_ms));
  auto rpc = grantfs::RpcClient::Create(ro);
  if (!rpc.ok()) {
    LOG(ERROR) << rpc.status();
    report(1);
    return 1;
  }
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  grantfs::FileSystemOptions fo;
  fo.client_name = absl::StrCat(host, ":", args.mountpoint);
  fo.root_path = args.root;
  if (const int wait = absl::GetFlag(FLAGS_mount_wait_ms); wait > 0) {
    fo.mount_wait = absl::Milliseconds(wait);
  } else if (wait < 0) {
    LOG(ERROR) << "--mount_wait_ms must be >= 0";
    report(2);
    return 2;
  }
  const std::string leases = absl::GetFlag(FLAGS_leases);
  if (leases != "on" && leases != "off" && leases != "true" && leases != "false") {
    LOG(ERROR) << "--leases must be on or off, not '" << leases << "'";
    report(2);
    return 2;
  }
  fo.leases = leases == "on" || leases == "true";
  const std::string ns_grants = absl::GetFlag(FLAGS_ns_grants);
  if (ns_grants != "on" && ns_grants != "off" && ns_grants != "true" && ns_grants != "false") {
    LOG(ERROR) << "--ns_grants must be on or off, not '" << ns_grants << "'";
    report(2);
    return 2;
  }
  fo.ns_grants = ns_grants == "on" || ns_grants == "true";
  if (fo.ns_grants && !fo.leases) {
    LOG(WARNING) << "--ns_grants=on needs leases: namespace grants are off";
    fo.ns_grants = false;
  }
  const std::string mode = absl::GetFlag(FLAGS_write_mode);
  if (mode != "fastwrite" && mode != "writethrough") {
    LOG(ERROR) << "--write_mode must be fastwrite or writethrough, not '" << mode << "'";
    report(2);
    return 2;
  }
  fo.fastwrite = mode == "fastwrite";
  if (absl::GetFlag(FLAGS_dirty_limit_mb) < 0) {
    LOG(ERROR) << "--dirty_limit_mb must be >= 0";
    report(2);
    return 2;
  }
  fo.cache.dirty_limit = static_cast<uint64_t>(absl::GetFlag(FLAGS_dirty_limit_mb)) << 20;
  if (fo.cache.dirty_limit == 0) {
    // Like the kernel's dirty_ratio for local file systems: a share of memory.
    const uint64_t ram = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
    fo.cache.dirty_limit = std::clamp<uint64_t>(ram / 8, 256ull << 20, 2048ull << 20);
  }
  LOG(INFO) << "metadata leases " << (fo.leases ? "on" : "off") << ", namespace grants "
            << (fo.ns_grants ? "on" : "off") << ", write mode " << mode << ", dirty limit "
            << (fo.cache.dirty_limit >> 20) << " MiB";
  fo.cache.flushers = std::max(1, absl::GetFlag(FLAGS_flushers));
  fo.cache.extent_bytes =
      static_cast<uint64_t>(std::clamp(absl::GetFlag(FLAGS_extent_kib), 1024, 8192)) << 10;
  fo.cache.max_age = absl::Seconds(absl::GetFlag(FLAGS_flush_age_s));
  fo.grants.initial_refill_bytes = static_cast<uint64_t>(std::max(1, absl::GetFlag(FLAGS_grant_mb)))
                                   << 20;
  fo.readahead.window_bytes = static_cast<uint64_t>(std::max(0, absl::GetFlag(FLAGS_readahead_kib)))
                              << 10;
  fo.clean_cache_bytes = static_cast<uint64_t>(std::max(0, absl::GetFlag(FLAGS_clean_cache_mb)))
                         << 20;
  fo.listing_prefetch.window = static_cast<size_t>(std::max(0, absl::GetFlag(FLAGS_readdir_ahead)));
  fo.statfs_max_age = absl::Milliseconds(std::max(0, absl::GetFlag(FLAGS_statfs_max_age_ms)));
  grantfs::FileSystem fs(fo, *std::move(rpc));
  grantfs::FuseOptions fuse_options;
  fuse_options.attr_timeout_s = absl::GetFlag(FLAGS_attr_timeout);
  fuse_options.entry_timeout_s = absl::GetFlag(FLAGS_entry_timeout);
  grantfs::FuseAdapter adapter(&fs, fuse_options);
  std::unique_ptr<grantfs::MetricsServer> metrics_server;  // stops before `adapter` goes
  if (const std::string addr = absl::GetFlag(FLAGS_metrics_addr); !addr.empty()) {
    adapter.EnableMetrics();
    absl::StatusOr<std::unique_ptr<grantfs::MetricsServer>> m =
        grantfs::MetricsServer::Start(addr, [&adapter] { return adapter.RenderMetrics(); });
    if (!m.ok()) {
      LOG(ERROR) << m.status();
      report(2);
      return 2;
    }
    metrics_server = *std::move(m);
  }

  if (absl::Status s = fs.Start(&adapter); !s.ok()) {
    LOG(ERROR) << "cannot mount " << args.root << " of " << absl::StrJoin(args.servers, " or ")
               << ": " << s;
    report(1);
    return 1;
  }

  std::vector<std::string> opt_strings = {argv[0], "-o",
                                          absl::StrJoin(FuseMountOptions(args), ",")};
  std::vector<char*> fuse_argv;
  for (std::string& s : opt_strings) fuse_argv.push_back(s.data());
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(fuse_argv.size()), fuse_argv.data());
  fuse_session* se =
      fuse_session_new(&fargs, grantfs::FuseAdapter::Ops(), sizeof(fuse_lowlevel_ops), &adapter);
  if (se == nullptr) {
    LOG(ERROR) << "fuse_session_new failed";
    fs.Stop();
    report(1);
    return 1;
  }
  adapter.set_session(se);
  if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, args.mountpoint.c_str()) != 0) {
    LOG(ERROR) << "cannot mount on " << args.mountpoint;
    fuse_session_destroy(se);
    fs.Stop();
    report(1);
    return 1;
  }
  LOG(INFO) << "mounted " << absl::StrJoin(args.servers, ",") << ":" << args.root << " on "
            << args.mountpoint;
  report(0);

  pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
  fuse_loop_config* config = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(config, absl::GetFlag(FLAGS_threads));
  fuse_loop_cfg_set_idle_threads(config, 4);
  int ret = fuse_session_loop_mt(se, config);
  fuse_loop_cfg_destroy(config);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  LOG(INFO) << "unmounting " << args.mountpoint;
  adapter.set_session(nullptr);
  fs.Stop();
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  return ret == 0 ? 0 : 1;
}
