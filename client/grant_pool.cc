#include "client/grant_pool.h"

#include <algorithm>
#include <limits>

#include "glog/logging.h"

namespace grantfs {

GrantPool::GrantPool(const GrantPoolOptions& options, GrantRpc grant_rpc)
    : options_(options), grant_rpc_(std::move(grant_rpc)), refill_(options.initial_refill_bytes) {
  rate_since_ = options_.clock->Now();
}

GrantPool::~GrantPool() { Stop(); }

void GrantPool::Start() {
  absl::MutexLock l(&mu_);
  if (started_) return;
  started_ = true;
  refiller_ = std::thread([this] { RefillLoop(); });
}

void GrantPool::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (refiller_.joinable()) refiller_.join();
}

uint64_t GrantPool::available() {
  absl::MutexLock l(&mu_);
  return available_;
}

uint64_t GrantPool::outstanding() {
  absl::MutexLock l(&mu_);
  return outstanding_;
}

uint64_t GrantPool::debt() {
  absl::MutexLock l(&mu_);
  return debt_;
}

void GrantPool::Renewed(absl::Time until) {
  absl::MutexLock l(&mu_);
  lease_until_ = std::max(lease_until_ == absl::InfiniteFuture() ? until : lease_until_, until);
  Lapsed();  // logs the end of a lapse
}

void GrantPool::Lost() {
  absl::MutexLock l(&mu_);
  LOG(WARNING) << "the server released this mount's grant (its lease ran out): " << available_
               << " bytes unused are gone, " << outstanding_
               << " bytes of cached data are written against the next grants";
  available_ = 0;
  debt_ = outstanding_;
  synced_ = false;
  // Ask for the next grant now: the cached data's writes draw on it.
  active_ = true;
  last_debit_ = options_.clock->Now();
}

bool GrantPool::Lapsed() {
  const bool lapsed = options_.clock->Now() >= lease_until_;
  if (lapsed != lapsed_) {
    lapsed_ = lapsed;
    if (lapsed) {
      LOG(WARNING) << "the session's lease has lapsed (the server is out of reach): writes go "
                      "to the server until it answers; "
                   << available_ << " bytes of grant are not counted on";
    } else {
      LOG(INFO) << "the session's lease holds again";
    }
  }
  return lapsed;
}

void GrantPool::Credit(uint64_t bytes) {
  const uint64_t paid = std::min(debt_, bytes);
  debt_ -= paid;
  available_ += bytes - paid;
}

uint64_t GrantPool::refill_size() {
  absl::MutexLock l(&mu_);
  return refill_;
}

uint64_t GrantPool::Refill(uint64_t at_least) {
  uint64_t wanted;
  {
    absl::MutexLock l(&mu_);
    // Size the refill to the write rate: what was debited over the last
    // second or so, doubled, between the initial and the maximum size.
    const double secs = std::max(absl::ToDoubleSeconds(options_.clock->Now() - rate_since_), 1e-3);
    if (secs >= 1.0) {
      const uint64_t per_sec = static_cast<uint64_t>(debited_recently_ / secs);
      refill_ = std::clamp<uint64_t>(2 * per_sec, options_.initial_refill_bytes,
                                     options_.max_refill_bytes);
      debited_recently_ = 0;
      rate_since_ = options_.clock->Now();
    }
    wanted = std::max(refill_, at_least) + debt_;
  }
  absl::StatusOr<uint64_t> added = grant_rpc_(wanted, 0);
  absl::MutexLock l(&mu_);
  if (!added.ok()) {
    LOG(WARNING) << "grant refill: " << added.status();
    server_empty_ = true;
    empty_since_ = options_.clock->Now();
    return 0;
  }
  Credit(*added);
  server_empty_ = *added == 0;
  if (server_empty_) empty_since_ = options_.clock->Now();
  return *added;
}

uint64_t GrantPool::MaybeRefill() {
  {
    absl::MutexLock l(&mu_);
    if (refilling_ || Lapsed() || available_ >= options_.low_watermark * refill_) return 0;
    // Near full the server has nothing to give: ask again once a second.
    if (server_empty_ && options_.clock->Now() - empty_since_ < absl::Seconds(1)) return 0;
    refilling_ = true;
  }
  uint64_t added = Refill(0);
  absl::MutexLock l(&mu_);
  refilling_ = false;
  return added;
}

