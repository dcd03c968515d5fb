"""Standard tools on a GrantFS mount: cp, tar, rsync, git, make/gcc, sqlite3.

Every test writes through one node (cluster.n1) and checks the result
through the other (cluster.n2) against a reference kept on local disk.
"""

import os
import random
import subprocess
import sys
import textwrap
import time

import pytest

from treesnap import diff, snapshot

# --- helpers -----------------------------------------------------------------------

TOOL_TIMEOUT = 180  # seconds for any one external command
# Names and attributes a node has cached may lag a change made on the other
# node by up to the mount's attr/entry timeout (1 s); where a test looks at
# something the other node has already looked at, it waits this long first.
CACHE_BOUND = 1.2


def run(cmd, cwd=None, timeout=TOOL_TIMEOUT, env=None, check=True, input=None):
    """Runs cmd (a list), returns the CompletedProcess; text mode."""
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout, input=input)
    if check and r.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} exited with {r.returncode}\n"
            f"stdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}")
    return r


def assert_same_tree(expected_root, actual_root, expected=None):
    expected = expected or snapshot(expected_root)
    actual = snapshot(actual_root)
    d = diff(expected, actual)
    assert not d, f"{actual_root} differs from {expected_root}:\n" + "\n".join(d[:60])


def make_tree(root, seed=20240601):
    """A tree with nested dirs, odd sizes, symlinks, hard links, modes, xattrs
    and mtimes in the past. Deterministic for a given seed."""
    rnd = random.Random(seed)
    dirs = ["a", "a/b", "a/b/c", "a/b/c/d", "e", "e/f", "empty", "with space (x)",
            "deep/1/2/3/4/5/6/7"]
    os.makedirs(root, exist_ok=True)
    for d in dirs:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    sizes = [0, 1, 17, 4095, 4096, 4097, 65536 + 3, (1 << 20) - 1, 1 << 20, (1 << 20) + 1]
    n = 0
    for d in dirs:
        if d == "empty":
            continue
        for _ in range(rnd.randrange(2, 6)):
            size = rnd.choice(sizes + [rnd.randrange(0, 300_000)] * 3)
            p = os.path.join(root, d, f"file{n:03d}.bin")
            with open(p, "wb") as f:
                f.write(rnd.randbytes(size))
            n += 1
    # Fixed special files.
    big = os.path.join(root, "a/b/big-3MiB.bin")
    with open(big, "wb") as f:
        f.write(rnd.randbytes(3 << 20))
    for name in ["zero-a", "e/zero-b"]:
        open(os.path.join(root, name), "wb").close()
    with open(os.path.join(root, "a/hl-src"), "wb") as f:
        f.write(rnd.randbytes(12345))
    os.link(os.path.join(root, "a/hl-src"), os.path.join(root, "e/f/hl-second"))
    os.link(os.path.join(root, "a/hl-src"), os.path.join(root, "a/b/c/hl-third"))
    with open(os.path.join(root, "e/hl-pair"), "wb") as f:
        f.write(b"pair\n")
    os.link(os.path.join(root, "e/hl-pair"), os.path.join(root, "e/hl-pair.2"))
    xf = os.path.join(root, "a/with-xattr.txt")
    with open(xf, "w") as f:
        f.write("this file has extended attributes\n")
    os.setxattr(xf, "user.comment", b"hello xattr")
    os.setxattr(xf, "user.binary", bytes(range(256)))
    os.setxattr(os.path.join(root, "e"), "user.dirattr", b"on a directory")
    with open(os.path.join(root, "a/b/script.sh"), "w") as f:
        f.write("#!/bin/sh\necho hi\n")
    owned = os.path.join(root, "e/owned-by-1234")
    with open(owned, "w") as f:
        f.write("owned\n")
    os.chown(owned, 1234, 2345)
    # Symlinks: relative, absolute dangling, to a directory, upwards.
    os.symlink("b/big-3MiB.bin", os.path.join(root, "a/link-rel"))
    os.symlink("/nonexistent/target/of/link", os.path.join(root, "e/link-dangling"))
    os.symlink("a/b", os.path.join(root, "link-to-dir"))
    os.symlink("../../a/hl-src", os.path.join(root, "e/f/link-up"))
    # Modes.
    os.chmod(os.path.join(root, "a/b/script.sh"), 0o750)
    os.chmod(xf, 0o640)
    os.chmod(os.path.join(root, "a/hl-src"), 0o600)
    os.chmod(os.path.join(root, "e/f"), 0o750)
    os.chmod(os.path.join(root, "a/b/c"), 0o700)
    os.chmod(os.path.join(root, "empty"), 0o751)
    os.chmod(os.path.join(root, "zero-a"), 0o444)
    # mtimes in the past (with nanoseconds), files and links first, then
    # directories bottom-up so that nothing later touches them.
    def past():
        return (1_000_000_000 + rnd.randrange(300_000_000)) * 1_000_000_000 + rnd.randrange(
            1_000_000_000)
    all_dirs = []
    for dirpath, dirnames, filenames in os.walk(root):
        all_dirs.append(dirpath)
        for name in filenames + [d for d in dirnames
                                 if os.path.islink(os.path.join(dirpath, d))]:
            t = past()
            os.utime(os.path.join(dirpath, name), ns=(t, t), follow_symlinks=False)
    for d in sorted(all_dirs, key=len, reverse=True):
        t = past()
        os.utime(d, ns=(t, t))
    return root


