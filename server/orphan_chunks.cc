#include "server/orphan_chunks.h"

#include <set>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "glog/logging.h"

namespace grantfs {

absl::StatusOr<uint64_t> RemoveOrphanChunkFiles(ChunkStore* chunks, Metadata* meta) {
  ASSIGN_OR_RETURN(std::vector<uint64_t> garbage, meta->orphans().ListGarbage());
  const std::set<uint64_t> deleted(garbage.begin(), garbage.end());
  ASSIGN_OR_RETURN(auto files, chunks->ListChunkFiles());
  uint64_t removed = 0;
  for (const auto& [ino, index] : files) {
    if (deleted.count(ino)) continue;  // the background deleter frees it
    ASSIGN_OR_RETURN(bool recorded, meta->space().HasChunk(ino, index));
    if (recorded) continue;
    VLOG(1) << "removing chunk file " << ino << "." << index << ": no chunk record names it";
    RETURN_IF_ERROR(chunks->RemoveLocalChunk(ino, index));
    ++removed;
  }
  if (removed > 0) {
    LOG(INFO) << "removed " << removed << " of " << files.size()
              << " chunk files that no chunk record names (writes a crash cut off before "
                 "they were acknowledged)";
  }
  return removed;
}

}  // namespace grantfs
