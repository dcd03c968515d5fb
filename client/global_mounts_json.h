// What grantfsctl says about global mounts and node agents (`mounts`,
// `nodes`, `mount -g`, `umount -g`), as data: the per-node view of each
// mount, and the --json objects (docs/operations.md, "Global mounts", has
// the shapes). Stateless; safe from any thread.
//
// A node's state for a mount, as a word: "mounted", "pending", "failed",
// "busy", "unmounted" (its report about this generation of the record), or
// "pending" (it has not reported about this generation yet), or "down" (its
// agent has not called within the primary's node timeout; its last report
// is kept in "last_state").
//
// Shapes (numbers are JSON numbers; a generation is a decimal string, as it
// does not fit a double):
//   mounts:  {"server", "mounts": [{"path", "subdir", "options",
//             "generation", "removing", "force", "created_by", "created_at" (RFC 3339, UTC),
//             "nodes": [{"node", "state", "reason", "alive", "last_state"}]}]}
//   nodes:   {"server", "node_timeout_ms", "settling_ms" (> 0: the primary
//             started or took over less than a node timeout ago, and nodes
//             may still call in), "nodes": [{"node", "agent_version",
//             "peer", "address", "alive", "heartbeat_age_ms", "conflict" ("" or
//             two agents reporting as one node), "mounted", "pending",
//             "failed", "busy"}]}
//   mount -g / umount -g: {"server", "path", "generation", "existed" (mount),
//             "force" (umount), "removed" (umount), "done", "nodes":
//             [{"node", "state", "reason", "alive", "last_state"}]}
#ifndef GRANTFS_CLIENT_GLOBAL_MOUNTS_JSON_H_
#define GRANTFS_CLIENT_GLOBAL_MOUNTS_JSON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "proto/cluster.pb.h"

namespace grantfs {

struct NodeView {
  std::string node;
  std::string state;       // the word (above)
  std::string reason;      // failed, busy: why
  std::string last_state;  // down: what it said last ("" nothing)
  bool alive = false;
};

// "mounted", "pending", ... of a reported state.
const char* MountStateName(proto::NodeMountState::State state);

// Each node's view of `rec` (every node the primary knows, sorted by name).
std::vector<NodeView> NodesOf(const proto::ListMountsReply& reply,
                              const proto::GlobalMountRecord& rec);

// Whether every live node has a final word about `rec`: mounted or failed
// for a mount; unmounted, busy or failed for one being removed.
bool Settled(const std::vector<NodeView>& nodes, bool removing);

google::protobuf::Struct MountsToStruct(const std::string& server,
                                        const proto::ListMountsReply& reply);
google::protobuf::Struct NodesToStruct(const std::string& server,
                                       const proto::ListMountsReply& reply);
google::protobuf::Struct NodeViewsToStruct(const std::vector<NodeView>& nodes);

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_GLOBAL_MOUNTS_JSON_H_
