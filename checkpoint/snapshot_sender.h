// The primary's snapshot of its volume for a replica that has no usable
// copy (a new one, or one from another epoch or too far behind): a RocksDB
// checkpoint cut at change S, then every chunk file, as snapshot pieces on
// the replication stream; the stream then replays the records after S
// (checkpoint/replicator.h). The replica's side is Replica::BeginSnapshot /
// WritePiece / FinishSnapshot (checkpoint/replica.h).
#ifndef GRANTFS_CHECKPOINT_SNAPSHOT_SENDER_H_
#define GRANTFS_CHECKPOINT_SNAPSHOT_SENDER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "proto/replication.pb.h"

namespace grantfs {

struct SnapshotOptions {
  std::string data_dir;  // the volume's: meta/ and chunks/
  uint64_t epoch = 0;
  uint64_t chunk_size = 4 << 20;
  uint64_t capacity_bytes = 0;
  uint64_t max_message_bytes = 4ull << 20;  // pieces are batched up to this
  // A consistent RocksDB copy into a new directory; returns the change log's
  // head at the cut (MetaStore::Checkpoint).
  std::function<absl::StatusOr<uint64_t>(const std::string& dir)> checkpoint;
  // The primary's newest promise (ReplHello.promised_bytes), read after the
  // cut; nullopt: none yet.
  std::function<std::optional<uint64_t>()> promised_bytes;
  Clock* clock = Clock::Monotonic();
  std::string peer;  // for the log
  // Told, as the snapshot goes, how many bytes of its files were read (and
  // sent, but holes) and how many there are (the sizes when the copy began;
  // a chunk file that grows meanwhile can take `done` past `total`).
  // Called on the sending thread; none: not told.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Cuts the checkpoint (in <data_dir>/kCheckpointDir, removed afterwards),
// calls `on_cut` with the cut's change number (the log must keep what
// follows), and sends the snapshot's messages through `send_message` (false:
// the stream broke). `*start_seq` gets the first change the stream must
// send after it. Chunk files are read after the cut: every chunk change is
// a blind write, so replaying one the copy already holds changes nothing.
// All-zero pieces are skipped (holes stay holes).
absl::Status SendSnapshot(const SnapshotOptions& options,
                          const std::function<bool(const proto::ReplMessage&)>& send_message,
                          const std::function<void(uint64_t cut)>& on_cut, uint64_t* start_seq);

}  // namespace grantfs

#endif  // GRANTFS_CHECKPOINT_SNAPSHOT_SENDER_H_
