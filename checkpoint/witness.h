// The witness: the third vote that keeps at most one primary
// (`grantfs-server --role=witness`), and the client the servers ask it with.
//
// The witness stores only proto::WitnessState: the current epoch, who owns
// it, which replica is known to hold every acknowledged change, and the
// volume with the newest data epoch its primaries reported. It also
// keeps, in memory only, the primary's lease: the primary renews it; the
// replica may claim the primary role only once the lease has run out on the
// witness's clock and only while it is the in-sync replica. So a primary that
// is cut off from the witness stops being primary (its RENEW is refused or
// unanswered) before anybody else can become primary, and a primary that was
// only slow is fenced: its epoch is gone. docs/failover.md tells the story.
//
// Whose data: every request carries the sender's data (its volume identity,
// none for an empty data directory). A CLAIM, or the RENEW that starts a
// handed-over primary, is refused with refused_data when that data is empty
// (after epoch 0), of another volume, or older than the newest data epoch a
// primary reported: such a server runs as the replica and gets the
// volume from the real primary, instead of becoming primary and replacing
// the replica's copy with what it has.
#ifndef GRANTFS_CHECKPOINT_WITNESS_H_
#define GRANTFS_CHECKPOINT_WITNESS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/transport.h"
#include "proto/replication.grpc.pb.h"

namespace grantfs {

struct WitnessOptions {
  // Directory of the state file <dir>/witness.state; created if missing.
  // Required.
  std::string dir;
  // How long a primary stays primary without a RENEW. A restarted witness
  // treats the lease as just renewed, so it never promotes the replica
  // earlier than a witness that kept running. Default 1 s; must be > 0.
  absl::Duration lease = absl::Seconds(1);
  // Who may call: servers only (common/transport.h).
  Transport transport;
  // Time source of the lease; not owned. Default: the monotonic clock (a
  // step of the wall clock neither stretches nor cuts a lease).
  Clock* clock = Clock::Monotonic();
  // Stall guard, off when zero: a thread notes every `stall_tick` that the
  // witness runs. When it finds (or a decision finds) more than 4 ticks
  // without one, the witness itself did not run (paused machine, SIGSTOP,
  // starved): it heard no RENEW meanwhile for its own fault, so the
  // primary's lease counts as renewed now, as after a restart. A witness
  // that stalled never deposes a healthy primary for it.
  absl::Duration stall_tick = absl::ZeroDuration();
};

// The witness's gRPC service. Thread-safe: decisions are serialized.
//
// Replies: a decision is an OK status with granted true or false (reason says
// why not). A non-OK status means no decision: INVALID_ARGUMENT (a request
// without the fields its op needs, or an unknown op), UNAUTHENTICATED (bad
// secret), INTERNAL (the state could not be written; nothing changed).
// How long the witness holds a primary's lease after a renewal it granted:
// the lease plus 1 % and 5 ms. The primary counts its lease from when it
// sent the renewal, on its own monotonic clock; the two machines' clocks may
// run at rates that far apart (NTP keeps them within 0.05 %), so the old
// primary has stopped serving by its own clock before a claim is granted.
inline absl::Duration HeldLease(absl::Duration lease) {
  return lease + lease / 100 + absl::Milliseconds(5);
}

class WitnessService final : public proto::Witness::Service {
 public:
  // Loads <dir>/witness.state: a missing file means epoch 0 (nobody has been
  // primary yet); an unreadable or corrupt one is an error (DATA_LOSS for
  // corrupt), since guessing the epoch could make two primaries.
  static absl::StatusOr<std::unique_ptr<WitnessService>> Open(const WitnessOptions& options);
  ~WitnessService() override;

  grpc::Status Update(grpc::ServerContext* ctx, const proto::WitnessRequest* req,
                      proto::WitnessReply* reply) override;

  // The decision on `req`, without the transport and the secret check. A
  // changed state is durable before this returns granted.
  absl::StatusOr<proto::WitnessReply> Decide(const proto::WitnessRequest& req);

  // A copy of the current state.
  proto::WitnessState state() const;

 private:
  WitnessService(const WitnessOptions& options, const proto::WitnessState& state);

  // Writes `state` to a temporary file, fsyncs it, renames it over the state
  // file and fsyncs the directory.
  absl::Status Persist(const proto::WitnessState& state) const;
  // The stall guard (WitnessOptions::stall_tick): notes that the witness
  // runs at `now`, extending the lease first if it had not for 4 ticks.
  void NoteRunning(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TickLoop();

  // Constant after construction.
  const WitnessOptions options_;
  const std::string path_;  // <dir>/witness.state

  // Held across Persist on purpose: a decision must not be taken on a state
  // that is not yet durable (the file is tiny and decisions are rare: a
  // RENEW, which writes nothing, waits at most one small fsync).
  mutable absl::Mutex mu_;
  proto::WitnessState state_ ABSL_GUARDED_BY(mu_);
  absl::Time lease_expiry_ ABSL_GUARDED_BY(mu_);  // on options_.clock
  absl::Time last_ran_ ABSL_GUARDED_BY(mu_);      // stall guard
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread ticker_;  // runs TickLoop when stall_tick > 0
};

// Asks a witness. Thread-safe (gRPC stubs are).
class WitnessClient {
 public:
  // `channel` null: a channel to `address` over `transport` is created.
  WitnessClient(const std::string& address, const Transport& transport,
                std::shared_ptr<grpc::Channel> channel = nullptr);

  // One Update call of `req` with `timeout` as its deadline, no retry. OK
  // with the witness's reply (granted or not) when it answered; UNAVAILABLE
  // when it could not be reached in time (down, cut off, deadline); other
  // codes as the witness returned them (INVALID_ARGUMENT, UNAUTHENTICATED,
  // INTERNAL).
  absl::StatusOr<proto::WitnessReply> Update(const proto::WitnessRequest& req,
                                             absl::Duration timeout = absl::Milliseconds(500));

  const std::string& address() const { return address_; }

 private:
  const std::string address_;
  const Transport transport_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::Witness::Stub> stub_;
};

}  // namespace grantfs

#endif  // GRANTFS_CHECKPOINT_WITNESS_H_
