"""Exact space on a real, small data disk: a 256 MiB tmpfs holds the
server's data directory (RocksDB and chunks), the capacity is the default
(derived once from the free space, less the metadata reserve, and recorded
in the volume). Promise 1: ENOSPC comes at write(), never at fsync() or
close(), and every byte write() accepted reads back."""

import errno
import hashlib
import os
import subprocess
import threading

import pytest

from conftest import Cluster, wait_for

MIB = 1 << 20


@pytest.fixture
def small_disk(tmp_base):
    """A 256 MiB tmpfs standing for the data disk; unmounted at the end."""
    path = os.path.join(tmp_base, "disk")
    os.makedirs(path)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", path], check=True,
                   timeout=30)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", path], capture_output=True, timeout=30)


def block(writer, index):
    """The deterministic, non-zero content of MiB number `index` of a writer."""
    seed = hashlib.sha256(f"{writer}:{index}".encode()).digest()
    return seed * (MIB // len(seed))


def fill(path, writer, results):
    """Writes MiB after MiB until write() says ENOSPC; then fsync and close,
    which must succeed. Records the bytes write() accepted."""
    accepted = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    error = None
    try:
        index = 0
        while True:
            data = block(writer, index)
            done = 0
            try:
                while done < len(data):
                    done += os.write(fd, data[done:])
            except OSError as e:
                accepted += done
                if e.errno != errno.ENOSPC:
                    error = f"write: {e}"
                break
            accepted += done
            index += 1
        try:
            os.fsync(fd)
        except OSError as e:
            error = f"fsync after {accepted} accepted bytes: {e}"
    finally:
        try:
            os.close(fd)
        except OSError as e:
            error = error or f"close after {accepted} accepted bytes: {e}"
    results[writer] = (accepted, error)


def expected(writer, length):
    out = bytearray()
    index = 0
    while len(out) < length:
        out += block(writer, index)
        index += 1
    return bytes(out[:length])


def test_filling_the_data_disk_fails_only_at_write(small_disk, tmp_base):
    c = Cluster(tmp_base, nodes=2, capacity="0", data_dir=os.path.join(small_disk, "data"))
    c.start()
    try:
        results = {}
        threads = []
        for w in range(4):
            mount = c.n1 if w % 2 == 0 else c.n2
            t = threading.Thread(target=fill, args=(os.path.join(mount, f"w{w}"), w, results))
            t.start()
            threads.append(t)
        for t in threads:
            t.join(timeout=600)
        assert len(results) == 4, "a writer hung"
        total = 0
        for w, (accepted, error) in sorted(results.items()):
            assert error is None, f"writer {w}: {error}"
            total += accepted
        # Most of the disk was usable (64 MiB are kept for the metadata).
        assert total >= 100 * MIB, f"only {total} bytes accepted"
        # Every accepted byte reads back, through the other node too.
        for w, (accepted, _) in results.items():
            other = c.n2 if w % 2 == 0 else c.n1
            with open(os.path.join(other, f"w{w}"), "rb") as f:
                got = f.read()
            assert len(got) == accepted
            assert got == expected(w, accepted), f"writer {w}: data differs"
        # The server survived, and restarts with the default flags on the
        # full disk: the capacity is the recorded one, not re-derived.
        c.server.stop()
        c.server.start()
        with open(os.path.join(c.n1, "w1"), "rb") as f:
            assert f.read(MIB) == block(1, 0)
        # Deleting gives the space back: writing works again.
        for w in range(4):
            os.unlink(os.path.join(c.n1, f"w{w}"))

        def room():
            try:
                fd = os.open(os.path.join(c.n1, "again"), os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    os.write(fd, b"x" * (32 * MIB))
                    os.fsync(fd)
                finally:
                    os.close(fd)
                return True
            except OSError:
                return False

        wait_for(room, timeout=60, what="space to come back after the deletes")
    finally:
        c.stop()
