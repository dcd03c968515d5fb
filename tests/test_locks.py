"""File locks that hold across nodes: the server is the lock manager.

Lock holders are separate processes (/usr/bin/python3 -c HOLDER) so that they
can be told to unlock, close or be killed; the competing lock attempts run in
the test process itself through the other mount.
"""

import errno
import fcntl
import os
import select
import signal
import struct
import subprocess
import time

import pytest

from treesnap import poll_until

PY = "/usr/bin/python3"
FLOCK_FMT = "hhqqi4x"  # struct flock on x86-64: 32 bytes
CONFLICT = (errno.EAGAIN, errno.EACCES)

HOLDER = r"""
import errno, fcntl, os, struct, sys
path, kind, mode, start, length, wait = sys.argv[1:7]
start, length, wait = int(start), int(length), wait == "wait"
FMT = "hhqqi4x"
fd = os.open(path, os.O_RDWR)
try:
    if kind == "posix":
        t = fcntl.F_WRLCK if mode == "ex" else fcntl.F_RDLCK
        cmd = fcntl.F_SETLKW if wait else fcntl.F_SETLK
        fcntl.fcntl(fd, cmd, struct.pack(FMT, t, os.SEEK_SET, start, length, 0))
    else:
        op = fcntl.LOCK_EX if mode == "ex" else fcntl.LOCK_SH
        fcntl.flock(fd, op if wait else op | fcntl.LOCK_NB)
except OSError as e:
    print("error", e.errno, flush=True)
    sys.exit(1)
print("locked", flush=True)
for line in sys.stdin:
    c = line.strip()
    if c == "unlock":
        if kind == "posix":
            fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack(FMT, fcntl.F_UNLCK, 0, start, length, 0))
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
        print("unlocked", flush=True)
    elif c == "close":
        os.close(fd)
        print("closed", flush=True)
    elif c == "exit":
        break
"""


