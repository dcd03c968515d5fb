// The offline checker's internals (server/fsck.h is the interface): what
// it learns from the records and chunk files of a data directory, and the
// Checker that gathers it (fsck_scan.cc), checks the invariants
// (fsck_rules.cc) and repairs what has one right answer (fsck_checker.cc).
// Only the fsck files include this.
#ifndef GRANTFS_SERVER_FSCK_CHECKER_H_
#define GRANTFS_SERVER_FSCK_CHECKER_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/store.pb.h"
#include "rocksdb/db.h"
#include "server/fsck.h"
#include "server/meta_store.h"

namespace grantfs::fsck_internal {

inline constexpr char kReplicaPositionKey[] = "Rposition";
inline constexpr uint64_t kFirstCookie = 3;  // 1 and 2 are "." and ".."

// A printable name of a metadata key: "I/12", "D/1/name", "C/12/0".
std::string KeyName(const std::string& k);
// "directory", "regular file", ...
std::string TypeName(uint32_t mode);
// A name in quotes, bytes that are not printable escaped.
std::string Quote(const std::string& name);

template <typename Rec>
bool Parse(const rocksdb::Slice& v, Rec* rec) {
  return rec->ParseFromArray(v.data(), static_cast<int>(v.size()));
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
  std::optional<uint64_t> parent;
  std::optional<uint64_t> allocated_blocks;
};
class Checker {
 public:
  // Reads `db` as of `snapshot` (nullptr: as it is).
  Checker(const FsckOptions& options, rocksdb::DB* db, FsckReport* report,
          const rocksdb::Snapshot* snapshot = nullptr)
      : options_(options),
        db_(db),
        snapshot_(snapshot),
        report_(report),
        chunk_dir_(options.data_dir + "/chunks"),
        blocks_per_chunk_(options.chunk_size / kBlockSize) {}

  absl::Status Run();

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
  std::string PathOf(uint64_t ino) const;

  // "inode 12 (regular file /a/b)".
  std::string Describe(uint64_t ino) const;

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

  absl::Status ScanRecords();

  // Every file under chunks/: "<two hex digits of ino % 256>/<ino>.<index>".
  absl::Status ScanChunkFiles();

  void CheckEntries();

  void WalkFromRoot();

  // How far garbage inode `ino`'s deleter removes chunk files
  // (Orphans::GarbageChunkSpan).
  uint64_t GarbageSpan(uint64_t ino, uint64_t size) const;

  void CheckChunks();

  void CheckInodes();

  void CheckRecordsOfMissingInodes();

  void CheckCounters();

  absl::Status Repair();

  const FsckOptions& options_;
  rocksdb::DB* const db_;
  const rocksdb::Snapshot* const snapshot_;
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

}  // namespace grantfs::fsck_internal

#endif  // GRANTFS_SERVER_FSCK_CHECKER_H_
