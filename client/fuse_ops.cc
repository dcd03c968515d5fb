#include "client/fuse_ops.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>

#include "common/errno_status.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

FuseAdapter* Adapter(fuse_req_t req) { return static_cast<FuseAdapter*>(fuse_req_userdata(req)); }

// How long a lookup of a directory the kernel holds waits for the kernel's
// older names to be dropped (OpLookup): one change's round trip under load,
// several times over.
constexpr absl::Duration kNameDropWait = absl::Milliseconds(250);

// The server's inode of a node id the kernel sent (FuseAdapter::ServerIno);
// every op converts its node ids first.
uint64_t ServerIno(fuse_req_t req, fuse_ino_t node) { return Adapter(req)->ServerIno(node); }

// The one place an error becomes a FUSE reply.
void ReplyError(fuse_req_t req, const absl::Status& s) {
  int err = ToErrno(s);
  if (err == 0) err = EIO;  // an error path with an OK status is a bug
  fuse_reply_err(req, err);
}

// The caller's ids. The server checks permissions with the supplementary
// groups too (read from /proc by libfuse, so not free); read and write need
// none, since the kernel checked access at open: `with_groups` false keeps
// that /proc read off the data path.
Creds CredsOf(fuse_req_t req, bool with_groups = true) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  Creds c;
  c.uid = ctx->uid;
  c.gid = ctx->gid;
  c.pid = ctx->pid;
  // Root passes permission checks without groups.
  if (with_groups && c.uid != 0 && ctx->pid != 0) {
    gid_t groups[64];
    int n = fuse_req_getgroups(req, 64, groups);
    for (int i = 0; i < std::min(n, 64); ++i) c.groups.push_back(groups[i]);
  }
  return c;
}

struct timespec ToTimespec(int64_t ns) {
  struct timespec ts;
  ts.tv_sec = ns / 1000000000;
  ts.tv_nsec = ns % 1000000000;
  if (ts.tv_nsec < 0) {
    ts.tv_nsec += 1000000000;
    ts.tv_sec -= 1;
  }
  return ts;
}

int64_t ToNanos(const struct timespec& ts) {
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct stat ToStat(const proto::Attr& a) {
  struct stat st;
  memset(&st, 0, sizeof(st));
  st.st_ino = a.ino();
  st.st_mode = a.mode();
  st.st_nlink = a.nlink();
  st.st_uid = a.uid();
  st.st_gid = a.gid();
  st.st_size = a.size();
  st.st_blocks = a.blocks();
  st.st_blksize = 1 << 20;  // preferred I/O size: the extent the server likes
  st.st_rdev = a.rdev();
  st.st_atim = ToTimespec(a.atime_ns());
  st.st_mtim = ToTimespec(a.mtime_ns());
  st.st_ctim = ToTimespec(a.ctime_ns());
  return st;
}

// How long the kernel may keep the attributes of `ino`: with leases, what
// is left of their lease (0 without one), else the mount's timeout.
double AttrTimeout(FuseAdapter* a, const proto::Attr& attr) {
  const double leased = a->fs()->AttrTimeout(attr);
  return leased >= 0 ? leased : a->options().attr_timeout_s;
}

// How long the kernel may keep a name (or "not there") in `parent`.
// Without leases, or while the directory is recalled too often and not
// leased: the mount's timeout. With leases: for what is left of the
// directory's lease, if the mount holds it and the kernel takes
// FUSE_NOTIFY_INC_EPOCH (a recall then makes the kernel check every name it
// holds again, lock-free, before the ack); else not at all, and the mount
// answers every lookup from its leases. Dropping one kernel entry instead
// would take the directory's lock, which a change in flight on this node
// may hold while the server waits for this node's ack: a deadlock until
// the lease ran out. The kernel reads its epoch before it sends a lookup,
// create, mknod, mkdir, symlink or link (`epoch_first`), so an answer a
// recall overtook is checked again too; for readdirplus it reads it after
// the answer, so those names get 0.
double EntryTimeout(FuseAdapter* a, uint64_t parent, bool epoch_first = true) {
  if (a->fs()->KernelKeepsName(parent)) return a->options().entry_timeout_s;
  if (!epoch_first || !a->KernelDropsAllNames()) return 0;
  return a->fs()->NameLeaseLeft(parent);
}

// Replies with an entry; the kernel now holds one more lookup of it.
void ReplyEntry(fuse_req_t req, uint64_t parent, const proto::Attr& attr) {
  FuseAdapter* a = Adapter(req);
  fuse_entry_param e;
  memset(&e, 0, sizeof(e));
  e.ino = a->KernelNode(attr.ino());
  e.attr = ToStat(attr);
  // Counted first: a recall from now on reaches the kernel's copy.
  a->fs()->inodes().Ref(attr.ino());
  e.attr_timeout = AttrTimeout(a, attr);
  e.entry_timeout = EntryTimeout(a, parent);
  if (fuse_reply_entry(req, &e) != 0) a->fs()->Forget(attr.ino(), 1);
}

void ReplyEntryOr(fuse_req_t req, uint64_t parent, const absl::StatusOr<proto::Attr>& r) {
  if (r.ok()) {
    ReplyEntry(req, parent, *r);
  } else {
    ReplyError(req, r.status());
  }
}

void ReplyAttr(fuse_req_t req, const absl::StatusOr<proto::Attr>& r) {
  if (!r.ok()) return ReplyError(req, r.status());
  struct stat st = ToStat(*r);
  fuse_reply_attr(req, &st, AttrTimeout(Adapter(req), *r));
}

void ReplyStatus(fuse_req_t req, const absl::Status& s) {
  if (s.ok()) {
    fuse_reply_err(req, 0);
  } else {
    ReplyError(req, s);
  }
}

// --- namespace ---------------------------------------------------------------

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  OpTimer timer(Adapter(req)->Timing("lookup"));
  parent = ServerIno(req, parent);
  auto r = Adapter(req)->fs()->Lookup(CredsOf(req), parent, name);
  if (!r.ok() && ToErrno(r.status()) == ENOENT) {
    // A negative entry, cached for entry_timeout (creates elsewhere are
    // pushed as invalidations); with leases the mount answers it.
    fuse_entry_param e;
    memset(&e, 0, sizeof(e));
    e.entry_timeout = EntryTimeout(Adapter(req), parent);
    fuse_reply_entry(req, &e);
    return;
  }
  // A directory has one name in the kernel: given one it holds under
  // another name, the kernel moves that name here (d_splice_alias), but
  // only if it gets the old parent's lock at once, and fails the lookup
  // with ESTALE when it cannot (a create there in flight). Another node
  // moved it, so the old name's drop was pushed: waited for (bounded: the
  // drop may wait for a lock the kernel holds while this lookup runs).
  if (r.ok() && S_ISDIR(r->mode()) && Adapter(req)->fs()->inodes().Count(r->ino()) > 0 &&
      !Adapter(req)->fs()->AwaitKernelNameDrops(parent, kNameDropWait)) {
    LOG_EVERY_N(WARNING, 100) << "lookup of directory " << r->ino() << " in " << parent
                              << ": the kernel's older names are not all dropped after "
                              << kNameDropWait << " (it may fail the lookup with ESTALE)";
  }
  ReplyEntryOr(req, parent, r);
}

