#!/usr/bin/env python3
"""Cross-node coherence checker: one change at a time through one mount,
then at once, with no sleep, what every other mount of the same file system
shows of it, against a model.

    python3 tests/coherence.py --mounts DIR1,DIR2[,DIR3] --rounds N [--seed S]

Each round:

1. draws a node A and a change: create, write+close (new content, also of a
   new file), truncate (shrink or grow), unlink, rename over an existing
   name (a non-directory over another, a directory over an empty one),
   rename to a new name, mkdir, rmdir, chmod, chown (lchown, to other uids),
   setxattr / removexattr (user.* names), hard link, symlink;
2. makes every node cache the old state of what the change touches (the
   same observation as in step 4, checked against the model too), so that
   a node answering from its caches would show the old state;
3. applies the change through A's mount (it must succeed) and to the model;
4. at once, on every other node and then on A: lstat of every touched path
   (type, mode, uid, nlink, and size of files and symlinks; ENOENT where the
   model has nothing), listdir of the touched directories, then the content
   of each regular file (open + read), the target of each symlink, and, for
   an xattr change, getxattr of the changed name and listxattr.

Touched paths: the names the change uses, every other name of an inode it
changes (hard links: their nlink, mode, content), the directories holding
them, and everything under a renamed directory (under both names). The
first difference stops the run: the report names the seed, round, node,
change, path, key, what was expected and what was seen, and whether it was
a stale read (what that node had seen before the change).

The caller must be root (chown), with no sleep anywhere: the check is that
a change that returned on one node is what every other node sees next.
tests/test_coherence.py runs it on GrantFS; one local
directory given several times is the reference for the model.
"""

import argparse
import errno
import os
import random
import stat
import sys
import time

from nscheck_fs import read_file

REG, DIR, LNK = stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK
TYPE_NAMES = {REG: "file", DIR: "dir", LNK: "symlink"}

NAMES = ["a", "b", "c", "d", "e"]  # few names, so changes often meet cached ones
MAX_DIR_DEPTH = 2  # a directory's path has at most this many names
FILE_MODES = [0o644, 0o600, 0o755, 0o640, 0o444, 0o700]
DIR_MODES = [0o755, 0o700, 0o750, 0o555, 0o711]
UIDS = [0, 1000, 4242, 65534]
XATTR_NAMES = ["user.a", "user.b"]
# Sizes of written content and of truncations' growth: within a block,
# across blocks, and more than one FUSE write (128 KiB).
WRITE_SIZES = [0, 1, 17, 4096, 5000, 70000, 300000]
GROW_BY = [1, 100, 4096, 9000, 150000]
MAX_ENTRIES = 28  # above this, changes that add a name are drawn less often

# Change kinds and how often each is drawn.
WEIGHTS = {
    "create": 6, "write": 10, "truncate": 6, "unlink": 6, "rename_over": 7, "rename_new": 7,
    "mkdir": 5, "rmdir": 4, "chmod": 7, "chown": 6, "setxattr": 6, "rmxattr": 4, "link": 5,
    "symlink": 5,
}
ADDS = {"create", "mkdir", "link", "symlink", "rename_new"}
REMOVES = {"unlink", "rmdir", "rename_over"}


# --- the model ------------------------------------------------------------------------


class Inode:
    """One file, directory or symlink of the model (hard links share one)."""

    def __init__(self, kind, mode, data=b"", target=""):
        self.kind = kind
        self.mode = mode
        self.uid = 0
        self.data = data
        self.target = target
        self.xattrs = {}


