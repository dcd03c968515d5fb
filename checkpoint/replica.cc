#include "checkpoint/replica.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/copy_files.h"
#include "checkpoint/meta_digest.h"
#include "common/big_endian.h"
#include "common/clock.h"
#include "common/rocks_logger.h"
#include "common/status_macros.h"
#include "common/transport.h"
#include "glog/logging.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace grantfs {
namespace {

constexpr char kPositionKey[] = "Rposition";  // epoch, seq (big-endian)
// kPartialSnapshotFile (checkpoint/copy_files.h) is present from the start of a
// snapshot until the copy is whole: a copy cut short (stream broken, crash)
// is no copy and must not be opened.

// fsyncs directory `dir` (a created or removed name in it is durable).
absl::Status SyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError("open " + dir + ": " + strerror(errno));
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) return absl::InternalError("fsync " + dir + ": " + strerror(err));
  return absl::OkStatus();
}

// Removes the copy: meta/ and chunks/.
absl::Status RemoveCopy(const std::string& data_dir) {
  std::error_code ec;
  for (const char* sub : {"/meta", "/chunks"}) {
    std::filesystem::remove_all(data_dir + sub, ec);
    if (ec) return absl::InternalError("removing " + data_dir + sub + ": " + ec.message());
  }
  return absl::OkStatus();
}

std::string EncodePosition(uint64_t epoch, uint64_t seq) {
  std::string s;
  PutBigEndian64(&s, epoch);
  PutBigEndian64(&s, seq);
  return s;
}

bool DecodePosition(const std::string& s, uint64_t* epoch, uint64_t* seq) {
  if (s.size() != 16) return false;
  *epoch = GetBigEndian64(s.data());
  *seq = GetBigEndian64(s.data() + 8);
  return true;
}

absl::Status DbError(const rocksdb::Status& s, const char* what) {
  LOG(ERROR) << "replica: " << what << ": " << s.ToString();
  return absl::InternalError(absl::StrCat(what, ": ", s.ToString()));
}

// A snapshot path must stay inside meta/ or chunks/.
bool SafeRelPath(const std::string& p) {
  if (!absl::StartsWith(p, "meta/") && !absl::StartsWith(p, "chunks/")) return false;
  return !absl::StrContains(p, "..") && !absl::StrContains(p, "//") && p.back() != '/';
}

}  // namespace

absl::StatusOr<std::unique_ptr<Replica>> Replica::Open(const ReplicaOptions& options) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("data dir is empty");
  if (!options.open_chunks) return absl::InvalidArgumentError("no way to open the chunk files");
  if (options.identity_key.empty()) return absl::InvalidArgumentError("identity key is empty");
  // Not created here: a data disk that is not mounted must not pass for an
  // empty copy (server/data_dir.h).
  if (!std::filesystem::is_directory(options.data_dir)) {
    return absl::FailedPreconditionError("data directory " + options.data_dir +
                                         " does not exist or is not a directory");
  }
  std::unique_ptr<Replica> r(new Replica(options));
  absl::MutexLock l(&r->apply_mu_);
  if (std::filesystem::exists(options.data_dir + "/" + kPartialSnapshotFile)) {
    LOG(WARNING) << "replica: the copy in " << options.data_dir
                 << " is an unfinished snapshot; starting empty";
    RETURN_IF_ERROR(RemoveCopy(options.data_dir));
    if (unlink((options.data_dir + "/" + kPartialSnapshotFile).c_str()) != 0) {
      return absl::InternalError(
          absl::StrCat("unlink ", kPartialSnapshotFile, ": ", strerror(errno)));
    }
    RETURN_IF_ERROR(SyncDir(options.data_dir));
  }
  if (std::filesystem::exists(options.data_dir + "/meta/CURRENT")) {
    RETURN_IF_ERROR(r->OpenCopy());
  }
  RETURN_IF_ERROR(r->CheckBoot());
  absl::MutexLock m(&r->mu_);
  LOG(INFO) << "replica: copy in " << options.data_dir << " at epoch " << r->epoch_ << ", change "
            << r->applied_;
  r->last_msg_ = Clock::Monotonic()->Now();
  return r;
}

Replica::~Replica() {
  Stop();
  absl::MutexLock l(&apply_mu_);
  CloseCopy();
}