void Forget(FuseAdapter* a, uint64_t ino, uint64_t nlookup) {
  if (a->fs()->Forget(ino, nlookup)) a->Forgotten(ino);
}

void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  OpTimer timer(Adapter(req)->Timing("forget"));
  ino = ServerIno(req, ino);
  Forget(Adapter(req), ino, nlookup);
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  OpTimer timer(Adapter(req)->Timing("batch_forget"));
  for (size_t i = 0; i < count; ++i) {
    Forget(Adapter(req), ServerIno(req, forgets[i].ino), forgets[i].nlookup);
  }
  fuse_reply_none(req);
}

void OpGetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  OpTimer timer(Adapter(req)->Timing("getattr"));
  ino = ServerIno(req, ino);
  ReplyAttr(req, Adapter(req)->fs()->GetAttr(CredsOf(req), ino));
}

void OpSetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  OpTimer timer(Adapter(req)->Timing("setattr"));
  ino = ServerIno(req, ino);
  using V = proto::SetAttrRequest;
  proto::SetAttrRequest r;
  r.set_ino(ino);
  if (fi != nullptr) r.set_handle(fi->fh);  // ftruncate: access was checked at open
  uint32_t valid = 0;
  if (to_set & FUSE_SET_ATTR_MODE) valid |= V::MODE, r.set_mode(attr->st_mode);
  if (to_set & FUSE_SET_ATTR_UID) valid |= V::UID, r.set_uid(attr->st_uid);
  if (to_set & FUSE_SET_ATTR_GID) valid |= V::GID, r.set_gid(attr->st_gid);
  if (to_set & FUSE_SET_ATTR_SIZE) valid |= V::SIZE, r.set_size(attr->st_size);
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
    valid |= V::ATIME_NOW;
  } else if (to_set & FUSE_SET_ATTR_ATIME) {
    valid |= V::ATIME, r.set_atime_ns(ToNanos(attr->st_atim));
  }
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
    valid |= V::MTIME_NOW;
  } else if (to_set & FUSE_SET_ATTR_MTIME) {
    valid |= V::MTIME, r.set_mtime_ns(ToNanos(attr->st_mtim));
  }
  if (to_set & FUSE_SET_ATTR_CTIME) valid |= V::CTIME;
  r.set_valid(valid);
  ReplyAttr(req, Adapter(req)->fs()->SetAttr(CredsOf(req), r));
}