class Model:
    """What the checked tree holds: path (relative, "/"-separated; "" is the
    top directory) -> Inode. The nlink of a non-directory is the number of
    its names, a directory's 2 + its subdirectories."""

    def __init__(self):
        self.paths = {"": Inode(DIR, 0o755)}

    @staticmethod
    def parent(path):
        return path.rpartition("/")[0]

    @staticmethod
    def join(d, name):
        return f"{d}/{name}" if d else name

    def get(self, path):
        return self.paths.get(path)

    def children(self, d):
        prefix = d + "/" if d else ""
        return sorted(p for p in self.paths
                      if p and p.startswith(prefix) and "/" not in p[len(prefix):])

    def descendants(self, d):
        return sorted(p for p in self.paths if p.startswith(d + "/"))

    def names_of(self, inode):
        return sorted(p for p, i in self.paths.items() if i is inode)

    def nlink(self, path):
        inode = self.paths[path]
        if inode.kind == DIR:
            return 2 + sum(1 for c in self.children(path) if self.paths[c].kind == DIR)
        return len(self.names_of(inode))

    def depth(self, path):
        return 0 if path == "" else path.count("/") + 1

    def height(self, d):
        """Levels of directories under d (0: no subdirectory)."""
        return max((self.depth(p) - self.depth(d) for p in self.descendants(d)
                    if self.paths[p].kind == DIR), default=0)

    def rename(self, src, dst):
        moved = {src: dst}
        for p in self.descendants(src):
            moved[p] = dst + p[len(src):]
        taken = {p: self.paths.pop(p) for p in moved}
        for p in self.descendants(dst) + ([dst] if dst in self.paths else []):
            del self.paths[p]
        for old, new in moved.items():
            self.paths[new] = taken[old]

    def expect(self, path, xattr=None, listxattr=False):
        """What observe() must give for path: key -> value, in the order they
        are compared."""
        parts = path.split("/") if path else []
        for i in range(len(parts)):
            prefix = "/".join(parts[:i + 1])
            inode = self.paths.get(prefix)
            if inode is None:
                return {"lstat": "ENOENT"}
            if inode.kind != DIR and i + 1 < len(parts):
                return {"lstat": "ENOTDIR"}
        inode = self.paths[path]
        e = {"lstat": "ok", "type": TYPE_NAMES[inode.kind], "mode": oct(inode.mode),
             "uid": inode.uid, "nlink": self.nlink(path)}
        if inode.kind == REG:
            e["size"] = len(inode.data)
        elif inode.kind == LNK:
            e["size"] = len(os.fsencode(inode.target))
        if inode.kind == DIR:
            e["entries"] = sorted(c.rpartition("/")[2] for c in self.children(path))
        if inode.kind == REG:
            e["content"] = inode.data
        elif inode.kind == LNK:
            e["target"] = inode.target
        if xattr is not None and inode.kind != LNK:
            e[f"xattr {xattr}"] = inode.xattrs.get(xattr, "ENODATA")
        if listxattr and inode.kind != LNK:
            e["listxattr"] = sorted(inode.xattrs)
        return e


# --- one node's view ------------------------------------------------------------------


