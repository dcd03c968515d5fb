// grantfs-passthrough: a minimal FUSE passthrough of a local directory, the
// yardstick for GrantFS benchmarks (the ceiling any FUSE file system reaches
// here). It uses the GrantFS mount's FUSE settings: multi-threaded loop,
// no writeback cache, 1 MiB readahead and max_write, 1 s attribute and entry
// timeouts, default_permissions,allow_other; xattrs as libfuse's passthrough_ll.
//
//   grantfs-passthrough [flags] SOURCE_DIR MOUNTPOINT [-f] [-o opt,...]
//
// Without -f it returns 0 once mounted and serves in the background.
// SIGTERM, SIGINT or an unmount (fusermount3 -u) ends it.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "bench/passthrough/passthrough_ops.h"
#include "glog/logging.h"

ABSL_FLAG(int, threads, 16, "maximum FUSE worker threads");
ABSL_FLAG(double, timeout, 1.0, "seconds the kernel may cache attributes and names");
ABSL_FLAG(int, max_inode_fds, 0,
          "O_PATH fds of inodes kept open at once, past which the least recently used are "
          "closed and reopened by file handle when needed (0: the open-files limit less "
          "1,024)");

namespace {

struct Args {
  std::string source;
  std::string mountpoint;
  std::vector<std::string> fuse_opts;
  bool foreground = false;
};

// Splits -f, -o and the two paths from the absl flags.
bool ParseArgs(int argc, char** argv, Args* out) {
  std::vector<char*> rest = {argv[0]};
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-o" && i + 1 < argc) {
      out->fuse_opts.push_back(argv[++i]);
    } else if (a == "-f") {
      out->foreground = true;
    } else if (a.rfind("-", 0) == 0) {
      rest.push_back(argv[i]);
    } else {
      positional.push_back(a);
    }
  }
  absl::ParseCommandLine(rest.size(), rest.data());
  if (positional.size() != 2) return false;
  // Absolute paths: the daemon changes to / (and must unmount by path).
  char* source = realpath(positional[0].c_str(), nullptr);
  char* mountpoint = realpath(positional[1].c_str(), nullptr);
  out->source = source != nullptr ? source : positional[0];
  out->mountpoint = mountpoint != nullptr ? mountpoint : positional[1];
  free(source);
  free(mountpoint);
  return true;
}

}  // namespace

// Raises the open-files limit as far as the kernel and the process's
// capabilities allow (raising the hard limit needs CAP_SYS_RESOURCE, which a
// container may lack), and returns the limit now in force. All but 1,024
// of it (half of a small one) goes to the inode table's O_PATH fds (past
// that it reopens them by file handle), the rest to open files and
// directories.
rlim_t RaiseFileLimit() {
  rlim_t want = 1 << 20;
  if (FILE* f = fopen("/proc/sys/fs/nr_open", "r")) {
    unsigned long long nr = 0;
    if (fscanf(f, "%llu", &nr) == 1 && nr > 0) want = std::min<rlim_t>(want, nr);
    fclose(f);
  }
  rlimit cur;
  if (getrlimit(RLIMIT_NOFILE, &cur) != 0) return 1024;
  if (cur.rlim_cur >= want) return cur.rlim_cur;
  rlimit raised = {want, std::max(want, cur.rlim_max)};
  if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    raised = {cur.rlim_max, cur.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &raised) != 0) return cur.rlim_cur;
  }
  LOG(INFO) << "open files limit: " << raised.rlim_cur;
  return raised.rlim_cur;
}

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "grantfs-passthrough [flags] SOURCE_DIR MOUNTPOINT [-f] [-o opt,...]");
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    fprintf(stderr, "usage: %s\n", std::string(absl::ProgramUsageMessage()).c_str());
    return 2;
  }
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  umask(0);  // the kernel already applied the caller's umask to every mode
  const rlim_t files = RaiseFileLimit();

  const int root_fd = open(args.source.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) {
    PLOG(ERROR) << "cannot open " << args.source;
    return 1;
  }
  grantfs::passthrough::PassthroughOptions options;
  options.attr_timeout_s = absl::GetFlag(FLAGS_timeout);
  options.entry_timeout_s = absl::GetFlag(FLAGS_timeout);
  options.max_inode_fds = absl::GetFlag(FLAGS_max_inode_fds) > 0
                              ? static_cast<size_t>(absl::GetFlag(FLAGS_max_inode_fds))
                              : std::max<size_t>(64, files > 4096 ? files - 1024 : files / 2);
  grantfs::passthrough::Passthrough fs(root_fd, options);

  // A comma would end the option: fsname keeps the source path without them.
  std::string fsname = "passthrough:" + args.source;
  std::replace(fsname.begin(), fsname.end(), ',', '_');
  std::vector<std::string> opts = {"default_permissions", "allow_other", "fsname=" + fsname,
                                   "subtype=grantfs-passthrough"};
  opts.insert(opts.end(), args.fuse_opts.begin(), args.fuse_opts.end());
  std::vector<std::string> fuse_argv_strings = {argv[0], "-o", absl::StrJoin(opts, ",")};
  std::vector<char*> fuse_argv;
  for (std::string& s : fuse_argv_strings) fuse_argv.push_back(s.data());
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(fuse_argv.size()), fuse_argv.data());

  fuse_session* se = fuse_session_new(&fargs, grantfs::passthrough::Passthrough::Ops(),
                                      sizeof(fuse_lowlevel_ops), &fs);
  if (se == nullptr) {
    LOG(ERROR) << "fuse_session_new failed";
    return 1;
  }
  if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, args.mountpoint.c_str()) != 0) {
    LOG(ERROR) << "cannot mount on " << args.mountpoint;
    fuse_session_destroy(se);
    return 1;
  }
  // Mounted: in the background the parent exits 0 here, the child serves.
  fuse_daemonize(args.foreground ? 1 : 0);

  fuse_loop_config* config = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(config, absl::GetFlag(FLAGS_threads));
  fuse_loop_cfg_set_idle_threads(config, 4);
  const int ret = fuse_session_loop_mt(se, config);
  fuse_loop_cfg_destroy(config);

  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  // The loop returns the number of the signal that ended it, or a negative
  // errno if reading /dev/fuse failed (an unmount is a clean 0).
  return ret < 0 ? 1 : 0;
}
