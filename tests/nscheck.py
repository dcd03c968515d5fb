#!/usr/bin/env python3
"""Randomized namespace checker: several processes change one small tree at
random through two or three mounts of the same file system, and what they see
is checked against what they were told.

    python3 tests/nscheck.py --mounts DIR1,DIR2[,DIR3] --workers N --ops N --seed S

Works on any directory: GrantFS mounts of one server, grantfs-passthrough
mounts of one source directory, or one local directory given several times
(the reference: a mismatch there is a bug of this checker, not of a file
system). tests/test_nscheck.py runs it on all three; docs/testing.md says how.

Everything happens in a fresh directory `nscheck-SEED-PID` under the first
mount (seen as the same directory under the others):

- `wI/` belongs to worker I alone. The worker keeps an exact model of it
  (class Model): every operation's errno must be the one the model predicts,
  every `check` (lstat, readlink, read, readdir, xattrs of one path) must
  match the model, and at the end the subtree must equal the model on every
  mount: types, modes, owners, link counts, hard-link groups, symlink
  targets, user xattrs and file contents.
- `shared/` is where every worker races on the same few names. Nothing is
  predicted there; every errno must be one a race can give, and at the end
  (final_checks) every mount must show the same tree, link counts must equal
  the names pointing at each inode, readdir and lookup must agree (no
  dangling entry), directories whose rmdir was seen to remove them must be
  gone, and every attribute, target and content must be one some worker set.

Workers move their own subtree's work from one mount to another only once
their changes through the other mounts are `bound` seconds old. GrantFS's stated
bound (docs/architecture.md, "Consistency between nodes"; DESIGN.md promise
6) is the 1 s kernel attribute and entry timeouts: the server pushes
invalidations "at once", but asynchronously, and a lookup through another
mount a few milliseconds after a change can still see the old entry. The
passthrough has the same 1 s timeouts and no invalidations at all. While it
waits, a worker keeps racing in shared/ through the old mount, so the wait
costs no time. The wait is `bound` plus 20 ms (TICK_SLACK): the kernel's
timeouts count in ticks. `--bound 0` checks what the invalidations alone give.

Each worker draws its operations from random.Random(seed * 1000 + worker): the same
seed replays the same operations (`--only-worker I` replays one worker's
subtree exactly, races aside). Every operation is logged with its time, mount,
expected and actual result; a worker's log is printed on a mismatch and kept
in --log-dir.

Names are bytes: a fraction of operations (--bad-names) use names, symlink
targets and xattr names that are not UTF-8, as Linux allows.
"""

import argparse
import ctypes
import errno
import multiprocessing
import os
import random
import resource
import shutil
import stat
import sys
import tempfile
import time
import traceback

# --- the pools everything is drawn from ---------------------------------------------
# Few names, so operations collide often.
NAMES = [b"a", b"b", b"c", b"d"]
BAD_NAMES = [b"bad\xff\xfe", b"\xc3(", b"\x80lone"]  # not UTF-8
LONG_NAME = b"L" * 255  # the longest name Linux allows
TOO_LONG_NAME = b"T" * 256
SHARED_NAMES = [b"a", b"b", b"c"]
XATTR_NAMES = [b"user.a", b"user.b"]
BAD_XATTR_NAMES = [b"user.\xff\xfe"]
UIDS = [0, 1000, 4242, 65534]
GIDS = [0, 100, 4242, 65534]
# No setuid/setgid bits: chown and write would clear them, which is not
# what this checker is about.
FILE_MODES = [0o644, 0o600, 0o755, 0o444, 0o000, 0o1644]
DIR_MODES = [0o755, 0o700, 0o555, 0o1777, 0o000]
WRITE_CREATE_MODE = 0o644
SHARED_MODE = 0o755  # of shared/ itself
SHARED_PAYLOAD_LEN = 64  # every write in shared/ replaces the file by one payload

# Every symlink target starts with a name no operation creates, so every
# target dangles and following one always gives ENOENT (the model never has
# to resolve a target).
TARGET_PREFIXES = [b"tgt-", b"../tgt-", b"/nonexistent-nscheck/tgt-"]

REG, DIR, LNK = stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK
TYPE_NAMES = {REG: "file", DIR: "dir", LNK: "symlink"}



def _sysctl(name):
    try:
        with open(f"/proc/sys/{name}") as f:
            return int(f.read())
    except OSError:
        return 0


PROTECTED_REGULAR = _sysctl("fs/protected_regular")

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
AT_FDCWD = -100

_libc = ctypes.CDLL(None, use_errno=True)
_libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                            ctypes.c_uint]


def renameat2(old, new, flags):
    """renameat2(2) of two paths; raises OSError like os.rename."""
    if _libc.renameat2(AT_FDCWD, old, AT_FDCWD, new, flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old, None, new)


def ename(err):
    """'ENOENT' for errno.ENOENT, 'ok' for 0, '*' for None (not predicted)."""
    if err is None:
        return "*"
    return "ok" if err == 0 else errno.errorcode.get(err, str(err))


def show(path):
    """A bytes path for messages: repr without the b''."""
    return repr(path)[2:-1] if path else "."


def join(*parts):
    return b"/".join(p for p in parts if p not in (b"", b"."))


# --- what a path looks like -----------------------------------------------------------

NOT_SUPPORTED = (errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)


def user_xattrs(path):
    """name -> value of the user.* xattrs of path (not followed); {} where the
    file system has no xattrs at all."""
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        if e.errno in NOT_SUPPORTED:
            return {}
        raise
    out = {}
    for n in sorted(names):
        b = os.fsencode(n)
        if b.startswith(b"user."):
            out[b] = os.getxattr(path, n, follow_symlinks=False)
    return out


def observe(path):
    """What the checker compares about one path (not followed); raises
    OSError. The same keys as Model.entry()."""
    st = os.lstat(path)
    kind = stat.S_IFMT(st.st_mode)
    e = {"type": kind, "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "gid": st.st_gid,
         "nlink": st.st_nlink, "ino": st.st_ino}
    if kind == REG:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            chunks = []
            while True:
                b = os.read(fd, 1 << 16)
                if not b:
                    break
                chunks.append(b)
        finally:
            os.close(fd)
        e["data"] = b"".join(chunks)
        e["size"] = st.st_size
        e["xattrs"] = user_xattrs(path)
    elif kind == LNK:
        e["target"] = os.readlink(path)
    elif kind == DIR:
        e["xattrs"] = user_xattrs(path)
        e["names"] = sorted(os.listdir(path))
    return e


