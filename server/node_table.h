// The node agents the primary has heard from (grantfs-node,
// docs/operations.md "Global mounts"): each node's name, agent version,
// certificate, address, last heartbeat and what it reports about each
// global mount.
//
// In memory only: a primary that starts or takes over knows a node again
// from its next heartbeat (an agent calls at least once a second). Until
// one node timeout has passed since the table was made, a node not heard
// from yet may still be alive: Settling() says how long that lasts, and
// grantfsctl mount -g / umount -g wait for it before they count the nodes.
//
// Thread-safe.
#ifndef GRANTFS_SERVER_NODE_TABLE_H_
#define GRANTFS_SERVER_NODE_TABLE_H_

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/cluster.pb.h"

namespace grantfs {

struct NodeTableOptions {
  // Time of heartbeats (monotonic: ages only). Default the monotonic clock.
  // Not owned.
  Clock* clock = Clock::Monotonic();
  // The wall clock for first_seen_ns. Not owned.
  Clock* wall_clock = Clock::Real();
  // A node is alive while its last heartbeat is younger. Default 5 s (an
  // agent calls at least once a second).
  absl::Duration node_timeout = absl::Seconds(5);
  // Most nodes kept; a new node beyond it replaces the one silent longest,
  // if that one is not alive (else RESOURCE_EXHAUSTED). Default 4096.
  size_t max_nodes = 4096;
  // A node silent this long is forgotten (no longer listed). Default 1 h.
  absl::Duration forget_after = absl::Hours(1);
};

class NodeTable {
 public:
  explicit NodeTable(const NodeTableOptions& options = {});
  NodeTable(const NodeTable&) = delete;
  NodeTable& operator=(const NodeTable&) = delete;

  // Records `hb` from the caller whose certificate is `peer` ("" without
  // TLS) at `address`. INVALID_ARGUMENT for a bad node name (1-64 bytes of
  // [A-Za-z0-9._-]), a version over 64 bytes, more than 1024 mounts or a
  // path over 1024 bytes (reasons are cut to 512 bytes); PERMISSION_DENIED
  // when a node certificate of another name ("node:NAME", NAME not
  // "default") reports for this name; RESOURCE_EXHAUSTED when full;
  // ALREADY_EXISTS for an agent whose node another agent took over (another
  // `instance`) while it still calls: two agents with one name. The one
  // that came last keeps the name; the other is refused until it has been
  // silent for the node timeout, or the one that keeps it has. When
  // `table_paths` is given, only the states of those paths are kept (a node
  // cannot fill the primary's memory with paths the table does not hold).
  // Nodes silent for `forget_after` are dropped.
  absl::Status Heartbeat(const proto::NodeHeartbeatRequest& hb, const std::string& peer,
                         const std::string& address,
                         const std::set<std::string>* table_paths = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Every node, sorted by name.
  std::vector<proto::NodeInfo> List() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Duration node_timeout() const { return options_.node_timeout; }
  // How long, from now, a node that was alive before this table was made
  // (a restart or takeover of the primary) may still call in for the first
  // time: one node timeout after the table was made; zero after that.
  absl::Duration Settling() const;

 private:
  struct Node {
    proto::NodeInfo info;            // without heartbeat_age_ms, alive and conflict
    absl::Time last;                 // options_.clock
    uint64_t instance = 0;           // the agent reporting now
    uint64_t replaced_instance = 0;  // the one before it
    absl::Time replaced_seen = absl::InfinitePast();  // its last call
    std::string conflict;  // what was seen, while replaced_seen is recent
    absl::Time conflict_logged = absl::InfinitePast();
  };

  // Constant after construction.
  const NodeTableOptions options_;
  const absl::Time made_;  // options_.clock

  absl::Mutex mu_;
  std::map<std::string, Node> nodes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_NODE_TABLE_H_
