#include "client/session.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "client/async_invalidator.h"
#include "common/keepalive.h"
#include "glog/logging.h"

namespace grantfs {

Session::Session(const SessionOptions& options, MetaClient* meta, OpenHandleTable* handles,
                 GrantPool* pool, ReadAhead* read_ahead, LeaseCache* leases, NsGrants* ns)
    : options_(options),
      meta_(meta),
      handles_(handles),
      pool_(pool),
      ra_(read_ahead),
      leases_(leases),
      ns_(ns) {
  // A failover kicks the heartbeat. The hook takes mu_: no RPC may be made,
  // and no failover done, while holding it.
  meta_->rpc().set_on_failover([this] {
    absl::MutexLock l(&mu_);
    kick_ = true;
  });
}

Session::~Session() {
  BeginStop();
  Close();
}

absl::StatusOr<proto::OpenSessionReply> Session::Open(absl::Time* sent) {
  *sent = options_.clock->Now();
  absl::StatusOr<proto::OpenSessionReply> reply =
      meta_->OpenSession(options_.client_name, options_.root_path, options_.open_wait);
  if (!reply.ok()) return reply;
  incarnation_ = reply->incarnation();
  {
    absl::MutexLock l(&mu_);
    lease_ms_ = std::max<uint64_t>(reply->lease_ms(), 300);
  }
  const absl::Duration term = SetMetaLease(reply->meta_lease_ms());
  if (leases_ != nullptr) leases_->SetTerm(term);
  RpcClient& rpc = meta_->rpc();
  LOG(INFO) << "session " << reply->client_id() << " with " << rpc.address(rpc.current())
            << ", lease " << reply->lease_ms() << " ms";
  return reply;
}

void Session::Start(Invalidator* invalidator) {
  {
    absl::MutexLock l(&mu_);
    if (started_ || stopping_) return;
    started_ = true;
  }
  invalidator_ = invalidator;
  if (invalidator != nullptr && leases_ != nullptr) {
    slow_ = std::make_unique<AsyncInvalidator>(invalidator);
  }
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  if (invalidator != nullptr) {
    subscriber_ = std::thread([this, invalidator] { SubscribeLoop(invalidator); });
  }
}

bool Session::AwaitEntryDrops(uint64_t except, absl::Duration timeout) {
  return slow_ == nullptr || slow_->AwaitEntries(except, timeout);
}

void Session::BeginStop() {
  absl::MutexLock l(&mu_);
  stopping_ = true;
  if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
}

void Session::Close() {
  BeginStop();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (subscriber_.joinable()) subscriber_.join();
  // After the stream's thread, its only pusher. The object stays until the
  // session goes: a kernel request still in AwaitEntryDrops returns at once.
  if (slow_ != nullptr) slow_->Stop();
  {
    absl::MutexLock l(&mu_);
    if (!started_) return;
    started_ = false;
  }
  meta_->CloseSession();
}

absl::Duration Session::SetMetaLease(uint64_t ms) {
  absl::MutexLock l(&mu_);
  if (ms > 0 && std::max<uint64_t>(ms, 300) != meta_lease_ms_) {  // 0: a server that did not say
    const uint64_t was = meta_lease_ms_;
    meta_lease_ms_ = std::max<uint64_t>(ms, 300);
    if (started_) {
      LOG(INFO) << "metadata lease term now " << meta_lease_ms_ << " ms (was " << was
                << " ms): the server's";
    }
  }
  return absl::Milliseconds(meta_lease_ms_);
}

void Session::FollowCalls(size_t answered) {
  // Only when no call moved to another server since the heartbeat was sent
  // (then it is `answered` that answered it).
  if (meta_->rpc().current() != answered) return;
  absl::MutexLock l(&mu_);
  if (stream_ctx_ == nullptr || stream_index_ == SIZE_MAX || stream_index_ == answered) return;
  LOG(INFO) << "recall stream on " << meta_->rpc().address(stream_index_)
            << " but the calls are answered by " << meta_->rpc().address(answered)
            << ": subscribing there";
  stream_ctx_->TryCancel();
}

absl::Time Session::LeaseEnd(absl::Time sent) {
  uint64_t lease_ms;
  {
    absl::MutexLock l(&mu_);
    lease_ms = lease_ms_;
  }
  // The server's lease started when the request arrived, after `sent`; a
  // tenth off covers the rate difference of the two monotonic clocks.
  return sent + absl::Milliseconds(lease_ms * 9 / 10);
}

void Session::HeartbeatLoop() {
  int failures = 0;         // heartbeats failed in a row
  uint64_t lost_acked = 0;  // HeartbeatReply.session_lost acted on
  absl::MutexLock l(&mu_);
  while (!stopping_) {
    auto stop_or_kick = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || kick_; };
    // Leases are renewed by heartbeats too: often enough that they never
    // run out between two.
    const uint64_t period_ms =
        leases_ != nullptr ? std::min(lease_ms_, meta_lease_ms_) / 3 : lease_ms_ / 3;
    mu_.AwaitWithTimeout(absl::Condition(&stop_or_kick), absl::Milliseconds(period_ms));
    if (kick_) {
      // At most one heartbeat per 100 ms while servers keep failing. The
      // wait polls the connection attempt to the server (WaitForServer): a
      // sleep here would leave its handshake stalled.
      kick_ = false;
      mu_.Unlock();
      meta_->rpc().WaitForServer(absl::Milliseconds(100));
      mu_.Lock();
    }
    if (stopping_) break;
    mu_.Unlock();
    const absl::Time sent = options_.clock->Now();
    bool unreachable = false;
    const size_t asked = meta_->rpc().current();
    proto::MountReport report;
    if (options_.report) options_.report(&report);
    absl::StatusOr<proto::HeartbeatReply> beat = meta_->Heartbeat(lost_acked, &unreachable, report);
    if (beat.ok()) {
      failures = 0;
      if (pool_ != nullptr) {
        // The server may have released the grant while this mount was cut
        // off; else the grant is good for another lease from `sent`.
        if (beat->session_lost() != 0 && beat->session_lost() != lost_acked) {
          pool_->Lost();
          lost_acked = beat->session_lost();
        }
        pool_->Renewed(LeaseEnd(sent));
      }
      if (leases_ != nullptr) {
        if (beat->leases_renewed()) {
          // Counted with this server's term (after a failover, the new one's).
          leases_->Renewed(sent, SetMetaLease(beat->meta_lease_ms()));
        } else {
          // Not renewed (no stream here yet, a recall left unanswered, or
          // they ran out): nothing leased may be trusted any more.
          DropLeases(/*stream_down=*/false, invalidator_);
        }
      }
      // A failed reclaim is tried again at the next heartbeat.
      Reclaim(beat->incarnation());
      FollowCalls(asked);
      mu_.Lock();
      continue;
    }
    if (++failures == 1 || failures % 50 == 0) {
      LOG(WARNING) << "heartbeat to " << beat.status().message() << " (" << failures
                   << " in a row)";
    }
    mu_.Lock();
    // The next heartbeat (and every call) goes to the next server, soon: a
    // restarted or new primary is found out about as fast as calls find it.
    if (unreachable) kick_ = true;
  }
}

