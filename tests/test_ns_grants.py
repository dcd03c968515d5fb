"""Namespace grants (issue 17) through real FUSE mounts: a directory a node
makes is granted to it, and its creates, mkdirs, symlinks and removals there
are answered by the mount and sent to the server as a log
(docs/namespace-grants.md).

- a tree made on one node (files with data) is seen whole, with the right
  content, on another node the moment it looks (its look recalls the grant:
  the holder applies its log first); and the holder did make the changes
  itself (its metrics count them);
- tar x on one node (its chmods, chowns, utimes answered by the mount, its
  closes not waiting for the data): the other node's tar --compare finds
  every file as archived, and stat agrees on both nodes;
- a make on one node: `make -q` on the other finds it up to date (data sent
  after its close carries the time it was written);
- one name created with O_EXCL on two nodes at once: exactly one succeeds;
- a mount killed with -9: what it made durable (fsync of the directory) is
  there, what it had not is all there or a prefix of it in the order it was
  made (a log applies in order), and the volume checks clean offline;
- with the server restarted under a mount's unapplied log: the log is
  applied exactly once before the other node sees the directory;
- kill -9 of the primary of a trio while a node makes files in its granted
  directory: nothing the mount answered is lost, nothing is made twice.

Must run as root (/dev/fuse is root-only here).
"""

import errno
import os
import subprocess
import threading
import time
import urllib.request

import pytest

from kit.fsck import assert_offline_fsck_clean
from kit.ports import free_port
from kit.topology import Standalone, Trio

GRANTS = ["--ns_grants=on"]


