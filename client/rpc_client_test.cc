#include "client/rpc_client.h"

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/test_util.h"
#include "common/clock.h"
#include "common/errno_status.h"
#include "common/keepalive.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

// A GrantFs server that answers GetAttr as told.
class FakeService final : public proto::GrantFs::Service {
 public:
  enum Mode {
    kServe,       // attr.ino = the server's id
    kNotPrimary,  // UNAVAILABLE "not the primary"
    kExhausted,   // RESOURCE_EXHAUSTED
    kDenied,      // PERMISSION_DENIED
    kEnoent,      // OK with err ENOENT
    kSlow,        // sleeps 500 ms, then serves
    kCancelled,   // CANCELLED, as from a server that shuts down under the call
  };
  explicit FakeService(uint64_t id) : id_(id) {}

  void set_mode(Mode m) { mode_.store(m); }
  // The next `n` calls answer UNAVAILABLE, then the mode applies.
  void FailNext(int n) { fail_next_.store(n); }

  struct Seen {
    uint64_t client_id, seq;
  };
  std::vector<Seen> seen() {
    absl::MutexLock l(&mu_);
    return seen_;
  }

  grpc::Status GetAttr(grpc::ServerContext*, const proto::GetAttrRequest* req,
                       proto::AttrReply* reply) override {
    {
      absl::MutexLock l(&mu_);
      seen_.push_back({req->header().client_id(), req->header().seq()});
    }
    if (fail_next_.fetch_sub(1) > 0) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting");
    }
    switch (mode_.load()) {
      case kNotPrimary:
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the primary");
      case kExhausted:
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "busy");
      case kDenied:
        return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "no");
      case kEnoent:
        reply->set_err(ENOENT);
        return grpc::Status::OK;
      case kSlow:
        absl::SleepFor(absl::Milliseconds(500));
        break;
      case kCancelled:
        return grpc::Status(grpc::StatusCode::CANCELLED, "CANCELLED");
      case kServe:
        break;
    }
    reply->mutable_attr()->set_ino(id_);
    return grpc::Status::OK;
  }

  // Write: records the request; answers as GetAttr does (kServe: OK with
  // grant_used_bytes = the data's size).
  grpc::Status Write(grpc::ServerContext*, const proto::WriteRequest* req,
                     proto::WriteReply* reply) override {
    {
      absl::MutexLock l(&mu_);
      seen_.push_back({req->header().client_id(), req->header().seq()});
      writes_.push_back(*req);
    }
    if (fail_next_.fetch_sub(1) > 0) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting");
    }
    if (mode_.load() == kNotPrimary) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the primary");
    }
    reply->set_grant_used_bytes(req->data().size());
    return grpc::Status::OK;
  }
  std::vector<proto::WriteRequest> writes() {
    absl::MutexLock l(&mu_);
    return writes_;
  }

 private:
  const uint64_t id_;
  std::atomic<Mode> mode_{kServe};
  std::atomic<int> fail_next_{0};
  absl::Mutex mu_;
  std::vector<Seen> seen_ ABSL_GUARDED_BY(mu_);
  std::vector<proto::WriteRequest> writes_ ABSL_GUARDED_BY(mu_);
};

struct TestServer {
  // Listens on `fixed_port`, or on a free one when 0.
  explicit TestServer(uint64_t id, bool allow_keepalive = true, int fixed_port = 0) : service(id) {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:" + std::to_string(fixed_port), grpc::InsecureServerCredentials(),
                       &port);
    b.RegisterService(&service);
    b.SetMaxReceiveMessageSize(16 << 20);  // 8 MiB writes, as grantfs-server
    if (allow_keepalive) AllowClientKeepalive(&b);
    server = b.BuildAndStart();
    address = "127.0.0.1:" + std::to_string(port);
  }
  ~TestServer() { Stop(); }
  void Stop() {
    if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server.reset();
  }

  FakeService service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

