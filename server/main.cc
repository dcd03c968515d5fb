// grantfs-server: serves one GrantFS volume (primary role).
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <pthread.h>

#include <csignal>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "common/secret.h"
#include "glog/logging.h"
#include "server/service.h"
#include "server/volume.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7420", "address:port to serve on");
ABSL_FLAG(std::string, data_dir, "/var/lib/grantfs", "data directory (meta/ and chunks/)");
ABSL_FLAG(std::string, capacity, "0",
          "bytes of file data to hold, with optional K/M/G/T suffix; 0 = the "
          "free space of the data directory's file system");
ABSL_FLAG(std::string, role, "primary", "server role (only 'primary' for now)");
ABSL_FLAG(std::string, secret_file, "",
          "file holding the cluster secret every client must present");
ABSL_FLAG(int, lease_ms, 10000, "client lease in milliseconds");
ABSL_FLAG(int, threads, 256,
          "maximum gRPC server threads; each mount's invalidation stream holds one, and a "
          "call that finds none free is refused (clients retry it)");
ABSL_FLAG(int, write_backlog_mb, 64,
          "flow control: MiB of client writes the server lets be in flight at once");
ABSL_FLAG(int, recall_wait_ms, 1000,
          "a write that finds the volume full waits this long for recalled grants");

namespace {

bool ParseSize(const std::string& text, uint64_t* out) {
  if (text.empty()) return false;
  uint64_t mult = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'K':
    case 'k':
      mult = 1ull << 10;
      break;
    case 'M':
    case 'm':
      mult = 1ull << 20;
      break;
    case 'G':
    case 'g':
      mult = 1ull << 30;
      break;
    case 'T':
    case 't':
      mult = 1ull << 40;
      break;
    default:
      mult = 1;
  }
  if (mult != 1) digits.pop_back();
  uint64_t n;
  if (!absl::SimpleAtoi(digits, &n)) return false;
  *out = n * mult;
  return true;
}

std::unique_ptr<grpc::Server> g_server;

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("grantfs-server --data_dir=DIR --listen=ADDR:PORT");
  absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  // SIGTERM/SIGINT are taken by one thread (below); block them everywhere
  // before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  if (absl::GetFlag(FLAGS_role) != "primary") {
    LOG(ERROR) << "role '" << absl::GetFlag(FLAGS_role)
               << "' is not available in this version; use --role=primary";
    return 2;
  }
  grantfs::VolumeOptions vo;
  vo.dir = absl::GetFlag(FLAGS_data_dir);
  if (!ParseSize(absl::GetFlag(FLAGS_capacity), &vo.capacity_bytes)) {
    LOG(ERROR) << "bad --capacity '" << absl::GetFlag(FLAGS_capacity) << "'";
    return 2;
  }
  vo.lease = absl::Milliseconds(absl::GetFlag(FLAGS_lease_ms));
  if (absl::GetFlag(FLAGS_write_backlog_mb) < 1 || absl::GetFlag(FLAGS_recall_wait_ms) < 0) {
    LOG(ERROR) << "--write_backlog_mb must be >= 1 and --recall_wait_ms >= 0";
    return 2;
  }
  vo.write_budget_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_write_backlog_mb)) << 20;
  vo.recall_wait = absl::Milliseconds(absl::GetFlag(FLAGS_recall_wait_ms));
  auto volume = grantfs::Volume::Open(vo);
  if (!volume.ok()) {
    LOG(ERROR) << "cannot open volume: " << volume.status();
    return 1;
  }

  grantfs::ServiceOptions so;
  absl::StatusOr<std::string> secret = grantfs::ReadSecretFile(absl::GetFlag(FLAGS_secret_file));
  if (!secret.ok()) {
    LOG(ERROR) << secret.status();
    return 2;
  }
  so.secret = *secret;
  grantfs::GrantFsService service(volume->get(), so);

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(16 << 20);
  builder.SetMaxSendMessageSize(16 << 20);
  grpc::ResourceQuota quota("grantfs");
  quota.SetMaxThreads(absl::GetFlag(FLAGS_threads));
  builder.SetResourceQuota(quota);
  g_server = builder.BuildAndStart();
  if (!g_server || port == 0) {
    LOG(ERROR) << "cannot listen on " << absl::GetFlag(FLAGS_listen);
    return 1;
  }
  grantfs::SpaceInfo space = (*volume)->Space();
  LOG(INFO) << "grantfs-server: primary on " << absl::GetFlag(FLAGS_listen) << ", data in "
            << vo.dir << ", capacity " << space.capacity_bytes << " bytes, used "
            << space.used_bytes;

  // SIGTERM/SIGINT: stop accepting, finish calls in flight, then exit.
  grantfs::Volume* vol = volume->get();
  std::thread([stop_signals, vol] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    LOG(INFO) << "signal " << sig << ": shutting down";
    vol->sessions().Shutdown();  // ends the Subscribe streams
    g_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }).detach();
  g_server->Wait();
  return 0;
}
