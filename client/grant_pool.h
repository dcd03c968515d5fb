// The client's share of the server's space ledger: bytes of the session's
// grant not yet promised to cached data. write() debits it with no RPC;
// refills happen in the background when it falls under a low watermark,
// sized to the recent write rate; only an empty pool makes a writer wait,
// for one Grant RPC.
//
// Accounting: available = (server grant) - (debits of cached data not yet
// acknowledged by the server). When a flush is acknowledged the server says
// how much of the grant the write really used (overwrites use none), and the
// difference comes back to `available`.
//
// The grant lives only as long as the mount's session lease (Renewed): once
// the lease has lapsed (the mount was cut off from the server) no write is
// accepted against the grant, because the server may have taken it back.
// If the server did (Lost), cached data debited before is owed to the
// next grant: refills pay that debt before anything becomes available.
//
// Thread-safe.
#ifndef GRANTFS_CLIENT_GRANT_POOL_H_
#define GRANTFS_CLIENT_GRANT_POOL_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"

namespace grantfs {

struct GrantPoolOptions {
  // First refill size; grows with the write rate up to `max_refill_bytes`.
  uint64_t initial_refill_bytes = 64ull << 20;
  uint64_t max_refill_bytes = 1ull << 30;
  // Refill in the background when available falls under this fraction of
  // the current refill size.
  double low_watermark = 0.5;
  // A mount that has not written for this long gives back the grant it
  // holds beyond its cached data, so an idle node does not keep space that
  // others and `df` should see. Zero: never. Default 10 s.
  absl::Duration return_idle_after = absl::Seconds(10);
  // Monotonic: the lease must not stretch when the wall clock steps back.
  Clock* clock = Clock::Monotonic();
};

class GrantPool {
 public:
  static constexpr absl::Duration kIdleAfter = absl::Seconds(5);

  // `grant_rpc(wanted, return_bytes)` asks the server; it returns the bytes
  // added to the session's grant (0 when the server has none to give).
  using GrantRpc = std::function<absl::StatusOr<uint64_t>(uint64_t wanted, uint64_t back)>;
  GrantPool(const GrantPoolOptions& options, GrantRpc grant_rpc);
  ~GrantPool();

  // Starts the background refiller.
  void Start();
  // Stops it. Idempotent.
  void Stop();

  // Takes `bytes` for data about to be cached. When the pool is short it
  // waits for a grant RPC (a few at most, when other writers take the
  // refills first). Returns false when the server cannot grant
  // enough (near full): the caller then writes through, allocating exactly
  // at the server. An RPC error also returns false (write-through decides).
  bool Debit(uint64_t bytes);

  // A flush of data that had been debited `debited` was acknowledged; the
  // server used `used` of the grant for it.
  void Settle(uint64_t debited, uint64_t used);
  // Cached data that had been debited is gone without reaching the server
  // (e.g. dropped by a truncate): the debit is still in the server's grant.
  void Refund(uint64_t debited);

  // The server recalled grant (others need space): gives back everything
  // not promised to cached data, at most `wanted` bytes, with one Grant RPC,
  // and holds off background refills for a second. Returns the bytes
  // given back.
  uint64_t Recall(uint64_t wanted);

  // The session's lease holds until `until` (options.clock time): the
  // server heard from the mount. Until the first call the lease never
  // lapses (a pool used without a session, in unit tests).
  void Renewed(absl::Time until);
  // The server says it released the session's grant (its lease ran out):
  // nothing is available, and every byte debited for data still cached is
  // owed to the next grants, which that data's writes will draw on.
  void Lost();

  uint64_t available();
  uint64_t refill_size();
  // Debited for data not yet settled or refunded.
  uint64_t outstanding();
  // Owed after Lost(): refills pay it before they add to available.
  uint64_t debt();

  // One refill decision: asks for a refill when under the watermark. Returns
  // the bytes added. The background thread calls it only once the mount has
  // written (an idle mount holds no grant); tests call it directly.
  uint64_t MaybeRefill();
  // One idle decision (the background thread makes it every 20 ms): after
  // return_idle_after without a debit, gives the unpromised grant back.
  uint64_t ReturnIfIdle();

 private:
  void RefillLoop();
  // Gives back everything not promised to cached data when the mount has
  // been idle for return_idle_after. Returns the bytes given back.
  uint64_t MaybeReturnIdle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the server for more; `wait_for` > 0 means a writer is waiting.
  uint64_t Refill(uint64_t at_least);
  // Gives back up to `wanted` of available (everything the server holds for
  // the session when `everything`). Returns the bytes given back; an error
  // when the RPC failed (they are counted as given back all the same) or
  // the lease has lapsed.
  absl::StatusOr<uint64_t> GiveBack(uint64_t wanted, bool everything);
  // Adds grant the server holds for this mount: pays the debt first.
  void Credit(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The lease ran out: the grant cannot be counted on. Logs the change.
  bool Lapsed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const GrantPoolOptions options_;
  const GrantRpc grant_rpc_;

  // Taken after WriteCache::mu_ (a flush settles under the cache's lock);
  // nothing is taken under it, and grant_rpc_ runs outside it (lock order:
  // filesystem.h).
  absl::Mutex mu_;
  uint64_t available_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t debt_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time lease_until_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool lapsed_ ABSL_GUARDED_BY(mu_) = false;  // as last logged
  // The server holds nothing for this mount that the pool does not count:
  // set by an idle give-back of everything, cleared by any debit, loss or
  // failed give-back. A new pool holds nothing.
  bool synced_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t refill_ ABSL_GUARDED_BY(mu_);
  bool refilling_ ABSL_GUARDED_BY(mu_) = false;
  bool server_empty_ ABSL_GUARDED_BY(mu_) = false;  // last ask got nothing
  absl::Time empty_since_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // Write-rate estimate: bytes debited since `rate_since_`.
  uint64_t debited_recently_ ABSL_GUARDED_BY(mu_) = 0;
  // Background refills run only while the mount writes: from its first
  // debit until it has not debited for kIdleAfter. An idle mount does not
  // take more space (what it holds is returned on a recall).
  bool active_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_debit_ ABSL_GUARDED_BY(mu_);
  absl::Time idle_retry_at_ ABSL_GUARDED_BY(mu_);  // after a failed idle give-back
  absl::Time rate_since_ ABSL_GUARDED_BY(mu_);
  std::thread refiller_;
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_GRANT_POOL_H_