// A TCP proxy to one address that can be frozen: it then forwards nothing
// and closes nothing, like a peer cut off by the network.
class FreezableProxy {
 public:
  explicit FreezableProxy(int target_port) : target_port_(target_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = Loopback(0);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(listen_fd_, 16), 0);
    socklen_t len = sizeof(a);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~FreezableProxy() {
    stop_.store(true);
    accept_thread_.join();
    for (std::thread& t : pumps_) t.join();
    close(listen_fd_);
    for (int fd : fds_) close(fd);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  void Freeze() { frozen_.store(true); }

 private:
  void AcceptLoop() {
    while (!stop_.load()) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      int in = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (in < 0) continue;
      int out = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a = Loopback(target_port_);
      if (connect(out, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        close(in);
        close(out);
        continue;
      }
      fds_.push_back(in);
      fds_.push_back(out);
      pumps_.emplace_back([this, in, out] { Pump(in, out); });
    }
  }
  // Forwards both ways until stopped; frozen, it leaves everything queued.
  void Pump(int a, int b) {
    char buf[16384];
    while (!stop_.load()) {
      if (frozen_.load()) {
        absl::SleepFor(absl::Milliseconds(20));
        continue;
      }
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (poll(p, 2, 20) <= 0 || frozen_.load()) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = read(p[i].fd, buf, sizeof(buf));
        if (n <= 0) return;
        const int to = i == 0 ? b : a;
        for (ssize_t done = 0; done < n;) {
          ssize_t w = write(to, buf + done, n - done);
          if (w <= 0) return;
          done += w;
        }
      }
    }
  }

  const int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> frozen_{false};
  std::thread accept_thread_;
  // Touched by AcceptLoop only, then by the destructor once it has ended.
  std::vector<std::thread> pumps_;  // one per connection
  std::vector<int> fds_;
};

std::unique_ptr<RpcClient> Client(std::vector<std::string> servers,
                                  absl::Duration call_timeout = absl::Seconds(30),
                                  absl::Duration retry_for = absl::Seconds(10)) {
  RpcClientOptions o;
  o.servers = std::move(servers);
  o.call_timeout = call_timeout;
  o.retry_for = retry_for;
  absl::StatusOr<std::unique_ptr<RpcClient>> c = RpcClient::Create(o);
  EXPECT_TRUE(c.ok()) << c.status();
  (*c)->set_client_id(7);
  return *std::move(c);
}

// GetAttr through Call: the answering server's id, or the errno.
absl::StatusOr<uint64_t> GetAttr(RpcClient* c, uint64_t* seq = nullptr) {
  proto::GetAttrRequest req;
  req.set_ino(1);
  proto::AttrReply reply;
  absl::Status s = c->Call("GetAttr", &proto::GrantFs::Stub::GetAttr, &req, &reply);
  if (seq != nullptr) *seq = req.header().seq();
  if (!s.ok()) return s;
  return reply.attr().ino();
}

TEST(RpcClientTest, NotThePrimaryMovesToTheNextServerWithTheSameSeq) {
  TestServer s1(1), s2(2);
  s1.service.set_mode(FakeService::kNotPrimary);
  std::unique_ptr<RpcClient> c = Client({s1.address, s2.address});
  ASSERT_EQ(c->current(), 0u);
  uint64_t seq = 0;
  absl::StatusOr<uint64_t> got = GetAttr(c.get(), &seq);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 2u);
  EXPECT_EQ(c->current(), 1u);
  ASSERT_EQ(s1.service.seen().size(), 1u);
  ASSERT_EQ(s2.service.seen().size(), 1u);
  EXPECT_EQ(s1.service.seen()[0].seq, seq);
  EXPECT_EQ(s2.service.seen()[0].seq, seq);
  EXPECT_EQ(s2.service.seen()[0].client_id, 7u);

  // Later calls go straight to the new primary.
  EXPECT_EQ(*GetAttr(c.get()), 2u);
  EXPECT_EQ(s1.service.seen().size(), 1u);
}

