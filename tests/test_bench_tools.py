"""The benchmark tools: grantfs-passthrough (the FUSE yardstick) and
grantfs-latency-proxy (network delay without netem), and GrantFS through
the proxy.

Must run as root (/dev/fuse is root-only here). Every process started here
is killed and every mount unmounted at teardown, also when a test fails.
"""

import errno
import hashlib
import os
import signal
import stat
import socket
import subprocess
import threading
import time

import pytest

from kit.build import PASSTHROUGH_BIN, PROXY_BIN
from kit.mount import Mount, force_unmount, is_mounted, start_fuse
from kit.ports import free_port
from kit.processes import stop_process, tail_log
from kit.server import Server
from kit.waits import wait_for
from treesnap import sha256_of as sha256_file

MIB = 1 << 20
IO_TIMEOUT = 30  # seconds for any one socket operation


def pattern_block(i):
    """1 MiB of non-zero bytes, different for every i."""
    seed = hashlib.sha256(i.to_bytes(8, "little")).digest()
    return bytes(b | 1 for b in seed) * (MIB // len(seed))


# --- grantfs-passthrough --------------------------------------------------------------


class Passthrough:
    """grantfs-passthrough SOURCE MOUNTPOINT -f, as a child process."""

    def __init__(self, source, path, extra=()):
        self.source = source
        self.path = path
        self.extra = list(extra)
        self.proc = None
        self.log_path = path.rstrip("/") + ".log"

    def start(self):
        os.makedirs(self.source, exist_ok=True)
        self.proc = start_fuse([PASSTHROUGH_BIN, self.source, self.path, "-f"] + self.extra,
                               self.path, self.log_path)
        return self

    def stop(self):
        force_unmount(self.path)
        if self.proc is not None:
            stop_process(self.proc)

    def log(self):
        return tail_log(self.log_path)


@pytest.fixture
def passthrough(tmp_base):
    p = Passthrough(os.path.join(tmp_base, "src"), os.path.join(tmp_base, "mnt"))
    try:
        yield p.start()
    finally:
        p.stop()


def test_passthrough_large_file_checksums(passthrough):
    mnt, src = passthrough.path, passthrough.source
    expected = hashlib.sha256()
    fd = os.open(os.path.join(mnt, "big"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for i in range(32):
            block = pattern_block(i)
            expected.update(block)
            assert os.write(fd, block) == MIB  # one 1 MiB FUSE write each
        os.fsync(fd)
    finally:
        os.close(fd)
    assert os.stat(os.path.join(mnt, "big")).st_size == 32 * MIB
    assert os.stat(os.path.join(src, "big")).st_size == 32 * MIB
    assert sha256_file(os.path.join(mnt, "big")) == expected.hexdigest()
    assert sha256_file(os.path.join(src, "big")) == expected.hexdigest()
    # Overwrite in the middle and read it back through both paths.
    with open(os.path.join(mnt, "big"), "r+b") as f:
        f.seek(5 * MIB + 3)
        f.write(b"\xee" * 10000)
    with open(os.path.join(src, "big"), "rb") as f:
        f.seek(5 * MIB + 3)
        assert f.read(10000) == b"\xee" * 10000
    assert sha256_file(os.path.join(mnt, "big")) == sha256_file(os.path.join(src, "big"))


def test_passthrough_namespace_ops(passthrough):
    mnt, src = passthrough.path, passthrough.source
    os.mkdir(os.path.join(mnt, "d"))
    assert os.path.isdir(os.path.join(src, "d"))
    names = {f"file-{i:04d}-{'x' * 40}" for i in range(300)}  # several readdir buffers
    for n in names:
        with open(os.path.join(mnt, "d", n), "w") as f:
            f.write(n)
    assert set(os.listdir(os.path.join(mnt, "d"))) == names
    with os.scandir(os.path.join(mnt, "d")) as it:
        assert all(e.is_file() for e in it)

    # rename: a file across directories, then a whole directory.
    os.mkdir(os.path.join(mnt, "e"))
    os.rename(os.path.join(mnt, "d", "file-0000-" + "x" * 40), os.path.join(mnt, "e", "moved"))
    assert not os.path.exists(os.path.join(src, "d", "file-0000-" + "x" * 40))
    with open(os.path.join(src, "e", "moved")) as f:
        assert f.read() == "file-0000-" + "x" * 40
    os.rename(os.path.join(mnt, "e"), os.path.join(mnt, "e2"))
    assert os.listdir(os.path.join(mnt, "e2")) == ["moved"]
    assert sorted(os.listdir(mnt)) == ["d", "e2"]

    # setattr: mode, size, times.
    p = os.path.join(mnt, "e2", "moved")
    os.chmod(p, 0o600)
    os.truncate(p, 4)
    os.utime(p, ns=(1_000_000_000_123, 2_000_000_000_456))
    st, sst = os.stat(p), os.stat(os.path.join(src, "e2", "moved"))
    assert (st.st_mode & 0o7777, st.st_size, st.st_mtime_ns) == (0o600, 4, 2_000_000_000_456)
    assert (sst.st_mode & 0o7777, sst.st_size, sst.st_mtime_ns) == (0o600, 4, 2_000_000_000_456)
    with open(p, "r+b") as f:  # ftruncate through an open file
        f.truncate(2)
    assert os.stat(os.path.join(src, "e2", "moved")).st_size == 2

    # unlink and rmdir, and the errors they must give.
    with pytest.raises(OSError) as e:
        os.rmdir(os.path.join(mnt, "e2"))
    assert e.value.errno == errno.ENOTEMPTY
    os.unlink(p)
    os.rmdir(os.path.join(mnt, "e2"))
    for n in names - {"file-0000-" + "x" * 40}:
        os.unlink(os.path.join(mnt, "d", n))
    assert os.listdir(os.path.join(mnt, "d")) == []
    os.rmdir(os.path.join(mnt, "d"))
    assert os.listdir(mnt) == [] and os.listdir(src) == []
    with pytest.raises(FileNotFoundError):
        os.stat(os.path.join(mnt, "d"))
    assert os.statvfs(mnt).f_blocks > 0


def test_passthrough_xattrs(passthrough):
    """xattrs pass through (ls -l asks for two of every file: a yardstick
    without them would skip those round trips)."""
    mnt, src = passthrough.path, passthrough.source
    p = os.path.join(mnt, "f")
    with open(p, "w") as f:
        f.write("x")
    os.setxattr(p, "user.a", b"value-a")
    os.setxattr(p, "user.b", b"")
    assert os.getxattr(os.path.join(src, "f"), "user.a") == b"value-a"
    assert os.getxattr(p, "user.a") == b"value-a"
    assert os.getxattr(p, "user.b") == b""
    assert {"user.a", "user.b"} <= set(os.listxattr(p))
    with pytest.raises(OSError) as e:
        os.setxattr(p, "user.a", b"again", os.XATTR_CREATE)
    assert e.value.errno == errno.EEXIST
    os.removexattr(p, "user.a")
    with pytest.raises(OSError) as e:
        os.getxattr(p, "user.a")
    assert e.value.errno == errno.ENODATA
    assert "user.a" not in os.listxattr(os.path.join(src, "f"))
    # A value larger than Python's first buffer: a short buffer is ERANGE,
    # then the size query, then the read.
    os.setxattr(p, "user.big", b"v" * 1000)
    assert os.getxattr(p, "user.big") == b"v" * 1000
    # A symlink's own xattrs have no race-free path.
    os.symlink("f", os.path.join(src, "l"))  # (the passthrough makes no symlinks)
    with pytest.raises(OSError) as e:
        os.getxattr(os.path.join(mnt, "l"), "security.x", follow_symlinks=False)
    assert e.value.errno == errno.ENOTSUP


def test_passthrough_tree_larger_than_its_inode_fds(tmp_base):
    """More inodes than O_PATH fds it may keep (a 20,000-file tree in a
    container that caps open files at 20,000): the least recently used are
    closed and reopened by file handle, every operation still works, and the
    daemon's open fds stay bounded."""
    p = Passthrough(os.path.join(tmp_base, "src"), os.path.join(tmp_base, "mnt"),
                    extra=["--max_inode_fds=64"])
    p.start()
    try:
        mnt = p.path
        paths = []
        for d in range(10):
            os.mkdir(os.path.join(mnt, f"d{d}"))
            for i in range(60):
                paths.append(os.path.join(mnt, f"d{d}", f"f{i}"))
                with open(paths[-1], "w") as f:
                    f.write(paths[-1])
        for _ in range(2):  # the second pass reopens what the first closed
            for q in paths:
                assert os.stat(q).st_size == len(q)
                with open(q) as f:
                    assert f.read() == q
            assert sum(len(os.listdir(os.path.join(mnt, f"d{d}"))) for d in range(10)) == 600
        os.setxattr(paths[0], "user.k", b"v")
        assert os.getxattr(paths[0], "user.k") == b"v"
        os.chmod(paths[1], 0o600)
        assert stat.S_IMODE(os.stat(paths[1]).st_mode) == 0o600
        os.rename(paths[2], os.path.join(mnt, "d9", "moved"))
        with open(os.path.join(mnt, "d9", "moved")) as f:
            assert f.read() == paths[2]
        for q in paths[3:]:
            os.unlink(q)
        fds = len(os.listdir(f"/proc/{p.proc.pid}/fd"))
        assert fds < 64 + 32, f"{fds} fds open with --max_inode_fds=64"
    finally:
        p.stop()


def test_passthrough_unmount_ends_process(passthrough):
    with open(os.path.join(passthrough.path, "f"), "wb") as f:
        f.write(b"data")
    r = subprocess.run(["fusermount3", "-u", passthrough.path], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert passthrough.proc.wait(timeout=30) == 0, passthrough.log()
    assert not is_mounted(passthrough.path)
    with open(os.path.join(passthrough.source, "f"), "rb") as f:
        assert f.read() == b"data"


def test_passthrough_sigterm_unmounts(passthrough):
    passthrough.proc.send_signal(signal.SIGTERM)
    assert passthrough.proc.wait(timeout=30) == 0, passthrough.log()
    assert not is_mounted(passthrough.path)


def _pids_running(binary, arg):
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if argv and argv[0] == binary.encode() and arg.encode() in argv and state != "Z":
            pids.append(int(pid))
    return pids


def test_passthrough_background_mode(tmp_base):
    src, mnt = os.path.join(tmp_base, "src"), os.path.join(tmp_base, "mnt")
    os.makedirs(src)
    os.makedirs(mnt)
    try:
        # Returns once mounted; the daemon keeps serving.
        r = subprocess.run([PASSTHROUGH_BIN, src, mnt], capture_output=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert is_mounted(mnt)
        with open(os.path.join(mnt, "f"), "w") as f:
            f.write("bg")
        with open(os.path.join(src, "f")) as f:
            assert f.read() == "bg"
        assert _pids_running(PASSTHROUGH_BIN, mnt)
        subprocess.run(["fusermount3", "-u", mnt], check=True, timeout=60)
        wait_for(lambda: not _pids_running(PASSTHROUGH_BIN, mnt), timeout=30,
                 what="background passthrough to exit")
    finally:
        force_unmount(mnt)
        for pid in _pids_running(PASSTHROUGH_BIN, mnt):
            os.kill(pid, signal.SIGKILL)

    # A mount that cannot happen fails in the foreground process.
    r = subprocess.run([PASSTHROUGH_BIN, src, os.path.join(tmp_base, "missing")],
                       capture_output=True, timeout=30)
    assert r.returncode != 0


# --- grantfs-latency-proxy ------------------------------------------------------------


class EchoServer:
    """A TCP echo server on 127.0.0.1: each connection gets back what it
    sends, and is closed once the client has finished sending."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stopping = False
        self.conns = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._echo, args=(c,), daemon=True).start()

    @staticmethod
    def _echo(c):
        c.settimeout(IO_TIMEOUT)
        try:
            while True:
                data = c.recv(MIB)
                if not data:
                    break
                c.sendall(data)
        except OSError:
            pass
        finally:
            c.close()

    def stop(self):
        self.stopping = True
        self.thread.join(timeout=5)
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


class Proxy:
    """grantfs-latency-proxy from a free port to `target_port`."""

    def __init__(self, target_port, delay_ms, log_dir):
        self.port = free_port()
        self.target_port = target_port
        self.delay_ms = delay_ms
        self.log_path = os.path.join(log_dir, f"proxy-{self.port}.log")
        self.proc = None

    def start(self):
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                [PROXY_BIN, f"--listen=127.0.0.1:{self.port}",
                 f"--target=127.0.0.1:{self.target_port}", f"--delay_ms={self.delay_ms}"],
                stdout=log, stderr=subprocess.STDOUT)

        def listening():
            if self.proc.poll() is not None:
                raise RuntimeError(f"proxy exited with {self.proc.returncode}: {self.log()}")
            with open("/proc/net/tcp") as f:  # LISTEN is state 0A
                return any(line.split()[1].endswith(f":{self.port:04X}") and
                           line.split()[3] == "0A" for line in f.readlines()[1:])

        wait_for(listening, what=f"proxy on port {self.port}")
        return self

    def stop(self):
        return stop_process(self.proc) if self.proc is not None else None

    def log(self):
        return tail_log(self.log_path)


@pytest.fixture
def echo():
    e = EchoServer()
    yield e
    e.stop()


@pytest.fixture
def make_proxy(tmp_base):
    started = []

    def make(target_port, delay_ms):
        p = Proxy(target_port, delay_ms, tmp_base)
        started.append(p)
        return p.start()

    yield make
    for p in started:
        p.stop()


def connect(port):
    c = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


def recv_exactly(c, n):
    buf = bytearray()
    while len(buf) < n:
        data = c.recv(min(MIB, n - len(buf)))
        if not data:
            raise AssertionError(f"connection closed after {len(buf)} of {n} bytes")
        buf.extend(data)
    return bytes(buf)


def echo_through(port, payload):
    """Sends payload (from a thread, so both directions flow at once) and
    returns what comes back, and the seconds it took."""
    c = connect(port)
    errors = []

    def send():
        try:
            c.sendall(payload)
        except OSError as e:
            errors.append(e)

    t0 = time.monotonic()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        got = recv_exactly(c, len(payload))
    finally:
        sender.join(timeout=IO_TIMEOUT)
        c.close()
    assert not errors, errors
    return got, time.monotonic() - t0


def test_proxy_adds_delay_each_way(echo, make_proxy):
    proxy = make_proxy(echo.port, 50)
    c = connect(proxy.port)
    try:
        for i in range(5):
            t0 = time.monotonic()
            c.sendall(bytes([i + 1]))
            assert recv_exactly(c, 1) == bytes([i + 1])
            rtt = time.monotonic() - t0
            assert rtt >= 0.100, f"round trip {rtt * 1000:.1f} ms through a 50 ms proxy"
            assert rtt < 1.0, f"round trip {rtt * 1000:.1f} ms"
    finally:
        c.close()


def test_proxy_bulk_byte_exact(echo, make_proxy):
    proxy = make_proxy(echo.port, 50)
    payload = os.urandom(8 * MIB)
    got, _ = echo_through(proxy.port, payload)
    assert got == payload


def test_proxy_throughput_not_bound_by_delay(echo, make_proxy):
    # Read-sleep-write with 256 KiB reads would need 128 * 50 ms = 6.4 s for
    # 32 MiB each way; pipelined forwarding needs little more than 100 ms.
    proxy = make_proxy(echo.port, 50)
    payload = os.urandom(32 * MIB)
    got, seconds = echo_through(proxy.port, payload)
    assert got == payload
    assert seconds < 3.0, f"32 MiB echoed in {seconds:.2f} s"


def test_proxy_zero_delay_forwards(echo, make_proxy):
    proxy = make_proxy(echo.port, 0)
    payload = os.urandom(8 * MIB)
    got, _ = echo_through(proxy.port, payload)
    assert got == payload
    c = connect(proxy.port)
    try:
        t0 = time.monotonic()
        c.sendall(b"ping")
        assert recv_exactly(c, 4) == b"ping"
        assert time.monotonic() - t0 < 0.5
    finally:
        c.close()


def test_proxy_many_connections(echo, make_proxy):
    proxy = make_proxy(echo.port, 5)
    results, errors = {}, []

    def one(i):
        try:
            payload = os.urandom(256 * 1024 + i)
            got, _ = echo_through(proxy.port, payload)
            results[i] = got == payload
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert results == {i: True for i in range(32)}


def test_proxy_half_close_flushes_then_closes(echo, make_proxy):
    # The client stops sending: everything queued still arrives, then the
    # echo server sees EOF, closes, and that close reaches the client.
    proxy = make_proxy(echo.port, 20)
    c = connect(proxy.port)
    try:
        payload = os.urandom(3 * MIB)
        sender = threading.Thread(target=lambda: (c.sendall(payload), c.shutdown(socket.SHUT_WR)),
                                  daemon=True)
        sender.start()
        assert recv_exactly(c, len(payload)) == payload
        assert c.recv(1) == b""
        sender.join(timeout=IO_TIMEOUT)
    finally:
        c.close()


def test_proxy_unreachable_target_closes_client(make_proxy):
    proxy = make_proxy(free_port(), 5)  # nothing listens there
    c = connect(proxy.port)
    try:
        try:
            assert c.recv(1) == b""
        except ConnectionResetError:
            pass
    finally:
        c.close()
    # And the proxy keeps serving.
    assert proxy.proc.poll() is None


def test_proxy_sigterm_exits(echo, make_proxy):
    proxy = make_proxy(echo.port, 5)
    c = connect(proxy.port)  # an open connection does not hold it up
    try:
        c.sendall(b"x")
        assert recv_exactly(c, 1) == b"x"
        assert proxy.stop() == 0, proxy.log()
    finally:
        c.close()


# --- GrantFS through the proxy ----------------------------------------------------------


def test_grantfs_through_latency_proxy(tmp_base):
    server = Server(os.path.join(tmp_base, "data"), capacity="1G")
    proxy = Proxy(server.port, 5, tmp_base)
    # Without namespace grants: the mkdir timed below is a call.
    mount = Mount(f"127.0.0.1:{proxy.port}", os.path.join(tmp_base, "node1"), ["--ns_grants=off"])
    try:
        server.start()
        proxy.start()
        mount.start()
        data = b"".join(pattern_block(i) for i in range(4)) + b"tail"
        path = os.path.join(mount.path, "through-proxy")
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with open(path, "rb") as f:
            assert f.read() == data
        os.mkdir(os.path.join(mount.path, "dir"))
        assert sorted(os.listdir(mount.path)) == ["dir", "through-proxy"]
        # Each metadata RPC crosses the proxy: at least 2 * 5 ms.
        t0 = time.monotonic()
        os.mkdir(os.path.join(mount.path, "timed"))
        assert time.monotonic() - t0 >= 0.010
    finally:
        try:
            mount.unmount()
        finally:
            proxy.stop()
            server.stop()
