// GrantFsService's session and administration handlers: opening,
// renewing, reclaiming and closing a client's session, the invalidation
// stream, and Status, Switchover, Check and Echo. How each call is served
// (gate, authentication, reply err, exactly-once) is in server/service_call.h;
// the file-system handlers are in service_fs.cc.
#include "server/service.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "checkpoint/meta_digest.h"
#include "common/errno_status.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/service_call.h"
#include "server/subtree.h"

namespace grantfs {

using service_call::ValidIno;

namespace {

// gRPC's peer URI ("ipv4:10.0.0.5:41234", "ipv6:%5B::1%5D:41234") as
// HOST:PORT; another kind (a Unix socket) as gRPC says it.
std::string CallAddress(const grpc::ServerContextBase& ctx) {
  std::string peer = ctx.peer();
  if (!absl::StartsWith(peer, "ipv4:") && !absl::StartsWith(peer, "ipv6:")) return peer;
  return absl::StrReplaceAll(peer.substr(5), {{"%5B", "["}, {"%5D", "]"}});
}

}  // namespace

GrantFsService::GrantFsService(Volume* volume, const ServiceOptions& options)
    : volume_(volume), options_(options) {}

grpc::Status GrantFsService::OpenSession(Ctx* ctx, const proto::OpenSessionRequest* req,
                                         proto::OpenSessionReply* reply) {
  return Serve("OpenSession", ctx, req, reply, {}, [&](const RequestContext& rc) -> absl::Status {
    // The directory the mount shows as its root: the volume's, or the one
    // its path names (`mount SERVER:/PATH`), within the node's subtree.
    absl::StatusOr<std::string> path = NormalizePath(req->root().empty() ? "/" : req->root());
    if (!path.ok()) return path.status();
    absl::StatusOr<uint64_t> root = ResolveDirectory(&volume_->meta(), *path);
    if (!root.ok()) return root.status();
    if (absl::Status in = Reaches(ctx, rc, "OpenSession", *root); !in.ok()) return in;
    reply->set_root_ino(*root);
    absl::StatusOr<uint64_t> id =
        volume_->OpenSession(req->client_name(), options_.transport.PeerName(*ctx));
    if (!id.ok()) return id.status();
    reply->set_client_id(*id);
    volume_->sessions().CameFrom(*id, CallAddress(*ctx));
    reply->set_lease_ms(absl::ToInt64Milliseconds(volume_->sessions().lease()));
    reply->set_incarnation(volume_->incarnation());
    reply->set_max_file_size(kMaxFileSize);
    reply->set_meta_lease_ms(absl::ToInt64Milliseconds(volume_->meta_lease()));
    LOG(INFO) << "session " << reply->client_id() << " opened for '" << req->client_name()
              << "' from " << ctx->peer();
    return absl::OkStatus();
  });
}

grpc::Status GrantFsService::Heartbeat(Ctx* ctx, const proto::HeartbeatRequest* req,
                                       proto::HeartbeatReply* reply) {
  return Serve("Heartbeat", ctx, req, reply, {}, [&](const RequestContext& rc) {
    reply->set_incarnation(volume_->incarnation());
    const uint64_t lost = volume_->sessions().LostToken(rc.client_id, req->lost_acked());
    if (lost != 0) {
      LOG(WARNING) << "session " << rc.client_id
                   << " came back after its lease ran out: told that its grant is gone";
      reply->set_session_lost(lost);
    }
    reply->set_leases_renewed(volume_->leases().Renew(rc.client_id));
    volume_->sessions().Reported(rc.client_id, req->report());
    volume_->sessions().CameFrom(rc.client_id, CallAddress(*ctx));
    reply->set_meta_lease_ms(absl::ToInt64Milliseconds(volume_->meta_lease()));
    return absl::OkStatus();
  });
}

grpc::Status GrantFsService::Reclaim(Ctx* ctx, const proto::ReclaimRequest* req,
                                     proto::ReclaimReply* reply) {
  return Serve("Reclaim", ctx, req, reply, {}, [&](const RequestContext& rc) -> absl::Status {
    if (rc.client_id == 0) return ErrnoStatus(EINVAL, "reclaim needs a session");
    std::vector<std::pair<uint64_t, uint64_t>> opens;
    opens.reserve(req->opens_size());
    std::vector<uint64_t> unreached;  // outside the node's subtree: lost to it
    for (const proto::ReclaimRequest::Open& o : req->opens()) {
      if (!ValidIno(o.ino())) return ErrnoStatus(EINVAL, "inode 0");
      if (!Reaches(ctx, rc, "Reclaim", o.ino()).ok()) {
        unreached.push_back(o.ino());
        continue;
      }
      opens.emplace_back(o.ino(), o.handle());
    }
    auto r = volume_->Reclaim(rc, opens);
    if (r.ok()) {
      reply->mutable_lost()->Add(r->begin(), r->end());
      reply->mutable_lost()->Add(unreached.begin(), unreached.end());
    }
    reply->set_incarnation(volume_->incarnation());
    return r.status();
  });
}

grpc::Status GrantFsService::CloseSession(Ctx* ctx, const proto::CloseSessionRequest* req,
                                          proto::CloseSessionReply* reply) {
  return Serve("CloseSession", ctx, req, reply, {}, [&](const RequestContext& rc) {
    LOG(INFO) << "session " << rc.client_id << " closed";
    return volume_->CloseSession(rc.client_id);
  });
}

grpc::Status GrantFsService::Subscribe(Ctx* ctx, const proto::SubscribeRequest* req,
                                       const BatchWriter& write) {
  // A stream, not a unary call: Serve's reply does not apply.
  if (grpc::Status gate = Gate(); !gate.ok()) return gate;
  RequestContext rc;
  if (grpc::Status auth = Begin(ctx, req->header(), &rc); !auth.ok()) return auth;
  if (rc.client_id == 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "subscribe needs a session");
  }
  // Ends when the client goes away or its session ends.
  LeaseTable& leases = volume_->leases();
  // This stream takes over the session's queue from any older one (which
  // may not have noticed yet that its mount went away).
  const uint64_t stream = volume_->sessions().NewStream(rc.client_id);
  const uint64_t token = leases.StreamUp(rc.client_id, req->leases());
  absl::Cleanup down = [&] { leases.StreamDown(rc.client_id, token); };
  proto::InvalidationBatch first;
  first.set_subscribed(true);
  first.set_meta_lease_ms(absl::ToInt64Milliseconds(volume_->meta_lease()));
  if (!write(first)) return grpc::Status::OK;
  while (!ctx->IsCancelled()) {
    proto::InvalidationBatch batch;
    if (!volume_->sessions().Drain(rc.client_id, absl::Milliseconds(500), &batch, stream)) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "session ended, its queue overflowed, or a newer stream took it");
    }
    if (rc.top != 0) ConfineBatch(rc, &batch);
    if ((batch.items_size() > 0 || batch.recall_bytes() > 0) && !write(batch)) break;
  }
  return grpc::Status::OK;
}

