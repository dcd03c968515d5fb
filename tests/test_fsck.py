"""grantfsctl fsck: the offline check of a stopped server's data directory.

A real server and real mounts build a volume with the usual operations; the
server is stopped; fsck finds it clean. Damage done to the stopped volume
by hand (chunk files removed or left behind) is reported one precise line
per problem, --repair fixes what it safely can, and the server then serves
every byte as before.
"""

import hashlib
import json
import os
import re
import subprocess
import sys

from kit.build import CTL_BIN
from kit.fsck import offline_fsck
from kit.topology import Standalone, Trio

MIB = 1 << 20
CHUNK = 4 * MIB


def chunk_path(data_dir, ino, index):
    return os.path.join(data_dir, "chunks", f"{ino % 256:02x}", f"{ino}.{index}")


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def build_tree(root):
    """Directories, multi-chunk and small files, hard links, a symlink, a
    fifo, xattrs, renames (also of a directory and over a file), truncations
    and removals. Returns {relative path: sha256} of the regular files."""
    for d in ["a/b/c", "d/many", "e"]:
        os.makedirs(os.path.join(root, d), exist_ok=True)

    def put(rel, data):
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)

    put("a/small.txt", b"hello\n")
    put("a/b/big.bin", os.urandom(2 * CHUNK + 12345))  # three chunks
    put("a/b/c/empty", b"")
    put("d/blocks.bin", os.urandom(3 * 4096 + 1))
    for i in range(40):
        put(f"d/many/{i:02d}", os.urandom(i * 997))
    os.link(os.path.join(root, "a/small.txt"), os.path.join(root, "d/small-link"))
    os.link(os.path.join(root, "d/blocks.bin"), os.path.join(root, "e/blocks-link"))
    os.symlink("../a/small.txt", os.path.join(root, "d/sym"))
    os.mkfifo(os.path.join(root, "d/fifo"))
    os.setxattr(os.path.join(root, "a/small.txt"), "user.color", b"blue")
    os.rename(os.path.join(root, "a/b/c"), os.path.join(root, "e/c-moved"))
    put("e/new", b"replacement")
    os.rename(os.path.join(root, "e/new"), os.path.join(root, "d/many/00"))
    put("trunc.bin", os.urandom(CHUNK + 2 * MIB))
    os.truncate(os.path.join(root, "trunc.bin"), CHUNK + MIB + 77)  # inside chunk 1
    os.truncate(os.path.join(root, "trunc.bin"), 3 * CHUNK)          # and a hole after
    put("gone.bin", os.urandom(MIB))
    os.unlink(os.path.join(root, "gone.bin"))
    os.mkdir(os.path.join(root, "e/tmpdir"))
    os.rmdir(os.path.join(root, "e/tmpdir"))
    files = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            if os.path.isfile(p) and not os.path.islink(p):
                files[os.path.relpath(p, root)] = digest(p)
    return files


