#include "server/cluster_service.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

constexpr uint32_t kMaxWaitMs = 2000;
constexpr absl::Duration kWaitSlice = absl::Milliseconds(100);

}  // namespace

ClusterService::ClusterService(const ClusterServiceOptions& options) : options_(options) {}

void ClusterService::Shutdown() {
  shutdown_ = true;
  if (options_.table != nullptr) options_.table->Shutdown();
}

grpc::Status ClusterService::Gate(grpc::ServerContext* ctx, int kinds) {
  if (grpc::Status auth = options_.transport.Authorize(*ctx, kinds, "cluster"); !auth.ok()) {
    return auth;
  }
  std::string why;
  if (options_.server_role != nullptr && !options_.server_role->Serving(&why)) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the primary: " + why);
  }
  if (options_.table == nullptr || shutdown_) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the primary");
  }
  return grpc::Status::OK;
}

grpc::Status ClusterService::GateChange(grpc::ServerContext* ctx, const char* what) {
  if (grpc::Status s = Gate(ctx, kNodePeer | kAdminPeer); !s.ok()) return s;
  if (!options_.transport.secure()) return grpc::Status::OK;
  const std::string peer = options_.transport.PeerName(*ctx);
  if (PeerKindOf(peer) == kAdminPeer) return grpc::Status::OK;
  // A node may change the table only when its certificate has root and no
  // subtree: every node mounts what the table says, as root, so a node
  // limited to a subtree (or squashed) must not reach the others through it.
  const CallerPolicy policy = options_.transport.PolicyOf(*ctx);
  const bool whole_tree = policy.subtree.empty() || policy.subtree == "/";
  if (policy.root && whole_tree && !policy.read_only && !policy.anon) {
    return grpc::Status::OK;
  }
  const std::string why =
      policy.root && !whole_tree
          ? absl::StrCat("a node restricted to the subtree ", policy.subtree,
                         " may not change the global mount table")
          : std::string(
                "only an admin or a node with the root option (and no subtree, ro or "
                "anon) may change the global mount table");
  LOG(WARNING) << "cluster: refused " << what << " from " << ctx->peer() << " (\"" << peer
               << "\"): " << why;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, why);
}

grpc::Status ClusterService::Heartbeat(grpc::ServerContext* ctx,
                                       const proto::NodeHeartbeatRequest* req,
                                       proto::NodeHeartbeatReply* reply) {
  if (grpc::Status s = Gate(ctx, kNodePeer); !s.ok()) return s;
  const std::string peer = options_.transport.PeerName(*ctx);
  // Only the states of paths in the table are kept (bounded memory).
  absl::StatusOr<proto::GlobalMountTable> now = options_.table->List();
  if (!now.ok()) {
    LOG(ERROR) << "cluster: reading the global mount table: " << now.status();
    return ToGrpcStatus(now.status());
  }
  std::set<std::string> paths;
  for (const proto::GlobalMountRecord& r : now->mounts()) paths.insert(r.path());
  if (absl::Status s = options_.nodes->Heartbeat(*req, peer, ctx->peer(), &paths); !s.ok()) {
    LOG(WARNING) << "cluster: refused a heartbeat from " << ctx->peer() << " (\"" << peer
                 << "\"): " << s;
    return ToGrpcStatus(s);
  }
  MountTable* table = options_.table;
  const uint32_t wait_ms = std::min(req->wait_ms(), kMaxWaitMs);
  if (wait_ms > 0 && req->known_incarnation() == table->incarnation() &&
      req->known_version() == table->version()) {
    if (waiting_.fetch_add(1) < options_.max_waiting) {
      // Not past the caller's deadline: it would only see DEADLINE_EXCEEDED.
      absl::Duration wait = absl::Milliseconds(wait_ms);
      const absl::Duration left =
          absl::FromChrono(ctx->deadline()) - absl::Now() - absl::Milliseconds(200);
      wait = std::max(absl::ZeroDuration(), std::min(wait, left));
      // In slices: a cancelled call (the agent has a state to report, or is
      // gone) frees its thread within one slice, not at the end of the wait.
      const absl::Time until = absl::Now() + wait;
      while (!ctx->IsCancelled() && !shutdown_) {
        const absl::Duration left = until - absl::Now();
        if (left <= absl::ZeroDuration()) break;
        table->WaitChanged(req->known_incarnation(), req->known_version(),
                           std::min(left, kWaitSlice));
        if (req->known_version() != table->version()) break;
      }
    }
    waiting_.fetch_sub(1);
    // Fenced or handed over while the call waited: the table here may be
    // older than the new primary's.
    std::string why;
    if (options_.server_role != nullptr && !options_.server_role->Serving(&why)) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the primary: " + why);
    }
  }
  absl::StatusOr<proto::GlobalMountTable> t = table->List();
  if (!t.ok()) {
    LOG(ERROR) << "cluster: reading the global mount table: " << t.status();
    return ToGrpcStatus(t.status());
  }
  *reply->mutable_table() = *std::move(t);
  return grpc::Status::OK;
}