grpc::Status GrantFsService::AckRecall(Ctx* ctx, const proto::AckRecallRequest* req,
                                       proto::ErrReply* reply) {
  return Serve("AckRecall", ctx, req, reply, {}, [&](const RequestContext& rc) {
    volume_->leases().Ack(rc.client_id, req->recall());
    return absl::OkStatus();
  });
}

grpc::Status GrantFsService::Status(Ctx* ctx, const proto::StatusRequest* req,
                                    proto::StatusReply* reply) {
  // Every role answers Status, also a replica and a fenced primary.
  if (grpc::Status auth = Authenticate(ctx, kNodePeer | kAdminPeer | kServerPeer); !auth.ok())
    return auth;
  FillStatus(reply);
  return grpc::Status::OK;
}

void GrantFsService::FillStatus(proto::StatusReply* reply) {
  reply->set_role(options_.role);
  if (options_.server_role != nullptr) options_.server_role->FillStatus(reply);
  if (volume_ == nullptr) return;
  reply->set_volume_id(volume_->meta().store().identity().volume_id());
  reply->set_data_epoch(volume_->meta().store().identity().data_epoch());
  SpaceInfo s = volume_->Space();
  reply->set_capacity_bytes(s.capacity_bytes);
  reply->set_used_bytes(s.used_bytes);
  reply->set_inodes(s.inodes);
  reply->set_next_ino(s.next_ino);
  reply->set_pending_deletes(s.pending_deletes);
  reply->set_granted_bytes(s.granted_bytes);
  reply->set_reserved_bytes(s.reserved_bytes);
  reply->set_ledger_ok(s.ledger_ok);
  const Volume::DiskSpace disk = volume_->Disk();
  reply->set_disk_room_bytes(disk.room_bytes);
  reply->set_hold_bytes(disk.held_bytes);
  reply->set_write_backlog_bytes(volume_->flow().backlog_bytes());
  reply->set_write_budget_bytes(volume_->flow().budget());
  const LeaseStats leases = volume_->leases().Stats();
  reply->set_leases_held(leases.held);
  reply->set_leases_granted(leases.granted);
  reply->set_lease_recalls(leases.recalls);
  reply->set_lease_recall_waits(leases.recall_waits);
  reply->set_lease_lapsed(leases.lapsed);
  reply->set_leases_refused_hot(leases.refused_hot);
  reply->set_leases_evicted(leases.evicted);
  const CommitStats commits = volume_->meta().store().Commits();
  reply->set_meta_changes(commits.changes);
  reply->set_meta_wal_syncs(commits.wal_syncs);
  reply->set_grant_recalls(volume_->sessions().grant_recalls());
  const std::map<uint64_t, size_t> locked = volume_->LockedFiles();
  uint64_t grants = 0;
  for (auto& info : volume_->sessions().List()) {
    info.set_grant_bytes(SpaceLedger::Bytes(volume_->meta().space().GrantOf(info.client_id())));
    grants += info.grant_bytes() > 0 ? 1 : 0;
    info.set_credit_bytes(volume_->flow().Credit(info.client_id()));
    info.set_peak_writes(volume_->flow().PeakWrites(info.client_id()));
    auto l = locked.find(info.client_id());
    info.set_locked_files(l != locked.end() ? l->second : 0);
    *reply->add_sessions() = info;
  }
  reply->set_grants_outstanding(grants);
}

