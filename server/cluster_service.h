// The Cluster gRPC service (proto/cluster.proto): the global mount table
// (server/mount_table.h) and the node agents' heartbeats
// (server/node_table.h), served by grantfs-server next to GrantFs on the
// same port. docs/operations.md, "Global mounts".
//
// Every call needs the serving primary: elsewhere (a replica, a fenced or
// isolated primary, between roles) it gets UNAVAILABLE and the caller tries
// the next server. Who may call (docs/security.md): Heartbeat nodes;
// ListMounts nodes and admins; AddMount, RemoveMount and ForgetMount admins
// and nodes whose certificate has the `root` option.
//
// A Heartbeat is also a long poll: it returns when the table differs from
// the one the agent has, or after wait_ms (at most 2 s). At most
// `max_waiting` calls wait at once (they hold a thread of gRPC's synchronous
// pool each); beyond that a heartbeat is answered at once.
//
// Thread-safe. The table, the node table and the role must outlive it;
// Shutdown() before the gRPC server stops, so that waiting calls end.
#ifndef GRANTFS_SERVER_CLUSTER_SERVICE_H_
#define GRANTFS_SERVER_CLUSTER_SERVICE_H_

#include <atomic>

#include "checkpoint/server_role.h"
#include "common/transport.h"
#include "proto/cluster.grpc.pb.h"
#include "server/mount_table.h"
#include "server/node_table.h"

namespace grantfs {

struct ClusterServiceOptions {
  // Who may call (common/transport.h).
  Transport transport;
  // Whether this server serves now; nullptr: always (standalone). Not owned.
  ServerRole* server_role = nullptr;
  // The primary's table; nullptr on a replica (every call UNAVAILABLE).
  // Not owned.
  MountTable* table = nullptr;
  // Not owned; required when `table` is set.
  NodeTable* nodes = nullptr;
  // Most heartbeats waiting at once. Default 128.
  int max_waiting = 128;
};

class ClusterService final : public proto::Cluster::Service {
 public:
  explicit ClusterService(const ClusterServiceOptions& options);

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const proto::NodeHeartbeatRequest* req,
                         proto::NodeHeartbeatReply* reply) override;
  grpc::Status ListMounts(grpc::ServerContext* ctx, const proto::ListMountsRequest* req,
                          proto::ListMountsReply* reply) override;
  grpc::Status AddMount(grpc::ServerContext* ctx, const proto::AddMountRequest* req,
                        proto::AddMountReply* reply) override;
  grpc::Status RemoveMount(grpc::ServerContext* ctx, const proto::RemoveMountRequest* req,
                           proto::RemoveMountReply* reply) override;
  grpc::Status ForgetMount(grpc::ServerContext* ctx, const proto::ForgetMountRequest* req,
                           proto::ForgetMountReply* reply) override;

  // Ends the waiting heartbeats and makes later ones answer at once.
  void Shutdown();

 private:
  // OK when this server serves and the caller is one of `kinds`.
  grpc::Status Gate(grpc::ServerContext* ctx, int kinds);
  // Gate for a change of the table: admins, nodes with `root`.
  grpc::Status GateChange(grpc::ServerContext* ctx, const char* what);

  // Constant after construction.
  const ClusterServiceOptions options_;
  std::atomic<int> waiting_{0};
  std::atomic<bool> shutdown_{false};
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_CLUSTER_SERVICE_H_
