"""A clean Debian 12 system in a directory, booted under systemd-nspawn with
systemd as its PID 1: where the .deb is installed with apt-get and its units
started with systemctl, as on a fresh machine (tests/test_deb_system.py).

The root is made by debootstrap (minbase, plus systemd and dbus) from the
mirror this machine's apt uses. Made once per machine into PRISTINE (a stamp
file says it is whole) and copied for each use, so a second run does not
download it again. Everything runs inside the container; the host only
starts it, enters it (nsenter) and removes it.
"""

import fcntl
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


def is_init(pid):
    """Whether `pid` is PID 1 of a PID namespace of its own (a container's
    init), as /proc/PID/status says (NSpid: HOST_PID ... 1)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    ids = line.split()[1:]
                    return len(ids) > 1 and ids[-1] == "1"
    except OSError:
        pass
    return False


def pristine_root():
    """The debootstrapped root, made now if it is not there whole (one maker
    at a time: scripts/test.sh starts one while the build runs)."""
    os.makedirs(os.path.dirname(PRISTINE), exist_ok=True)
    with open(PRISTINE + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _make_pristine()


def _make_pristine():
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

    def create(self, src=None):
        """A copy of `src` (default: the pristine root)."""
        src = src or pristine_root()
        run(["cp", "-a", src, self.root], timeout=600)
        stamp = os.path.join(self.root, STAMP)
        if os.path.exists(stamp):
            os.remove(stamp)
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

    def boot(self, timeout=120, netns=None):
        """Starts systemd in the copy: with a network of its own (only its
        loopback), or in network namespace `netns` (/run/netns/NAME: a
        NetLab host, a machine on the lab's bridge)."""
        net = [f"--network-namespace-path=/run/netns/{netns}"] if netns else ["--private-network"]
        argv = ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--boot", *net,
                "--bind=/dev/fuse", f"--machine={self.name}", "-D", self.root]
        self.leader = None
        if getattr(self, "log", None):
            self.log.close()
        self.log = open(self.log_path, "a")
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
                # nspawn forks a short-lived helper first; the container's
                # init is the child that is PID 1 in a namespace of its own.
                for kid in kids:
                    if is_init(int(kid)):
                        self.leader = int(kid)
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

    def kill9(self):
        """The machine dies: its PID 1 is killed (SIGKILL), and with it every
        process of the container at once (the kernel ends a PID namespace
        with its init). The root stays: boot() starts it again."""
        if self.nspawn is None or self.nspawn.poll() is not None:
            return
        if self.leader is not None and is_init(self.leader):
            try:
                os.kill(self.leader, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.nspawn.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.nspawn.pid, signal.SIGKILL)
            self.nspawn.wait(timeout=30)

    def halt(self):
        """Powers the container off (kills it after 60 s)."""
        if self.nspawn is None or self.nspawn.poll() is not None:
            return
        if self.leader is not None and is_init(self.leader):
            subprocess.run(["nsenter", f"--target={self.leader}", "--mount", "--pid",
                            "--", "systemctl", "poweroff"], capture_output=True,
                           timeout=30, stdin=subprocess.DEVNULL)
        try:
            self.nspawn.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill9()

    def stop(self):
        """halt(), then unmounts what is left below the root and removes it."""
        try:
            self.halt()
        finally:
            if getattr(self, "log", None):
                self.log.close()
            with open("/proc/self/mountinfo") as f:
                below = [line.split()[4] for line in f
                         if line.split()[4].startswith(self.root + "/")]
            for m in sorted(below, key=len, reverse=True):
                subprocess.run(["umount", "-l", m], capture_output=True)
            shutil.rmtree(self.root, ignore_errors=True)
