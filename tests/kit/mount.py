"""FUSE mounts: started, waited for, and unmounted also after a failure.

Every mount start_fuse() makes is remembered until it is unmounted; what is
left when the Python process exits (a crashed run) is lazily unmounted then.
"""

import atexit
import os
import subprocess

from .build import MOUNT, binary
from .errors import HarnessError
from .processes import kill9, tail_log
from .waits import wait_for

_live_mounts = set()


def _cleanup_mounts():
    for m in list(_live_mounts):
        subprocess.run(["umount", "-l", m], capture_output=True, timeout=30)


atexit.register(_cleanup_mounts)


def forget(path):
    """path is no longer ours to unmount at exit."""
    _live_mounts.discard(path)


def track(path):
    """path is a mount of ours, made by other means (mount(8)): unmounted
    lazily at exit, or by cleanup_mounts_under, unless forgotten first."""
    _live_mounts.add(path)


def cleanup_mounts_under(base):
    """Lazily unmounts every mount of ours under base."""
    for m in list(_live_mounts):
        if m.startswith(base):
            subprocess.run(["umount", "-l", m], capture_output=True, timeout=30)
            _live_mounts.discard(m)


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def mounts_under(base):
    """Mount points at or below base (of anyone), from /proc/self/mountinfo."""
    base = os.path.realpath(base) + "/"
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if (line.split()[4] + "/").startswith(base)]


def force_unmount(path):
    """fusermount3 -u, falling back to a lazy umount."""
    if is_mounted(path):
        r = subprocess.run(["fusermount3", "-u", path], capture_output=True, timeout=60)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True, timeout=60)


def wait_mounted(popen, path, log_path, timeout=20.0, name=None):
    """Returns once `path` is mounted; HarnessError if the daemon exits first."""
    _live_mounts.add(path)
    name = name or os.path.basename(str(popen.args[0]) if isinstance(popen.args, list)
                                    else str(popen.args))

    def up():
        if popen.poll() is not None:
            raise HarnessError(f"{name} exited with {popen.returncode}: {tail_log(log_path)}")
        return is_mounted(path)

    wait_for(up, timeout, f"mount at {path}")


def start_fuse(argv, path, log_path, timeout=20.0):
    """Starts a foreground FUSE daemon serving `path` (created if missing),
    output appended to log_path; returns its Popen once mounted."""
    os.makedirs(path, exist_ok=True)
    with open(log_path, "a") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    wait_mounted(proc, path, log_path, timeout, name=argv[0])
    return proc


class Mount:
    """One grantfs-mount process (foreground) serving `path`, of the servers
    `server_addr` ("HOST:PORT[,HOST:PORT]"), showing directory `root` of the
    volume as its root. Log: path + ".log"."""

    def __init__(self, server_addr, path, extra=(), build=None, root="/"):
        self.server_addr = server_addr
        self.root = root
        self.path = path
        self.extra = list(extra)
        self.build = build
        self.proc = None
        self.log_path = path.rstrip("/") + ".log"

    def argv(self):
        # GRANTFS_MOUNT_FLAGS: flags for every mount of a run (e.g. the whole
        # suite with --ns_grants=on); a test's own flags come after and win.
        return [binary(MOUNT, self.build), f"{self.server_addr}:{self.root}", self.path, "-f",
                *os.environ.get("GRANTFS_MOUNT_FLAGS", "").split(), *self.extra]

    def start(self):
        self.proc = start_fuse(self.argv(), self.path, self.log_path)
        return self

    def unmount(self):
        """fusermount3 -u (lazy umount if busy) and wait for the daemon to exit."""
        if self.proc is None:
            return
        force_unmount(self.path)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        forget(self.path)
        self.proc = None

    def kill9(self):
        """SIGKILL of the daemon, then a lazy umount (a mount cannot flush to
        a server that is gone)."""
        kill9(self.proc)
        subprocess.run(["umount", "-l", self.path], capture_output=True, timeout=60)
        forget(self.path)
        self.proc = None

    def log(self):
        return tail_log(self.log_path)


class NsMount(Mount):
    """A mount whose daemon runs in another network namespace (`enter` wraps
    its argv, e.g. NetLab.wrap): it reaches the servers from there, and this
    process sees the mount."""

    def __init__(self, server_addr, path, enter, extra=(), build=None):
        super().__init__(server_addr, path, extra, build)
        self.enter = enter

    def argv(self):
        return self.enter(super().argv())