def metrics(port):
    """{name: value} of a mount's /metrics (unlabelled samples)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or "{" in line:
            continue
        name, value = line.split(" ")
        out[name] = float(value)
    return out


@pytest.fixture
def pair(tmp_base):
    """One server, two mounts with namespace grants on; the first serves
    its metrics."""
    port = free_port()
    c = Standalone(tmp_base, nodes=2, mount_extra=GRANTS)
    c.mounts[0].extra.append(f"--metrics_addr=127.0.0.1:{port}")
    c.metrics_port = port
    try:
        c.start()
        yield c
    finally:
        c.stop()


def make_tree(root, dirs=5, files=40):
    """dirs x files small files with distinct content; returns {path: bytes}."""
    want = {}
    for d in range(dirs):
        sub = os.path.join(root, f"d{d}")
        os.mkdir(sub)
        for f in range(files):
            p = os.path.join(sub, f"f{f}")
            data = f"{d}/{f} ".encode() * (f + 1)
            with open(p, "wb") as fh:
                fh.write(data)
            want[os.path.relpath(p, root)] = data
        os.symlink("f0", os.path.join(sub, "link"))
        os.unlink(os.path.join(sub, "f1"))
        del want[os.path.relpath(os.path.join(sub, "f1"), root)]
    return want


def read_tree(root):
    got = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                continue
            with open(p, "rb") as fh:
                got[os.path.relpath(p, root)] = fh.read()
    return got


def test_a_tree_made_on_one_node_is_seen_whole_on_the_other_at_once(pair):
    a = os.path.join(pair.n1, "tree")
    os.mkdir(a)
    want = make_tree(a)
    m = metrics(pair.metrics_port)
    assert m["grantfs_mount_ns_grants"] == 1
    # mkdirs, creates (with their opens), symlinks and unlinks in granted
    # directories: made by the mount itself.
    assert m["grantfs_mount_ns_local_changes_total"] >= 5 * 40, m
    b = os.path.join(pair.n2, "tree")
    assert read_tree(b) == want
    for d in range(5):
        assert os.readlink(os.path.join(b, f"d{d}", "link")) == "f0"
        assert not os.path.exists(os.path.join(b, f"d{d}", "f1"))
    assert metrics(pair.metrics_port)["grantfs_mount_ns_grant_recalls_total"] >= 1


def test_an_untarred_tree_compares_equal_on_the_other_node(pair, tmp_path):
    """tar x on node 1: its creates, chmods, chowns and utimes of the new
    files are made by the mount, and their closes do not wait for the data;
    node 2 finds every file's content, mode, owner and mtime as archived
    (tar --compare), and stat agrees on both nodes."""
    src = tmp_path / "src"
    for d in range(4):
        sub = src / f"d{d}"
        sub.mkdir(parents=True)
        for f in range(60):
            p = sub / f"f{f}"
            p.write_bytes(f"{d}/{f} ".encode() * (1 + f * 37))
            os.chmod(p, 0o600 if f % 3 == 0 else 0o755 if f % 3 == 1 else 0o640)
            os.utime(p, ns=(10**9 * (1_600_000_000 + f), 10**9 * (1_500_000_000 + d * 100 + f)))
            if f % 5 == 0:
                os.chown(p, 1000 + f, 2000 + d)
    tarball = tmp_path / "tree.tar"
    subprocess.run(["tar", "cf", str(tarball), "-C", str(src), "."], check=True)
    a = os.path.join(pair.n1, "untar")
    os.mkdir(a)
    subprocess.run(["tar", "xf", str(tarball), "-C", a], check=True)
    m = metrics(pair.metrics_port)
    # Creates, opens, closes, chmods, chowns and utimes: by the mount.
    assert m["grantfs_mount_ns_local_changes_total"] >= 4 * 60 * 3, m
    # Node 1's own view first (answered by its mount), then node 2's.
    before = {}
    for dirpath, _, names in os.walk(a):
        for n in names:
            st = os.stat(os.path.join(dirpath, n))
            before[os.path.relpath(os.path.join(dirpath, n), a)] = (
                st.st_size, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, st.st_blocks)
    b = os.path.join(pair.n2, "untar")
    r = subprocess.run(["tar", "--compare", "-f", str(tarball), "-C", b], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    for rel, want in before.items():
        st = os.stat(os.path.join(b, rel))
        assert (st.st_size, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns,
                st.st_blocks) == want, rel


def test_make_q_on_another_node_finds_a_build_up_to_date(pair):
    """A build on node 1 (closes that do not wait for their data): the data
    reaches the server later, with the time it was written, so node 2's
    `make -q` finds every target newer than what it was built from."""
    a = os.path.join(pair.n1, "build")
    os.mkdir(a)
    srcs = [f"m{i}" for i in range(30)]
    with open(os.path.join(a, "Makefile"), "w") as f:
        f.write("prog: " + " ".join(s + ".o" for s in srcs) + "\n\tcat $^ > $@\n")
        f.write("%.o: %.c\n\tcat $< $< > $@\n")
    for s_ in srcs:
        with open(os.path.join(a, s_ + ".c"), "w") as f:
            f.write(f"int {s_}(void) {{ return 1; }}\n")
    subprocess.run(["make", "-s", "-j4", "-C", a], check=True, timeout=120)
    time.sleep(1.5)  # past any flush of the data
    b = os.path.join(pair.n2, "build")
    r = subprocess.run(["make", "-q", "-C", b], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    with open(os.path.join(b, "prog")) as f:
        assert f.read() == "".join(f"int {s_}(void) {{ return 1; }}\n" * 2 for s_ in srcs)


def test_one_name_created_on_two_nodes_at_once_exactly_one_wins(pair):
    for round_ in range(30):
        d = f"r{round_}"
        os.mkdir(os.path.join(pair.n1, d))  # granted to node 1
        if round_ % 2:
            os.listdir(os.path.join(pair.n2, d))  # recalled: both go to the server
        results = [None, None]
        start = threading.Barrier(2)

        def create(i, node):
            start.wait()
            try:
                fd = os.open(os.path.join(node, d, "x"), os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                             0o644)
                os.write(fd, f"node{i}".encode())
                os.close(fd)
                results[i] = "ok"
            except OSError as e:
                results[i] = errno.errorcode[e.errno]

        threads = [threading.Thread(target=create, args=(i, n))
                   for i, n in enumerate([pair.n1, pair.n2])]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(results) == ["EEXIST", "ok"], (round_, results)
        winner = results.index("ok")
        for node in (pair.n1, pair.n2):
            with open(os.path.join(node, d, "x"), "rb") as f:
                assert f.read() == f"node{winner}".encode(), (round_, node)


def test_a_mount_killed_keeps_what_it_made_durable_and_a_prefix_of_the_rest(tmp_base):
    c = Standalone(tmp_base, nodes=2, mount_extra=GRANTS)
    try:
        c.start()
        d = os.path.join(c.n1, "work")
        os.mkdir(d)
        for i in range(100):
            with open(os.path.join(d, f"durable{i}"), "w") as f:
                f.write(str(i))
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)  # the log is applied, durable and replicated
        os.close(fd)
        for i in range(50):
            open(os.path.join(d, f"late{i:02d}"), "w").close()
        c.mounts[0].kill9()
        # Node 2's look waits for node 1's grant to run out (it cannot answer
        # the recall): the metadata lease + the recall's wait, a few seconds.
        names = set(os.listdir(os.path.join(c.n2, "work")))
        for i in range(100):
            assert f"durable{i}" in names
            with open(os.path.join(c.n2, "work", f"durable{i}")) as f:
                assert f.read() == str(i)
        late = sorted(n for n in names if n.startswith("late"))
        assert late == [f"late{i:02d}" for i in range(len(late))], late
        # The mount's grants are gone: node 2 changes the directory.
        open(os.path.join(c.n2, "work", "after"), "w").close()
        os.unlink(os.path.join(c.n2, "work", "durable0"))
    finally:
        c.stop()
    assert_offline_fsck_clean(c.server.data_dir)


def test_a_log_not_applied_at_a_server_restart_is_applied_once(tmp_base):
    c = Standalone(tmp_base, nodes=2, mount_extra=GRANTS)
    try:
        c.start()
        d = os.path.join(c.n1, "work")
        os.mkdir(d)
        for i in range(200):
            open(os.path.join(d, f"f{i:03d}"), "w").close()
        os.mkdir(os.path.join(d, "sub"))
        c.restart_server()
        # Node 2 waits until node 1 subscribed again, which applies its log
        # first: every entry once.
        names = sorted(os.listdir(os.path.join(c.n2, "work")))
        assert names == sorted([f"f{i:03d}" for i in range(200)] + ["sub"])
        st = os.statvfs(c.n2)
        used_inodes = st.f_files - st.f_ffree
        assert used_inodes == 1 + 1 + 200 + 1, used_inodes
    finally:
        c.stop()
    assert_offline_fsck_clean(c.server.data_dir)


def start_trio_with_grants(t):
    """Starts trio `t` with node1 (namespace grants on) and node2 mounted;
    returns their paths and node1's new directory "work" (granted to it)."""
    t.start()
    n1 = t.mount("node1", extra=GRANTS)
    n2 = t.mount("node2")
    d = os.path.join(n1, "work")
    os.mkdir(d)
    return n1, n2, d


