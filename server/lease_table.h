// Metadata leases (docs/architecture.md, "Metadata leases"): which mount may
// answer from its own cache what about an inode or a directory, and the
// recall of those copies before a change is acknowledged.
//
// Two kinds of lease. An attribute lease on an inode covers its attributes
// and xattrs. A directory lease covers every name in a directory, the names
// that are there and the ones that are not, and its listing. A mount gets a
// lease with the reply to a read (lookup, getattr, readdir) or to a change
// it made itself; it keeps applying its own changes to what it holds.
//
// A lease lasts while its mount's leases are renewed: each heartbeat renews
// all of them for the session lease (`term`), as long as the mount's recall
// stream is up and it answers recalls within `ack_wait`. A change calls
// Recall() after it is committed and before it answers: every other holder
// of what it touched is told over the stream and the change waits until each
// acknowledged, re-subscribed (a new stream means it dropped everything) or
// let its leases run out. So a change waits at most `ack_wait` + `term` for
// a mount that stopped answering, and no mount reads the old state after it
// returned (promise 6).
//
// The order that makes it exact: a change recalls after it committed; a
// read takes Epoch() before it reads the store and Grant() after, which
// refuses a key recalled since that epoch. A lease registered before the
// recall is recalled; one asked for after it was read after the commit.
//
// Leases recalled too often (`hot_recalls` within `hot_window`) are not
// granted for `cool_down`: the mounts then ask the server every time for
// that object, with no recall cost.
//
// A server that starts or takes over knows nothing of the leases the last
// one granted: every session it inherited counts as holding everything
// until it subscribes here (its mount dropped all it had when its stream
// broke) or `term` passed (Inherit).
//
// Thread-safe. Lock order: mu_ before the push callback's locks
// (SessionTable's).
#ifndef GRANTFS_SERVER_LEASE_TABLE_H_
#define GRANTFS_SERVER_LEASE_TABLE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "proto/grantfs.pb.h"

namespace grantfs {

struct LeaseKey {
  // kNsGrant: a namespace grant (docs/namespace-grants.md): the holder alone
  // changes the directory's names, in its own log, so a read or a change
  // of the directory (or of an inode in it) by another session recalls it
  // first (Volume::BreakGrants), and its recall is answered once the log
  // is applied.
  enum Kind : uint8_t { kAttr = 0, kDir = 1, kNsGrant = 2 };
  uint64_t ino = 0;
  Kind kind = kAttr;

  static LeaseKey Attr(uint64_t ino) { return {ino, kAttr}; }
  static LeaseKey Dir(uint64_t ino) { return {ino, kDir}; }
  static LeaseKey NsGrant(uint64_t ino) { return {ino, kNsGrant}; }
  bool operator==(const LeaseKey& o) const { return ino == o.ino && kind == o.kind; }
  template <typename H>
  friend H AbslHashValue(H h, const LeaseKey& k) {
    return H::combine(std::move(h), k.ino, k.kind);
  }
};

struct LeaseTableOptions {
  Clock* clock = Clock::Monotonic();
  // How long a renewal lets a mount hold its leases: the session lease.
  absl::Duration term = absl::Seconds(10);
  // A mount that leaves a recall unanswered this long is not renewed.
  absl::Duration ack_wait = absl::Seconds(1);
  // Hot objects: this many recalls within `hot_window` stop grants of that
  // object for `cool_down` (0: never).
  int hot_recalls = 8;
  absl::Duration hot_window = absl::Seconds(1);
  absl::Duration cool_down = absl::Seconds(2);
  // Leases held over all mounts; past it, no new ones (bounded memory).
  size_t max_leases = 4u << 20;
  // Leases one mount holds here. A mount forgets leases by itself (its
  // cache is bounded) without telling the server, so what the server counts
  // for a long-lived mount only grows: past this, a grant to it recalls
  // `max_leases_per_holder / 16` (at most 1024) of its others, attribute
  // leases first, as a change would but without waiting; the mount drops
  // them and acknowledges, and a change of one of them meanwhile waits for
  // that acknowledgement as for its own recall. Which ones is arbitrary: the
  // server does not know which the mount still uses. So one mount never
  // fills `max_leases` for the others.
  size_t max_leases_per_holder = 1u << 20;
  // Whether a session's record is durable. A server that takes over knows
  // only recorded sessions (Inherit), and waits only for them: a session
  // whose record is not durable yet (re-created by a request after its
  // lease ran out) takes no lease until it is. Null: every session may.
  std::function<bool(uint64_t client_id)> recorded = nullptr;
};

struct LeaseStats {
  uint64_t granted = 0;       // leases handed out
  uint64_t recalls = 0;       // recall messages sent
  uint64_t recall_waits = 0;  // changes that waited for a recall
  uint64_t lapsed = 0;        // recalls that ended by a lease running out
  uint64_t refused_hot = 0;   // grants refused: the object is recalled too often
  uint64_t evicted = 0;       // recalled from a mount over max_leases_per_holder
  size_t held = 0;            // leases held now
};

class LeaseTable {
 public:
  // `push` queues one recall on a session's stream; false when it cannot
  // (no such session, or its queue is full: the stream is ended and the
  // mount re-subscribes).
  using Push = std::function<bool(uint64_t client_id, const proto::Invalidation&)>;
  LeaseTable(const LeaseTableOptions& options, Push push);

