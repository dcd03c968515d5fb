// Checker, first pass: every record and every chunk file, read once into
// the summary the rules check (server/fsck_checker.h).
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
#include "proto/cluster.pb.h"
#include "rocksdb/write_batch.h"
#include "server/fsck_checker.h"
#include "server/keys.h"

namespace grantfs::fsck_internal {

absl::Status Checker::ScanRecords() {
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot_;
  ro.fill_cache = false;
  ro.verify_checksums = true;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  uint64_t estimate = 0;
  if (options_.progress && !db_->GetIntProperty("rocksdb.estimate-num-keys", &estimate)) {
    estimate = 0;
  }
  uint64_t scanned = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (options_.progress && ++scanned % 4096 == 0) {
      options_.progress("metadata records", scanned, estimate);
    }
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
      case keys::kGlobalMountKind: {  // server/mount_table.h
        proto::GlobalMountRecord rec;
        if (!Parse(v, &rec) || keys::GlobalMount(rec.path()) != key) {
          Corrupt(key, v, "GlobalMountRecord of its path");
        }
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
  if (options_.progress) options_.progress("metadata records", scanned, scanned);
  return absl::OkStatus();
}

absl::Status Checker::ScanChunkFiles() {
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
      // The chunk records say how many files there should be.
      if (options_.progress && report_->chunk_files % 256 == 0) {
        options_.progress("chunk files", report_->chunk_files, chunks_.size());
      }
    }
  }
  if (options_.progress) options_.progress("chunk files", report_->chunk_files, chunks_.size());
  return absl::OkStatus();
}

}  // namespace grantfs::fsck_internal