def walk(root, problems):
    """rel path -> observe() of everything under root ('.' is root itself).
    A name readdir lists but lstat cannot find is a dangling entry: it goes
    to `problems`, not to the result."""
    entries = {}

    def visit(path, rel):
        e = observe(path)
        entries[rel] = e
        if e["type"] == DIR:
            for name in e["names"]:
                r = join(rel, name) if rel != b"." else name
                try:
                    visit(path + b"/" + name, r)
                except OSError as err:
                    problems.append(f"{show(r)}: listed by readdir, but {ename(err.errno)}")

    visit(root, b".")
    return entries


def link_groups(entries):
    """Sets of paths that are names of one non-directory inode with more than
    one name."""
    by_ino = {}
    for rel, e in entries.items():
        if e["type"] != DIR:
            by_ino.setdefault(e["ino"], set()).add(rel)
    return {frozenset(s) for s in by_ino.values() if len(s) > 1}


def short(value):
    """A value for a message: long bytes as length and head."""
    if isinstance(value, bytes) and len(value) > 48:
        return f"<{len(value)} bytes {value[:24]!r}...>"
    return repr(value)


def diff_entry(rel, expected, actual):
    """Differences between two entries (ino not compared)."""
    out = []
    for k in sorted(set(expected) | set(actual)):
        if k == "ino":
            continue
        if expected.get(k) != actual.get(k):
            fmt = oct if k in ("mode", "type") and k in expected and k in actual else short
            out.append(f"{show(rel)}: {k} expected {fmt(expected.get(k))}, "
                       f"got {fmt(actual.get(k))}")
    return out


def diff_trees(expected, actual):
    """Differences between two walk()/Model.entries() results: entries and
    hard-link groups."""
    out = [f"missing: {show(r)}" for r in sorted(set(expected) - set(actual))]
    out += [f"unexpected: {show(r)}" for r in sorted(set(actual) - set(expected))]
    for rel in sorted(set(expected) & set(actual)):
        out += diff_entry(rel, expected[rel], actual[rel])
    eg, ag = link_groups(expected), link_groups(actual)
    if eg != ag:
        fmt = lambda gs: sorted(sorted(show(p) for p in g) for g in gs)  # noqa: E731
        out.append(f"hard-link groups: expected {fmt(eg)}, got {fmt(ag)}")
    return out


# --- the model of one worker's subtree ------------------------------------------------


class Node:
    """One inode of the model. nlink is kept for non-directories; a
    directory's is 2 + its subdirectories."""

    _next_id = 0

    def __init__(self, kind, mode, target=b""):
        Node._next_id += 1
        self.id = Node._next_id
        self.kind = kind
        self.mode = mode
        self.uid = 0
        self.gid = 0
        self.nlink = 1
        self.data = b""
        self.target = target
        self.xattrs = {}
        self.entries = {}  # directories: name -> Node
        self.parent = None  # directories: the directory holding them


