"""Read-ahead end to end: fast sequential reads that are never stale.

Each test runs twice: with the mount's read-ahead on (the default, 8 MiB) and
off (--readahead_kib=0); both must read exactly the same bytes. What one
node has closed, another node's next open reads; a change pushed by the
server reaches a reader that keeps its file open; this mount's own writes and
truncates are read back at once.
"""

import hashlib
import os
import random
import re
import time

import pytest

from kit.topology import running_standalone

MiB = 1 << 20
KiB = 1 << 10


def pattern(seed, n):
    """Non-zero bytes that differ per seed and per 4 KiB block (offsets matter)."""
    out = bytearray()
    block = 0
    while len(out) < n:
        digest = hashlib.sha256(f"{seed}:{block}".encode()).digest()
        piece = bytes(b | 1 for b in digest) * 128  # 4 KiB, no zero byte
        out += piece
        block += 1
    return bytes(out[:n])


def write_file(path, data):
    with open(path, "wb") as f:
        for off in range(0, len(data), MiB):
            f.write(data[off:off + MiB])


def read_sequentially(path, chunk=128 * KiB):
    h = hashlib.sha256()
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
            n += len(b)
    return n, h.hexdigest()


def served_from_read_ahead(mount):
    """Bytes the mount served from read-ahead, from its log after unmount."""
    m = re.findall(r"read-ahead: .*?, (\d+) bytes served", mount.log())
    return int(m[-1]) if m else None


@pytest.fixture(params=["readahead", "off"])
def ra_cluster(request, tmp_base):
    extra = [] if request.param == "readahead" else ["--readahead_kib=0"]
    for c in running_standalone(tmp_base, capacity="2G", mount_extra=extra):
        c.readahead = request.param == "readahead"
        yield c


def test_sequential_read_on_another_node_is_exact(ra_cluster):
    c = ra_cluster
    size = 96 * MiB + 12345  # not a whole number of extents
    data = pattern("seq", size)
    write_file(os.path.join(c.n1, "big"), data)
    want = hashlib.sha256(data).hexdigest()
    path = os.path.join(c.n2, "big")
    assert read_sequentially(path) == (size, want)
    # Large reads too (the kernel splits them into 1 MiB requests).
    assert read_sequentially(path, chunk=4 * MiB) == (size, want)
    c.mounts[1].unmount()
    served = served_from_read_ahead(c.mounts[1])
    if c.readahead:
        # Most of the file came from read-ahead, not one RPC per read. (The
        # second pass may come from the kernel's pages, kept across opens
        # while node2 holds the file's lease.)
        assert served is not None and served >= 0.9 * size, c.mounts[1].log()
    else:
        assert served is None


def test_read_after_overwrite_on_another_node_and_close_sees_new_data(ra_cluster):
    c = ra_cluster
    size = 32 * MiB
    old, new = pattern("old", size), pattern("new", size)
    write_file(os.path.join(c.n1, "f"), old)
    p2 = os.path.join(c.n2, "f")
    # Another open of the file on node2 the whole time: the mount keeps what
    # it fetched of the file across the reader's close and reopen.
    holder = open(p2, "rb")
    with open(p2, "rb", buffering=0) as f:
        # Part of the file: read-ahead now holds (old) extents past 8 MiB.
        for off in range(0, 8 * MiB, 128 * KiB):
            assert f.read(128 * KiB) == old[off:off + 128 * KiB]
    write_file(os.path.join(c.n1, "f"), new)  # same size, closed
    with open(p2, "rb", buffering=0) as f:
        # Where the last reader stopped first (a sequential continuation),
        # then the whole file.
        f.seek(8 * MiB)
        for off in range(8 * MiB, size, 128 * KiB):
            assert f.read(128 * KiB) == new[off:off + 128 * KiB], f"old bytes at {off}"
        f.seek(0)
        assert f.read() == new
    # Shorter now: exactly the new length, no old bytes past it.
    shorter = pattern("shorter", 5 * MiB + 77)
    write_file(os.path.join(c.n1, "f"), shorter)
    with open(p2, "rb") as f:
        assert f.read() == shorter
    holder.close()


