// The replica's side of replication: applies the primary's change stream
// (proto Replication.Stream) to its own copy of the volume, durably and in
// order, and acknowledges; takes over when the primary is gone.
//
// The copy is the same layout as the primary's data directory (meta/ is
// RocksDB, chunks/ the chunk files), so a promoted replica opens it as a
// Volume. Its position (epoch, last applied change) is kept in RocksDB
// (key "Rposition") in the same WAL as the batches. While a snapshot is
// being received the file <data_dir>/snapshot.partial exists; Open discards
// a copy so marked (a snapshot cut short by a broken stream or a crash).
//
// Acknowledging change N means: every change up to N is applied, the
// metadata batches are in the fsync'd WAL, file data is in the page cache
// (fdatasync'd when the primary's fsync asked: sync records), exactly what the
// primary itself promises for its own copy.
//
// Whose data: the primary's hello names its volume (proto VolumeIdentity).
// The replica refuses the stream, and keeps its copy, when the copy is of
// another volume, or newer than the primary's data (a higher data epoch, or
// the same one from another epoch: two histories of the volume). An empty
// copy, or one from before identities, takes any primary's.
//
// Space: the copy's data disk holds what the primary promised. The primary
// sends its promises (ReplRecord.promised_bytes: grants and the metadata
// reserve); the replica's space hold, <data_dir>/space.hold, the same file
// a promoted replica's volume keeps, grows or shrinks to them before the
// record is acknowledged. A write that finds the disk full borrows from
// the hold and is tried again, as on the primary. Every acknowledgement
// says how much room the disk has and whether the hold covers the newest
// promise (ReplAck.space): the primary promises nothing the replica cannot
// hold.
//
// Failover: when no message came for `failover_timeout` (the primary sends
// one at least every 100 ms), the replica asks the witness for the next
// epoch (CLAIM); the witness grants it only to the in-sync replica of the
// current epoch and only after the primary's lease ran out. While claiming
// the replica applies nothing more, so it never acknowledges a change after
// its promotion began. When a stream ends it also asks the witness at once
// whether the primary handed the role to it (planned switchover).
//
// The implementation, one concept per file: replica.cc (the copy: open,
// close, boot check; the role), replica_stream.cc (the stream: admission
// and apply), replica_snapshot.cc (receiving a snapshot), replica_digest.cc
// (digests at digest marks), replica_failover.cc (watchdog and promotion),
// replica_copy.h (the copy's on-disk helpers they share).
//
// Thread-safe.
#ifndef GRANTFS_CHECKPOINT_REPLICA_H_
#define GRANTFS_CHECKPOINT_REPLICA_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "checkpoint/chunk_applier.h"
#include "checkpoint/replicator.h"
#include "checkpoint/server_role.h"
#include "common/space_hold.h"
#include "common/transport.h"
#include "proto/replication.grpc.pb.h"

namespace rocksdb {
class DB;
class Status;
}  // namespace rocksdb

namespace grantfs {

struct ReplicaOptions {
  std::string self;      // this server's advertised address
  std::string peer;      // the configured other server (for status)
  std::string witness;   // for status
  Transport transport;   // who may call: servers only (common/transport.h)
  std::string data_dir;  // meta/ and chunks/; must exist (server/data_dir.h)
  // Opens the copy's chunk files (<data_dir>/chunks). Required.
  OpenChunkApplier open_chunks;
  // The metadata store's key of the volume's identity (proto::VolumeIdentity,
  // server/keys.h): the replica tells the witness whose copy it holds.
  // Required.
  std::string identity_key;
  WitnessCall witness_call;
  // How the space hold (<data_dir>/space.hold, common/space_hold.h) grows;
  // fallocate when unset. Unit tests inject failures here.
  std::function<int(int fd, uint64_t offset, uint64_t length)> hold_allocate;
  absl::Duration failover_timeout = absl::Seconds(1);
  // Runs once the witness granted this server epoch `epoch`, after the
  // copy is closed (the server then takes the primary role: server/roles.h).
  std::function<void(uint64_t epoch)> on_promoted;
};

class Replica : public proto::Replication::Service, public ServerRole {
 public:
  static absl::StatusOr<std::unique_ptr<Replica>> Open(const ReplicaOptions& options);
  ~Replica() override;

  // Starts the failover watchdog.
  void Start();
  void Stop();

  grpc::Status Stream(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<proto::ReplAck, proto::ReplMessage>* stream) override;

  // The copy's digest at a digest mark it applied (checkpoint/meta_digest.h):
  // computed off the stream's thread, on a snapshot taken when the mark was
  // applied; waits for it within the call's deadline (at most 60 s). The
  // newest kKeptDigests are kept.
  grpc::Status Digest(grpc::ServerContext* ctx, const proto::DigestRequest* req,
                      proto::MetaDigest* reply) override;

  // ServerRole: a replica never serves clients, and has no replica.
  bool Serving(std::string* why) override;
  void FillStatus(proto::StatusReply* reply) override;
  absl::Status Switchover() override;
  absl::StatusOr<proto::MetaDigest> ReplicaDigest(uint64_t seq) override;

