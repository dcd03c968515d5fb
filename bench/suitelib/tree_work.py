"""Section 5's tree work (issue 17): `tar x` of a tarball of small files,
`rm -rf` of the tree it made, and `git clone --no-hardlinks` of a local
repository, on GrantFS (a mount as in the rest of the section), GrantFS with
namespace grants, the FUSE passthrough and the local disk. The tarball and
the repository are made once on the local disk; each target extracts and
clones into directories of its own (the two GrantFS mounts show one
namespace, and only what a mount made is granted to it)."""

import os
import subprocess
import time

from . import tarball
from .harness import BenchError
from .stats import fmt_ratio, fmt_summary

# Target names, as in fs_sections and meta_leases.
GFS = "GrantFS"
GFS_NS = "GrantFS (ns grants)"
PT = "FUSE passthrough"
LOCAL = "local disk"
SECTION = "tree_work"
WORK = ("tar x", "rm -rf", "git clone")
GIT = ["git", "-c", "user.name=GrantFS bench", "-c", "user.email=bench@localhost",
       "-c", "init.defaultBranch=main", "-c", "gc.auto=0"]


def make_repo(h, path, files, commits):
    """A git repository at `path` (on the local disk): `files` small C files
    (100 per directory) added by a first commit, then `commits` - 1 commits
    that each change a tenth of them and add one; packed, as a repository
    that was cloned or fetched is. Returns its HEAD."""
    os.makedirs(path)

    def git(*args):
        return h.run(GIT + ["-C", path, *args], 300, f"git {args[0]} in {path}")

    def write(i, rev):
        d = os.path.join(path, "src", f"m{i // tarball.FILES_PER_DIR:03d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:05d}.c"), "wb") as f:
            f.write(tarball.file_contents(i) + f"/* revision {rev} */\n".encode())

    git("init", "-q")
    for i in range(files):
        write(i, 0)
    git("add", "-A")
    git("commit", "-q", "-m", f"{files} files")
    for c in range(1, commits):
        for i in range(c % 10, files, 10):
            write(i, c)
        write(files + c - 1, c)
        git("add", "-A")
        git("commit", "-q", "-m", f"revision {c}")
    git("gc", "-q")
    return git("rev-parse", "HEAD").strip()


def _timed(h, argv, timeout, what, cwd=None):
    t0 = time.monotonic()
    h.run(argv, timeout, what, cwd=cwd)
    return time.monotonic() - t0


