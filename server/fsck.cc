#include "server/fsck.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/names.h"
#include "common/rocks_logger.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "proto/store.pb.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"
#include "server/data_dir.h"
#include "server/fsck_checker.h"
#include "server/keys.h"
#include "server/meta_store.h"

// Problem kinds (FsckProblem::kind). Records:
//   corrupt_record       a value that does not parse, or a key of the wrong length
//   unknown_key          a key of a kind server/keys.h does not list
//   counters_missing     no counters record: the server would start a new volume over it
// Names:
//   entry_parent_missing, entry_parent_not_dir, entry_target_missing, entry_type,
//   entry_bad_name, entry_cookie, entry_no_cookie_record, cookie_record_mismatch,
//   cookie_record_orphan, root, dir_multiple_names, dir_parent, file_parent, nlink,
//   unnamed_inode, unreachable_inode, no_orphan_record, orphan_record_linked,
//   orphan_record_missing_inode, xattr_missing_inode, lock_missing_inode,
//   live_and_garbage
// Data:
//   chunk_missing_inode, chunk_not_file, chunk_past_eof, blocks_past_eof,
//   chunk_bitmap_size, chunk_record_empty, chunk_file_missing,
//   orphan_chunk_file, stray_file, allocated_blocks
// Ledger:
//   used_blocks, granted_blocks, inodes, next_ino, next_cookie, over_capacity

namespace grantfs {
namespace {

using fsck_internal::Checker;

// Keeps RocksDB from writing (or rotating) meta/LOG on a read-only open.
class NullLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
};

// The pid of the process holding a lock on `path` (0: held, pid unknown, as
// from another pid namespace), or nullopt when it is free or cannot be
// asked. Asked from a child process: closing a descriptor of the file here
// would drop any lock this process holds on it (POSIX record locks), and a
// child sees this process's locks too.
std::optional<int64_t> LockHolder(const std::string& path) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return std::nullopt;
  const pid_t child = fork();
  if (child < 0) {
    close(pipefd[0]);
    close(pipefd[1]);
    return std::nullopt;
  }
  if (child == 0) {
    // Only async-signal-safe calls here: the parent may have threads.
    int64_t answer = -1;  // free, or could not ask
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      struct flock fl;
      memset(&fl, 0, sizeof(fl));
      fl.l_type = F_WRLCK;
      fl.l_whence = SEEK_SET;
      if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) answer = fl.l_pid;
    }
    ssize_t n = write(pipefd[1], &answer, sizeof(answer));
    _exit(n == sizeof(answer) ? 0 : 1);
  }
  close(pipefd[1]);
  int64_t answer = -1;
  ssize_t n;
  do {
    n = read(pipefd[0], &answer, sizeof(answer));
  } while (n < 0 && errno == EINTR);
  close(pipefd[0]);
  int status;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (n != sizeof(answer) || answer < 0) return std::nullopt;
  return answer;
}

}  // namespace

std::string FsckProblem::ToString() const {
  std::string s = absl::StrCat(kind, ": ", message);
  if (!fix.empty()) absl::StrAppend(&s, repaired ? " [repaired: " : " [--repair: ", fix, "]");
  return s;
}

int FsckReport::unrepaired() const {
  int n = 0;
  for (const FsckProblem& p : problems) n += !p.repaired;
  return n;
}

std::string FsckReport::Summary() const {
  std::string s = absl::StrCat("fsck ", data_dir, ": ", inodes, " inodes (", directories,
                               " directories, ", files, " files, ", orphans, " open orphans, ",
                               garbage, " waiting to be freed), ", entries, " entries, ",
                               chunk_records, " chunk records, ",
                               metadata_only ? std::string("chunk files not read")
                                             : absl::StrCat(chunk_files, " chunk files"),
                               "; used ", used_blocks, " blocks, granted ", granted_blocks,
                               ", capacity ", capacity_blocks, ": ");
  if (clean()) return s + "clean";
  absl::StrAppend(&s, problems.size(), problems.size() == 1 ? " problem" : " problems");
  if (repair) absl::StrAppend(&s, ", ", problems.size() - unrepaired(), " repaired");
  return s;
}

