// The node agent (grantfs-node, docs/operations.md "Global mounts"): keeps
// this node's mounts in the state the cluster's global mount table says.
//
// Two threads. The heartbeat thread calls Cluster.Heartbeat on the primary
// (client/cluster_client.h) with the node's name, the agent's version and
// the state of each global mount here; the call is a long poll that returns
// as soon as the table differs from the one the agent has, or after `poll`
// (1 s): a change of the table reaches the agent within one round trip, and
// the primary hears from the node at least every `poll` plus a round trip.
// A change of a mount's state cancels the waiting call, so the primary
// hears of it at once. The reconcile thread acts on each new table, and
// every `retry` (2 s) in any case (failed mounts, busy unmounts, mounts
// whose daemon died): it mounts what is in the table and not here (making
// the directory), adopts a GrantFS mount already at a table path (the
// agent's previous run made it: no second mount), unmounts what is marked
// for removal (lazily with -f), and unmounts what it mounted earlier that
// the table no longer holds (it keeps those paths in `state_file`).
//
// Without a table (no primary answers) nothing is mounted or unmounted: the
// mounts stay as they are. Stop() leaves the mounts up unless
// `unmount_on_stop`.
//
// Thread-safe. Lock order: mu_ only; no RPC, mount or unmount under it.
#ifndef GRANTFS_CLIENT_NODE_AGENT_H_
#define GRANTFS_CLIENT_NODE_AGENT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/cluster_client.h"
#include "client/node_mounts.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "proto/cluster.pb.h"

namespace grantfs {

struct NodeAgentOptions {
  // This node's name (1-64 of A-Z a-z 0-9 . _ -). Required.
  std::string node;
  // The agent's version, as the primary shows it.
  std::string version;
  // The primary. Not owned; required.
  ClusterClient* cluster = nullptr;
  // Mounts and unmounts. Not owned; required.
  NodeMounter* mounter = nullptr;
  // The paths this agent has mounted, one per line (C-escaped), rewritten
  // on each change; "" keeps them in memory only.
  std::string state_file;
  // The long poll's wait: the primary hears from the node at least this
  // often. Default 1 s (at most 2 s: the server's limit).
  absl::Duration poll = absl::Seconds(1);
  // Failed mounts and busy unmounts are tried again this often. Default 2 s.
  absl::Duration retry = absl::Seconds(2);
  // The only directory this agent mounts in: a table path that is not below
  // it (normalized, not "/") is refused and reported failed ("outside the
  // allowed root"). Whoever changes the table cannot mount over /etc or
  // the agent's state directory. Default /global (--allowed_root).
  std::string allowed_root = "/global";
  // At Stop(), unmount every mount this agent keeps (busy ones stay).
  bool unmount_on_stop = false;
  // Timestamps of states (wall clock). Not owned.
  Clock* clock = Clock::Real();
};

class NodeAgent {
 public:
  explicit NodeAgent(const NodeAgentOptions& options);
  ~NodeAgent();  // Stop()
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  // Reads the state file and starts both threads. INVALID_ARGUMENT for
  // missing options or a bad node name; FAILED_PRECONDITION for a state
  // file that cannot be read.
  absl::Status Start();
  // Ends both threads (the call in flight is cancelled; a mount under way
  // is waited for), then unmounts if `unmount_on_stop`. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // One pass over `table` (the reconcile thread's work; tests call it).
  void Reconcile(const proto::GlobalMountTable& table) ABSL_LOCKS_EXCLUDED(mu_);
  // What the next heartbeat reports, sorted by path.
  std::vector<proto::NodeMountState> States() ABSL_LOCKS_EXCLUDED(mu_);
  // The paths this agent keeps mounted (or is unmounting).
  std::set<std::string> Managed() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a heartbeat was answered since the last failure.
  bool connected() ABSL_LOCKS_EXCLUDED(mu_);
  // Prometheus text (docs/metrics.md, "Node agent"): heartbeats, mounts by
  // state, mount and unmount attempts, the time grantfs-mount took.
  std::string RenderMetrics() ABSL_LOCKS_EXCLUDED(mu_);

  // What a mount was made with: the directory of the volume and the
  // options. Unknown for a mount adopted from a state file of an older
  // agent, or found mounted with no record of it.
  struct Spec {
    bool known = false;
    std::string subdir, options;
    bool operator==(const Spec& o) const {
      return known == o.known && subdir == o.subdir && options == o.options;
    }
  };
  // A state file's text: one line per path, C-escaped, with the spec's
  // subdir and options (tab-separated) when known. Exposed for tests.
  static std::map<std::string, Spec> ParseStateFile(const std::string& text);
  static std::string FormatStateFile(const std::map<std::string, Spec>& mounts);

 private:
  struct Local {
    proto::NodeMountState state;
    absl::Time retry_at = absl::InfinitePast();  // FAILED / BUSY: next try
  };

  void HeartbeatLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void ReconcileLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void EnsureMounted(const proto::GlobalMountRecord& rec) ABSL_LOCKS_EXCLUDED(mu_);
  void EnsureUnmounted(const std::string& path, uint64_t generation, bool force)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Records a state (a change is reported at once).
  void SetState(const std::string& path, uint64_t generation, proto::NodeMountState::State state,
                const std::string& reason, absl::Duration retry_after = absl::ZeroDuration())
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `path` of `generation` is in `state`.
  bool Is(const std::string& path, uint64_t generation, proto::NodeMountState::State state)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `path` of `generation` is in `state` and not due for a retry.
  bool Settled(const std::string& path, uint64_t generation, proto::NodeMountState::State state)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Records that this agent keeps `path`, made with `spec` (one not known
  // does not replace a known one), or no longer does (nullopt).
  void SetManaged(const std::string& path, const std::optional<Spec>& spec)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<Spec> ManagedSpec(const std::string& path) ABSL_LOCKS_EXCLUDED(mu_);
  void SaveStateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool stopping() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `path` (normalized) is strictly below options_.allowed_root.
  bool BelowAllowedRoot(const std::string& path) const;

  // Constant after construction.
  const NodeAgentOptions options_;
  const uint64_t instance_;  // random: this run of the agent (NodeHeartbeatRequest)

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // The newest table, and a count of the tables received.
  std::optional<proto::GlobalMountTable> table_ ABSL_GUARDED_BY(mu_);
  uint64_t table_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Local> states_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Spec> managed_ ABSL_GUARDED_BY(mu_);
  // A state changed since the last heartbeat was sent.
  bool report_due_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  // The heartbeat in flight, cancelled to report a change or to stop.
  grpc::ClientContext* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;

  // Counted outside mu_ (metrics).
  std::atomic<uint64_t> heartbeats_{0}, heartbeat_failures_{0}, tables_{0};
  std::atomic<uint64_t> mount_attempts_{0}, mount_failures_{0};
  std::atomic<uint64_t> unmount_attempts_{0}, unmount_busy_{0}, unmount_failures_{0};
  LatencyHistogram mount_time_;

  std::thread heartbeat_thread_;
  std::thread reconcile_thread_;
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_NODE_AGENT_H_