void OpMkNod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  OpTimer timer(Adapter(req)->Timing("mknod"));
  parent = ServerIno(req, parent);
  ReplyEntryOr(req, parent,
               Adapter(req)->fs()->MkNod(CredsOf(req), parent, name, mode, rdev,
                                         fuse_req_ctx(req)->umask, true));
}

void OpMkDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  OpTimer timer(Adapter(req)->Timing("mkdir"));
  parent = ServerIno(req, parent);
  ReplyEntryOr(req, parent,
               Adapter(req)->fs()->MkNod(CredsOf(req), parent, name, S_IFDIR | mode, 0,
                                         fuse_req_ctx(req)->umask, true));
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  OpTimer timer(Adapter(req)->Timing("unlink"));
  parent = ServerIno(req, parent);
  ReplyStatus(req, Adapter(req)->fs()->Remove(CredsOf(req), parent, name, false));
}

void OpRmDir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  OpTimer timer(Adapter(req)->Timing("rmdir"));
  parent = ServerIno(req, parent);
  ReplyStatus(req, Adapter(req)->fs()->Remove(CredsOf(req), parent, name, true));
}

void OpSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  OpTimer timer(Adapter(req)->Timing("symlink"));
  parent = ServerIno(req, parent);
  ReplyEntryOr(req, parent, Adapter(req)->fs()->Symlink(CredsOf(req), parent, name, link));
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned int flags) {
  OpTimer timer(Adapter(req)->Timing("rename"));
  parent = ServerIno(req, parent);
  newparent = ServerIno(req, newparent);
  ReplyStatus(req,
              Adapter(req)->fs()->Rename(CredsOf(req), parent, name, newparent, newname, flags));
}

void OpLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  OpTimer timer(Adapter(req)->Timing("link"));
  ino = ServerIno(req, ino);
  newparent = ServerIno(req, newparent);
  ReplyEntryOr(req, newparent, Adapter(req)->fs()->Link(CredsOf(req), ino, newparent, newname));
}

void OpReadLink(fuse_req_t req, fuse_ino_t ino) {
  OpTimer timer(Adapter(req)->Timing("readlink"));
  ino = ServerIno(req, ino);
  auto r = Adapter(req)->fs()->ReadLink(CredsOf(req), ino);
  if (!r.ok()) return ReplyError(req, r.status());
  fuse_reply_readlink(req, r->c_str());
}

// --- directories ---------------------------------------------------------------

void OpOpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  OpTimer timer(Adapter(req)->Timing("opendir"));
  ino = ServerIno(req, ino);
  fi->fh = 0;
  Adapter(req)->OpenDir(ino, fi);
  fuse_reply_open(req, fi);
}

// Fills up to `size` bytes of entries after cookie `off`; with `plus`, each
// entry (but "." and "..") hands the kernel a lookup reference.
void ReadDirCommon(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus,
                   const fuse_file_info* fi) {
  ino = ServerIno(req, ino);
  FuseAdapter* a = Adapter(req);
  // A directory granted here: the mount's own listing, when it has one.
  const Creds c = CredsOf(req);
  std::shared_ptr<const proto::ReadDirReply> own;
  if (!plus && fi->fh != 0) own = a->OwnListing(c, ino, fi->fh, off);
  // An entry takes ~32 bytes (plain) or ~150 (plus) plus its name.
  const uint32_t max_entries = std::max<size_t>(1, size / (plus ? 160 : 40));
  absl::StatusOr<proto::ReadDirReply> r;
  if (own == nullptr) {
    // A walk entering `ino`: the directories after it are read ahead.
    if (off == 0) a->fs()->ReadingDir(c, ino);
    r = a->fs()->ReadDir(c, ino, off, max_entries);
    if (!r.ok()) return ReplyError(req, r.status());
  }
  const auto& entries = own != nullptr ? own->entries() : r->entries();
  // Not zeroed: the kernel asks with up to 128 KiB, and every entry written
  // pads itself (zeroing the whole buffer was a sixth of a warm `find`).
  std::unique_ptr<char[]> buf(new char[size]);
  size_t used = 0;
  // The own listing's cookies are 1, 2, 3, ...: the page starts at `off`.
  const int first = own != nullptr ? static_cast<int>(std::min<off_t>(off, entries.size())) : 0;
  for (int i = first; i < entries.size(); ++i) {
    const proto::DirEntry& e = entries[i];
    struct stat st = ToStat(e.attr());
    size_t n;
    const bool dots = e.name() == "." || e.name() == "..";
    if (plus) {
      fuse_entry_param ep;
      memset(&ep, 0, sizeof(ep));
      ep.ino = dots ? 0 : a->KernelNode(e.attr().ino());
      ep.attr = st;
      // Counted first: a recall from now on reaches the kernel's copy.
      if (!dots) {
        a->fs()->inodes().Ref(e.attr().ino());
        a->fs()->HandedToKernel(ino, e.name(), e.attr().ino());
      }
      ep.attr_timeout = dots ? 0 : AttrTimeout(a, e.attr());
      ep.entry_timeout = dots ? 0 : EntryTimeout(a, ino, /*epoch_first=*/false);
      n = fuse_add_direntry_plus(req, buf.get() + used, size - used, e.name().c_str(), &ep,
                                 e.cookie());
      if (n > size - used) {
        if (!dots) a->fs()->Forget(e.attr().ino(), 1);  // not handed to the kernel
        break;
      }
    } else {
      n = fuse_add_direntry(req, buf.get() + used, size - used, e.name().c_str(), &st, e.cookie());
      if (n > size - used) break;
    }
    used += n;
  }
  fuse_reply_buf(req, buf.get(), used);
}

void OpReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  OpTimer timer(Adapter(req)->Timing("readdir"));
  ReadDirCommon(req, ino, size, off, false, fi);
}

void OpReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  OpTimer timer(Adapter(req)->Timing("readdirplus"));
  ReadDirCommon(req, ino, size, off, true, fi);
}

void OpReleaseDir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  OpTimer timer(Adapter(req)->Timing("releasedir"));
  if (fi->fh != 0) Adapter(req)->ReleaseDir(fi->fh);
  fuse_reply_err(req, 0);
}

void OpFsyncDir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  OpTimer timer(Adapter(req)->Timing("fsyncdir"));
  ReplyStatus(req, Adapter(req)->fs()->FsyncDir(ino));
}

// --- files -----------------------------------------------------------------------

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  OpTimer timer(Adapter(req)->Timing("open"));
  ino = ServerIno(req, ino);
  uint64_t handle = 0;
  auto r = Adapter(req)->fs()->Open(CredsOf(req), ino, fi->flags, &handle);
  if (!r.ok()) return ReplyError(req, r.status());
  // Close-to-open: the kernel's attributes are marked stale (the server's
  // push of a change made elsewhere may still be in flight), so the size
  // comes fresh, and pages cached from an earlier open are dropped unless
  // the mount held the file's lease all along since (KeepPages).
  Adapter(req)->InvalidateInode(ino, /*data=*/false);
  fi->keep_cache = Adapter(req)->KeepPages(ino, fi->flags) ? 1 : 0;
  fi->fh = handle;
  if (fuse_reply_open(req, fi) != 0) (void)Adapter(req)->fs()->Release(ino, handle);
}

void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              fuse_file_info* fi) {
  OpTimer timer(Adapter(req)->Timing("create"));
  parent = ServerIno(req, parent);
  FuseAdapter* a = Adapter(req);
  uint64_t handle = 0;
  auto opened = a->fs()->Create(CredsOf(req), parent, name, mode & 07777, fuse_req_ctx(req)->umask,
                                fi->flags, &handle);
  if (!opened.ok()) return ReplyError(req, opened.status());
  const proto::Attr attr = *opened;
  fuse_entry_param e;
  memset(&e, 0, sizeof(e));
  e.ino = a->KernelNode(attr.ino());
  e.attr = ToStat(attr);
  a->fs()->inodes().Ref(attr.ino());  // first: a recall from now on reaches the kernel's copy
  e.attr_timeout = AttrTimeout(a, attr);
  e.entry_timeout = EntryTimeout(a, parent);
  fi->keep_cache = 0;
  fi->fh = handle;
  if (fuse_reply_create(req, &e, fi) != 0) {
    a->fs()->Forget(attr.ino(), 1);
    (void)a->fs()->Release(attr.ino(), handle);
  }
}

void OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  OpTimer timer(Adapter(req)->Timing("read"));
  ino = ServerIno(req, ino);
  FuseAdapter* a = Adapter(req);
  a->ReadBegins(ino);
  auto r = a->fs()->Read(CredsOf(req, /*with_groups=*/false), ino, off, size);
  if (!r.ok()) {
    ReplyError(req, r.status());
  } else {
    fuse_reply_buf(req, r->data(), r->size());  // the kernel has the bytes when it returns
  }
  a->ReadEnds(ino);
}

void OpWrite(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
             fuse_file_info*) {
  OpTimer timer(Adapter(req)->Timing("write"));
  ino = ServerIno(req, ino);
  auto r = Adapter(req)->fs()->Write(CredsOf(req, /*with_groups=*/false), ino, off, buf, size);
  if (!r.ok()) return ReplyError(req, r.status());
  fuse_reply_write(req, *r);
}

