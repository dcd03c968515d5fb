"""The shapes a test or benchmark runs GrantFS in.

    Standalone(base, nodes=2)     one server, `nodes` mounts of it (n1, n2)
    Trio(base)                    witness W, primary A, replica B; mounts of A,B
    Trio(base, lab=NetLab(...))   the same, each server in a network namespace

Everything a topology starts lives under `base` (data directories, logs,
mount points) and is stopped by stop(), also after a failure.
"""

import os
import shutil
import signal
import subprocess
import threading
import time

from .build import CTL, SERVER, binary
from .errors import HarnessError, WaitTimeout
from .mount import Mount, NsMount, forget
from .ports import free_port
from .processes import tail_log
from .server import Server, parse_status, statuses
from .waits import listening, wait_for

LOG_KEEP_DIR = "/tmp/grantfs-failover-logs"


class Standalone:
    """A server and `nodes` mounts of it under one directory."""

    def __init__(self, base, nodes=2, capacity="4G", lease_ms=10000, mount_extra=(),
                 server_extra=(), data_dir=None, build=None):
        self.base = base
        self.server = Server(data_dir or os.path.join(base, "data"), capacity=capacity,
                             lease_ms=lease_ms, extra=server_extra, log_dir=base, build=build)
        self.mount_extra = list(mount_extra)
        self.mounts = [Mount(self.server.addr, os.path.join(base, f"node{i + 1}"),
                             self.mount_extra, build) for i in range(nodes)]

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


def running(topology):
    """Starts `topology`, yields it, and stops it afterwards, also when
    starting it failed: the body of a fixture."""
    try:
        topology.start()
    except Exception:
        topology.stop()
        raise
    try:
        yield topology
    finally:
        topology.stop()


def running_standalone(base, **kwargs):
    """running(Standalone(base, **kwargs))."""
    yield from running(Standalone(base, **kwargs))


class Node:
    """One grantfs-server of a Trio, always started with its original
    command line. `wrap` turns an argv into one run in the node's network
    namespace (identity on loopback) for the server itself; `enter` does the
    same for short commands such as grantfsctl."""

    def __init__(self, name, addr, argv, log_path, wrap=None, enter=None, data_dir=None,
                 new_session=False, build=None, tag="test"):
        self.name = name
        self.addr = addr
        self.argv = argv
        self.log_path = log_path
        self.data_dir = data_dir
        self.make_data_dir = True  # start() creates it when missing
        self.wrap = wrap or (lambda a: a)
        self.enter = enter or (lambda a: a)
        self.new_session = new_session
        self.build = build
        self.tag = tag
        self.proc = None  # Popen
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
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=self.new_session)
        self.expected_down = False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def ctl_argv(self, *args):
        return self.enter([binary(CTL, self.build), f"--server={self.addr}", *args])

    def status(self, timeout=5):
        """`grantfsctl status --json` of this server (kit.server.parse_status),
        or None when it does not answer."""
        try:
            r = subprocess.run(self.ctl_argv("--json", "status"), capture_output=True,
                               text=True, timeout=timeout, stdin=subprocess.DEVNULL)
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
        """A line in the server's log, timestamped like glog's, so a reader
        sees what the test (or drill) did when beside what the server did."""
        now = time.time()
        with open(self.log_path, "a") as log:
            log.write(f"=== {time.strftime('%Y%m%d %H:%M:%S', time.localtime(now))}."
                      f"{int(now % 1 * 1e6):06d} {self.tag}: {text}\n")


