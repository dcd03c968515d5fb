"""Writes through a shared writable mapping on a full volume: what holds.

FUSE tells a file system nothing when a mapped page is dirtied (there is no
page_mkwrite call to reserve space at), so GrantFS sees mmap writes only
when the kernel writes the pages back. What holds, checked here on a full
volume (docs/write-path.md, "mmap"):
- pages over blocks the file already has are stored (an overwrite needs no
  space);
- pages over holes need new blocks: if there is no room, msync()/fsync()
  report ENOSPC, the pages are not stored, and the mount goes on;
- blocks reserved with fallocate() before mapping are the file's: pages over
  them are stored however full the volume is. A program that writes new
  space through mmap and must not fail later reserves it so first."""

import errno
import mmap
import os
import re

import pytest

from kit.topology import Standalone
from kit.waits import wait_for

MIB = 1 << 20


@pytest.fixture
def full_cluster(tmp_base):
    c = Standalone(tmp_base, nodes=2, capacity="64M")
    c.start()
    try:
        yield c
    finally:
        c.stop()


def fill(path):
    """Writes until ENOSPC; fsync and close succeed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"f" * MIB)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    os.fsync(fd)
    os.close(fd)


def mmap_write(path, data):
    """Writes `data` over the start of the existing file `path` through a
    shared mapping, then msync, munmap, fsync and close. msync's error, if
    any, is raised."""
    fd = os.open(path, os.O_RDWR)
    try:
        m = mmap.mmap(fd, len(data))
        try:
            m[:] = data
            m.flush()
        finally:
            m.close()
        os.fsync(fd)
    finally:
        os.close(fd)


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def read(path):
    with open(path, "rb") as f:
        return f.read()


def test_mmap_writes_on_a_full_volume(full_cluster):
    c = full_cluster
    n1, n2 = c.n1, c.mounts[1].path
    with open(os.path.join(n1, "old"), "wb") as f:
        f.write(b"o" * MIB)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(os.path.join(n1, "reserved"), os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, 4 * MIB)
    os.close(fd)
    fill(os.path.join(n1, "fill"))

    # Overwrite of blocks the file has: stored.
    mmap_write(os.path.join(n1, "old"), b"n" * MIB)
    assert read(os.path.join(n2, "old")) == b"n" * MIB

    # Blocks reserved by fallocate: stored.
    mmap_write(os.path.join(n1, "reserved"), b"r" * (4 * MIB))
    assert read(os.path.join(n2, "reserved")) == b"r" * (4 * MIB)

    # Holes on a full volume: msync says ENOSPC; nothing is half-stored.
    fd = os.open(os.path.join(n1, "holes"), os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 4 * MIB)
    os.close(fd)
    with pytest.raises(OSError) as e:
        mmap_write(os.path.join(n1, "holes"), b"h" * (4 * MIB))
    assert e.value.errno == errno.ENOSPC, e.value
    assert read(os.path.join(n2, "holes")) == b"\0" * (4 * MIB)
    status = c.server.ctl("status")
    assert re.search(r"ledger:\s+ok", status), status

    # The mount goes on: with room again, the same mmap write is stored.
    os.unlink(os.path.join(n1, "fill"))
    # (The server frees a removed file's space at its next round.)
    wait_for(lambda: free_bytes(n1) >= 8 * MIB, timeout=30, what="the fill's space freed")
    mmap_write(os.path.join(n1, "holes"), b"h" * (4 * MIB))
    assert read(os.path.join(n2, "holes")) == b"h" * (4 * MIB)
