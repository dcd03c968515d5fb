"""A replicated GrantFS for the failover drills: a witness W, a primary A and
a replica B (three grantfs-server processes with their own data directories
and logs under the test's directory), mounts that know both A and B, and the
workload processes the test starts, all stopped by stop(), also after a
failure.

    t = Trio(base)                  # on loopback; Trio(base, lab) in netlab namespaces
    t.start()                       # returns once A says "replica state: in sync"
    m = t.mount("node1")            # grantfs-mount A,B:/ base/node1
    node, st = t.primary()          # "A" or "B", and its parsed status
    t.kill9(node); t.restart(node)  # restart = its original command line
    t.wait_in_sync(primary, replica, timeout)

Every server is started with its original command line, always: A keeps
--role=primary after it lost the role; the witness tells it who owns the
epoch and it runs as the replica.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from conftest import (CTL_BIN, MOUNT_BIN, REPO, SERVER_BIN, Mount, _live_mounts, free_port,
                      start_fuse, tail_log, wait_for)

sys.path.insert(0, os.path.join(REPO, "bench"))
from suitelib.drill import parse_status  # noqa: E402

LOG_KEEP_DIR = "/tmp/grantfs-failover-logs"


class Node:
    """One grantfs-server. `wrap` turns an argv into one run in the node's
    network namespace (identity on loopback) for the server itself; `enter`
    does the same for short commands such as grantfsctl."""

    def __init__(self, name, addr, argv, log_path, wrap=None, enter=None, data_dir=None):
        self.name = name
        self.addr = addr
        self.argv = argv
        self.log_path = log_path
        self.data_dir = data_dir
        self.make_data_dir = True  # start() creates it when missing
        self.wrap = wrap or (lambda a: a)
        self.enter = enter or (lambda a: a)
        self.proc = None
        self.expected_down = True

    def start(self):
        # The data directory must exist (an empty one is a new volume); a
        # test that wants it missing or other sets data_dir after start.
        if self.data_dir is not None and self.make_data_dir:
            os.makedirs(self.data_dir, exist_ok=True)
        with open(self.log_path, "a") as log:
            log.write(f"=== {time.strftime('%H:%M:%S')} start: {' '.join(self.argv)}\n")
            log.flush()
            self.proc = subprocess.Popen(self.wrap(self.argv), stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.expected_down = False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def ctl_argv(self, *args):
        return self.enter([CTL_BIN, f"--server={self.addr}", *args])

    def status(self, timeout=5):
        """Parsed `grantfsctl status`, or None when the server does not answer."""
        try:
            r = subprocess.run(self.ctl_argv("status"), capture_output=True, text=True,
                               timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None
        return parse_status(r.stdout) if r.returncode == 0 else None

    def kill9(self):
        self.expected_down = True
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def stop(self):
        """SIGTERM, SIGKILL after 15 s."""
        self.expected_down = True
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)

    def note(self, text):
        """A line in the server's log, so a reader sees what the test did when."""
        with open(self.log_path, "a") as log:
            log.write(f"=== {time.strftime('%H:%M:%S')} test: {text}\n")


class NsMount(Mount):
    """A mount whose daemon runs in another network namespace (nsenter
    --net): it reaches the servers from there, and this test sees it."""

    def __init__(self, server_addr, path, enter, extra=()):
        super().__init__(server_addr, path, extra)
        self.enter = enter

    def start(self):
        self.proc = start_fuse(self.enter([MOUNT_BIN, f"{self.server_addr}:/", self.path, "-f",
                                           *self.extra]), self.path, self.log_path)
        return self