void OpFlush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  OpTimer timer(Adapter(req)->Timing("flush"));
  ino = ServerIno(req, ino);
  FuseAdapter* a = Adapter(req);
  // close(2) drops the POSIX locks the closing process held on the file.
  if (a->TakeLockOwner(ino, fi->lock_owner)) {
    proto::LockRange all;
    all.set_type(F_UNLCK);
    all.set_end(UINT64_MAX);
    absl::Status s = a->fs()->SetLock(CredsOf(req), ino, fi->lock_owner, false, all, false, {});
    if (!s.ok()) LOG(WARNING) << "releasing locks of inode " << ino << ": " << s;
  }
  // close(2): this file's cached writes reach the server before close
  // returns, so the next open on any node sees them (or before any other
  // node can open it: FileSystem::Close).
  ReplyStatus(req, a->fs()->Close(ino));
}

void OpRelease(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  OpTimer timer(Adapter(req)->Timing("release"));
  ino = ServerIno(req, ino);
  FuseAdapter* a = Adapter(req);
  if (fi->flock_release) {
    proto::LockRange all;
    all.set_type(F_UNLCK);
    all.set_end(UINT64_MAX);
    absl::Status s = a->fs()->SetLock(CredsOf(req), ino, fi->lock_owner, true, all, false, {});
    if (!s.ok()) LOG(WARNING) << "releasing flock of inode " << ino << ": " << s;
  }
  absl::Status s = a->fs()->Release(ino, fi->fh);
  if (!s.ok()) LOG(WARNING) << "release of inode " << ino << ": " << s;
  fuse_reply_err(req, 0);
}

void OpFsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  OpTimer timer(Adapter(req)->Timing("fsync"));
  ino = ServerIno(req, ino);
  ReplyStatus(req, Adapter(req)->fs()->Fsync(CredsOf(req), ino));
}

void OpFallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                 fuse_file_info*) {
  OpTimer timer(Adapter(req)->Timing("fallocate"));
  ino = ServerIno(req, ino);
  if (offset < 0 || length <= 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  ReplyStatus(req, Adapter(req)->fs()->Fallocate(CredsOf(req), ino, mode, offset, length));
}

void OpStatFs(fuse_req_t req, fuse_ino_t) {
  OpTimer timer(Adapter(req)->Timing("statfs"));
  auto r = Adapter(req)->fs()->StatFs(CredsOf(req));
  if (!r.ok()) return ReplyError(req, r.status());
  struct statvfs sv;
  memset(&sv, 0, sizeof(sv));
  const uint64_t bs = r->block_size() ? r->block_size() : 4096;
  sv.f_bsize = bs;
  sv.f_frsize = bs;
  sv.f_blocks = r->capacity_bytes() / bs;
  sv.f_bfree = (r->capacity_bytes() - std::min(r->capacity_bytes(), r->used_bytes())) / bs;
  sv.f_bavail = r->available_bytes() / bs;
  sv.f_files = r->inodes() + (1ull << 32);
  sv.f_ffree = 1ull << 32;
  sv.f_favail = sv.f_ffree;
  sv.f_namemax = r->name_max();
  fuse_reply_statfs(req, &sv);
}

// --- xattrs ---------------------------------------------------------------------------

void OpSetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                int flags) {
  OpTimer timer(Adapter(req)->Timing("setxattr"));
  ino = ServerIno(req, ino);
  ReplyStatus(
      req, Adapter(req)->fs()->SetXattr(CredsOf(req), ino, name, std::string(value, size), flags));
}

// getxattr/listxattr: size 0 asks for the length; a short buffer is ERANGE.
void ReplySized(fuse_req_t req, const std::string& value, size_t size) {
  if (size == 0) {
    fuse_reply_xattr(req, value.size());
  } else if (size < value.size()) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, value.data(), value.size());
  }
}

void OpGetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  OpTimer timer(Adapter(req)->Timing("getxattr"));
  ino = ServerIno(req, ino);
  auto r = Adapter(req)->fs()->GetXattr(CredsOf(req), ino, name);
  if (!r.ok()) return ReplyError(req, r.status());
  ReplySized(req, *r, size);
}

void OpListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  OpTimer timer(Adapter(req)->Timing("listxattr"));
  ino = ServerIno(req, ino);
  auto r = Adapter(req)->fs()->ListXattr(CredsOf(req), ino);
  if (!r.ok()) return ReplyError(req, r.status());
  std::string list;
  for (const std::string& n : *r) list.append(n).push_back('\0');
  ReplySized(req, list, size);
}

void OpRemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  OpTimer timer(Adapter(req)->Timing("removexattr"));
  ino = ServerIno(req, ino);
  ReplyStatus(req, Adapter(req)->fs()->RemoveXattr(CredsOf(req), ino, name));
}