  // A session's recall stream started (its mount dropped every lease it had
  // before); renews its leases as Renew does. Returns the stream's token
  // for StreamDown.
  // `leases` false: the mount takes none (it holds nothing).
  uint64_t StreamUp(uint64_t client_id, bool leases) ABSL_LOCKS_EXCLUDED(mu_);
  void StreamDown(uint64_t client_id, uint64_t token) ABSL_LOCKS_EXCLUDED(mu_);
  // A heartbeat: renews the session's leases for `term` when its stream is
  // up and it has no recall left unanswered for `ack_wait`. Returns whether
  // it did and they had not run out before (the mount counts its leases
  // from the heartbeat it sent; told false, it drops them all).
  bool Renew(uint64_t client_id) ABSL_LOCKS_EXCLUDED(mu_);
  // The session ended (closed or expired): it holds nothing.
  void Forget(uint64_t client_id) ABSL_LOCKS_EXCLUDED(mu_);
  // A restarted or new primary: each of `client_ids` may hold leases of the
  // last server until it subscribes here or until `until`. `with_grants`:
  // some of them may hold namespace grants too (GrantsOut).
  void Inherit(absl::Span<const uint64_t> client_ids, absl::Time until, bool with_grants = false)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether any session may hold a namespace grant now (held, being
  // recalled, or inherited): when not, nothing needs BreakGrants. No lock.
  bool GrantsOut() const;
  // Whether a session other than `origin` holds one of `keys` or has not
  // acknowledged its recall yet, or is inherited (may hold anything).
  bool HeldByOther(uint64_t origin, absl::Span<const LeaseKey> keys) ABSL_LOCKS_EXCLUDED(mu_);
  // A session applies operations of its log in the directories `keys`
  // (namespace grants): true when it holds each of them, or it was recalled
  // and not acknowledged yet, or the session is inherited; its leases have
  // not run out. Then, until EndApply, no recall waiting for the session
  // ends by its leases running out: a session that stopped answering but
  // still applies is waited for until it is done.
  // An inherited session may apply into any directory but those this
  // server granted to another since. Each true is ended by EndApply.
  bool BeginApply(uint64_t client_id, absl::Span<const LeaseKey> keys) ABSL_LOCKS_EXCLUDED(mu_);
  // A directory the session made while applying its log, in a directory
  // granted to it: granted to it as well, whatever its heat (nobody else
  // can know it yet), unless its leases ran out. A session whose stream is
  // not up (it replays its log to a server that took over) gets it too; it
  // drops it when it subscribes.
  void GrantCreated(uint64_t client_id, uint64_t dir) ABSL_LOCKS_EXCLUDED(mu_);
  // The session no longer holds `key` (a granted directory it removed).
  void Drop(uint64_t client_id, const LeaseKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends `n` BeginApply calls.
  void EndApply(uint64_t client_id, int n = 1) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether the session takes leases now (its stream is up and renewed).
  bool Takes(uint64_t client_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Taken before a read of what a lease will cover.
  uint64_t Epoch() ABSL_LOCKS_EXCLUDED(mu_);
  // Registers a lease on `key` for the session, after the caller read what
  // it covers; `epoch` is Epoch() from before that read. False: no lease
  // (leases off for that mount, its stream down, not renewed, the object
  // hot or recalled since `epoch`, or too many leases).
  bool Grant(uint64_t client_id, const LeaseKey& key, uint64_t epoch) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `key` is not leased now for being recalled too often.
  bool Hot(const LeaseKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  // `keys` count as changed now: a Grant with an epoch from before is
  // refused (a read already under way does not lease them). Nobody is
  // recalled.
  void Touch(absl::Span<const LeaseKey> keys) ABSL_LOCKS_EXCLUDED(mu_);
  // Changes in flight (namespace grants of existing directories): a change
  // of the service counts its inodes from before it checks for grants to
  // recall (Volume::BreakGrants) until it has recalled what it changed.
  // Changing: whether a change of `ino` is in flight. Under one mutex with
  // Grant, so a grant registered before a change begins is seen by the
  // change's BreakGrants, and one registered after sees the change here.
  void BeginChange(absl::Span<const uint64_t> inos) ABSL_LOCKS_EXCLUDED(mu_);
  void EndChange(absl::Span<const uint64_t> inos) ABSL_LOCKS_EXCLUDED(mu_);
  bool Changing(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // After a change to what `keys` cover was committed: recalls them from
  // every holder but `origin` and waits until each is gone (bounded:
  // `ack_wait` + `term`). The origin keeps its leases: it applies its own
  // change. `in_grant`: the change is an entry of the origin's log, in
  // directories granted to it (BeginApply): no other session can hold what
  // it covers, so the sessions inherited from the last server (which may
  // hold anything) are not waited for; they replay their own logs at the
  // same time and would otherwise wait for each other until the window
  // ends.
  void Recall(uint64_t origin, absl::Span<const LeaseKey> keys, bool in_grant = false)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The mount dropped every recall up to `seq` (Invalidation.recall).
  void Ack(uint64_t client_id, uint64_t seq) ABSL_LOCKS_EXCLUDED(mu_);

  LeaseStats Stats() ABSL_LOCKS_EXCLUDED(mu_);
  // Leases a session holds (tests, status).
  size_t HeldBy(uint64_t client_id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Holder {
    bool up = false;                                    // its stream is up
    uint64_t token = 0;                                 // of the stream that is up
    uint64_t streams = 0;                               // streams it opened so far
    absl::Time until;                                   // its leases last until then (this clock)
    uint64_t sent = 0;                                  // last recall sequence sent
    uint64_t acked = 0;                                 // last recall sequence acknowledged
    std::deque<absl::Time> unacked_sent;                // when acked + 1, acked + 2, ... were sent
    bool inherited = false;                             // may hold leases of the last server
    absl::Time inherited_until = absl::InfinitePast();  // ... until then
    int applying = 0;                                   // BeginApply calls not ended
    absl::flat_hash_set<LeaseKey> keys;
    // Recalls sent and not yet acknowledged, oldest first: (seq, key).
    std::deque<std::pair<uint64_t, LeaseKey>> recalling;
  };
  struct Heat {
    absl::Time window_start;
    int recalls = 0;
    absl::Time hot_until;
  };
  struct Wait {
    uint64_t client_id;
    uint64_t seq;      // 0: inherited, waits for a stream
    uint64_t streams;  // streams it had opened when the recall was sent
  };

  void DropKeys(Holder& h, uint64_t client_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the holder's recalls up to `seq` (acknowledged, or moot).
  void ForgetRecalls(Holder& h, uint64_t client_id, uint64_t seq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recalls some of a holder's leases but `keep` (max_leases_per_holder).
  void Evict(Holder& h, uint64_t client_id, const LeaseKey& keep, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the recall of `key` to a holder that held it (already forgotten
  // here); returns its sequence number.
  uint64_t SendRecall(Holder& h, uint64_t client_id, const LeaseKey& key, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `w` is over: acknowledged, re-subscribed, lapsed or gone.
  bool Done(const Wait& w, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts a recall of `key` (it may become hot).
  void CountRecall(const LeaseKey& key, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HeldByOtherLocked(uint64_t origin, const LeaseKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The epoch of a change of keys (Recall, Touch), clearing changed_ when
  // it grows large.
  uint64_t ChangeEpochLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps grants_out_ (namespace grants held or being recalled).
  void CountGrant(const LeaseKey& key, int delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const LeaseTableOptions options_;
  const Push push_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Holder> holders_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<LeaseKey, absl::flat_hash_set<uint64_t>> leases_ ABSL_GUARDED_BY(mu_);
  // Keys recalled (by a change or an eviction) from holders that have not
  // acknowledged yet: (client, recall seq). Until they do, they may still
  // answer from the old copy, so a later change of the key waits for them
  // too, not only the change that recalled it.
  absl::flat_hash_map<LeaseKey, std::vector<std::pair<uint64_t, uint64_t>>> recalling_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<LeaseKey, Heat> heat_ ABSL_GUARDED_BY(mu_);
  absl::Time inherited_until_ ABSL_GUARDED_BY(mu_);
  // Namespace grants held plus their recalls not acknowledged, and until
  // when inherited sessions may hold some: read without mu_ (GrantsOut).
  std::atomic<int64_t> grants_out_{0};
  std::atomic<int64_t> inherited_grants_until_ns_{0};
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 0;
  // Each Recall is one epoch; changed_ has the last one of each key, or it
  // is at most floor_ (changed_ is cleared when it grows large).
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t floor_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<LeaseKey, uint64_t> changed_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, int> changing_ ABSL_GUARDED_BY(mu_);  // BeginChange
  size_t held_ ABSL_GUARDED_BY(mu_) = 0;
  LeaseStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_LEASE_TABLE_H_
