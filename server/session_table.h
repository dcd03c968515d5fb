// Client sessions: one per mount. A session has a lease renewed by every
// request and by heartbeats; when the lease runs out the client is presumed
// dead and its locks and open files are released by the owner of this table
// (Volume). Each session also has a queue of cache invalidations that the
// client drains through the Subscribe stream.
//
// Thread-safe. Time comes from the injected Clock.
#ifndef GRANTFS_SERVER_SESSION_TABLE_H_
#define GRANTFS_SERVER_SESSION_TABLE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/grantfs.pb.h"
#include "proto/store.pb.h"

namespace grantfs {

class SessionTable {
 public:
  // `lease`: how long a session lives without hearing from its client.
  // `max_queued`: invalidations kept per session before the oldest are
  // dropped (the client's cache timeouts still bound staleness).
  SessionTable(Clock* clock, absl::Duration lease, size_t max_queued = 65536);

  absl::Duration lease() const { return lease_; }

  // A new session with a random id that is never 0, belonging to `peer`
  // (the certificate common name of the node that opened it; "" without
  // TLS: anyone's).
  uint64_t Open(const std::string& client_name, const std::string& peer = "");
  // Whether a caller named `peer` may use session `client_id`: no session
  // (0, or one this server does not know), one that belongs to nobody, or
  // one that belongs to `peer`. A session id is not a bearer token: another
  // node that learns it cannot act as its owner.
  bool BelongsTo(uint64_t client_id, const std::string& peer);

  // Renews the lease of `client_id`, re-creating the session if the server
  // forgot it (restart, expiry). A session that is being ended (Close,
  // Expire) is not re-created before its owner called Forgotten(), so that
  // what the new session takes is not released with the old one's: kEnding,
  // the caller asks the client to retry. No-op (kRenewed) for 0.
  // A re-created session belongs to `peer`, as does one that belonged to
  // nobody.
  enum class TouchResult { kRenewed, kCreated, kEnding };
  TouchResult Touch(uint64_t client_id, const std::string& peer = "");
  // After Touch re-created the session of `client_id` (its client held a
  // session this server did not know: its lease ran out and what it held,
  // its grant first, was released), a random token, never 0, until the
  // client acknowledges it by passing it as `acked`; else 0. Heartbeats
  // carry it both ways, so a lost reply loses nothing.
  uint64_t LostToken(uint64_t client_id, uint64_t acked);
  // The session's record is durable. A session is unrecorded from Open or a
  // re-creating Touch until then (set under the same lock that created it,
  // so no request of the session sees it otherwise); Restore from a record
  // makes it recorded.
  void MarkRecorded(uint64_t client_id);
  bool Recorded(uint64_t client_id);

  // Gives every session a fresh lease (the server could not be reached).
  void RenewAll();

  // Recovery after a restart or a failover. Restore puts back a session
  // the last run had (a fresh lease, named `client_name` unless it has a
  // name). StartGrace marks every session there is as reclaiming: its
  // client may still have files open that this server does not know of.
  // A session stops reclaiming when Reclaimed() is called for it or when it
  // ends.
  // `recorded`: restored from its durable record (else from a grant, a lock
  // or an orphan that names it: unrecorded until MarkRecorded).
  // `lease`: how long it has to come back, when longer than the session
  // lease.
  void Restore(uint64_t client_id, const std::string& client_name, const std::string& peer = "",
               bool recorded = false, absl::Duration lease = absl::ZeroDuration());
  void StartGrace();
  // Returns true when that was the last reclaiming session.
  bool Reclaimed(uint64_t client_id);
  // Ends the grace of every session (it lasted too long); returns the ids
  // that were still reclaiming.
  std::vector<uint64_t> EndGrace();
  // Sessions still reclaiming. Lock-free.
  size_t reclaiming() const { return reclaiming_.load(std::memory_order_acquire); }

  // Ends a session. Returns the (ino, count) of the files it had open. The
  // caller releases what the session held, then calls Forgotten().
  std::map<uint64_t, uint32_t> Close(uint64_t client_id);

  // Ends every session whose lease has run out; returns their ids and, per
  // id, the files they had open. As after Close, Forgotten() for each.
  std::vector<std::pair<uint64_t, std::map<uint64_t, uint32_t>>> Expire();
  // What the ended session `client_id` held is released: a request from
  // its client may re-create it (Touch).
  void Forgotten(uint64_t client_id);

