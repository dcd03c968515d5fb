#include "checkpoint/replicator.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "checkpoint/snapshot_sender.h"
#include "common/keepalive.h"
#include "common/status_macros.h"
#include "common/transport.h"
#include "common/wire.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

// The full name of Replication.Stream (proto/replication.proto).
constexpr char kStreamMethod[] = "/grantfs.proto.Replication/Stream";

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

uint64_t RecordBytes(const proto::ReplRecord& r) {
  switch (r.op_case()) {
    case proto::ReplRecord::kMetaBatch:
      return r.meta_batch().size() + 32;
    case proto::ReplRecord::kData:
      return r.data().data().size() + 32;
    default:
      return 32;
  }
}

}  // namespace

Replicator::Replicator(const ReplicatorOptions& options) : options_(options) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 << 20);
  args.SetMaxReceiveMessageSize(64 << 20);
  SetReconnect(&args, 500);
  // A replica that vanished without a reset (cut off) is noticed in ~2 s.
  SetFastKeepalive(&args);
  channel_ = options_.transport.Connect(options_.peer, args);
  stream_method_ = std::make_unique<grpc::internal::RpcMethod>(
      kStreamMethod, grpc::internal::RpcMethod::BIDI_STREAMING, channel_);
  lease_witness_ = options_.granted_at;
  lease_replica_ = absl::InfinitePast();
  last_ack_ = options_.clock->Now();
}

Replicator::~Replicator() { Stop(); }

void Replicator::Start() {
  stream_thread_ = std::thread([this] { StreamLoop(); });
  witness_thread_ = std::thread([this] { WitnessLoop(); });
}

void Replicator::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    stopping_ = true;
    if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
  }
  if (stream_thread_.joinable()) stream_thread_.join();
  if (witness_thread_.joinable()) witness_thread_.join();
}

const char* Replicator::StateName(State s) {
  switch (s) {
    case State::kConnecting:
      return "connecting";
    case State::kSyncing:
      return "syncing";
    case State::kInSync:
      return "in sync";
    case State::kDegraded:
      return "degraded";
  }
  return "?";
}

// --- the change log -------------------------------------------------------------

uint64_t Replicator::Append(proto::ReplRecord record) {
  const uint64_t bytes = RecordBytes(record);
  // Serialized outside the lock; the seq, known only under it, is appended
  // as a last field (room reserved: no reallocation under the lock).
  auto wire = std::make_shared<std::string>();
  wire->reserve(record.ByteSizeLong() + 11);
  record.clear_seq();
  record.AppendToString(wire.get());
  absl::MutexLock l(&mu_);
  const uint64_t seq = ++head_;
  AppendVarintField(proto::ReplRecord::kSeqFieldNumber, seq, wire.get());
  log_.push_back(Entry{seq, std::move(wire), bytes});
  log_bytes_ += bytes;
  TrimLog();
  return seq;
}

void Replicator::TrimLog() {
  while (!log_.empty() && log_bytes_ > options_.retain_bytes) {
    const uint64_t front = log_.front().seq;
    // Never drop what a waiting writer needs, nor (within reason) what the
    // current stream has still to send.
    if (must_wait_ && front > acked_) break;
    if (pinned_ != 0 && front >= pinned_ && log_bytes_ <= 4 * options_.retain_bytes) break;
    log_bytes_ -= log_.front().bytes;
    log_.pop_front();
  }
}

uint64_t Replicator::Head() {
  absl::MutexLock l(&mu_);
  return head_;
}

uint64_t Replicator::AckedSeq() {
  absl::MutexLock l(&mu_);
  return acked_;
}

absl::Status Replicator::WaitReplicated(uint64_t seq) {
  absl::MutexLock l(&mu_);
  auto done = [this, seq]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return fenced_ || stopping_ || !must_wait_ || seq < sync_from_ || acked_ >= seq;
  };
  // A timeout, not a wall-clock deadline: a step of the clock cuts no wait.
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), options_.wait_bound)) {
    LOG(WARNING) << "replication: change " << seq << " not acknowledged by the replica within "
                 << options_.wait_bound << " (acked " << acked_ << ")";
    return absl::UnavailableError("the replica did not acknowledge the change in time");
  }
  if (fenced_) return absl::UnavailableError("this server is no longer the primary");
  if (stopping_ && must_wait_ && acked_ < seq) {
    return absl::UnavailableError("the server is stopping");
  }
  return absl::OkStatus();
}