def test_kill9_of_the_primary_loses_nothing_a_mount_answered(tmp_base):
    """A trio; a node with namespace grants makes files (answered by the
    mount, in its log) while the primary is killed with -9: the replica
    takes over, the mount replays its log there before it subscribes, and
    every file the program was told it made is there, once, on the other
    node too; the volume checks clean."""
    t = Trio(tmp_base)
    try:
        n1, n2, d = start_trio_with_grants(t)
        made = []
        stop = threading.Event()
        errors = []

        def make():
            i = 0
            while not stop.is_set() and i < 3000:
                p = os.path.join(d, f"f{i:05d}")
                try:
                    with open(p, "w") as f:
                        f.write(str(i))
                except OSError as e:
                    errors.append((p, e))
                    return
                made.append(f"f{i:05d}")
                i += 1

        th = threading.Thread(target=make)
        th.start()
        while len(made) < 300 and th.is_alive():
            time.sleep(0.01)
        primary, _ = t.primary()
        t.kill9(primary)
        while len(made) < 600 and th.is_alive():
            time.sleep(0.01)
        stop.set()
        th.join(120)
        assert not errors, errors[:3]
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
        os.close(fd)
        names = sorted(os.listdir(os.path.join(n2, "work")))
        assert names == made, (len(names), len(made), sorted(set(made) - set(names))[:5])
        for name in made[::97]:
            with open(os.path.join(n2, "work", name)) as f:
                assert f.read() == str(int(name[1:]))
        survivor = t.other(primary)
        st = os.statvfs(n2)
        assert st.f_files - st.f_ffree == 1 + 1 + len(made)
    finally:
        t.stop()
    assert_offline_fsck_clean(t.data_dirs[survivor])