@pytest.fixture
def src_tree(tmp_base):
    root = make_tree(os.path.join(tmp_base, "local-src", "tree"))
    snap = snapshot(root)
    # Sanity of the reference itself: the things the tests look for are there.
    entries, groups = snap.entries, snap.link_groups
    assert entries["a/b/big-3MiB.bin"]["size"] == 3 << 20
    assert entries["zero-a"]["size"] == 0
    assert entries["a/link-rel"]["target"] == "b/big-3MiB.bin"
    assert entries["a/with-xattr.txt"]["xattrs"]["user.comment"] == b"hello xattr"
    assert frozenset({"a/hl-src", "e/f/hl-second", "a/b/c/hl-third"}) in groups
    assert entries["a/b/script.sh"]["mode"] == oct(0o750)
    return root, snap


# --- cp, tar, rsync --------------------------------------------------------------------


def test_cp_a_tree_is_identical_on_other_node(cluster, src_tree):
    src, snap = src_tree
    run(["cp", "-a", src, os.path.join(cluster.n1, "copy")])
    assert_same_tree(src, os.path.join(cluster.n2, "copy"), snap)
    assert_same_tree(src, os.path.join(cluster.n1, "copy"), snap)


def test_tar_c_on_node1_x_on_node2(cluster, src_tree):
    src, snap = src_tree
    tar_opts = ["--format=posix", "--xattrs", "--xattrs-include=user.*", "--numeric-owner"]
    run(["cp", "-a", src, os.path.join(cluster.n1, "tree")])
    run(["tar", *tar_opts, "-C", os.path.join(cluster.n1, "tree"),
         "-cf", os.path.join(cluster.n1, "tree.tar"), "."])
    # The archive written on n1 is read on n2 and must list every entry.
    listing = run(["tar", "-tf", os.path.join(cluster.n2, "tree.tar")]).stdout.split("\n")
    names = {x.rstrip("/") for x in listing if x}
    expected_names = {"." if r == "." else "./" + r for r in snap.entries}
    assert names == expected_names
    out = os.path.join(cluster.n2, "untarred")
    os.mkdir(out)
    run(["tar", *tar_opts, "-C", out, "-xpf", os.path.join(cluster.n2, "tree.tar")])
    assert_same_tree(src, out, snap)
    # And the extracted tree seen from the node that did not extract it.
    assert_same_tree(src, os.path.join(cluster.n1, "untarred"), snap)


def test_rsync_to_node1_has_no_differences_from_node2(cluster, src_tree):
    src, snap = src_tree
    dst1 = os.path.join(cluster.n1, "rsynced")
    run(["rsync", "-aHX", src + "/", dst1 + "/"])
    r = run(["rsync", "-aHX", "--delete", "--checksum", "--dry-run", "--itemize-changes",
             os.path.join(cluster.n2, "rsynced") + "/", src + "/"])
    assert r.stdout.strip() == "", f"rsync sees differences:\n{r.stdout[-3000:]}"
    assert_same_tree(src, os.path.join(cluster.n2, "rsynced"), snap)
    # A second rsync into the mount transfers nothing.
    r = run(["rsync", "-aHX", "--checksum", "--itemize-changes", src + "/", dst1 + "/"])
    assert r.stdout.strip() == "", f"second rsync changed things:\n{r.stdout[-3000:]}"


# --- git ----------------------------------------------------------------------------


def git_env(home):
    env = dict(os.environ)
    env.update({
        "HOME": home,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "Test Author",
        "GIT_AUTHOR_EMAIL": "author@example.com",
        "GIT_COMMITTER_NAME": "Test Committer",
        "GIT_COMMITTER_EMAIL": "committer@example.com",
        "LC_ALL": "C",
    })
    return env