class Trio:
    def __init__(self, base, lab=None, capacity="8G"):
        self.base = base
        self.lab = lab
        nodes = {}
        if lab is None:
            addr = {n: f"127.0.0.1:{free_port()}" for n in "WAB"}
        else:
            addr = {n: f"{lab.ip(n.lower())}:7420" for n in "WAB"}
        data = {n: os.path.join(base, f"data-{n.lower()}") for n in "WAB"}
        argv = {
            "W": [SERVER_BIN, "--role=witness", f"--listen={addr['W']}",
                  f"--data_dir={data['W']}"],
            "A": [SERVER_BIN, "--role=primary", f"--listen={addr['A']}", f"--peer={addr['B']}",
                  f"--witness={addr['W']}", f"--data_dir={data['A']}", f"--capacity={capacity}"],
            "B": [SERVER_BIN, "--role=replica", f"--listen={addr['B']}", f"--peer={addr['A']}",
                  f"--witness={addr['W']}", f"--data_dir={data['B']}", f"--capacity={capacity}"],
        }
        for n in "WAB":
            wrap = enter = None
            if lab is not None:
                host = n.lower()
                wrap = lambda a, h=host: ["ip", "netns", "exec", lab.ns(h), *a]  # noqa: E731
                enter = lambda a, h=host: lab.wrap(h, a)  # noqa: E731
            nodes[n] = Node(n, addr[n], argv[n], os.path.join(base, f"server-{n.lower()}.log"),
                            wrap, enter, data[n])
        self.nodes = nodes
        self.data_dirs = data
        self.mounts = []
        self.workers = []  # Popen of workload processes

    # --- servers -------------------------------------------------------------------

    def __getitem__(self, name):
        return self.nodes[name]

    @property
    def servers(self):
        return f"{self.nodes['A'].addr},{self.nodes['B'].addr}"

    @staticmethod
    def other(name):
        return "B" if name == "A" else "A"

    def start(self, timeout=90):
        self.nodes["W"].start()
        host, port = self.nodes["W"].addr.rsplit(":", 1)
        wait_for(lambda: self.check_alive() or _listening(host, int(port)), 30,
                 "the witness listening")
        self.nodes["A"].start()
        self.nodes["B"].start()
        self.wait_in_sync("A", "B", timeout)
        return self

    def check_alive(self):
        """Raises if a server the test did not stop has exited; else False."""
        for n in self.nodes.values():
            if not n.expected_down and not n.alive():
                raise RuntimeError(f"server {n.name} exited with {n.proc.returncode}:\n"
                                   f"{tail_log(n.log_path)}")
        return False

    def status(self, name, timeout=5):
        return self.nodes[name].status(timeout)

    def statuses(self, names=("A", "B"), timeout=2):
        """{name: parsed status or None}, asked in parallel, one server each."""
        procs = {n: subprocess.Popen(self.nodes[n].ctl_argv("status"), stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                     text=True) for n in names}
        out = {}
        deadline = time.monotonic() + timeout
        for n, p in procs.items():
            try:
                so, _ = p.communicate(timeout=max(0.01, deadline - time.monotonic()))
                out[n] = parse_status(so) if p.returncode == 0 else None
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                out[n] = None
        return out

    def primary(self):
        """(name, status) of the server saying primary at the highest epoch."""
        best = None
        for n, s in self.statuses().items():
            if s and s.get("role") == "primary" and (best is None or
                                                     s["epoch"] > best[1]["epoch"]):
                best = (n, s)
        assert best is not None, f"no server says primary: {self.statuses()}"
        return best

    def wait_status(self, name, pred, timeout, what):
        """Polls the server's status until pred(status) holds; returns it."""
        got = {}

        def ok():
            self.check_alive()
            s = self.nodes[name].status(timeout=2)
            got["s"] = s
            return s is not None and pred(s)

        try:
            wait_for(ok, timeout, f"{name}: {what}")
        except TimeoutError:
            raise TimeoutError(f"{name}: {what}: not within {timeout} s; last status "
                               f"{got.get('s')}") from None
        return got["s"]

    def wait_role(self, name, role, timeout):
        return self.wait_status(name, lambda s: s.get("role") == role, timeout,
                                f"role {role}")

    def wait_in_sync(self, primary, replica, timeout):
        deadline = time.monotonic() + timeout
        self.wait_status(primary, lambda s: s.get("role") == "primary" and
                         s.get("replica state") == "in sync", timeout,
                         "primary with its replica in sync")
        self.wait_status(replica, lambda s: s.get("role") == "replica",
                         max(1.0, deadline - time.monotonic()), "role replica")

    def kill9(self, name):
        self.nodes[name].note("kill -9")
        self.nodes[name].kill9()

    def restart(self, name):
        """The server again, with its original command line."""
        self.nodes[name].start()

    # --- mounts and workloads -----------------------------------------------------------

    def mount(self, name, extra=()):
        m = Mount(self.servers, os.path.join(self.base, name), extra)
        m.start()
        self.mounts.append(m)
        return m.path

    def mount_in(self, host, name, servers, extra=()):
        m = NsMount(servers, os.path.join(self.base, name), lambda a: self.lab.wrap(host, a),
                    extra)
        m.start()
        self.mounts.append(m)
        return m

    def spawn(self, argv, **kw):
        kw.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen(argv, **kw)
        self.workers.append(p)
        return p

    # --- teardown -------------------------------------------------------------------

    def stop(self):
        """Stops everything, fast and whatever the state: workloads and mount
        daemons get SIGKILL (a mount cannot flush to a server that is gone),
        then the servers."""
        for p in self.workers:
            if p.poll() is None:
                p.kill()
        for m in self.mounts:
            try:
                if m.proc is not None:
                    m.kill9()
            except Exception:  # keep tearing down the rest
                subprocess.run(["umount", "-l", m.path], capture_output=True, timeout=60)
                _live_mounts.discard(m.path)
        for p in self.workers:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        for n in self.nodes.values():
            try:
                n.kill9()
            except Exception:
                pass

    def keep_logs(self, test_name):
        """Copies every server and mount log to LOG_KEEP_DIR/<test>; prints
        where, and the end of each server log."""
        dest = os.path.join(LOG_KEEP_DIR, f"{test_name}-{time.strftime('%H%M%S')}")
        os.makedirs(dest, exist_ok=True)
        for name in os.listdir(self.base):
            if name.endswith(".log") or name.endswith(".journal"):
                shutil.copy(os.path.join(self.base, name), dest)
        print(f"\nlogs kept in {dest}")
        for n in self.nodes.values():
            print(f"--- end of server {n.name} log ({n.log_path}):\n{tail_log(n.log_path)}")
        return dest


def _listening(host, port):
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


class RolePoller(threading.Thread):
    """Asks A and B for their status every `interval` s (each in its own
    namespace, in parallel) and keeps the timeline:
    samples = [(t, {"A": (role, epoch) or None, "B": ...})]."""

    def __init__(self, trio, interval=0.1):
        super().__init__(daemon=True)
        self.trio, self.interval = trio, interval
        self.samples = []
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            t = time.monotonic()
            # grantfsctl starts a gRPC channel per call: on a loaded 2-core
            # machine 1 s was sometimes not enough and every sample was None.
            st = self.trio.statuses(timeout=3.0)
            self.samples.append((t, {n: (s.get("role"), s.get("epoch")) if s else None
                                     for n, s in st.items()}))
            self._halt.wait(max(0.0, t + self.interval - time.monotonic()))

    def stop(self):
        self._halt.set()
        self.join(30)

    def first(self, pred):
        """Time of the first sample for which pred(sample dict) holds, or None."""
        return next((t for t, s in self.samples if pred(s)), None)
