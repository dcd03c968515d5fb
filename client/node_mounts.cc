#include "client/node_mounts.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

extern char** environ;

namespace grantfs {
namespace {

constexpr char kGrantFsType[] = "fuse.grantfs";

// mountinfo escapes ' ', '\t', '\n' and '\\' as \ooo.
std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string ReadLink(const std::string& link) {
  char buf[4096];
  const ssize_t n = readlink(link.c_str(), buf, sizeof(buf) - 1);
  return n < 0 ? std::string() : std::string(buf, n);
}

bool Inside(const std::string& p, const std::string& dir) {
  return p == dir || absl::StartsWith(p, dir + "/");
}

// The last non-empty line of `file` (a mount's log: why it failed).
std::string LastLine(const std::string& file) {
  std::ifstream in(file);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!absl::StripAsciiWhitespace(line).empty()) last = line;
  }
  return std::string(absl::StripAsciiWhitespace(last));
}

// OK when no name on the way to `path` (nor `path` itself) is a symbolic
// link; names that do not exist yet end the walk (MakeDirs makes them as
// directories). The agent runs as root and the directories on the way may
// be writable by a local user: a symlink there would send a mount, or an
// unmount, elsewhere (/home, /etc).
absl::Status NoSymlinks(const std::string& path) {
  std::string so_far;
  for (absl::string_view name : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&so_far, "/", name);
    struct stat st;
    if (lstat(so_far.c_str(), &st) != 0) {
      if (errno == ENOENT) return absl::OkStatus();
      if (errno == ENOTCONN && so_far == path) return absl::OkStatus();  // a dead mount
      return absl::FailedPreconditionError(absl::StrCat(so_far, ": ", strerror(errno)));
    }
    if (S_ISLNK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("refused: ", so_far,
                       " is a symbolic link (a global mount path may not pass through one)"));
    }
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& path) {
  std::string so_far;
  for (absl::string_view name : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&so_far, "/", name);
    if (mkdir(so_far.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create ", so_far, ": ", strerror(errno)));
    }
    // Checked after mkdir too: EEXIST may be a symlink made meanwhile.
    struct stat st;
    if (lstat(so_far.c_str(), &st) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(so_far, ": ", strerror(errno)));
    }
    if (S_ISLNK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("refused: ", so_far,
                       " is a symbolic link (a global mount path may not pass through one)"));
    }
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(so_far, " is not a directory"));
    }
  }
  return absl::OkStatus();
}

// The pids whose parent is `parent` (/proc/PID/stat, field 4).
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  std::unique_ptr<DIR, int (*)(DIR*)> proc(opendir("/proc"), closedir);
  if (!proc) return out;
  while (struct dirent* de = readdir(proc.get())) {
    int pid = 0;
    if (!absl::SimpleAtoi(de->d_name, &pid)) continue;
    std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
    std::string stat_line;
    std::getline(in, stat_line);
    // PID (COMM) STATE PPID ...: COMM may hold spaces and parentheses.
    const size_t paren = stat_line.rfind(')');
    if (paren == std::string::npos) continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(absl::string_view(stat_line).substr(paren + 1), ' ', absl::SkipEmpty());
    int ppid = 0;
    if (f.size() >= 2 && absl::SimpleAtoi(f[1], &ppid) && ppid == parent) out.push_back(pid);
  }
  return out;
}

}  // namespace

namespace {

// The fstype and source of the top mount at `path` in /proc/self/mountinfo
// ({"", ""}: none).
std::pair<std::string, std::string> TopMount(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::pair<std::string, std::string> top;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    if (f.size() < 7 || Unescape(f[4]) != path) continue;
    for (size_t i = 6; i + 1 < f.size(); ++i) {
      if (f[i] == "-") {
        // The last one listed is on top.
        top = {std::string(f[i + 1]), i + 2 < f.size() ? Unescape(f[i + 2]) : std::string()};
        break;
      }
    }
  }
  return top;
}

}  // namespace

std::string SystemMounter::MountedType(const std::string& path) { return TopMount(path).first; }

bool SystemMounter::OfThisCluster(const std::string& path) {
  const auto [type, source] = TopMount(path);
  if (type != kGrantFsType || !absl::StartsWith(source, "grantfs:")) return false;
  const std::set<std::string> mine = absl::StrSplit(options_.servers, ',', absl::SkipEmpty());
  const std::set<std::string> its =
      absl::StrSplit(absl::string_view(source).substr(8), ',', absl::SkipEmpty());
  return !mine.empty() && mine == its;
}

MountAt SystemMounter::Probe(const std::string& path) {
  const std::string type = MountedType(path);
  if (type.empty()) return MountAt::kNothing;
  if (type != kGrantFsType) return MountAt::kOther;
  struct stat st;
  if (stat(path.c_str(), &st) != 0 && errno == ENOTCONN) return MountAt::kDead;
  return MountAt::kGrantFs;
}

std::string SystemMounter::LogPath(const std::string& path) const {
  return absl::StrCat(options_.log_dir, "/mount-", absl::StrReplaceAll(path, {{"/", "_"}}), ".log");
}

