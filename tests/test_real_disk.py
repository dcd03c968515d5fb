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

from kit.build import CTL_BIN
from kit.fsck import assert_offline_fsck_clean
from kit.processes import stop_process
from kit.topology import Standalone, Trio
from kit.waits import wait_for

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


def write_on(fd, writer, index=0, accepted=0, progress=None):
    """Writes MiB `index`, `index + 1`, ... of `writer` until write() fails,
    then fsync and close, which must succeed. Returns (bytes write()
    accepted in all, counting `accepted` from before, error or None).
    progress(n): called after each whole MiB written."""
    error = None
    try:
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
            if progress is not None:
                progress(done)
        try:
            os.fsync(fd)
        except OSError as e:
            error = f"fsync after {accepted} accepted bytes: {e}"
    finally:
        try:
            os.close(fd)
        except OSError as e:
            error = error or f"close after {accepted} accepted bytes: {e}"
    return accepted, error


def fill(path, writer, results):
    """Writes MiB after MiB until write() says ENOSPC; records the bytes
    write() accepted and any error (write_on)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    results[writer] = write_on(fd, writer)


def room(mount):
    """Whether 8 MiB can be written and fsync'd on `mount` now."""
    try:
        with open(os.path.join(mount, "again"), "wb") as f:
            f.write(block(1, 0) * 8)
            f.flush()
            os.fsync(f.fileno())
        return True
    except OSError:
        return False


def join_writers(threads, results):
    """Waits for the 4 writers; each must have ended with no error but
    ENOSPC at write(). Returns the bytes write() accepted in all."""
    for th in threads:
        th.join(timeout=600)
    assert len(results) == 4, "a writer hung"
    total = 0
    for w, (accepted, error) in sorted(results.items()):
        assert error is None, f"writer {w}: {error}"
        total += accepted
    return total


def expected(writer, length):
    out = bytearray()
    index = 0
    while len(out) < length:
        out += block(writer, index)
        index += 1
    return bytes(out[:length])


def test_filling_the_data_disk_fails_only_at_write(small_disk, tmp_base):
    c = Standalone(tmp_base, nodes=2, capacity="0", data_dir=os.path.join(small_disk, "data"))
    c.start()
    try:
        results = {}
        threads = []
        for w in range(4):
            mount = c.n1 if w % 2 == 0 else c.n2
            t = threading.Thread(target=fill, args=(os.path.join(mount, f"w{w}"), w, results))
            t.start()
            threads.append(t)
        total = join_writers(threads, results)
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

        wait_for(lambda: room(c.n1), timeout=60, what="space to come back after the deletes")
    finally:
        c.stop()
    assert_offline_fsck_clean(c.server.data_dir)


