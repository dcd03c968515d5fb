// The primary's side of replication: the change log (checkpoint/change_sink.h)
// and the stream that ships it to the replica (proto Replication.Stream).
//
// Every change the primary applies is appended here with the next sequence
// number of the epoch. One thread streams the log to the replica; another
// reads its acknowledgements. A new replica, or one that comes back from
// another epoch or from too far behind, first gets a snapshot (a RocksDB
// checkpoint cut at sequence S, then every chunk file) and then the records
// after S; the log keeps them meanwhile.
//
// States of the replica (docs/failover.md):
//   connecting -> syncing (snapshot or catching up) -> in sync -> degraded
// Writers wait for the replica only from "in sync" on (synchronous
// replication; WaitReplicated). When the replica is lost (stream broken, or no
// acknowledgement for `replica_timeout` while changes wait), the primary asks
// the witness to go on alone (DEGRADE); until the witness agrees, writers keep
// waiting, so no change is acknowledged that a promoted replica lacks. When
// the witness says another server owns the epoch, this server is fenced:
// it stops answering and `on_fenced` runs (the server ends its role and
// rejoins as a replica: server/roles.h).
//
// The primary's lease: it serves clients only while the witness renewed its
// lease (every lease/5) or the replica acknowledged a message, within `lease`
// of sending it. The replica claims the epoch only after `lease` of silence
// and the witness only grants it after the lease ran out, so an isolated
// primary has stopped answering before another one starts.
//
// The implementation, one concept per file: replicator.cc (start, stop, the
// role: serving, status, switchover), replicator_log.cc (the change log),
// replicator_stream.cc (the stream and its acknowledgements),
// replicator_witness.cc (the lease, DEGRADE and fencing).
//
// Thread-safe.
#ifndef GRANTFS_CHECKPOINT_REPLICATOR_H_
#define GRANTFS_CHECKPOINT_REPLICATOR_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/rpc_method.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "checkpoint/change_sink.h"
#include "checkpoint/server_role.h"
#include "common/clock.h"
#include "common/transport.h"
#include "proto/replication.grpc.pb.h"

namespace grantfs {

// A witness call: `req` with its op, epoch, replica and data; the call fills
// in the server (the caller). Transport failures are UNAVAILABLE; a refusal
// is OK with granted = false.
using WitnessCall = std::function<absl::StatusOr<proto::WitnessReply>(proto::WitnessRequest req)>;

struct ReplicatorOptions {
  std::string self;      // this server's advertised address
  std::string peer;      // the replica's address
  std::string witness;   // the witness's address (for status)
  Transport transport;   // how to reach the replica (common/transport.h)
  uint64_t epoch = 0;    // the epoch the witness granted
  std::string data_dir;  // the volume's directory (meta/, chunks/)
  uint64_t chunk_size = 4 << 20;
  uint64_t capacity_bytes = 0;
  WitnessCall witness_call;
  // A consistent RocksDB copy into a new directory; returns the log's head
  // at the cut (MetaStore::Checkpoint).
  std::function<absl::StatusOr<uint64_t>(const std::string& dir)> checkpoint;
  // The volume's identity (MetaStore::identity()), sent to the replica in
  // the stream's hello and to the witness with every request. Called once
  // Start() ran. Required.
  std::function<proto::VolumeIdentity()> identity;
  // Runs once when this server learns it is fenced (from a witness thread).
  std::function<void()> on_fenced;
  absl::Duration lease = absl::Seconds(1);
  absl::Duration replica_timeout = absl::Seconds(1);
  // A writer waits at most this long for the replica, then UNAVAILABLE.
  absl::Duration wait_bound = absl::Seconds(10);
  // Log kept beyond what the replica acknowledged (for a replica that
  // reconnects, and for one catching up after a snapshot).
  uint64_t retain_bytes = 256ull << 20;
  // Largest message on the stream.
  uint64_t max_message_bytes = 4ull << 20;
  // Group commit of the stream: while the replica is in sync and
  // `group_window` messages of records are not yet acknowledged, the records
  // appended meanwhile wait for an acknowledgement and then go together in
  // one message (one replica apply, WAL fsync and acknowledgement for all of
  // them), unless they reach `group_bytes` first (large data records stream
  // on without waiting). A window of 2 keeps the two records of one request
  // (a data write and its metadata commit) in one round trip. group_bytes 0:
  // every record is sent as soon as it is appended.
  uint64_t group_bytes = 256 << 10;
  int group_window = 2;
  // Time of the lease and of every timeout: monotonic, so that a step of
  // the wall clock neither stretches nor cuts the lease. Not owned.
  Clock* clock = Clock::Monotonic();
  // When the witness granted the epoch (the lease starts there), on `clock`.
  absl::Time granted_at = Clock::Monotonic()->Now();
};

// What the replication stream did since Start, to see how many records one
// replica round trip carries (Status reports it).
struct ReplicatorStats {
  // Records appended to the log: metadata batches, chunk changes, marks.
  uint64_t records = 0;
  // Messages of the stream that carried records (a message carries every
  // record appended while the previous one was being written or while the
  // group window was full, up to max_message_bytes; heartbeats are not
  // counted).
  uint64_t messages = 0;
  // Round trips: acknowledgements from the replica that advanced the acked
  // seq. Each one releases every writer waiting for a record up to it, so
  // this is how many rounds of waiting for the replica the records needed
  // (heartbeat answers, which advance nothing, are not counted).
  uint64_t round_trips = 0;
};

class Replicator : public ChangeSink, public ServerRole {
 public:
  explicit Replicator(const ReplicatorOptions& options);
  ~Replicator() override;