def test_reader_with_the_file_open_sees_a_change_pushed_by_the_server(ra_cluster):
    c = ra_cluster
    size = 32 * MiB
    old, new = pattern("old", size), pattern("new", size)
    write_file(os.path.join(c.n1, "f"), old)
    with open(os.path.join(c.n2, "f"), "rb", buffering=0) as f:
        for off in range(0, 8 * MiB, 128 * KiB):
            assert f.read(128 * KiB) == old[off:off + 128 * KiB]
        write_file(os.path.join(c.n1, "f"), new)  # closed: on the server
        # The change is pushed to node2 (bound: 1 s); then everything read
        # is new, also where read-ahead had fetched the old bytes.
        deadline = time.monotonic() + 5
        while os.pread(f.fileno(), 4 * KiB, 0) != new[:4 * KiB]:
            assert time.monotonic() < deadline, "change not seen on node2"
            time.sleep(0.01)
        f.seek(8 * MiB)
        for off in range(8 * MiB, size, 128 * KiB):
            assert f.read(128 * KiB) == new[off:off + 128 * KiB], f"old bytes at {off}"


def test_read_your_writes_in_the_same_mount(ra_cluster):
    c = ra_cluster
    size = 24 * MiB
    data = bytearray(pattern("base", size))
    path = os.path.join(c.n1, "f")
    write_file(path, bytes(data))
    with open(path, "r+b", buffering=0) as f:
        for off in range(0, 4 * MiB, 128 * KiB):
            assert f.read(128 * KiB) == data[off:off + 128 * KiB]
        # Written ahead of the reader, inside what read-ahead fetched, and
        # on the server (so the write cache no longer covers it).
        patch = pattern("patch", 300 * KiB + 5)
        os.pwrite(f.fileno(), patch, 6 * MiB + 100)
        os.fsync(f.fileno())
        data[6 * MiB + 100:6 * MiB + 100 + len(patch)] = patch
        for off in range(4 * MiB, size, 128 * KiB):
            assert f.read(128 * KiB) == data[off:off + 128 * KiB], f"at {off}"
        # Written, read around while still only in the write cache, then
        # flushed: what is read afterwards is still the written data.
        patch2 = pattern("patch2", 200 * KiB)
        os.pwrite(f.fileno(), patch2, 10 * MiB)
        data[10 * MiB:10 * MiB + len(patch2)] = patch2
        f.seek(0)
        for off in range(0, 8 * MiB, 128 * KiB):
            assert f.read(128 * KiB) == data[off:off + 128 * KiB], f"at {off}"
        os.fsync(f.fileno())
        for off in range(8 * MiB, 16 * MiB, 128 * KiB):
            assert f.read(128 * KiB) == data[off:off + 128 * KiB], f"at {off}"
        # Past the end: the file grows.
        tail = pattern("tail", 2 * MiB)
        os.pwrite(f.fileno(), tail, size)
        os.fsync(f.fileno())
        data += tail
        f.seek(0)
        assert f.read() == bytes(data)
        # Truncate below what was read ahead, then extend: zeros, never the
        # old bytes.
        f.seek(0)
        for off in range(0, 4 * MiB, 128 * KiB):
            f.read(128 * KiB)
        os.ftruncate(f.fileno(), 5 * MiB)
        os.ftruncate(f.fileno(), 12 * MiB)
        want = bytes(data[:5 * MiB]) + bytes(7 * MiB)
        f.seek(4 * MiB)
        got = f.read()
        assert len(got) == 8 * MiB
        assert got == want[4 * MiB:]
    with open(os.path.join(c.n2, "f"), "rb") as f:
        assert f.read() == want


def test_random_offset_reads_match_the_content(ra_cluster):
    c = ra_cluster
    size = 48 * MiB + 999
    data = pattern("rand", size)
    write_file(os.path.join(c.n1, "f"), data)
    rng = random.Random(7)
    with open(os.path.join(c.n2, "f"), "rb", buffering=0) as f:
        fd = f.fileno()
        for _ in range(300):
            off = rng.randrange(0, size + MiB)
            n = rng.choice([1, 4 * KiB, 100 * KiB, MiB, 3 * MiB + 5])
            assert os.pread(fd, n, off) == data[off:off + n], (off, n)
            if rng.random() < 0.2:  # now and then a short sequential run
                for _ in range(rng.randrange(2, 40)):
                    off += n
                    assert os.pread(fd, n, off) == data[off:off + n], (off, n)
