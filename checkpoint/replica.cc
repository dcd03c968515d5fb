#include "checkpoint/replica.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "checkpoint/copy_files.h"
#include "checkpoint/replica_copy.h"
#include "common/clock.h"
#include "common/rocks_logger.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"

namespace grantfs {

using replica_copy::DbError;
using replica_copy::DecodePosition;
using replica_copy::kPositionKey;
using replica_copy::RemoveCopy;
using replica_copy::SyncDir;

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
  SpaceHoldOptions ho;
  ho.path = options.data_dir + "/space.hold";
  ho.allocate = options.hold_allocate;
  ASSIGN_OR_RETURN(r->hold_, SpaceHold::Open(ho));
  r->room_ = std::make_unique<DiskRoom>(options.data_dir, r->hold_.get());
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