// --- locks ----------------------------------------------------------------------------

proto::LockRange ToRange(const struct flock* lock) {
  proto::LockRange r;
  r.set_type(lock->l_type);
  r.set_start(lock->l_start);
  r.set_end(lock->l_len == 0 ? UINT64_MAX : lock->l_start + lock->l_len - 1);
  r.set_pid(lock->l_pid);
  return r;
}

void OpGetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock) {
  OpTimer timer(Adapter(req)->Timing("getlk"));
  ino = ServerIno(req, ino);
  auto r = Adapter(req)->fs()->GetLock(CredsOf(req), ino, fi->lock_owner, ToRange(lock));
  if (!r.ok()) return ReplyError(req, r.status());
  struct flock out;
  memset(&out, 0, sizeof(out));
  out.l_type = r->type();
  out.l_whence = SEEK_SET;
  if (r->type() != F_UNLCK) {
    out.l_start = r->start();
    out.l_len = r->end() == UINT64_MAX ? 0 : r->end() - r->start() + 1;
    out.l_pid = r->pid();
  }
  fuse_reply_lock(req, &out);
}

void OpSetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock, int sleep) {
  OpTimer timer(Adapter(req)->Timing("setlk"));
  ino = ServerIno(req, ino);
  FuseAdapter* a = Adapter(req);
  proto::LockRange range = ToRange(lock);
  range.set_pid(fuse_req_ctx(req)->pid);
  absl::Status s = a->fs()->SetLock(CredsOf(req), ino, fi->lock_owner, false, range, sleep != 0,
                                    [req] { return fuse_req_interrupted(req) != 0; });
  if (s.ok() && lock->l_type != F_UNLCK) a->NoteLockOwner(ino, fi->lock_owner);
  ReplyStatus(req, s);
}

void OpFlock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, int op) {
  OpTimer timer(Adapter(req)->Timing("flock"));
  ino = ServerIno(req, ino);
  proto::LockRange range;
  switch (op & ~LOCK_NB) {
    case LOCK_SH:
      range.set_type(F_RDLCK);
      break;
    case LOCK_EX:
      range.set_type(F_WRLCK);
      break;
    case LOCK_UN:
      range.set_type(F_UNLCK);
      break;
    default:
      fuse_reply_err(req, EINVAL);
      return;
  }
  range.set_end(UINT64_MAX);
  range.set_pid(fuse_req_ctx(req)->pid);
  ReplyStatus(req, Adapter(req)->fs()->SetLock(CredsOf(req), ino, fi->lock_owner, true, range,
                                               !(op & LOCK_NB),
                                               [req] { return fuse_req_interrupted(req) != 0; }));
}

void OpInit(void* userdata, fuse_conn_info* conn) {
  // write() must reach GrantFS before it returns (the grant debit is what
  // makes ENOSPC exact), so the kernel must not buffer writes itself.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  conn->max_readahead = 1 << 20;
  if (conn->capable & FUSE_CAP_FLOCK_LOCKS) conn->want |= FUSE_CAP_FLOCK_LOCKS;
  if (conn->capable & FUSE_CAP_POSIX_LOCKS) conn->want |= FUSE_CAP_POSIX_LOCKS;
  // With leases the kernel is asked for plain readdir, not readdirplus: a
  // listing's names and attributes are leased by the mount, which answers
  // the lookups that follow without a round trip, and the kernel keeps what
  // they return for as long as the lease. readdirplus would hand the kernel
  // every entry's attributes again at each opendir (its "auto" mode asks for
  // it at offset 0), the cost of a warm `find`: 1.46x the passthrough's time
  // instead of 1.96x, `ls -lR` 0.41x instead of 0.86x (bench section 5,
  // quick, before the other warm-readdir fixes). Without leases readdirplus
  // stays: each of those lookups would be a round trip to the server.
  auto* adapter = static_cast<FuseAdapter*>(userdata);
  if (adapter->fs()->leases() != nullptr) {
    conn->want &= ~(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
  }
  LOG(INFO) << "FUSE protocol " << conn->proto_major << "." << conn->proto_minor << ", max_write "
            << conn->max_write;
}

}  // namespace

FuseAdapter::FuseAdapter(FileSystem* fs, const FuseOptions& options) : fs_(fs), options_(options) {}