def test_clean_volume_then_damage_and_repair(tmp_base):
    c = Standalone(tmp_base).start()
    try:
        files = build_tree(c.n1)
        big_ino = os.stat(os.path.join(c.n1, "a/b/big.bin")).st_ino
        some_ino = os.stat(os.path.join(c.n1, "d/many/05")).st_ino
        # The other node sees the same files.
        assert digest(os.path.join(c.n2, "a/b/big.bin")) == files["a/b/big.bin"]
    finally:
        c.stop()
    data = c.server.data_dir

    r = offline_fsck(data)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith(": clean"), r.stdout
    report = json.loads(offline_fsck(data, "--json").stdout)
    assert report["clean"] and report["problems"] == []
    assert report["files"] >= 45 and report["directories"] == 7
    # --progress: a line per phase on stderr, each ending at its total; the
    # report on stdout is the same.
    p = offline_fsck(data, "--json", "--progress")
    assert json.loads(p.stdout)["clean"], p.stdout
    lines = [l.split("\r")[-1].replace("\033[K", "") for l in p.stderr.splitlines()]
    assert any(l.startswith("fsck: metadata records: ") and "(100%" in l for l in lines), p.stderr
    assert any(l.startswith(f"fsck: chunk files: {report['chunk_files']} of ") for l in lines), \
        p.stderr

    # Repairable: chunk files no record names, one of a live file, one of an
    # inode number never handed out (so next_ino is raised past it too).
    stray_live = chunk_path(data, some_ino, 9)
    with open(stray_live, "wb") as f:
        f.write(b"never committed")
    stray_dead = chunk_path(data, 10**9, 0)
    with open(stray_dead, "wb") as f:
        f.write(b"x")
    r = offline_fsck(data)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert (f"orphan_chunk_file: chunk file {stray_live} (15 bytes) has no chunk record: chunk 9 "
            f"of inode {some_ino} (regular file /d/many/05), which records no block in "
            "chunk 9 [--repair: delete the file]") in lines, r.stdout
    assert any(line.startswith(f"orphan_chunk_file: chunk file {stray_dead} (1 bytes)")
               for line in lines), r.stdout
    assert any(line.startswith("next_ino: counters: next_ino is ") and
               f"but inode number {10**9} is in use" in line for line in lines), r.stdout
    assert lines[-1].endswith(": 3 problems"), r.stdout

    r = offline_fsck(data, "--repair")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("[repaired: ") == 3, r.stdout
    assert r.stdout.strip().endswith(": 3 problems, 3 repaired"), r.stdout
    assert not os.path.exists(stray_live) and not os.path.exists(stray_dead)
    r = offline_fsck(data)
    assert r.returncode == 0, r.stdout + r.stderr

    # Not repairable: a chunk file of data is gone.
    lost = chunk_path(data, big_ino, 1)
    os.unlink(lost)
    r = offline_fsck(data)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == (
        f"chunk_file_missing: chunk record C/{big_ino}/1 (1024 blocks) of inode {big_ino} "
        f"(regular file /a/b/big.bin) has no chunk file {lost}: those blocks read as zeros"), \
        r.stdout
    r = offline_fsck(data, "--repair")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "[repaired" not in r.stdout and ": 1 problem, 0 repaired" in r.stdout, r.stdout

    # The server serves the rest as before; the lost chunk reads as zeros.
    c = Standalone(tmp_base, data_dir=data).start()
    try:
        for rel, want in files.items():
            if rel != "a/b/big.bin":
                assert digest(os.path.join(c.n2, rel)) == want, rel
        with open(os.path.join(c.n1, "a/b/big.bin"), "rb") as f:
            f.seek(CHUNK)
            assert f.read(CHUNK) == bytes(CHUNK)
    finally:
        c.stop()