TEST(RpcClientTest, WriteSendsItsDataAsOneOrdinaryRequestAlsoAfterAFailover) {
  TestServer s1(1), s2(2);
  s1.service.set_mode(FakeService::kNotPrimary);
  std::unique_ptr<RpcClient> c = Client({s1.address, s2.address});
  std::mt19937_64 rng(3);
  // Lengths whose varint takes 1, 2 and 3 bytes, none, and an 8 MiB extent.
  for (size_t size : {0ul, 1ul, 127ul, 128ul, 16384ul, 3ul << 20, 8ul << 20}) {
    std::string bytes(size, '\0');
    for (char& ch : bytes) ch = static_cast<char>(rng());
    auto data = std::make_shared<const std::string>(bytes);
    proto::WriteRequest req;
    req.set_ino(42);
    req.set_offset(4096 * size);
    req.set_from_grant(true);
    proto::WriteReply reply;
    absl::Status st = c->Write(&req, data, &reply);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(reply.grant_used_bytes(), size);
    const std::vector<proto::WriteRequest> got = s2.service.writes();
    ASSERT_FALSE(got.empty());
    const proto::WriteRequest& w = got.back();
    EXPECT_EQ(w.ino(), 42u);
    EXPECT_EQ(w.offset(), 4096 * size);
    EXPECT_TRUE(w.from_grant());
    EXPECT_FALSE(w.sync());
    EXPECT_EQ(w.header().client_id(), 7u);
    EXPECT_EQ(w.header().seq(), req.header().seq());
    EXPECT_TRUE(w.data() == bytes) << "size " << size;
    // gRPC lets go of the bytes once they are sent.
    EXPECT_TRUE(WaitFor([&data] { return data.use_count() == 1; })) << data.use_count();
  }
  // The first attempt went to s1 (not the primary) with the same request.
  ASSERT_EQ(s1.service.writes().size(), 1u);
  EXPECT_EQ(s1.service.writes()[0].header().seq(), s2.service.writes()[0].header().seq());
  EXPECT_EQ(s1.service.writes()[0].data(), s2.service.writes()[0].data());
}