class Model:
    """What a worker's subtree must look like, and the errno every operation
    on it must give: Linux's rules (path walk, then the checks of
    do_renameat2/vfs_rename and friends, in their order) for a caller that is
    root with umask 0, where no path ever resolves through a symlink (every
    target dangles)."""

    def __init__(self, root_mode=0o755):
        self.root = Node(DIR, root_mode)

    def dirs(self):
        """Paths (tuples of names) of every directory, the root first."""
        out = []

        def visit(node, path):
            out.append(path)
            for name in sorted(node.entries):
                child = node.entries[name]
                if child.kind == DIR:
                    visit(child, path + (name,))

        visit(self.root, ())
        return out

    def paths(self, pred=None):
        """Paths of every entry but the root (those whose node pred() likes)."""
        out = []

        def visit(node, path):
            for name in sorted(node.entries):
                child = node.entries[name]
                if pred is None or pred(child):
                    out.append(path + (name,))
                if child.kind == DIR:
                    visit(child, path + (name,))

        visit(self.root, ())
        return out

    def parent_of(self, path):
        """(directory node holding path's last name, 0) or (None, errno)."""
        node = self.root
        for name in path[:-1]:
            child = node.entries.get(name)
            if child is None or child.kind == LNK:  # missing, or a dangling symlink
                return None, errno.ENOENT
            if child.kind != DIR:
                return None, errno.ENOTDIR
            node = child
        return node, 0

    def lookup(self, path):
        """(node, 0) or (None, errno) for path, its last name not followed."""
        if not path:
            return self.root, 0
        parent, err = self.parent_of(path)
        if err:
            return None, err
        node = parent.entries.get(path[-1])
        return (node, 0) if node is not None else (None, errno.ENOENT)

    @staticmethod
    def _trap(old_dir, new_dir):
        """lock_rename()'s trap: when one directory is under the other, the
        child of the upper one on the way to the lower one."""
        if old_dir is new_dir:
            return None
        for lower, upper in ((new_dir, old_dir), (old_dir, new_dir)):
            n = lower
            while n.parent is not None:
                if n.parent is upper:
                    return n
                n = n.parent
        return None

    def apply(self, op):
        """The errno op must give (0 for success); on success the model takes
        the change."""
        kind = op[0]
        if kind in ("creat", "mkdir", "symlink"):
            path = op[1]
            if path[-1] == TOO_LONG_NAME:
                parent, err = self.parent_of(path)
                return err or errno.ENAMETOOLONG
            parent, err = self.parent_of(path)
            if err:
                return err
            if path[-1] in parent.entries:
                return errno.EEXIST
            if kind == "creat":
                node = Node(REG, op[2])
            elif kind == "mkdir":
                node = Node(DIR, op[2])
                node.parent = parent
            else:
                node = Node(LNK, 0o777, target=op[2])
            parent.entries[path[-1]] = node
            return 0
        if kind == "link":
            src, dst = op[1], op[2]
            node, err = self.lookup(src)
            if err:
                return err
            dparent, err = self.parent_of(dst)
            if err:
                return err
            if dst[-1] in dparent.entries:
                return errno.EEXIST
            if node.kind == DIR:
                return errno.EPERM
            dparent.entries[dst[-1]] = node
            node.nlink += 1
            return 0
        if kind in ("unlink", "rmdir"):
            parent, err = self.parent_of(op[1])
            if err:
                return err
            node = parent.entries.get(op[1][-1])
            if node is None:
                return errno.ENOENT
            if kind == "unlink" and node.kind == DIR:
                return errno.EISDIR
            if kind == "rmdir":
                if node.kind != DIR:
                    return errno.ENOTDIR
                if node.entries:
                    return errno.ENOTEMPTY
            del parent.entries[op[1][-1]]
            node.nlink -= 1
            return 0
        if kind == "rename":
            return self._rename(*op[1:])
        if kind in ("chmod", "chown", "setxattr", "rmxattr"):
            node, err = self.lookup(op[1])
            if err:
                return err
            if kind == "chmod":
                if node.kind == LNK:
                    return errno.ENOENT  # chmod follows the (dangling) symlink
                node.mode = op[2]
            elif kind == "chown":
                node.uid, node.gid = op[2], op[3]
            elif node.kind == LNK:
                return errno.EPERM  # no user.* xattrs on symlinks
            elif kind == "setxattr":
                name, value, flags = op[2], op[3], op[4]
                if flags == os.XATTR_CREATE and name in node.xattrs:
                    return errno.EEXIST
                if flags == os.XATTR_REPLACE and name not in node.xattrs:
                    return errno.ENODATA
                node.xattrs[name] = value
            else:
                if op[2] not in node.xattrs:
                    return errno.ENODATA
                del node.xattrs[op[2]]
            return 0
        if kind == "write":
            return self._write(*op[1:])
        raise ValueError(f"unknown op {kind}")

    def _rename(self, src, dst, flags):
        sparent, err = self.parent_of(src)
        if err:
            return err
        dparent, err = self.parent_of(dst)
        if err:
            return err
        s = sparent.entries.get(src[-1])
        if s is None:
            return errno.ENOENT
        d = dparent.entries.get(dst[-1])
        if flags & RENAME_NOREPLACE and d is not None:
            return errno.EEXIST
        if flags & RENAME_EXCHANGE and d is None:
            return errno.ENOENT
        trap = self._trap(sparent, dparent)
        if trap is not None and s is trap:
            return errno.EINVAL  # a directory into itself
        if trap is not None and d is trap:  # over an ancestor of the source
            return errno.EINVAL if flags & RENAME_EXCHANGE else errno.ENOTEMPTY
        if s is d:
            return 0  # the same name, or two names of one inode: nothing happens
        if flags & RENAME_EXCHANGE:
            sparent.entries[src[-1]], dparent.entries[dst[-1]] = d, s
            if d.kind == DIR:
                d.parent = sparent
        else:
            if d is not None:
                if s.kind == DIR and d.kind != DIR:
                    return errno.ENOTDIR
                if s.kind != DIR and d.kind == DIR:
                    return errno.EISDIR
                if d.kind == DIR and d.entries:
                    return errno.ENOTEMPTY
                d.nlink -= 1
            del sparent.entries[src[-1]]
            dparent.entries[dst[-1]] = s
        if s.kind == DIR:
            s.parent = dparent
        return 0

    def _write(self, path, how, create, offset, data):
        parent, err = self.parent_of(path)
        if err:
            return err
        node = parent.entries.get(path[-1])
        if node is None:
            if not create:
                return errno.ENOENT
            node = parent.entries[path[-1]] = Node(REG, WRITE_CREATE_MODE)
        elif node.kind == DIR:
            return errno.EISDIR
        elif create and self._sticky_denies_create(parent, node):
            return errno.EACCES
        elif node.kind == LNK:
            return errno.ELOOP  # O_NOFOLLOW
        if how == "replace":
            node.data = data
        elif how == "append":
            node.data += data
        elif how == "pwrite" and data:  # writing nothing does not extend
            buf = node.data.ljust(offset, b"\0")
            node.data = buf[:offset] + data + buf[offset + len(data):]
        elif how == "truncate":
            node.data = node.data[:offset].ljust(offset, b"\0")
        return 0

    @staticmethod
    def _sticky_denies_create(parent, node):
        """may_create_in_sticky(): O_CREAT of an existing name in a sticky,
        world-writable directory fails with EACCES (also for root) if the
        name belongs to neither the directory's owner nor the caller. The
        kernel applies it to regular files only with fs.protected_regular,
        to symlinks always."""
        if not parent.mode & stat.S_ISVTX:
            return False
        if node.kind == REG and not PROTECTED_REGULAR:
            return False
        if node.uid in (parent.uid, 0):
            return False
        if parent.mode & 0o002:
            return True
        return bool(parent.mode & 0o020) and PROTECTED_REGULAR >= 2 and node.kind == REG

    def entry(self, node):
        """observe() of node, as the model has it (ino: the model's id)."""
        e = {"type": node.kind, "mode": node.mode, "uid": node.uid, "gid": node.gid,
             "ino": node.id}
        if node.kind == DIR:
            e["nlink"] = 2 + sum(1 for c in node.entries.values() if c.kind == DIR)
            e["xattrs"] = dict(node.xattrs)
            e["names"] = sorted(node.entries)
        else:
            e["nlink"] = node.nlink
        if node.kind == REG:
            e["data"] = node.data
            e["size"] = len(node.data)
            e["xattrs"] = dict(node.xattrs)
        elif node.kind == LNK:
            e["target"] = node.target
        return e

    def entries(self):
        """walk() of the whole subtree, as the model has it."""
        out = {}

        def visit(node, rel):
            out[rel] = self.entry(node)
            for name, child in node.entries.items():
                visit(child, join(rel, name) if rel != b"." else name)

        visit(self.root, b".")
        return out


# --- running operations ---------------------------------------------------------------


def fmt_op(op):
    """One line for the log."""
    kind = op[0]
    p = lambda path: show(b"/".join(path))  # noqa: E731
    if kind in ("creat", "mkdir"):
        return f"{kind} {p(op[1])} mode={oct(op[2])}"
    if kind == "symlink":
        t = op[2] if len(op[2]) < 64 else op[2][:40] + b"...(%d bytes)" % len(op[2])
        return f"symlink {p(op[1])} -> {show(t)}"
    if kind == "link":
        return f"link {p(op[1])} {p(op[2])}"
    if kind == "rename":
        flags = {0: "", RENAME_NOREPLACE: " NOREPLACE", RENAME_EXCHANGE: " EXCHANGE"}[op[3]]
        return f"rename{flags} {p(op[1])} {p(op[2])}"
    if kind == "chmod":
        return f"chmod {p(op[1])} {oct(op[2])}"
    if kind == "chown":
        return f"lchown {p(op[1])} {op[2]}:{op[3]}"
    if kind == "setxattr":
        flags = {0: "", os.XATTR_CREATE: " CREATE", os.XATTR_REPLACE: " REPLACE"}[op[4]]
        return f"setxattr{flags} {p(op[1])} {show(op[2])}={short(op[3])}"
    if kind == "rmxattr":
        return f"removexattr {p(op[1])} {show(op[2])}"
    if kind == "write":
        _, path, how, create, offset, data = op
        return (f"write {how}{' O_CREAT' if create else ''} {p(path)} offset={offset} "
                f"len={len(data)}")
    return f"{kind} {p(op[1])}"