def test_refused_while_the_server_runs(tmp_base):
    c = Standalone(tmp_base, nodes=1).start()
    try:
        for flags in [(), ("--repair",)]:
            r = offline_fsck(c.server.data_dir, *flags)
            assert r.returncode == 2, r.stdout + r.stderr
            assert f"in use by process {c.server.proc.pid}" in r.stderr, r.stderr
            assert "stop it before fsck" in r.stderr
    finally:
        c.stop()
    r = offline_fsck(os.path.join(tmp_base, "no-such-dir"))
    assert r.returncode == 2 and "no metadata store" in r.stderr, r.stderr
    # Without --data_dir it is the online check, of a server that answers.
    r = subprocess.run([CTL_BIN, f"--server={c.server.addr}", "fsck"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "no primary among" in r.stderr, r.stderr
    assert "--data_dir=DIR" in r.stderr, r.stderr


# Holds files open on the mounts for test_server_stopped_under_busy_mounts_is_clean:
# argv[1] is read (it is unlinked meanwhile), argv[2] gets 2 MiB written and
# not flushed. Another process, so that no process the test starts while the
# server is down inherits (and closes, so flushes) a descriptor of a mount.
HOLDER = """
import os, sys
held = open(sys.argv[1], "rb")
cached = open(sys.argv[2], "wb")
cached.write(os.urandom(2 << 20))
cached.flush()
print("ready", flush=True)
sys.stdin.read()
cached.close()
held.close()
"""


def test_server_stopped_under_busy_mounts_is_clean(tmp_base):
    """Stopped while both nodes are mounted: sessions with space grants, a
    file unlinked while open, written data still cached in a mount (never
    sent: not part of the volume). All of it is consistent; so is the
    volume after the server came back and the mounts finished."""
    c = Standalone(tmp_base).start()
    holder = None
    try:
        with open(os.path.join(c.n1, "f"), "wb") as f:
            f.write(os.urandom(3 * MIB))
            f.flush()
            os.fsync(f.fileno())
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, os.path.join(c.n2, "f"), os.path.join(c.n1, "cached")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "ready"
        os.unlink(os.path.join(c.n1, "f"))
        with open(os.path.join(c.n2, "g"), "wb") as g:
            g.write(os.urandom(MIB))
            os.fsync(g.fileno())
        c.server.stop()  # the mounts stay
        r = offline_fsck(c.server.data_dir)
        assert r.returncode == 0, r.stdout + r.stderr
        report = json.loads(offline_fsck(c.server.data_dir, "--json").stdout)
        assert report["orphans"] == 1, report
        assert report["granted_blocks"] > 0, report
        # The server comes back; the mounts carry on and finish.
        c.server.start()
        holder.communicate("", timeout=120)
        assert holder.returncode == 0
        holder = None
    finally:
        if holder:
            holder.kill()
            holder.wait()
        c.stop()
    r = offline_fsck(c.server.data_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(offline_fsck(c.server.data_dir, "--json").stdout)
    # f (3 MiB, still recorded: the unlinked file waits for the next start,
    # as the last run's sessions were still in grace), g and cached.
    assert report["used_blocks"] == (3 + 1 + 2) * MIB // 4096, report


# --- the online check (grantfsctl fsck without --data_dir) ----------------------------


def online_fsck(servers, *flags):
    return subprocess.run([CTL_BIN, f"--server={servers}", "fsck", *flags], capture_output=True,
                          text=True, timeout=300)


def busy_tree(root, n=40):
    """Files, directories, renames, links, xattrs and removals: every kind of record."""
    os.makedirs(os.path.join(root, "d", "e"), exist_ok=True)
    for i in range(n):
        p = os.path.join(root, "d", f"f{i}")
        with open(p, "wb") as f:
            f.write(os.urandom(1000 + 37 * i))
        if i % 3 == 0:
            os.rename(p, os.path.join(root, "d", "e", f"g{i}"))
        elif i % 5 == 0:
            os.link(p, os.path.join(root, f"link{i}"))
        elif i % 7 == 0:
            os.setxattr(p, b"user.k", b"v%d" % i)
        elif i % 11 == 0:
            os.unlink(p)
    os.symlink("d/e", os.path.join(root, "sym"))


def test_online_check_of_a_standalone_server(tmp_base):
    c = Standalone(tmp_base, nodes=1).start()
    try:
        busy_tree(c.n1)
        r = online_fsck(c.server.addr)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "chunk files not read" in r.stdout and ": clean" in r.stdout, r.stdout
        assert "not compared (standalone server: no replica)" in r.stdout, r.stdout
        # --progress: how long the primary's check took, on stderr; the
        # report on stdout is the same.
        p = subprocess.run([CTL_BIN, f"--server={c.server.addr}", "fsck", "--progress"],
                           capture_output=True, timeout=300)  # bytes: "\r" kept
        assert p.returncode == 0 and b": clean" in p.stdout, p
        assert len(p.stdout.splitlines()) == len(r.stdout.splitlines()), (p.stdout, r.stdout)
        assert re.search(rf"\rfsck: {re.escape(c.server.addr)} checks its metadata and compares "
                         r"the replica's: \d+ s elapsed\x1b\[K\n$", p.stderr.decode()), p.stderr
        assert online_fsck(c.server.addr).stderr == ""  # not a terminal, not asked
        report = json.loads(online_fsck(c.server.addr, "--json").stdout)
        assert report["clean"] and report["metadata_only"], report
        assert report["replica_compared"] is False and report["inodes"] > 40, report
        r = online_fsck(c.server.addr, "--repair")
        assert r.returncode == 2 and "--repair needs --data_dir" in r.stderr, r.stderr
    finally:
        c.stop()


def test_online_check_compares_primary_and_replica_while_they_change(tmp_base):
    """The digests are of one point of the change log on both servers, so
    they agree while a writer keeps changing the metadata; and again on
    the other server after a switchover."""
    import threading

    t = Trio(tmp_base)
    try:
        t.start()
        n1 = t.mount("node1")
        busy_tree(n1)
        stop = threading.Event()
        errors = []

        def churn():
            i = 0
            try:
                while not stop.is_set():
                    p = os.path.join(n1, f"churn{i % 50}")
                    with open(p, "wb") as f:
                        f.write(b"x" * (i % 5000))
                    if i % 2:
                        os.unlink(p)
                    i += 1
            except OSError as e:
                errors.append(e)

        th = threading.Thread(target=churn)
        th.start()
        try:
            for _ in range(3):
                r = online_fsck(t.servers)
                assert r.returncode == 0, r.stdout + r.stderr
                assert "the replica's is the same" in r.stdout, r.stdout
        finally:
            stop.set()
            th.join(60)
        assert not errors, errors
        report = json.loads(online_fsck(t.servers, "--json").stdout)
        assert report["replica_compared"] and report["digests_equal"], report
        r = subprocess.run([CTL_BIN, f"--server={t.servers}", "switchover"], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        t.wait_in_sync("B", "A", 60)
        busy_tree(os.path.join(n1, "d", "e"), n=10)
        r = online_fsck(t.servers)
        assert r.returncode == 0 and "the replica's is the same" in r.stdout, r.stdout + r.stderr
    finally:
        t.stop()