TEST(RpcClientTest, RefusedConnectionMovesToTheNextServer) {
  TestServer s1(1), s2(2);
  std::unique_ptr<RpcClient> c = Client({s1.address, s2.address});
  EXPECT_EQ(*GetAttr(c.get()), 1u);
  s1.Stop();
  const absl::Time start = absl::Now();
  absl::StatusOr<uint64_t> got = GetAttr(c.get());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 2u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

// A loopback port nobody listens on (for a server started later).
int UnusedPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = Loopback(0);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// The server of the next test, in a process of its own: a server in the
// test's process would poll gRPC for the client. Runs only when started by
// that test (GRANTFS_TEST_SERVE_PORT set): serves for 10 s.
TEST(RpcClientHelper, ServeInAChildProcess) {
  const char* port = getenv("GRANTFS_TEST_SERVE_PORT");
  if (port == nullptr) GTEST_SKIP() << "started by ServerThatComesBack...";
  TestServer s(2, true, atoi(port));
  absl::SleepFor(absl::Seconds(10));
}

// Both servers down (connections refused, channels in TRANSIENT_FAILURE),
// then one starts in another process, as a promoted replica re-executing
// itself does. The retrying call must connect to it before it gives up
// (retry_for 4 s). Calls on a channel in TRANSIENT_FAILURE fail at once and
// poll nothing; if the waits between rounds did not poll either, gRPC's
// connection attempt in the background would only be seen by its 5 s backup
// poller, and time out first (the failover pauses of 5-10 s once seen in the
// drills).
TEST(RpcClientTest, ServerThatComesBackIsConnectedBeforeTheCallGivesUp) {
  const int p1 = UnusedPort(), p2 = UnusedPort();
  std::unique_ptr<RpcClient> c =
      Client({"127.0.0.1:" + std::to_string(p1), "127.0.0.1:" + std::to_string(p2)},
             absl::Seconds(30), absl::Seconds(4));
  // Both channels learn that nobody answers.
  proto::GetAttrRequest req;
  proto::AttrReply reply;
  for (size_t i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    c->PrepareContext(&ctx, absl::Seconds(2));
    EXPECT_EQ(c->stub(i)->GetAttr(&ctx, req, &reply).error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  const std::string port = std::to_string(p2);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    usleep(500 * 1000);
    setenv("GRANTFS_TEST_SERVE_PORT", port.c_str(), 1);
    execl("/proc/self/exe", "rpc_client_test", "--gtest_filter=RpcClientHelper.*",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  absl::StatusOr<uint64_t> got = GetAttr(c.get());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 2u);
}

TEST(RpcClientTest, BothRefuseUntilOneIsPromoted) {
  TestServer s1(1), s2(2);
  s1.service.set_mode(FakeService::kNotPrimary);
  s2.service.set_mode(FakeService::kNotPrimary);
  std::unique_ptr<RpcClient> c = Client({s1.address, s2.address});
  std::thread promote([&] {
    absl::SleepFor(absl::Milliseconds(600));
    s2.service.set_mode(FakeService::kServe);
  });
  const absl::Time start = absl::Now();
  uint64_t seq = 0;
  absl::StatusOr<uint64_t> got = GetAttr(c.get(), &seq);
  const absl::Duration took = absl::Now() - start;
  promote.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 2u);
  // Rounds are at most 200 ms apart with several servers.
  EXPECT_LT(took, absl::Milliseconds(600 + 400));
  for (const FakeService::Seen& s : s2.service.seen()) EXPECT_EQ(s.seq, seq);
  for (const FakeService::Seen& s : s1.service.seen()) EXPECT_EQ(s.seq, seq);
}

// A server that shuts down for a role change cancels the calls under way
// (grpc::Server::Shutdown): the call goes on with the next server, with the
// same seq, instead of failing (it failed an fsync with EIO during a
// switchover).
TEST(RpcClientTest, ACallTheServerCancelledMovesToTheNextServerWithTheSameSeq) {
  TestServer s1(1), s2(2);
  s1.service.set_mode(FakeService::kCancelled);
  std::unique_ptr<RpcClient> c = Client({s1.address, s2.address});
  uint64_t seq = 0;
  absl::StatusOr<uint64_t> got = GetAttr(c.get(), &seq);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 2u);
  EXPECT_EQ(c->current(), 1u);
  ASSERT_EQ(s2.service.seen().size(), 1u);
  EXPECT_EQ(s2.service.seen()[0].seq, seq);
}

TEST(RpcClientTest, NonTransientErrorsAreNeitherRetriedNorSwitched) {
  TestServer s1(1), s2(2);
  std::unique_ptr<RpcClient> c = Client({s1.address, s2.address});
  s1.service.set_mode(FakeService::kEnoent);
  absl::StatusOr<uint64_t> got = GetAttr(c.get());
  EXPECT_EQ(ToErrno(got.status()), ENOENT) << got.status();
  // PERMISSION_DENIED: the server's checks of who calls refused it.
  s1.service.set_mode(FakeService::kDenied);
  got = GetAttr(c.get());
  EXPECT_EQ(ToErrno(got.status()), EACCES) << got.status();
  EXPECT_EQ(c->current(), 0u);
  EXPECT_EQ(s1.service.seen().size(), 2u);
  EXPECT_EQ(s2.service.seen().size(), 0u);
}

TEST(RpcClientTest, ResourceExhaustedIsRetriedOnTheSameServer) {
  TestServer s1(1), s2(2);
  s1.service.set_mode(FakeService::kExhausted);
  std::unique_ptr<RpcClient> c = Client({s1.address, s2.address});
  std::thread relieve([&] {
    absl::SleepFor(absl::Milliseconds(150));
    s1.service.set_mode(FakeService::kServe);
  });
  absl::StatusOr<uint64_t> got = GetAttr(c.get());
  relieve.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 1u);
  EXPECT_EQ(c->current(), 0u);
  EXPECT_GE(s1.service.seen().size(), 2u);
  EXPECT_EQ(s2.service.seen().size(), 0u);
}