std::string FsckReport::ToJson() const {
  using google::protobuf::Struct;
  using google::protobuf::Value;
  Struct out;
  auto& f = *out.mutable_fields();
  f["data_dir"].set_string_value(data_dir);
  f["repair"].set_bool_value(repair);
  f["metadata_only"].set_bool_value(metadata_only);
  f["clean"].set_bool_value(clean());
  f["unrepaired"].set_number_value(unrepaired());
  const std::pair<const char*, uint64_t> counts[] = {{"inodes", inodes},
                                                     {"directories", directories},
                                                     {"files", files},
                                                     {"entries", entries},
                                                     {"chunk_records", chunk_records},
                                                     {"chunk_files", chunk_files},
                                                     {"orphans", orphans},
                                                     {"garbage", garbage},
                                                     {"used_blocks", used_blocks},
                                                     {"granted_blocks", granted_blocks},
                                                     {"capacity_blocks", capacity_blocks}};
  for (const auto& [name, n] : counts) f[name].set_number_value(static_cast<double>(n));
  auto* list = f["problems"].mutable_list_value();
  for (const FsckProblem& p : problems) {
    auto& q = *list->add_values()->mutable_struct_value()->mutable_fields();
    q["kind"].set_string_value(p.kind);
    q["message"].set_string_value(p.message);
    if (p.ino != 0) q["ino"].set_number_value(static_cast<double>(p.ino));
    if (!p.key.empty()) q["key"].set_string_value(p.key);
    if (!p.path.empty()) q["path"].set_string_value(p.path);
    if (!p.fix.empty()) q["fix"].set_string_value(p.fix);
    q["repaired"].set_bool_value(p.repaired);
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions po;
  po.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(out, &json, po).ok()) return "{}";
  return json;
}

absl::StatusOr<FsckReport> CheckVolume(const FsckOptions& options) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("no data directory given");
  if (options.metadata_only && options.repair) {
    return absl::InvalidArgumentError("a metadata-only check cannot repair");
  }
  if (options.chunk_size == 0 || options.chunk_size % (kBlockSize * 8) != 0) {
    return absl::InvalidArgumentError("chunk_size must be a multiple of 32 KiB");
  }
  const std::string meta = options.data_dir + "/meta";
  struct stat st;
  if (stat((meta + "/CURRENT").c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("no metadata store in ", meta, " (", strerror(errno), ")"));
  }
  if (stat((options.data_dir + "/" + kPartialSnapshotFile).c_str(), &st) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.data_dir, " holds a replica's partial copy (", kPartialSnapshotFile,
                     "): the replica discards it when it starts; there is nothing to check"));
  }
  // A read-only open of a store a server is changing sees a moment of it
  // (chunk files ahead of their records look orphaned) and a read-write one
  // would fail: either way, the server must be stopped first.
  if (std::optional<int64_t> pid = LockHolder(meta + "/LOCK")) {
    return absl::FailedPreconditionError(absl::StrCat(
        meta, " is in use by process ", *pid == 0 ? std::string("(unknown)") : absl::StrCat(*pid),
        " (its LOCK is held: is a grantfs-server running on ", options.data_dir,
        "?); stop it before fsck"));
  }
  rocksdb::Options db_options;
  db_options.create_if_missing = false;
  db_options.info_log = NewRocksLogger();  // not meta/LOG (common/rocks_logger.h)
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s;
  if (options.repair) {
    s = rocksdb::DB::Open(db_options, meta, &raw);
    if (!s.ok() && s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
      return absl::FailedPreconditionError(
          absl::StrCat(meta, " is in use (is a grantfs-server running on ", options.data_dir,
                       "?); stop it before fsck --repair: ", s.ToString()));
    }
  } else {
    db_options.info_log = std::make_shared<NullLogger>();
    s = rocksdb::DB::OpenForReadOnly(db_options, meta, &raw);
  }
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("opening the metadata store ", meta, ": ", s.ToString()));
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  FsckReport report;
  report.data_dir = options.data_dir;
  report.repair = options.repair;
  report.metadata_only = options.metadata_only;
  Checker checker(options, db.get(), &report);
  RETURN_IF_ERROR(checker.Run());
  rocksdb::Status closed = db->Close();
  if (!closed.ok() && !closed.IsNotSupported()) {
    return absl::DataLossError(absl::StrCat("closing the metadata store: ", closed.ToString()));
  }
  return report;
}

absl::StatusOr<FsckReport> CheckMetadataSnapshot(rocksdb::DB* db, const rocksdb::Snapshot* snapshot,
                                                 const std::string& label, uint64_t chunk_size) {
  FsckOptions o;
  o.data_dir = label;
  o.chunk_size = chunk_size;
  o.metadata_only = true;
  if (o.chunk_size == 0 || o.chunk_size % (kBlockSize * 8) != 0) {
    return absl::InvalidArgumentError("chunk_size must be a multiple of 32 KiB");
  }
  FsckReport report;
  report.data_dir = label;
  report.metadata_only = true;
  Checker checker(o, db, &report, snapshot);
  RETURN_IF_ERROR(checker.Run());
  return report;
}

}  // namespace grantfs