def test_git_clone_on_node1_is_consistent_on_node2(cluster, tmp_base):
    env = git_env(tmp_base)
    repo = os.path.join(tmp_base, "local-repo")
    os.makedirs(repo)
    git = lambda *a, cwd=repo, **kw: run(["git", *a], cwd=cwd, env=env, **kw)  # noqa: E731
    git("init", "-q", "-b", "main")
    rnd = random.Random(7)
    for i in range(3):
        os.makedirs(os.path.join(repo, "src", f"pkg{i}"), exist_ok=True)
        with open(os.path.join(repo, "src", f"pkg{i}", "mod.py"), "w") as f:
            f.write(f"VALUE = {i}\n" + "# " + rnd.randbytes(2000).hex() + "\n")
        with open(os.path.join(repo, "README"), "a") as f:
            f.write(f"line {i}\n")
        with open(os.path.join(repo, "blob.bin"), "wb") as f:
            f.write(rnd.randbytes(200_000))
        if i == 1:
            with open(os.path.join(repo, "run.sh"), "w") as f:
                f.write("#!/bin/sh\necho run\n")
            os.chmod(os.path.join(repo, "run.sh"), 0o755)
            os.symlink("README", os.path.join(repo, "README.link"))
        git("add", "-A")
        e = dict(env, GIT_AUTHOR_DATE=f"2020-01-0{i + 1}T12:00:00Z",
                 GIT_COMMITTER_DATE=f"2020-01-0{i + 1}T12:00:00Z")
        run(["git", "commit", "-q", "-m", f"commit {i}"], cwd=repo, env=e)
    want = git("log", "--format=%H %s").stdout.split("\n")
    want = [x for x in want if x]
    assert len(want) == 3

    clone1 = os.path.join(cluster.n1, "clone")
    git("clone", "-q", repo, clone1, cwd=tmp_base)
    clone2 = os.path.join(cluster.n2, "clone")
    git("fsck", "--full", "--strict", "--no-progress", cwd=clone2)
    log2 = [x for x in git("log", "--format=%H %s", cwd=clone2).stdout.split("\n") if x]
    assert log2 == want
    assert git("status", "--porcelain", cwd=clone2).stdout == ""
    assert os.stat(os.path.join(clone2, "run.sh")).st_mode & 0o777 == 0o755
    assert os.readlink(os.path.join(clone2, "README.link")) == "README"
    with open(os.path.join(clone2, "src/pkg2/mod.py")) as f:
        assert f.readline() == "VALUE = 2\n"
    # A commit made on n2 is seen by the clone through n1.
    with open(os.path.join(clone2, "README"), "a") as f:
        f.write("from node2\n")
    e = dict(env, GIT_AUTHOR_DATE="2020-02-01T12:00:00Z",
             GIT_COMMITTER_DATE="2020-02-01T12:00:00Z")
    run(["git", "commit", "-q", "-am", "commit on node2"], cwd=clone2, env=e)
    time.sleep(CACHE_BOUND)
    log1 = [x for x in git("log", "--format=%s", cwd=clone1).stdout.split("\n") if x]
    assert log1 == ["commit on node2", "commit 2", "commit 1", "commit 0"]
    git("fsck", "--full", "--strict", "--no-progress", cwd=clone1)
    assert git("status", "--porcelain", cwd=clone1).stdout == ""


# --- make + gcc ---------------------------------------------------------------------------


def test_make_j2_on_node1_binary_runs_on_node2(cluster):
    nfiles = 40
    proj1 = os.path.join(cluster.n1, "proj")
    os.makedirs(proj1)
    with open(os.path.join(proj1, "common.h"), "w") as f:
        f.write("#ifndef COMMON_H\n#define COMMON_H\n")
        for i in range(nfiles):
            f.write(f"long f{i:02d}(long x);\n")
        f.write("#endif\n")
    expected = 0
    for i in range(nfiles):
        with open(os.path.join(proj1, f"f{i:02d}.c"), "w") as f:
            f.write(textwrap.dedent(f"""\
                #include "common.h"
                static const char tag[] = "unit {i}";
                long f{i:02d}(long x) {{
                  long acc = {i + 1};
                  for (unsigned k = 0; k < sizeof(tag) - 1; ++k) acc += tag[k] * (k + 1);
                  return acc * x + {i * 7};
                }}
                """))
        tag = f"unit {i}"
        acc = i + 1 + sum(ord(c) * (k + 1) for k, c in enumerate(tag))
        expected += acc * (i + 3) + i * 7
    with open(os.path.join(proj1, "main.c"), "w") as f:
        f.write('#include <stdio.h>\n#include "common.h"\nint main(void) {\n  long t = 0;\n')
        for i in range(nfiles):
            f.write(f"  t += f{i:02d}({i + 3});\n")
        f.write('  printf("total=%ld files=%d\\n", t, ' + str(nfiles) + ");\n  return 0;\n}\n")
    with open(os.path.join(proj1, "Makefile"), "w") as f:
        f.write(textwrap.dedent("""\
            CC = gcc
            CFLAGS = -O1 -Wall -Werror
            SRCS := $(sort $(wildcard *.c))
            OBJS := $(SRCS:.c=.o)
            app: $(OBJS)
            \t$(CC) -o $@ $(OBJS)
            %.o: %.c common.h
            \t$(CC) $(CFLAGS) -c -o $@ $<
            clean:
            \trm -f app $(OBJS)
            """))
    run(["make", "-j2", "-C", proj1], timeout=300)
    proj2 = os.path.join(cluster.n2, "proj")
    objs = sorted(x for x in os.listdir(proj2) if x.endswith(".o"))
    assert objs == sorted([f"f{i:02d}.o" for i in range(nfiles)] + ["main.o"])
    r = run([os.path.join(proj2, "app")], timeout=30)
    assert r.stdout == f"total={expected} files={nfiles}\n"
    # Seen from n2, everything is up to date (mtimes agree across nodes).
    q = run(["make", "-q", "-C", proj2], check=False, timeout=60)
    assert q.returncode == 0, f"make -q on node2 says rebuild needed: {q.stdout}{q.stderr}"
    # Touching one source on n2 makes n1's make rebuild exactly that object.
    os.utime(os.path.join(proj2, "f05.c"))
    time.sleep(CACHE_BOUND)
    r = run(["make", "-C", proj1], timeout=120)
    compiled = [ln for ln in r.stdout.split("\n") if " -c " in ln]
    assert len(compiled) == 1 and "f05.o" in compiled[0], r.stdout


