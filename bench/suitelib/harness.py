"""Processes and mounts of one benchmark run, and their cleanup.

Everything lives under one scratch directory. Every process is started in
its own session (a terminal's Ctrl-C reaches only the suite, which then
tears down in order), every wait has a timeout, and cleanup() unmounts and
stops everything it started, also after a failure, before removing the
scratch directory (never while something is still mounted inside it).
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile

from kit.errors import HarnessError
from kit.keys import use_cluster_keys
from kit.mount import forget, is_mounted, mounts_under, wait_mounted
from kit.ports import free_port
from kit.processes import Proc
from kit.waits import listening, wait_for

# A step of the benchmark failed; the message says which and why. The kit's
# own error, so that a failure inside the kit (a server that exited, a wait
# that timed out) ends a section like one of the bench's.
BenchError = HarnessError

__all__ = ["BenchError", "Harness", "install_signal_handlers", "mounts_under"]

# Lines of a grantfs-mount log shown after its unmount: its warnings and
# errors (glog's W, E and F lines), and what its namespace grants did.
LOG_PROBLEM = re.compile(r"^[WEF]\d{8} ")
LOG_NS_SUMMARY = re.compile(r"^I\d{8} .*\] namespace grants: \d+ changes made here")


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
        # Every process runs with TLS and these certificates (tests/kit/keys.py),
        # unless the suite runs --insecure (GRANTFS_INSECURE=1).
        self.insecure = os.environ.get("GRANTFS_INSECURE") == "1"
        if not self.insecure:
            use_cluster_keys(build)
        self.base = tempfile.mkdtemp(prefix="grantfs-bench.", dir=workdir)
        os.chmod(self.base, 0o755)
        self._procs = []  # every Proc started, in order
        self._owned = []  # topologies (kit Trio) to stop() at cleanup
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
        p = Proc(name, argv, self.path(f"{name}.log"), new_session=True)
        self._procs.append(p)
        return p

    def own(self, topology):
        """topology.stop() at cleanup (after the unmounts, before the
        processes started here: a proxy outlives the servers behind it)."""
        self._owned.append(topology)
        return topology

    # --- servers and proxies ---------------------------------------------------

    def start_server(self, name, capacity, threads=None, timeout=30, insecure=False):
        """A fresh grantfs-server (own data directory); returns once it
        accepts connections. Readiness is the listening port, not a call.
        insecure: without TLS and authentication (--insecure), whatever the
        suite's mode."""
        port = free_port()
        data = self.path(name)
        os.makedirs(data, exist_ok=True)  # the server refuses a missing data directory
        argv = [self.bin("server/grantfs-server"), f"--data_dir={data}",
                f"--listen=127.0.0.1:{port}", f"--capacity={capacity}"]
        if threads is not None:
            argv.append(f"--threads={threads}")
        if insecure:
            argv.append("--insecure")
        p = self.start_process(name, argv)

        def up():
            p.check_alive()
            return listening("127.0.0.1", port)

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
            return listening("127.0.0.1", port)

        wait_for(up, timeout, f"{name} on port {port}")
        return port

    # --- mounts ----------------------------------------------------------------

    def _fuse(self, name, argv, path, timeout=30):
        os.makedirs(path, exist_ok=True)
        p = self.start_process(name, argv)
        self._mounts[path] = p
        wait_mounted(p.popen, path, p.log_path, timeout, name)
        return path

    def mount_grantfs(self, name, server_addr, write_mode="fastwrite", leases="on",
                      insecure=False, ns_grants="off"):
        """A grantfs-mount of the server's root at NAME. leases="off" mounts
        without metadata leases (every lookup, getattr and readdir an RPC,
        cached by the kernel for 1 s); ns_grants="on" with namespace grants
        (docs/namespace-grants.md); insecure: without TLS (--insecure), for a
        server started so."""
        path = self.path(name)
        argv = [self.bin("client/grantfs-mount"), f"{server_addr}:/", path, "-f",
                f"--write_mode={write_mode}", f"--leases={leases}", f"--ns_grants={ns_grants}"]
        if insecure:
            argv.append("--insecure")
        return self._fuse(name, argv, path)

    def mount_passthrough(self, name, src=None):
        """grantfs-passthrough of a fresh local directory (or of `src`, an
        existing one); returns the mount."""
        src = src or self.path(name + "-src")
        path = self.path(name)
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
        forget(path)
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
            if os.path.basename(proc.argv[0]) == "grantfs-mount":
                self._show_log(proc)

    def _show_log(self, proc, limit=8):
        """Notes a mount's warnings and errors, and what its namespace
        grants did, from its log: what went wrong under a benchmark is
        seen without opening the logs (gone with the scratch directory)."""
        try:
            with open(proc.log_path, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return
        problems = sorted((ln for ln in lines if LOG_PROBLEM.match(ln)),
                          key=lambda ln: ln[0] == "W")  # errors first, each in log order
        for ln in problems[:limit]:
            self.progress.note(f"{proc.name} log: {ln}")
        if len(problems) > limit:
            self.progress.note(f"{proc.name} log: {len(problems) - limit} more warnings and "
                               f"errors")
        for ln in lines:
            if LOG_NS_SUMMARY.match(ln):
                self.progress.note(f"{proc.name} log: {ln.split('] ', 1)[1]}")

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
        for t in reversed(self._owned):
            try:
                t.stop()
            except Exception as e:  # keep tearing down the rest
                self.progress.note(f"cleanup: stop {t}: {e}")
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