grpc::Status GrantFsService::Switchover(Ctx* ctx, const proto::SwitchoverRequest* req,
                                        proto::ErrReply* reply) {
  if (grpc::Status auth = Authenticate(ctx, kAdminPeer); !auth.ok()) return auth;
  return Serve("Switchover", ctx, req, reply, {}, [&](const RequestContext&) {
    if (options_.server_role == nullptr) {
      return ErrnoStatus(ENOTSUP, "standalone server: no replica");
    }
    return options_.server_role->Switchover();
  });
}

grpc::Status GrantFsService::Check(Ctx* ctx, const proto::CheckRequest* req,
                                   proto::CheckReply* reply) {
  if (grpc::Status auth = Authenticate(ctx, kAdminPeer); !auth.ok()) return auth;
  return Serve("Check", ctx, req, reply, {}, [&](const RequestContext&) -> absl::Status {
    ASSIGN_OR_RETURN(FsckReport report, volume_->CheckMetadata());
    reply->set_clean(report.clean());
    for (const FsckProblem& p : report.problems) reply->add_problems(p.ToString());
    reply->set_summary(report.Summary());
    reply->set_report_json(report.ToJson());
    ASSIGN_OR_RETURN(*reply->mutable_primary(), volume_->meta().store().DigestWithMark());
    if (options_.server_role == nullptr) {
      reply->set_replica_error("standalone server: no replica");
      return absl::OkStatus();
    }
    // The replica digests its copy when it applies the mark.
    absl::Status replicated = volume_->meta().store().WaitReplicatedAll();
    absl::StatusOr<proto::MetaDigest> theirs =
        replicated.ok() ? options_.server_role->ReplicaDigest(reply->primary().seq()) : replicated;
    if (!theirs.ok()) {
      reply->set_replica_error(std::string(theirs.status().message()));
      return absl::OkStatus();
    }
    *reply->mutable_replica() = *std::move(theirs);
    for (std::string& d : CompareDigests(reply->primary(), reply->replica())) {
      LOG(ERROR) << "check: the replica's metadata differs from the primary's: " << d;
      reply->add_differences(std::move(d));
    }
    return absl::OkStatus();
  });
}

grpc::Status GrantFsService::Echo(Ctx* ctx, const proto::EchoRequest* req,
                                  proto::EchoReply* reply) {
  return Serve("Echo", ctx, req, reply, {}, [&](const RequestContext&) {
    constexpr uint32_t kMaxEchoReply = 8 << 20;
    const uint32_t n = req->reply_bytes();
    if (n > kMaxEchoReply) {
      return ErrnoStatus(EINVAL, "reply_bytes " + std::to_string(n) + " > 8 MiB");
    }
    const std::string& in = req->payload();
    std::string* out = reply->mutable_payload();
    if (in.empty()) {
      out->assign(n, '\x5a');
    } else {
      out->reserve(n);
      while (out->size() < n) out->append(in, 0, std::min<size_t>(in.size(), n - out->size()));
    }
    return absl::OkStatus();
  });
}

}  // namespace grantfs
