"""Processes and mounts of one benchmark run, and their cleanup.

Everything lives under one scratch directory. Every process is started in
its own session (a terminal's Ctrl-C reaches only the suite, which then
tears down in order), every wait has a timeout, and cleanup() unmounts and
stops everything it started, also after a failure, before removing the
scratch directory (never while something is still mounted inside it).
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


class BenchError(Exception):
    """A step of the benchmark failed; the message says which and why."""


def tail(path, n=2000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def mounts_under(base):
    base = os.path.realpath(base) + "/"
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if (line.split()[4] + "/").startswith(base)]


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")


def listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class Proc:
    """A child process with its log file."""

    def __init__(self, name, argv, log_path):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self):
        return self.popen.poll() is None

    def check_alive(self):
        if not self.alive():
            raise BenchError(f"{self.name} exited with {self.popen.returncode}: "
                             f"{tail(self.log_path)}")

    def stop(self, timeout=15):
        if self.alive():
            self.popen.terminate()
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=timeout)
        return self.popen.returncode


class Server:
    def __init__(self, proc, port, data_dir):
        self.proc = proc
        self.port = port
        self.addr = f"127.0.0.1:{port}"
        self.data_dir = data_dir


class Harness:
    """Starts servers, proxies and mounts under `workdir` and stops them."""

    def __init__(self, build, workdir, progress):
        self.build = build
        self.progress = progress
        self.base = tempfile.mkdtemp(prefix="grantfs-bench.", dir=workdir)
        os.chmod(self.base, 0o755)
        self._procs = []  # every Proc started, in order
        self._mounts = {}  # path -> Proc (None for kernel mounts such as tmpfs)

    def bin(self, rel):
        return os.path.join(self.build, rel)

    def path(self, *parts):
        return os.path.join(self.base, *parts)

    def run(self, argv, timeout, what, cwd=None):
        """Runs a command to completion; its stdout, or BenchError naming
        `what` with the end of its output."""
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{what}: no result after {timeout:.0f} s ({' '.join(argv)})")
        if r.returncode != 0:
            raise BenchError(f"{what}: exit {r.returncode}: {(r.stderr or r.stdout)[-1500:]}")
        return r.stdout

    def start_process(self, name, argv):
        """Starts argv in its own session, output to NAME.log (appended to, so
        a restarted process keeps one log); stopped by cleanup()."""
        p = Proc(name, argv, self.path(f"{name}.log"))
        self._procs.append(p)
        return p

    # --- servers and proxies ---------------------------------------------------

    def start_server(self, name, capacity, threads=None, timeout=30):
        """A fresh grantfs-server (own data directory); returns once it
        accepts connections. Readiness is the listening port, not a call:
        a server with one thread refuses every call."""
        port = free_port()
        data = self.path(name)
        os.makedirs(data, exist_ok=True)  # the server refuses a missing data directory
        argv = [self.bin("server/grantfs-server"), f"--data_dir={data}",
                f"--listen=127.0.0.1:{port}", f"--capacity={capacity}"]
        if threads is not None:
            argv.append(f"--threads={threads}")
        p = self.start_process(name, argv)

        def up():
            p.check_alive()
            return listening(port)

        wait_for(up, timeout, f"{name} on port {port}")
        return Server(p, port, data)

    def stop(self, proc_or_server):
        p = getattr(proc_or_server, "proc", proc_or_server)
        p.stop()

    def start_proxy(self, name, target_port, delay_ms, timeout=20):
        port = free_port()
        p = self.start_process(name, [self.bin("bench/grantfs-latency-proxy"),
                                      f"--listen=127.0.0.1:{port}",
                                      f"--target=127.0.0.1:{target_port}",
                                      f"--delay_ms={delay_ms}"])

        def up():
            p.check_alive()
            return listening(port)

        wait_for(up, timeout, f"{name} on port {port}")
        return port

    # --- mounts ----------------------------------------------------------------

    def _fuse(self, name, argv, path, timeout=30):
        os.makedirs(path, exist_ok=True)
        p = self.start_process(name, argv)
        self._mounts[path] = p

        def up():
            p.check_alive()
            return is_mounted(path)

        wait_for(up, timeout, f"{name} mounted at {path}")
        return path

    def mount_grantfs(self, name, server_addr, write_mode="fastwrite"):
        path = self.path(name)
        return self._fuse(name, [self.bin("client/grantfs-mount"), f"{server_addr}:/", path, "-f",
                                 f"--write_mode={write_mode}"], path)

    def mount_passthrough(self, name):
        """grantfs-passthrough of a fresh local directory; returns the mount."""
        src, path = self.path(name + "-src"), self.path(name)
        os.makedirs(src, exist_ok=True)
        return self._fuse(name, [self.bin("bench/grantfs-passthrough"), src, path, "-f"], path)

    def mount_tmpfs(self, name, size="4g"):
        path = self.path(name)
        os.makedirs(path, exist_ok=True)
        self.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "grantfs-bench", path],
                 30, f"mount tmpfs at {path}")
        self._mounts[path] = None
        return path

    def local_dir(self, name):
        path = self.path(name)
        os.makedirs(path, exist_ok=True)
        return path

    def unmount(self, path):
        """Unmounts (fusermount3 -u or umount, lazily if busy) and waits for
        the daemon to exit."""
        proc = self._mounts.pop(path, None)
        if is_mounted(path):
            cmd = ["fusermount3", "-u", path] if proc is not None else ["umount", path]
            r = subprocess.run(cmd, capture_output=True, timeout=60)
            if r.returncode != 0:
                subprocess.run(["umount", "-l", path], capture_output=True, timeout=60)
        if proc is not None:
            try:
                proc.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.stop()

    # --- teardown --------------------------------------------------------------

    def cleanup(self):
        """Unmounts everything, stops every process, removes the scratch
        directory. Safe to call more than once; never raises. A second
        Ctrl-C or SIGTERM does not cut it short."""
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for path in reversed(list(self._mounts)):
            try:
                self.unmount(path)
            except Exception as e:  # keep tearing down the rest
                self.progress.note(f"cleanup: unmount {path}: {e}")
        for p in reversed(self._procs):
            try:
                p.stop()
            except Exception as e:
                self.progress.note(f"cleanup: stop {p.name}: {e}")
        left = mounts_under(self.base)
        for m in left:
            subprocess.run(["umount", "-l", m], capture_output=True, timeout=60)
        left = mounts_under(self.base)
        if left:
            self.progress.note(f"cleanup: still mounted, {self.base} left in place: {left}")
            return
        shutil.rmtree(self.base, ignore_errors=True)


def install_signal_handlers():
    """SIGTERM and SIGHUP end the run like Ctrl-C does: by unwinding, so
    the harness cleans up."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)