bool Session::Reclaim(uint64_t incarnation) {
  const bool new_server = incarnation != incarnation_ && incarnation != 0;
  if (!new_server && !handles_->NeedsReclaim()) return true;
  // Opens of files made in granted directories may still be in the log:
  // the server learns of those files from it, which the subscribe loop
  // replays there first thing, so the reclaim waits until what the log
  // held when this server was first seen is applied (else they are not
  // there yet and count as freed). An open the old server applied is not
  // made again by the log (each entry counts once): the reclaim names it
  // then. Tried again at the next heartbeat; heartbeats never wait for it.
  if (new_server && ns_ != nullptr) {
    if (log_seen_incarnation_ != incarnation) {
      log_seen_incarnation_ = incarnation;
      log_upto_ = ns_->LogLast();
    }
    if (!ns_->LogAppliedThrough(log_upto_)) {
      VLOG(1) << "reclaim of open files waits for the namespace log (to " << log_upto_ << ")";
      return false;
    }
  }
  // A restarted server, or one that took over: it knows of this mount's
  // opens only those of unlinked files. Opens and releases go on meanwhile
  // (OpenHandleTable says how none is lost or brought back); an open that
  // ended while the Reclaim was in flight is named by one more.
  constexpr int kPasses = 3;
  for (int pass = 0; pass < kPasses; ++pass) {
    const OpenHandleTable::Opens opens = handles_->BeginReclaim();
    absl::StatusOr<proto::ReclaimReply> reply = meta_->Reclaim(opens);
    for (const auto& [ino, handle] : handles_->EndReclaim(reply.ok())) {
      // Released while the Reclaim was in flight: the server may have
      // taken the Release first.
      absl::Status s = meta_->Release(ino, handle);
      if (!s.ok()) LOG(WARNING) << "releasing handle " << handle << " of " << ino << ": " << s;
    }
    if (!reply.ok()) {
      LOG(WARNING) << "reclaiming " << opens.size() << " open files: " << reply.status();
      return false;
    }
    RpcClient& rpc = meta_->rpc();
    if (new_server && pass == 0) {
      LOG(INFO) << "server " << rpc.address(rpc.current()) << " is new to this mount: reclaimed "
                << opens.size() << " open files";
    } else {
      LOG(INFO) << "reclaimed " << opens.size() << " open files again on "
                << rpc.address(rpc.current()) << " (opened while a reclaim was in flight)";
    }
    for (uint64_t ino : reply->lost()) {
      LOG(ERROR) << "open file " << ino << " was freed before this mount could reclaim it";
    }
    // The server that took the reclaim (a failover may have come in between).
    if (reply->incarnation() != 0) {
      incarnation_ = reply->incarnation();
    } else if (incarnation != 0) {
      incarnation_ = incarnation;
    }
    if (!handles_->NeedsReclaim()) break;
  }
  return true;
}