class Trio:
    """A replicated GrantFS: a witness W, a primary A and a replica B (three
    grantfs-server processes with their own data directories and logs under
    `base`), mounts that know both A and B, and the workload processes the
    caller starts, all stopped by stop(), also after a failure.

        t = Trio(base)                  # on loopback; Trio(base, lab) in netlab namespaces
        t.start()                       # returns once A says replica_state "in sync"
        m = t.mount("node1")            # grantfs-mount A,B:/ base/node1
        node, st = t.primary()          # "A" or "B", and its status (a dict)
        t.kill9(node); t.restart(node)  # restart = its original command line
        t.wait_in_sync(primary, replica, timeout)

    Every server is started with its original command line, always: A keeps
    --role=primary after it lost the role; the witness tells it who owns the
    epoch and it runs as the replica.

    Files: <prefix>data-<n> and <prefix>server-<n>.log (n = w, a, b).
    peer_via(node, addr) -> addr: how the other server reaches `node` (the
    bench puts a latency proxy there); clients and the witness reach it
    directly. new_session: servers in sessions of their own (the bench).
    tag: the word note() writes before its text. server_extra: {node: [flags]}
    added to that server's command line.
    """

    def __init__(self, base, lab=None, capacity="8G", prefix="", peer_via=None,
                 new_session=False, build=None, tag="test", server_extra=None):
        self.base = base
        self.lab = lab
        self.build = build
        nodes = {}
        if lab is None:
            addr = {n: f"127.0.0.1:{free_port()}" for n in "WAB"}
        else:
            addr = {n: f"{lab.ip(n.lower())}:7420" for n in "WAB"}
        peer = dict(addr)
        if peer_via is not None:
            for n in "AB":
                peer[n] = peer_via(n, addr[n])
        data = {n: os.path.join(base, f"{prefix}data-{n.lower()}") for n in "WAB"}
        server = binary(SERVER, build)
        argv = {
            "W": [server, "--role=witness", f"--listen={addr['W']}", f"--data_dir={data['W']}"],
            "A": [server, "--role=primary", f"--listen={addr['A']}", f"--peer={peer['B']}",
                  f"--witness={addr['W']}", f"--data_dir={data['A']}", f"--capacity={capacity}"],
            "B": [server, "--role=replica", f"--listen={addr['B']}", f"--peer={peer['A']}",
                  f"--witness={addr['W']}", f"--data_dir={data['B']}", f"--capacity={capacity}"],
        }
        for n, flags in (server_extra or {}).items():
            argv[n] += list(flags)
        for n in "WAB":
            wrap = enter = None
            if lab is not None:
                host = n.lower()
                wrap = lambda a, h=host: ["ip", "netns", "exec", lab.ns(h), *a]  # noqa: E731
                enter = lambda a, h=host: lab.wrap(h, a)  # noqa: E731
            nodes[n] = Node(n, addr[n], argv[n],
                            os.path.join(base, f"{prefix}server-{n.lower()}.log"), wrap, enter,
                            data[n], new_session, build, tag)
        self.nodes = nodes
        self.data_dirs = data
        self.mounts = []
        self.workers = []  # Popen of workload processes

    # --- servers -------------------------------------------------------------------

    def __getitem__(self, name):
        return self.nodes[name]

    @property
    def servers(self):
        """The mounts' server list: "A,B"."""
        return f"{self.nodes['A'].addr},{self.nodes['B'].addr}"

    @staticmethod
    def other(name):
        return "B" if name == "A" else "A"

    def start(self, timeout=90):
        self.nodes["W"].start()
        host, port = self.nodes["W"].addr.rsplit(":", 1)
        wait_for(lambda: self.check_alive() or listening(host, int(port)), 30,
                 "the witness listening")
        self.nodes["A"].start()
        self.nodes["B"].start()
        self.wait_in_sync("A", "B", timeout)
        return self

    def check_alive(self):
        """Raises HarnessError if a server nobody stopped has exited; else False."""
        for n in self.nodes.values():
            if not n.expected_down and not n.alive():
                raise HarnessError(f"server {n.name} exited with {n.proc.returncode}:\n"
                                   f"{tail_log(n.log_path)}")
        return False

    def status(self, name, timeout=5):
        return self.nodes[name].status(timeout)

    def statuses(self, names=("A", "B"), timeout=2):
        """{name: status or None}, asked in parallel, one server each."""
        return statuses({n: self.nodes[n].ctl_argv("--json", "status") for n in names}, timeout)

    def primary(self):
        """(name, status) of the server saying primary at the highest epoch."""
        best = None
        for n, s in self.statuses().items():
            if s and s.get("role") == "primary" and (best is None or
                                                     s["epoch"] > best[1]["epoch"]):
                best = (n, s)
        if best is None:
            raise HarnessError(f"no server says primary: {self.statuses()}")
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
        except WaitTimeout:
            raise WaitTimeout(f"{name}: {what}: not within {timeout} s; last status "
                              f"{got.get('s')}") from None
        return got["s"]

    def wait_role(self, name, role, timeout):
        return self.wait_status(name, lambda s: s.get("role") == role, timeout,
                                f"role {role}")

    def in_sync(self, primary, replica):
        """Whether `primary` says primary with its replica in sync and
        `replica` says replica (now, once)."""
        self.check_alive()
        sp = self.status(primary)
        if not sp or sp.get("role") != "primary" or sp.get("replica_state") != "in sync":
            return False
        sr = self.status(replica)
        return bool(sr) and sr.get("role") == "replica"

    def wait_in_sync(self, primary, replica, timeout):
        deadline = time.monotonic() + timeout
        self.wait_status(primary, lambda s: s.get("role") == "primary" and
                         s.get("replica_state") == "in sync", timeout,
                         "primary with its replica in sync")
        self.wait_status(replica, lambda s: s.get("role") == "replica",
                         max(1.0, deadline - time.monotonic()), "role replica")

    def note(self, name, text):
        self.nodes[name].note(text)

    def kill9(self, name):
        self.nodes[name].note("kill -9")
        self.nodes[name].kill9()

    def restart(self, name):
        """The server again, with its original command line."""
        self.nodes[name].start()

    # --- mounts and workloads -----------------------------------------------------------

    def mount(self, name, extra=()):
        m = Mount(self.servers, os.path.join(self.base, name), extra, self.build)
        m.start()
        self.mounts.append(m)
        return m.path

    def mount_in(self, host, name, servers, extra=()):
        m = NsMount(servers, os.path.join(self.base, name), lambda a: self.lab.wrap(host, a),
                    extra, self.build)
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
                forget(m.path)
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
