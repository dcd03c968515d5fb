#include "server/fsck_checker.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "rocksdb/write_batch.h"
#include "server/keys.h"

namespace grantfs::fsck_internal {

std::string KeyName(const std::string& k) {
  if (k == keys::Counters() || k == keys::Identity() || k == kReplicaPositionKey) return k;
  if (!k.empty() && k[0] == keys::kGlobalMountKind) {
    return absl::StrCat("T", absl::CHexEscape(k.substr(1)));
  }
  if (!k.empty()) {
    const std::string kind(1, k[0]);
    auto id = [&k](size_t at) { return keys::GetBigEndian64(k.data() + at); };
    switch (k[0]) {
      case 'I':
      case 'O':
      case 'G':
      case 'L':
      case 'P':
      case 'S':
        if (k.size() == 9) return absl::StrCat(kind, "/", id(1));
        break;
      case 'D':
      case 'X':
        if (k.size() > 9) return absl::StrCat(kind, "/", id(1), "/", absl::CHexEscape(k.substr(9)));
        break;
      case 'E':
      case 'C':
      case 'Q':
        if (k.size() == 17) return absl::StrCat(kind, "/", id(1), "/", id(9));
        break;
    }
  }
  return absl::StrCat("0x", absl::BytesToHexString(k));
}

std::string TypeName(uint32_t mode) {
  switch (mode & S_IFMT) {
    case S_IFDIR:
      return "directory";
    case S_IFREG:
      return "regular file";
    case S_IFLNK:
      return "symlink";
    case S_IFIFO:
      return "fifo";
    case S_IFSOCK:
      return "socket";
    case S_IFCHR:
      return "character device";
    case S_IFBLK:
      return "block device";
  }
  return absl::StrFormat("type 0%o", mode & S_IFMT);
}

std::string Quote(const std::string& name) {
  return absl::StrCat("'", absl::CHexEscape(name), "'");
}

absl::Status Checker::Run() {
  RETURN_IF_ERROR(ScanRecords());
  if (!options_.metadata_only) RETURN_IF_ERROR(ScanChunkFiles());
  CheckEntries();
  WalkFromRoot();
  CheckChunks();
  CheckInodes();
  CheckRecordsOfMissingInodes();
  CheckCounters();
  if (options_.repair) RETURN_IF_ERROR(Repair());
  return absl::OkStatus();
}

std::string Checker::PathOf(uint64_t ino) const {
  std::vector<const std::string*> parts;
  for (int depth = 0; ino != kRootIno && depth < 4096; ++depth) {
    auto it = found_as_.find(ino);
    if (it == found_as_.end()) return "";
    parts.push_back(&it->second.second);
    ino = it->second.first;
  }
  if (ino != kRootIno) return "";
  std::string path;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) absl::StrAppend(&path, "/", **it);
  return path.empty() ? "/" : path;
}

std::string Checker::Describe(uint64_t ino) const {
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return absl::StrCat("inode ", ino);
  if (it->second.corrupt) return absl::StrCat("inode ", ino, " (unreadable record)");
  std::string path = it->second.reachable ? PathOf(ino) : "";
  return absl::StrCat("inode ", ino, " (", TypeName(it->second.mode), path.empty() ? "" : " ", path,
                      ")");
}

absl::Status Checker::Repair() {
  rocksdb::WriteBatch batch;
  for (const auto& [ino, fix] : fixes_) {
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), keys::Inode(ino), &v);
    proto::InodeRecord rec;
    if (!s.ok() || !rec.ParseFromString(v)) {
      return absl::DataLossError(
          absl::StrCat("repair: re-reading inode ", ino, ": ", s.ToString()));
    }
    if (fix.nlink) rec.set_nlink(*fix.nlink);
    if (fix.parent) rec.set_parent(*fix.parent);
    if (fix.allocated_blocks) rec.set_allocated_blocks(*fix.allocated_blocks);
    batch.Put(keys::Inode(ino), rec.SerializeAsString());
  }
  for (const std::string& k : deletes_) batch.Delete(k);
  if (fixed_counters_) batch.Put(keys::Counters(), fixed_counters_->SerializeAsString());
  if (batch.Count() > 0) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    rocksdb::Status s = db_->Write(wo, &batch);
    if (!s.ok()) return absl::DataLossError(absl::StrCat("repair: writing: ", s.ToString()));
  }
  for (size_t p : batch_fixed_) report_->problems[p].repaired = true;
  // After the batch: a chunk record deleted above may have named the file.
  std::set<std::string> dirs;
  for (const auto& [path, p] : unlinks_) {
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      report_->problems[p].fix += absl::StrCat(" (failed: ", strerror(errno), ")");
      report_->problems[p].repaired = false;
      continue;
    }
    report_->problems[p].repaired = true;
    dirs.insert(path.substr(0, path.rfind('/')));
  }
  for (const std::string& d : dirs) {
    const int fd = open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      fsync(fd);
      close(fd);
    }
  }
  return absl::OkStatus();
}

}  // namespace grantfs::fsck_internal
