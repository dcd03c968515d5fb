"""Helpers shared by the end-to-end tests: what a tree looks like, file
digests, and polling with a deadline.

A plain module, not a conftest: tests import it with `import treesnap` or
`from treesnap import ...` (pytest puts tests/ on sys.path because it holds a
conftest.py and no __init__.py).
"""

import collections
import hashlib
import os
import stat
import time
from typing import NamedTuple


def sha256_of(path):
    """Hex SHA-256 of the contents of the file at path, read 1 MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def user_xattrs(path):
    """name -> value of the user.* extended attributes of path (not followed
    if it is a symlink), in name order."""
    return {n: os.getxattr(path, n, follow_symlinks=False)
            for n in sorted(os.listxattr(path, follow_symlinks=False)) if n.startswith("user.")}


class Snapshot(NamedTuple):
    """What snapshot() records about a tree.

    entries: relpath -> dict of attributes, for everything under the root
    (the root itself is '.').
    link_groups: set of frozensets of relpaths that are names of one regular
    file with more than one link (names outside the tree do not appear).
    """
    entries: dict
    link_groups: set


def snapshot(root, exact=False):
    """Everything the tests compare about the tree under root.

    Every entry has type, mode, uid and gid; regular files also size,
    sha256, nlink and user xattrs; symlinks their target; directories their
    user xattrs.

    exact=False (a copy of a tree, as cp -a, tar or rsync make it): mtime to
    the second ('mtime_s'), since not every tool keeps nanoseconds.

    exact=True (the very same tree seen again, e.g. after a server restart):
    mtime in nanoseconds ('mtime_ns'), and also the inode number ('ino') and
    link count ('nlink') of every entry, and the sorted names in each
    directory ('entries').
    """
    entries = {}
    by_inode = collections.defaultdict(set)

    def record(path, rel):
        st = os.lstat(path)
        e = {
            "type": stat.S_IFMT(st.st_mode),
            "mode": oct(stat.S_IMODE(st.st_mode)),
            "uid": st.st_uid,
            "gid": st.st_gid,
        }
        if exact:
            e["ino"] = st.st_ino
            e["nlink"] = st.st_nlink
            e["mtime_ns"] = st.st_mtime_ns
        else:
            e["mtime_s"] = st.st_mtime_ns // 1_000_000_000
        if stat.S_ISREG(st.st_mode):
            e["size"] = st.st_size
            e["nlink"] = st.st_nlink
            e["sha256"] = sha256_of(path)
            e["xattrs"] = user_xattrs(path)
            if st.st_nlink > 1:
                by_inode[st.st_ino].add(rel)
        elif stat.S_ISLNK(st.st_mode):
            e["target"] = os.readlink(path)
        elif stat.S_ISDIR(st.st_mode):
            e["xattrs"] = user_xattrs(path)
            if exact:
                e["entries"] = sorted(os.listdir(path))
        entries[rel] = e

    record(root, ".")
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            record(p, os.path.relpath(p, root))
    return Snapshot(entries, {frozenset(s) for s in by_inode.values()})


def diff(expected, actual):
    """Human-readable differences between two snapshot() results (taken with
    the same `exact`); an empty list if there are none."""
    ee, ae = expected.entries, actual.entries
    out = []
    for rel in sorted(set(ee) - set(ae)):
        out.append(f"missing: {rel}")
    for rel in sorted(set(ae) - set(ee)):
        out.append(f"unexpected: {rel}")
    for rel in sorted(set(ee) & set(ae)):
        for k in sorted(set(ee[rel]) | set(ae[rel])):
            if ee[rel].get(k) != ae[rel].get(k):
                out.append(f"{rel}: {k} expected {ee[rel].get(k)!r}, got {ae[rel].get(k)!r}")
    eg, ag = expected.link_groups, actual.link_groups
    if eg != ag:
        out.append(f"hard-link groups: expected {sorted(map(sorted, eg))}, "
                   f"got {sorted(map(sorted, ag))}")
    return out


def poll_until(pred, timeout, interval=0.05):
    """Calls pred every `interval` s until it returns true (then True) or
    `timeout` s have passed (then False, after one last call)."""
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
