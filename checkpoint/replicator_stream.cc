// The primary's stream to the replica (proto Replication.Stream): one
// thread connects, says hello, sends a snapshot when the replica has no
// usable copy (checkpoint/snapshot_sender.h), then the log's records in
// order; another reads the acknowledgements, which move the replica's
// state (syncing, in sync) and renew the primary's lease.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "checkpoint/replicator.h"
#include "checkpoint/snapshot_sender.h"
#include "common/keepalive.h"
#include "common/status_macros.h"
#include "common/transport.h"
#include "common/wire.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

// Writes one message, serialized here (one copy, as gRPC's own serializer
// would make).
bool Send(grpc::ClientReaderWriter<grpc::ByteBuffer, proto::ReplAck>* stream,
          const proto::ReplMessage& m) {
  grpc::Slice slice(m.ByteSizeLong());
  m.SerializeWithCachedSizesToArray(const_cast<uint8_t*>(slice.begin()));
  grpc::ByteBuffer bb(&slice, 1);
  return stream->Write(bb);
}

// A ReplMessage of `records` (wire forms) and sent_ns, as a ByteBuffer:
// records of 4 KiB or more by reference, smaller ones copied together.
grpc::ByteBuffer RecordsMessage(const std::vector<std::shared_ptr<const std::string>>& records,
                                int64_t sent_ns) {
  std::vector<grpc::Slice> slices;
  std::string small;
  for (const auto& w : records) {
    AppendBytesKey(proto::ReplMessage::kRecordsFieldNumber, w->size(), &small);
    if (w->size() < 4096) {
      small += *w;
    } else {
      slices.emplace_back(small);
      small.clear();
      slices.push_back(SharedSlice(w));
    }
  }
  AppendVarintField(proto::ReplMessage::kSentNsFieldNumber, static_cast<uint64_t>(sent_ns), &small);
  slices.emplace_back(small);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace

void Replicator::StreamLoop() {
  absl::Duration backoff = absl::Milliseconds(100);
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (stopping_ || fenced_) return;
    }
    const absl::Time began = options_.clock->Now();
    absl::Status st = RunStream();
    {
      absl::MutexLock l(&mu_);
      stream_up_ = false;
      pinned_ = 0;
      if (state_ == State::kSyncing) state_ = State::kConnecting;
      if (!st.ok()) last_error_ = std::string(st.message());
      if (stopping_ || fenced_) return;
      if (options_.clock->Now() - began > absl::Seconds(2)) backoff = absl::Milliseconds(100);
      // The wait polls the connection attempt to the replica.
      WaitToRetry(channel_.get(), backoff, &mu_,
                  [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || fenced_; });
    }
    VLOG(1) << "replication stream to " << options_.peer << " ended: " << st;
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

absl::Status Replicator::RunStream() {
  grpc::ClientContext ctx;
  options_.transport.AddTo(&ctx);
  uint64_t id;
  {
    absl::MutexLock l(&mu_);
    if (stopping_ || fenced_) return absl::CancelledError("stopping");
    stream_ctx_ = &ctx;
    id = ++stream_id_;
    last_ack_ = options_.clock->Now();
  }
  struct Unregister {
    Replicator* r;
    ~Unregister() {
      absl::MutexLock l(&r->mu_);
      r->stream_ctx_ = nullptr;
    }
  } unregister{this};

  std::unique_ptr<Stream> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, proto::ReplAck>::Create(
          channel_.get(), *stream_method_, &ctx));
  proto::ReplMessage hello;
  hello.mutable_hello()->set_epoch(options_.epoch);
  hello.mutable_hello()->set_server(options_.self);
  *hello.mutable_hello()->mutable_identity() = options_.identity();
  if (!Send(stream.get(), hello)) return absl::UnavailableError("replica unreachable");
  proto::ReplAck first;
  if (!stream->Read(&first)) {
    grpc::Status s = stream->Finish();
    return absl::UnavailableError(absl::StrCat("replica refused the stream: ", s.error_message()));
  }
  if (!first.error().empty()) {
    bool again;  // the same refusal as last time: once in the log is enough
    {
      absl::MutexLock l(&mu_);
      again = last_error_ == first.error();
    }
    if (!again) {
      LOG(WARNING) << "replica " << options_.peer << " refused the stream: " << first.error();
    }
    stream->WritesDone();
    stream->Finish();
    return absl::FailedPreconditionError(first.error());
  }
  const proto::ReplHello& rh = first.hello();
  uint64_t next;
  bool resume;
  {
    absl::MutexLock l(&mu_);
    const uint64_t first_kept = log_.empty() ? head_ + 1 : log_.front().seq;
    resume = rh.epoch() == options_.epoch && rh.applied_seq() <= head_ &&
             rh.applied_seq() + 1 >= first_kept;
    if (resume) {
      next = rh.applied_seq() + 1;
      acked_ = std::max(acked_, rh.applied_seq());
      pinned_ = next;
      if (!must_wait_) state_ = State::kSyncing;
    } else {
      if (must_wait_) {
        // Writers still count on this replica; it must first be given up
        // with the witness's word (WitnessLoop) before it is rebuilt.
        return absl::UnavailableError("replica lost its state; degrading first");
      }
      state_ = State::kSyncing;
      acked_ = 0;
    }
    stream_up_ = true;
  }
  if (resume) {
    LOG(INFO) << "replica " << options_.peer << " resumes at change " << next << " of epoch "
              << options_.epoch;
    proto::ReplMessage m;
    m.mutable_hello()->set_epoch(options_.epoch);
    m.mutable_hello()->set_start_seq(next);
    // Read after the replica's position: newer promises follow as records.
    if (std::optional<uint64_t> p = NewestPromise()) m.mutable_hello()->set_promised_bytes(*p);
    if (!Send(stream.get(), m)) return absl::UnavailableError("stream broken");
  } else {
    LOG(INFO) << "replica " << options_.peer << " (epoch " << rh.epoch() << ", change "
              << rh.applied_seq() << ") gets a snapshot of epoch " << options_.epoch;
    RETURN_IF_ERROR(SendSnapshot(stream.get(), &next));
  }
  {
    absl::MutexLock l(&mu_);
    sent_ = next - 1;
    unacked_messages_.clear();
    replica_space_.reset();
  }

  std::thread acks([this, s = stream.get(), id] { AckLoop(s, id); });
  absl::Status result;
  // Ships records as they come; an empty message every 100 ms is the
  // heartbeat that keeps the replica from claiming the epoch.
  for (;;) {
    std::vector<std::shared_ptr<const std::string>> batch;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this, next]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || fenced_ || !stream_up_ || (head_ >= next && !HoldForGroup(next));
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(100));
      if (stopping_ || fenced_ || !stream_up_) break;
      // Still held for the group after 100 ms: a heartbeat only.
      const bool hold = HoldForGroup(next);
      const uint64_t first_kept = log_.empty() ? head_ + 1 : log_.front().seq;
      if (first_kept > next) {
        result = absl::ResourceExhaustedError("the replica fell behind the kept log");
        LOG(WARNING) << "replica " << options_.peer << " needs change " << next
                     << " but the log starts at " << first_kept << ": new snapshot";
        break;
      }
      uint64_t bytes = 0;
      if (!log_.empty() && !hold) {
        for (size_t i = next - log_.front().seq; i < log_.size(); ++i) {
          if (bytes > 0 && bytes + log_[i].bytes > options_.max_message_bytes) break;
          bytes += log_[i].bytes;
          batch.push_back(log_[i].wire);
        }
      }
      pinned_ = next;
    }
    grpc::ByteBuffer m = RecordsMessage(batch, options_.clock->NowNanos());
    if (!stream->Write(m)) {
      result = absl::UnavailableError("stream to the replica broken");
      break;
    }
    next += batch.size();
    absl::MutexLock l(&mu_);
    sent_ = next - 1;
    while (!unacked_messages_.empty() && unacked_messages_.front() <= acked_) {
      unacked_messages_.pop_front();
    }
    if (!batch.empty()) {
      ++stats_.messages;
      unacked_messages_.push_back(next - 1);
    }
  }
  ctx.TryCancel();
  acks.join();
  grpc::Status s = stream->Finish();
  {
    absl::MutexLock l(&mu_);
    stream_up_ = false;
  }
  if (result.ok() && !s.ok()) result = absl::UnavailableError(s.error_message());
  LOG(WARNING) << "replication stream to " << options_.peer << " ended: " << result;
  return result;
}