  uint64_t epoch();
  uint64_t applied_seq();

 private:
  explicit Replica(const ReplicaOptions& options) : options_(options) {}

  absl::Status OpenCopy() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  absl::Status CheckBoot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  void CloseCopy() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  absl::Status BeginSnapshot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  absl::Status WritePiece(const proto::SnapshotPiece& piece)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  absl::Status FinishSnapshot(uint64_t epoch, uint64_t start_seq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // Data records that ask for a sync are written without one; their chunk
  // files go to `unsynced`, which the stream fdatasyncs (one call per
  // file) before it acknowledges the message: the syncs of a message's
  // writes are grouped.
  absl::Status Apply(const proto::ReplRecord& rec, ChunkSet* unsynced)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  absl::Status SavePosition() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // A write to the copy's RocksDB that finds the disk full is tried again
  // once in room lent by the hold (its metadata reserve).
  rocksdb::Status WriteInRoom(const std::function<rocksdb::Status(rocksdb::DB*)>& write)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // A chunk record that finds the disk full is tried again in room lent by
  // the hold, up to 3 times.
  absl::Status ApplyChunkRecord(const proto::ReplRecord& rec, ChunkSet* unsynced)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // Grows or shrinks the hold to the newest promise; logs when it stops or
  // starts covering it.
  void CoverPromise() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // The disk's state for an acknowledgement (the hold covers the promise
  // again first: a loan may have shrunk it, or space came back).
  proto::ReplicaSpace SpaceForAck() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // At a digest mark: snapshots the copy and digests it on digest_thread_.
  void StartDigest(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  void JoinDigest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // Reads the copy's identity from its store into copy_identity_.
  absl::Status LoadIdentity() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // Why the stream of `hello` must not replace or change the copy ("" when
  // it may).
  std::string DataRefusal(const proto::ReplHello& hello) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A witness request of `op` about `epoch`, with the copy's identity.
  proto::WitnessRequest MakeWitnessRequest(proto::WitnessRequest::Op op, uint64_t epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  void Watchdog();
  // Tries to become the primary; true when this server was promoted.
  bool TryPromote(bool claim);

  const ReplicaOptions options_;

  // Held by the stream that applies, and by a promotion.
  absl::Mutex apply_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  rocksdb::DB* db_ ABSL_GUARDED_BY(apply_mu_) = nullptr;
  std::unique_ptr<ChunkApplier> chunks_ ABSL_GUARDED_BY(apply_mu_);
  bool in_snapshot_ ABSL_GUARDED_BY(apply_mu_) = false;
  int piece_fd_ ABSL_GUARDED_BY(apply_mu_) = -1;
  std::string piece_path_ ABSL_GUARDED_BY(apply_mu_);
  // Space held for the primary's promises, and the disk's room.
  std::unique_ptr<SpaceHold> hold_;
  std::unique_ptr<DiskRoom> room_;
  std::optional<uint64_t> promised_ ABSL_GUARDED_BY(apply_mu_);
  bool hold_short_ ABSL_GUARDED_BY(apply_mu_) = false;
  // Digests the copy at the last digest mark; joined before db_ closes.
  std::thread digest_thread_ ABSL_GUARDED_BY(apply_mu_);

  absl::Mutex mu_;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;      // of the changes applied
  uint64_t applied_ ABSL_GUARDED_BY(mu_) = 0;    // last change applied
  uint64_t max_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // newest epoch a primary showed
  // The copy's volume (nullopt: no copy, or one from before identities),
  // and the epoch of its saved position (0: none; kept when CheckBoot
  // forgets the position).
  std::optional<proto::VolumeIdentity> copy_identity_ ABSL_GUARDED_BY(mu_);
  uint64_t copy_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::string primary_ ABSL_GUARDED_BY(mu_);
  // What status shows as the replica's state.
  enum class State { kWaiting, kSyncing, kInSync, kPromoted };
  static const char* StateName(State s);
  State state_ ABSL_GUARDED_BY(mu_) = State::kWaiting;
  uint64_t stream_gen_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ServerContext* active_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time last_msg_ ABSL_GUARDED_BY(mu_);  // Clock::Monotonic()
  bool check_now_ ABSL_GUARDED_BY(mu_) = false;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // applying a message
  bool promoting_ ABSL_GUARDED_BY(mu_) = false;
  bool promoted_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Digests at digest marks, oldest first (Digest()).
  struct MarkDigest {
    uint64_t epoch;
    uint64_t seq;
    absl::StatusOr<proto::MetaDigest> digest;
  };
  static constexpr size_t kKeptDigests = 4;
  std::deque<MarkDigest> digests_ ABSL_GUARDED_BY(mu_);
  uint64_t digest_running_ ABSL_GUARDED_BY(mu_) = 0;  // the mark being digested (0: none)
  std::thread watchdog_;
};

}  // namespace grantfs

#endif  // GRANTFS_CHECKPOINT_REPLICA_H_
