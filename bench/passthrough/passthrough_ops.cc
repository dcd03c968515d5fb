#include "bench/passthrough/passthrough_ops.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace grantfs {
namespace passthrough {
namespace {

Passthrough* Fs(fuse_req_t req) { return static_cast<Passthrough*>(fuse_req_userdata(req)); }

// The O_PATH fd of `ino`; -1 (the ops answer ESTALE) if the kernel forgot it.
// fd() is -1 (the ops answer ESTALE) if the kernel forgot it.
InodeTable::Pin InodeFd(fuse_req_t req, fuse_ino_t ino) { return Fs(req)->inodes().Get(ino); }

// Reopening "/proc/self/fd/N" turns an O_PATH fd into a real open file.
std::string ProcPath(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// The errno of a call that returns 0 or -1.
int Check(int r) { return r == 0 ? 0 : errno; }

// fuse_reply_err, for `return ReplyErr(req, err);` in a void op.
void ReplyErr(fuse_req_t req, int err) { fuse_reply_err(req, err); }

int StatFd(int fd, struct stat* st) {
  return fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
}

// Runs the enclosing scope as the caller, so mkdir and create give new
// objects the caller's owner (and the source file system checks as it
// would). fsuid/fsgid are per thread on Linux: other requests are unaffected.
class AsCaller {
 public:
  explicit AsCaller(fuse_req_t req) {
    const fuse_ctx* ctx = fuse_req_ctx(req);
    old_gid_ = setfsgid(ctx->gid);
    old_uid_ = setfsuid(ctx->uid);
  }
  ~AsCaller() {
    setfsuid(old_uid_);
    setfsgid(old_gid_);
  }

 private:
  int old_uid_;
  int old_gid_;
};

// Looks `name` up in `parent` and fills `e`. On success the kernel is
// counted as holding one more lookup: the caller replies with `e` or
// forgets it.
int DoLookup(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_entry_param* e) {
  Passthrough* fs = Fs(req);
  memset(e, 0, sizeof(*e));
  e->attr_timeout = fs->options().attr_timeout_s;
  e->entry_timeout = fs->options().entry_timeout_s;
  const InodeTable::Pin parent_pin = fs->inodes().Get(parent);
  const int pfd = parent_pin.fd();
  if (pfd < 0) return ESTALE;
  const int fd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno;
  if (int err = StatFd(fd, &e->attr); err != 0) {
    close(fd);
    return err;
  }
  e->ino = fs->inodes().Ref(fd, e->attr);
  return 0;
}

// Replies with the entry `name` in `parent` (after it was created).
void ReplyEntry(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fuse_entry_param e;
  if (int err = DoLookup(req, parent, name, &e); err != 0) return ReplyErr(req, err);
  if (fuse_reply_entry(req, &e) != 0) Fs(req)->inodes().Forget(e.ino, 1);
}

// Replies with the attributes of `fd`, or with `err` if the op failed.
void ReplyAttr(fuse_req_t req, int fd, int err) {
  struct stat st;
  if (err == 0) err = fd < 0 ? ESTALE : StatFd(fd, &st);
  if (err != 0) return ReplyErr(req, err);
  fuse_reply_attr(req, &st, Fs(req)->options().attr_timeout_s);
}

int DoSetAttr(int fd, const struct stat& attr, int to_set, const fuse_file_info* fi) {
  const std::string path = ProcPath(fd);
  if ((to_set & FUSE_SET_ATTR_MODE) && chmod(path.c_str(), attr.st_mode) != 0) return errno;
  if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
    const uid_t uid = (to_set & FUSE_SET_ATTR_UID) ? attr.st_uid : static_cast<uid_t>(-1);
    const gid_t gid = (to_set & FUSE_SET_ATTR_GID) ? attr.st_gid : static_cast<gid_t>(-1);
    if (fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return errno;
  }
  if (to_set & FUSE_SET_ATTR_SIZE) {
    // The kernel passes a file handle only for ftruncate(2) of an open file.
    const int r =
        fi != nullptr ? ftruncate(fi->fh, attr.st_size) : truncate(path.c_str(), attr.st_size);
    if (r != 0) return errno;
  }
  if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW |
                FUSE_SET_ATTR_MTIME_NOW)) {
    struct timespec tv[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
      tv[0].tv_nsec = UTIME_NOW;
    } else if (to_set & FUSE_SET_ATTR_ATIME) {
      tv[0] = attr.st_atim;
    }
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
      tv[1].tv_nsec = UTIME_NOW;
    } else if (to_set & FUSE_SET_ATTR_MTIME) {
      tv[1] = attr.st_mtim;
    }
    if (utimensat(AT_FDCWD, path.c_str(), tv, 0) != 0) return errno;
  }
  return 0;
}

