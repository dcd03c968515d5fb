#include "server/inodes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cerrno>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/allocator.h"
#include "server/keys.h"

namespace grantfs {
namespace {

bool IsDir(const proto::InodeRecord& r) { return S_ISDIR(r.mode()); }

}  // namespace

proto::Attr ToAttr(uint64_t ino, const proto::InodeRecord& rec) {
  proto::Attr a;
  a.set_ino(ino);
  a.set_mode(rec.mode());
  a.set_nlink(rec.nlink());
  a.set_uid(rec.uid());
  a.set_gid(rec.gid());
  a.set_size(S_ISLNK(rec.mode()) ? rec.symlink_target().size() : rec.size());
  a.set_blocks(rec.allocated_blocks() * (kBlockSize / 512));
  a.set_rdev(rec.rdev());
  a.set_atime_ns(rec.atime_ns());
  a.set_mtime_ns(rec.mtime_ns());
  a.set_ctime_ns(rec.ctime_ns());
  return a;
}

absl::StatusOr<proto::InodeRecord> Inodes::GetInode(uint64_t ino) {
  ASSIGN_OR_RETURN(std::optional<std::string> v, store_->Get(keys::Inode(ino)));
  if (!v) return ErrnoStatus(ENOENT, absl::StrCat("inode ", ino));
  proto::InodeRecord rec;
  if (!rec.ParseFromString(*v)) return ErrnoStatus(EIO, "corrupt inode record");
  return rec;
}

absl::StatusOr<proto::Attr> Inodes::GetAttr(uint64_t ino) {
  ASSIGN_OR_RETURN(proto::InodeRecord rec, GetInode(ino));
  return ToAttr(ino, rec);
}

absl::StatusOr<proto::Attr> Inodes::CheckOpen(const Caller& caller, uint64_t ino, uint32_t flags,
                                              bool created) {
  ASSIGN_OR_RETURN(proto::InodeRecord rec, GetInode(ino));
  int mask = 0;
  switch (flags & O_ACCMODE) {
    case O_RDONLY:
      mask = kMayRead;
      break;
    case O_WRONLY:
      mask = kMayWrite;
      break;
    default:
      mask = kMayRead | kMayWrite;
  }
  if (flags & O_TRUNC) mask |= kMayWrite;
  if (IsDir(rec) && (mask & kMayWrite)) return ErrnoStatus(EISDIR, "open");
  if (!(created && rec.uid() == caller.uid)) RETURN_IF_ERROR(CheckAccess(rec, caller, mask));
  return ToAttr(ino, rec);
}

absl::StatusOr<proto::InodeRecord> Inodes::CheckTruncate(const Caller& caller, uint64_t ino,
                                                         uint64_t size, bool opened) {
  ASSIGN_OR_RETURN(proto::InodeRecord rec, GetInode(ino));
  if (IsDir(rec)) return ErrnoStatus(EISDIR, "truncate");
  if (!S_ISREG(rec.mode())) return ErrnoStatus(EINVAL, "truncate");
  if (size > kMaxFileSize) return ErrnoStatus(EFBIG, "truncate");
  if (!opened) RETURN_IF_ERROR(CheckAccess(rec, caller, kMayWrite));
  return rec;
}

absl::StatusOr<proto::Attr> Inodes::SetAttr(const Caller& caller, const proto::SetAttrRequest& req,
                                            bool opened, RequestTag* tag) {
  using V = proto::SetAttrRequest;
  const uint32_t valid = req.valid();
  proto::Attr out;
  RETURN_IF_ERROR(store_->Mutate(tag, [&](MetaTxn* txn) -> absl::Status {
    ASSIGN_OR_RETURN(proto::InodeRecord rec, txn->GetInode(req.ino()));
    const int64_t now = txn->NowNanos();
    if (valid & V::MODE) {
      uint32_t mode = req.mode() & 07777;
      if (IsSetIdKill(rec.mode(), mode)) {
        // A write or truncate by a non-owner drops set-user-ID and
        // set-group-ID: FUSE's kernel asks for it as a chmod in the
        // writer's name (file_remove_privs). Anyone who may write the file
        // may do that (Linux's rule); a real chmod stays the owner's.
        if (!opened && !caller.IsRoot() && caller.uid != rec.uid() &&
            !CheckAccess(rec, caller, kMayWrite).ok()) {
          return ErrnoStatus(EPERM, "not the owner");  // chmod(2)'s answer
        }
      } else {
        RETURN_IF_ERROR(CheckOwner(rec, caller));
      }
      if (!caller.IsRoot() && !caller.InGroup(rec.gid())) mode &= ~S_ISGID;
      rec.set_mode((rec.mode() & S_IFMT) | mode);
    }
    if (valid & (V::UID | V::GID)) {
      const bool uid_change = (valid & V::UID) && req.uid() != rec.uid();
      const bool gid_change = (valid & V::GID) && req.gid() != rec.gid();
      if (!caller.IsRoot()) {
        if (uid_change) return ErrnoStatus(EPERM, "chown");
        if (gid_change && (caller.uid != rec.uid() || !caller.InGroup(req.gid()))) {
          return ErrnoStatus(EPERM, "chgrp");
        }
        if (!uid_change && !gid_change) RETURN_IF_ERROR(CheckOwner(rec, caller));
      }
      if (valid & V::UID) rec.set_uid(req.uid());
      if (valid & V::GID) rec.set_gid(req.gid());
      // A change of owner drops set-user-ID, and set-group-ID of executables.
      if ((uid_change || gid_change) && !IsDir(rec)) {
        uint32_t mode = rec.mode() & ~S_ISUID;
        if (mode & S_IXGRP) mode &= ~S_ISGID;
        rec.set_mode(mode);
      }
    }
    if (valid & V::SIZE) {
      if (IsDir(rec)) return ErrnoStatus(EISDIR, "truncate");
      if (!S_ISREG(rec.mode())) return ErrnoStatus(EINVAL, "truncate");
      if (req.size() > kMaxFileSize) return ErrnoStatus(EFBIG, "truncate");
      if (!opened) RETURN_IF_ERROR(CheckAccess(rec, caller, kMayWrite));
      if (req.size() < rec.size()) {
        RETURN_IF_ERROR(CutAllocation(txn, store_->chunk_size(), req.ino(), &rec, req.size()));
      }
      rec.set_size(req.size());
      rec.set_mtime_ns(now);
    }
    const bool explicit_times =
        (valid & (V::ATIME | V::MTIME)) && !(valid & (V::ATIME_NOW | V::MTIME_NOW));
    if (valid & (V::ATIME | V::MTIME | V::ATIME_NOW | V::MTIME_NOW)) {
      if (explicit_times) {
        RETURN_IF_ERROR(CheckOwner(rec, caller));
      } else if (!caller.IsRoot() && caller.uid != rec.uid()) {
        RETURN_IF_ERROR(CheckAccess(rec, caller, kMayWrite));
      }
      if (valid & V::ATIME_NOW) {
        rec.set_atime_ns(now);
      } else if (valid & V::ATIME) {
        rec.set_atime_ns(req.atime_ns());
      }
      if (valid & V::MTIME_NOW) {
        rec.set_mtime_ns(now);
      } else if (valid & V::MTIME) {
        rec.set_mtime_ns(req.mtime_ns());
      }
    }
    rec.set_ctime_ns(now);
    txn->PutInode(req.ino(), rec);
    out = ToAttr(req.ino(), rec);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::string> Inodes::GetXattr(const Caller& caller, uint64_t ino,
                                             const std::string& name) {
  RETURN_IF_ERROR(ValidateXattr(name, 0));
  ASSIGN_OR_RETURN(proto::InodeRecord rec, GetInode(ino));
  if (name.rfind("trusted.", 0) == 0 && !caller.IsRoot()) {
    return ErrnoStatus(ENODATA, name);
  }
  if (name.rfind("user.", 0) == 0) RETURN_IF_ERROR(CheckAccess(rec, caller, kMayRead));
  ASSIGN_OR_RETURN(std::optional<std::string> v, store_->Get(keys::Xattr(ino, name)));
  if (!v) return ErrnoStatus(ENODATA, name);
  return *std::move(v);
}

absl::StatusOr<std::vector<std::string>> Inodes::ListXattr(const Caller& caller, uint64_t ino) {
  ASSIGN_OR_RETURN(proto::InodeRecord rec, GetInode(ino));
  std::vector<std::string> names;
  const std::string prefix = keys::Prefix('X', ino);
  RETURN_IF_ERROR(store_->Scan(
      prefix, prefix, [&](absl::string_view key, absl::string_view) -> absl::StatusOr<bool> {
        std::string name(key.substr(prefix.size()));
        if (name.rfind("trusted.", 0) == 0 && !caller.IsRoot()) return true;
        names.push_back(std::move(name));
        return true;
      }));
  return names;
}

Inodes::Inodes(MetaStore* store) : store_(store) {
  absl::flat_hash_set<uint64_t> inos;
  const std::string prefix(1, 'X');
  absl::Status s = store_->Scan(
      prefix, prefix, [&](absl::string_view key, absl::string_view) -> absl::StatusOr<bool> {
        if (key.size() < 9) return true;  // fsck's to report
        inos.insert(keys::GetBigEndian64(key.data() + 1));
        return inos.size() <= kMaxXattrIndex;
      });
  absl::MutexLock l(&xattr_mu_);
  if (!s.ok()) {
    LOG(WARNING) << "reading the xattrs' keys: " << s << "; every listing will look for them";
  } else if (inos.size() <= kMaxXattrIndex) {
    may_have_xattrs_ = std::move(inos);
    xattr_index_ok_ = true;
  }
}

void Inodes::MayHaveXattrs(uint64_t ino) {
  absl::MutexLock l(&xattr_mu_);
  if (!xattr_index_ok_) return;
  may_have_xattrs_.insert(ino);
  if (may_have_xattrs_.size() > kMaxXattrIndex) {
    xattr_index_ok_ = false;
    may_have_xattrs_ = {};
  }
}

std::optional<size_t> Inodes::XattrIndexSize() {
  absl::MutexLock l(&xattr_mu_);
  if (!xattr_index_ok_) return std::nullopt;
  return may_have_xattrs_.size();
}

absl::StatusOr<bool> Inodes::HasXattrs(uint64_t ino) {
  {
    absl::MutexLock l(&xattr_mu_);
    if (xattr_index_ok_ && !may_have_xattrs_.contains(ino)) return false;
  }
  bool found = false;
  const std::string prefix = keys::Prefix('X', ino);
  RETURN_IF_ERROR(store_->Scan(prefix, prefix,
                               [&](absl::string_view, absl::string_view) -> absl::StatusOr<bool> {
                                 found = true;
                                 return false;
                               }));
  return found;
}

absl::Status Inodes::SetXattr(const Caller& caller, uint64_t ino, const std::string& name,
                              const std::string& value, uint32_t flags, RequestTag* tag) {
  RETURN_IF_ERROR(ValidateXattr(name, value.size()));
  if (flags & ~(XATTR_CREATE | XATTR_REPLACE)) return ErrnoStatus(EINVAL, "xattr flags");
  return store_->Mutate(tag, [&](MetaTxn* txn) -> absl::Status {
    ASSIGN_OR_RETURN(proto::InodeRecord rec, txn->GetInode(ino));
    if (name.rfind("trusted.", 0) == 0 && !caller.IsRoot()) {
      return ErrnoStatus(EPERM, "trusted xattr");
    }
    if (name.rfind("user.", 0) == 0) {
      if (!S_ISREG(rec.mode()) && !IsDir(rec)) return ErrnoStatus(EPERM, "user xattr type");
      if (IsDir(rec) && (rec.mode() & S_ISVTX) && !caller.IsRoot() && caller.uid != rec.uid()) {
        return ErrnoStatus(EPERM, "user xattr on sticky dir");
      }
      RETURN_IF_ERROR(CheckAccess(rec, caller, kMayWrite));
    } else {
      RETURN_IF_ERROR(CheckOwner(rec, caller));
    }
    ASSIGN_OR_RETURN(auto existing, txn->Get(keys::Xattr(ino, name)));
    if ((flags & XATTR_CREATE) && existing) return ErrnoStatus(EEXIST, name);
    if ((flags & XATTR_REPLACE) && !existing) return ErrnoStatus(ENODATA, name);
    MayHaveXattrs(ino);
    txn->Put(keys::Xattr(ino, name), value);
    rec.set_ctime_ns(txn->NowNanos());
    txn->PutInode(ino, rec);
    return absl::OkStatus();
  });
}

absl::Status Inodes::RemoveXattr(const Caller& caller, uint64_t ino, const std::string& name,
                                 RequestTag* tag) {
  RETURN_IF_ERROR(ValidateXattr(name, 0));
  return store_->Mutate(tag, [&](MetaTxn* txn) -> absl::Status {
    ASSIGN_OR_RETURN(proto::InodeRecord rec, txn->GetInode(ino));
    if (name.rfind("trusted.", 0) == 0 && !caller.IsRoot()) {
      return ErrnoStatus(EPERM, "trusted xattr");
    }
    if (name.rfind("user.", 0) == 0) {
      RETURN_IF_ERROR(CheckAccess(rec, caller, kMayWrite));
    } else {
      RETURN_IF_ERROR(CheckOwner(rec, caller));
    }
    ASSIGN_OR_RETURN(auto existing, txn->Get(keys::Xattr(ino, name)));
    if (!existing) return ErrnoStatus(ENODATA, name);
    txn->Delete(keys::Xattr(ino, name));
    rec.set_ctime_ns(txn->NowNanos());
    txn->PutInode(ino, rec);
    return absl::OkStatus();
  });
}

}  // namespace grantfs