grpc::Status ClusterService::ListMounts(grpc::ServerContext* ctx, const proto::ListMountsRequest*,
                                        proto::ListMountsReply* reply) {
  if (grpc::Status s = Gate(ctx, kNodePeer | kAdminPeer); !s.ok()) return s;
  absl::StatusOr<proto::GlobalMountTable> t = options_.table->List();
  if (!t.ok()) {
    LOG(ERROR) << "cluster: reading the global mount table: " << t.status();
    return ToGrpcStatus(t.status());
  }
  *reply->mutable_table() = *std::move(t);
  for (proto::NodeInfo& n : options_.nodes->List()) *reply->add_nodes() = std::move(n);
  reply->set_node_timeout_ms(absl::ToInt64Milliseconds(options_.nodes->node_timeout()));
  reply->set_settling_ms(
      absl::ToInt64Milliseconds(absl::Ceil(options_.nodes->Settling(), absl::Milliseconds(1))));
  return grpc::Status::OK;
}

grpc::Status ClusterService::AddMount(grpc::ServerContext* ctx, const proto::AddMountRequest* req,
                                      proto::AddMountReply* reply) {
  if (grpc::Status s = GateChange(ctx, "AddMount"); !s.ok()) return s;
  absl::StatusOr<MountTable::Added> added = options_.table->Add(
      req->path(), req->subdir(), req->options(), options_.transport.PeerName(*ctx));
  if (!added.ok()) {
    LOG(WARNING) << "cluster: refused to add the global mount '" << req->path()
                 << "': " << added.status();
    return ToGrpcStatus(added.status());
  }
  *reply->mutable_mount() = added->mount;
  reply->set_existed(added->existed);
  return grpc::Status::OK;
}

grpc::Status ClusterService::RemoveMount(grpc::ServerContext* ctx,
                                         const proto::RemoveMountRequest* req,
                                         proto::RemoveMountReply* reply) {
  if (grpc::Status s = GateChange(ctx, "RemoveMount"); !s.ok()) return s;
  absl::StatusOr<proto::GlobalMountRecord> rec =
      options_.table->MarkRemoving(req->path(), req->force());
  if (!rec.ok()) {
    LOG(WARNING) << "cluster: refused to remove the global mount '" << req->path()
                 << "': " << rec.status();
    return ToGrpcStatus(rec.status());
  }
  *reply->mutable_mount() = *std::move(rec);
  return grpc::Status::OK;
}

grpc::Status ClusterService::ForgetMount(grpc::ServerContext* ctx,
                                         const proto::ForgetMountRequest* req,
                                         proto::ForgetMountReply*) {
  if (grpc::Status s = GateChange(ctx, "ForgetMount"); !s.ok()) return s;
  absl::Status s = options_.table->Forget(req->path(), req->generation());
  if (!s.ok()) {
    LOG(WARNING) << "cluster: refused to forget the global mount '" << req->path() << "': " << s;
  }
  return ToGrpcStatus(s);
}

}  // namespace grantfs
