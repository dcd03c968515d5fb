// grantfs-node: the node agent (client/node_agent.h). Keeps this node's
// global mounts in the state the cluster's table says; docs/operations.md,
// "Global mounts".
//
//   grantfs-node [--config=/etc/grantfs/cluster.conf] [--server=A:7420,B:7420]
//                [--node=NAME] [--tls_dir=DIR] [--state_dir=/var/lib/grantfs-node]
//
// SIGTERM, SIGINT or SIGHUP stop it, exit 0; the mounts stay up (a new
// agent adopts them) unless --unmount_on_stop. Exit 2 for bad flags or
// keys.
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cluster_client.h"
#include "client/cluster_config.h"
#include "client/node_agent.h"
#include "client/node_mounts.h"
#include "client/rpc_client.h"
#include "common/flag_help.h"
#include "common/metrics_http.h"
#include "common/mutex_checks.h"
#include "common/transport_flags.h"
#include "glog/logging.h"

ABSL_DECLARE_FLAG(std::string, identity);
ABSL_DECLARE_FLAG(std::string, secret_file);
ABSL_DECLARE_FLAG(bool, insecure);

ABSL_FLAG(std::string, server, "127.0.0.1:7420",
          "the cluster's servers, comma-separated (HOST[:PORT], port 7420 by default)");
ABSL_FLAG(std::string, node, "", "this node's name (default: the host name)");
ABSL_FLAG(std::string, state_dir, "/var/lib/grantfs-node",
          "where the agent keeps the list of mounts it made (mounts.list) and each mount's log");
ABSL_FLAG(std::string, mount_binary, "",
          "the grantfs-mount program (default: the one next to this program)");
ABSL_FLAG(int, poll_ms, 1000,
          "the heartbeat's long poll (100-2000 ms): a node that misses 5 s of them is down");
ABSL_FLAG(int, retry_ms, 2000, "failed mounts and busy unmounts are tried again this often");
ABSL_FLAG(std::string, allowed_root, "/global",
          "the only directory the agent mounts in: a global mount whose path is not below it is "
          "refused and reported failed (\"outside the allowed root\")");
ABSL_FLAG(int, mount_timeout_s, 20, "how long one grantfs-mount may take to come up");
ABSL_FLAG(std::string, metrics_addr, "",
          "address:port to serve Prometheus metrics on, over plain HTTP with no authentication "
          "(docs/metrics.md); empty: none");
ABSL_FLAG(bool, unmount_on_stop, false,
          "on SIGTERM, unmount the global mounts this agent keeps (default: they stay up, and the "
          "next agent adopts them)");