TEST(RpcClientTest, DeadlineMovesToTheNextServerOnlyWithSeveral) {
  TestServer s1(1), s2(2);
  s1.service.set_mode(FakeService::kSlow);
  std::unique_ptr<RpcClient> two =
      Client({s1.address, s2.address}, /*call_timeout=*/absl::Milliseconds(200));
  absl::StatusOr<uint64_t> got = GetAttr(two.get());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 2u);

  std::unique_ptr<RpcClient> one = Client({s1.address}, absl::Milliseconds(200));
  got = GetAttr(one.get());
  EXPECT_EQ(ToErrno(got.status()), ETIMEDOUT) << got.status();
  EXPECT_EQ(s1.service.seen().size(), 2u);  // one attempt each
}

TEST(RpcClientTest, SingleServerRetriesOnItAsBefore) {
  TestServer s1(1);
  std::unique_ptr<RpcClient> c = Client({s1.address});
  s1.service.FailNext(2);
  uint64_t seq = 0;
  const absl::Time start = absl::Now();
  absl::StatusOr<uint64_t> got = GetAttr(c.get(), &seq);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 1u);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20 + 40));  // backoff between attempts
  ASSERT_EQ(s1.service.seen().size(), 3u);
  for (const FakeService::Seen& s : s1.service.seen()) EXPECT_EQ(s.seq, seq);
  EXPECT_EQ(c->current(), 0u);

  // Gives up after retry_for with EIO.
  std::unique_ptr<RpcClient> brief =
      Client({s1.address}, absl::Seconds(30), /*retry_for=*/absl::Milliseconds(300));
  s1.service.set_mode(FakeService::kNotPrimary);
  const absl::Time start2 = absl::Now();
  got = GetAttr(brief.get());
  EXPECT_EQ(ToErrno(got.status()), EIO) << got.status();
  EXPECT_LT(absl::Now() - start2, absl::Seconds(1));
}

