"""Scale: a 1 GiB file and a directory of 10,000 files, across two nodes."""

import hashlib
import os
import re
import stat
import subprocess
import time

from treesnap import poll_until

MiB = 1 << 20
GiB = 1 << 30


def eventually(pred, what, timeout=2.0):
    """Cross-node checks of names the checking node has cached: the mounts
    cache attributes and names for 1 s, so allow a little more than that."""
    assert poll_until(pred, timeout), f"still not true after {timeout}s: {what}"


def used_bytes(cluster):
    out = cluster.server.ctl("status")
    m = re.search(r"^used:\s+.*\((\d+) bytes\)$", out, re.M)
    assert m, f"no 'used' line in grantfsctl status:\n{out}"
    return int(m.group(1))


def test_1gib_file_written_on_node1_reads_back_on_node2(cluster):
    used_before = used_bytes(cluster)
    p1 = os.path.join(cluster.n1, "big.bin")
    digests = []  # sha256 of every MiB, to say where a mismatch is
    whole = hashlib.sha256()
    fd = os.open(p1, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for i in range(GiB // MiB):
            block = os.urandom(MiB)
            off = 0
            while off < MiB:  # write() may be short; never assume it is not
                off += os.write(fd, block[off:] if off else block)
            whole.update(block)
            digests.append(hashlib.sha256(block).digest())
            if i % 256 == 255:
                os.fsync(fd)
        os.fsync(fd)
    finally:
        os.close(fd)

    p2 = os.path.join(cluster.n2, "big.bin")
    assert os.stat(p2).st_size == GiB
    assert os.stat(p1).st_size == GiB
    got = hashlib.sha256()
    first_bad = None
    nblocks = 0
    with open(p2, "rb", buffering=0) as f:
        while True:
            b = f.read(MiB)
            if not b:
                break
            # A short read in the middle would misalign the per-MiB digests;
            # read to full MiB boundaries.
            while len(b) < MiB:
                more = f.read(MiB - len(b))
                if not more:
                    break
                b += more
            got.update(b)
            if first_bad is None and (nblocks >= len(digests)
                                      or hashlib.sha256(b).digest() != digests[nblocks]):
                first_bad = nblocks
            nblocks += 1
    assert nblocks == GiB // MiB, f"read {nblocks} MiB from node2, expected {GiB // MiB}"
    assert first_bad is None, f"content read on node2 differs first in MiB #{first_bad}"
    assert got.hexdigest() == whole.hexdigest()

    used_full = used_bytes(cluster)
    assert used_full >= GiB, f"used {used_full} bytes after writing 1 GiB"
    assert used_full >= used_before + GiB

    os.unlink(p2)
    assert not os.path.exists(p2)
    eventually(lambda: not os.path.exists(p1), "node1 no longer sees the unlinked file")
    deadline = time.monotonic() + 10
    used_after = used_bytes(cluster)
    while used_after > used_before and time.monotonic() < deadline:
        time.sleep(0.2)
        used_after = used_bytes(cluster)
    assert used_after <= used_before, (
        f"used is {used_after} bytes 10 s after unlinking the 1 GiB file "
        f"(was {used_before} before it was written, {used_full} with it)")


N_FILES = 10_000


def test_directory_of_10000_files(cluster):
    d1 = os.path.join(cluster.n1, "many")
    d2 = os.path.join(cluster.n2, "many")
    os.mkdir(d1)
    names = [f"f{i:05d}-{'x' * (i % 37)}" for i in range(N_FILES)]
    for i, name in enumerate(names):
        fd = os.open(os.path.join(d1, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if i % 10 == 0:  # every tenth file is tiny rather than empty
                os.write(fd, str(i).encode())
        finally:
            os.close(fd)

    listed = os.listdir(d2)
    assert len(listed) == N_FILES, f"listdir on node2 returned {len(listed)} names"
    assert len(set(listed)) == N_FILES, (
        f"duplicates: {sorted(n for n in set(listed) if listed.count(n) > 1)[:10]}")
    assert sorted(listed) == sorted(names)

    seen = {}
    inodes = set()
    with os.scandir(d2) as it:
        for e in it:
            st = e.stat(follow_symlinks=False)
            i = int(e.name[1:6])
            assert e.name == names[i]
            assert stat.S_ISREG(st.st_mode), (e.name, oct(st.st_mode))
            assert stat.S_IMODE(st.st_mode) == 0o644, (e.name, oct(st.st_mode))
            want = len(str(i)) if i % 10 == 0 else 0
            assert st.st_size == want, (e.name, st.st_size, want)
            assert e.name not in seen, f"scandir returned {e.name} twice"
            seen[e.name] = st.st_ino
            inodes.add(st.st_ino)
    assert len(seen) == N_FILES
    assert len(inodes) == N_FILES, "distinct files share inode numbers"
    with open(os.path.join(d2, names[9990]), "rb") as f:
        assert f.read() == b"9990"

    r = subprocess.run(["ls", "-f", d2], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")[:-1]
    assert len(lines) == N_FILES + 2, f"ls -f printed {len(lines)} lines"
    assert sorted(lines) == sorted(names + [".", ".."])
    r = subprocess.run(f"ls -f '{d2}' | wc -l", shell=True, capture_output=True, text=True,
                       timeout=120)
    assert r.stdout.strip() == str(N_FILES + 2)

    # Delete everything through node2; both nodes see an empty directory.
    for name in os.listdir(d2):
        os.unlink(os.path.join(d2, name))
    assert os.listdir(d2) == []
    assert os.listdir(d1) == []
    assert not os.path.exists(os.path.join(d1, names[0]))
    assert os.stat(d1).st_nlink == 2
    os.rmdir(d1)
    eventually(lambda: not os.path.exists(d2), "node2 no longer sees the removed directory")
