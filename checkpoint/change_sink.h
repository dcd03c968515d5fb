// Where the primary's changes go to be replicated (checkpoint/replicator.h
// implements it; without a replica there is none).
//
// The metadata store appends each RocksDB batch it applies, the chunk store
// each write, truncation, allocation, removal and sync, in the order the
// primary applied them; a change is acknowledged to a client only after
// WaitReplicated() of its last record returned OK.
#ifndef GRANTFS_CHECKPOINT_CHANGE_SINK_H_
#define GRANTFS_CHECKPOINT_CHANGE_SINK_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "proto/replication.pb.h"

namespace grantfs {

class ChangeSink {
 public:
  virtual ~ChangeSink() = default;

  // Gives `record` the next sequence number and queues it; returns the
  // number. Never blocks on the network. Callers order conflicting changes
  // (the metadata store under its mutex, the chunk store under a lock per
  // chunk), so the replica applies them in an order with the same outcome.
  virtual uint64_t Append(proto::ReplRecord record) = 0;

  // Returns once every record up to `seq` is durable on the in-sync replica,
  // or at once when there is no in-sync replica (the witness agreed that the
  // primary goes on alone). UNAVAILABLE when this server may no longer
  // commit (fenced) or the replica did not answer within the wait's bound;
  // the client retries, and the retry finds the applied change (dedupe).
  virtual absl::Status WaitReplicated(uint64_t seq) = 0;

  // The newest sequence number given out.
  virtual uint64_t Head() = 0;

  // Space: what the primary promised (its grants and metadata reserve) is
  // held on the replica's data disk too (ReplRecord.promised_bytes). The
  // caller orders its promises (the metadata store, under its mutex).
  //
  // Sends `bytes` to the replica when it differs from the last promise;
  // returns the seq of the newest promise record (0: none, or no replica).
  virtual uint64_t Promise(uint64_t bytes) { return 0; }
  // Room for file data on the in-sync replica's data disk (its free space
  // plus its hold) as it last acknowledged; nullopt while no replica is in
  // sync.
  virtual std::optional<uint64_t> ReplicaRoom() { return std::nullopt; }
  // Whether the in-sync replica held the promises when it acknowledged
  // `seq` (or later): waits for its word, at most as long as a writer waits
  // for it; false when that ran out or this server may not commit. True
  // when no replica is in sync (nothing is asked of it).
  virtual bool ReplicaHolds(uint64_t seq) { return true; }
};

}  // namespace grantfs

#endif  // GRANTFS_CHECKPOINT_CHANGE_SINK_H_
