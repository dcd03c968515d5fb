// grantfs-latency-proxy: a TCP proxy that adds a fixed one-way delay to
// every byte, in both directions, so benchmarks can see GrantFS over a
// slower network (this kernel has no netem qdisc).
//
//   grantfs-latency-proxy --listen=127.0.0.1:7421 --target=127.0.0.1:7420 --delay_ms=5
//
// Each accepted connection gets its own connection to the target. Bytes
// read at time t are written at t + delay_ms, in order, without waiting for
// earlier writes: a request/response pays 2 * delay_ms more, a stream keeps
// its throughput (up to --max_queue_mib per direction and connection, past
// which reading stops until the queue drains). When one side finishes
// sending, its FIN is passed on (shutdown of the other side's writing half)
// delay_ms later, after everything queued before it; the connection closes
// when both halves are done, or at once on a write error. SIGTERM or SIGINT ends the proxy.
//
// One thread runs an epoll loop; a min-heap of due times drives the writes.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/flag_help.h"
#include "glog/logging.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7421", "HOST:PORT to accept connections on");
ABSL_FLAG(std::string, target, "127.0.0.1:7420", "HOST:PORT every connection is forwarded to");
ABSL_FLAG(double, delay_ms, 0, "one-way delay added in each direction (0: just forward)");
ABSL_FLAG(int, max_queue_mib, 64, "per direction and connection: stop reading past this backlog");

namespace {

int64_t NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Resolves "HOST:PORT" (or "[V6]:PORT") to a socket address.
bool Resolve(const std::string& spec, sockaddr_storage* addr, socklen_t* len) {
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = spec.substr(0, colon);
  const std::string port = spec.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) return false;
  memcpy(addr, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return true;
}

// Bytes read from one side, due to be written to the other at `due_ns`.
struct Chunk {
  int64_t due_ns;
  std::string data;
  size_t written = 0;
};

// One direction of a connection: from fd[from] to fd[1 - from].
struct Direction {
  std::deque<Chunk> queue;
  size_t queued = 0;        // bytes read but not yet written
  bool read_done = false;   // the source sent FIN (or failed)
  int64_t eof_due_ns = 0;   // ... which is passed on, delayed like data
  bool write_shut = false;  // ... and that FIN was passed on
  bool blocked = false;     // the destination's socket buffer is full
};

// A proxied connection: fd[0] is the accepted client, fd[1] the target.
struct Conn {
  uint64_t id;
  int fd[2] = {-1, -1};
  bool connecting = true;  // fd[1]'s non-blocking connect is in progress
  Direction dir[2];        // dir[s] carries what fd[s] sends
  uint32_t events[2] = {0, 0};
  bool registered[2] = {false, false};
};

class Proxy {
 public:
  Proxy(int64_t delay_ns, size_t max_queue, const sockaddr_storage& target, socklen_t target_len)
      : delay_ns_(delay_ns), max_queue_(max_queue), target_(target), target_len_(target_len) {}

  // Serves `listen_fd` until a signal arrives on `signal_fd`. Returns 0 then,
  // 1 if epoll fails.
  int Run(int listen_fd, int signal_fd);

 private:
  // epoll tokens: the listener, the signalfd, else (conn id << 1 | side).
  static constexpr uint64_t kListenToken = 0;
  static constexpr uint64_t kSignalToken = 1;

  void Accept(int listen_fd);
  void OnEvent(Conn* c, int side, uint32_t ev);
  // Reads what fd[side] has; false if the connection must close.
  bool ReadFrom(Conn* c, int side);
  // Writes what is due in dir[d]; false if the connection must close.
  bool Flush(Conn* c, int d, int64_t now);
  // Brings both fds' epoll interest in line with the connection's state.
  void UpdateInterest(Conn* c);
  // Closes the connection when both directions are done; true if closed.
  bool MaybeFinish(Conn* c);
  void Close(Conn* c);

  const int64_t delay_ns_;
  const size_t max_queue_;
  const sockaddr_storage target_;
  const socklen_t target_len_;