// --- the stream -----------------------------------------------------------------

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
      auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || fenced_; };
      if (options_.clock->Now() - began > absl::Seconds(2)) backoff = absl::Milliseconds(100);
      mu_.AwaitWithTimeout(absl::Condition(&stop), backoff);
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
    if (!Send(stream.get(), m)) return absl::UnavailableError("stream broken");
  } else {
    LOG(INFO) << "replica " << options_.peer << " (epoch " << rh.epoch() << ", change "
              << rh.applied_seq() << ") gets a snapshot of epoch " << options_.epoch;
    RETURN_IF_ERROR(SendSnapshot(stream.get(), &next));
  }
  {
    absl::MutexLock l(&mu_);
    sent_ = next - 1;
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
        return stopping_ || fenced_ || !stream_up_ || head_ >= next;
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(100));
      if (stopping_ || fenced_ || !stream_up_) break;
      const uint64_t first_kept = log_.empty() ? head_ + 1 : log_.front().seq;
      if (first_kept > next) {
        result = absl::ResourceExhaustedError("the replica fell behind the kept log");
        LOG(WARNING) << "replica " << options_.peer << " needs change " << next
                     << " but the log starts at " << first_kept << ": new snapshot";
        break;
      }
      uint64_t bytes = 0;
      if (!log_.empty()) {
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
  auto pin = [this](uint64_t cut) {
    absl::MutexLock l(&mu_);
    pinned_ = cut + 1;  // the log keeps what follows the cut
  };
  return grantfs::SendSnapshot(
      so, [stream](const proto::ReplMessage& m) { return Send(stream, m); }, pin, start_seq);
}

bool Replicator::CaughtUp() {
  if (head_ - acked_ > 256) return false;
  // Records the replica still needs but the log dropped never come: the
  // stream ends for a new snapshot.
  const uint64_t first_kept = log_.empty() ? head_ + 1 : log_.front().seq;
  if (first_kept > acked_ + 1) return false;
  return LagBytes() <= 16ull << 20;
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
    if (ack.applied_seq() > acked_) acked_ = ack.applied_seq();
    if (state_ != State::kInSync && !must_wait_ && CaughtUp()) {
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

// --- the witness ------------------------------------------------------------------

proto::WitnessRequest Replicator::MakeWitnessRequest(proto::WitnessRequest::Op op) const {
  proto::WitnessRequest req;
  req.set_op(op);
  req.set_epoch(options_.epoch);
  req.set_replica(options_.peer);
  *req.mutable_data() = options_.identity();
  return req;
}

absl::StatusOr<proto::WitnessReply> Replicator::AskWitness(proto::WitnessRequest::Op op) {
  absl::StatusOr<proto::WitnessReply> r = options_.witness_call(MakeWitnessRequest(op));
  if (r.ok() && !r->granted() &&
      (r->state().epoch() != options_.epoch || r->state().primary() != options_.self)) {
    Fence(absl::StrCat("the witness says epoch ", r->state().epoch(), " belongs to ",
                       r->state().primary()));
  }
  return r;
}

void Replicator::Fence(const std::string& why) {
  {
    absl::MutexLock l(&mu_);
    if (fenced_) return;
    fenced_ = true;
    if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
  }
  LOG(WARNING) << "fenced: " << why << "; this server stops being the primary";
  if (options_.on_fenced) options_.on_fenced();
}

void Replicator::WitnessLoop() {
  const absl::Duration tick = options_.lease / 5;
  absl::Time last_degrade_log = absl::InfinitePast();
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || fenced_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stop), tick)) return;
    }
    // The lease.
    const absl::Time sent = options_.clock->Now();
    absl::StatusOr<proto::WitnessReply> r = AskWitness(proto::WitnessRequest::RENEW);
    if (r.ok() && r->granted()) {
      absl::MutexLock l(&mu_);
      lease_witness_ = std::max(lease_witness_, sent);
    }
    // The replica's state, as the witness must know it.
    bool tell_in_sync = false, degrade = false;
    {
      absl::MutexLock l(&mu_);
      if (fenced_) return;
      if (must_wait_ && !witness_knows_in_sync_ && acked_ >= sync_from_ - 1 && stream_up_) {
        tell_in_sync = true;
      }
      const bool waiting = acked_ < head_ && head_ >= sync_from_;
      if (must_wait_ && (!stream_up_ || (waiting && options_.clock->Now() - last_ack_ >
                                                        options_.replica_timeout))) {
        degrade = true;
      }
    }
    if (tell_in_sync) {
      absl::StatusOr<proto::WitnessReply> w = AskWitness(proto::WitnessRequest::IN_SYNC);
      if (w.ok() && w->granted()) {
        absl::MutexLock l(&mu_);
        witness_knows_in_sync_ = true;
        state_ = State::kInSync;
        LOG(INFO) << "replica " << options_.peer << " is in sync (the witness knows)";
      }
    }
    if (degrade) {
      // Writers are waiting for a replica that does not answer. Going on
      // without it needs the witness's word, or the replica might be
      // promoted without the changes acknowledged from now on.
      absl::StatusOr<proto::WitnessReply> w = AskWitness(proto::WitnessRequest::DEGRADE);
      if (w.ok() && w->granted()) {
        absl::MutexLock l(&mu_);
        must_wait_ = false;
        witness_knows_in_sync_ = false;
        state_ = State::kDegraded;
        if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
        LOG(WARNING) << "replica " << options_.peer
                     << " lost; the witness agreed: serving without a replica (degraded) from "
                        "change "
                     << head_;
      } else if (options_.clock->Now() - last_degrade_log > absl::Seconds(5)) {
        last_degrade_log = options_.clock->Now();
        LOG(WARNING) << "replica " << options_.peer
                     << " lost and the witness did not agree to go on without it ("
                     << (w.ok() ? w->reason() : std::string(w.status().message()))
                     << "); writes wait";
      }
    }
  }
}

