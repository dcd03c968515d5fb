// The replica's side of a snapshot (checkpoint/snapshot_sender.h is the
// primary's): the old copy is marked partial and removed, the pieces are
// written into meta/ and chunks/ (paths checked to stay there), and once
// every file is on disk the copy is opened at the snapshot's position and
// the mark goes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/copy_files.h"
#include "checkpoint/replica.h"
#include "checkpoint/replica_copy.h"
#include "common/status_macros.h"

namespace grantfs {
namespace {

// A snapshot path must stay inside meta/ or chunks/.
bool SafeRelPath(const std::string& p) {
  if (!absl::StartsWith(p, "meta/") && !absl::StartsWith(p, "chunks/")) return false;
  return !absl::StrContains(p, "..") && !absl::StrContains(p, "//") && p.back() != '/';
}

}  // namespace

using replica_copy::RemoveCopy;
using replica_copy::SyncDir;

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

}  // namespace grantfs
