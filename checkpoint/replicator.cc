#include "checkpoint/replicator.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/keepalive.h"
#include "common/transport.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

// The full name of Replication.Stream (proto/replication.proto).
constexpr char kStreamMethod[] = "/grantfs.proto.Replication/Stream";

}  // namespace

Replicator::Replicator(const ReplicatorOptions& options) : options_(options) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 << 20);
  args.SetMaxReceiveMessageSize(64 << 20);
  SetReconnect(&args, 500);
  // A replica that vanished without a reset (cut off) is noticed in ~2 s.
  SetFastKeepalive(&args);
  channel_ = options_.transport.Connect(options_.peer, args);
  stream_method_ = std::make_unique<grpc::internal::RpcMethod>(
      kStreamMethod, grpc::internal::RpcMethod::BIDI_STREAMING, channel_);
  lease_witness_ = options_.granted_at;
  lease_replica_ = absl::InfinitePast();
  last_ack_ = options_.clock->Now();
}

Replicator::~Replicator() { Stop(); }

void Replicator::Start() {
  stream_thread_ = std::thread([this] { StreamLoop(); });
  witness_thread_ = std::thread([this] { WitnessLoop(); });
}

void Replicator::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    stopping_ = true;
    if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
  }
  if (stream_thread_.joinable()) stream_thread_.join();
  if (witness_thread_.joinable()) witness_thread_.join();
}

const char* Replicator::StateName(State s) {
  switch (s) {
    case State::kConnecting:
      return "connecting";
    case State::kSyncing:
      return "syncing";
    case State::kInSync:
      return "in sync";
    case State::kDegraded:
      return "degraded";
  }
  return "?";
}

// --- role ---------------------------------------------------------------------

bool Replicator::Serving(std::string* why) {
  absl::MutexLock l(&mu_);
  return ServingLocked(why);
}

bool Replicator::ServingLocked(std::string* why) const {
  if (fenced_) {
    *why = "fenced; rejoining as replica";
    return false;
  }
  if (handing_over_) {
    *why = "handing over to " + options_.peer;
    return false;
  }
  const absl::Time fresh = std::max(lease_witness_, lease_replica_);
  if (options_.clock->Now() >= fresh + options_.lease) {
    *why = "lease lapsed: neither the witness nor the replica answered";
    return false;
  }
  return true;
}

std::string Replicator::ReplicaState() {
  absl::MutexLock l(&mu_);
  if (state_ == State::kInSync && !stream_up_) return "degraded";
  return StateName(state_);
}

void Replicator::FillStatus(proto::StatusReply* reply) {
  absl::MutexLock l(&mu_);
  // A primary cut off from the witness and the replica still believes in
  // its epoch but accepts nothing: it says so rather than "primary", so that
  // an operator (or a script looking for the primary) is not misled.
  std::string why;
  const bool serving = ServingLocked(&why);
  reply->set_role(fenced_ ? "fenced" : serving || handing_over_ ? "primary" : "isolated");
  reply->set_not_serving(why);
  reply->set_epoch(options_.epoch);
  reply->set_server(options_.self);
  reply->set_peer(options_.peer);
  reply->set_witness(options_.witness);
  reply->set_replica_state(StateName(state_));
  reply->set_log_seq(head_);
  reply->set_acked_seq(acked_);
  reply->set_lag_bytes(LagBytes());
  reply->set_repl_records(stats_.records);
  reply->set_repl_messages(stats_.messages);
  reply->set_repl_round_trips(stats_.round_trips);
  if (must_wait_ && replica_space_.has_value()) {
    reply->set_replica_disk_room_bytes(replica_space_->room_bytes());
    reply->set_replica_hold_short(replica_space_->hold_short());
  }
  if (resync_.started != absl::InfinitePast()) {
    reply->set_resync_active(resync_.active);
    reply->set_resync_done_bytes(resync_.done_bytes);
    reply->set_resync_total_bytes(resync_.total_bytes);
    reply->set_resync_elapsed_ms(absl::ToInt64Milliseconds(
        (resync_.active ? options_.clock->Now() : resync_.ended) - resync_.started));
  }
}

absl::StatusOr<proto::MetaDigest> Replicator::ReplicaDigest(uint64_t seq) {
  {
    absl::MutexLock l(&mu_);
    if (state_ != State::kInSync || !stream_up_) {
      return absl::FailedPreconditionError(
          absl::StrCat("no in-sync replica (", StateName(state_), ")"));
    }
    if (acked_ < seq) {
      return absl::FailedPreconditionError(
          absl::StrCat("the replica has not applied change ", seq, " (at ", acked_, ")"));
    }
  }
  grpc::ClientContext ctx;
  options_.transport.AddTo(&ctx);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  proto::DigestRequest req;
  req.set_epoch(options_.epoch);
  req.set_seq(seq);
  proto::MetaDigest reply;
  grpc::Status st = proto::Replication::NewStub(channel_)->Digest(&ctx, req, &reply);
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        absl::StrCat("the replica's digest: ", st.error_message()));
  }
  return reply;
}

absl::Status Replicator::Switchover() {
  {
    absl::MutexLock l(&mu_);
    if (state_ != State::kInSync || !stream_up_) {
      return absl::Status(absl::StatusCode::kFailedPrecondition,
                          absl::StrCat("no in-sync replica (", StateName(state_), ")"));
    }
    handing_over_ = true;
    // Drain: new calls are refused (clients retry); the ones under way
    // finish and are acknowledged by the replica.
    auto drained = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return fenced_ || !stream_up_ || acked_ >= head_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&drained), absl::Seconds(5));
    if (fenced_ || !stream_up_ || acked_ < head_) {
      handing_over_ = false;
      return absl::UnavailableError("the replica did not catch up; switchover abandoned");
    }
  }
  // Each witness call has a short deadline (500 ms); a loaded machine can
  // miss it, so the handover is asked again for up to 3 s. An attempt that
  // the witness granted but whose answer was lost makes the next one find
  // the epoch already handed to the peer: that is the grant.
  const absl::Time give_up = options_.clock->Now() + absl::Seconds(3);
  absl::StatusOr<proto::WitnessReply> r;
  for (;;) {
    r = options_.witness_call(MakeWitnessRequest(proto::WitnessRequest::HANDOVER));
    if (r.ok() && !r->granted() && r->state().epoch() > options_.epoch &&
        r->state().primary() == options_.peer) {
      r->set_granted(true);
    }
    if (r.ok() || !absl::IsUnavailable(r.status()) || options_.clock->Now() >= give_up) break;
    LOG(WARNING) << "switchover: asking the witness again: " << r.status().message();
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (!r.ok() || !r->granted()) {
    absl::MutexLock l(&mu_);
    handing_over_ = false;
    return absl::UnavailableError(absl::StrCat("the witness refused the handover: ",
                                               r.ok() ? r->reason() : r.status().message()));
  }
  LOG(INFO) << "switchover: epoch " << r->state().epoch() << " belongs to " << options_.peer;
  // Ending the stream tells the replica to look at the witness now.
  Fence(absl::StrCat("handed over to ", options_.peer));
  return absl::OkStatus();
}

}  // namespace grantfs