def measure(ctx, server):
    """Records section SECTION: wall seconds of each of WORK on each target."""
    cfg, h, res = ctx.cfg, ctx.h, ctx.results
    n, git_files, commits = cfg["tar_files"], cfg["git_files"], cfg["git_commits"]
    src = h.local_dir("tree-work-src")
    ctx.progress.step(f"§5 a tarball of {n:,} files and a git repository of {git_files:,} files "
                      f"and {commits} commits, on the local disk")
    t0 = time.monotonic()
    tar = tarball.make_tarball(src, n)
    files, dirs = tarball.contents(tar)
    repo = os.path.join(src, "repo")
    head = make_repo(h, repo, git_files, commits)
    ctx.progress.done(f"{time.monotonic() - t0:.1f} s")
    targets = [(GFS, h.mount_grantfs("gfs-tw", server.addr)),
               (GFS_NS, h.mount_grantfs("gfs-tw-ns", server.addr, ns_grants="on")),
               (PT, h.mount_passthrough("pt-tw")), (LOCAL, h.local_dir("local-tw"))]
    try:
        for run in range(ctx.runs):
            for name, d in targets:
                tag = os.path.basename(d)
                key = (("target", name),)
                dest = os.path.join(d, f"tar-{tag}-{run}")
                os.mkdir(dest)
                ctx.progress.step(f"§5 tar x of {n:,} files on {name}, run {run + 1}/{ctx.runs}")
                secs = _timed(h, ["tar", "xf", tar, "-C", dest], 300 + n * 0.05,
                              f"tar x on {name}")
                res.record(SECTION, key, "tar x", "s", secs)
                # Every file read back on the first run; names and sizes after.
                diff = tarball.compare_tree(dest, files, dirs, read=(run == 0))
                if not diff.ok():
                    raise BenchError(f"tar x on {name}: the tree differs from the tarball: "
                                     f"{diff.text()}")
                ctx.progress.done(f"{secs:.2f} s")
                ctx.progress.step(f"§5 rm -rf of it on {name}")
                secs = _timed(h, ["rm", "-rf", dest], 300 + n * 0.05, f"rm -rf on {name}")
                if os.path.lexists(dest):
                    raise BenchError(f"rm -rf on {name}: {dest} is still there")
                res.record(SECTION, key, "rm -rf", "s", secs)
                ctx.progress.done(f"{secs:.2f} s")
                clone = os.path.join(d, f"clone-{tag}-{run}")
                ctx.progress.step(f"§5 git clone of {git_files:,} files on {name}")
                secs = _timed(h, GIT + ["clone", "-q", "--no-hardlinks", repo, clone],
                              300 + git_files * 0.2, f"git clone on {name}")
                res.record(SECTION, key, "git clone", "s", secs)
                got = h.run(GIT + ["-C", clone, "rev-parse", "HEAD"], 60, f"the clone on {name}")
                changed = h.run(GIT + ["-C", clone, "status", "--porcelain"], 300,
                                f"git status of the clone on {name}")
                if got.strip() != head or changed.strip():
                    raise BenchError(f"the clone on {name}: HEAD {got.strip()} (expected "
                                     f"{head}), git status says: {changed[:500]!r}")
                ctx.progress.done(f"{secs:.2f} s")
                h.run(["rm", "-rf", clone], 300 + git_files * 0.05, f"rm -rf of the clone on "
                      f"{name}")
    finally:
        for _, d in targets[:3]:
            h.unmount(d)
    subprocess.run(["rm", "-rf", src], timeout=600)


def text(sec, ctx):
    cfg, res = ctx.cfg, ctx.results
    n, git_files, commits = cfg["tar_files"], cfg["git_files"], cfg["git_commits"]
    leaves = -(-n // tarball.FILES_PER_DIR)
    sec.text(f"""
### Tree work: tar x, rm -rf, git clone

What unpacking, deleting and checking out a source tree costs. **tar x**: GNU tar extracts a
tarball on the local disk of {n:,} small files (31 to 217 bytes of non-zero text each, in
{leaves:,} directories of up to 100) into a new directory of the target; the tree is then checked
against the tarball (names and sizes, and on the first run every file's bytes). **rm -rf**
removes that tree. **git clone**: `git clone --no-hardlinks` of a local repository (on the
local disk: {git_files:,} small C files over {commits} commits, packed) into the target, then
checked (`git rev-parse HEAD`, `git status` clean; not timed). Nothing is synced: with
namespace grants the last second of changes may still be in the mount's log when a command
returns, as they may be in the page cache of the local disk (docs/namespace-grants.md, "The
durability contract"). **{GFS}** is a mount as in the rest of this section, **{GFS_NS}** a
`grantfs-mount --ns_grants=on` of the same server: the directory each command works in was made
through it, so it and every directory made in it are granted to the mount: the creates, mkdirs,
unlinks and rmdirs in them, and the owner's chmod, chown and utimes of files made there, are
answered by the mount and sent as a log. Wall seconds, median (min–max) of {ctx.runs} run(s).
""")

    def get(name, work):
        return res.get(SECTION, (("target", name),), work)

    sec.table(["target"] + [f"{w} s" for w in WORK],
              [[name] + [fmt_summary(get(name, w)) for w in WORK]
               for name in (GFS, GFS_NS, PT, LOCAL)])
    rows = []
    for name in (GFS, GFS_NS):
        for other in (LOCAL, PT):
            rows.append([name, f"the {other}'s"] +
                        [fmt_ratio(get(name, w), get(other, w)) for w in WORK])
    sec.text("Each GrantFS mount's time as a multiple of (higher is slower; the goal of issue 17 "
             "with grants: at most 1.3x the local disk's):")
    sec.table(["target", "as a multiple of"] + list(WORK), rows)
    sec.csv(SECTION)
