// The primary's side of the witness (checkpoint/witness.h): the loop that
// renews the lease every lease/5, asks to go on alone (DEGRADE) when the
// replica is lost and reports it in sync again, and fences this server
// when the witness says another one owns the epoch.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "checkpoint/replicator.h"
#include "glog/logging.h"

namespace grantfs {

proto::WitnessRequest Replicator::MakeWitnessRequest(proto::WitnessRequest::Op op) const {
  proto::WitnessRequest req;
  req.set_op(op);
  req.set_epoch(options_.epoch);
  req.set_replica(options_.peer);
  *req.mutable_data() = options_.identity();
  return req;
}

absl::StatusOr<proto::WitnessReply> Replicator::AskWitness(proto::WitnessRequest::Op op) {
  absl::StatusOr<proto::WitnessReply> r = options_.witness_call(MakeWitnessRequest(op));
  if (r.ok() && !r->granted() &&
      (r->state().epoch() != options_.epoch || r->state().primary() != options_.self)) {
    Fence(absl::StrCat("the witness says epoch ", r->state().epoch(), " belongs to ",
                       r->state().primary()));
  }
  return r;
}

void Replicator::Fence(const std::string& why) {
  {
    absl::MutexLock l(&mu_);
    if (fenced_) return;
    fenced_ = true;
    if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
  }
  LOG(WARNING) << "fenced: " << why << "; this server stops being the primary";
  if (options_.on_fenced) options_.on_fenced();
}

void Replicator::WitnessLoop() {
  const absl::Duration tick = options_.lease / 5;
  absl::Time last_degrade_log = absl::InfinitePast();
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || fenced_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stop), tick)) return;
    }
    // The lease.
    const absl::Time sent = options_.clock->Now();
    absl::StatusOr<proto::WitnessReply> r = AskWitness(proto::WitnessRequest::RENEW);
    if (r.ok() && r->granted()) {
      absl::MutexLock l(&mu_);
      lease_witness_ = std::max(lease_witness_, sent);
    }
    // The replica's state, as the witness must know it.
    bool tell_in_sync = false, degrade = false;
    {
      absl::MutexLock l(&mu_);
      if (fenced_) return;
      if (must_wait_ && !witness_knows_in_sync_ && acked_ >= sync_from_ - 1 && stream_up_) {
        tell_in_sync = true;
      }
      const bool waiting = acked_ < head_ && head_ >= sync_from_;
      if (must_wait_ && (!stream_up_ || (waiting && options_.clock->Now() - last_ack_ >
                                                        options_.replica_timeout))) {
        degrade = true;
      }
    }
    if (tell_in_sync) {
      absl::StatusOr<proto::WitnessReply> w = AskWitness(proto::WitnessRequest::IN_SYNC);
      if (w.ok() && w->granted()) {
        absl::MutexLock l(&mu_);
        witness_knows_in_sync_ = true;
        state_ = State::kInSync;
        LOG(INFO) << "replica " << options_.peer << " is in sync (the witness knows)";
      }
    }
    if (degrade) {
      // Writers are waiting for a replica that does not answer. Going on
      // without it needs the witness's word, or the replica might be
      // promoted without the changes acknowledged from now on.
      absl::StatusOr<proto::WitnessReply> w = AskWitness(proto::WitnessRequest::DEGRADE);
      if (w.ok() && w->granted()) {
        absl::MutexLock l(&mu_);
        must_wait_ = false;
        witness_knows_in_sync_ = false;
        state_ = State::kDegraded;
        if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
        LOG(WARNING) << "replica " << options_.peer
                     << " lost; the witness agreed: serving without a replica (degraded) from "
                        "change "
                     << head_;
      } else if (options_.clock->Now() - last_degrade_log > absl::Seconds(5)) {
        last_degrade_log = options_.clock->Now();
        LOG(WARNING) << "replica " << options_.peer
                     << " lost and the witness did not agree to go on without it ("
                     << (w.ok() ? w->reason() : std::string(w.status().message()))
                     << "); writes wait";
      }
    }
  }
}

}  // namespace grantfs