// Opens (creating if need be) `name` in `parent` as the caller; on success
// fi->fh is the open file and `e` its entry, counted as a kernel lookup.
int DoCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi,
             fuse_entry_param* e) {
  const InodeTable::Pin pfd_pin = InodeFd(req, parent);
  const int pfd = pfd_pin.fd();
  if (pfd < 0) return ESTALE;
  int fd;
  {
    AsCaller as_caller(req);
    fd = openat(pfd, name, (fi->flags | O_CREAT | O_CLOEXEC) & ~O_NOFOLLOW, mode);
    if (fd < 0) return errno;
  }
  if (int err = DoLookup(req, parent, name, e); err != 0) {
    close(fd);
    return err;
  }
  fi->fh = fd;
  return 0;
}

// An open directory. The kernel serializes readdir calls on one open
// directory and sends releasedir after the last: no lock needed.
struct DirHandle {
  DIR* dir;
  off_t offset;  // the cookie after the last entry returned
};

DirHandle* Dir(const fuse_file_info* fi) { return reinterpret_cast<DirHandle*>(fi->fh); }

// Fills `buf` with entries from cookie `off` on; returns the bytes used, or
// a negative errno if nothing could be read.
ssize_t DoReadDir(fuse_req_t req, DirHandle* d, off_t off, char* buf, size_t size) {
  if (off != d->offset) {
    seekdir(d->dir, off);
    d->offset = off;
  }
  size_t used = 0;
  while (true) {
    errno = 0;
    const struct dirent* ent = readdir(d->dir);
    if (ent == nullptr) {
      if (errno != 0 && used == 0) return -errno;
      break;
    }
    struct stat st = {};
    st.st_ino = ent->d_ino;
    st.st_mode = DTTOIF(ent->d_type);
    const size_t n = fuse_add_direntry(req, buf + used, size - used, ent->d_name, &st, ent->d_off);
    if (n > size - used) {
      seekdir(d->dir, d->offset);  // did not fit: it comes first next time
      break;
    }
    used += n;
    d->offset = ent->d_off;
  }
  return used;
}

// --- ops: exactly one reply each ----------------------------------------------

void OpInit(void*, fuse_conn_info* conn) {
  // The GrantFS mount's settings, for a fair comparison: no writeback cache
  // (write() waits for the daemon), 1 MiB readahead, libfuse's 1 MiB
  // max_write (more kills the daemon on libfuse 3.14).
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  conn->max_readahead = 1 << 20;
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fuse_entry_param e;
  const int err = DoLookup(req, parent, name, &e);
  if (err == ENOENT) {
    e.ino = 0;  // a negative entry, cached for entry_timeout
    fuse_reply_entry(req, &e);
  } else if (err != 0) {
    fuse_reply_err(req, err);
  } else if (fuse_reply_entry(req, &e) != 0) {
    Fs(req)->inodes().Forget(e.ino, 1);
  }
}

void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Fs(req)->inodes().Forget(ino, nlookup);
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) Fs(req)->inodes().Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void OpGetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  const InodeTable::Pin pin = InodeFd(req, ino);
  ReplyAttr(req, pin.fd(), 0);
}

void OpSetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  const InodeTable::Pin fd_pin = InodeFd(req, ino);
  const int fd = fd_pin.fd();
  ReplyAttr(req, fd, fd < 0 ? ESTALE : DoSetAttr(fd, *attr, to_set, fi));
}

void OpMkDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  const InodeTable::Pin pfd_pin = InodeFd(req, parent);
  const int pfd = pfd_pin.fd();
  int err = ESTALE;
  if (pfd >= 0) {
    AsCaller as_caller(req);
    err = Check(mkdirat(pfd, name, mode));
  }
  if (err != 0) return ReplyErr(req, err);
  ReplyEntry(req, parent, name);
}

void RemoveCommon(fuse_req_t req, fuse_ino_t parent, const char* name, int flags) {
  const InodeTable::Pin pfd_pin = InodeFd(req, parent);
  const int pfd = pfd_pin.fd();
  fuse_reply_err(req, pfd < 0 ? ESTALE : Check(unlinkat(pfd, name, flags)));
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  RemoveCommon(req, parent, name, 0);
}

void OpRmDir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  RemoveCommon(req, parent, name, AT_REMOVEDIR);
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned int flags) {
  const InodeTable::Pin pfd_pin = InodeFd(req, parent);
  const int pfd = pfd_pin.fd();
  const InodeTable::Pin npfd_pin = InodeFd(req, newparent);
  const int npfd = npfd_pin.fd();
  fuse_reply_err(req,
                 pfd < 0 || npfd < 0 ? ESTALE : Check(renameat2(pfd, name, npfd, newname, flags)));
}

void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              fuse_file_info* fi) {
  fuse_entry_param e;
  if (int err = DoCreate(req, parent, name, mode, fi, &e); err != 0) return ReplyErr(req, err);
  if (fuse_reply_create(req, &e, fi) != 0) {
    close(fi->fh);
    Fs(req)->inodes().Forget(e.ino, 1);
  }
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const InodeTable::Pin fd_pin = InodeFd(req, ino);
  const int fd = fd_pin.fd();
  if (fd < 0) return ReplyErr(req, ESTALE);
  const int file = open(ProcPath(fd).c_str(), (fi->flags & ~O_NOFOLLOW) | O_CLOEXEC);
  if (file < 0) return ReplyErr(req, errno);
  fi->fh = file;
  if (fuse_reply_open(req, fi) != 0) close(file);
}

void OpRead(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  // The reply reads the file itself (spliced when the kernel allows it).
  fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
  buf.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  buf.buf[0].fd = fi->fh;
  buf.buf[0].pos = off;
  fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

void OpWrite(fuse_req_t req, fuse_ino_t, const char* data, size_t size, off_t off,
             fuse_file_info* fi) {
  const ssize_t n = pwrite(fi->fh, data, size, off);
  if (n < 0) return ReplyErr(req, errno);
  fuse_reply_write(req, n);
}

void OpFlush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  // close(2) of a duplicate reports what closing the file would (NFS-style
  // write errors) and drops the caller's POSIX locks, as close does.
  fuse_reply_err(req, Check(close(dup(fi->fh))));
}

void OpRelease(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  close(fi->fh);
  fuse_reply_err(req, 0);
}

void OpFsync(fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info* fi) {
  fuse_reply_err(req, Check(datasync ? fdatasync(fi->fh) : fsync(fi->fh)));
}

void OpOpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const InodeTable::Pin fd_pin = InodeFd(req, ino);
  const int fd = fd_pin.fd();
  if (fd < 0) return ReplyErr(req, ESTALE);
  const int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* dir = dfd < 0 ? nullptr : fdopendir(dfd);
  if (dir == nullptr) {
    const int err = errno;
    if (dfd >= 0) close(dfd);
    return ReplyErr(req, err);
  }
  DirHandle* d = new DirHandle{dir, 0};
  fi->fh = reinterpret_cast<uint64_t>(d);
  if (fuse_reply_open(req, fi) != 0) {
    closedir(dir);
    delete d;
  }
}

void OpReadDir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  std::string buf(size, '\0');
  const ssize_t used = DoReadDir(req, Dir(fi), off, buf.data(), size);
  if (used < 0) return ReplyErr(req, -used);
  fuse_reply_buf(req, buf.data(), used);
}

void OpReleaseDir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  DirHandle* d = Dir(fi);
  closedir(d->dir);
  delete d;
  fuse_reply_err(req, 0);
}