// --- role ---------------------------------------------------------------------

bool Replicator::Serving(std::string* why) {
  absl::MutexLock l(&mu_);
  return ServingLocked(why);
}

bool Replicator::ServingLocked(std::string* why) const {
  if (fenced_) {
    *why = "fenced; rejoining as replica";
    return false;
  }
  if (handing_over_) {
    *why = "handing over to " + options_.peer;
    return false;
  }
  const absl::Time fresh = std::max(lease_witness_, lease_replica_);
  if (options_.clock->Now() >= fresh + options_.lease) {
    *why = "lease lapsed: neither the witness nor the replica answered";
    return false;
  }
  return true;
}

std::string Replicator::ReplicaState() {
  absl::MutexLock l(&mu_);
  if (state_ == State::kInSync && !stream_up_) return "degraded";
  return StateName(state_);
}

void Replicator::FillStatus(proto::StatusReply* reply) {
  absl::MutexLock l(&mu_);
  // A primary cut off from the witness and the replica still believes in
  // its epoch but accepts nothing: it says so rather than "primary", so that
  // an operator (or a script looking for the primary) is not misled.
  std::string why;
  const bool serving = ServingLocked(&why);
  reply->set_role(fenced_ ? "fenced" : serving || handing_over_ ? "primary" : "isolated");
  reply->set_not_serving(why);
  reply->set_epoch(options_.epoch);
  reply->set_server(options_.self);
  reply->set_peer(options_.peer);
  reply->set_witness(options_.witness);
  reply->set_replica_state(StateName(state_));
  reply->set_log_seq(head_);
  reply->set_acked_seq(acked_);
  reply->set_lag_bytes(LagBytes());
}

absl::StatusOr<proto::MetaDigest> Replicator::ReplicaDigest(uint64_t seq) {
  {
    absl::MutexLock l(&mu_);
    if (state_ != State::kInSync || !stream_up_) {
      return absl::FailedPreconditionError(
          absl::StrCat("no in-sync replica (", StateName(state_), ")"));
    }
    if (acked_ < seq) {
      return absl::FailedPreconditionError(
          absl::StrCat("the replica has not applied change ", seq, " (at ", acked_, ")"));
    }
  }
  grpc::ClientContext ctx;
  options_.transport.AddTo(&ctx);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  proto::DigestRequest req;
  req.set_epoch(options_.epoch);
  req.set_seq(seq);
  proto::MetaDigest reply;
  grpc::Status st = proto::Replication::NewStub(channel_)->Digest(&ctx, req, &reply);
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        absl::StrCat("the replica's digest: ", st.error_message()));
  }
  return reply;
}

absl::Status Replicator::Switchover() {
  {
    absl::MutexLock l(&mu_);
    if (state_ != State::kInSync || !stream_up_) {
      return absl::Status(absl::StatusCode::kFailedPrecondition,
                          absl::StrCat("no in-sync replica (", StateName(state_), ")"));
    }
    handing_over_ = true;
    // Drain: new calls are refused (clients retry); the ones under way
    // finish and are acknowledged by the replica.
    auto drained = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return fenced_ || !stream_up_ || acked_ >= head_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&drained), absl::Seconds(5));
    if (fenced_ || !stream_up_ || acked_ < head_) {
      handing_over_ = false;
      return absl::UnavailableError("the replica did not catch up; switchover abandoned");
    }
  }
  // Each witness call has a short deadline (500 ms); a loaded machine can
  // miss it, so the handover is asked again for up to 3 s. An attempt that
  // the witness granted but whose answer was lost makes the next one find
  // the epoch already handed to the peer: that is the grant.
  const absl::Time give_up = options_.clock->Now() + absl::Seconds(3);
  absl::StatusOr<proto::WitnessReply> r;
  for (;;) {
    r = options_.witness_call(MakeWitnessRequest(proto::WitnessRequest::HANDOVER));
    if (r.ok() && !r->granted() && r->state().epoch() > options_.epoch &&
        r->state().primary() == options_.peer) {
      r->set_granted(true);
    }
    if (r.ok() || !absl::IsUnavailable(r.status()) || options_.clock->Now() >= give_up) break;
    LOG(WARNING) << "switchover: asking the witness again: " << r.status().message();
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (!r.ok() || !r->granted()) {
    absl::MutexLock l(&mu_);
    handing_over_ = false;
    return absl::UnavailableError(absl::StrCat("the witness refused the handover: ",
                                               r.ok() ? r->reason() : r.status().message()));
  }
  LOG(INFO) << "switchover: epoch " << r->state().epoch() << " belongs to " << options_.peer;
  // Ending the stream tells the replica to look at the witness now.
  Fence(absl::StrCat("handed over to ", options_.peer));
  return absl::OkStatus();
}

}  // namespace grantfs
