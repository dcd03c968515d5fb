#include "checkpoint/snapshot_sender.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/copy_files.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

// Reads `path` into snapshot pieces of at most `piece` bytes, handing each to
// `send`. All-zero pieces are skipped (holes stay holes); the last piece has
// eof and the file size in `offset`. A file that vanished is skipped.
absl::Status SendFile(const std::string& path, const std::string& rel, size_t piece,
                      const std::function<bool(proto::SnapshotPiece*)>& send,
                      const std::function<void(uint64_t read)>& on_read) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("open ", path, ": ", strerror(errno)));
  }
  std::string buf(piece, '\0');
  uint64_t off = 0;
  absl::Status st;
  for (;;) {
    ssize_t n = pread(fd, buf.data(), piece, off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = absl::InternalError(absl::StrCat("read ", path, ": ", strerror(errno)));
      break;
    }
    if (n == 0) break;
    on_read(n);
    bool zero = true;
    for (ssize_t i = 0; i < n && zero; ++i) zero = buf[i] == 0;
    if (!zero) {
      proto::SnapshotPiece p;
      p.set_path(rel);
      p.set_offset(off);
      p.set_data(buf.data(), n);
      if (!send(&p)) {
        st = absl::UnavailableError("stream broken while sending " + rel);
        break;
      }
    }
    off += n;
  }
  close(fd);
  if (!st.ok()) return st;
  proto::SnapshotPiece last;
  last.set_path(rel);
  last.set_offset(off);
  last.set_eof(true);
  if (!send(&last)) return absl::UnavailableError("stream broken while sending " + rel);
  return absl::OkStatus();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  closedir(d);
  return out;
}

}  // namespace

absl::Status SendSnapshot(const SnapshotOptions& options,
                          const std::function<bool(const proto::ReplMessage&)>& send_message,
                          const std::function<void(uint64_t cut)>& on_cut, uint64_t* start_seq) {
  const std::string tmp = options.data_dir + "/" + kCheckpointDir;
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
  // The cut: the checkpoint holds exactly the batches up to `cut`; the chunk
  // files are copied after it and the records after `cut` are replayed on
  // top (every chunk change is a blind write, so replaying one the copy
  // already holds changes nothing).
  absl::StatusOr<uint64_t> cut = options.checkpoint(tmp);
  if (!cut.ok()) {
    std::filesystem::remove_all(tmp, ec);
    return cut.status();
  }
  on_cut(*cut);
  *start_seq = *cut + 1;
  const absl::Time began = options.clock->Now();
  proto::ReplMessage m;
  m.mutable_hello()->set_epoch(options.epoch);
  m.mutable_hello()->set_snapshot(true);
  m.mutable_hello()->set_start_seq(*start_seq);
  m.mutable_hello()->set_chunk_size(options.chunk_size);
  if (options.promised_bytes) {
    if (std::optional<uint64_t> p = options.promised_bytes())
      m.mutable_hello()->set_promised_bytes(*p);
  }
  m.mutable_hello()->set_capacity_bytes(options.capacity_bytes);
  if (!send_message(m)) return absl::UnavailableError("stream broken");
  uint64_t files = 0, bytes = 0;
  proto::ReplMessage batch;
  uint64_t batch_bytes = 0;
  auto flush = [&]() {
    if (batch.snapshot_size() == 0) return true;
    batch.set_sent_ns(options.clock->NowNanos());
    bool ok = send_message(batch);
    batch.Clear();
    batch_bytes = 0;
    return ok;
  };
  auto send = [&](proto::SnapshotPiece* p) {
    bytes += p->data().size();
    batch_bytes += p->data().size() + 64;
    if (p->eof()) ++files;
    *batch.add_snapshot() = std::move(*p);
    return batch_bytes < options.max_message_bytes || flush();
  };
  // What to send, and how much that is (for the progress).
  std::vector<std::pair<std::string, std::string>> files_to_send;  // path, name on the replica
  for (const std::string& name : ListDir(tmp)) {
    files_to_send.emplace_back(tmp + "/" + name, "meta/" + name);
  }
  const std::string chunks = options.data_dir + "/chunks";
  for (const std::string& sub : ListDir(chunks)) {
    for (const std::string& name : ListDir(chunks + "/" + sub)) {
      files_to_send.emplace_back(chunks + "/" + sub + "/" + name, "chunks/" + sub + "/" + name);
    }
  }
  uint64_t total = 0, read = 0;
  for (const auto& f : files_to_send) {
    struct stat sb;
    if (stat(f.first.c_str(), &sb) == 0) total += static_cast<uint64_t>(sb.st_size);
  }
  auto tell = [&] {
    if (options.progress) options.progress(read, total);
  };
  tell();
  auto on_read = [&](uint64_t n) {
    read += n;
    if (read % (64 << 20) < n) tell();  // every 64 MiB
  };
  absl::Status st;
  for (const auto& [path, rel] : files_to_send) {
    st = SendFile(path, rel, 1 << 20, send, on_read);
    if (!st.ok()) break;
  }
  tell();
  std::filesystem::remove_all(tmp, ec);
  if (!st.ok()) return st;
  if (!flush()) return absl::UnavailableError("stream broken");
  proto::ReplMessage done;
  done.set_snapshot_done(true);
  done.set_sent_ns(options.clock->NowNanos());
  if (!send_message(done)) return absl::UnavailableError("stream broken");
  LOG(INFO) << "snapshot for " << options.peer << ": " << files << " files, " << bytes
            << " bytes in " << options.clock->Now() - began << "; log follows from change "
            << *start_seq;
  return absl::OkStatus();
}

}  // namespace grantfs
