"""End-to-end test harness: real grantfs-server processes and real FUSE mounts.

Every test that takes the `cluster` fixture gets a fresh server (own data
directory, own loopback port) and two mounts standing for two nodes,
`cluster.n1` and `cluster.n2`. Everything is torn down after the test, also
when it fails; mounts left by a crashed run are lazily unmounted at exit.
Must run as root (/dev/fuse is root-only here).
"""

import atexit
import errno
import os
import pickle
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("GRANTFS_BUILD", os.path.join(REPO, "build"))
SERVER_BIN = os.path.join(BUILD, "server", "grantfs-server")
MOUNT_BIN = os.path.join(BUILD, "client", "grantfs-mount")
CTL_BIN = os.path.join(BUILD, "client", "grantfsctl")

_live_mounts = set()


def _cleanup_mounts():
    for m in list(_live_mounts):
        subprocess.run(["umount", "-l", m], capture_output=True, timeout=30)


atexit.register(_cleanup_mounts)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def wait_for(pred, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")


def stop_process(proc):
    """SIGTERM, then SIGKILL if it lingers; returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
    return proc.returncode


def force_unmount(path):
    """fusermount3 -u, falling back to a lazy umount."""
    if is_mounted(path):
        r = subprocess.run(["fusermount3", "-u", path], capture_output=True, timeout=60)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True, timeout=60)


def tail_log(path):
    try:
        with open(path) as f:
            return f.read()[-4000:]
    except OSError:
        return ""


def start_fuse(argv, path, log_path):
    """Starts a foreground FUSE daemon serving `path`; returns once mounted."""
    os.makedirs(path, exist_ok=True)
    with open(log_path, "a") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    _live_mounts.add(path)

    def up():
        if proc.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited with {proc.returncode}: {tail_log(log_path)}")
        return is_mounted(path)

    wait_for(up, what=f"mount at {path}")
    return proc


class Server:
    """One grantfs-server process on 127.0.0.1:<port>."""

    def __init__(self, data_dir, port=None, capacity="4G", lease_ms=10000, extra=(),
                 log_dir=None):
        self.data_dir = data_dir
        self.port = port or free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.capacity = capacity
        self.lease_ms = lease_ms
        self.extra = list(extra)
        self.proc = None
        self.log_path = os.path.join(log_dir or os.path.dirname(data_dir),
                                     f"server-{self.port}.log")

    def start(self):
        # The server refuses a missing data directory (a data disk that is
        # not mounted); an empty one is a new volume.
        os.makedirs(self.data_dir, exist_ok=True)
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [SERVER_BIN, f"--data_dir={self.data_dir}", f"--listen={self.addr}",
             f"--capacity={self.capacity}", f"--lease_ms={self.lease_ms}", *self.extra],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_for(self.ready, what=f"server on {self.addr}")
        return self

    def ready(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log()}")
        return subprocess.run([CTL_BIN, f"--server={self.addr}", "status"],
                              capture_output=True, timeout=10).returncode == 0

    def ctl(self, *args):
        r = subprocess.run([CTL_BIN, f"--server={self.addr}", *args],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self):
        if self.proc:
            stop_process(self.proc)

    def log(self):
        return tail_log(self.log_path)


class Mount:
    """One grantfs-mount process (foreground) serving `path`."""

    def __init__(self, server_addr, path, extra=()):
        self.server_addr = server_addr
        self.path = path
        self.extra = list(extra)
        self.proc = None
        self.log_path = path.rstrip("/") + ".log"

    def start(self):
        self.proc = start_fuse([MOUNT_BIN, f"{self.server_addr}:/", self.path, "-f", *self.extra],
                               self.path, self.log_path)
        return self

    def unmount(self):
        if self.proc is None:
            return
        force_unmount(self.path)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        _live_mounts.discard(self.path)
        self.proc = None

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        subprocess.run(["umount", "-l", self.path], capture_output=True, timeout=60)
        _live_mounts.discard(self.path)
        self.proc = None

    def log(self):
        return tail_log(self.log_path)


class Cluster:
    """A server and `nodes` mounts of it under one temporary directory."""

    def __init__(self, base, nodes=2, capacity="4G", lease_ms=10000, mount_extra=(),
                 server_extra=(), data_dir=None):
        self.base = base
        self.server = Server(data_dir or os.path.join(base, "data"), capacity=capacity,
                             lease_ms=lease_ms, extra=server_extra, log_dir=base)
        self.mount_extra = list(mount_extra)
        self.mounts = [Mount(self.server.addr, os.path.join(base, f"node{i + 1}"),
                             self.mount_extra) for i in range(nodes)]

    def start(self):
        self.server.start()
        for m in self.mounts:
            m.start()
        return self

    @property
    def n1(self):
        return self.mounts[0].path

    @property
    def n2(self):
        return self.mounts[1].path

    def stop(self):
        for m in self.mounts:
            try:
                m.unmount()
            except Exception:  # keep tearing down the rest
                pass
        self.server.stop()

    def restart_server(self):
        """kill -9 the server and start it again on the same port and data."""
        self.server.kill9()
        self.server.start()


@pytest.fixture
def tmp_base():
    base = tempfile.mkdtemp(prefix="grantfs-e2e-")
    os.chmod(base, 0o755)  # other users must reach the mounts inside
    yield base
    _cleanup_mounts_under(base)
    shutil.rmtree(base, ignore_errors=True)


def _cleanup_mounts_under(base):
    for m in list(_live_mounts):
        if m.startswith(base):
            subprocess.run(["umount", "-l", m], capture_output=True, timeout=30)
            _live_mounts.discard(m)


def running_cluster(base, **kwargs):
    """Yields a started Cluster(base, **kwargs) and stops it afterwards, also
    when starting it failed: the body of a cluster fixture."""
    c = Cluster(base, **kwargs)
    try:
        c.start()
    except Exception:
        c.stop()
        raise
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def cluster(tmp_base):
    yield from running_cluster(tmp_base)


def as_user(uid, gid, fn, groups=()):
    """Runs fn() in a child process with the given ids.

    Returns fn's result, or raises OSError with the child's errno.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups(list(groups))
            os.setgid(gid)
            os.setuid(uid)
            out = ("ok", fn())
        except OSError as e:
            out = ("err", e.errno)
        except BaseException as e:  # report, never run the rest of pytest in the child
            out = ("exc", repr(e))
        try:
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data)
    if kind == "err":
        raise OSError(value, os.strerror(value))
    if kind == "exc":
        raise RuntimeError(value)
    return value


NOBODY = 65534
NOGROUP = 65534


def expect_errno(err, fn, *args, **kwargs):
    """Asserts that fn(*args) fails with exactly `err`."""
    with pytest.raises(OSError) as info:
        fn(*args, **kwargs)
    assert info.value.errno == err, (
        f"expected {errno.errorcode[err]}, got "
        f"{errno.errorcode.get(info.value.errno, info.value.errno)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the test item (item.rep_setup,
    item.rep_call), so a fixture's teardown can tell whether the test failed
    (and, say, keep the server logs)."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
