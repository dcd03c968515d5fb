// The mount's log of namespace operations it made on its own in directories
// granted to it (docs/namespace-grants.md): kept in the order they were
// made, sent to the server in batches (ApplyLog) by size, by age and when
// asked (fsync, a recall, unmount), each batch once at a time so the order
// holds, and bounded in memory: an append waits while the log is full.
//
// An entry is gone from the log once the server applied it (durable and
// replicated). A batch that could not be sent (no server answered) stays
// and is sent again with the same sequence numbers: the server applies each
// entry once. An entry the server refused ends the log's good life: it and
// every entry after it are dropped (they were made on a state the server
// does not have), the error is kept (error()), and every later append and
// flush returns it; the mount then goes the synchronous way.
//
// Thread-safe; mu_ is a leaf, and no lock is held while a batch is sent.
#ifndef GRANTFS_CLIENT_NS_LOG_H_
#define GRANTFS_CLIENT_NS_LOG_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/grantfs.pb.h"

namespace grantfs {

struct NsLogOptions {
  // Entries waiting at most; an append past it waits for a batch to go.
  // Small enough that a recall applies all of them well within the
  // server's wait for its ack (1 s): the holder must not lose its grant
  // halfway through.
  size_t max_entries = 4096;
  // Entries in one ApplyLog (the server takes 4096 at most).
  size_t batch_entries = 1024;
  // ... and bytes (write entries carry data; gRPC takes 16 MiB at most):
  // a batch stops before the entry that would take it past this, unless
  // that entry is its first.
  size_t batch_bytes = 4 << 20;
  // An entry waits at most about this long before its batch is sent (the
  // background thread, when started; it sends a full batch at once).
  absl::Duration max_age = absl::Seconds(1);
  // How long an append waits for room, and a flush for batches other
  // threads are sending, before it gives up (DEADLINE_EXCEEDED; nothing is
  // lost: the entries stay).
  absl::Duration wait = absl::Seconds(60);
  Clock* clock = Clock::Monotonic();
};

class NsLog {
 public:
  // Sends one batch; the reply's `errs` says what was applied.
  using Send = std::function<absl::StatusOr<proto::ApplyLogReply>(proto::ApplyLogRequest*)>;
  NsLog(const NsLogOptions& options, Send send);
  ~NsLog();
  NsLog(const NsLog&) = delete;
  NsLog& operator=(const NsLog&) = delete;

  // The thread that sends entries older than max_age. Stop() ends it
  // (what is left stays for a last Flush()).
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Adds `entry` (its seq set by the caller) at the end; returns its
  // position (1, 2, ...). Waits while the log is full, sending meanwhile.
  // The log's error once an entry was refused.
  absl::StatusOr<uint64_t> Append(proto::LogEntry entry) ABSL_LOCKS_EXCLUDED(mu_);
  // Appends `entries`, all or none, without waiting: RESOURCE_EXHAUSTED
  // when they do not fit (the caller goes the synchronous way instead), the
  // log's error once an entry was refused. Returns the position of the
  // last. Sends nothing, so it may be called under the caller's locks.
  absl::StatusOr<uint64_t> TryAppend(std::vector<proto::LogEntry> entries) ABSL_LOCKS_EXCLUDED(mu_);
  // Sends every entry up to position `upto` (all by default) and returns
  // once the server applied them, or with the error that stopped it: the
  // log's error (OK when `upto` is before the refused entry: applied), or UNAVAILABLE when a batch
  // could not be sent (the RPC layer retried it already; the entries stay, to be sent again). A
  // batch takes every entry waiting when it goes (up to batch_entries and batch_bytes), past `upto`
  // too: callers that wait together share it (a group commit), and no entry is held back that could
  // have gone.
  absl::Status Flush(uint64_t upto = UINT64_MAX) ABSL_LOCKS_EXCLUDED(mu_);
  // Position of the last entry not applied yet that touches `ino`
  // (TouchedBy), or 0: what an fsync of the file waits for (the entries
  // before it go with it: the log is applied in order).
  uint64_t LastTouching(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);

  // OK, or why the log stopped (an entry refused: its errno).
  absl::Status error() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the refused entry, or one dropped after it, touched `ino`
  // (TouchedBy): a change of it the mount answered is not on the server.
  bool Dropped(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // Entries not applied yet.
  size_t pending() ABSL_LOCKS_EXCLUDED(mu_);
  // The lowest inode number a create not applied yet uses (0: none): the
  // server may forget ranges below it (InodeRangeRequest.keep_from).
  uint64_t OldestPendingIno() ABSL_LOCKS_EXCLUDED(mu_);
  // Position of the last entry appended (0: none yet).
  uint64_t last() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether an entry not applied yet (being sent too) changes inode `ino`:
  // makes or removes it, changes its attributes, or changes the names in
  // it (a directory), as the entry names them (TouchedBy). Opens and
  // closes touch nothing. A lookup, getattr, readdir, read or write about
  // nothing touched is answered by the server exactly as after the log.
  bool Touches(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // Position of the oldest entry not applied yet (the next one appended
  // when none is waiting): taken before a call, for TouchedSince after it.
  uint64_t Mark() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether an entry at or after position `mark` touches `ino`, whether it
  // is still waiting or was applied since (while a call was out, the
  // server may have answered it before or after that entry). True when
  // entries applied since `mark` are too many to remember (kHistory).
  bool TouchedSince(uint64_t mark, uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr size_t kHistory = 4096;
  // The inodes `e` names: the one it makes, removes, renames over or
  // changes, and the directories whose names it changes.
  static std::vector<uint64_t> TouchedBy(const proto::LogEntry& e);

 private:
  // Sends the next batch (the oldest entries, at most batch_entries and
  // batch_bytes) unless another thread is sending. Returns with mu_ held;
  // releases it while the batch is out.
  void SendOne() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AgeLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Counts `ino` in (+1) or out (-1) of touched_.
  void CountTouched(const std::vector<uint64_t>& inos, int delta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `entry`, appended at `now`, at the end (with what it touches).
  void PushBack(proto::LogEntry entry, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the first `n` entries off the front (applied or dropped).
  void PopFront(size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const NsLogOptions options_;
  const Send send_;
  absl::Mutex mu_;
  std::deque<proto::LogEntry> entries_ ABSL_GUARDED_BY(mu_);
  std::deque<absl::Time> appended_at_ ABSL_GUARDED_BY(mu_);            // one per entry
  std::deque<std::vector<uint64_t>> touched_of_ ABSL_GUARDED_BY(mu_);  // one per entry
  // What the last kHistory applied (or dropped) entries touched; the last
  // one's position is first_pos_ - 1.
  std::deque<std::vector<uint64_t>> history_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint32_t> touched_ ABSL_GUARDED_BY(mu_);  // ino -> entries
  uint64_t first_pos_ ABSL_GUARDED_BY(mu_) = 1;  // position of entries_.front()
  bool sending_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status send_error_ ABSL_GUARDED_BY(mu_);  // of the last batch that could not go
  absl::Status error_ ABSL_GUARDED_BY(mu_);       // sticky: an entry was refused
  // The refused entry's position, and the inodes it and the entries
  // dropped after it touched (at most kMaxDropped: past it, every inode
  // counts).
  uint64_t refused_pos_ ABSL_GUARDED_BY(mu_) = 0;
  static constexpr size_t kMaxDropped = 1 << 16;
  absl::flat_hash_set<uint64_t> dropped_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread ager_;
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_NS_LOG_H_
