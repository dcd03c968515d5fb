// Chunk files that no chunk record names, removed when a volume opens.
//
// A write lands in its chunk file before the metadata that makes it part of
// the file commits (server/volume.h). A server killed between the two
// leaves the bytes in a chunk file no record names: they were never
// acknowledged (the mount sends the write again), they read as nothing,
// and their disk space is counted nowhere, so the ledger would promise
// space the disk does not have. The same happens to the replica's copy of
// such a write. When a volume opens, before it serves, nothing is in
// flight: every chunk file without a record is one of those, unless its
// inode is deleted and waits for the background deleter (left to it).
// fsck reports the same files as orphan_chunk_file.
#ifndef GRANTFS_SERVER_ORPHAN_CHUNKS_H_
#define GRANTFS_SERVER_ORPHAN_CHUNKS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "server/chunk_store.h"
#include "server/metadata.h"

namespace grantfs {

// Removes (from this copy only) every chunk file of `chunks` that no chunk
// record of `meta` names, except those of deleted inodes not yet freed.
// Returns how many it removed; logs one line when that is not 0. Call only
// while no write can be under way.
absl::StatusOr<uint64_t> RemoveOrphanChunkFiles(ChunkStore* chunks, Metadata* meta);

}  // namespace grantfs

#endif  // GRANTFS_SERVER_ORPHAN_CHUNKS_H_
