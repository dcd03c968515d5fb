#include "server/space_ledger.h"

#include <algorithm>

#include "common/errno_status.h"
#include "glog/logging.h"
#include "server/grant_policy.h"

namespace grantfs {

void SpaceLedger::Load(uint64_t capacity, uint64_t used, std::map<uint64_t, uint64_t> grants) {
  capacity_ = capacity;
  used_ = used;
  grants_ = std::move(grants);
  granted_ = 0;
  for (const auto& [id, blocks] : grants_) granted_ += blocks;
}

void SpaceLedger::Restore(Durable d) {
  used_ = d.used;
  grants_ = std::move(d.grants);
  granted_ = d.granted;
}

uint64_t SpaceLedger::GrantOf(uint64_t client) const {
  auto it = grants_.find(client);
  return it == grants_.end() ? 0 : it->second;
}

std::vector<uint64_t> SpaceLedger::Holders() const {
  std::vector<uint64_t> out;
  for (const auto& [id, blocks] : grants_) out.push_back(id);
  return out;
}

uint64_t SpaceLedger::BusyOf(uint64_t client) const {
  auto it = grant_reserved_.find(client);
  return it == grant_reserved_.end() ? 0 : it->second;
}

void SpaceLedger::SetGrant(uint64_t client, uint64_t blocks) {
  if (blocks == 0) {
    grants_.erase(client);
  } else {
    grants_[client] = blocks;
  }
}

uint64_t SpaceLedger::FreeBlocks() const {
  const uint64_t promised = granted_ + reserved_;
  const uint64_t taken = used_ + promised;
  uint64_t free = taken >= capacity_ ? 0 : capacity_ - taken;
  if (disk_available_) {
    // What is granted or reserved is not on disk yet: the disk must still
    // have room for it, and for anything more promised now.
    const uint64_t disk = BlocksWithin(disk_available_());
    free = std::min(free, disk > promised ? disk - promised : 0);
  }
  return free;
}

bool SpaceLedger::Check() const {
  uint64_t granted = 0;
  for (const auto& [id, blocks] : grants_) granted += blocks;
  if (granted != granted_) {
    LOG(ERROR) << "ledger invariant broken: granted total " << granted_
               << " blocks, sessions' grants " << granted << " blocks";
    return false;
  }
  const uint64_t taken = used_ + granted_ + reserved_;
  if (taken <= capacity_) return true;
  LOG(ERROR) << "ledger invariant broken: used " << used_ << " + granted " << granted_
             << " + reserved " << reserved_ << " > capacity " << capacity_ << " blocks";
  return false;
}

absl::StatusOr<Reservation> SpaceLedger::Reserve(uint64_t blocks, uint64_t grant_client) {
  Reservation r;
  r.blocks = blocks;
  if (grant_client != 0) {
    const uint64_t held = GrantOf(grant_client);
    r.from_grant = std::min(blocks, held - std::min(held, BusyOf(grant_client)));
  }
  if (blocks - r.from_grant > FreeBlocks()) return ErrnoStatus(ENOSPC, "volume full");
  if (r.from_grant > 0) {
    r.client = grant_client;
    grant_reserved_[grant_client] += r.from_grant;
  }
  reserved_ += blocks - r.from_grant;
  return r;
}

void SpaceLedger::Release(const Reservation& r) {
  const uint64_t outside = r.blocks - r.from_grant;
  reserved_ -= std::min(outside, reserved_);
  if (r.from_grant > 0) {
    auto it = grant_reserved_.find(r.client);
    if (it != grant_reserved_.end()) {
      it->second -= std::min(it->second, r.from_grant);
      if (it->second == 0) grant_reserved_.erase(it);
    }
  }
}

uint64_t SpaceLedger::DebitGrant(const Reservation& r) {
  const uint64_t held = GrantOf(r.client);
  const uint64_t debit = std::min(held, r.from_grant);
  granted_ -= debit;
  SetGrant(r.client, held - debit);
  return held - debit;
}

void SpaceLedger::FreeUsed(uint64_t blocks) { used_ -= std::min(blocks, used_); }

uint64_t SpaceLedger::Grant(uint64_t client, uint64_t wanted_blocks, uint64_t return_blocks,
                            uint64_t* added) {
  uint64_t held = GrantOf(client);
  // What writes in progress hold inside the grant cannot be given back.
  const uint64_t back = std::min(return_blocks, held - std::min(held, BusyOf(client)));
  held -= back;
  // Blocks given back in this call count as free only from the next one.
  const uint64_t more = GrantBlocks(wanted_blocks, FreeBlocks(), capacity_);
  held += more;
  granted_ = granted_ - back + more;
  SetGrant(client, held);
  *added = more;
  return held;
}

uint64_t SpaceLedger::EndSession(uint64_t client) {
  const uint64_t held = GrantOf(client);
  // Blocks its writes in progress hold stay granted until they commit or
  // are given up (then CommitWrite or a later grant change settles them).
  const uint64_t keep = std::min(BusyOf(client), held);
  granted_ -= std::min(held - keep, granted_);
  SetGrant(client, keep);
  return keep;
}

}  // namespace grantfs