def execute(base, op, notes=None):
    """Runs op on the tree at `base` (bytes); returns 0 or the errno. A check
    returns (0, observe()) or (errno, None). A write that fails after its
    open says in `notes` (a list) which call failed."""
    kind = op[0]
    path = join(base, *op[1]) if op[1] else base
    stage = "open"
    try:
        if kind == "check":
            return 0, observe(path)
        if kind == "creat":
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, op[2]))
        elif kind == "mkdir":
            os.mkdir(path, op[2])
        elif kind == "symlink":
            os.symlink(op[2], path)
        elif kind == "link":
            os.link(path, join(base, *op[2]), follow_symlinks=False)
        elif kind == "unlink":
            os.unlink(path)
        elif kind == "rmdir":
            os.rmdir(path)
        elif kind == "rename":
            if op[3] == 0:
                os.rename(path, join(base, *op[2]))
            else:
                renameat2(path, join(base, *op[2]), op[3])
        elif kind == "chmod":
            os.chmod(path, op[2])
        elif kind == "chown":
            os.chown(path, op[2], op[3], follow_symlinks=False)
        elif kind == "setxattr":
            os.setxattr(path, op[2], op[3], op[4], follow_symlinks=False)
        elif kind == "rmxattr":
            os.removexattr(path, op[2], follow_symlinks=False)
        elif kind == "write":
            _, _, how, create, offset, data = op
            flags = os.O_WRONLY | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
            flags |= {"replace": os.O_TRUNC, "append": os.O_APPEND}.get(how, 0)
            fd = os.open(path, flags, WRITE_CREATE_MODE)
            try:
                stage = "write"
                if how == "truncate":
                    os.ftruncate(fd, offset)
                elif how == "pwrite":
                    os.pwrite(fd, data, offset)
                else:
                    os.write(fd, data)
            finally:
                stage = "close"
                os.close(fd)  # a GrantFS mount flushes here: others see it on open
        else:
            raise ValueError(f"unknown op {kind}")
    except OSError as e:
        if kind == "write" and stage != "open" and notes is not None:
            notes.append(f"{stage} failed")
        return (e.errno, None) if kind == "check" else e.errno
    return 0


# What a race in shared/ may give, besides success.
SHARED_ERRNOS = {
    # what the path is changes between lstat and what follows (readlink of a
    # non-symlink is EINVAL; a removed xattr ENODATA)
    "check": {errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EISDIR, errno.ENODATA,
              errno.EINVAL},
    "creat": {errno.EEXIST, errno.ENOENT, errno.ENOTDIR},
    "mkdir": {errno.EEXIST, errno.ENOENT, errno.ENOTDIR},
    "symlink": {errno.EEXIST, errno.ENOENT, errno.ENOTDIR},
    "link": {errno.EEXIST, errno.ENOENT, errno.ENOTDIR, errno.EPERM},
    "unlink": {errno.ENOENT, errno.ENOTDIR, errno.EISDIR},
    "rmdir": {errno.ENOENT, errno.ENOTDIR, errno.ENOTEMPTY},
    "rename": {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST,
               errno.EINVAL},
    "chmod": {errno.ENOENT, errno.ENOTDIR},
    "chown": {errno.ENOENT, errno.ENOTDIR},
    "setxattr": {errno.ENOENT, errno.ENOTDIR, errno.EPERM, errno.EEXIST, errno.ENODATA},
    "rmxattr": {errno.ENOENT, errno.ENOTDIR, errno.EPERM, errno.ENODATA},
    # EACCES: O_CREAT of another owner's name in a sticky directory
    "write": {errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EISDIR, errno.EACCES},
}

# ESTALE_NOTE: a directory that another node moved is still cached by this
# mount's kernel under its old name; when a lookup finds it under the new
# one, d_splice_alias() must move the cached entry and needs the file
# system's rename lock: while a rename runs on this mount it cannot take it,
# and the syscall fails with ESTALE (after the VFS's one retry), having done
# nothing. NFS clients see the same. So ESTALE is a race's errno in shared/,
# and an own-subtree op that gets it is retried.

# Operation kinds and how often a worker draws each.
OP_WEIGHTS = {
    "check": 14, "creat": 7, "mkdir": 7, "symlink": 5, "link": 6, "unlink": 7, "rmdir": 6,
    "rename": 16, "chmod": 4, "chown": 4, "setxattr": 5, "rmxattr": 2, "write": 12,
}
# How often an op draws a path that exists (else a name in an existing
# directory): most ops are more interesting on something that is there.
EXISTING_BIAS = {"creat": 0.2, "mkdir": 0.2, "symlink": 0.2, "link": 0.8, "rename": 0.8}
# What most ops on an existing path pick.
PREFERRED_TYPE = {
    "rmdir": lambda n: n.kind == DIR and not n.entries,
    "unlink": lambda n: n.kind != DIR,
    "write": lambda n: n.kind == REG,
    "link": lambda n: n.kind != DIR,
}
# Above this many entries in a worker's subtree, creating ops are drawn less.
TREE_SIZE = 40
CREATING_KINDS = ("creat", "mkdir", "symlink", "link")


