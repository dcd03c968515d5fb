#include "server/namespace.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "server/dedupe.h"
#include "server/keys.h"

namespace grantfs {
namespace {

bool IsDir(const proto::InodeRecord& r) { return S_ISDIR(r.mode()); }

}  // namespace

// --- reads -------------------------------------------------------------------

absl::StatusOr<proto::Attr> Namespace::Lookup(const Caller& caller, uint64_t parent,
                                              const std::string& name) {
  if (name.size() > kNameMax) return ErrnoStatus(ENAMETOOLONG, "name");
  ASSIGN_OR_RETURN(proto::InodeRecord dir, inodes_->GetInode(parent));
  if (!IsDir(dir)) return ErrnoStatus(ENOTDIR, "lookup parent");
  RETURN_IF_ERROR(CheckAccess(dir, caller, kMayExec));
  if (name == ".") return ToAttr(parent, dir);
  if (name == "..") return inodes_->GetAttr(dir.parent());
  ASSIGN_OR_RETURN(std::optional<std::string> v, store_->Get(keys::Dirent(parent, name)));
  if (!v) return ErrnoStatus(ENOENT, name);
  proto::DirentRecord d;
  if (!d.ParseFromString(*v)) return ErrnoStatus(EIO, "corrupt dirent record");
  return inodes_->GetAttr(d.ino());
}

absl::StatusOr<std::string> Namespace::ReadLink(uint64_t ino) {
  ASSIGN_OR_RETURN(proto::InodeRecord rec, inodes_->GetInode(ino));
  if (!S_ISLNK(rec.mode())) return ErrnoStatus(EINVAL, "not a symlink");
  return rec.symlink_target();
}

absl::Status Namespace::ReadDir(const Caller& caller, uint64_t ino, uint64_t cookie, uint32_t max,
                                proto::ReadDirReply* reply) {
  ASSIGN_OR_RETURN(proto::InodeRecord dir, inodes_->GetInode(ino));
  if (!IsDir(dir)) return ErrnoStatus(ENOTDIR, "readdir");
  RETURN_IF_ERROR(CheckAccess(dir, caller, kMayRead));
  if (max == 0) max = 1;
  auto add = [&](const std::string& name, uint64_t c, proto::Attr attr) {
    proto::DirEntry* e = reply->add_entries();
    e->set_name(name);
    e->set_cookie(c);
    *e->mutable_attr() = std::move(attr);
  };
  if (cookie < 1) add(".", 1, ToAttr(ino, dir));
  if (cookie < 2 && reply->entries_size() < static_cast<int>(max)) {
    ASSIGN_OR_RETURN(proto::Attr up, inodes_->GetAttr(dir.parent()));
    add("..", 2, up);
  }
  const std::string prefix = keys::Prefix('E', ino);
  bool full = false;
  RETURN_IF_ERROR(
      store_->Scan(keys::DirCookie(ino, std::max<uint64_t>(cookie + 1, 3)), prefix,
                   [&](absl::string_view, absl::string_view value) -> absl::StatusOr<bool> {
                     if (reply->entries_size() >= static_cast<int>(max)) {
                       full = true;
                       return false;
                     }
                     proto::DirentRecord d;
                     if (!d.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
                       return ErrnoStatus(EIO, "corrupt dirent record");
                     }
                     absl::StatusOr<proto::Attr> attr = inodes_->GetAttr(d.ino());
                     if (!attr.ok()) {
                       if (ToErrno(attr.status()) == ENOENT) return true;  // removed meanwhile
                       return attr.status();
                     }
                     add(d.name(), d.cookie(), *std::move(attr));
                     return true;
                   }));
  if (full) return absl::OkStatus();
  reply->set_eof(true);
  return absl::OkStatus();
}

// --- changes ---------------------------------------------------------------

absl::Status Namespace::UseLoggedIno(MetaTxn* txn, uint64_t client_id, uint64_t ino) {
  ASSIGN_OR_RETURN(std::optional<std::string> raw, txn->Get(keys::Session(client_id)));
  proto::SessionRecord session;
  if (!raw || !session.ParseFromString(*raw)) {
    return ErrnoStatus(ESTALE, absl::StrCat("inode ", ino, ": session ", client_id,
                                            " has no record, so no inode numbers"));
  }
  for (auto& r : *session.mutable_ino_ranges()) {
    if (ino < r.first() || ino >= r.end()) continue;
    if (ino < std::max(r.first(), r.next())) {
      return ErrnoStatus(EEXIST, absl::StrCat("inode number ", ino, " was used already"));
    }
    r.set_next(ino + 1);
    txn->Put(keys::Session(client_id), session.SerializeAsString());
    return absl::OkStatus();
  }
  return ErrnoStatus(EINVAL,
                     absl::StrCat("inode ", ino, " is not in a range of session ", client_id));
}

proto::InodeRecord Namespace::NewInode(const Caller& caller, const proto::InodeRecord& dir,
                                       uint32_t mode, int64_t now) {
  proto::InodeRecord rec;
  rec.set_uid(caller.uid);
  // A setgid directory passes its group on, and its setgid bit to subdirs.
  if (dir.mode() & S_ISGID) {
    rec.set_gid(dir.gid());
    if (S_ISDIR(mode)) mode |= S_ISGID;
  } else {
    rec.set_gid(caller.gid);
  }
  // Only a member of the file's group (or root) may create it setgid.
  if (S_ISREG(mode) && (mode & S_ISGID) && !caller.IsRoot() && !caller.InGroup(rec.gid())) {
    mode &= ~S_ISGID;
  }
  rec.set_mode(mode);
  rec.set_nlink(S_ISDIR(mode) ? 2 : 1);
  rec.set_atime_ns(now);
  rec.set_mtime_ns(now);
  rec.set_ctime_ns(now);
  return rec;
}

absl::StatusOr<proto::Attr> Namespace::CreateEntry(const Caller& caller, uint64_t parent,
                                                   const std::string& name, proto::InodeRecord rec,
                                                   RequestTag* tag) {
  proto::Attr out;
  RETURN_IF_ERROR(store_->Mutate(tag, [&](MetaTxn* txn) -> absl::Status {
    ASSIGN_OR_RETURN(proto::InodeRecord dir, txn->GetInode(parent));
    if (!IsDir(dir)) return ErrnoStatus(ENOTDIR, "create parent");
    if (dir.nlink() == 0) return ErrnoStatus(ENOENT, "parent was removed");
    // As on Linux: an existing name is EEXIST (or, for open(O_CREAT), opened)
    // without write permission on the directory; only search is needed.
    RETURN_IF_ERROR(CheckAccess(dir, caller, kMayExec));
    ASSIGN_OR_RETURN(auto existing, txn->GetDirent(parent, name));
    if (existing) return ErrnoStatus(EEXIST, name);
    RETURN_IF_ERROR(CheckAccess(dir, caller, kMayWrite));
    proto::InodeRecord inode = NewInode(caller, dir, rec.mode(), txn->NowNanos());
    inode.set_rdev(rec.rdev());
    inode.set_symlink_target(rec.symlink_target());
    uint64_t ino;
    if (tag != nullptr && tag->ino != 0) {
      // An operation of a mount's log: the number it gave the inode.
      RETURN_IF_ERROR(UseLoggedIno(txn, tag->client_id, tag->ino));
      ino = tag->ino;
    } else {
      ino = txn->counters().next_ino();
      txn->counters().set_next_ino(ino + 1);
    }
    txn->counters().set_inodes(txn->counters().inodes() + 1);
    if (tag != nullptr) tag->value = ino;  // a retry answers with it
    // A directory's "..", a file's directory (server/subtree.h).
    inode.set_parent(parent);
    if (IsDir(inode)) dir.set_nlink(dir.nlink() + 1);
    proto::DirentRecord d;
    d.set_ino(ino);
    d.set_cookie(txn->counters().next_cookie());
    d.set_type(inode.mode() & S_IFMT);
    txn->counters().set_next_cookie(d.cookie() + 1);
    dir.set_mtime_ns(inode.ctime_ns());
    dir.set_ctime_ns(inode.ctime_ns());
    txn->PutInode(parent, dir);
    txn->PutInode(ino, inode);
    txn->PutDirent(parent, name, d);
    out = ToAttr(ino, inode);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<proto::Attr> Namespace::MkNod(const Caller& caller, uint64_t parent,
                                             const std::string& name, uint32_t mode, uint64_t rdev,
                                             uint32_t umask, bool exclusive, bool* created_out,
                                             RequestTag* tag) {
  if (created_out != nullptr) *created_out = false;
  RETURN_IF_ERROR(ValidateName(name));
  const uint32_t type = mode & S_IFMT;
  switch (type) {
    case S_IFREG:
    case S_IFDIR:
    case S_IFIFO:
    case S_IFSOCK:
      break;
    case S_IFCHR:
    case S_IFBLK:
      if (!caller.IsRoot()) return ErrnoStatus(EPERM, "device node");
      break;
    default:
      return ErrnoStatus(EINVAL, "file type");
  }
  if (type != S_IFDIR) exclusive = exclusive || type != S_IFREG;
  proto::InodeRecord rec;
  rec.set_mode(type | (mode & 07777 & ~umask));
  rec.set_rdev(type == S_IFCHR || type == S_IFBLK ? rdev : 0);
  // open(O_CREAT) without O_EXCL of an existing name opens it; a name
  // removed again between the two steps (another node) is created anew.
  absl::StatusOr<proto::Attr> created;
  for (int attempt = 0; attempt < 8; ++attempt) {
    created = CreateEntry(caller, parent, name, rec, tag);
    if (created.ok() || type == S_IFDIR || exclusive || ToErrno(created.status()) != EEXIST) {
      if (created.ok() && created_out != nullptr) *created_out = true;
      return created;
    }
    absl::StatusOr<proto::Attr> attr = Lookup(caller, parent, name);
    if (!attr.ok() && ToErrno(attr.status()) == ENOENT) continue;
    RETURN_IF_ERROR(attr.status());
    // The kernel creates only after it found no such name: one that is not
    // a regular file now (a directory, a symlink made on another node)
    // means its view was stale; ESTALE makes it look the name up again and
    // retry the open, which then follows the symlink or says EISDIR or
    // ELOOP as POSIX wants.
    if (!S_ISREG(attr->mode())) return ErrnoStatus(ESTALE, "the name is no longer a regular file");
    return attr;
  }
  return created;
}

absl::StatusOr<proto::Attr> Namespace::Symlink(const Caller& caller, uint64_t parent,
                                               const std::string& name, const std::string& target,
                                               RequestTag* tag) {
  RETURN_IF_ERROR(ValidateName(name));
  RETURN_IF_ERROR(ValidateSymlinkTarget(target));
  proto::InodeRecord rec;
  rec.set_mode(S_IFLNK | 0777);
  rec.set_symlink_target(target);
  return CreateEntry(caller, parent, name, rec, tag);
}

absl::StatusOr<proto::Attr> Namespace::Link(const Caller& caller, uint64_t ino, uint64_t new_parent,
                                            const std::string& new_name, RequestTag* tag) {
  RETURN_IF_ERROR(ValidateName(new_name));
  proto::Attr out;
  RETURN_IF_ERROR(store_->Mutate(tag, [&](MetaTxn* txn) -> absl::Status {
    ASSIGN_OR_RETURN(proto::InodeRecord inode, txn->GetInode(ino));
    if (IsDir(inode)) return ErrnoStatus(EPERM, "hard link to a directory");
    if (inode.nlink() == 0) return ErrnoStatus(ENOENT, "link of a removed file");
    if (inode.nlink() >= 65000) return ErrnoStatus(EMLINK, "too many links");
    ASSIGN_OR_RETURN(proto::InodeRecord dir, txn->GetInode(new_parent));
    if (!IsDir(dir)) return ErrnoStatus(ENOTDIR, "link parent");
    if (dir.nlink() == 0) return ErrnoStatus(ENOENT, "parent was removed");
    RETURN_IF_ERROR(CheckAccess(dir, caller, kMayWrite | kMayExec));
    ASSIGN_OR_RETURN(auto existing, txn->GetDirent(new_parent, new_name));
    if (existing) return ErrnoStatus(EEXIST, new_name);
    const int64_t now = txn->NowNanos();
    inode.set_nlink(inode.nlink() + 1);
    inode.set_ctime_ns(now);
    dir.set_mtime_ns(now);
    dir.set_ctime_ns(now);
    proto::DirentRecord d;
    d.set_ino(ino);
    d.set_cookie(txn->counters().next_cookie());
    d.set_type(inode.mode() & S_IFMT);
    txn->counters().set_next_cookie(d.cookie() + 1);
    txn->PutInode(new_parent, dir);
    txn->PutInode(ino, inode);
    txn->PutDirent(new_parent, new_name, d);
    out = ToAttr(ino, inode);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<bool> Namespace::DirIsEmpty(uint64_t ino) {
  const std::string prefix = keys::Prefix('E', ino);
  bool empty = true;
  RETURN_IF_ERROR(store_->Scan(prefix, prefix,
                               [&](absl::string_view, absl::string_view) -> absl::StatusOr<bool> {
                                 empty = false;
                                 return false;
                               }));
  return empty;
}

absl::StatusOr<Removed> Namespace::Remove(const Caller& caller, uint64_t parent,
                                          const std::string& name, bool is_dir,
                                          uint64_t expected_ino, RequestTag* tag) {
  if (name == ".") return ErrnoStatus(EINVAL, "rmdir .");
  if (name == "..") return ErrnoStatus(ENOTEMPTY, "rmdir ..");
  RETURN_IF_ERROR(ValidateName(name));
  Removed removed;
  RETURN_IF_ERROR(store_->Mutate(tag, [&](MetaTxn* txn) -> absl::Status {
    ASSIGN_OR_RETURN(proto::InodeRecord dir, txn->GetInode(parent));
    if (!IsDir(dir)) return ErrnoStatus(ENOTDIR, "remove parent");
    RETURN_IF_ERROR(CheckAccess(dir, caller, kMayWrite | kMayExec));
    ASSIGN_OR_RETURN(auto d, txn->GetDirent(parent, name));
    if (!d) return ErrnoStatus(ENOENT, name);
    if (expected_ino != 0 && d->ino() != expected_ino) {
      return ErrnoStatus(ESTALE, "the name was replaced since the caller looked it up");
    }
    ASSIGN_OR_RETURN(proto::InodeRecord inode, txn->GetInode(d->ino()));
    if (is_dir && !IsDir(inode)) return ErrnoStatus(ENOTDIR, name);
    if (!is_dir && IsDir(inode)) return ErrnoStatus(EISDIR, name);
    RETURN_IF_ERROR(CheckSticky(dir, inode, caller));
    if (is_dir) {
      ASSIGN_OR_RETURN(bool empty, DirIsEmpty(d->ino()));
      if (!empty) return ErrnoStatus(ENOTEMPTY, name);
    }
    const int64_t now = txn->NowNanos();
    txn->DeleteDirent(parent, name, *d);
    if (is_dir) {
      inode.set_nlink(0);
      dir.set_nlink(dir.nlink() - 1);
    } else {
      inode.set_nlink(inode.nlink() - 1);
    }
    inode.set_ctime_ns(now);
    dir.set_mtime_ns(now);
    dir.set_ctime_ns(now);
    txn->PutInode(parent, dir);
    txn->PutInode(d->ino(), inode);
    if (inode.nlink() == 0) txn->Put(keys::Orphan(d->ino()), orphans_->RecordOf(d->ino()));
    removed.ino = d->ino();
    removed.nlink = inode.nlink();
    return absl::OkStatus();
  }));
  return removed;
}

absl::StatusOr<bool> Namespace::IsAncestor(MetaTxn* txn, uint64_t ancestor, uint64_t dir) {
  // Walk up from `dir` through ".." (directories have one parent).
  for (int depth = 0; depth < 100000; ++depth) {
    if (dir == ancestor) return true;
    if (dir == kRootIno) return false;
    ASSIGN_OR_RETURN(proto::InodeRecord rec, txn->GetInode(dir));
    dir = rec.parent();
  }
  return ErrnoStatus(ELOOP, "directory tree too deep");
}

absl::StatusOr<Removed> Namespace::Rename(const Caller& caller, uint64_t parent,
                                          const std::string& name, uint64_t new_parent,
                                          const std::string& new_name, uint32_t flags,
                                          uint64_t expected_ino, uint64_t expected_new_ino,
                                          RequestTag* tag) {
  constexpr uint32_t kNoReplace = 1, kExchange = 2;
  if (flags & ~(kNoReplace | kExchange)) return ErrnoStatus(EINVAL, "rename flags");
  if ((flags & kNoReplace) && (flags & kExchange)) {
    return ErrnoStatus(EINVAL, "RENAME_NOREPLACE with RENAME_EXCHANGE");
  }
  if (name == "." || name == ".." || new_name == "." || new_name == "..") {
    return ErrnoStatus(EBUSY, "rename of . or ..");
  }
  RETURN_IF_ERROR(ValidateName(name));
  RETURN_IF_ERROR(ValidateName(new_name));
  Removed removed;
  RETURN_IF_ERROR(store_->Mutate(tag, [&](MetaTxn* txn) -> absl::Status {
    ASSIGN_OR_RETURN(proto::InodeRecord src_dir, txn->GetInode(parent));
    ASSIGN_OR_RETURN(proto::InodeRecord dst_dir, txn->GetInode(new_parent));
    if (!IsDir(src_dir) || !IsDir(dst_dir)) return ErrnoStatus(ENOTDIR, "rename parent");
    RETURN_IF_ERROR(CheckAccess(src_dir, caller, kMayWrite | kMayExec));
    RETURN_IF_ERROR(CheckAccess(dst_dir, caller, kMayWrite | kMayExec));
    if (dst_dir.nlink() == 0) return ErrnoStatus(ENOENT, "target parent was removed");
    ASSIGN_OR_RETURN(auto src, txn->GetDirent(parent, name));
    if (!src) return ErrnoStatus(ENOENT, name);
    ASSIGN_OR_RETURN(auto dst, txn->GetDirent(new_parent, new_name));
    if ((expected_ino != 0 && src->ino() != expected_ino) ||
        (expected_new_ino != 0 && dst && dst->ino() != expected_new_ino)) {
      return ErrnoStatus(ESTALE, "a name was replaced since the caller looked it up");
    }
    if ((flags & kNoReplace) && dst) return ErrnoStatus(EEXIST, new_name);
    if ((flags & kExchange) && !dst) return ErrnoStatus(ENOENT, new_name);
    ASSIGN_OR_RETURN(proto::InodeRecord src_inode, txn->GetInode(src->ino()));
    RETURN_IF_ERROR(CheckSticky(src_dir, src_inode, caller));
    const bool src_is_dir = IsDir(src_inode);
    removed.moved = src->ino();
    if ((flags & kExchange) && dst) removed.exchanged = dst->ino();
    const bool cross = parent != new_parent;
    // Moving a directory rewrites its "..": that needs write permission on it.
    if (src_is_dir && cross) RETURN_IF_ERROR(CheckAccess(src_inode, caller, kMayWrite));
    if (src_is_dir && cross) {
      ASSIGN_OR_RETURN(bool loop, IsAncestor(txn, src->ino(), new_parent));
      if (loop) return ErrnoStatus(EINVAL, "rename a directory into itself");
    }
    if (dst && dst->ino() == src->ino()) {
      // rename(2) onto another name of the same file does nothing. The
      // kernel never sends one (it answers it itself when both of its
      // entries hold the same inode), so from a mount that says which
      // inodes it meant, this means its two entries differed: one is stale,
      // and the kernel would mark the target it cached as removed (a live
      // directory then lists empty on that node). ESTALE makes it look both
      // names up again.
      if (expected_ino != 0) {
        return ErrnoStatus(ESTALE, "source and target are one inode here, not for the caller");
      }
      removed.moved = 0;  // nothing moved: both names stay
      removed.exchanged = 0;
      return absl::OkStatus();
    }
    const int64_t now = txn->NowNanos();

    std::optional<proto::InodeRecord> dst_inode;
    if (dst) {
      ASSIGN_OR_RETURN(dst_inode, txn->GetInode(dst->ino()));
      RETURN_IF_ERROR(CheckSticky(dst_dir, *dst_inode, caller));
    }
    if (flags & kExchange) {
      const bool dst_is_dir = IsDir(*dst_inode);
      if (dst_is_dir && cross) {
        RETURN_IF_ERROR(CheckAccess(*dst_inode, caller, kMayWrite));
        ASSIGN_OR_RETURN(bool loop, IsAncestor(txn, dst->ino(), parent));
        if (loop) return ErrnoStatus(EINVAL, "exchange a directory into itself");
      }
      // Each name now points at the other inode; positions stay.
      proto::DirentRecord a = *src, b = *dst;
      a.set_ino(dst->ino());
      a.set_type(dst_inode->mode() & S_IFMT);
      b.set_ino(src->ino());
      b.set_type(src_inode.mode() & S_IFMT);
      txn->PutDirent(parent, name, a);
      txn->PutDirent(new_parent, new_name, b);
      if (cross) {
        src_inode.set_parent(new_parent);
        dst_inode->set_parent(parent);
        if (src_is_dir != dst_is_dir) {
          const int delta = src_is_dir ? 1 : -1;  // subdir moved to new_parent
          dst_dir.set_nlink(dst_dir.nlink() + delta);
          txn->PutInode(new_parent, dst_dir);
          ASSIGN_OR_RETURN(src_dir, txn->GetInode(parent));
          src_dir.set_nlink(src_dir.nlink() - delta);
        }
      }
      src_inode.set_ctime_ns(now);
      dst_inode->set_ctime_ns(now);
      txn->PutInode(src->ino(), src_inode);
      txn->PutInode(dst->ino(), *dst_inode);
    } else {
      if (dst) {
        const bool dst_is_dir = IsDir(*dst_inode);
        if (src_is_dir && !dst_is_dir) return ErrnoStatus(ENOTDIR, new_name);
        if (!src_is_dir && dst_is_dir) return ErrnoStatus(EISDIR, new_name);
        if (dst_is_dir) {
          ASSIGN_OR_RETURN(bool empty, DirIsEmpty(dst->ino()));
          if (!empty) return ErrnoStatus(ENOTEMPTY, new_name);
          dst_inode->set_nlink(0);
          dst_dir.set_nlink(dst_dir.nlink() - 1);
        } else {
          dst_inode->set_nlink(dst_inode->nlink() - 1);
        }
        dst_inode->set_ctime_ns(now);
        txn->PutInode(dst->ino(), *dst_inode);
        if (dst_inode->nlink() == 0)
          txn->Put(keys::Orphan(dst->ino()), orphans_->RecordOf(dst->ino()));
        removed.ino = dst->ino();
        removed.nlink = dst_inode->nlink();
        txn->DeleteDirent(new_parent, new_name, *dst);
      }
      txn->DeleteDirent(parent, name, *src);
      proto::DirentRecord moved = *src;
      moved.set_cookie(txn->counters().next_cookie());
      txn->counters().set_next_cookie(moved.cookie() + 1);
      txn->PutDirent(new_parent, new_name, moved);
      if (cross) src_inode.set_parent(new_parent);  // a file's too (server/subtree.h)
      if (src_is_dir && cross) dst_dir.set_nlink(dst_dir.nlink() + 1);
      src_inode.set_ctime_ns(now);
      txn->PutInode(src->ino(), src_inode);
      txn->PutInode(new_parent, dst_dir);
      if (src_is_dir && cross) {
        ASSIGN_OR_RETURN(src_dir, txn->GetInode(parent));
        src_dir.set_nlink(src_dir.nlink() - 1);
      }
    }
    // Both directories' times; re-read so one directory is not written twice
    // from stale copies.
    ASSIGN_OR_RETURN(dst_dir, txn->GetInode(new_parent));
    if (cross) {
      dst_dir.set_mtime_ns(now);
      dst_dir.set_ctime_ns(now);
      txn->PutInode(new_parent, dst_dir);
      src_dir.set_mtime_ns(now);
      src_dir.set_ctime_ns(now);
      txn->PutInode(parent, src_dir);
    } else {
      dst_dir.set_mtime_ns(now);
      dst_dir.set_ctime_ns(now);
      txn->PutInode(new_parent, dst_dir);
    }
    return absl::OkStatus();
  }));
  return removed;
}

}  // namespace grantfs