namespace {

constexpr char kAgentVersion[] = "0.1.0";

std::string SiblingProgram(const char* name) {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return name;
  std::string dir(self, n);
  dir = dir.substr(0, dir.rfind('/'));
  return absl::StrCat(dir, "/", name);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "grantfs-node [--config=FILE] [--server=A:PORT,B:PORT] [--node=NAME] [--tls_dir=DIR] "
      "[--state_dir=DIR]: keeps this node's global mounts (docs/operations.md)");
  // --help lists every flag the agent takes (its own, the configuration
  // file's and the TLS ones), not only those of a file named like it.
  absl::FlagsUsageConfig usage;
  grantfs::ListFlagsFrom({"client/"}, &usage);
  usage.version_string = [] { return std::string("grantfs-node ") + kAgentVersion + "\n"; };
  absl::SetFlagsUsageConfig(usage);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  absl::StatusOr<std::optional<grantfs::ClusterConfig>> config =
      grantfs::ApplyClusterConfig(argc, argv);
  if (!config.ok()) {
    LOG(ERROR) << config.status().message();
    return 2;
  }
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  grantfs::ApplyMutexDeadlockCheck();
  if (args.size() != 1) {
    LOG(ERROR) << "grantfs-node takes no arguments, only flags (--help)";
    return 2;
  }
  std::vector<std::string> servers = grantfs::ServerAddresses(absl::GetFlag(FLAGS_server));
  if (servers.empty()) {
    LOG(ERROR) << "--server names no server";
    return 2;
  }
  std::string node = absl::GetFlag(FLAGS_node);
  if (node.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    node = host;
    node = node.substr(0, node.find('.'));
  }
  const int poll_ms = absl::GetFlag(FLAGS_poll_ms);
  if (poll_ms < 100 || poll_ms > 2000) {
    LOG(ERROR) << "--poll_ms must be 100 to 2000, not " << poll_ms;
    return 2;
  }
  const int retry_ms = absl::GetFlag(FLAGS_retry_ms);
  if (retry_ms < 100) {
    LOG(ERROR) << "--retry_ms must be at least 100, not " << retry_ms;
    return 2;
  }
  const std::string state_dir = absl::GetFlag(FLAGS_state_dir);
  if (mkdir(state_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    LOG(ERROR) << "cannot create the state directory " << state_dir << ": " << strerror(errno);
    return 2;
  }

  // Only the main thread takes the stop signals (sigwait below).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::StatusOr<grantfs::Transport> transport =
      grantfs::TransportFromFlags("node", "grantfs-node");
  if (!transport.ok()) {
    LOG(ERROR) << transport.status().message();
    return 2;
  }
  grantfs::ClusterClientOptions co;
  co.servers = servers;
  co.transport = *transport;
  auto cluster = grantfs::ClusterClient::Create(co);
  if (!cluster.ok()) {
    LOG(ERROR) << cluster.status();
    return 2;
  }

  grantfs::SystemMounterOptions mo;
  mo.mount_binary = absl::GetFlag(FLAGS_mount_binary);
  if (mo.mount_binary.empty()) mo.mount_binary = SiblingProgram("grantfs-mount");
  mo.servers = absl::StrJoin(servers, ",");
  mo.log_dir = state_dir;
  mo.mount_timeout = absl::Seconds(std::max(1, absl::GetFlag(FLAGS_mount_timeout_s)));
  // Each mount proves who it is as the agent does.
  if (!transport->secure()) {
    mo.mount_flags.push_back("--insecure");
  } else {
    mo.mount_flags.push_back(absl::StrCat("--tls_dir=", grantfs::TlsDirFromFlags()));
    const std::string identity = absl::GetFlag(FLAGS_identity);
    mo.mount_flags.push_back(absl::StrCat("--identity=", identity.empty() ? "node" : identity));
  }
  if (!absl::GetFlag(FLAGS_secret_file).empty()) {
    mo.mount_flags.push_back(absl::StrCat("--secret_file=", absl::GetFlag(FLAGS_secret_file)));
  }
  grantfs::SystemMounter mounter(mo);

  grantfs::NodeAgentOptions ao;
  ao.node = node;
  ao.version = kAgentVersion;
  ao.cluster = cluster->get();
  ao.mounter = &mounter;
  ao.state_file = state_dir + "/mounts.list";
  ao.poll = absl::Milliseconds(poll_ms);
  ao.retry = absl::Milliseconds(retry_ms);
  ao.unmount_on_stop = absl::GetFlag(FLAGS_unmount_on_stop);
  ao.allowed_root = absl::GetFlag(FLAGS_allowed_root);
  grantfs::NodeAgent agent(ao);
  std::unique_ptr<grantfs::MetricsServer> metrics;  // stops before `agent` goes
  if (const std::string addr = absl::GetFlag(FLAGS_metrics_addr); !addr.empty()) {
    absl::StatusOr<std::unique_ptr<grantfs::MetricsServer>> m =
        grantfs::MetricsServer::Start(addr, [&agent] { return agent.RenderMetrics(); });
    if (!m.ok()) {
      LOG(ERROR) << m.status();
      return 2;
    }
    metrics = *std::move(m);
  }
  if (absl::Status s = agent.Start(); !s.ok()) {
    LOG(ERROR) << s.message();
    return 2;
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  LOG(INFO) << "signal " << sig << ": stopping the node agent"
            << (ao.unmount_on_stop ? " and unmounting" : " (the mounts stay up)");
  metrics.reset();
  agent.Stop();
  return 0;
}
