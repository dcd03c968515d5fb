"""A clean Debian 12 system in a directory, booted under systemd-nspawn with
systemd as its PID 1: where the .deb is installed with apt-get and its units
started with systemctl, as on a fresh machine (tests/test_deb_system.py).

The root is made by debootstrap (minbase, plus systemd and dbus) from the
mirror this machine's apt uses. Made once per machine into PRISTINE (a stamp
file says it is whole) and copied for each use, so a second run does not
download it again. Everything runs inside the container; the host only
starts it, enters it (nsenter) and removes it.
"""

import glob
import os
import shutil
import signal
import subprocess
import time

from kit.errors import HarnessError

SUITE = "bookworm"
PRISTINE = os.environ.get("GRANTFS_DEB_ROOT", "/var/tmp/grantfs-debian12-root")
STAMP = ".grantfs-root-complete"
# What a login shell of the container's root has: nothing of the test
# run's environment (GRANTFS_TLS_DIR, GRANTFS_INSECURE, ...) leaks in.
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8",
             "TERM": "dumb"}


def mirror():
    """The Debian mirror of this machine's apt sources (deb822 or one-line)."""
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        with open(path) as f:
            for line in f:
                if line.startswith("URIs:"):
                    for uri in line.split()[1:]:
                        if uri.rstrip("/").endswith("/debian"):
                            return uri
    if os.path.exists("/etc/apt/sources.list"):
        with open("/etc/apt/sources.list") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[0] == "deb" and parts[1].rstrip("/").endswith("/debian"):
                    return parts[1]
    return "http://deb.debian.org/debian"


def run(argv, timeout=600, check=True, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, **kw)
    if check and r.returncode != 0:
        raise HarnessError(f"{' '.join(argv)}: exit {r.returncode}\n{r.stdout[-3000:]}\n"
                           f"{r.stderr[-3000:]}")
    return r


def pristine_root():
    """The debootstrapped root, made now if it is not there whole."""
    if os.path.exists(os.path.join(PRISTINE, STAMP)):
        return PRISTINE
    shutil.rmtree(PRISTINE, ignore_errors=True)
    tmp = PRISTINE + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    run(["debootstrap", "--variant=minbase", "--include=systemd,systemd-sysv,dbus",
         SUITE, tmp, mirror()], timeout=1200)
    with open(os.path.join(tmp, STAMP), "w") as f:
        f.write(f"{SUITE} from {mirror()}\n")
    os.rename(tmp, PRISTINE)
    return PRISTINE


class Container:
    """A copy of the pristine root at `root`; install() runs apt-get in it
    (with the host's network), boot() starts systemd in it (a network of its
    own: only its loopback), sh() runs a command inside, stop() powers it off
    and removes the copy."""

    def __init__(self, root, name="grantfs-ct"):
        self.root = root
        self.name = name
        self.nspawn = None  # Popen of the booted container
        self.leader = None  # its PID 1, as the host sees it
        self.log_path = root + ".console.log"

    def create(self):
        src = pristine_root()
        run(["cp", "-a", src, self.root], timeout=600)
        os.remove(os.path.join(self.root, STAMP))
        # The machine id is made at first boot; the hostname names it.
        with open(os.path.join(self.root, "etc/hostname"), "w") as f:
            f.write(self.name + "\n")
        return self

    def once(self, script, binds=(), timeout=900):
        """`sh -c script` in the container, not booted, with the host's
        network (apt-get reaches the mirror)."""
        argv = ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--pipe",
                f"--machine={self.name}", "-D", self.root]
        for b in binds:
            argv.append(f"--bind-ro={b}")
        return run(argv + ["sh", "-c", script], timeout=timeout,
                   env=dict(CLEAN_ENV, SYSTEMD_LOG_LEVEL="warning"))

    def boot(self, timeout=120):
        argv = ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--boot",
                "--private-network", "--bind=/dev/fuse", f"--machine={self.name}",
                "-D", self.root]
        self.log = open(self.log_path, "w")
        self.nspawn = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while self.leader is None:
            if self.nspawn.poll() is not None:
                raise HarnessError(f"systemd-nspawn exited {self.nspawn.returncode}:\n"
                                   f"{self.console()}")
            for task in glob.glob(f"/proc/{self.nspawn.pid}/task/*/children"):
                with open(task) as f:
                    kids = f.read().split()
                if kids:
                    self.leader = int(kids[0])
            if time.monotonic() > deadline:
                raise HarnessError(f"the container did not start:\n{self.console()}")
            time.sleep(0.1)
        # systemd is up when is-system-running answers running (or degraded:
        # a unit this minimal system cannot run, e.g. one that needs udev).
        while True:
            r = self.sh("systemctl is-system-running --wait", check=False,
                        timeout=max(1, deadline - time.monotonic()))
            state = r.stdout.strip()
            if state in ("running", "degraded"):
                return state
            if time.monotonic() > deadline or self.nspawn.poll() is not None:
                raise HarnessError(f"systemd did not come up ({state}):\n{self.console()}")
            time.sleep(0.5)

    def console(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def sh(self, script, check=True, timeout=120):
        """`sh -c script` inside the booted container (all its namespaces)."""
        argv = ["nsenter", f"--target={self.leader}", "--mount", "--uts", "--ipc", "--net",
                "--pid", "--cgroup", "--", "/bin/sh", "-c", script]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL, env=CLEAN_ENV)
        print(f"[{self.name}]$ {script} -> {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        if check and r.returncode != 0:
            raise AssertionError(f"in the container: {script}: exit {r.returncode}\n"
                                 f"{r.stdout}\n{r.stderr}")
        return r

    def stop(self):
        """Powers the container off (kills it after 60 s), unmounts what is
        left below the root and removes it."""
        try:
            if self.nspawn is not None and self.nspawn.poll() is None:
                if self.leader is not None:
                    subprocess.run(["nsenter", f"--target={self.leader}", "--mount", "--pid",
                                    "--", "systemctl", "poweroff"], capture_output=True,
                                   timeout=30, stdin=subprocess.DEVNULL)
                try:
                    self.nspawn.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(self.nspawn.pid, signal.SIGKILL)
                    self.nspawn.wait(timeout=30)
        finally:
            if getattr(self, "log", None):
                self.log.close()
            with open("/proc/self/mountinfo") as f:
                below = [line.split()[4] for line in f
                         if line.split()[4].startswith(self.root + "/")]
            for m in sorted(below, key=len, reverse=True):
                subprocess.run(["umount", "-l", m], capture_output=True)
            shutil.rmtree(self.root, ignore_errors=True)