def _err(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def observe(root, paths, xattr=None, listxattr=False):
    """What the mount at root shows of paths ({path: {key: value}}, keys as
    Model.expect). Every lstat comes first, then every listdir, then contents,
    targets and xattrs: an open fetches fresh attributes, so it must not come
    before the lstat it would hide."""
    out = {p: {} for p in paths}
    full = {p: os.path.join(root, p) if p else root for p in paths}
    for p in paths:
        try:
            st = os.lstat(full[p])
        except OSError as e:
            out[p]["lstat"] = _err(e)
            continue
        kind = stat.S_IFMT(st.st_mode)
        o = out[p]
        o.update({"lstat": "ok", "type": TYPE_NAMES.get(kind, oct(kind)),
                  "mode": oct(stat.S_IMODE(st.st_mode)), "uid": st.st_uid,
                  "nlink": st.st_nlink})
        if kind in (REG, LNK):
            o["size"] = st.st_size
    for p in paths:
        if out[p].get("type") == "dir":
            try:
                out[p]["entries"] = sorted(os.listdir(full[p]))
            except OSError as e:
                out[p]["entries"] = _err(e)
    for p in paths:
        o = out[p]
        kind = o.get("type")
        if kind == "file":
            try:
                o["content"] = read_file(full[p])
            except OSError as e:
                o["content"] = _err(e)
        elif kind == "symlink":
            try:
                o["target"] = os.readlink(full[p])
            except OSError as e:
                o["target"] = _err(e)
        if kind in ("file", "dir"):
            if xattr is not None:
                try:
                    o[f"xattr {xattr}"] = os.getxattr(full[p], xattr, follow_symlinks=False)
                except OSError as e:
                    o[f"xattr {xattr}"] = _err(e)
            if listxattr:
                try:
                    o["listxattr"] = sorted(n for n in os.listxattr(full[p], follow_symlinks=False)
                                            if n.startswith("user."))
                except OSError as e:
                    o["listxattr"] = _err(e)
    return out


def recache(root, paths):
    """lstat of paths again: an open (observe's reads and listdirs) may make
    the mount drop the attributes the kernel cached (GrantFS marks them
    stale in its open handler), and they must be cached when the change
    comes."""
    for p in paths:
        try:
            os.lstat(os.path.join(root, p) if p else root)
        except OSError:
            pass


# --- changes --------------------------------------------------------------------------


class Change:
    """One drawn change: kind, its arguments, what it touches, and how it is
    done on a mount and on the model."""

    def __init__(self, kind, path, dst=None, value=None, xattr=None):
        self.kind = kind
        self.path = path
        self.dst = dst
        self.value = value
        self.xattr = xattr

    def __str__(self):
        v = self.value
        if isinstance(v, bytes):
            v = f"<{len(v)} bytes>"
        elif isinstance(v, int) and self.kind in ("chmod", "create", "mkdir"):
            v = oct(v)
        args = [a for a in (self.path, self.dst) if a is not None]
        if self.xattr is not None:
            args.append(self.xattr)
        if v is not None:
            args.append(str(v))
        return f"{self.kind}({', '.join(args)})"

    def apply_fs(self, root):
        """Does the change through the mount at root; raises OSError."""
        p = os.path.join(root, self.path)
        k = self.kind
        if k == "create":
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, self.value))
        elif k == "write":
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            try:
                view = memoryview(self.value)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        elif k == "truncate":
            os.truncate(p, self.value)
        elif k == "unlink":
            os.unlink(p)
        elif k in ("rename_over", "rename_new"):
            os.rename(p, os.path.join(root, self.dst))
        elif k == "mkdir":
            os.mkdir(p, self.value)
        elif k == "rmdir":
            os.rmdir(p)
        elif k == "chmod":
            os.chmod(p, self.value)
        elif k == "chown":
            os.chown(p, self.value, -1, follow_symlinks=False)
        elif k == "setxattr":
            os.setxattr(p, self.xattr, self.value, follow_symlinks=False)
        elif k == "rmxattr":
            os.removexattr(p, self.xattr, follow_symlinks=False)
        elif k == "link":
            os.link(p, os.path.join(root, self.dst), follow_symlinks=False)
        elif k == "symlink":
            os.symlink(self.value, p)
        else:
            raise AssertionError(k)

    def apply_model(self, m):
        k = self.kind
        if k == "create":
            m.paths[self.path] = Inode(REG, self.value)
        elif k == "write":
            inode = m.get(self.path)
            if inode is None:
                m.paths[self.path] = Inode(REG, 0o644, self.value)
            else:
                inode.data = self.value
        elif k == "truncate":
            inode = m.get(self.path)
            inode.data = inode.data[:self.value] + bytes(max(0, self.value - len(inode.data)))
        elif k in ("unlink", "rmdir"):
            del m.paths[self.path]
        elif k in ("rename_over", "rename_new"):
            m.rename(self.path, self.dst)
        elif k == "mkdir":
            m.paths[self.path] = Inode(DIR, self.value)
        elif k == "chmod":
            m.get(self.path).mode = self.value
        elif k == "chown":
            m.get(self.path).uid = self.value
        elif k == "setxattr":
            m.get(self.path).xattrs[self.xattr] = self.value
        elif k == "rmxattr":
            del m.get(self.path).xattrs[self.xattr]
        elif k == "link":
            m.paths[self.dst] = m.get(self.path)
        elif k == "symlink":
            m.paths[self.path] = Inode(LNK, 0o777, target=self.value)

    def touched(self, m):
        """Paths to observe, from the model before the change: the names it
        uses, the other names of the inodes it changes, the directories
        holding them, and what is under a renamed directory, under both
        names."""
        paths = {self.path}
        if self.dst is not None:
            paths.add(self.dst)
        for p in list(paths):
            inode = m.get(p)
            if inode is not None and inode.kind != DIR:
                paths.update(m.names_of(inode))
        if self.kind in ("rename_over", "rename_new"):
            for p in m.descendants(self.path):
                paths.add(p)
                paths.add(self.dst + p[len(self.path):])
        for p in list(paths):
            while p:
                p = Model.parent(p)
                paths.add(p)
        return sorted(paths)