// --- xattrs, as libfuse's passthrough_ll: through /proc/self/fd/N, which
// reaches the file the O_PATH fd names. A symlink's own xattrs have no
// race-free path: ENOTSUP. (Answering every xattr call ENOSYS would make the
// kernel stop asking, which no file system with xattrs can do: ls -l asks
// for two of every file.)

// 0 when `pin` reaches an object whose xattrs can be used through
// ProcPath(pin.fd()), else an errno.
int XattrCheck(const InodeTable::Pin& pin) {
  if (pin.fd() < 0) return ESTALE;
  return pin.symlink() ? ENOTSUP : 0;
}

// getxattr and listxattr: size 0 asks for the length.
void ReplyXattr(fuse_req_t req, size_t size, const std::string& buf, ssize_t got) {
  if (got < 0) return ReplyErr(req, errno);
  if (size == 0) {
    fuse_reply_xattr(req, got);
  } else {
    fuse_reply_buf(req, buf.data(), got);
  }
}

void OpGetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  const InodeTable::Pin pin = InodeFd(req, ino);  // open until the reply
  if (int err = XattrCheck(pin); err != 0) return ReplyErr(req, err);
  const std::string path = ProcPath(pin.fd());
  std::string buf(size, '\0');
  ReplyXattr(req, size, buf, getxattr(path.c_str(), name, size ? buf.data() : nullptr, size));
}

void OpListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  const InodeTable::Pin pin = InodeFd(req, ino);  // open until the reply
  if (int err = XattrCheck(pin); err != 0) return ReplyErr(req, err);
  const std::string path = ProcPath(pin.fd());
  std::string buf(size, '\0');
  ReplyXattr(req, size, buf, listxattr(path.c_str(), size ? buf.data() : nullptr, size));
}

void OpSetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                int flags) {
  const InodeTable::Pin pin = InodeFd(req, ino);  // open until the reply
  if (int err = XattrCheck(pin); err != 0) return ReplyErr(req, err);
  const std::string path = ProcPath(pin.fd());
  AsCaller as_caller(req);
  fuse_reply_err(req, Check(setxattr(path.c_str(), name, value, size, flags)));
}

void OpRemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  const InodeTable::Pin pin = InodeFd(req, ino);  // open until the reply
  if (int err = XattrCheck(pin); err != 0) return ReplyErr(req, err);
  const std::string path = ProcPath(pin.fd());
  AsCaller as_caller(req);
  fuse_reply_err(req, Check(removexattr(path.c_str(), name)));
}

void OpStatFs(fuse_req_t req, fuse_ino_t ino) {
  const InodeTable::Pin fd_pin = InodeFd(req, ino);
  const int fd = fd_pin.fd();
  struct statvfs sv;
  if (int err = fd < 0 ? ESTALE : Check(fstatvfs(fd, &sv)); err != 0) return ReplyErr(req, err);
  fuse_reply_statfs(req, &sv);
}

}  // namespace

const fuse_lowlevel_ops* Passthrough::Ops() {
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o;
    memset(&o, 0, sizeof(o));
    o.init = OpInit;
    o.lookup = OpLookup;
    o.forget = OpForget;
    o.forget_multi = OpForgetMulti;
    o.getattr = OpGetAttr;
    o.setattr = OpSetAttr;
    o.mkdir = OpMkDir;
    o.unlink = OpUnlink;
    o.rmdir = OpRmDir;
    o.rename = OpRename;
    o.create = OpCreate;
    o.open = OpOpen;
    o.read = OpRead;
    o.write = OpWrite;
    o.flush = OpFlush;
    o.release = OpRelease;
    o.fsync = OpFsync;
    o.opendir = OpOpenDir;
    o.readdir = OpReadDir;
    o.releasedir = OpReleaseDir;
    o.statfs = OpStatFs;
    o.getxattr = OpGetXattr;
    o.listxattr = OpListXattr;
    o.setxattr = OpSetXattr;
    o.removexattr = OpRemoveXattr;
    return o;
  }();
  return &ops;
}

}  // namespace passthrough
}  // namespace grantfs