  int epfd_ = -1;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  // (due time, conn id, direction) of every queued chunk, earliest first;
  // entries of closed connections are skipped when they come up.
  using Timer = std::tuple<int64_t, uint64_t, int>;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  std::vector<char> buf_ = std::vector<char>(256 << 10);
};

int Proxy::Run(int listen_fd, int signal_fd) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epfd_ < 0) return 1;
  epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenToken;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, listen_fd, &ev);
  ev.data.u64 = kSignalToken;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, signal_fd, &ev);

  std::vector<epoll_event> events(256);
  while (true) {
    // Sleep until the earliest due chunk (exactly, not rounded to a ms).
    struct timespec timeout;
    struct timespec* wait = nullptr;
    if (!timers_.empty()) {
      const int64_t left = std::max<int64_t>(0, std::get<0>(timers_.top()) - NowNs());
      timeout.tv_sec = left / 1000000000;
      timeout.tv_nsec = left % 1000000000;
      wait = &timeout;
    }
    const int n = epoll_pwait2(epfd_, events.data(), events.size(), wait, nullptr);
    if (n < 0 && errno != EINTR) {
      PLOG(ERROR) << "epoll_pwait2";
      return 1;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t token = events[i].data.u64;
      if (token == kListenToken) {
        Accept(listen_fd);
      } else if (token == kSignalToken) {
        LOG(INFO) << "signal received, exiting with " << conns_.size() << " connections open";
        for (auto& [id, c] : conns_) {
          close(c->fd[0]);
          close(c->fd[1]);
        }
        return 0;
      } else if (auto it = conns_.find(token >> 1); it != conns_.end()) {
        OnEvent(it->second.get(), token & 1, events[i].events);
      }
    }
    const int64_t now = NowNs();
    while (!timers_.empty() && std::get<0>(timers_.top()) <= now) {
      const auto [due, id, d] = timers_.top();
      timers_.pop();
      auto it = conns_.find(id);
      if (it == conns_.end()) continue;
      Conn* c = it->second.get();
      if (!Flush(c, d, now)) {
        Close(c);
      } else if (!MaybeFinish(c)) {
        UpdateInterest(c);
      }
    }
  }
}

void Proxy::Accept(int listen_fd) {
  while (true) {
    const int client = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) PLOG(WARNING) << "accept";
      return;
    }
    const int target = socket(target_.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (target < 0) {
      PLOG(WARNING) << "socket";
      close(client);
      continue;
    }
    // Small RPCs must not wait for Nagle: the delay is the only one added.
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(target, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Conn>();
    c->id = next_id_++;
    c->fd[0] = client;
    c->fd[1] = target;
    if (connect(target, reinterpret_cast<const sockaddr*>(&target_), target_len_) == 0) {
      c->connecting = false;
    } else if (errno != EINPROGRESS) {
      PLOG(WARNING) << "connect to the target";
      close(client);
      close(target);
      continue;
    }
    VLOG(1) << "connection " << c->id << " opened";
    Conn* raw = c.get();
    conns_[raw->id] = std::move(c);
    UpdateInterest(raw);
  }
}

void Proxy::OnEvent(Conn* c, int side, uint32_t ev) {
  if (side == 1 && c->connecting) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      LOG(WARNING) << "connect to the target: " << strerror(err);
      Close(c);
      return;
    }
    c->connecting = false;
  }
  // A full destination drained: write what is due. Flush(dir) writes to
  // fd[1 - dir], so the direction writing to `side` is dir[1 - side].
  if ((ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) && !Flush(c, 1 - side, NowNs())) {
    Close(c);
    return;
  }
  if ((ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) && !c->dir[side].read_done) {
    // With no delay what was just read is due at once.
    if (!ReadFrom(c, side) || !Flush(c, side, NowNs())) {
      Close(c);
      return;
    }
  }
  if (!MaybeFinish(c)) UpdateInterest(c);
}

bool Proxy::ReadFrom(Conn* c, int side) {
  Direction& d = c->dir[side];
  // At most a few reads per event, so one busy connection does not starve
  // the others (the level-triggered event comes back).
  for (int reads = 0; reads < 16 && d.queued < max_queue_ && !d.read_done; ++reads) {
    const ssize_t n = read(c->fd[side], buf_.data(), buf_.size());
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // EOF, or a reset: pass on what was read, then the end.
      if (n < 0) VLOG(1) << "connection " << c->id << " side " << side << ": " << strerror(errno);
      d.read_done = true;
      d.eof_due_ns = NowNs() + delay_ns_;
      timers_.emplace(d.eof_due_ns, c->id, side);
      break;
    }
    const int64_t due = NowNs() + delay_ns_;
    d.queue.push_back(Chunk{due, std::string(buf_.data(), n)});
    d.queued += n;
    timers_.emplace(due, c->id, side);
  }
  return true;
}

