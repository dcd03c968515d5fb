"""A tarball of many small files, and the check of a tree extracted from it:
used by section 5's tree work (tar x, rm -rf), by the untar drill
(bench/drill.py --mode untar) and by bench/ns_grants_quick.py."""

import os
import subprocess
import tarfile

FILES_PER_DIR = 100
DIRS_PER_TOP = 10
ROOT = "tree"  # the one top-level name in the tarball


def file_contents(i):
    """The non-zero contents of file i: 31 to 217 bytes of C."""
    return (f"int f{i}(void) {{ return {i}; }}\n" * (1 + i % 7)).encode()


def make_tarball(base, files):
    """Writes base/tree/dNN/sNNN/fNNNNNN.c (FILES_PER_DIR files per leaf
    directory, DIRS_PER_TOP leaves per top one) on whatever base is (the
    local disk, for the benchmarks), then base/tree.tar of it; returns the
    tarball's path. The tree stays, as the tarball's source."""
    src = os.path.join(base, ROOT)
    for i in range(files):
        leaf = i // FILES_PER_DIR
        d = os.path.join(src, f"d{leaf // DIRS_PER_TOP:02d}", f"s{leaf:03d}")
        if i % FILES_PER_DIR == 0:
            os.makedirs(d)
        with open(os.path.join(d, f"f{i:06d}.c"), "wb") as f:
            f.write(file_contents(i))
    tarball = os.path.join(base, f"{ROOT}.tar")
    subprocess.run(["tar", "cf", tarball, "-C", base, ROOT], check=True, timeout=600)
    return tarball


def contents(tarball):
    """What the tarball holds: ({relative path: bytes} of its regular files,
    set of its directories' relative paths)."""
    files, dirs = {}, set()
    with tarfile.open(tarball) as t:
        for m in t:
            name = m.name.rstrip("/")
            if m.isdir():
                dirs.add(name)
            elif m.isfile():
                files[name] = t.extractfile(m).read()
    return files, dirs


class TreeDiff:
    """How an extracted tree differs from the tarball: relative paths of
    files missing, files whose bytes differ (or that cannot be read: with
    the error), and entries that should not be there."""

    def __init__(self):
        self.missing, self.wrong, self.extra = [], [], []

    def ok(self):
        return not (self.missing or self.wrong or self.extra)

    def text(self, limit=5):
        parts = []
        for what, names in (("missing", self.missing), ("wrong", self.wrong),
                            ("unexpected", self.extra)):
            if names:
                more = f" and {len(names) - limit} more" if len(names) > limit else ""
                parts.append(f"{len(names)} {what}: {', '.join(names[:limit])}{more}")
        return "; ".join(parts) or "identical"


def compare_tree(dest, files, dirs, read=True):
    """Compares dest (the directory tar extracted into) against what
    contents() returned: every file read back whole, or with read=False
    only its size (lstat). A TreeDiff."""
    diff = TreeDiff()
    seen = set()
    for top, subdirs, names in os.walk(dest, onerror=lambda e: diff.wrong.append(f"{e}")):
        rel_top = os.path.relpath(top, dest)
        for n in subdirs:
            rel = os.path.normpath(os.path.join(rel_top, n))
            if rel not in dirs:
                diff.extra.append(rel + "/")
        for n in names:
            rel = os.path.normpath(os.path.join(rel_top, n))
            seen.add(rel)
            if rel not in files:
                diff.extra.append(rel)
                continue
            try:
                if read:
                    with open(os.path.join(dest, rel), "rb") as f:
                        got = f.read()
                    size, same = len(got), got == files[rel]
                else:
                    size = os.lstat(os.path.join(dest, rel)).st_size
                    same = size == len(files[rel])
            except OSError as e:
                diff.wrong.append(f"{rel} ({e.strerror})")
                continue
            if not same:
                diff.wrong.append(f"{rel} ({size} bytes, expected {len(files[rel])})")
    diff.missing = sorted(set(files) - seen)
    return diff
