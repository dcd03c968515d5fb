#include "client/node_mounts.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
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

absl::Status MakeDirs(const std::string& path) {
  std::string so_far;
  for (absl::string_view name : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&so_far, "/", name);
    if (mkdir(so_far.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create ", so_far, ": ", strerror(errno)));
    }
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a directory"));
  }
  return absl::OkStatus();
}

// `path` as /proc/self/mountinfo names a mount there: with the symlinks
// of its directories (and its own, if it is one) resolved. The last name is
// not looked at otherwise: a dead FUSE mount answers ENOTCONN to it.
std::string Resolved(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char* r = realpath(path.c_str(), nullptr);
    if (r != nullptr) {
      std::string out(r);
      free(r);
      return out;
    }
    return path;
  }
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return path;
  char* dir = realpath(path.substr(0, slash).c_str(), nullptr);
  if (dir == nullptr) return path;
  std::string out = absl::StrCat(dir, path.substr(slash));
  free(dir);
  return out;
}

}  // namespace

std::string SystemMounter::MountedType(const std::string& path_in) {
  const std::string path = Resolved(path_in);
  std::ifstream in("/proc/self/mountinfo");
  std::string line, type;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    if (f.size() < 7 || Unescape(f[4]) != path) continue;
    for (size_t i = 6; i + 1 < f.size(); ++i) {
      if (f[i] == "-") {
        type = std::string(f[i + 1]);  // the last one listed is on top
        break;
      }
    }
  }
  return type;
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
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
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
  if (MountedType(path).empty()) return absl::OkStatus();
  if (umount2(path.c_str(), lazy ? MNT_DETACH : 0) == 0) return absl::OkStatus();
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