bool Proxy::Flush(Conn* c, int dir, int64_t now) {
  Direction& d = c->dir[dir];
  const int to = c->fd[1 - dir];
  if (dir == 0 && c->connecting) return true;  // the target is not there yet
  d.blocked = false;
  while (!d.queue.empty() && d.queue.front().due_ns <= now) {
    Chunk& ch = d.queue.front();
    const ssize_t n =
        send(to, ch.data.data() + ch.written, ch.data.size() - ch.written, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        d.blocked = true;
        return true;
      }
      VLOG(1) << "connection " << c->id << " write: " << strerror(errno);
      return false;
    }
    ch.written += n;
    d.queued -= n;
    if (ch.written == ch.data.size()) d.queue.pop_front();
  }
  if (d.queue.empty() && d.read_done && !d.write_shut && d.eof_due_ns <= now) {
    shutdown(to, SHUT_WR);
    d.write_shut = true;
  }
  return true;
}

void Proxy::UpdateInterest(Conn* c) {
  for (int s = 0; s < 2; ++s) {
    const bool target_pending = s == 1 && c->connecting;
    uint32_t want = 0;
    if (!target_pending && !c->dir[s].read_done && c->dir[s].queued < max_queue_) {
      want |= EPOLLIN;
    }
    if (target_pending || c->dir[1 - s].blocked) want |= EPOLLOUT;
    if (want == c->events[s] && c->registered[s] == (want != 0)) continue;
    // An fd with nothing to wait for leaves the epoll set: EPOLLHUP would
    // otherwise be reported for it in a loop.
    epoll_event ev = {};
    ev.events = want;
    ev.data.u64 = c->id << 1 | s;
    if (want == 0) {
      epoll_ctl(epfd_, EPOLL_CTL_DEL, c->fd[s], nullptr);
      c->registered[s] = false;
    } else {
      epoll_ctl(epfd_, c->registered[s] ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd[s], &ev);
      c->registered[s] = true;
    }
    c->events[s] = want;
  }
}

bool Proxy::MaybeFinish(Conn* c) {
  if (!c->dir[0].write_shut || !c->dir[1].write_shut) return false;
  Close(c);
  return true;
}

void Proxy::Close(Conn* c) {
  VLOG(1) << "connection " << c->id << " closed";
  close(c->fd[0]);  // also leaves the epoll set
  close(c->fd[1]);
  conns_.erase(c->id);
}

int Listen(const std::string& spec) {
  sockaddr_storage addr;
  socklen_t len;
  if (!Resolve(spec, &addr, &len)) {
    LOG(ERROR) << "cannot resolve --listen=" << spec;
    return -1;
  }
  const int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 512) != 0) {
    PLOG(ERROR) << "cannot listen on " << spec;
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "grantfs-latency-proxy --listen=HOST:PORT --target=HOST:PORT --delay_ms=N");
  absl::FlagsUsageConfig usage;
  grantfs::ListFlagsFrom({"bench/"}, &usage);
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  const double delay_ms = absl::GetFlag(FLAGS_delay_ms);
  const int max_queue_mib = absl::GetFlag(FLAGS_max_queue_mib);
  if (delay_ms < 0 || max_queue_mib < 1) {
    fprintf(stderr, "usage: %s\n", std::string(absl::ProgramUsageMessage()).c_str());
    return 2;
  }
  sockaddr_storage target;
  socklen_t target_len;
  if (!Resolve(absl::GetFlag(FLAGS_target), &target, &target_len)) {
    LOG(ERROR) << "cannot resolve --target=" << absl::GetFlag(FLAGS_target);
    return 2;
  }
  // Two fds per connection: allow as many as the hard limit does.
  struct rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  const int listen_fd = Listen(absl::GetFlag(FLAGS_listen));
  if (listen_fd < 0) return 1;

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  const int signal_fd = signalfd(-1, &stop, SFD_CLOEXEC);

  LOG(INFO) << "forwarding " << absl::GetFlag(FLAGS_listen) << " -> " << absl::GetFlag(FLAGS_target)
            << " with " << delay_ms << " ms each way";
  Proxy proxy(static_cast<int64_t>(delay_ms * 1e6), static_cast<size_t>(max_queue_mib) << 20,
              target, target_len);
  return proxy.Run(listen_fd, signal_fd);
}
