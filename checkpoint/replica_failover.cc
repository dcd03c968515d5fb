// The replica's failover: a watchdog notices the primary's silence (or a
// stream that ended, for a planned switchover) and asks the witness; when
// the witness grants this server the next epoch the copy is closed and the
// server takes the primary role (ReplicaOptions::on_promoted).
#include <string>

#include "checkpoint/replica.h"
#include "common/clock.h"
#include "glog/logging.h"

namespace grantfs {

proto::WitnessRequest Replica::MakeWitnessRequest(proto::WitnessRequest::Op op, uint64_t epoch) {
  proto::WitnessRequest req;
  req.set_op(op);
  req.set_epoch(epoch);
  absl::MutexLock l(&mu_);
  if (copy_identity_.has_value()) {
    *req.mutable_data() = *copy_identity_;
  } else if (db_ != nullptr) {
    req.mutable_data();  // a copy from before identities: data of no known volume
  }
  return req;
}

void Replica::Watchdog() {
  for (;;) {
    bool claim;
    {
      absl::MutexLock l(&mu_);
      auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || promoted_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stop), absl::Milliseconds(100))) return;
      // Time spent applying (a slow fsync, the end of a snapshot) is not
      // the primary's silence.
      const bool silent =
          !busy_ && Clock::Monotonic()->Now() - last_msg_ > options_.failover_timeout;
      if (!silent && !check_now_) continue;
      const bool streaming = active_ctx_ != nullptr;
      check_now_ = false;
      // A stream ended and the primary has already opened the next one: it
      // is alive, and asking the witness would cancel the new stream.
      if (!silent && streaming) continue;
      claim = silent;
      // An empty copy, or one of an older epoch, can never take over.
      if (epoch_ == 0 && !claim) continue;
    }
    if (TryPromote(claim)) return;
  }
}

bool Replica::TryPromote(bool claim) {
  uint64_t epoch;
  {
    absl::MutexLock l(&mu_);
    if (epoch_ == 0) return false;
    promoting_ = true;
    if (active_ctx_ != nullptr) active_ctx_->TryCancel();
    epoch = epoch_;
  }
  auto give_up = [this]() {
    absl::MutexLock l(&mu_);
    promoting_ = false;
    return false;
  };
  absl::MutexLock apply(&apply_mu_);  // nothing is applied from here on
  {
    // The stream may have changed the copy meanwhile (a snapshot began).
    absl::MutexLock l(&mu_);
    epoch = epoch_;
  }
  if (epoch == 0) return give_up();
  absl::StatusOr<proto::WitnessReply> r =
      options_.witness_call(MakeWitnessRequest(proto::WitnessRequest::GET, epoch));
  if (!r.ok()) {
    LOG_EVERY_N(WARNING, 20) << "replica: witness unreachable: " << r.status();
    return give_up();
  }
  uint64_t granted = 0;
  if (r->state().primary() == options_.self && r->state().epoch() > epoch) {
    granted = r->state().epoch();  // handed over to this server (switchover)
    LOG(INFO) << "replica: the primary handed epoch " << granted << " over to this server";
  } else if (claim && r->state().epoch() == epoch) {
    absl::StatusOr<proto::WitnessReply> c =
        options_.witness_call(MakeWitnessRequest(proto::WitnessRequest::CLAIM, epoch));
    if (!c.ok() || !c->granted()) {
      LOG_EVERY_N(INFO, 10) << "replica: claim of epoch " << epoch + 1 << " not granted: "
                            << (c.ok() ? c->reason() : std::string(c.status().message()));
      return give_up();
    }
    granted = c->state().epoch();
    LOG(WARNING) << "replica: the primary is gone; the witness granted epoch " << granted
                 << " to this server";
  } else {
    if (claim && r->state().epoch() != epoch) {
      LOG_EVERY_N(INFO, 50) << "replica: the copy is of epoch " << epoch << ", the witness is at "
                            << r->state().epoch() << "; waiting for the primary";
    }
    return give_up();
  }
  {
    absl::MutexLock l(&mu_);
    promoted_ = true;
    state_ = State::kPromoted;
  }
  CloseCopy();
  if (options_.on_promoted) options_.on_promoted(granted);
  return true;
}

}  // namespace grantfs