class Holder:
    """A python process that takes one lock and then obeys stdin commands."""

    def __init__(self, path, kind="posix", mode="ex", start=0, length=0, wait=False):
        self.proc = subprocess.Popen(
            [PY, "-c", HOLDER, path, kind, mode, str(start), str(length),
             "wait" if wait else "nowait"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self.pid = self.proc.pid

    def readline(self, timeout):
        """The next line of output, or None if none came within `timeout` s."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        buf = b""
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                return None
            c = os.read(fd, 1)
            if not c:
                return buf.decode() or "EOF"
            buf += c
        return buf.decode().strip()

    def expect(self, line, timeout=10.0):
        got = self.readline(timeout)
        assert got == line, f"holder {self.pid}: expected {line!r}, got {got!r}"

    def send(self, cmd):
        self.proc.stdin.write(cmd.encode() + b"\n")
        self.proc.stdin.flush()

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


@pytest.fixture
def holders(cluster):
    """Starts lock holders; kills them all before the cluster goes down."""
    started = []

    def start(*args, expect="locked", **kwargs):
        h = Holder(*args, **kwargs)
        started.append(h)
        if expect is not None:
            h.expect(expect)
        return h

    yield start
    for h in started:
        h.stop()


@pytest.fixture
def files(cluster):
    """Creates a file on node1; returns (path on node1, path on node2)."""
    def make(name="f", size=4096):
        p1 = os.path.join(cluster.n1, name)
        with open(p1, "wb") as f:
            f.write(b"\0" * size)
        return p1, os.path.join(cluster.n2, name)

    return make


class Fd:
    """An fd of the test process on one mount, closed at the end of `with`."""

    def __init__(self, path, flags=os.O_RDWR):
        self.fd = os.open(path, flags)

    def __enter__(self):
        return self.fd

    def __exit__(self, *exc):
        os.close(self.fd)


def setlk(fd, ltype, start=0, length=0, wait=False):
    fcntl.fcntl(fd, fcntl.F_SETLKW if wait else fcntl.F_SETLK,
                struct.pack(FLOCK_FMT, ltype, os.SEEK_SET, start, length, 0))


def getlk(fd, ltype, start=0, length=0):
    out = fcntl.fcntl(fd, fcntl.F_GETLK,
                      struct.pack(FLOCK_FMT, ltype, os.SEEK_SET, start, length, 0))
    l_type, l_whence, l_start, l_len, l_pid = struct.unpack(FLOCK_FMT, out)
    return {"type": l_type, "whence": l_whence, "start": l_start, "len": l_len, "pid": l_pid}


def expect_conflict(fn, *args, errnos=CONFLICT):
    with pytest.raises(OSError) as info:
        fn(*args)
    assert info.value.errno in errnos, (
        f"expected one of {[errno.errorcode[e] for e in errnos]}, got "
        f"{errno.errorcode.get(info.value.errno, info.value.errno)}")


def try_lock(fd, ltype, start=0, length=0):
    """Takes a non-blocking POSIX lock; True if granted, False on a conflict."""
    try:
        setlk(fd, ltype, start, length)
        return True
    except OSError as e:
        if e.errno in CONFLICT:
            return False
        raise


class TestPosixLocks:
    def test_exclusive_lock_on_node1_blocks_node2(self, cluster, files, holders):
        p1, p2 = files()
        holders(p1, "posix", "ex")
        with Fd(p2) as fd:
            expect_conflict(fcntl.lockf, fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            expect_conflict(setlk, fd, fcntl.F_WRLCK)
            expect_conflict(setlk, fd, fcntl.F_RDLCK)
            expect_conflict(setlk, fd, fcntl.F_WRLCK, 4095, 1)

    def test_exclusive_lock_conflicts_on_the_same_node(self, cluster, files, holders):
        p1, _ = files()
        holders(p1, "posix", "ex")
        with Fd(p1) as fd:
            expect_conflict(setlk, fd, fcntl.F_WRLCK)

    def test_getlk_reports_the_conflicting_write_lock(self, cluster, files, holders):
        p1, p2 = files()
        h = holders(p1, "posix", "ex")
        with Fd(p2) as fd:
            got = getlk(fd, fcntl.F_RDLCK)
            assert got == {"type": fcntl.F_WRLCK, "whence": os.SEEK_SET, "start": 0, "len": 0,
                           "pid": h.pid}

    def test_getlk_reports_the_conflicting_read_lock(self, cluster, files, holders):
        p1, p2 = files()
        h = holders(p1, "posix", "sh")
        with Fd(p2) as fd:
            got = getlk(fd, fcntl.F_WRLCK)
            assert got["type"] == fcntl.F_RDLCK
            assert (got["start"], got["len"], got["pid"]) == (0, 0, h.pid)
            # A read lock does not conflict with a read lock.
            assert getlk(fd, fcntl.F_RDLCK)["type"] == fcntl.F_UNLCK

    def test_getlk_without_locks_is_unlck(self, cluster, files):
        _, p2 = files()
        with Fd(p2) as fd:
            assert getlk(fd, fcntl.F_WRLCK)["type"] == fcntl.F_UNLCK

    def test_shared_locks_coexist(self, cluster, files, holders):
        p1, p2 = files()
        holders(p1, "posix", "sh")
        holders(p2, "posix", "sh")  # a second reader on node2
        with Fd(p2) as fd:
            setlk(fd, fcntl.F_RDLCK)
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        with Fd(p2) as fd:
            expect_conflict(setlk, fd, fcntl.F_WRLCK)

    def test_close_on_node1_releases(self, cluster, files, holders):
        p1, p2 = files()
        h = holders(p1, "posix", "ex")
        with Fd(p2) as fd:
            expect_conflict(setlk, fd, fcntl.F_WRLCK)
            h.send("close")
            h.expect("closed")
            assert h.proc.poll() is None  # alive: the close released it, not the exit
            setlk(fd, fcntl.F_WRLCK)
            # ... and now node1 is the one kept out.
            h2 = holders(p1, "posix", "ex", expect=None)
            line = h2.readline(10.0)
            assert line in (f"error {errno.EAGAIN}", f"error {errno.EACCES}"), line

    def test_unlock_on_node1_releases(self, cluster, files, holders):
        p1, p2 = files()
        h = holders(p1, "posix", "ex")
        with Fd(p2) as fd:
            expect_conflict(setlk, fd, fcntl.F_WRLCK)
            h.send("unlock")
            h.expect("unlocked")
            setlk(fd, fcntl.F_WRLCK)

    def test_blocking_lock_on_node2_waits_for_node1(self, cluster, files, holders):
        p1, p2 = files()
        h = holders(p1, "posix", "ex")
        waiter = holders(p2, "posix", "ex", wait=True, expect=None)
        assert waiter.readline(0.3) is None, "waiter got the lock while node1 held it"
        assert waiter.proc.poll() is None
        h.send("unlock")
        h.expect("unlocked")
        assert waiter.readline(5.0) == "locked", "waiter did not get the lock within 5 s"
        # The waiter holds it now.
        with Fd(p1) as fd:
            expect_conflict(setlk, fd, fcntl.F_WRLCK)

    def test_blocking_lock_waits_for_close(self, cluster, files, holders):
        p1, p2 = files()
        h = holders(p1, "posix", "ex")
        waiter = holders(p2, "posix", "sh", wait=True, expect=None)
        assert waiter.readline(0.3) is None
        h.send("close")
        h.expect("closed")
        assert waiter.readline(5.0) == "locked"

    def test_disjoint_byte_ranges_do_not_conflict(self, cluster, files, holders):
        p1, p2 = files()
        holders(p1, "posix", "ex", start=0, length=100)
        with Fd(p2) as fd:
            setlk(fd, fcntl.F_WRLCK, 100, 100)  # [100, 200)
            setlk(fd, fcntl.F_WRLCK, 1000, 0)  # [1000, EOF and beyond)
        with Fd(p2) as fd:
            expect_conflict(setlk, fd, fcntl.F_WRLCK, 50, 100)  # [50, 150) overlaps
            expect_conflict(setlk, fd, fcntl.F_RDLCK, 99, 1)
            expect_conflict(setlk, fd, fcntl.F_WRLCK, 0, 0)
            assert getlk(fd, fcntl.F_WRLCK, 100, 50)["type"] == fcntl.F_UNLCK
            got = getlk(fd, fcntl.F_WRLCK, 90, 20)
            assert (got["type"], got["start"], got["len"]) == (fcntl.F_WRLCK, 0, 100)

    def test_range_unlock_splits_a_lock(self, cluster, files, holders):
        p1, p2 = files()
        with Fd(p1) as fd1:
            setlk(fd1, fcntl.F_WRLCK, 0, 300)
            setlk(fd1, fcntl.F_UNLCK, 100, 100)  # holds [0,100) and [200,300)
            with Fd(p2) as fd2:
                assert try_lock(fd2, fcntl.F_WRLCK, 100, 100)
            with Fd(p2) as fd2:
                assert not try_lock(fd2, fcntl.F_WRLCK, 50, 10)
            with Fd(p2) as fd2:
                assert not try_lock(fd2, fcntl.F_WRLCK, 250, 10)
                assert try_lock(fd2, fcntl.F_WRLCK, 300, 10)

    def test_lock_of_dead_process_is_released(self, cluster, files, holders):
        p1, p2 = files()
        h = holders(p1, "posix", "ex")
        with Fd(p2) as fd:
            expect_conflict(setlk, fd, fcntl.F_WRLCK)
            h.kill9()
            start = time.monotonic()
            assert poll_until(lambda: try_lock(fd, fcntl.F_WRLCK), 5.0, interval=0.02), (
                "lock of a killed holder still held after 5 s")
            print(f"lock free {time.monotonic() - start:.3f} s after kill -9")


class TestFlock:
    def test_flock_exclusive_conflicts_across_nodes(self, cluster, files, holders):
        p1, p2 = files()
        holders(p1, "flock", "ex")
        with Fd(p2) as fd:
            expect_conflict(fcntl.flock, fd, fcntl.LOCK_EX | fcntl.LOCK_NB,
                            errnos=(errno.EWOULDBLOCK,))
            expect_conflict(fcntl.flock, fd, fcntl.LOCK_SH | fcntl.LOCK_NB,
                            errnos=(errno.EWOULDBLOCK,))

    def test_flock_shared_coexist(self, cluster, files, holders):
        p1, p2 = files()
        holders(p1, "flock", "sh")
        with Fd(p2) as fd:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        with Fd(p2) as fd:
            expect_conflict(fcntl.flock, fd, fcntl.LOCK_EX | fcntl.LOCK_NB,
                            errnos=(errno.EWOULDBLOCK,))

    def test_flock_unlock_releases(self, cluster, files, holders):
        p1, p2 = files()
        h = holders(p1, "flock", "ex")
        with Fd(p2) as fd:
            expect_conflict(fcntl.flock, fd, fcntl.LOCK_EX | fcntl.LOCK_NB,
                            errnos=(errno.EWOULDBLOCK,))
            h.send("unlock")
            h.expect("unlocked")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def test_flock_close_releases(self, cluster, files, holders):
        p1, p2 = files()
        h = holders(p1, "flock", "ex")
        with Fd(p2) as fd:
            h.send("close")
            h.expect("closed")
            # FUSE unlocks a flock with the RELEASE the kernel sends after the
            # last close, asynchronously: the lock may outlive close() by a
            # few milliseconds (docs/protocol.md). Bounded here by 2 s.
            deadline = time.monotonic() + 2.0
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.005)

    def test_blocking_flock_waits(self, cluster, files, holders):
        p1, p2 = files()
        h = holders(p1, "flock", "ex")
        waiter = holders(p2, "flock", "ex", wait=True, expect=None)
        assert waiter.readline(0.3) is None
        h.send("unlock")
        h.expect("unlocked")
        assert waiter.readline(5.0) == "locked"

    def test_flock_does_not_conflict_with_fcntl_lock(self, cluster, files, holders):
        p1, p2 = files()
        holders(p1, "flock", "ex")
        with Fd(p2) as fd:
            setlk(fd, fcntl.F_WRLCK)  # a POSIX lock is independent of the flock
            fcntl.lockf(fd, fcntl.LOCK_UN)

    def test_fcntl_lock_does_not_conflict_with_flock(self, cluster, files, holders):
        p1, p2 = files()
        holders(p1, "posix", "ex")
        with Fd(p2) as fd:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def test_flock_of_dead_process_is_released(self, cluster, files, holders):
        p1, p2 = files()
        h = holders(p1, "flock", "ex")
        with Fd(p2) as fd:
            h.kill9()

            def free():
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    return False
            assert poll_until(free, 5.0, interval=0.02), (
                "flock of a killed holder still held after 5 s")