class Worker:
    """One process: its own subtree (exact model) and its share of the races
    in shared/. Runs in a child process; the parent gets `result()`."""

    HELD_DIR_FDS = 200  # removed directories kept open (their inode numbers stay unused)

    def __init__(self, cfg, index):
        self.cfg = cfg
        self.index = index
        self.rng = random.Random(cfg["seed"] * 1000 + index)
        # Shared-area ops done while waiting for the bound: how many depends
        # on timing, so they draw from their own generator.
        self.filler_rng = random.Random(cfg["seed"] * 1000 + index + 500)
        self.model = Model()
        self.mounts = [join(m, cfg["base"]) for m in cfg["mounts"]]
        self.disabled = set(cfg["disabled"])
        self.kinds = [k for k in OP_WEIGHTS if k not in self.disabled]
        self.weights = [OP_WEIGHTS[k] for k in self.kinds]
        self.log = []
        self.failure = None
        self.stopped = None  # why the worker stopped early without failing (quirk estale)
        self.ops_done = 0
        self.filler_done = 0  # shared-area ops done while waiting for the bound
        self.counts = {}
        self.mount = index % len(self.mounts)
        self.last_change = [float("-inf")] * len(self.mounts)  # own subtree, per mount
        self.t0 = cfg["t0"]
        # What went into shared/, for the final checks.
        self.used = {"modes": set(), "payloads": set(), "targets": set(), "xattr_values": set()}
        self.removed_dirs = []  # (ino, log line) of directories seen removed by our rmdir
        self.held_fds = []

    # -- drawing operations

    def _name(self, rng, pool, bad_pool):
        r = rng.random()
        if r < self.cfg["bad_names"]:
            return rng.choice(bad_pool)
        return rng.choice(pool)

    def _own_name(self):
        r = self.rng.random()
        if r < 0.01:
            return LONG_NAME
        return self._name(self.rng, NAMES, BAD_NAMES)

    def _own_path(self, existing, kind=None, src=None, flags=0):
        """A path in the subtree: with probability `existing` one that is
        there (mostly of the type that op `kind` works on); else a name in
        an existing directory, sometimes under a name that is not a
        directory (or missing)."""
        if self.rng.random() < existing:
            pred = None
            if self.rng.random() < 0.8:
                pred = PREFERRED_TYPE.get(kind)
            paths = self.model.paths(pred)
            if paths:
                return self.rng.choice(paths)
        parent = self.rng.choice(self.model.dirs())
        if self.rng.random() < 0.04:
            parent += (self._own_name(),)
        return parent + (self._own_name(),)

    def _target(self, rng, tag):
        t = rng.choice(TARGET_PREFIXES) + tag
        r = rng.random()
        if r < self.cfg["bad_names"]:
            t += b"\xff\xfe"
        elif r < 0.1:
            t += b"/x" * rng.randrange(100, 1500)  # long, short components
        return t

    def _data(self, rng):
        n = rng.choice([0, 1, 100, 4095, 4096, 4097, rng.randrange(1, 12000)])
        return rng.randbytes(n)

    def _draw(self, rng, kind, pick_path, shared, tag):
        """The arguments of one op of `kind`; pick_path() draws a path; tag
        names the op in what it writes."""
        path = pick_path(EXISTING_BIAS.get(kind, 0.7), kind=kind)
        if kind in ("creat", "mkdir"):
            if not shared and rng.random() < 0.01:
                path = path[:-1] + (TOO_LONG_NAME,)
            return (kind, path, rng.choice(FILE_MODES if kind == "creat" else DIR_MODES))
        if kind == "symlink":
            return (kind, path, self._target(rng, tag))
        if kind == "link":
            return (kind, path, pick_path(0.1))
        if kind == "rename":
            flags = rng.choice([0, 0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE])
            return (kind, path, pick_path(0.4, src=path, flags=flags), flags)
        if kind == "chmod":
            return (kind, path, rng.choice(FILE_MODES + DIR_MODES))
        if kind == "chown":
            return (kind, path, rng.choice(UIDS), rng.choice(GIDS))
        if kind in ("setxattr", "rmxattr"):
            name = self._name(rng, XATTR_NAMES, BAD_XATTR_NAMES)
            if kind == "rmxattr":
                return (kind, path, name)
            value = rng.randbytes(rng.choice([0, 1, 16, 200, 1000]))  # all fit ext4's 4 KiB
            flags = rng.choice([0, 0, os.XATTR_CREATE, os.XATTR_REPLACE])
            return (kind, path, name, value, flags)
        if kind == "write":
            if shared:  # one whole payload, so any final content is one of them
                data = tag.ljust(SHARED_PAYLOAD_LEN, b"#")[:SHARED_PAYLOAD_LEN]
                return (kind, path, "replace", True, 0, data)
            how = rng.choice(["replace", "append", "pwrite", "truncate"])
            create = rng.random() < 0.5 and how != "truncate"
            offset = rng.randrange(0, 9000) if how in ("pwrite", "truncate") else 0
            return (kind, path, how, create, offset, b"" if how == "truncate" else self._data(rng))
        return (kind, path)  # check, unlink, rmdir

    def _shared_path(self, rng, existing=None, kind=None, src=None, flags=0):
        """A path in shared/, one or two names deep. Renames never move
        anything deeper (`src` and `flags` given: a rename's destination),
        so no directory ever holds more than one level: a directory two
        names deep can only be made by mkdir there, and is empty."""
        name = lambda: self._name(rng, SHARED_NAMES, BAD_NAMES)  # noqa: E731
        if src is None:
            return (name(),) if rng.random() < 0.6 else (name(), name())
        if len(src) == 1:
            if rng.random() < 0.1:  # into itself: EINVAL, ENOTDIR or ENOENT, never a change
                return src + (name(),)
            return (name(),)
        if flags & RENAME_EXCHANGE:
            return (name(), name())
        return (name(),) if rng.random() < 0.5 else (name(), name())

    # -- running them

    def _note(self, area, op, expected, actual, extra=""):
        t = time.monotonic() - self.t0
        line = (f"{t:10.4f} w{self.index} #{self.ops_done} m{self.mount} {area} {fmt_op(op)}"
                f" -> expected {ename(expected)}, got {ename(actual)}{extra}")
        self.log.append(line)
        return line

    def _fail(self, line, details=()):
        self.failure = "\n".join([f"worker {self.index} mismatch: {line}", *details])

    def _own_op(self):
        weights = self.weights
        if len(self.model.paths()) > TREE_SIZE:  # keep the tree small: names collide
            weights = [w * (0.25 if k in CREATING_KINDS else 2) for k, w in
                       zip(self.kinds, weights)]
        kind = self.rng.choices(self.kinds, weights)[0]
        tag = b"w%d.%d" % (self.index, self.ops_done)
        op = self._draw(self.rng, kind, self._own_path, False, tag)
        base = self.mounts[self.mount]
        if kind == "check":
            node, want = self.model.lookup(op[1])
            got, seen = execute(join(base, b"w%d" % self.index), op)
            line = self._note("own", op, want, got)
            if want != got:
                return self._fail(line)
            if node is not None:
                details = diff_entry(b"/".join(op[1]), self.model.entry(node), seen)
                if details:
                    self._fail(line, details)
            return
        want = self.model.apply(op)
        notes = []
        got = execute(join(base, b"w%d" % self.index), op, notes)
        for _ in range(3):
            if got != errno.ESTALE or want == errno.ESTALE:
                break
            # ESTALE means nothing was done (see ESTALE_NOTE); try again.
            self._note("own", op, want, got, "  (ESTALE: retried)")
            time.sleep(0.05 + self.cfg["bound"] * ("estale" in self.cfg["quirks"]))
            got = execute(join(base, b"w%d" % self.index), op)
        self.counts[(kind, ename(got))] = self.counts.get((kind, ename(got)), 0) + 1
        line = self._note("own", op, want, got, "".join(f" ({n})" for n in notes))
        if got == errno.ESTALE and "estale" in self.cfg["quirks"]:
            # Still ESTALE: the op was not done, but the model took it. The
            # worker stops; its subtree is not compared at the end.
            self.stopped = line
            return
        if got == 0:
            self.last_change[self.mount] = time.monotonic()
        if want != got:
            self._fail(line)

    def _shared_op(self, rng, area="shared"):
        kind = rng.choices(self.kinds, self.weights)[0]
        if area == "shared":
            tag = b"w%d.%d" % (self.index, self.ops_done)
        else:
            self.filler_done += 1
            tag = b"w%d.f%d" % (self.index, self.filler_done)
        op = self._draw(rng, kind, lambda *a, **kw: self._shared_path(rng, *a, **kw), True,
                        tag)
        base = join(self.mounts[self.mount], b"shared")
        notes = []
        if kind == "rmdir":
            got = self._shared_rmdir(base, op)
        else:
            got = execute(base, op, notes)
            if kind == "check":
                got = got[0]
        self._record_used(op)
        allowed = set(SHARED_ERRNOS[kind])
        if len(op[1]) == 1 and kind not in ("link", "rename", "rmdir", "check"):
            allowed.discard(errno.ENOTDIR)  # the directory is shared/ itself
            if kind in ("creat", "mkdir", "symlink", "write"):
                allowed.discard(errno.ENOENT)  # creating in a directory that is there
        allowed.add(errno.ESTALE)  # see ESTALE_NOTE
        extra = "".join(f" ({n})" for n in notes)
        if got != 0 and got not in allowed:
            extra += "  <-- not an errno a race gives"
        line = self._note(area, op, None, got, extra)
        if got != 0 and got not in allowed:
            self._fail(line)

    def _shared_rmdir(self, base, op):
        """rmdir in shared/; a directory we hold open and see removed by it
        is remembered, so the final check can tell it is gone everywhere."""
        path = join(base, *op[1])
        fd = None
        ino = None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            ino = os.fstat(fd).st_ino
        except OSError:
            # Not a directory, or removed by another node between the open
            # and the fstat (ESTALE): nothing to remember.
            if fd is not None:
                os.close(fd)
                fd = None
        try:
            os.rmdir(path)
            got = 0
        except OSError as e:
            got = e.errno
        if fd is None:
            return got
        gone = False
        if got == 0:
            try:
                gone = os.fstat(fd).st_nlink == 0
            except OSError as e:
                gone = e.errno in (errno.ENOENT, errno.ESTALE)
        if gone and len(self.held_fds) < self.HELD_DIR_FDS:
            self.held_fds.append(fd)  # held until the final checks: the ino stays unused
            self.removed_dirs.append((ino, f"w{self.index} #{self.ops_done} m{self.mount} "
                                           f"rmdir {show(b'/'.join(op[1]))}"))
        else:
            os.close(fd)
        return got

    def _record_used(self, op):
        kind = op[0]
        if kind in ("creat", "mkdir", "chmod"):
            self.used["modes"].add(op[2])
        elif kind == "symlink":
            self.used["targets"].add(op[2])
        elif kind == "setxattr":
            self.used["xattr_values"].add(op[3])
        elif kind == "write":
            self.used["payloads"].add(op[5])

    def _switch_mount(self):
        """Moves to another mount once every change made through the others
        is `bound` seconds old (the documented staleness bound); meanwhile
        races in shared/ through the current one."""
        new = self.rng.choice([m for m in range(len(self.mounts)) if m != self.mount])
        ready = max(t for m, t in enumerate(self.last_change) if m != new) + self.cfg["bound"]
        if self.cfg["bound"] > 0:
            # The kernel counts cache timeouts in ticks (4 ms at HZ=250) from a
            # tick-old clock, so an entry cached for 1 s can live up to two
            # ticks longer: seen on the passthrough in CI (expired 1.5 ms
            # before the op, still used).
            ready += TICK_SLACK
        while time.monotonic() < ready and self.failure is None:
            if self.cfg["shared"] == 0:  # no races wanted: just wait
                time.sleep(ready - time.monotonic())
                break
            self._shared_op(self.filler_rng, area="shared(wait)")
        self.mount = new

    def run(self):
        os.umask(0)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
        next_switch = 0
        try:
            while self.ops_done < self.cfg["ops"] and self.failure is None and not self.stopped:
                if len(self.mounts) > 1 and self.ops_done == next_switch:
                    if self.ops_done:
                        self._switch_mount()
                    # Phases of a few ops (a switch right after a change)
                    # and of many.
                    next_switch += self.rng.choice([1, 2, 5, 20, 100, 300])
                if self.failure is None:
                    if self.rng.random() < self.cfg["shared"]:
                        self._shared_op(self.rng)
                    else:
                        self._own_op()
                self.ops_done += 1
        except Exception:  # a checker bug: report it like a mismatch
            self.failure = (f"worker {self.index} crashed at op {self.ops_done}:\n"
                            + traceback.format_exc())

    def result(self):
        return {"index": self.index, "failure": self.failure, "ops": self.ops_done,
                "log": self.log if self.failure or self.cfg["log_dir"] else self.log[-50:],
                "model": None if self.failure or self.stopped else self.model.entries(),
                "stopped": self.stopped,
                "used": self.used, "removed_dirs": self.removed_dirs, "counts": self.counts}


