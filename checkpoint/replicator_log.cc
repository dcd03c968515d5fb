// The primary's change log (checkpoint/change_sink.h): every applied change
// gets the next sequence number of the epoch and is kept, serialized once,
// until the replica acknowledged it and the log is over its size; writers
// wait here (WaitReplicated) until the replica has their change.
#include <memory>
#include <string>
#include <utility>

#include "checkpoint/replicator.h"
#include "common/wire.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

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
  appended_bytes_ += bytes;
  log_.push_back(Entry{seq, std::move(wire), bytes, appended_bytes_});
  log_bytes_ += bytes;
  ++stats_.records;
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

ReplicatorStats Replicator::Stats() {
  absl::MutexLock l(&mu_);
  return stats_;
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

}  // namespace grantfs