def _absent_name(rng, m, dirs):
    """(dir, path) of a name that is not there, in one of dirs, or None."""
    for _ in range(8):
        d = rng.choice(dirs)
        name = Model.join(d, rng.choice(NAMES))
        if m.get(name) is None:
            return name
    return None


def draw(rng, m):
    """A change that must succeed on the model m, or None (none fits)."""
    c = _draw(rng, m)
    return c if isinstance(c, Change) else None


def _draw(rng, m):
    kinds = list(WEIGHTS)
    weights = [WEIGHTS[k] * (0.3 if k in ADDS and len(m.paths) > MAX_ENTRIES else 1)
               * (0.3 if k in REMOVES and len(m.paths) < 8 else 1) for k in kinds]
    k = rng.choices(kinds, weights)[0]
    dirs = [p for p, i in m.paths.items() if i.kind == DIR]
    files = [p for p, i in m.paths.items() if i.kind == REG]
    nondirs = [p for p, i in m.paths.items() if i.kind != DIR]
    attr_targets = [p for p, i in m.paths.items() if i.kind in (REG, DIR) and p]
    entries = [p for p in m.paths if p]

    if k == "create":
        p = _absent_name(rng, m, dirs)
        return p and Change(k, p, value=rng.choice(FILE_MODES))
    if k == "write":
        size = rng.choice(WRITE_SIZES)
        data = rng.randbytes(size)
        if files and rng.random() < 0.8:
            return Change(k, rng.choice(files), value=data)
        p = _absent_name(rng, m, dirs)
        return p and Change(k, p, value=data)
    if k == "truncate":
        if not files:
            return None
        p = rng.choice(files)
        size = len(m.get(p).data)
        if size and rng.random() < 0.5:
            n = rng.randrange(size)
        else:
            n = size + rng.choice(GROW_BY)
        return Change(k, p, value=n)
    if k == "unlink":
        return nondirs and Change(k, rng.choice(nondirs))
    if k == "rmdir":
        empty = [p for p in dirs if p and not m.children(p)]
        return empty and Change(k, rng.choice(empty))
    if k == "mkdir":
        p = _absent_name(rng, m, [d for d in dirs if m.depth(d) < MAX_DIR_DEPTH])
        return p and Change(k, p, value=rng.choice(DIR_MODES))
    if k == "rename_over":
        if rng.random() < 0.75:
            pairs = [(s, d) for s in nondirs for d in nondirs if m.get(s) is not m.get(d)]
        else:
            pairs = [(s, d) for s in dirs for d in dirs
                     if s and d and s != d and not m.children(d) and not d.startswith(s + "/")
                     and not s.startswith(d + "/") and m.depth(d) + m.height(s) <= MAX_DIR_DEPTH]
        if not pairs:
            return None
        s, d = rng.choice(pairs)
        return Change(k, s, dst=d)
    if k == "rename_new":
        if not entries:
            return None
        s = rng.choice(entries)
        targets = dirs
        if m.get(s).kind == DIR:
            targets = [d for d in dirs if d != s and not d.startswith(s + "/")
                       and m.depth(d) + 1 + m.height(s) <= MAX_DIR_DEPTH]
        if not targets:
            return None
        d = _absent_name(rng, m, targets)
        return d and Change(k, s, dst=d)
    if k == "chmod":
        if not attr_targets:
            return None
        p = rng.choice(attr_targets)
        inode = m.get(p)
        modes = [x for x in (DIR_MODES if inode.kind == DIR else FILE_MODES) if x != inode.mode]
        return Change(k, p, value=rng.choice(modes))
    if k == "chown":
        if not entries:
            return None
        p = rng.choice(entries)
        return Change(k, p, value=rng.choice([u for u in UIDS if u != m.get(p).uid]))
    if k == "setxattr":
        if not attr_targets:
            return None
        return Change(k, rng.choice(attr_targets), xattr=rng.choice(XATTR_NAMES),
                      value=rng.randbytes(rng.randrange(1, 40)))
    if k == "rmxattr":
        having = [p for p in attr_targets if m.get(p).xattrs]
        if not having:
            return None
        p = rng.choice(having)
        return Change(k, p, xattr=rng.choice(sorted(m.get(p).xattrs)))
    if k == "link":
        d = _absent_name(rng, m, dirs)
        return files and d and Change(k, rng.choice(files), dst=d)
    if k == "symlink":
        p = _absent_name(rng, m, dirs)
        return p and Change(k, p, value=f"tgt-{rng.randrange(1 << 30):x}")
    raise AssertionError(k)