const fuse_lowlevel_ops* FuseAdapter::Ops() {
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o;
    memset(&o, 0, sizeof(o));
    o.init = OpInit;
    o.lookup = OpLookup;
    o.forget = OpForget;
    o.forget_multi = OpForgetMulti;
    o.getattr = OpGetAttr;
    o.setattr = OpSetAttr;
    o.readlink = OpReadLink;
    o.mknod = OpMkNod;
    o.mkdir = OpMkDir;
    o.unlink = OpUnlink;
    o.rmdir = OpRmDir;
    o.symlink = OpSymlink;
    o.rename = OpRename;
    o.link = OpLink;
    o.open = OpOpen;
    o.read = OpRead;
    o.write = OpWrite;
    o.flush = OpFlush;
    o.release = OpRelease;
    o.fsync = OpFsync;
    o.opendir = OpOpenDir;
    o.readdir = OpReadDir;
    o.readdirplus = OpReadDirPlus;
    o.releasedir = OpReleaseDir;
    o.fsyncdir = OpFsyncDir;
    o.statfs = OpStatFs;
    o.setxattr = OpSetXattr;
    o.getxattr = OpGetXattr;
    o.listxattr = OpListXattr;
    o.removexattr = OpRemoveXattr;
    o.create = OpCreate;
    o.getlk = OpGetLk;
    o.setlk = OpSetLk;
    o.flock = OpFlock;
    o.fallocate = OpFallocate;
    return o;
  }();
  return &ops;
}

uint64_t FuseAdapter::ServerIno(uint64_t node) const {
  const uint64_t root = fs_->root_ino();
  if (node == FUSE_ROOT_ID) return root;
  return node == root ? 0 : node;
}

uint64_t FuseAdapter::KernelNode(uint64_t ino) const {
  return ino == fs_->root_ino() ? FUSE_ROOT_ID : ino;
}

void FuseAdapter::InvalidateInode(uint64_t ino, bool data) {
  fs_->ForgetXattrs(ino);
  fuse_session* se = session_.load();
  // The kernel holds the root without a lookup: it is never counted.
  if (se == nullptr || (fs_->inodes().Count(ino) == 0 && ino != fs_->root_ino())) return;
  // off -1: attributes only; off 0, len 0: attributes and every cached page.
  int r = fuse_lowlevel_notify_inval_inode(se, KernelNode(ino), data ? 0 : -1, 0);
  if (r != 0 && r != -ENOENT) LOG(WARNING) << "invalidating inode " << ino << ": " << strerror(-r);
}

void FuseAdapter::InvalidateEntry(uint64_t parent, const std::string& name) {
  fuse_session* se = session_.load();
  if (se == nullptr || (fs_->inodes().Count(parent) == 0 && parent != fs_->root_ino())) return;
  int r = fuse_lowlevel_notify_inval_entry(se, KernelNode(parent), name.c_str(), name.size());
  if (r != 0 && r != -ENOENT) {
    LOG(WARNING) << "invalidating entry " << parent << "/" << name << ": " << strerror(-r);
  }
}

namespace {
// FUSE_NOTIFY_INC_EPOCH of linux/fuse.h 7.44; Debian's header (7.38) has
// no name for it.
constexpr int32_t kFuseNotifyIncEpoch = 8;

// Sends the notification; 0 or -errno.
int NotifyIncEpoch(fuse_session* se) {
  fuse_out_header h;
  h.len = sizeof(h);
  h.error = kFuseNotifyIncEpoch;
  h.unique = 0;
  const ssize_t n = write(fuse_session_fd(se), &h, sizeof(h));
  if (n == static_cast<ssize_t>(sizeof(h))) return 0;
  return n < 0 ? -errno : -EIO;
}
}  // namespace

bool FuseAdapter::KernelDropsAllNames() {
  int state = epochs_.load();
  if (state >= 0) return state == 1;
  fuse_session* se = session_.load();
  if (se == nullptr) return false;
  const int r = NotifyIncEpoch(se);
  state = r == 0 ? 1 : 0;
  int unknown = -1;
  if (epochs_.compare_exchange_strong(unknown, state)) {
    LOG(INFO) << (state == 1
                      ? "the kernel takes FUSE_NOTIFY_INC_EPOCH: leased names are cached by it"
                      : "the kernel refuses FUSE_NOTIFY_INC_EPOCH (" + std::string(strerror(-r)) +
                            "): leased names are answered by the mount at every lookup");
  }
  return epochs_.load() == 1;
}

void FuseAdapter::InvalidateAllNames() {
  fuse_session* se = session_.load();
  if (se == nullptr || epochs_.load() != 1) return;
  const int r = NotifyIncEpoch(se);
  // The kernel took it before; failing now, a name it holds may be stale
  // until its lease would have run out: said loudly.
  if (r != 0) LOG(ERROR) << "FUSE_NOTIFY_INC_EPOCH failed: " << strerror(-r);
}