def _worker_main(cfg, index, conn):
    """Child process: runs the worker, sends its result, then holds the
    removed directories open until the parent has done its final checks."""
    w = Worker(cfg, index)
    w.run()
    conn.send(w.result())
    try:
        conn.recv()
    except EOFError:
        pass


# --- setup, final checks, report -----------------------------------------------------


def probe_capabilities(d):
    """Op kinds the file system at d does not have ({kind: errno name}):
    only 'not supported' errnos count, anything else is left to the run."""
    missing = {}
    f = join(d, b"f")
    os.close(os.open(f, os.O_WRONLY | os.O_CREAT, 0o644))
    tries = {
        "symlink": lambda: os.symlink(b"tgt-probe", join(d, b"l")),
        "link": lambda: os.link(f, join(d, b"h"), follow_symlinks=False),
        "setxattr": lambda: os.setxattr(f, b"user.probe", b"v"),
        "rmxattr": lambda: os.removexattr(f, b"user.probe"),
    }
    for kind, fn in tries.items():
        try:
            fn()
        except OSError as e:
            if e.errno in NOT_SUPPORTED or (kind == "link" and e.errno == errno.EPERM):
                missing[kind] = ename(e.errno)
            elif not (kind == "rmxattr" and "setxattr" in missing):
                raise
    return missing


