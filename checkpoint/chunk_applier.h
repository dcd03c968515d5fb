// What a replica asks of the chunk files of its copy: apply the primary's
// data records to them, and sync. The server's chunk store implements it
// (server/chunk_store.h); server/main.cc tells the replica how to open one
// (ReplicaOptions::open_chunks), so checkpoint/ does not depend on server/.
#ifndef GRANTFS_CHECKPOINT_CHUNK_APPLIER_H_
#define GRANTFS_CHECKPOINT_CHUNK_APPLIER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/replication.pb.h"

namespace grantfs {

// Chunks as (inode, chunk index).
using ChunkSet = std::set<std::pair<uint64_t, uint64_t>>;

class ChunkApplier {
 public:
  virtual ~ChunkApplier() = default;

  // Applies one data-path record (data, truncate, allocate, remove_chunk or
  // sync) as the primary applied it. A data record's bytes are written
  // without fdatasync; when the record asks for a sync, the chunks it
  // touched are added to `*unsynced`, and so is a removed chunk, for the
  // caller to make durable once per message (SyncChunks) before it
  // acknowledges. INVALID_ARGUMENT for a record of another kind; the
  // store's error (EIO, ...) otherwise.
  virtual absl::Status ApplyRecord(const proto::ReplRecord& rec, ChunkSet* unsynced) = 0;

  // Makes each chunk durable as it is now: an existing chunk file is
  // fdatasync'd; the directory of a missing one is fsync'd (its removal),
  // once per directory.
  virtual absl::Status SyncChunks(const ChunkSet& chunks) = 0;
};

// Opens the chunk files under `dir` (created if missing).
using OpenChunkApplier =
    std::function<absl::StatusOr<std::unique_ptr<ChunkApplier>>(const std::string& dir)>;

}  // namespace grantfs

#endif  // GRANTFS_CHECKPOINT_CHUNK_APPLIER_H_