def test_files_open_in_the_log_are_reclaimed_after_a_failover(tmp_base):
    """Files made and opened by a node with namespace grants, still open
    (one of them unlinked since) when the primary is killed with -9: the
    mount replays its log on the new primary before it names its open
    files there, so none is reported freed, the unlinked one is still
    read through its descriptor, and the other's writes land."""
    t = Trio(tmp_base)
    try:
        n1, n2, d = start_trio_with_grants(t)
        kept = open(os.path.join(d, "kept"), "w+b")
        gone = open(os.path.join(d, "gone"), "w+b")
        kept.write(b"before ")
        gone.write(b"still readable")
        gone.flush()
        kept.flush()
        os.unlink(os.path.join(d, "gone"))
        primary, _ = t.primary()
        t.kill9(primary)  # the log most likely not applied yet (it ages 1 s)
        t.wait_role(t.other(primary), "primary", 60)
        kept.write(b"after")
        kept.close()
        gone.seek(0)
        assert gone.read() == b"still readable"
        gone.close()
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
        os.close(fd)
        with open(os.path.join(n2, "work", "kept"), "rb") as f:
            assert f.read() == b"before after"
        assert sorted(os.listdir(os.path.join(n2, "work"))) == ["kept"]
        log = t.mounts[0].log()
        assert "freed before this mount could reclaim it" not in log, log[-3000:]
    finally:
        t.stop()


def server_calls(port, op):
    """How many calls `op` a server has served (its /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    want = f'grantfs_server_call_seconds_count{{op="{op}"}} '
    for line in text.splitlines():
        if line.startswith(want):
            return float(line[len(want):])
    return 0.0


def test_a_granted_directory_is_listed_by_the_mount_alone(tmp_base):
    """ls of a directory granted to the mount (made by it, and an existing
    one it was granted once it used it) lists what the mount made, renamed
    and removed there, each entry with its type, with no call to the
    server; the other node then lists the same names."""
    port = free_port()
    c = Standalone(tmp_base, nodes=2, mount_extra=GRANTS,
                   server_extra=[f"--metrics_addr=127.0.0.1:{port}"])
    try:
        c.start()
        old = os.path.join(c.n2, "old")
        os.mkdir(old)  # made by the other node: granted to node 1 once used
        d = os.path.join(c.n1, "new")
        os.mkdir(d)
        for top in (d, os.path.join(c.n1, "old")):
            for i in range(30):
                with open(os.path.join(top, f"f{i}"), "w") as f:
                    f.write("x")
            os.mkdir(os.path.join(top, "sub"))
            os.symlink("f0", os.path.join(top, "link"))
            os.rename(os.path.join(top, "f1"), os.path.join(top, "g1"))
            os.unlink(os.path.join(top, "f2"))
        want = sorted([f"f{i}" for i in range(30) if i not in (1, 2)] + ["g1", "sub", "link"])
        before = server_calls(port, "ReadDir")
        for top in (d, os.path.join(c.n1, "old")):
            with os.scandir(top) as it:
                kinds = {e.name: (e.is_dir(follow_symlinks=False),
                                  e.is_symlink()) for e in it}
            assert sorted(kinds) == want
            assert kinds["sub"] == (True, False)
            assert kinds["link"] == (False, True)
            assert kinds["f0"] == (False, False)
            # A second pass (rewinddir), in pages of a few entries.
            fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
            try:
                assert sorted(os.listdir(fd)) == want
            finally:
                os.close(fd)
        assert server_calls(port, "ReadDir") == before
        for name in ("new", "old"):
            assert sorted(os.listdir(os.path.join(c.n2, name))) == want
    finally:
        c.stop()