// File data is acknowledged from the page cache (as on the primary). If the
// machine restarted since the copy was last used, what the page cache held
// may be gone while the saved position says it was applied: such a copy
// must not resume nor take over. It is rebuilt by a snapshot.
absl::Status Replica::CheckBoot() {
  std::string now_boot;
  {
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::getline(f, now_boot);
  }
  if (now_boot.empty()) return absl::OkStatus();  // no boot id: nothing to compare
  const std::string path = options_.data_dir + "/" + kReplicaBootFile;
  std::string was;
  {
    std::ifstream f(path);
    std::getline(f, was);
  }
  {
    absl::MutexLock l(&mu_);
    if (!was.empty() && was != now_boot && epoch_ != 0) {
      LOG(WARNING) << "replica: the machine restarted since the copy (epoch " << epoch_
                   << ", change " << applied_
                   << ") was last used; file data it acknowledged from the page cache may be "
                      "lost, so it will be rebuilt by a snapshot and cannot take over before";
      epoch_ = 0;
      applied_ = 0;
    }
  }
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError("open " + tmp + ": " + strerror(errno));
  const std::string line = now_boot + "\n";
  const bool ok =
      write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && fsync(fd) == 0;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError("writing " + path + ": " + strerror(errno));
  }
  return absl::OkStatus();
}

absl::Status Replica::OpenCopy() {
  rocksdb::Options o;
  o.create_if_missing = false;
  o.max_background_jobs = 2;
  o.info_log = NewRocksLogger();  // not meta/LOG (common/rocks_logger.h)
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, options_.data_dir + "/meta", &db);
  if (!s.ok()) return DbError(s, "opening the copy");
  db_ = db;
  std::string v;
  uint64_t epoch = 0, seq = 0;
  s = db_->Get(rocksdb::ReadOptions(), kPositionKey, &v);
  if (s.ok() && !DecodePosition(v, &epoch, &seq)) {
    return absl::DataLossError("corrupt replica position");
  }
  if (!s.ok() && !s.IsNotFound()) return DbError(s, "reading the position");
  ASSIGN_OR_RETURN(chunks_, options_.open_chunks(options_.data_dir + "/chunks"));
  RETURN_IF_ERROR(LoadIdentity());
  absl::MutexLock l(&mu_);
  epoch_ = epoch;
  applied_ = seq;
  copy_epoch_ = epoch;
  max_epoch_ = std::max(max_epoch_, epoch);
  return absl::OkStatus();
}

absl::Status Replica::LoadIdentity() {
  std::optional<proto::VolumeIdentity> id;
  if (db_ != nullptr) {
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), options_.identity_key, &v);
    if (s.ok()) {
      id.emplace();
      if (!id->ParseFromString(v) || id->volume_id().empty()) {
        return absl::DataLossError("corrupt volume identity in the copy");
      }
    } else if (!s.IsNotFound()) {
      return DbError(s, "reading the volume identity");
    }
  }
  absl::MutexLock l(&mu_);
  copy_identity_ = std::move(id);
  return absl::OkStatus();
}

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

proto::WitnessRequest Replica::MakeWitnessRequest(proto::WitnessRequest::Op op, uint64_t epoch) {
  proto::WitnessRequest req;
  req.set_op(op);
  req.set_epoch(epoch);
  absl::MutexLock l(&mu_);
  if (copy_identity_.has_value()) {
    *req.mutable_data() = *copy_identity_;
  } else if (db_ != nullptr) {
    req.mutable_data();  // a copy from before identities: data of no known volume
  }
  return req;
}

void Replica::CloseCopy() {
  JoinDigest();
  if (piece_fd_ >= 0) close(piece_fd_);
  piece_fd_ = -1;
  if (db_ != nullptr) {
    db_->SyncWAL();
    db_->Close();
    delete db_;
    db_ = nullptr;
  }
  chunks_.reset();
}

void Replica::Start() {
  watchdog_ = std::thread([this] { Watchdog(); });
}

void Replica::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    stopping_ = true;
    if (active_ctx_ != nullptr) active_ctx_->TryCancel();
  }
  if (watchdog_.joinable()) watchdog_.join();
}

uint64_t Replica::epoch() {
  absl::MutexLock l(&mu_);
  return epoch_;
}

uint64_t Replica::applied_seq() {
  absl::MutexLock l(&mu_);
  return applied_;
}

// --- applying -----------------------------------------------------------------