  // Starts the stream and the lease threads.
  void Start();
  void Stop();

  // ChangeSink.
  uint64_t Append(proto::ReplRecord record) override;
  absl::Status WaitReplicated(uint64_t seq) override;
  uint64_t Head() override;
  uint64_t Promise(uint64_t bytes) override;
  std::optional<uint64_t> ReplicaRoom() override;
  bool ReplicaHolds(uint64_t seq) override;

  // ServerRole.
  bool Serving(std::string* why) override;
  void FillStatus(proto::StatusReply* reply) override;
  absl::Status Switchover() override;
  // Asks the replica (Replication.Digest, 60 s deadline).
  absl::StatusOr<proto::MetaDigest> ReplicaDigest(uint64_t seq) override;

  // For tests and status.
  std::string ReplicaState();
  uint64_t AckedSeq();
  ReplicatorStats Stats();

 private:
  enum class State { kConnecting, kSyncing, kInSync, kDegraded };
  struct Entry {
    uint64_t seq;
    // The record in its wire form (with its seq), serialized once by
    // Append and sent by reference (common/wire.h).
    std::shared_ptr<const std::string> wire;
    uint64_t bytes;
    uint64_t end_bytes;  // appended_bytes_ once this record was appended
  };
  // The stream's writes are hand-built ByteBuffers (records by reference).
  using Stream = grpc::ClientReaderWriter<grpc::ByteBuffer, proto::ReplAck>;

  void StreamLoop();
  // One stream to the replica, from connect to break.
  absl::Status RunStream();
  absl::Status SendSnapshot(Stream* stream, uint64_t* start_seq);
  void AckLoop(Stream* stream, uint64_t stream_id);
  // The newest promise (for a new stream's hello).
  std::optional<uint64_t> NewestPromise();
  void WitnessLoop();
  // A request of `op` at this epoch about the replica, with the volume.
  proto::WitnessRequest MakeWitnessRequest(proto::WitnessRequest::Op op) const;
  // Asks the witness; handles a fencing answer. Returns the reply.
  absl::StatusOr<proto::WitnessReply> AskWitness(proto::WitnessRequest::Op op);
  void Fence(const std::string& why);
  void TrimLog() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The replica is close enough behind to switch to synchronous replication.
  bool CaughtUp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bytes of the log the replica has not acknowledged.
  uint64_t LagBytes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the records from `next` on wait for an acknowledgement before
  // they are sent (ReplicatorOptions::group_window and group_bytes).
  bool HoldForGroup(uint64_t next) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Serving() under mu_.
  bool ServingLocked(std::string* why) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static const char* StateName(State s);

  const ReplicatorOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::internal::RpcMethod> stream_method_;  // Replication.Stream on channel_

  absl::Mutex mu_;
  std::deque<Entry> log_ ABSL_GUARDED_BY(mu_);
  uint64_t log_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t appended_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of every record appended
  uint64_t head_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t acked_ ABSL_GUARDED_BY(mu_) = 0;  // replica durable up to here
  uint64_t sent_ ABSL_GUARDED_BY(mu_) = 0;   // shipped on the current stream
  // The last seq of each message of records sent on the current stream and
  // perhaps not acknowledged yet, oldest first (HoldForGroup).
  std::deque<uint64_t> unacked_messages_ ABSL_GUARDED_BY(mu_);
  // Records at or after this seq are needed by the current stream (0: none).
  uint64_t pinned_ ABSL_GUARDED_BY(mu_) = 0;
  State state_ ABSL_GUARDED_BY(mu_) = State::kConnecting;
  // Writers wait for the replica (synchronous replication) from `sync_from_`.
  bool must_wait_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t sync_from_ ABSL_GUARDED_BY(mu_) = 0;
  bool witness_knows_in_sync_ ABSL_GUARDED_BY(mu_) = false;
  bool stream_up_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t stream_id_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ClientContext* stream_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time last_ack_ ABSL_GUARDED_BY(mu_);       // when an ack last arrived
  absl::Time lease_witness_ ABSL_GUARDED_BY(mu_);  // send time of the last renewal
  absl::Time lease_replica_ ABSL_GUARDED_BY(mu_);  // send time of the last acked message
  bool fenced_ ABSL_GUARDED_BY(mu_) = false;
  bool handing_over_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  ReplicatorStats stats_ ABSL_GUARDED_BY(mu_);
  // The latest snapshot sent to the replica (its resync), for Status.
  struct Resync {
    bool active = false;
    absl::Time started = absl::InfinitePast();  // InfinitePast: none yet
    absl::Time ended;
    uint64_t done_bytes = 0, total_bytes = 0;
  };
  Resync resync_ ABSL_GUARDED_BY(mu_);

  // Promises (Promise()): appended one at a time, in the order they were
  // made, so that the replica ends with the newest.
  absl::Mutex promise_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::optional<uint64_t> promised_ ABSL_GUARDED_BY(promise_mu_);
  uint64_t promise_seq_ ABSL_GUARDED_BY(promise_mu_) = 0;
  // The replica's data disk as of its newest acknowledgement on the current
  // stream (unset until one said).
  std::optional<proto::ReplicaSpace> replica_space_ ABSL_GUARDED_BY(mu_);
  uint64_t replica_space_seq_ ABSL_GUARDED_BY(mu_) = 0;  // its applied_seq

  std::thread stream_thread_;
  std::thread witness_thread_;
};

}  // namespace grantfs

#endif  // GRANTFS_CHECKPOINT_REPLICATOR_H_