def final_checks(cfg, results, problems):
    """After every worker is done and `bound` has passed: each subtree equals
    its model on every mount; shared/ is the same on every mount and keeps
    the invariants. Appends what is wrong to problems."""
    bases = [join(m, cfg["base"]) for m in cfg["mounts"]]
    for r in results:
        if r["model"] is None:
            continue
        for m, base in enumerate(bases):
            found = []
            try:
                found += diff_trees(r["model"], walk(join(base, b"w%d" % r["index"]), found))
            except OSError as e:
                found.append(f"cannot walk: {e}")
            problems += [f"w{r['index']} on mount {m}: {p}" for p in found[:40]]

    trees = []
    for m, base in enumerate(bases):
        found = []
        try:
            trees.append(walk(join(base, b"shared"), found))
        except OSError as e:
            found.append(f"cannot walk: {e}")
        problems += [f"shared on mount {m}: {p}" for p in found[:40]]
    if len(trees) < len(bases):
        return
    for m in range(1, len(trees)):
        d = diff_trees(trees[0], trees[m])
        for rel in sorted(set(trees[0]) & set(trees[m])):  # the very same inodes, too
            if trees[0][rel]["ino"] != trees[m][rel]["ino"]:
                d.append(f"{show(rel)}: inode {trees[0][rel]['ino']} on mount 0, "
                         f"{trees[m][rel]['ino']} here")
        problems += [f"shared: mount {m} differs from mount 0: {p}" for p in d[:40]]

    used = {k: set() for k in results[0]["used"]} if results else {}
    for r in results:
        for k, v in r["used"].items():
            used[k] |= v
    removed = {}
    for r in results:
        removed.update(dict(r["removed_dirs"]))
    for m, tree in enumerate(trees):
        problems += [f"shared on mount {m}: {p}"
                     for p in shared_invariants(tree, used, removed, join(bases[m], b"shared"))]


def shared_invariants(tree, used, removed, root):
    """What must hold of shared/ however the races went."""
    out = []
    names = {}
    for rel, e in tree.items():
        if e["type"] != DIR:
            names.setdefault(e["ino"], []).append(rel)
    for rel, e in sorted(tree.items()):
        kind = e["type"]
        if kind == DIR:
            subdirs = sum(1 for n in e["names"] if tree.get(join(rel, n) if rel != b"." else n,
                                                             {}).get("type") == DIR)
            if e["nlink"] != 2 + subdirs:
                out.append(f"{show(rel)}: directory nlink {e['nlink']}, has {subdirs} subdirs")
            if e["ino"] in removed:
                out.append(f"{show(rel)}: directory removed by `{removed[e['ino']]}` "
                           f"(inode {e['ino']}) is still there")
            # lookup and readdir agree: a pool name readdir does not list is not there
            for n in SHARED_NAMES + BAD_NAMES:
                if n not in e["names"] and (rel == b"." or rel.count(b"/") == 0):
                    p = join(root, rel, n) if rel != b"." else join(root, n)
                    try:
                        os.lstat(p)
                        out.append(f"{show(join(rel, n))}: found by lookup, not by readdir")
                    except OSError as err:
                        if err.errno != errno.ENOENT:
                            out.append(f"{show(join(rel, n))}: lookup gave {ename(err.errno)}")
        elif e["nlink"] != len(names[e["ino"]]):
            out.append(f"{show(rel)}: nlink {e['nlink']}, but {len(names[e['ino']])} names "
                       f"({', '.join(show(p) for p in sorted(names[e['ino']]))})")
        if kind == REG and e["data"] and e["data"] not in used["payloads"]:
            out.append(f"{show(rel)}: content {short(e['data'])} was never written")
        if kind == LNK and e["target"] not in used["targets"]:
            out.append(f"{show(rel)}: target {short(e['target'])} was never set")
        if kind != LNK and e["mode"] not in used["modes"] | {WRITE_CREATE_MODE, SHARED_MODE}:
            out.append(f"{show(rel)}: mode {oct(e['mode'])} was never set")
        if e["uid"] not in UIDS or e["gid"] not in GIDS:
            out.append(f"{show(rel)}: owner {e['uid']}:{e['gid']} was never set")
        for k, v in e.get("xattrs", {}).items():
            if v not in used["xattr_values"]:
                out.append(f"{show(rel)}: xattr {show(k)}={short(v)} was never set")
    return out