  // Open files. OpenFile records an open of `ino` by the client, CloseFile
  // removes one, returning the opens left over all clients. `handle` is the
  // client's id for the open: an OpenFile with a handle the client already
  // has open, or a CloseFile with one it does not, changes nothing (a
  // resent request). Handle 0 stands for opens without an id; each counts.
  // OpenFile returns false, and records nothing, when the client has no
  // session (it ended since the request came in).
  bool OpenFile(uint64_t client_id, uint64_t ino, uint64_t handle = 0);
  uint32_t CloseFile(uint64_t client_id, uint64_t ino, uint64_t handle = 0);
  // Whether the client holds `ino` open with `handle` (not 0).
  bool HoldsOpen(uint64_t client_id, uint64_t ino, uint64_t handle);
  // Opens of `ino` over all sessions; `by_client` only that client's.
  uint32_t OpenCount(uint64_t ino);
  uint32_t OpenCountBy(uint64_t client_id, uint64_t ino);
  // Who has `ino` open, with their handles, in client id order.
  proto::OrphanRecord Holders(uint64_t ino);

  // Queues `inv` for every session except `origin`.
  void Publish(uint64_t origin, const proto::Invalidation& inv);
  // Queues a lease recall for `client_id` (server/lease_table.h). A recall
  // is never dropped: when the queue is full, the stream is ended instead
  // (Drain returns false once; the mount re-subscribes) and false returned.
  bool PushRecall(uint64_t client_id, const proto::Invalidation& inv);
  // Asks `client_id` to give back unused grant (the Subscribe stream carries
  // it as recall_bytes). Returns false when there is no such session.
  bool Recall(uint64_t client_id, uint64_t bytes);
  // A new Subscribe stream of `client_id`: returns its number (Drain). An
  // older stream of the session drains nothing from then on, so that what
  // is queued goes to the stream the mount reads.
  uint64_t NewStream(uint64_t client_id);
  // Waits up to `timeout` for invalidations or a recall for `client_id` and
  // moves them into `out`. Returns false when the session no longer exists,
  // the table is shutting down, `stream` is not the session's latest
  // (0: any), or a recall did not fit in its queue.
  bool Drain(uint64_t client_id, absl::Duration timeout, proto::InvalidationBatch* out,
             uint64_t stream = 0);

  std::vector<proto::SessionInfo> List();
  // A heartbeat of `client_id` came with `report` (shown by List).
  void Reported(uint64_t client_id, const proto::MountReport& report);
  // A call of `client_id` came from `address` (HOST:PORT; shown by List).
  void CameFrom(uint64_t client_id, const std::string& address);
  // Grant recalls sent (Drain) since the table was made, over every
  // session, ended ones too.
  uint64_t grant_recalls() const { return grant_recalls_.load(std::memory_order_relaxed); }

  // Makes every Drain return false at once and from then on: the server is
  // stopping, so the Subscribe streams end.
  void Shutdown();

 private:
  struct Session {
    std::string name;
    std::string peer;  // who may use it ("": anyone)
    absl::Time expires;
    std::map<uint64_t, std::vector<uint64_t>> open;  // ino -> handles, one per open
    std::deque<proto::Invalidation> queue;
    bool overflowed = false;    // a recall did not fit: end the stream
    uint64_t stream = 0;        // the latest Subscribe stream (NewStream)
    uint64_t recall_bytes = 0;  // pending recall, 0 = none
    uint64_t recalls = 0;       // recalls sent so far
    bool reclaiming = false;    // StartGrace() .. Reclaimed()
    proto::MountReport report;  // with its last heartbeat (Reported)
    std::string address;        // where its latest call came from (CameFrom)
    absl::Time reported = absl::InfinitePast();
    uint64_t lost = 0;  // re-created by Touch: token not yet acked
    // Its record is durable (MarkRecorded, or Restore from one): a server
    // taking over knows it.
    bool recorded = false;
  };
  // Drops the session's opens from open_total_ and returns them as counts;
  // the session is being ended (forgetting_).
  std::map<uint64_t, uint32_t> ForgetOpens(uint64_t client_id, const Session& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  const absl::Duration lease_;
  const size_t max_queued_;

  absl::Mutex mu_;
  std::map<uint64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, uint32_t> open_total_ ABSL_GUARDED_BY(mu_);
  // Sessions ended whose holdings are being released (Close, Expire ..
  // Forgotten).
  std::set<uint64_t> forgetting_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> reclaiming_{0};  // sessions with `reclaiming`
  std::atomic<uint64_t> grant_recalls_{0};
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_SESSION_TABLE_H_