namespace {
// Drops the kernel's cached listing of `dir` (its node `node`: its pages; its attributes go
// too). True when it is gone (or the kernel does not hold `dir`). Takes no
// lock the kernel may hold while it waits for the mount: the readdir
// cache's pages are locked only while an entry is copied in.
bool DropKernelListing(fuse_session* se, fuse_ino_t node, uint64_t dir) {
  const int r = fuse_lowlevel_notify_inval_inode(se, node, 0, 0);
  if (r == 0 || r == -ENOENT) return true;
  LOG(WARNING) << "dropping the kernel's listing of " << dir << ": " << strerror(-r);
  return false;
}
}  // namespace

void FuseAdapter::OpenDir(uint64_t dir, fuse_file_info* fi) {
  // Without cache_readdir the kernel neither uses nor fills its copy for
  // this open (and without keep_cache, kernels that honour it for
  // directories drop the copy).
  fi->cache_readdir = 0;
  fi->keep_cache = 0;
  if (NsGrants* ns = fs_->ns_grants(); ns != nullptr && ns->Holds(dir)) {
    absl::MutexLock l(&mu_);
    fi->fh = ++next_dir_handle_;
    own_listings_[fi->fh] = nullptr;
    return;
  }
  LeaseCache* leases = fs_->leases();
  fuse_session* se = session_.load();
  if (leases == nullptr || se == nullptr) return;
  const uint64_t epoch = leases->ListingEpoch(dir);
  if (epoch == 0) return;
  bool older = false;
  {
    absl::MutexLock l(&mu_);
    auto it = listings_.find(dir);
    older = it != listings_.end() && it->second != epoch;
    if (!older) listings_[dir] = epoch;
  }
  if (older) {
    // An opendir holds no lock that dropping the pages takes.
    if (!DropKernelListing(se, KernelNode(dir), dir)) return;  // not cached this time
    absl::MutexLock l(&mu_);
    listings_[dir] = epoch;
  }
  fi->cache_readdir = 1;
  fi->keep_cache = 1;
}

std::shared_ptr<const proto::ReadDirReply> FuseAdapter::OwnListing(const Creds& c, uint64_t dir,
                                                                   uint64_t handle,
                                                                   uint64_t cookie) {
  std::shared_ptr<const proto::ReadDirReply> listing;
  if (cookie == 0) {  // a new pass (rewinddir too)
    if (std::optional<proto::ReadDirReply> whole = fs_->LocalListing(c, dir)) {
      listing = std::make_shared<const proto::ReadDirReply>(*std::move(whole));
    }
  }
  absl::MutexLock l(&mu_);
  auto it = own_listings_.find(handle);
  if (it == own_listings_.end()) return nullptr;
  if (cookie == 0) it->second = listing;
  return it->second;
}

void FuseAdapter::ReleaseDir(uint64_t handle) {
  absl::MutexLock l(&mu_);
  own_listings_.erase(handle);
}

void FuseAdapter::InvalidateListing(uint64_t dir) {
  {
    absl::MutexLock l(&mu_);
    if (!listings_.contains(dir)) return;
  }
  fuse_session* se = session_.load();
  if (se != nullptr) DropKernelListing(se, KernelNode(dir), dir);
}

void FuseAdapter::Forgotten(uint64_t ino) {
  absl::MutexLock l(&mu_);
  // Checked again under mu_: a lookup since the forget made a new kernel
  // inode, which an open (it takes mu_) may have let cache already.
  if (fs_->inodes().Count(ino) != 0) return;
  listings_.erase(ino);
  pages_.erase(ino);
}

bool FuseAdapter::KeepPages(uint64_t ino, int flags) {
  LeaseCache* leases = fs_->leases();
  if (leases == nullptr) return false;
  const uint64_t stamp = (flags & O_TRUNC) ? 0 : leases->DataStamp(ino);
  absl::MutexLock l(&mu_);
  if (stamp == 0) {
    pages_.erase(ino);
    return false;
  }
  auto [it, fresh] = pages_.try_emplace(ino, stamp);
  if (!fresh && it->second == stamp) return true;
  if (reading_.contains(ino)) {
    pages_.erase(it);
  } else {
    it->second = stamp;
  }
  return false;
}

void FuseAdapter::ReadBegins(uint64_t ino) {
  absl::MutexLock l(&mu_);
  ++reading_[ino];
}

void FuseAdapter::ReadEnds(uint64_t ino) {
  absl::MutexLock l(&mu_);
  auto it = reading_.find(ino);
  if (it != reading_.end() && --it->second <= 0) reading_.erase(it);
}

void FuseAdapter::NoteLockOwner(uint64_t ino, uint64_t owner) {
  absl::MutexLock l(&mu_);
  lock_owners_.insert({ino, owner});
}

bool FuseAdapter::TakeLockOwner(uint64_t ino, uint64_t owner) {
  absl::MutexLock l(&mu_);
  return lock_owners_.erase({ino, owner}) > 0;
}

}  // namespace grantfs
