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
};

}  // namespace grantfs

#endif  // GRANTFS_CHECKPOINT_CHANGE_SINK_H_
