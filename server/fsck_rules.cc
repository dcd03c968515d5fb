// Checker, second pass: the invariants of the namespace, the data and the
// ledger (the list is in server/fsck.h), over the summary the scan made.
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
#include "server/fsck_checker.h"
#include "server/keys.h"

namespace grantfs::fsck_internal {

void Checker::CheckEntries() {
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
      if (r.ino() != e.d.ino()) diffs.push_back(absl::StrCat("inode ", r.ino(), " != ", e.d.ino()));
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

void Checker::WalkFromRoot() {
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

uint64_t Checker::GarbageSpan(uint64_t ino, uint64_t size) const {
  uint64_t span = (size + options_.chunk_size - 1) / options_.chunk_size;
  auto it = chunks_.lower_bound({ino + 1, 0});
  if (it != chunks_.begin() && (--it)->first.first == ino)
    span = std::max(span, it->first.second + 1);
  return span;
}

void Checker::CheckChunks() {
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
    if (!options_.metadata_only && !chunk_files_.count(at)) {
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

void Checker::CheckInodes() {
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
      // A file's record names the directory it was made in or last renamed
      // into (server/subtree.h). One from before that was kept names none
      // (0): with one name, its directory is that name's. (A directory it
      // no longer has a name in, after a link elsewhere and an unlink
      // there, is normal use, not a problem.)
      if (!dir && info.names == 1 && info.parent == 0) {
        const size_t p =
            Add("file_parent",
                absl::StrCat(Describe(ino), " is named ", Quote(info.first_name), " in directory ",
                             info.named_in,
                             " but its record names no directory (made before files kept theirs)"),
                ino, key);
        AddBatchFix(p, absl::StrCat("set its directory to ", info.named_in));
        fixes_[ino].parent = info.named_in;
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
      nlink_problem = Add(
          "nlink", absl::StrCat(Describe(ino), ": nlink is ", info.nlink, ", ", counted), ino, key);
      AddBatchFix(*nlink_problem, absl::StrCat("set nlink to ", expected));
      fixes_[ino].nlink = expected;
    }
    if (info.orphan_record && info.names > 0) {
      const std::string okey = KeyName(keys::Orphan(ino));
      if (nlink_problem) {
        report_->problems[*nlink_problem].fix += absl::StrCat(", delete its orphan record ", okey);
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

void Checker::CheckRecordsOfMissingInodes() {
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

void Checker::CheckCounters() {
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

}  // namespace grantfs::fsck_internal
