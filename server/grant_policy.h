// How much space a session may be granted, given what is free. A pure
// function so the policy is tested on its own.
//
// - Plenty of room (free >= 8x the wish): the whole wish.
// - Near full: at most 1/8 of what is free (as Lustre does), so that one
//   client cannot take the last of the space from the others.
// - Under the low-water mark (1/32 of capacity, at most 64 MiB): nothing,
//   and no grant takes free space below it; clients then allocate per write
//   at the server, so ENOSPC stays exact.
#ifndef GRANTFS_SERVER_GRANT_POLICY_H_
#define GRANTFS_SERVER_GRANT_POLICY_H_

#include <algorithm>
#include <cstdint>

namespace grantfs {

// All quantities in allocation blocks.
inline uint64_t LowWaterBlocks(uint64_t capacity_blocks) {
  constexpr uint64_t kMaxLowWater = (64ull << 20) / 4096;
  return std::min(capacity_blocks / 32, kMaxLowWater);
}

inline uint64_t GrantBlocks(uint64_t wanted, uint64_t free, uint64_t capacity_blocks) {
  const uint64_t low = LowWaterBlocks(capacity_blocks);
  if (free <= low) return 0;
  // Grants never take free space under the low-water mark: that part stays
  // for exact per-write allocation by everyone.
  return std::min({wanted, free / 8, free - low});
}

}  // namespace grantfs

#endif  // GRANTFS_SERVER_GRANT_POLICY_H_