# --- the run --------------------------------------------------------------------------


def short(value):
    """A value for a report: long bytes as their length and head."""
    if isinstance(value, bytes) and len(value) > 32:
        return f"<{len(value)} bytes {value[:16]!r}...>"
    return repr(value)


class Mismatch:
    """The first difference a run met."""

    def __init__(self, seed, round_, node, change_node, change, stage, path, key, expected,
                 seen, stale):
        self.seed = seed
        self.round = round_
        self.node = node  # the node that showed it (1-based, as node1/node2/...)
        self.change_node = change_node  # the node the change went through
        self.change = change
        self.stage = stage  # "before" / "after" the change, or "change": it failed
        self.path = path
        self.key = key
        self.expected = expected
        self.seen = seen
        self.stale = stale  # seen is what this node had seen before the change

    def __str__(self):
        if self.stage == "change":
            return (f"seed {self.seed}, round {self.round}: {self.change} through "
                    f"node{self.node} failed: {self.seen}")
        s = (f"seed {self.seed}, round {self.round}: node{self.node}, {self.stage} "
             f"{self.change} through node{self.change_node}: {self.path or '.'}: {self.key} "
             f"expected {short(self.expected)}, seen {short(self.seen)}")
        if self.stale:
            s += f" (a stale read: what node{self.node} had seen before the change)"
        return s


class Result:
    def __init__(self, seed, mounts):
        self.seed = seed
        self.mounts = mounts
        self.rounds = 0  # rounds completed
        self.counts = {}  # change kind -> rounds done
        self.mismatch = None
        self.history = []  # the last changes: "round N nodeK change"
        self.elapsed = 0.0
        self.planned = 0  # rounds asked for
        self.timed_out = False  # stopped by the time limit before `planned`

    @property
    def ok(self):
        return self.mismatch is None

    def report(self):
        lines = [f"coherence checker, seed {self.seed}, {len(self.mounts)} nodes: "
                 f"{self.rounds} rounds of {self.planned} in {self.elapsed:.1f} s"
                 + (" (stopped by the time limit)" if self.timed_out else "")]
        lines.append("changes: " + ", ".join(f"{k} {n}" for k, n in sorted(self.counts.items())))
        if self.mismatch is not None:
            lines.append(f"MISMATCH: {self.mismatch}")
            lines.append("last changes:")
            lines += [f"  {h}" for h in self.history]
            lines.append(f"replay: python3 tests/coherence.py --mounts MOUNT1,MOUNT2,... "
                         f"--seed {self.seed} --rounds {self.mismatch.round + 1}")
        return "\n".join(lines)


