// The replica's change stream (Replica::Stream): the primary's hello is
// admitted or refused (stale epoch, another volume's or a newer copy), then
// each message is applied in order (snapshot pieces, metadata batches, data
// records), its chunk files synced, the position saved and the message
// acknowledged.
#include <cerrno>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/replica.h"
#include "checkpoint/replica_copy.h"
#include "common/clock.h"
#include "common/errno_status.h"
#include "common/rocks_room.h"
#include "common/status_macros.h"
#include "common/transport.h"
#include "glog/logging.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace grantfs {

using replica_copy::DbError;
using replica_copy::EncodePosition;
using replica_copy::kPositionKey;

std::string Replica::DataRefusal(const proto::ReplHello& hello) {
  if (!copy_identity_.has_value()) return "";  // nothing to keep: any volume will do
  const proto::VolumeIdentity& mine = *copy_identity_;
  const proto::VolumeIdentity& theirs = hello.identity();
  if (theirs.volume_id() != mine.volume_id()) {
    return absl::StrCat("the primary serves volume ",
                        theirs.volume_id().empty() ? "(none named)" : theirs.volume_id(),
                        " but this copy is of volume ", mine.volume_id());
  }
  if (theirs.data_epoch() < mine.data_epoch()) {
    return absl::StrCat("the primary's data (data epoch ", theirs.data_epoch(),
                        ") is older than this copy (data epoch ", mine.data_epoch(), ")");
  }
  // The same data epoch is the same data only when the copy has it from
  // this primary, in this epoch (a stream resuming). A primary of another
  // epoch at the same data epoch carries another history of the volume
  // (after the witness lost its state): which is newer cannot be told.
  if (theirs.data_epoch() == mine.data_epoch() && hello.epoch() != copy_epoch_) {
    return absl::StrCat("the primary's data (epoch ", hello.epoch(), ") and this copy (epoch ",
                        copy_epoch_, ") are both at data epoch ", mine.data_epoch(),
                        ": two histories of the volume");
  }
  return "";
}