void Session::SubscribeLoop(Invalidator* invalidator) {
  RpcClient& rpc = meta_->rpc();
  // With several servers the stream follows a failover: the new primary is
  // found within a few short waits, while invalidations may be missed.
  const bool several = rpc.server_count() > 1;
  const absl::Duration first_backoff = absl::Milliseconds(several ? 50 : 100);
  const absl::Duration max_backoff = several ? absl::Milliseconds(500) : absl::Seconds(2);
  absl::Duration backoff = first_backoff;
  for (;;) {
    grpc::ClientContext ctx;
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
      stream_ctx_ = &ctx;
    }
    // What this mount did in its granted directories goes first: a server
    // that restarted or took over holds other mounts' calls that would
    // read it until this mount subscribed (docs/namespace-grants.md).
    if (ns_ != nullptr) {
      // And the data of files whose close did not wait: the other mounts'
      // looks go on once this one subscribed.
      absl::Status applied = ns_->ApplyPending();
      if (applied.ok()) applied = ns_->SendAllDeferred();
      if (!applied.ok()) {
        // Not subscribed without it: the server would stop waiting for
        // this mount's log and refuse it. Tried again after a wait.
        LOG(WARNING) << "not subscribing yet: " << applied;
        absl::MutexLock l(&mu_);
        stream_ctx_ = nullptr;
        if (stopping_ || !WaitToReconnect(backoff)) return;
        backoff = std::min(backoff * 2, max_backoff);
        continue;
      }
    }
    size_t index = 0;
    const absl::Time opened = absl::Now();
    const absl::Time sent = options_.clock->Now();
    std::unique_ptr<grpc::ClientReader<proto::InvalidationBatch>> reader =
        meta_->Subscribe(&ctx, &index, leases_ != nullptr);
    {
      absl::MutexLock l(&mu_);
      stream_index_ = index;
    }
    proto::InvalidationBatch batch;
    while (reader->Read(&batch)) {
      backoff = first_backoff;
      if (batch.subscribed() && leases_ != nullptr) {
        leases_->Subscribed(sent, SetMetaLease(batch.meta_lease_ms()));
      }
      // Recalls first: a change on another node waits for their ack.
      Recall(batch, invalidator);
      // The rest may wait for kernel locks: on their own thread with leases.
      // (With leases the kernel is told no name for longer than a request,
      // but its stale entries of a moved directory would still make a
      // lookup under rename fail with ESTALE: they are dropped too.)
      Invalidator* slow = slow_ != nullptr ? slow_.get() : invalidator;
      for (const proto::Invalidation& inv : batch.items()) {
        if (inv.recall() != 0) continue;
        if (inv.parent() != 0) slow->InvalidateEntry(inv.parent(), inv.name());
        if (inv.ino() == 0) continue;
        // Read-ahead first: once the kernel drops its pages it may read
        // again at once, and must not get what was fetched before the change.
        if (inv.data_changed() && ra_ != nullptr) ra_->Invalidate(inv.ino());
        slow->InvalidateInode(inv.ino(), inv.data_changed());
      }
      if (batch.recall_bytes() > 0 && pool_ != nullptr) {
        // Other mounts need space: give back what cached data does not need.
        const uint64_t back = pool_->Recall(batch.recall_bytes());
        LOG(INFO) << "grant recall: gave back " << back << " bytes";
      }
      batch.Clear();
    }
    grpc::Status s = reader->Finish();
    // Changes pushed while the stream was down may be lost (a restarted
    // server, an overflowing queue, a failover): nothing fetched before is
    // trusted, and nothing leased (recalls may be lost too).
    if (ra_ != nullptr) ra_->InvalidateAll();
    if (leases_ != nullptr) DropLeases(/*stream_down=*/true, invalidator);
    // A stream that stood for a while was healthy, even without changes.
    if (absl::Now() - opened > absl::Seconds(1)) backoff = first_backoff;
    // Not under mu_: a failover takes it (to kick the heartbeat).
    size_t next = index;
    if (rpc.ShouldFailover(s)) next = rpc.Failover(index, s);
    absl::MutexLock l(&mu_);
    stream_ctx_ = nullptr;
    stream_index_ = SIZE_MAX;
    if (stopping_) return;
    LOG(WARNING) << "invalidation stream from " << rpc.address(index) << " ended ("
                 << s.error_message() << "); reconnecting to " << rpc.address(next);
    if (!WaitToReconnect(backoff)) return;
    backoff = std::min(backoff * 2, max_backoff);
  }
}