absl::Status SystemMounter::Mount(const proto::GlobalMountRecord& rec) {
  if (absl::Status s = MakeDirs(rec.path()); !s.ok()) return s;
  const std::string log = LogPath(rec.path());
  std::vector<std::string> argv = {options_.mount_binary,
                                   absl::StrCat(options_.servers, ":", rec.subdir()), rec.path(),
                                   absl::StrCat("--log_file=", log)};
  if (!rec.options().empty()) {
    argv.push_back("-o");
    argv.push_back(rec.options());
  }
  // grantfs-mount gives up on an unreachable cluster at three quarters of
  // the agent's bound: its own reason ("no server answered ...") is then
  // what the agent reports, rather than a killed daemon.
  argv.push_back(absl::StrCat(
      "--mount_wait_ms=",
      std::max<int64_t>(1, absl::ToInt64Milliseconds(options_.mount_timeout * 3 / 4))));
  for (const std::string& f : options_.mount_flags) argv.push_back(f);
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  // Its own output goes to the same log; no signal blocked or ignored (the
  // agent blocks its stop signals in every thread).
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, cargv[0], &fa, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (err != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run ", options_.mount_binary, ": ", strerror(err)));
  }
  // grantfs-mount returns once the mount is up (its daemon stays).
  const absl::Time deadline = absl::Now() + options_.mount_timeout;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("waiting for grantfs-mount: ", strerror(errno)));
    }
    if (absl::Now() > deadline) {
      // grantfs-mount forks its daemon (setsid: a group of its own) and
      // waits for it; the daemon would keep trying and mount later, under
      // the agent's next attempt: stacked mounts. So the daemon goes first,
      // while it is still this grantfs-mount's child and can be found.
      const std::vector<pid_t> daemons = ChildrenOf(pid);
      for (pid_t d : daemons) kill(d, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      for (pid_t d : daemons) {
        for (int i = 0; i < 100 && kill(d, 0) == 0; ++i) absl::SleepFor(absl::Milliseconds(20));
        if (kill(d, 0) == 0) {
          return absl::DeadlineExceededError(absl::StrCat(
              "grantfs-mount did not mount within ", absl::FormatDuration(options_.mount_timeout),
              " and its daemon (pid ", d, ") outlives SIGKILL (log ", log, ")"));
        }
      }
      return absl::DeadlineExceededError(absl::StrCat("grantfs-mount did not mount within ",
                                                      absl::FormatDuration(options_.mount_timeout),
                                                      " (log ", log, ")"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  const std::string why = LastLine(log);
  return absl::FailedPreconditionError(
      absl::StrCat("grantfs-mount ",
                   WIFEXITED(status) ? absl::StrCat("exited with ", WEXITSTATUS(status))
                                     : absl::StrCat("died of signal ", WTERMSIG(status)),
                   why.empty() ? "" : ": ", why, " (log ", log, ")"));
}

absl::Status SystemMounter::Unmount(const std::string& path, bool lazy) {
  const std::string type = MountedType(path);
  if (type.empty()) return absl::OkStatus();
  // Only a GrantFS mount, at exactly this path (no symlink on the way, none
  // followed at the end): never what a local user pointed the path at.
  if (type != kGrantFsType) {
    return absl::PermissionDeniedError(
        absl::StrCat("refused to unmount ", path, ": a ", type, " mount, not ", kGrantFsType));
  }
  if (absl::Status s = NoSymlinks(path); !s.ok()) return absl::PermissionDeniedError(s.message());
  if (umount2(path.c_str(), (lazy ? MNT_DETACH : 0) | UMOUNT_NOFOLLOW) == 0) {
    return absl::OkStatus();
  }
  const int err = errno;
  if (err == EINVAL || err == ENOENT) return absl::OkStatus();  // not mounted any more
  if (err == EBUSY) {
    std::string who = WhoUses(path);
    if (who.empty()) who = "no process of this node's mount namespace uses it (a mount inside it?)";
    return absl::FailedPreconditionError(who);
  }
  return absl::InternalError(absl::StrCat("umount ", path, ": ", strerror(err)));
}

std::string SystemMounter::WhoUses(const std::string& path) {
  const std::string self_ns = ReadLink("/proc/self/ns/mnt");
  const std::string self_pid = absl::StrCat(getpid());
  std::vector<std::string> found;
  int more = 0;
  std::unique_ptr<DIR, int (*)(DIR*)> proc(opendir("/proc"), closedir);
  if (!proc) return "";
  while (struct dirent* de = readdir(proc.get())) {
    int pid = 0;
    if (!absl::SimpleAtoi(de->d_name, &pid) || de->d_name == self_pid) continue;
    const std::string base = absl::StrCat("/proc/", pid);
    if (ReadLink(base + "/ns/mnt") != self_ns) continue;
    std::string what;
    if (Inside(ReadLink(base + "/cwd"), path)) {
      what = "has its working directory inside";
    } else if (Inside(ReadLink(base + "/root"), path)) {
      what = "has its root inside";
    } else {
      std::unique_ptr<DIR, int (*)(DIR*)> fds(opendir((base + "/fd").c_str()), closedir);
      while (fds && what.empty()) {
        struct dirent* fd = readdir(fds.get());
        if (fd == nullptr) break;
        if (fd->d_name[0] == '.') continue;
        const std::string target = ReadLink(absl::StrCat(base, "/fd/", fd->d_name));
        if (Inside(target, path)) what = absl::StrCat("has ", target, " open");
      }
    }
    if (what.empty()) continue;
    if (found.size() >= 5) {
      ++more;
      continue;
    }
    std::string comm;
    std::ifstream(base + "/comm") >> comm;
    found.push_back(absl::StrCat("pid ", pid, " (", comm, ") ", what));
  }
  std::string out = absl::StrJoin(found, "; ");
  if (more > 0) absl::StrAppend(&out, "; and ", more, " more");
  return out;
}

}  // namespace grantfs