absl::Status Replicator::SendSnapshot(Stream* stream, uint64_t* start_seq) {
  SnapshotOptions so;
  so.data_dir = options_.data_dir;
  so.epoch = options_.epoch;
  so.chunk_size = options_.chunk_size;
  so.capacity_bytes = options_.capacity_bytes;
  so.max_message_bytes = options_.max_message_bytes;
  so.checkpoint = options_.checkpoint;
  so.clock = options_.clock;
  so.peer = options_.peer;
  so.promised_bytes = [this] { return NewestPromise(); };
  so.progress = [this](uint64_t done, uint64_t total) {
    absl::MutexLock l(&mu_);
    resync_.done_bytes = done;
    resync_.total_bytes = total;
  };
  auto pin = [this](uint64_t cut) {
    absl::MutexLock l(&mu_);
    pinned_ = cut + 1;  // the log keeps what follows the cut
  };
  {
    absl::MutexLock l(&mu_);
    resync_ = Resync();
    resync_.active = true;
    resync_.started = options_.clock->Now();
  }
  absl::Status s = grantfs::SendSnapshot(
      so, [stream](const proto::ReplMessage& m) { return Send(stream, m); }, pin, start_seq);
  absl::MutexLock l(&mu_);
  resync_.active = false;
  resync_.ended = options_.clock->Now();
  return s;
}