bool Session::WaitToReconnect(absl::Duration backoff) {
  RpcClient& rpc = meta_->rpc();
  return WaitToRetry(rpc.channel(rpc.current()), backoff, &mu_,
                     [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; });
}

void Session::DropLeases(bool stream_down, Invalidator* invalidator) {
  // The grants went with the stream, or with the leases.
  if (ns_ != nullptr) ns_->DropAll();
  std::vector<uint64_t> inos = leases_->DropAll(stream_down);
  if (invalidator == nullptr) return;
  invalidator->InvalidateAllNames();
  for (uint64_t ino : inos) invalidator->InvalidateInode(ino, /*data=*/false);
}

void Session::Recall(const proto::InvalidationBatch& batch, Invalidator* invalidator) {
  uint64_t last = 0;
  bool names = false;
  bool applied = true;  // every grant recalled had its log applied
  for (const proto::Invalidation& inv : batch.items()) {
    if (inv.recall() == 0) continue;
    last = std::max(last, inv.recall());
    if (inv.grant() != 0) {
      // The holder's log is applied before the ack: the other mount's call
      // then sees everything this one did there.
      absl::Status s = ns_ != nullptr ? ns_->Recall(inv.grant()) : absl::OkStatus();
      if (!s.ok()) {
        // Not acknowledged, nor anything after it (acks are cumulative):
        // the stream is ended instead. The mount subscribes again only
        // once its log is applied (SubscribeLoop), and that new stream is
        // what ends the server's wait: the other mount's call then sees
        // the log. Meanwhile this mount may still apply it (the recall is
        // pending, not acknowledged).
        LOG(WARNING) << "grant of " << inv.grant() << " recalled, its log not applied: " << s
                     << "; the recall stream is ended until it is";
        applied = false;
        break;
      }
      continue;
    }
    if (leases_ == nullptr) continue;
    if (inv.dir() != 0) {
      leases_->Recall({LeaseCache::Kind::kDir, inv.dir()});
      // Before the ack: a directory stream rewound after the change must
      // list it.
      invalidator->InvalidateListing(inv.dir());
      names = true;
    } else {
      leases_->Recall({LeaseCache::Kind::kAttr, inv.ino()});
      // Attributes only: takes no lock the kernel may hold while it waits
      // for this mount.
      invalidator->InvalidateInode(inv.ino(), /*data=*/false);
    }
  }
  if (last == 0) return;
  // The kernel may hold names of the recalled directories (under the
  // lease, fuse_ops.cc EntryTimeout): all are checked again before their
  // next use, before the ack. (Dropping them one by one would take the
  // directory's lock, which a change in flight here may hold while the
  // server waits for this very ack.)
  if (names) invalidator->InvalidateAllNames();
  if (!applied) {
    absl::MutexLock l(&mu_);
    if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
    return;
  }
  absl::Status s = meta_->AckRecall(last, absl::Seconds(2));
  // Unanswered, the change waits until this mount's leases run out, and the
  // next heartbeat is not renewed: the mount drops everything then.
  if (!s.ok()) LOG(WARNING) << "acknowledging recall " << last << ": " << s;
}

}  // namespace grantfs