def fill_disk(path):
    """Another program (not GrantFS) takes every free byte of the file
    system holding `path`, down to the last 4 KiB. Returns the bytes it
    wrote."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (MIB, 64 << 10, 4 << 10):
            chunk = b"\xa5" * size
            while True:
                try:
                    n = os.write(fd, chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
                written += n
                if n < size:
                    break
        os.fsync(fd)
    finally:
        os.close(fd)
    return written


def fill_behind_a_grant(mount, filler):
    """Writes 4 MiB to mount/w0 (so that the mount holds a grant), lets
    another program fill the file system of `filler`, then writes on until
    write() says ENOSPC; fsync and close must succeed. Returns the bytes
    write() accepted."""
    fd = os.open(os.path.join(mount, "w0"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    accepted = 0
    for index in range(4):
        accepted += os.write(fd, block(0, index))
    os.fsync(fd)
    assert fill_disk(filler) > 0
    accepted, error = write_on(fd, 0, index=4, accepted=accepted)
    assert error is None, error
    assert accepted > 4 * MIB, "the grant let nothing more be written"
    return accepted


def test_another_program_filling_the_disk_loses_nothing_accepted(small_disk, tmp_base):
    """The space GrantFS promised (the mounts' grants, the metadata reserve)
    is held on the data disk, so a program that fills the file system behind
    the server's back cannot take it: what write() accepted is stored, the
    server keeps serving and stops on SIGTERM, and it restarts on the full
    disk."""
    c = Standalone(tmp_base, nodes=2, capacity="0", data_dir=os.path.join(small_disk, "data"))
    c.start()
    filler = os.path.join(small_disk, "filler")
    try:
        # The mount writes on into its grant until write() says ENOSPC.
        accepted = fill_behind_a_grant(c.n1, filler)
        with open(os.path.join(c.n2, "w0"), "rb") as f:
            got = f.read()
        assert len(got) == accepted
        assert got == expected(0, accepted)
        # Metadata still changes on the full disk (its reserve is held too).
        os.mkdir(os.path.join(c.n2, "dir"))
        with open(os.path.join(c.n2, "dir", "small"), "wb") as f:
            f.write(b"")
        # SIGTERM stops the server cleanly on the full disk, and it restarts.
        assert stop_process(c.server.proc) == 0, c.server.log()
        c.server.start()
        with open(os.path.join(c.n1, "w0"), "rb") as f:
            assert f.read() == got
        # The other program lets go: writing works again, with no operator action.
        os.unlink(filler)

        wait_for(lambda: room(c.n1), timeout=60,
                 what="space to come back after the filler went away")
    finally:
        c.stop()
    assert_offline_fsck_clean(c.server.data_dir)


@pytest.fixture
def trio_disks(tmp_base):
    """Two 256 MiB tmpfs, mounted where a Trio keeps the data of A and B;
    unmounted at the end."""
    disks = {}
    for n in "ab":
        path = os.path.join(tmp_base, f"data-{n}")
        os.makedirs(path)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", path], check=True,
                       timeout=30)
        disks[n.upper()] = path
    try:
        yield disks
    finally:
        for path in disks.values():
            subprocess.run(["umount", "-l", path], capture_output=True, timeout=30)


def test_another_program_filling_the_replicas_disk_loses_nothing_accepted(trio_disks, tmp_base):
    """The replica's data disk holds what the primary promised too (its own
    space hold, grown before a grant is answered), so a program that fills
    it behind the servers' backs takes none of it: the mount writes on into
    its grant until ENOSPC at write(), fsync and close succeed, the replica
    stays in sync, and after a kill -9 of the primary every accepted byte
    reads back from the replica. Before the replica had a hold, it gave up
    the stream at its first full write and the primary went on alone."""
    t = Trio(tmp_base, capacity="0")
    filler = os.path.join(trio_disks["B"], "filler")
    try:
        t.start()
        m1, m2 = t.mount("node1"), t.mount("node2")
        accepted = fill_behind_a_grant(m1, filler)
        name, st = t.primary()
        assert name == "A" and st["replica_state"] == "in sync", st
        # The status shows the replica's full disk (its room is what it holds).
        assert st["replica_disk_room_bytes"] < st["disk_room_bytes"], st
        with open(os.path.join(m2, "w0"), "rb") as f:
            got = f.read()
        assert len(got) == accepted
        assert got == expected(0, accepted)
        # Metadata still changes with the replica's disk full (its reserve is held).
        os.mkdir(os.path.join(m2, "dir"))
        with open(os.path.join(m2, "dir", "small"), "wb") as f:
            f.write(b"")
        name, st = t.primary()
        assert name == "A" and st["replica_state"] == "in sync", st
        # The replica has every accepted byte: it takes over and serves them.
        t.kill9("A")
        wait_for(lambda: (t.status("B") or {}).get("role") == "primary", timeout=30,
                 what="B to take over")
        with open(os.path.join(m1, "w0"), "rb") as f:
            assert f.read() == got
        assert os.path.isfile(os.path.join(m1, "dir", "small"))
        # The other program lets go: writing works again, with no operator action.
        os.unlink(filler)
        wait_for(lambda: room(m2), timeout=60,
                 what="space to come back after the filler went away")
        t.stop()
        assert_offline_fsck_clean(t.data_dirs["B"])
    except BaseException:
        t.keep_logs("test_another_program_filling_the_replicas_disk_loses_nothing_accepted")
        raise
    finally:
        t.stop()


def test_filling_the_data_disks_of_a_trio_with_a_kill9_of_the_primary(trio_disks, tmp_base):
    """The same fill on witness + primary + replica, each server's data on a
    256 MiB tmpfs of its own, default capacity, and a kill -9 of the primary
    when about a third is written: the writers pause, go on with the replica,
    get ENOSPC only at write(), fsync and close succeed, every accepted byte
    reads back from the new primary, and its metadata is clean."""
    t = Trio(tmp_base, capacity="0")
    try:
        t.start()
        mounts = [t.mount("node1"), t.mount("node2")]
        results, progress = {}, [0]
        lock = threading.Lock()

        def count(n):
            with lock:
                progress[0] += n

        def fill_counting(w):
            fd = os.open(os.path.join(mounts[w % 2], f"w{w}"),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            results[w] = write_on(fd, w, progress=count)

        threads = [threading.Thread(target=fill_counting, args=(w,)) for w in range(4)]
        for th in threads:
            th.start()
        wait_for(lambda: progress[0] >= 64 * MIB or len(results) == 4, timeout=300,
                 what="64 MiB written")
        assert len(results) < 4, f"the writers ended before the kill: {results}"
        t.kill9("A")
        killed_at = progress[0]
        total = join_writers(threads, results)
        print(f"accepted {total / MIB:.1f} MiB, {killed_at / MIB:.0f} MiB before the kill")
        assert total >= 100 * MIB, f"only {total} bytes accepted"
        name, _ = t.primary()
        assert name == "B"
        for w, (accepted, _) in results.items():
            with open(os.path.join(mounts[(w + 1) % 2], f"w{w}"), "rb") as f:
                got = f.read()
            assert len(got) == accepted, f"writer {w}: {len(got)} bytes, {accepted} accepted"
            assert got == expected(w, accepted), f"writer {w}: data differs"
        r = subprocess.run([CTL_BIN, f"--server={t.nodes['B'].addr}", "fsck"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        # Deleting gives the space back on the new primary.
        for w in range(4):
            os.unlink(os.path.join(mounts[0], f"w{w}"))
        wait_for(lambda: room(mounts[1]), timeout=60, what="space to come back after the deletes")
        t.stop()
        assert_offline_fsck_clean(t.data_dirs["B"])
    except BaseException:
        t.keep_logs("test_filling_the_data_disks_of_a_trio_with_a_kill9_of_the_primary")
        raise
    finally:
        t.stop()