class Result:
    """What run() found: ok, failures (text), report()."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.failures = []
        self.logs = []
        self.stats = []
        self.counts = {}  # (op kind, result) -> how many, own subtrees only
        self.warnings = []  # final checks that failed first and passed within `settle`
        self.elapsed = 0.0
        self.log_dir = None

    @property
    def ok(self):
        return not self.failures

    def replay(self, worker=None):
        c = self.cfg
        cmd = (f"python3 tests/nscheck.py --mounts {','.join(map(os.fsdecode, c['mounts']))} "
               f"--workers {c['workers']} --ops {c['ops']} --seed {c['seed']} "
               f"--bound {c['bound']} --bad-names {c['bad_names']}")
        if c["shared"] != 0.25:
            cmd += f" --shared {c['shared']}"
        if c["quirks"]:
            cmd += f" --quirks {','.join(sorted(c['quirks']))}"
        return cmd + (f" --only-worker {worker}" if worker is not None else "")

    def report(self):
        lines = [f"nscheck seed {self.cfg['seed']}: {self.cfg['workers']} workers x "
                 f"{self.cfg['ops']} ops on {len(self.cfg['mounts'])} mounts, bound "
                 f"{self.cfg['bound']} s, {self.elapsed:.1f} s: "
                 + ("OK" if self.ok else f"{len(self.failures)} FAILURES")]
        if self.cfg["disabled"]:
            lines.append(f"  not supported here, not run: {self.cfg['disabled']}")
        lines += [f"  {s}" for s in self.stats]
        lines += [f"  warning: {w}" for w in self.warnings]
        kinds = sorted({k for k, _ in self.counts})
        for k in kinds:
            res = sorted((r for kk, r in self.counts if kk == k), key=lambda r: r != "ok")
            lines.append(f"  {k:9} " + ", ".join(f"{r} {self.counts[(k, r)]}" for r in res))
        for f in self.failures:
            lines.append("FAILURE: " + f)
        for index, log in self.logs:
            lines.append(f"--- worker {index}: last {min(len(log), 40)} of its ops "
                         f"(replay: {self.replay(index)})")
            lines += log[-40:]
        if self.log_dir:
            lines.append(f"full logs: {self.log_dir}")
        return "\n".join(lines)


TICK_SLACK = 0.02  # seconds: see Worker._switch_mount


def run(mounts, workers=3, ops=1000, seed=1, bound=None, bad_names=0.05, shared=0.25,
        log_dir=None, only_worker=None, keep=False, timeout=None, quirks=(), settle=0.0):
    """Runs the checker; returns a Result. mounts: paths of the same file
    system (str or bytes). bound: seconds after which a change through one
    mount must show through the others (default: 1.0, the 1 s kernel cache
    timeouts of GrantFS and of the passthrough; 0 when every mount is the
    same directory).

    For targets known to fall short where GrantFS must not (several
    grantfs-passthrough processes over one source directory):
    quirks={"estale"}: an own-subtree op that keeps getting ESTALE (after
    retries 1 s apart) stops its worker instead of failing it; settle:
    seconds the final checks are retried (every 0.5 s) before their problems
    count."""
    mounts = [os.fsencode(m) for m in mounts]
    if bound is None:
        bound = 0.0 if len({os.path.realpath(m) for m in mounts}) == 1 else 1.0
    cfg = {"mounts": mounts, "workers": workers, "ops": ops, "seed": seed, "bound": bound,
           "bad_names": bad_names, "shared": shared, "log_dir": log_dir, "quirks": set(quirks),
           "base": b"nscheck-%d-%d" % (seed, os.getpid()), "t0": time.monotonic()}
    result = Result(cfg)
    start = time.monotonic()
    base0 = join(mounts[0], cfg["base"])
    old_umask = os.umask(0)
    try:
        os.mkdir(base0, 0o755)
        os.mkdir(join(base0, b"probe"), 0o755)
        cfg["disabled"] = probe_capabilities(join(base0, b"probe"))
        shutil.rmtree(join(base0, b"probe"))
        os.mkdir(join(base0, b"shared"), SHARED_MODE)
        for i in range(workers):
            os.mkdir(join(base0, b"w%d" % i), 0o755)
    finally:
        os.umask(old_umask)
    time.sleep(bound)  # the other mounts see the new directories

    ctx = multiprocessing.get_context("fork")
    procs = []
    indexes = [only_worker] if only_worker is not None else range(workers)
    for i in indexes:
        parent_end, child_end = ctx.Pipe()
        p = ctx.Process(target=_worker_main, args=(cfg, i, child_end), daemon=True)
        p.start()
        child_end.close()
        procs.append((i, p, parent_end))
    results = []
    deadline = None if timeout is None else start + timeout
    for i, p, conn in procs:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if conn.poll(left):
            try:
                results.append(conn.recv())
                continue
            except EOFError:
                pass
        result.failures.append(f"worker {i} did not finish (exit code {p.exitcode}, "
                               f"timeout {timeout} s)")

    try:
        for r in results:
            if r["failure"]:
                result.failures.append(r["failure"])
                result.logs.append((r["index"], r["log"]))
            size = f"{len(r['model'])} entries at the end" if r["model"] else "stopped"
            if r["stopped"]:
                result.warnings.append(f"worker {r['index']} stopped (quirk estale), its "
                                       f"subtree not compared: {r['stopped'].strip()}")
            result.stats.append(f"worker {r['index']}: {r['ops']} ops, own subtree {size}, "
                                f"{len(r['removed_dirs'])} removed shared dirs tracked")
            for key, n in r["counts"].items():
                result.counts[key] = result.counts.get(key, 0) + n
        time.sleep(bound + 0.1 * (bound > 0))  # every change is now bound seconds old
        problems = []
        if results and len(results) == len(procs):
            final_checks(cfg, results, problems)
            settle_end = time.monotonic() + settle
            while problems and time.monotonic() < settle_end:
                result.warnings.append(f"settling: {len(problems)} final problems still "
                                       f"there, e.g. {problems[0]}")
                time.sleep(0.5)
                problems = []
                final_checks(cfg, results, problems)
        result.failures += problems[:200]
    finally:
        for _, p, conn in procs:
            try:
                conn.send("done")
            except (BrokenPipeError, OSError):
                pass
        for _, p, _ in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    if log_dir or not result.ok:
        result.log_dir = log_dir or tempfile.mkdtemp(prefix="nscheck-logs-")
        os.makedirs(result.log_dir, exist_ok=True)
        for r in results:
            with open(os.path.join(result.log_dir, f"worker-{r['index']}.log"), "w") as f:
                f.write("\n".join(r["log"]) + "\n")
    if result.ok and not keep:
        shutil.rmtree(base0, ignore_errors=True)
    result.elapsed = time.monotonic() - start
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mounts", required=True,
                    help="comma-separated directories that are one file system")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--ops", type=int, default=1000, help="operations per worker")
    ap.add_argument("--seed", type=int, default=None, help="default: from the time (printed)")
    ap.add_argument("--bound", type=float, default=None,
                    help="seconds a change may take to show through another mount "
                         "(default 1.0; 0 if every mount is the same directory)")
    ap.add_argument("--bad-names", type=float, default=0.05,
                    help="fraction of names, targets and xattr names that are not UTF-8")
    ap.add_argument("--shared", type=float, default=0.25,
                    help="fraction of operations that race in shared/")
    ap.add_argument("--only-worker", type=int, default=None, help="run just this worker")
    ap.add_argument("--log-dir", default=None, help="write every worker's full log here")
    ap.add_argument("--keep", action="store_true", help="keep the tree after a clean run")
    ap.add_argument("--timeout", type=float, default=None, help="give up after this many s")
    ap.add_argument("--quirks", default="", help="'estale' for grantfs-passthrough mounts")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds the final checks may take to pass (passthrough: 5)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time() * 1000) % 1_000_000
    if args.seed is None:
        print(f"seed {seed}")
    r = run(args.mounts.split(","), workers=args.workers, ops=args.ops, seed=seed,
            bound=args.bound, bad_names=args.bad_names, shared=args.shared,
            log_dir=args.log_dir, only_worker=args.only_worker, keep=args.keep,
            timeout=args.timeout, quirks=[q for q in args.quirks.split(",") if q],
            settle=args.settle)
    print(r.report())
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