absl::Status Replica::BeginSnapshot() {
  CloseCopy();
  in_snapshot_ = true;
  {
    absl::MutexLock l(&mu_);
    epoch_ = 0;
    applied_ = 0;
    copy_identity_.reset();
    copy_epoch_ = 0;
    state_ = State::kSyncing;
  }
  // Marked before the old copy goes: from here until FinishSnapshot the
  // directory holds no copy, whatever files it has.
  const std::string mark = options_.data_dir + "/" + kPartialSnapshotFile;
  int fd = open(mark.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError("create " + mark + ": " + strerror(errno));
  close(fd);
  RETURN_IF_ERROR(SyncDir(options_.data_dir));
  RETURN_IF_ERROR(RemoveCopy(options_.data_dir));
  std::error_code ec;
  for (const char* sub : {"/meta", "/chunks"}) {
    std::filesystem::create_directories(options_.data_dir + sub, ec);
    if (ec) return absl::InternalError("mkdir " + options_.data_dir + sub + ": " + ec.message());
  }
  return absl::OkStatus();
}

absl::Status Replica::WritePiece(const proto::SnapshotPiece& piece) {
  if (!in_snapshot_) return absl::InvalidArgumentError("snapshot piece outside a snapshot");
  if (!SafeRelPath(piece.path())) {
    return absl::InvalidArgumentError("bad snapshot path '" + piece.path() + "'");
  }
  const std::string path = options_.data_dir + "/" + piece.path();
  if (piece_fd_ < 0 || piece_path_ != path) {
    if (piece_fd_ >= 0) close(piece_fd_);
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    piece_fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (piece_fd_ < 0) return absl::InternalError("open " + path + ": " + strerror(errno));
    piece_path_ = path;
  }
  if (piece.eof()) {
    // Holes were not sent: the size comes last.
    int rc = ftruncate(piece_fd_, static_cast<off_t>(piece.offset()));
    close(piece_fd_);
    piece_fd_ = -1;
    if (rc != 0) return absl::InternalError("ftruncate " + path + ": " + strerror(errno));
    return absl::OkStatus();
  }
  size_t done = 0;
  const std::string& d = piece.data();
  while (done < d.size()) {
    ssize_t w = pwrite(piece_fd_, d.data() + done, d.size() - done, piece.offset() + done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return absl::InternalError("write " + path + ": " + strerror(errno));
    done += w;
  }
  return absl::OkStatus();
}

absl::Status Replica::FinishSnapshot(uint64_t epoch, uint64_t start_seq) {
  if (!in_snapshot_) return absl::InvalidArgumentError("snapshot end without a snapshot");
  if (piece_fd_ >= 0) close(piece_fd_);
  piece_fd_ = -1;
  // Every copied file on disk before the copy counts as applied.
  int dfd = open(options_.data_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    syncfs(dfd);
    close(dfd);
  }
  RETURN_IF_ERROR(OpenCopy());
  in_snapshot_ = false;
  {
    absl::MutexLock l(&mu_);
    epoch_ = epoch;
    applied_ = start_seq - 1;
    copy_epoch_ = epoch;
    state_ = State::kInSync;
  }
  RETURN_IF_ERROR(SavePosition());
  // The copy is whole (and its position durable): no longer partial.
  if (unlink((options_.data_dir + "/" + kPartialSnapshotFile).c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("unlink ", kPartialSnapshotFile, ": ", strerror(errno)));
  }
  return SyncDir(options_.data_dir);
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
  rocksdb::Status s = db_->Put(wo, kPositionKey, EncodePosition(epoch, seq));
  if (!s.ok()) return DbError(s, "saving the position");
  return absl::OkStatus();
}

absl::Status Replica::Apply(const proto::ReplRecord& rec, ChunkSet* unsynced) {
  if (db_ == nullptr || chunks_ == nullptr || in_snapshot_) {
    return absl::FailedPreconditionError("a change before the copy exists");
  }
  switch (rec.op_case()) {
    case proto::ReplRecord::kMetaBatch: {
      rocksdb::WriteBatch batch(rec.meta_batch());
      rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
      if (!s.ok()) return DbError(s, "applying a batch");
      return absl::OkStatus();
    }
    case proto::ReplRecord::kDigestMark:
      StartDigest(rec.seq());
      return absl::OkStatus();
    case proto::ReplRecord::OP_NOT_SET:
      break;
    default:
      return chunks_->ApplyRecord(rec, unsynced);
  }
  return absl::InvalidArgumentError(absl::StrCat("change ", rec.seq(), " has no operation"));
}

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
    for (const auto& [ino, index] : unsynced) {
      st = chunks_->SyncChunk(ino, index);
      if (!st.ok()) break;
    }
    unsynced.clear();
    if (!st.ok()) break;
    if (msg.records_size() > 0) {
      st = SavePosition();
      if (!st.ok()) break;
    }
    proto::ReplAck a;
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

// --- failover -----------------------------------------------------------------

void Replica::Watchdog() {
  for (;;) {
    bool claim;
    {
      absl::MutexLock l(&mu_);
      auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || promoted_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stop), absl::Milliseconds(100))) return;
      // Time spent applying (a slow fsync, the end of a snapshot) is not
      // the primary's silence.
      const bool silent =
          !busy_ && Clock::Monotonic()->Now() - last_msg_ > options_.failover_timeout;
      if (!silent && !check_now_) continue;
      const bool streaming = active_ctx_ != nullptr;
      check_now_ = false;
      // A stream ended and the primary has already opened the next one: it
      // is alive, and asking the witness would cancel the new stream.
      if (!silent && streaming) continue;
      claim = silent;
      // An empty copy, or one of an older epoch, can never take over.
      if (epoch_ == 0 && !claim) continue;
    }
    if (TryPromote(claim)) return;
  }
}