# --- sqlite3 ---------------------------------------------------------------------------------


HOLDER = r"""
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
con.execute("INSERT INTO t VALUES (100001, 'from holder on node1')")
print("locked", flush=True)
sys.stdin.readline()
con.execute("COMMIT")
print("committed", flush=True)
con.close()
"""


def sqlite_cli(db, *sql, timeout=60, check=True):
    return run(["sqlite3", "-batch", "-bail", "-cmd", ".timeout 0", db, *sql],
               timeout=timeout, check=check)


def test_sqlite_db_written_on_node1_is_read_on_node2(cluster):
    db1 = os.path.join(cluster.n1, "test.db")
    stmts = ["CREATE TABLE t(id INTEGER PRIMARY KEY, payload TEXT NOT NULL);", "BEGIN;"]
    rnd = random.Random(3)
    for i in range(1, 1001):
        stmts.append(f"INSERT INTO t VALUES({i}, '{rnd.randbytes(40).hex()}');")
    stmts.append("COMMIT;")
    run(["sqlite3", "-batch", "-bail", db1], input="\n".join(stmts) + "\n", timeout=120)
    db2 = os.path.join(cluster.n2, "test.db")
    assert sqlite_cli(db2, "SELECT count(*), sum(id) FROM t;").stdout == "1000|500500\n"
    assert sqlite_cli(db2, "PRAGMA integrity_check;").stdout == "ok\n"
    assert not os.path.exists(os.path.join(cluster.n2, "test.db-journal"))


def test_sqlite_exclusive_lock_on_node1_blocks_writer_on_node2(cluster):
    db1 = os.path.join(cluster.n1, "locked.db")
    db2 = os.path.join(cluster.n2, "locked.db")
    sqlite_cli(db1, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);",
               "INSERT INTO t VALUES (1, 'first');")
    assert sqlite_cli(db2, "SELECT count(*) FROM t;").stdout == "1\n"

    holder = subprocess.Popen([sys.executable, "-c", HOLDER, db1], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _readline_with_timeout(holder, 30)
        assert line == "locked\n", f"holder said {line!r}: {holder.stderr.read() if holder.poll() is not None else ''}"

        w = sqlite_cli(db2, "INSERT INTO t VALUES (2, 'from node2 while locked');", check=False)
        assert w.returncode != 0, f"write on node2 succeeded under an exclusive lock: {w.stdout}"
        assert "database is locked" in w.stderr, w.stderr
        # A reader is shut out too by an EXCLUSIVE transaction in rollback-journal mode.
        r = sqlite_cli(db2, "SELECT count(*) FROM t;", check=False)
        assert r.returncode != 0 and "database is locked" in r.stderr, (r.stdout, r.stderr)

        holder.stdin.write("\n")
        holder.stdin.flush()
        line = _readline_with_timeout(holder, 30)
        assert line == "committed\n", line
        assert holder.wait(timeout=30) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=10)
    time.sleep(CACHE_BOUND)

    sqlite_cli(db2, "INSERT INTO t VALUES (2, 'from node2 after commit');")
    assert sqlite_cli(db1, "SELECT group_concat(id) FROM (SELECT id FROM t ORDER BY id);"
                      ).stdout == "1,2,100001\n"
    assert sqlite_cli(db2, "PRAGMA integrity_check;").stdout == "ok\n"


def _readline_with_timeout(proc, timeout):
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            raise TimeoutError(f"no output from pid {proc.pid} within {timeout}s")
        return proc.stdout.readline()
    finally:
        sel.close()