bool GrantPool::Debit(uint64_t bytes) {
  if (bytes == 0) return true;
  absl::MutexLock l(&mu_);
  // Cut off longer than the lease: the server may have given the grant to
  // others. The write goes to the server (write-through), which decides.
  if (Lapsed()) return false;
  synced_ = false;
  active_ = true;
  last_debit_ = options_.clock->Now();
  bool own_refill_short = false;
  for (int attempt = 0;; ++attempt) {
    if (available_ >= bytes && !Lapsed()) {
      available_ -= bytes;
      outstanding_ += bytes;
      debited_recently_ += bytes;
      return true;
    }
    if (Lapsed()) return false;
    // Short: wait for a refill in flight, or make one; give up when the
    // server had nothing to give.
    if (attempt > 0 && server_empty_) return false;
    if (refilling_) {
      auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !refilling_; };
      mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(60));
      if (refilling_) return false;  // the refill RPC is stuck: write through
      continue;
    }
    // A refill of its own that came back short means the server is near
    // full: write through. A full one that other writers took first is
    // tried again, a few times.
    if (own_refill_short || attempt > 3) return false;
    refilling_ = true;
    mu_.Unlock();
    own_refill_short = Refill(bytes) < bytes;
    mu_.Lock();
    refilling_ = false;
  }
}

void GrantPool::Settle(uint64_t debited, uint64_t used) {
  absl::MutexLock l(&mu_);
  outstanding_ -= std::min(outstanding_, debited);
  if (used <= debited) {
    Credit(debited - used);
  } else {
    const uint64_t more = used - debited;
    const uint64_t taken = std::min(available_, more);
    available_ -= taken;
    debt_ += more - taken;
  }
}

void GrantPool::Refund(uint64_t debited) {
  absl::MutexLock l(&mu_);
  outstanding_ -= std::min(outstanding_, debited);
  Credit(debited);
}

uint64_t GrantPool::Recall(uint64_t wanted) {
  absl::StatusOr<uint64_t> back = GiveBack(wanted, false);
  return back.ok() ? *back : 0;
}

absl::StatusOr<uint64_t> GrantPool::GiveBack(uint64_t wanted, bool everything) {
  uint64_t back;
  {
    absl::MutexLock l(&mu_);
    if (Lapsed()) return absl::UnavailableError("the session's lease has lapsed");
    back = std::min(available_, wanted);
    if (back == 0 && !everything) return 0;
    available_ -= back;
    if (!everything) {
      // The server is short: no background refill for a while (a writer
      // that runs dry still asks, and gets what the policy allows).
      server_empty_ = true;
      empty_since_ = options_.clock->Now();
    }
  }
  // Everything: more than any grant, so that the server's whole grant for
  // this session goes back even where the two counts had drifted apart.
  absl::StatusOr<uint64_t> r = grant_rpc_(0, everything ? (1ull << 62) : back);
  if (!r.ok()) {
    // The server may have applied it before the reply was lost: counted as
    // given back (the mount never counts on grant the server may not
    // hold; the next give-back of everything brings the two together).
    LOG(WARNING) << "giving back " << back << " bytes of grant: " << r.status()
                 << " (counted as given back)";
    absl::MutexLock l(&mu_);
    synced_ = false;
    return r.status();
  }
  return back;
}

uint64_t GrantPool::ReturnIfIdle() {
  absl::MutexLock l(&mu_);
  return MaybeReturnIdle();
}

uint64_t GrantPool::MaybeReturnIdle() {
  // With nothing cached and no refill in flight, everything the server
  // holds for the mount goes back (once), whatever this pool counts.
  const bool everything = !synced_ && outstanding_ == 0 && debt_ == 0 && !refilling_;
  if (options_.return_idle_after <= absl::ZeroDuration() || (available_ == 0 && !everything)) {
    return 0;
  }
  const absl::Time now = options_.clock->Now();
  if (now - last_debit_ < options_.return_idle_after || now < idle_retry_at_) return 0;
  if (everything) refilling_ = true;  // no refill while the whole grant goes back
  mu_.Unlock();
  absl::StatusOr<uint64_t> r = GiveBack(std::numeric_limits<uint64_t>::max(), everything);
  mu_.Lock();
  const uint64_t back = r.ok() ? *r : 0;
  if (everything) {
    refilling_ = false;
    if (r.ok()) synced_ = true;
  }
  if (back > 0 || (everything && r.ok())) {
    VLOG(1) << "idle: gave back " << back << " bytes of grant";
    active_ = false;  // the next write starts the refills again
  } else if (!r.ok()) {
    idle_retry_at_ = now + options_.return_idle_after;  // the RPC failed: later
  }
  return back;
}

void GrantPool::RefillLoop() {
  absl::MutexLock l(&mu_);
  while (!stopping_) {
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    // Checks often enough that a fast writer finds the refill done before
    // its pool runs dry; idle cost is one mutex round per 20 ms.
    if (mu_.AwaitWithTimeout(absl::Condition(&stop), absl::Milliseconds(20))) break;
    // An idle mount asks for nothing, and after a while gives back what it
    // holds.
    if (!active_ || options_.clock->Now() - last_debit_ > kIdleAfter) {
      MaybeReturnIdle();
      continue;
    }
    mu_.Unlock();
    MaybeRefill();
    mu_.Lock();
  }
}

}  // namespace grantfs
