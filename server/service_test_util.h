// The service with a real gRPC server on a loopback port over a volume in a
// temporary directory, for the tests of server/service.h.
#ifndef GRANTFS_SERVER_SERVICE_TEST_UTIL_H_
#define GRANTFS_SERVER_SERVICE_TEST_UTIL_H_

#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "server/service.h"
#include "server/service_endpoint.h"

namespace grantfs {

// A 64 MiB volume in `dir`/vol (made when missing), with no background
// thread.
inline std::unique_ptr<Volume> OpenVolumeIn(const std::string& dir, absl::Duration meta_lease) {
  std::filesystem::create_directories(dir + "/vol");
  VolumeOptions vo;
  vo.dir = dir + "/vol";
  vo.capacity_bytes = 64 << 20;
  vo.background = false;
  vo.meta_lease = meta_lease;
  absl::StatusOr<std::unique_ptr<Volume>> v = Volume::Open(vo);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *std::move(v) : nullptr;
}

// The same in a new temporary directory (*dir; the caller removes it).
inline std::unique_ptr<Volume> OpenTestVolume(std::string* dir,
                                              absl::Duration meta_lease = absl::Seconds(3)) {
  char tmpl[] = "/tmp/grantfs-service-test-XXXXXX";
  *dir = mkdtemp(tmpl);
  return OpenVolumeIn(*dir, meta_lease);
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    volume_ = OpenTestVolume(&dir_, meta_lease_);
    Serve();
    ASSERT_NE(port_, 0);
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(16 << 20);
    stub_ = proto::GrantFs::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials(), args));
  }
  void TearDown() override {
    server_->Shutdown();
    volume_.reset();
    std::filesystem::remove_all(dir_);
  }
  // The service over volume_ on port_ (a new one when 0).
  void Serve() {
    ServiceOptions so;
    so.transport = Transport::Insecure("s3cret");
    so.metrics = &metrics_;
    so.refuse = [this](const char* op) {
      absl::MutexLock l(&refuse_mu_);
      if (refused_op_ != op) return grpc::Status::OK;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "refused by the test");
    };
    service_ = std::make_unique<GrantFsService>(volume_.get(), so);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:" + std::to_string(port_), grpc::InsecureServerCredentials(),
                       &port_);
    endpoint_ = std::make_unique<GrantFsEndpoint>(service_.get(), RequestQueueOptions());
    b.RegisterService(endpoint_.get());
    b.SetMaxReceiveMessageSize(16 << 20);
    server_ = b.BuildAndStart();
  }
  // The server stops and starts again on the same volume and port, as
  // after a crash or a restart: what it knew only in memory is gone.
  void Restart() {
    // Calls still running (recall streams) are cancelled after a second.
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_.reset();
    endpoint_.reset();
    service_.reset();
    volume_.reset();
    volume_ = OpenVolumeIn(dir_, meta_lease_);
    Serve();
  }
  // A context carrying the right secret and a deadline.
  std::unique_ptr<grpc::ClientContext> Ctx(const std::string& secret = "s3cret") {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!secret.empty()) ctx->AddMetadata("x-grantfs-secret", secret);
    return ctx;
  }
  int MkNodErr(uint64_t parent, const std::string& name, uint32_t mode = S_IFREG | 0644) {
    proto::MkNodRequest req;
    req.set_parent(parent);
    req.set_name(name);
    req.set_mode(mode);
    req.set_exclusive(true);
    proto::AttrReply reply;
    EXPECT_TRUE(stub_->MkNod(Ctx().get(), req, &reply).ok());
    last_ino_ = reply.attr().ino();
    return reply.err();
  }

  // Calls of method `op` are answered UNAVAILABLE, unserved, as by a server
  // that cannot be reached ("": none).
  void Refuse(const std::string& op) {
    absl::MutexLock l(&refuse_mu_);
    refused_op_ = op;
  }

  // Calls of `op` the server served so far (across restarts).
  uint64_t Calls(const char* op) { return metrics_.calls().For(op)->count(); }

  // The volume's metadata lease (set before SetUp).
  absl::Duration meta_lease_ = absl::Seconds(3);
  ServerMetrics metrics_;
  absl::Mutex refuse_mu_;
  std::string refused_op_ ABSL_GUARDED_BY(refuse_mu_);
  std::string dir_;
  std::unique_ptr<Volume> volume_;
  std::unique_ptr<GrantFsService> service_;
  std::unique_ptr<GrantFsEndpoint> endpoint_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<proto::GrantFs::Stub> stub_;
  int port_ = 0;
  uint64_t last_ino_ = 0;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_SERVICE_TEST_UTIL_H_