uint64_t Replicator::Promise(uint64_t bytes) {
  absl::MutexLock p(&promise_mu_);
  if (promised_ == bytes) return promise_seq_;
  promised_ = bytes;
  proto::ReplRecord rec;
  rec.set_promised_bytes(bytes);
  promise_seq_ = Append(std::move(rec));
  return promise_seq_;
}

std::optional<uint64_t> Replicator::NewestPromise() {
  absl::MutexLock p(&promise_mu_);
  return promised_;
}

std::optional<uint64_t> Replicator::ReplicaRoom() {
  absl::MutexLock l(&mu_);
  // Only a replica that writers wait for must store what is accepted.
  if (!must_wait_ || !replica_space_.has_value()) return std::nullopt;
  return replica_space_->room_bytes();
}

bool Replicator::ReplicaHolds(uint64_t seq) {
  absl::MutexLock l(&mu_);
  // Its acknowledgement of `seq` may have come before it said anything of
  // its disk (a resumed stream): wait for a word on it, within the bound
  // writers wait for the replica.
  auto known = [this, seq]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !must_wait_ || seq < sync_from_ || stopping_ || fenced_ ||
           (replica_space_.has_value() && replica_space_seq_ >= seq);
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&known), options_.wait_bound)) return false;
  if (!must_wait_ || seq < sync_from_) return true;  // a replica not in sync holds nothing
  if (stopping_ || fenced_) return false;
  return !replica_space_->hold_short();
}

bool Replicator::CaughtUp() {
  if (head_ - acked_ > 256) return false;
  // Records the replica still needs but the log dropped never come: the
  // stream ends for a new snapshot.
  const uint64_t first_kept = log_.empty() ? head_ + 1 : log_.front().seq;
  if (first_kept > acked_ + 1) return false;
  return LagBytes() <= 16ull << 20;
}

bool Replicator::HoldForGroup(uint64_t next) const {
  // Only writers waiting for the replica gain from a group; a replica
  // catching up takes messages as full as they come.
  if (options_.group_bytes == 0 || !must_wait_) return false;
  // Fewer than group_window messages unacknowledged: send. (Seqs ascend, so
  // the window is full when its oldest entry is still above acked_.)
  const size_t window = static_cast<size_t>(std::max(1, options_.group_window));
  const size_t n = unacked_messages_.size();
  if (n < window || unacked_messages_[n - window] <= acked_) return false;
  if (log_.empty() || next < log_.front().seq || next > head_) return false;
  const Entry& first = log_[next - log_.front().seq];
  return appended_bytes_ - (first.end_bytes - first.bytes) < options_.group_bytes;
}

uint64_t Replicator::LagBytes() {
  uint64_t lag = 0;
  for (auto it = log_.rbegin(); it != log_.rend() && it->seq > acked_; ++it) lag += it->bytes;
  return lag;
}

void Replicator::AckLoop(Stream* stream, uint64_t stream_id) {
  proto::ReplAck ack;
  while (stream->Read(&ack)) {
    absl::MutexLock l(&mu_);
    if (!ack.error().empty()) {
      LOG(WARNING) << "replica " << options_.peer << ": " << ack.error();
      last_error_ = ack.error();
      break;
    }
    last_ack_ = options_.clock->Now();
    if (ack.echo_sent_ns() != 0) {
      lease_replica_ = std::max(lease_replica_, absl::FromUnixNanos(ack.echo_sent_ns()));
    }
    if (ack.applied_seq() > acked_) {
      acked_ = ack.applied_seq();
      ++stats_.round_trips;
    }
    if (ack.has_space()) {
      const bool was_short = replica_space_.has_value() && replica_space_->hold_short();
      if (ack.space().hold_short() != was_short) {
        if (was_short) {
          LOG(INFO) << "replica " << options_.peer << " holds every promise again";
        } else {
          LOG(WARNING) << "replica " << options_.peer << ": its data disk cannot hold what "
                       << "this server promised (grants and the metadata reserve); no new "
                       << "grants until it can";
        }
      }
      replica_space_ = ack.space();
      replica_space_seq_ = ack.applied_seq();
    }
    // A replica whose disk cannot hold what this server promised is not in
    // sync: it could not store what was accepted into the grants.
    const bool holds = replica_space_.has_value() && !replica_space_->hold_short();
    if (state_ != State::kInSync && !must_wait_ && holds && CaughtUp()) {
      // Caught up: from the next change on, writers wait for the replica.
      // The witness hears "in sync" once everything up to here is acked.
      must_wait_ = true;
      sync_from_ = head_ + 1;
      LOG(INFO) << "replica " << options_.peer << " caught up at change " << acked_
                << "; replication is synchronous from change " << sync_from_;
    }
    ack.Clear();
  }
  absl::MutexLock l(&mu_);
  if (stream_id_ == stream_id) stream_up_ = false;
}

}  // namespace grantfs