TEST(RpcClientTest, ConcurrentFailuresAdvanceOnce) {
  TestServer s1(1), s2(2);
  s1.service.set_mode(FakeService::kNotPrimary);
  std::unique_ptr<RpcClient> c = Client({s1.address, s2.address});
  std::vector<std::thread> threads;
  std::atomic<int> on_two{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      absl::StatusOr<uint64_t> got = GetAttr(c.get());
      if (got.ok() && *got == 2) on_two.fetch_add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(on_two.load(), 8);
  EXPECT_EQ(c->current(), 1u);

  // A failure seen on a server that is no longer current moves nothing.
  const grpc::Status why(grpc::StatusCode::UNAVAILABLE, "test");
  EXPECT_EQ(c->Failover(0, why), 1u);
  EXPECT_EQ(c->current(), 1u);
  EXPECT_EQ(c->Failover(1, why), 0u);
  EXPECT_EQ(c->current(), 0u);
}

TEST(RpcClientTest, CallOnceMovesLaterCallsOnUnavailable) {
  TestServer s1(1), s2(2);
  s1.service.set_mode(FakeService::kNotPrimary);
  std::unique_ptr<RpcClient> c = Client({s1.address, s2.address});
  proto::GetAttrRequest req;
  proto::AttrReply reply;
  grpc::ClientContext ctx;
  c->PrepareContext(&ctx, absl::Seconds(5));
  absl::Status s = c->CallOnce("GetAttr", &proto::GrantFs::Stub::GetAttr, &ctx, &req, &reply);
  EXPECT_EQ(ToErrno(s), EIO) << s;
  EXPECT_EQ(c->current(), 1u);
  EXPECT_EQ(s2.service.seen().size(), 0u);  // one attempt only
}

TEST(RpcClientTest, RetriesRunOnTheInjectedClock) {
  // retry_for is measured on options.clock: here a fake one that each
  // attempt moves by 25 s. The call gives up at the third attempt (at 75 s
  // of 60), after two real backoffs of 20 and 40 ms, not after a minute.
  FakeClock clock;
  RpcClientOptions o;
  o.servers = {"127.0.0.1:1"};  // never dialled by the attempts below
  o.retry_for = absl::Seconds(60);
  o.clock = &clock;
  absl::StatusOr<std::unique_ptr<RpcClient>> c = RpcClient::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  int attempts = 0;
  proto::GetAttrRequest req;
  proto::AttrReply reply;
  const absl::Time start = absl::Now();
  absl::Status s = (*c)->CallWith(
      "GetAttr", &req, &reply,
      [&](size_t, grpc::ClientContext*, const proto::GetAttrRequest&, proto::AttrReply*) {
        ++attempts;
        clock.Advance(absl::Seconds(25));
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
      });
  EXPECT_EQ(ToErrno(s), EIO) << s;
  EXPECT_EQ(attempts, 3);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // A clock that does not move: retried until the server answers, however
  // long the (real) backoffs took.
  attempts = 0;
  s = (*c)->CallWith(
      "GetAttr", &req, &reply,
      [&](size_t, grpc::ClientContext*, const proto::GetAttrRequest&, proto::AttrReply*) {
        return ++attempts < 4 ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")
                              : grpc::Status::OK;
      });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(attempts, 4);
  o.clock = nullptr;
  EXPECT_TRUE(absl::IsInvalidArgument(RpcClient::Create(o).status()));
}

TEST(RpcClientTest, CreateRejectsBadServerLists) {
  RpcClientOptions o;
  EXPECT_TRUE(absl::IsInvalidArgument(RpcClient::Create(o).status()));
  o.servers = {"127.0.0.1:1", ""};
  EXPECT_TRUE(absl::IsInvalidArgument(RpcClient::Create(o).status()));
}

// A server cut off without a RST is noticed by keepalive in about 2 s, not
// after the 30 s call deadline, and the call goes on on the other server.
TEST(RpcClientTest, CutOffServerIsNoticedByKeepalive) {
  TestServer s1(1), s2(2);
  const int s1_port = std::stoi(s1.address.substr(s1.address.rfind(':') + 1));
  FreezableProxy proxy(s1_port);
  std::unique_ptr<RpcClient> c = Client({proxy.address(), s2.address}, absl::Seconds(30));
  ASSERT_EQ(*GetAttr(c.get()), 1u);
  proxy.Freeze();
  const absl::Time start = absl::Now();
  uint64_t seq = 0;
  absl::StatusOr<uint64_t> got = GetAttr(c.get(), &seq);
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 2u);
  EXPECT_LT(took, absl::Seconds(4)) << took;
  ASSERT_EQ(s2.service.seen().size(), 1u);
  EXPECT_EQ(s2.service.seen()[0].seq, seq);
}

// Servers with AllowClientKeepalive take the pings of an idle client without
// GOAWAY: the connection stays up; without it the server drops it.
TEST(RpcClientTest, AllowClientKeepaliveKeepsIdleConnectionsUp) {
  TestServer allowing(1), strict(2, /*allow_keepalive=*/false);
  std::unique_ptr<RpcClient> c = Client({allowing.address, strict.address});
  ASSERT_EQ(*GetAttr(c.get()), 1u);
  c->Failover(0, grpc::Status(grpc::StatusCode::UNAVAILABLE, "test"));
  ASSERT_EQ(*GetAttr(c.get()), 2u);
  absl::SleepFor(absl::Milliseconds(4500));
  EXPECT_EQ(c->channel(0)->GetState(false), GRPC_CHANNEL_READY);
  EXPECT_NE(c->channel(1)->GetState(false), GRPC_CHANNEL_READY);
}

}  // namespace
}  // namespace grantfs