def run(mounts, seed, rounds, top=None, time_limit=None):
    """Runs `rounds` rounds of the checker in a fresh directory `top`
    (default coh-SEED-PID) under every mount; stops at the first mismatch,
    or, with time_limit, after the round that ends past that many seconds
    (Result.rounds says how many ran; the same seed draws the same rounds).
    Returns a Result. The directory is removed after a clean run."""
    rng = random.Random(seed)
    top = top or f"coh-{seed}-{os.getpid()}"
    roots = [os.path.join(m, top) for m in mounts]
    res = Result(seed, mounts)
    res.planned = rounds
    m = Model()
    # What each node saw last of each path: {node: {path: {key: value}}}.
    last = [{} for _ in mounts]
    old_umask = os.umask(0)
    start = time.monotonic()
    try:
        os.mkdir(roots[0], 0o755)
        for r in range(rounds):
            if time_limit is not None and time.monotonic() - start > time_limit:
                res.timed_out = True
                break
            change = None
            while change is None:
                change = draw(rng, m)
            a = rng.randrange(len(mounts))
            res.history = (res.history + [f"round {r} node{a + 1} {change}"])[-20:]
            paths = change.touched(m)
            xattr = change.xattr
            listx = change.kind in ("setxattr", "rmxattr")

            def check(stage, order):
                for n in order:
                    seen = observe(roots[n], paths, xattr, listx)
                    for p in paths:
                        want = m.expect(p, xattr, listx)
                        got = seen[p]
                        for key in list(want) + [k for k in got if k not in want]:
                            if want.get(key) != got.get(key):
                                before = last[n].get(p, {})
                                stale = key in before and before[key] == got.get(key)
                                return Mismatch(seed, r, n + 1, a + 1, change, stage, p, key,
                                                want.get(key), got.get(key), stale)
                    last[n].update(seen)
                    if stage == "before":
                        recache(roots[n], [p for p in paths
                                           if seen[p].get("type") in ("file", "dir")])
                return None

            # Every node caches the old state (and it must be right).
            res.mismatch = check("before", range(len(mounts)))
            if res.mismatch:
                break
            try:
                change.apply_fs(roots[a])
            except OSError as e:
                res.mismatch = Mismatch(seed, r, a + 1, a + 1, change, "change",
                                        change.path, "result", "ok", _err(e), False)
                break
            change.apply_model(m)
            others = [n for n in range(len(mounts)) if n != a]
            res.mismatch = check("after", others + [a])
            if res.mismatch:
                break
            res.rounds += 1
            res.counts[change.kind] = res.counts.get(change.kind, 0) + 1
    finally:
        os.umask(old_umask)
        res.elapsed = time.monotonic() - start
    if res.ok:
        _remove_tree(roots[0])
    return res


def _remove_tree(path):
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for f in filenames:
            os.unlink(os.path.join(dirpath, f))
        for d in dirnames:
            p = os.path.join(dirpath, d)
            (os.unlink if os.path.islink(p) else os.rmdir)(p)
    os.rmdir(path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mounts", required=True,
                    help="comma-separated paths of one file system through several mounts")
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--seed", type=int, default=None, help="default: from the clock")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    print(f"seed {seed}", flush=True)
    res = run(args.mounts.split(","), seed, args.rounds)
    print(res.report())
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