absl::Status Replica::SavePosition() {
  uint64_t epoch, seq;
  {
    absl::MutexLock l(&mu_);
    epoch = epoch_;
    seq = applied_;
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;  // also makes every batch applied before it durable
  rocksdb::Status s = WriteInRoom(
      [&](rocksdb::DB* db) { return db->Put(wo, kPositionKey, EncodePosition(epoch, seq)); });
  if (!s.ok()) return DbError(s, "saving the position");
  return absl::OkStatus();
}

rocksdb::Status Replica::WriteInRoom(const std::function<rocksdb::Status(rocksdb::DB*)>& write) {
  rocksdb::Status s = write(db_);
  if (s.ok() || !IsRocksNoSpace(s)) return s;
  const uint64_t lent = hold_->Lend(kMetadataRoomBytes);
  hold_->Repay(lent);  // RocksDB keeps the room; the next promise grows the hold back
  if (lent == 0) return s;
  LOG(WARNING) << "replica: the data disk is full (" << s.ToString()
               << "); writing the copy's metadata again in room lent from the metadata reserve";
  rocksdb::Status resumed = ResumeAfterRoom(db_);
  return resumed.ok() ? write(db_) : resumed;
}

absl::Status Replica::ApplyChunkRecord(const proto::ReplRecord& rec, ChunkSet* unsynced) {
  absl::Status st = chunks_->ApplyRecord(rec, unsynced);
  // The bytes the primary accepted into a grant are held here too: a
  // write that found the disk full (another program took the free space)
  // borrows them, as on the primary.
  uint64_t want = kWriteRoomMarginBytes;
  if (rec.has_data()) want += rec.data().data().size();
  if (rec.has_allocate()) want += rec.allocate().b();
  uint64_t lent = 0;
  for (int attempt = 0; !st.ok() && ToErrno(st) == ENOSPC && attempt < 3; ++attempt) {
    const uint64_t got = hold_->Lend(want);
    if (got == 0) break;
    lent += got;
    LOG_EVERY_N(WARNING, 100) << "replica: the data disk is full: change " << rec.seq()
                              << " borrows " << got << " bytes of the space hold";
    st = chunks_->ApplyRecord(rec, unsynced);
  }
  hold_->Repay(lent);
  return st;
}

void Replica::CoverPromise() {
  if (!promised_.has_value()) return;
  absl::Status st = hold_->Cover(*promised_);
  if (!st.ok() && !hold_short_) {
    LOG(WARNING) << "replica: the data disk is full: the primary promised " << *promised_
                 << " bytes (grants and the metadata reserve), " << hold_->held()
                 << " are held for them; the primary gives no new grants until there is space ("
                 << st << ")";
  } else if (st.ok() && hold_short_) {
    LOG(INFO) << "replica: the data disk has space again: every promise is held";
  }
  hold_short_ = !st.ok();
}

proto::ReplicaSpace Replica::SpaceForAck() {
  // Also after a loan shrank the hold: no syscall when it covers.
  CoverPromise();
  proto::ReplicaSpace space;
  space.set_room_bytes(room_->Get());
  space.set_hold_short(hold_short_);
  return space;
}

absl::Status Replica::Apply(const proto::ReplRecord& rec, ChunkSet* unsynced) {
  if (db_ == nullptr || chunks_ == nullptr || in_snapshot_) {
    return absl::FailedPreconditionError("a change before the copy exists");
  }
  switch (rec.op_case()) {
    case proto::ReplRecord::kMetaBatch: {
      RETURN_IF_ERROR(replica_copy::CheckBatch(rec.meta_batch()));
      rocksdb::WriteBatch batch(rec.meta_batch());
      rocksdb::Status s =
          WriteInRoom([&](rocksdb::DB* db) { return db->Write(rocksdb::WriteOptions(), &batch); });
      if (!s.ok()) return DbError(s, "applying a batch");
      return absl::OkStatus();
    }
    case proto::ReplRecord::kDigestMark:
      StartDigest(rec.seq());
      return absl::OkStatus();
    case proto::ReplRecord::kPromisedBytes:
      promised_ = rec.promised_bytes();
      CoverPromise();
      return absl::OkStatus();
    case proto::ReplRecord::OP_NOT_SET:
      break;
    default:
      return ApplyChunkRecord(rec, unsynced);
  }
  return absl::InvalidArgumentError(absl::StrCat("change ", rec.seq(), " has no operation"));
}

grpc::Status Replica::Stream(grpc::ServerContext* ctx,
                             grpc::ServerReaderWriter<proto::ReplAck, proto::ReplMessage>* stream) {
  if (grpc::Status auth = options_.transport.Authorize(*ctx, kServerPeer, "replica"); !auth.ok())
    return auth;
  proto::ReplMessage msg;
  ChunkSet unsynced;  // chunk files to sync before the ack
  if (!stream->Read(&msg)) return grpc::Status::OK;
  if (!msg.has_hello() || msg.hello().epoch() == 0) {
    LOG(WARNING) << "replica: a stream from " << ctx->peer() << " without a hello";
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message must be a hello");
  }
  const proto::ReplHello hello = msg.hello();
  uint64_t gen;
  {
    absl::MutexLock l(&mu_);
    std::string refuse;
    bool data = false;  // refused for the primary's data
    if (promoting_ || promoted_ || stopping_) {
      refuse = "this server is taking over";
    } else if (hello.epoch() < max_epoch_) {
      refuse = absl::StrCat("stale epoch ", hello.epoch(), " (seen ", max_epoch_, ")");
    } else if (refuse = DataRefusal(hello); !refuse.empty()) {
      data = true;
    }
    if (data) {
      // The primary retries every second: once a minute in the log.
      LOG_EVERY_N(ERROR, 60) << "replica: refused the stream of " << hello.server() << ": "
                             << refuse << "; keeping the copy in " << options_.data_dir
                             << " (see docs/operations.md, \"Refusals\")";
    } else if (!refuse.empty()) {
      LOG(WARNING) << "replica: refused the stream of " << hello.server() << ": " << refuse;
    }
    if (!refuse.empty()) {
      proto::ReplAck a;
      a.set_error(refuse);
      stream->Write(a);
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, refuse);
    }
    max_epoch_ = hello.epoch();
    gen = ++stream_gen_;
    if (active_ctx_ != nullptr) active_ctx_->TryCancel();  // a newer stream replaces it
    active_ctx_ = ctx;
    primary_ = hello.server();
    last_msg_ = Clock::Monotonic()->Now();
  }
  struct Unregister {
    Replica* r;
    grpc::ServerContext* ctx;
    ~Unregister() {
      absl::MutexLock l(&r->mu_);
      if (r->active_ctx_ == ctx) {
        r->active_ctx_ = nullptr;
        r->state_ = State::kWaiting;
        r->check_now_ = true;  // a handover ends the stream: ask the witness
      }
    }
  } unregister{this, ctx};

  absl::MutexLock apply(&apply_mu_);  // the replaced stream lets go first
  auto current = [&]() {
    absl::MutexLock l(&mu_);
    return gen == stream_gen_ && !promoting_ && !promoted_ && !stopping_;
  };
  if (!current()) return grpc::Status(grpc::StatusCode::ABORTED, "replaced");
  {
    proto::ReplAck a;
    {
      absl::MutexLock l(&mu_);
      a.mutable_hello()->set_epoch(epoch_);
      a.mutable_hello()->set_server(options_.self);
      a.mutable_hello()->set_applied_seq(epoch_ == hello.epoch() ? applied_ : 0);
    }
    if (!stream->Write(a)) return grpc::Status::OK;
  }
  LOG(INFO) << "replica: stream from " << hello.server() << " (epoch " << hello.epoch() << ")";

  absl::Status st;
  uint64_t snapshot_epoch = 0, snapshot_start = 0;
  while (stream->Read(&msg)) {
    if (!current()) break;
    {
      absl::MutexLock l(&mu_);
      last_msg_ = Clock::Monotonic()->Now();
      busy_ = true;
    }
    struct NotBusy {
      Replica* r;
      ~NotBusy() {
        absl::MutexLock l(&r->mu_);
        r->busy_ = false;
        r->last_msg_ = Clock::Monotonic()->Now();
      }
    } not_busy{this};
    if (msg.has_hello()) {
      const proto::ReplHello& h = msg.hello();
      if (h.has_promised_bytes()) promised_ = h.promised_bytes();  // held below
      if (h.snapshot()) {
        LOG(INFO) << "replica: receiving a snapshot of epoch " << h.epoch() << " (changes from "
                  << h.start_seq() << " follow)";
        st = BeginSnapshot();
        snapshot_epoch = h.epoch();
        snapshot_start = h.start_seq();
      } else {
        absl::MutexLock l(&mu_);
        if (epoch_ != h.epoch() || applied_ + 1 != h.start_seq()) {
          st = absl::FailedPreconditionError(absl::StrCat("resume at ", h.start_seq(), " of epoch ",
                                                          h.epoch(), " but the copy is at ",
                                                          applied_, " of epoch ", epoch_));
        } else {
          state_ = State::kInSync;
        }
      }
    }
    if (msg.has_hello() && msg.hello().has_promised_bytes())
      CoverPromise();  // after a snapshot began
    for (const proto::SnapshotPiece& p : msg.snapshot()) {
      if (!st.ok()) break;
      st = WritePiece(p);
    }
    if (st.ok() && msg.snapshot_done()) {
      st = FinishSnapshot(snapshot_epoch, snapshot_start);
      if (st.ok()) LOG(INFO) << "replica: snapshot applied; at change " << snapshot_start - 1;
    }
    if (!st.ok()) break;
    if (in_snapshot_) continue;  // acknowledged only once whole (no ack reader meanwhile)
    bool identity_changed = false;
    for (const proto::ReplRecord& r : msg.records()) {
      uint64_t expect;
      {
        absl::MutexLock l(&mu_);
        expect = applied_ + 1;
      }
      if (r.seq() != expect) {
        st = absl::FailedPreconditionError(
            absl::StrCat("change ", r.seq(), " arrived, expected ", expect));
        break;
      }
      st = Apply(r, &unsynced);
      if (!st.ok()) break;
      // A batch holding the key is the primary's new data epoch (rare: at
      // its start); a name that merely contains it costs one extra read.
      identity_changed |=
          r.has_meta_batch() && absl::StrContains(r.meta_batch(), options_.identity_key);
      absl::MutexLock l(&mu_);
      applied_ = r.seq();
    }
    if (st.ok() && identity_changed) st = LoadIdentity();
    if (!st.ok()) break;
    // (Nothing to sync before the copy exists: chunks_ is null then.)
    if (!unsynced.empty()) st = chunks_->SyncChunks(unsynced);
    unsynced.clear();
    if (!st.ok()) break;
    if (msg.records_size() > 0) {
      st = SavePosition();
      if (!st.ok()) break;
    }
    proto::ReplAck a;
    *a.mutable_space() = SpaceForAck();
    {
      absl::MutexLock l(&mu_);
      a.set_applied_seq(applied_);
      busy_ = false;  // a blocked ack write is silence again
      last_msg_ = Clock::Monotonic()->Now();
    }
    a.set_echo_sent_ns(msg.sent_ns());
    if (!stream->Write(a)) break;
    msg.Clear();
  }
  if (!st.ok()) {
    LOG(ERROR) << "replica: giving up the stream of " << hello.server() << ": " << st;
    proto::ReplAck a;
    a.set_error(std::string(st.message()));
    stream->Write(a);
    if (in_snapshot_) {
      // A half-copied volume is no copy: it stays empty until the next one.
      CloseCopy();
      in_snapshot_ = false;
    }
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, std::string(st.message()));
  }
  if (in_snapshot_) {
    LOG(WARNING) << "replica: the stream ended in the middle of a snapshot";
    CloseCopy();
    in_snapshot_ = false;
  }
  LOG(INFO) << "replica: stream from " << hello.server() << " ended";
  return grpc::Status::OK;
}

}  // namespace grantfs
