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
#include "server/keys.h"
#include "server/meta_store.h"
#include "server/names.h"

// Problem kinds (FsckProblem::kind). Records:
//   corrupt_record       a value that does not parse, or a key of the wrong length
//   unknown_key          a key of a kind server/keys.h does not list
//   counters_missing     no counters record: the server would start a new volume over it
// Names:
//   entry_parent_missing, entry_parent_not_dir, entry_target_missing, entry_type,
//   entry_bad_name, entry_cookie, entry_no_cookie_record, cookie_record_mismatch,
//   cookie_record_orphan, root, dir_multiple_names, dir_parent, nlink,
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

constexpr char kReplicaPositionKey[] = "Rposition";
constexpr uint64_t kFirstCookie = 3;  // 1 and 2 are "." and ".."

// Keeps RocksDB from writing (or rotating) meta/LOG on a read-only open.
class NullLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
};

// A printable name of a metadata key: "I/12", "D/1/name", "C/12/0".
std::string KeyName(const std::string& k) {
  if (k == keys::Counters() || k == keys::Identity() || k == kReplicaPositionKey) return k;
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

template <typename Rec>
bool Parse(const rocksdb::Slice& v, Rec* rec) {
  return rec->ParseFromArray(v.data(), static_cast<int>(v.size()));
}

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

struct InodeInfo {
  // From the record.
  uint32_t mode = 0;
  uint32_t nlink = 0;
  uint64_t size = 0;
  uint64_t parent = 0;
  uint64_t allocated_blocks = 0;
  bool corrupt = false;  // the record does not parse: only its existence counts
  // Counted from the other records.
  uint32_t names = 0;    // entries naming it
  uint32_t subdirs = 0;  // a directory's entries naming directories
  uint64_t named_in = 0;
  std::string first_name;  // in named_in
  uint64_t chunk_bits = 0;
  bool orphan_record = false;
  bool reachable = false;
};

struct Entry {
  uint64_t parent;
  std::string name;
  proto::DirentRecord d;
};

struct CookieRecord {
  proto::DirentRecord d;
  bool matched = false;  // a name record points at it
};

struct ChunkInfo {
  uint64_t bits = 0;
  uint64_t highest = 0;  // highest block set (when bits > 0)
  size_t bitmap_bytes = 0;
};

// What --repair changes in an inode record.
struct InodeFix {
  std::optional<uint32_t> nlink;
  std::optional<uint64_t> allocated_blocks;
};

class Checker {
 public:
  Checker(const FsckOptions& options, rocksdb::DB* db, FsckReport* report)
      : options_(options),
        db_(db),
        report_(report),
        chunk_dir_(options.data_dir + "/chunks"),
        blocks_per_chunk_(options.chunk_size / kBlockSize) {}

  absl::Status Run() {
    RETURN_IF_ERROR(ScanRecords());
    RETURN_IF_ERROR(ScanChunkFiles());
    CheckEntries();
    WalkFromRoot();
    CheckChunks();
    CheckInodes();
    CheckRecordsOfMissingInodes();
    CheckCounters();
    if (options_.repair) RETURN_IF_ERROR(Repair());
    return absl::OkStatus();
  }

 private:
  size_t Add(const std::string& kind, const std::string& message, uint64_t ino = 0,
             const std::string& key = "", const std::string& path = "") {
    FsckProblem p;
    p.kind = kind;
    p.message = message;
    p.ino = ino;
    p.key = key;
    p.path = path;
    report_->problems.push_back(std::move(p));
    return report_->problems.size() - 1;
  }
  // A problem fixed by the repair batch (applied all together).
  void AddBatchFix(size_t problem, const std::string& fix) {
    report_->problems[problem].fix = fix;
    batch_fixed_.push_back(problem);
  }
  void NoteIno(uint64_t ino) { max_ino_ = std::max(max_ino_, ino); }
  void NoteCookie(uint64_t cookie) { max_cookie_ = std::max(max_cookie_, cookie); }

  std::string ChunkPath(uint64_t ino, uint64_t index) const {
    return absl::StrFormat("%s/%02x/%d.%d", chunk_dir_, ino % 256, ino, index);
  }

  // "/a/b" for an inode reachable from the root, "" otherwise.
  std::string PathOf(uint64_t ino) const {
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

  // "inode 12 (regular file /a/b)".
  std::string Describe(uint64_t ino) const {
    auto it = inodes_.find(ino);
    if (it == inodes_.end()) return absl::StrCat("inode ", ino);
    if (it->second.corrupt) return absl::StrCat("inode ", ino, " (unreadable record)");
    std::string path = it->second.reachable ? PathOf(ino) : "";
    return absl::StrCat("inode ", ino, " (", TypeName(it->second.mode), path.empty() ? "" : " ",
                        path, ")");
  }

  void Corrupt(const std::string& key, const rocksdb::Slice& v, const char* type) {
    Add("corrupt_record",
        absl::StrCat("record ", KeyName(key), ": its value (", v.size(), " bytes) is not a valid ",
                     type),
        0, KeyName(key));
  }
  // A record whose key must be `key_size` bytes and whose value a `Rec`:
  // true when both hold (else the problem is reported).
  template <typename Rec>
  bool CheckRecord(const std::string& key, const rocksdb::Slice& v, size_t key_size,
                   const char* type, Rec* rec) {
    if (key.size() != key_size) {
      BadKey(key);
      return false;
    }
    if (!Parse(v, rec)) {
      Corrupt(key, v, type);
      return false;
    }
    return true;
  }
  void BadKey(const std::string& key) {
    Add("corrupt_record",
        absl::StrCat("key ", KeyName(key), " (", key.size(), " bytes) has the wrong length for a '",
                     std::string(1, key[0]), "' record"),
        0, KeyName(key));
  }

  absl::Status ScanRecords() {
    rocksdb::ReadOptions ro;
    ro.fill_cache = false;
    ro.verify_checksums = true;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      const std::string key = it->key().ToString();
      const rocksdb::Slice v = it->value();
      if (key.empty()) {
        Add("unknown_key", "an empty key", 0, "");
        continue;
      }
      const uint64_t id = key.size() >= 9 ? keys::GetBigEndian64(key.data() + 1) : 0;
      switch (key[0]) {
        case 'I': {
          if (key.size() != 9) {
            BadKey(key);
            break;
          }
          InodeInfo& info = inodes_[id];
          NoteIno(id);
          proto::InodeRecord rec;
          if (!Parse(v, &rec)) {
            Corrupt(key, v, "InodeRecord");
            info.corrupt = true;
            break;
          }
          info.mode = rec.mode();
          info.nlink = rec.nlink();
          info.size = rec.size();
          info.parent = rec.parent();
          info.allocated_blocks = rec.allocated_blocks();
          break;
        }
        case 'D': {
          if (key.size() <= 9) {
            BadKey(key);
            break;
          }
          Entry e{id, key.substr(9), {}};
          if (!Parse(v, &e.d)) {
            Corrupt(key, v, "DirentRecord");
            break;
          }
          NoteIno(id);
          NoteIno(e.d.ino());
          NoteCookie(e.d.cookie());
          entries_.push_back(std::move(e));
          break;
        }
        case 'E': {
          if (key.size() != 17) {
            BadKey(key);
            break;
          }
          CookieRecord c;
          if (!Parse(v, &c.d)) {
            Corrupt(key, v, "DirentRecord");
            break;
          }
          const uint64_t cookie = keys::GetBigEndian64(key.data() + 9);
          NoteIno(id);
          NoteIno(c.d.ino());
          NoteCookie(cookie);
          NoteCookie(c.d.cookie());
          cookies_[{id, cookie}] = std::move(c);
          break;
        }
        case 'C': {
          if (key.size() != 17) {
            BadKey(key);
            break;
          }
          proto::ChunkRecord rec;
          if (!Parse(v, &rec)) {
            Corrupt(key, v, "ChunkRecord");
            break;
          }
          ChunkInfo c;
          c.bitmap_bytes = rec.bitmap().size();
          for (size_t i = 0; i < rec.bitmap().size(); ++i) {
            const unsigned char byte = rec.bitmap()[i];
            c.bits += __builtin_popcount(byte);
            if (byte != 0) c.highest = i * 8 + (31 - __builtin_clz(byte));  // bit b%8 of byte b/8
          }
          NoteIno(id);
          chunks_[{id, keys::GetBigEndian64(key.data() + 9)}] = c;
          break;
        }
        case 'G': {
          if (key.size() != 9) {
            BadKey(key);
            break;
          }
          proto::InodeRecord rec;
          if (!Parse(v, &rec)) Corrupt(key, v, "InodeRecord");
          NoteIno(id);
          garbage_[id] = rec.size();  // a corrupt one: freed by what its records span
          break;
        }
        case 'L': {
          proto::GrantRecord rec;
          if (CheckRecord(key, v, 9, "GrantRecord", &rec)) granted_sum_ += rec.blocks();
          break;
        }
        case 'M': {
          if (key == keys::Identity()) {
            proto::VolumeIdentity rec;
            if (!Parse(v, &rec) || rec.volume_id().empty()) Corrupt(key, v, "VolumeIdentity");
            break;
          }
          if (key != keys::Counters()) {
            Add("unknown_key", absl::StrCat("unknown key ", KeyName(key)), 0, KeyName(key));
            break;
          }
          proto::Counters rec;
          if (!Parse(v, &rec)) {
            Corrupt(key, v, "Counters");
            break;
          }
          counters_ = rec;
          break;
        }
        // 'O', 'P' and 'X' sort after 'I': every inode record has been seen.
        case 'O': {
          proto::OrphanRecord rec;
          if (key.size() != 9) {
            BadKey(key);
            break;
          }
          if (!Parse(v, &rec)) Corrupt(key, v, "OrphanRecord");
          NoteIno(id);
          auto ino = inodes_.find(id);
          if (ino != inodes_.end()) {
            ino->second.orphan_record = true;
            ++report_->orphans;
          } else {
            missing_.push_back({'O', id, key});
          }
          break;
        }
        case 'P':
        case 'X': {
          if (key.size() < 9 || (key[0] == 'P' && key.size() != 9)) {
            BadKey(key);
            break;
          }
          proto::LockRecord rec;
          if (key[0] == 'P' && !Parse(v, &rec)) Corrupt(key, v, "LockRecord");
          NoteIno(id);
          if (!inodes_.count(id)) missing_.push_back({key[0], id, key});
          break;
        }
        case 'Q': {
          proto::DedupeRecord rec;
          CheckRecord(key, v, 17, "DedupeRecord", &rec);
          break;
        }
        case 'R': {
          if (key != kReplicaPositionKey) {
            Add("unknown_key", absl::StrCat("unknown key ", KeyName(key)), 0, KeyName(key));
          } else if (v.size() != 16) {
            Corrupt(key, v, "replica position (16 bytes)");
          }
          break;
        }
        case 'S': {
          proto::SessionRecord rec;
          CheckRecord(key, v, 9, "SessionRecord", &rec);
          break;
        }
        default:
          Add("unknown_key", absl::StrCat("unknown key ", KeyName(key)), 0, KeyName(key));
      }
    }
    if (!it->status().ok()) {
      return absl::DataLossError(
          absl::StrCat("reading the metadata store: ", it->status().ToString()));
    }
    return absl::OkStatus();
  }

  // Every file under chunks/: "<two hex digits of ino % 256>/<ino>.<index>".
  absl::Status ScanChunkFiles() {
    std::unique_ptr<DIR, int (*)(DIR*)> top(opendir(chunk_dir_.c_str()), closedir);
    if (!top) {
      if (errno == ENOENT) return absl::OkStatus();  // no data yet: missing files say the rest
      return absl::FailedPreconditionError(
          absl::StrCat("reading ", chunk_dir_, ": ", strerror(errno)));
    }
    std::vector<std::string> subdirs;
    while (struct dirent* de = readdir(top.get())) {
      const std::string name = de->d_name;
      if (name == "." || name == "..") continue;
      const std::string path = absl::StrCat(chunk_dir_, "/", name);
      struct stat st;
      unsigned value = 0;
      if (lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && name.size() == 2 &&
          sscanf(name.c_str(), "%2x", &value) == 1 && absl::StrFormat("%02x", value) == name) {
        subdirs.push_back(name);
      } else {
        Add("stray_file", absl::StrCat(path, " is not a chunk directory (00..ff)"), 0, "", path);
      }
    }
    for (const std::string& sub : subdirs) {
      const std::string dir = absl::StrCat(chunk_dir_, "/", sub);
      std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), closedir);
      if (!d) {
        return absl::FailedPreconditionError(absl::StrCat("reading ", dir, ": ", strerror(errno)));
      }
      while (struct dirent* de = readdir(d.get())) {
        const std::string name = de->d_name;
        if (name == "." || name == "..") continue;
        const std::string path = absl::StrCat(dir, "/", name);
        unsigned long long ino = 0, index = 0;  // NOLINT(runtime/int): sscanf
        char tail = 0;
        struct stat st;
        const bool parsed = sscanf(name.c_str(), "%llu.%llu%c", &ino, &index, &tail) == 2 &&
                            absl::StrFormat("%d.%d", ino, index) == name;
        if (!parsed || lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
            absl::StrFormat("%02x", ino % 256) != sub) {
          Add("stray_file",
              absl::StrCat(path,
                           " is not a chunk file (<ino>.<index> in the directory of ino % 256)"),
              0, "", path);
          continue;
        }
        NoteIno(ino);
        chunk_files_[{ino, index}] = st.st_size;
        ++report_->chunk_files;
      }
    }
    return absl::OkStatus();
  }

  void CheckEntries() {
    report_->entries = entries_.size();
    for (const Entry& e : entries_) {
      const std::string key = KeyName(keys::Dirent(e.parent, e.name));
      const std::string what = absl::StrCat("entry ", Quote(e.name), " in directory ", e.parent);
      // Its readdir-order twin.
      if (e.d.cookie() < kFirstCookie) {
        Add("entry_cookie",
            absl::StrCat(what, " (", key, ") has cookie ", e.d.cookie(),
                         ", which is reserved for . and .."),
            e.parent, key);
      }
      auto c = cookies_.find({e.parent, e.d.cookie()});
      if (c == cookies_.end()) {
        Add("entry_no_cookie_record",
            absl::StrCat(what, " (", key, ", inode ", e.d.ino(), ") has no readdir record ",
                         KeyName(keys::DirCookie(e.parent, e.d.cookie())),
                         ": readdir does not list it"),
            e.parent, key);
      } else {
        c->second.matched = true;
        std::vector<std::string> diffs;
        const proto::DirentRecord& r = c->second.d;
        if (r.ino() != e.d.ino())
          diffs.push_back(absl::StrCat("inode ", r.ino(), " != ", e.d.ino()));
        if (r.type() != e.d.type()) {
          diffs.push_back(absl::StrFormat("type 0%o != 0%o", r.type(), e.d.type()));
        }
        if (r.name() != e.name) diffs.push_back(absl::StrCat("name ", Quote(r.name())));
        if (r.cookie() != e.d.cookie()) {
          diffs.push_back(absl::StrCat("cookie field ", r.cookie(), " != ", e.d.cookie()));
        }
        if (!diffs.empty()) {
          const std::string ckey = KeyName(keys::DirCookie(e.parent, e.d.cookie()));
          Add("cookie_record_mismatch",
              absl::StrCat("readdir record ", ckey, " disagrees with ", what, " (", key,
                           "): ", absl::StrJoin(diffs, ", ")),
              e.parent, ckey);
        }
      }
      if (!ValidateName(e.name).ok()) {
        Add("entry_bad_name", absl::StrCat(what, " (", key, "): the name is not valid"), e.parent,
            key);
      }
      auto parent = inodes_.find(e.parent);
      if (parent == inodes_.end()) {
        Add("entry_parent_missing",
            absl::StrCat(what, " (", key, ", inode ", e.d.ino(), "): directory ", e.parent,
                         " does not exist"),
            e.parent, key);
        continue;
      }
      if (!parent->second.corrupt && !S_ISDIR(parent->second.mode)) {
        Add("entry_parent_not_dir",
            absl::StrCat(what, " (", key, "): inode ", e.parent, " is a ",
                         TypeName(parent->second.mode), ", not a directory"),
            e.parent, key);
        continue;
      }
      auto target = inodes_.find(e.d.ino());
      if (target == inodes_.end()) {
        Add("entry_target_missing",
            absl::StrCat(what, " (", key, ") names inode ", e.d.ino(), ", which does not exist"),
            e.d.ino(), key);
        continue;
      }
      InodeInfo& t = target->second;
      if (!t.corrupt && e.d.type() != (t.mode & S_IFMT)) {
        Add("entry_type",
            absl::StrFormat("%s (%s) records type 0%o, but inode %d is a %s", what, key, e.d.type(),
                            e.d.ino(), TypeName(t.mode)),
            e.d.ino(), key);
      }
      if (t.names++ == 0) {
        t.named_in = e.parent;
        t.first_name = e.name;
      }
      if (!t.corrupt && S_ISDIR(t.mode)) ++parent->second.subdirs;
      children_[e.parent].push_back({e.d.ino(), &e.name});
    }
    for (const auto& [at, c] : cookies_) {
      if (c.matched) continue;
      const std::string ckey = KeyName(keys::DirCookie(at.first, at.second));
      Add("cookie_record_orphan",
          absl::StrCat("readdir record ", ckey, " (name ", Quote(c.d.name()), ", inode ", c.d.ino(),
                       ") has no name record ", KeyName(keys::Dirent(at.first, c.d.name())),
                       ": readdir lists a name that lookup does not find"),
          at.first, ckey);
    }
  }

  void WalkFromRoot() {
    auto root = inodes_.find(kRootIno);
    if (root == inodes_.end()) {
      Add("root", "the root directory (inode 1) has no record", kRootIno,
          KeyName(keys::Inode(kRootIno)));
      return;
    }
    if (!root->second.corrupt && !S_ISDIR(root->second.mode)) {
      Add("root", absl::StrCat("the root (inode 1) is a ", TypeName(root->second.mode)), kRootIno,
          KeyName(keys::Inode(kRootIno)));
      return;
    }
    root->second.reachable = true;
    std::vector<uint64_t> to_visit = {kRootIno};
    while (!to_visit.empty()) {
      const uint64_t dir = to_visit.back();
      to_visit.pop_back();
      auto kids = children_.find(dir);
      if (kids == children_.end()) continue;
      for (const auto& [ino, name] : kids->second) {
        InodeInfo& info = inodes_[ino];  // exists: entries to missing inodes are not children
        if (info.reachable) continue;
        info.reachable = true;
        found_as_[ino] = {dir, *name};
        if (!info.corrupt && S_ISDIR(info.mode)) to_visit.push_back(ino);
      }
    }
  }

  // How far garbage inode `ino`'s deleter removes chunk files
  // (MetaStore::GarbageChunkSpan).
  uint64_t GarbageSpan(uint64_t ino, uint64_t size) const {
    uint64_t span = (size + options_.chunk_size - 1) / options_.chunk_size;
    auto it = chunks_.lower_bound({ino + 1, 0});
    if (it != chunks_.begin() && (--it)->first.first == ino)
      span = std::max(span, it->first.second + 1);
    return span;
  }

  void CheckChunks() {
    report_->chunk_records = chunks_.size();
    const size_t bitmap_bytes = blocks_per_chunk_ / 8;
    for (const auto& [at, c] : chunks_) {
      const auto [ino, index] = at;
      const std::string key = KeyName(keys::Chunk(ino, index));
      const std::string path = ChunkPath(ino, index);
      const std::string what = absl::StrCat("chunk record ", key, " (", c.bits, " blocks)");
      auto owner = inodes_.find(ino);
      if (owner == inodes_.end()) {
        if (garbage_.count(ino)) {
          expected_used_ += c.bits;  // freed by the deleter, counted until then
          continue;
        }
        size_t p =
            Add("chunk_missing_inode",
                absl::StrCat(what, " belongs to inode ", ino, ", which does not exist"), ino, key);
        deletes_.push_back(keys::Chunk(ino, index));
        if (chunk_files_.count(at)) {  // goes with it (not reported again below)
          AddBatchFix(p, absl::StrCat("delete the record and its chunk file ", path));
          unlinks_.push_back({path, p});
        } else {
          AddBatchFix(p, "delete the record");
        }
        if (!options_.repair) expected_used_ += c.bits;
        continue;
      }
      InodeInfo& info = owner->second;
      if (c.bitmap_bytes != bitmap_bytes) {
        Add("chunk_bitmap_size",
            absl::StrCat(what, " has a bitmap of ", c.bitmap_bytes, " bytes, not ", bitmap_bytes),
            ino, key);
      }
      if (c.bits == 0) {
        size_t p = Add("chunk_record_empty", absl::StrCat(what, " of ", Describe(ino), " is empty"),
                       ino, key);
        AddBatchFix(p, "delete the record");
        deletes_.push_back(keys::Chunk(ino, index));
        continue;
      }
      expected_used_ += c.bits;
      info.chunk_bits += c.bits;
      if (!info.corrupt) {
        if (!S_ISREG(info.mode)) {
          Add("chunk_not_file", absl::StrCat(what, " belongs to ", Describe(ino), ", not a file"),
              ino, key);
        } else {
          const uint64_t eof_blocks = (info.size + kBlockSize - 1) / kBlockSize;
          const uint64_t first = index * blocks_per_chunk_;
          if (first >= eof_blocks) {
            Add("chunk_past_eof",
                absl::StrCat(what, " of ", Describe(ino), " lies wholly past its end (size ",
                             info.size, " bytes)"),
                ino, key);
          } else if (first + c.highest >= eof_blocks) {
            Add("blocks_past_eof",
                absl::StrCat(what, " of ", Describe(ino), " has block ", c.highest,
                             " allocated, past the end of the file (size ", info.size, " bytes)"),
                ino, key);
          }
        }
      }
      if (!chunk_files_.count(at)) {
        Add("chunk_file_missing",
            absl::StrCat(what, " of ", Describe(ino), " has no chunk file ", path,
                         ": those blocks read as zeros"),
            ino, key, path);
      }
    }
    for (const auto& [at, bytes] : chunk_files_) {
      const auto [ino, index] = at;
      if (chunks_.count(at)) continue;
      auto g = garbage_.find(ino);
      if (g != garbage_.end() && index < GarbageSpan(ino, g->second)) continue;  // being freed
      const std::string path = ChunkPath(ino, index);
      std::string why;
      if (inodes_.count(ino)) {
        why = absl::StrCat("of ", Describe(ino), ", which records no block in chunk ", index);
      } else if (g != garbage_.end()) {
        why = absl::StrCat("of deleted inode ", ino, ", past what its deletion removes");
      } else {
        why = absl::StrCat("of inode ", ino, ", which does not exist");
      }
      size_t p = Add("orphan_chunk_file",
                     absl::StrCat("chunk file ", path, " (", bytes,
                                  " bytes) has no chunk record: ", "chunk ", index, " ", why),
                     ino, KeyName(keys::Chunk(ino, index)), path);
      report_->problems[p].fix = "delete the file";
      unlinks_.push_back({path, p});
    }
  }

  void CheckInodes() {
    report_->inodes = inodes_.size();
    report_->garbage = garbage_.size();
    for (auto& [ino, info] : inodes_) {
      if (info.corrupt) continue;
      const std::string key = KeyName(keys::Inode(ino));
      const bool dir = S_ISDIR(info.mode);
      report_->directories += dir;
      report_->files += S_ISREG(info.mode);
      if (garbage_.count(ino)) {
        Add("live_and_garbage",
            absl::StrCat(Describe(ino), " has both an inode record and a deleted-inode record ",
                         KeyName(keys::Garbage(ino))),
            ino, key);
      }
      uint32_t expected = info.nlink;
      if (ino == kRootIno) {
        if (info.names > 0) {
          Add("root",
              absl::StrCat("the root directory is named by ", info.names, " entries (first ",
                           Quote(info.first_name), " in directory ", info.named_in, ")"),
              ino, key);
        }
        if (dir && info.parent != kRootIno) {
          Add("dir_parent", absl::StrCat("the root's .. is ", info.parent, ", not 1"), ino, key);
        }
        if (dir) expected = 2 + info.subdirs;
      } else if (info.names == 0) {
        if (info.nlink > 0) {
          Add("unnamed_inode",
              absl::StrCat(Describe(ino), " has nlink ", info.nlink, " but no entry names it",
                           info.orphan_record ? " (it has an orphan record)" : "",
                           ": lost, left alone"),
              ino, key);
        } else if (!info.orphan_record) {
          Add("no_orphan_record",
              absl::StrCat(Describe(ino),
                           " has nlink 0 and no orphan record: nothing will ever free it"),
              ino, key);
        }
      } else {
        expected = dir ? 2 + info.subdirs : info.names;
        if (dir && info.names > 1) {
          Add("dir_multiple_names",
              absl::StrCat(Describe(ino), " is named by ", info.names, " entries"), ino, key);
        }
        if (dir && info.names == 1 && info.parent != info.named_in) {
          Add("dir_parent",
              absl::StrCat(Describe(ino), " is named ", Quote(info.first_name), " in directory ",
                           info.named_in, " but its .. is ", info.parent),
              ino, key);
        }
        if (!info.reachable) {
          Add("unreachable_inode",
              absl::StrCat(Describe(ino), " is named ", Quote(info.first_name), " in directory ",
                           info.named_in, ", which is not reachable from the root"),
              ino, key);
        }
      }
      std::optional<size_t> nlink_problem;
      if (expected != info.nlink) {
        const std::string counted =
            dir ? absl::StrCat("2 + ", info.subdirs, " subdirectories = ", expected)
                : absl::StrCat(info.names, " entries name it");
        nlink_problem =
            Add("nlink", absl::StrCat(Describe(ino), ": nlink is ", info.nlink, ", ", counted), ino,
                key);
        AddBatchFix(*nlink_problem, absl::StrCat("set nlink to ", expected));
        fixes_[ino].nlink = expected;
      }
      if (info.orphan_record && info.names > 0) {
        const std::string okey = KeyName(keys::Orphan(ino));
        if (nlink_problem) {
          report_->problems[*nlink_problem].fix +=
              absl::StrCat(", delete its orphan record ", okey);
        } else {
          size_t p = Add("orphan_record_linked",
                         absl::StrCat(Describe(ino), " has an orphan record ", okey,
                                      " but is named by ", info.names, " entries"),
                         ino, okey);
          AddBatchFix(p, "delete the orphan record");
        }
        deletes_.push_back(keys::Orphan(ino));
      }
      if (info.allocated_blocks != info.chunk_bits) {
        size_t p = Add("allocated_blocks",
                       absl::StrCat(Describe(ino), ": allocated_blocks is ", info.allocated_blocks,
                                    ", its chunk records hold ", info.chunk_bits, " blocks"),
                       ino, key);
        AddBatchFix(p, absl::StrCat("set allocated_blocks to ", info.chunk_bits));
        fixes_[ino].allocated_blocks = info.chunk_bits;
      }
    }
  }

  void CheckRecordsOfMissingInodes() {
    // Grouped per inode and kind: one line for all xattrs of an inode.
    std::map<std::pair<uint64_t, char>, std::vector<std::string>> grouped;
    for (const auto& m : missing_) grouped[{m.ino, m.kind}].push_back(m.key);
    for (const auto& [at, ks] : grouped) {
      const auto [ino, kind] = at;
      const char* what = kind == 'O'   ? "orphan_record_missing_inode"
                         : kind == 'X' ? "xattr_missing_inode"
                                       : "lock_missing_inode";
      const char* records = kind == 'O'   ? "orphan record"
                            : kind == 'X' ? "xattr record"
                                          : "lock record";
      std::string msg =
          absl::StrCat(ks.size(), " ", records, ks.size() > 1 ? "s " : " ", KeyName(ks.front()),
                       ks.size() > 1 ? " ..." : "", " of inode ", ino, ", which does not exist",
                       garbage_.count(ino) ? " (deleted, waiting to be freed)" : "");
      size_t p = Add(what, msg, ino, KeyName(ks.front()));
      AddBatchFix(p, ks.size() > 1 ? "delete the records" : "delete the record");
      for (const std::string& k : ks) deletes_.push_back(k);
    }
  }

  void CheckCounters() {
    report_->used_blocks = expected_used_;
    report_->granted_blocks = granted_sum_;
    if (!counters_) {
      Add("counters_missing",
          absl::StrCat("no counters record (", keys::Counters(),
                       "): a server would start a new volume over this one"),
          0, keys::Counters());
      return;
    }
    proto::Counters fixed = *counters_;
    report_->capacity_blocks = counters_->capacity_blocks();
    const std::string key = keys::Counters();
    auto counter = [&](const char* kind, uint64_t recorded, uint64_t want, const std::string& why,
                       void (proto::Counters::*set)(uint64_t)) {
      if (recorded == want) return;
      size_t p = Add(kind, absl::StrCat("counters: ", kind, " is ", recorded, ", ", why), 0, key);
      AddBatchFix(p, absl::StrCat("set ", kind, " to ", want));
      (fixed.*set)(want);
      fix_counters_ = true;
    };
    counter("used_blocks", counters_->used_blocks(), expected_used_,
            absl::StrCat("the chunk records hold ", expected_used_, " blocks"),
            &proto::Counters::set_used_blocks);
    counter("granted_blocks", counters_->granted_blocks(), granted_sum_,
            absl::StrCat("the sessions' grants (L records) add up to ", granted_sum_, " blocks"),
            &proto::Counters::set_granted_blocks);
    counter("inodes", counters_->inodes(), inodes_.size(),
            absl::StrCat("there are ", inodes_.size(), " inode records"),
            &proto::Counters::set_inodes);
    if (counters_->next_ino() <= max_ino_) {
      counter("next_ino", counters_->next_ino(), max_ino_ + 1,
              absl::StrCat("but inode number ", max_ino_,
                           " is in use: a new inode would take a used number"),
              &proto::Counters::set_next_ino);
    }
    if (counters_->next_cookie() <= max_cookie_) {
      counter("next_cookie", counters_->next_cookie(), max_cookie_ + 1,
              absl::StrCat("but cookie ", max_cookie_,
                           " is in use: a new entry would take a used readdir position"),
              &proto::Counters::set_next_cookie);
    }
    const uint64_t capacity = counters_->capacity_blocks();
    if (capacity != 0 && expected_used_ + granted_sum_ > capacity) {
      Add("over_capacity",
          absl::StrCat("used ", expected_used_, " + granted ", granted_sum_,
                       " blocks exceed the capacity, ", capacity, " blocks"),
          0, key);
    }
    if (fix_counters_) fixed_counters_ = fixed;
  }

  absl::Status Repair() {
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

  const FsckOptions& options_;
  rocksdb::DB* const db_;
  FsckReport* const report_;
  const std::string chunk_dir_;
  const uint64_t blocks_per_chunk_;

  // What the records say.
  std::map<uint64_t, InodeInfo> inodes_;
  std::vector<Entry> entries_;
  std::map<std::pair<uint64_t, uint64_t>, CookieRecord> cookies_;  // (dir, cookie)
  std::map<std::pair<uint64_t, uint64_t>, ChunkInfo> chunks_;      // (ino, index)
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> chunk_files_;  // (ino, index) -> bytes
  std::map<uint64_t, uint64_t> garbage_;                           // ino -> size
  struct Missing {
    char kind;
    uint64_t ino;
    std::string key;
  };
  std::vector<Missing> missing_;  // O, X, P records of inodes without a record
  std::optional<proto::Counters> counters_;
  uint64_t granted_sum_ = 0;
  uint64_t max_ino_ = kRootIno;
  uint64_t max_cookie_ = kFirstCookie - 1;

  // Derived.
  std::unordered_map<uint64_t, std::vector<std::pair<uint64_t, const std::string*>>> children_;
  std::unordered_map<uint64_t, std::pair<uint64_t, std::string>> found_as_;  // (dir, name)
  uint64_t expected_used_ = 0;

  // Repairs.
  std::map<uint64_t, InodeFix> fixes_;
  std::vector<std::string> deletes_;
  bool fix_counters_ = false;
  std::optional<proto::Counters> fixed_counters_;
  std::vector<size_t> batch_fixed_;
  std::vector<std::pair<std::string, size_t>> unlinks_;  // (path, problem)
};

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
  std::string s = absl::StrCat(
      "fsck ", data_dir, ": ", inodes, " inodes (", directories, " directories, ", files,
      " files, ", orphans, " open orphans, ", garbage, " waiting to be freed), ", entries,
      " entries, ", chunk_records, " chunk records, ", chunk_files, " chunk files; used ",
      used_blocks, " blocks, granted ", granted_blocks, ", capacity ", capacity_blocks, ": ");
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
  Checker checker(options, db.get(), &report);
  RETURN_IF_ERROR(checker.Run());
  rocksdb::Status closed = db->Close();
  if (!closed.ok() && !closed.IsNotSupported()) {
    return absl::DataLossError(absl::StrCat("closing the metadata store: ", closed.ToString()));
  }
  return report;
}

}  // namespace grantfs