bool Replica::TryPromote(bool claim) {
  uint64_t epoch;
  {
    absl::MutexLock l(&mu_);
    if (epoch_ == 0) return false;
    promoting_ = true;
    if (active_ctx_ != nullptr) active_ctx_->TryCancel();
    epoch = epoch_;
  }
  auto give_up = [this]() {
    absl::MutexLock l(&mu_);
    promoting_ = false;
    return false;
  };
  absl::MutexLock apply(&apply_mu_);  // nothing is applied from here on
  {
    // The stream may have changed the copy meanwhile (a snapshot began).
    absl::MutexLock l(&mu_);
    epoch = epoch_;
  }
  if (epoch == 0) return give_up();
  absl::StatusOr<proto::WitnessReply> r =
      options_.witness_call(MakeWitnessRequest(proto::WitnessRequest::GET, epoch));
  if (!r.ok()) {
    LOG_EVERY_N(WARNING, 20) << "replica: witness unreachable: " << r.status();
    return give_up();
  }
  uint64_t granted = 0;
  if (r->state().primary() == options_.self && r->state().epoch() > epoch) {
    granted = r->state().epoch();  // handed over to this server (switchover)
    LOG(INFO) << "replica: the primary handed epoch " << granted << " over to this server";
  } else if (claim && r->state().epoch() == epoch) {
    absl::StatusOr<proto::WitnessReply> c =
        options_.witness_call(MakeWitnessRequest(proto::WitnessRequest::CLAIM, epoch));
    if (!c.ok() || !c->granted()) {
      LOG_EVERY_N(INFO, 10) << "replica: claim of epoch " << epoch + 1 << " not granted: "
                            << (c.ok() ? c->reason() : std::string(c.status().message()));
      return give_up();
    }
    granted = c->state().epoch();
    LOG(WARNING) << "replica: the primary is gone; the witness granted epoch " << granted
                 << " to this server";
  } else {
    if (claim && r->state().epoch() != epoch) {
      LOG_EVERY_N(INFO, 50) << "replica: the copy is of epoch " << epoch << ", the witness is at "
                            << r->state().epoch() << "; waiting for the primary";
    }
    return give_up();
  }
  {
    absl::MutexLock l(&mu_);
    promoted_ = true;
    state_ = State::kPromoted;
  }
  CloseCopy();
  if (options_.on_promoted) options_.on_promoted(granted);
  return true;
}

// --- role ---------------------------------------------------------------------

const char* Replica::StateName(State s) {
  switch (s) {
    case State::kWaiting:
      return "waiting";
    case State::kSyncing:
      return "syncing";
    case State::kInSync:
      return "in sync";
    case State::kPromoted:
      return "promoted";
  }
  return "?";
}

bool Replica::Serving(std::string* why) {
  absl::MutexLock l(&mu_);
  *why = primary_.empty() ? "replica" : "replica of " + primary_;
  return false;
}

void Replica::FillStatus(proto::StatusReply* reply) {
  absl::MutexLock l(&mu_);
  reply->set_role("replica");
  reply->set_epoch(epoch_);
  reply->set_server(options_.self);
  reply->set_peer(primary_.empty() ? options_.peer : primary_);
  reply->set_witness(options_.witness);
  reply->set_replica_state(StateName(state_));
  reply->set_log_seq(applied_);
  reply->set_acked_seq(applied_);
  if (copy_identity_.has_value()) {
    reply->set_volume_id(copy_identity_->volume_id());
    reply->set_data_epoch(copy_identity_->data_epoch());
  }
}

absl::Status Replica::Switchover() {
  return absl::FailedPreconditionError("this server is the replica; ask the primary");
}

}  // namespace grantfs
