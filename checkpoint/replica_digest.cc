// The replica's digests of its copy (checkpoint/meta_digest.h): at a digest
// mark of the stream the copy is snapshotted and digested on a thread of
// its own, off the stream; Digest answers the primary's online check with
// the digest kept for the mark.
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/meta_digest.h"
#include "checkpoint/replica.h"
#include "common/transport.h"
#include "rocksdb/db.h"

namespace grantfs {

void Replica::JoinDigest() {
  if (digest_thread_.joinable()) digest_thread_.join();
}

void Replica::StartDigest(uint64_t seq) {
  JoinDigest();  // one at a time (marks are rare: one per online check)
  const rocksdb::Snapshot* snap = db_->GetSnapshot();  // exactly the records before the mark
  rocksdb::DB* db = db_;  // open until CloseCopy, which joins this thread first
  uint64_t epoch;
  {
    absl::MutexLock l(&mu_);
    epoch = epoch_;
    digest_running_ = seq;
  }
  digest_thread_ = std::thread([this, db, snap, epoch, seq] {
    absl::StatusOr<proto::MetaDigest> d = DigestMeta(db, snap, seq);
    db->ReleaseSnapshot(snap);
    absl::MutexLock l(&mu_);
    digests_.push_back({epoch, seq, std::move(d)});
    while (digests_.size() > kKeptDigests) digests_.pop_front();
    digest_running_ = 0;
  });
}

grpc::Status Replica::Digest(grpc::ServerContext* ctx, const proto::DigestRequest* req,
                             proto::MetaDigest* reply) {
  if (grpc::Status auth = options_.transport.Authorize(*ctx, kServerPeer, "replica"); !auth.ok())
    return auth;
  const absl::Time deadline =
      std::min(absl::FromChrono(ctx->deadline()), absl::Now() + absl::Seconds(60));
  absl::MutexLock l(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return digest_running_ != req->seq() || epoch_ != req->epoch();
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  for (const MarkDigest& m : digests_) {
    if (m.epoch != req->epoch() || m.seq != req->seq()) continue;
    if (!m.digest.ok()) {
      return grpc::Status(grpc::StatusCode::DATA_LOSS, std::string(m.digest.status().message()));
    }
    *reply = *m.digest;
    return grpc::Status::OK;
  }
  if (digest_running_ == req->seq() && epoch_ == req->epoch()) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the digest is still being computed");
  }
  if (epoch_ != req->epoch()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("the copy is at epoch ", epoch_, ", not ", req->epoch()));
  }
  return grpc::Status(
      grpc::StatusCode::NOT_FOUND,
      absl::StrCat("no digest kept for change ", req->seq(), " (applied up to ", applied_, ")"));
}

absl::StatusOr<proto::MetaDigest> Replica::ReplicaDigest(uint64_t) {
  return absl::FailedPreconditionError("a replica has no replica");
}

}  // namespace grantfs
