"""The namespace checker's model (tests/nscheck.py): what a worker's own
subtree must hold after each operation, the errno each operation must
give, and the execution of an operation on a real file system."""

import errno
import os
import stat

from nscheck_fs import (DIR, LNK, PROTECTED_REGULAR, REG, RENAME_EXCHANGE, RENAME_NOREPLACE,
                        TOO_LONG_NAME, WRITE_CREATE_MODE, join, observe, renameat2, short, show)

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
