"""The failover drill of the checkpoint issue, as a library.

A witness, a primary and a replica (a Trio) on loopback, two mounts that
know both servers. One drill: a writer streams a file of random bytes into
mount 1 in 512 KiB os.write() calls (each timestamped), then fsync and
close; a probe creates an empty file on mount 2 every ~10 ms; when the
writer is part-way, the primary is killed with SIGKILL. Measured:

- kill to first served operation: from the kill to the first probe create
  that returned after it and was answered by the new primary (one sent
  after the kill, or one stuck across it that returned more than 50 ms
  after the kill: the dead server could not have answered that one);
- the longest single write() (and the fsync) of the writer;
- bytes lost: the file read back through mount 2 against what was written.

Then the killed server is started again with its original command line and
must come back as the replica and reach "in sync"; the next drill kills the
other one, so the roles alternate.

Used by bench/drill.py (the command anyone can repeat) and by section 8 of
the suite; tests/ use parse_status() and role_support().
"""

import fcntl
import hashlib
import os
import shutil
import struct
import subprocess
import sys
import threading
import time

from .harness import BenchError, free_port, listening, tail, wait_for

BLOCK = 512 * 1024
INT_FIELDS = ("epoch", "log seq", "acked seq", "lag bytes", "data epoch")
# A probe answered this long after the kill was answered by the new primary
# even if it was sent before the kill.
STUCK_PROBE_S = 0.05


def parse_status(text):
    """`grantfsctl status` output as a dict: "role", "epoch", "replica
    state", "log seq", ... (the key is what comes before the first colon;
    numbers become ints; the first line of a key wins)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key in INT_FIELDS:
            try:
                value = int(value.split()[0])
            except (IndexError, ValueError):
                pass
        out.setdefault(key, value)
    return out


def role_support(server_bin, scratch, timeout=5.0):
    """Whether this grantfs-server can run a witness: (True, "") or (False,
    what it said) when it refuses `--role=witness` with exit status 2 and
    "not available". Any other outcome counts as supported (a real problem
    then shows in the drill itself, not hidden as a skip)."""
    os.makedirs(scratch, exist_ok=True)
    log = os.path.join(scratch, "witness-probe.log")
    argv = [server_bin, "--role=witness", f"--listen=127.0.0.1:{free_port()}",
            f"--data_dir={os.path.join(scratch, 'witness-probe')}"]
    with open(log, "wb") as f:
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=15)
    said = tail(log, 600).strip()
    if rc == 2 and "not available" in said:
        return False, said.splitlines()[-1]
    return True, ""


class Trio:
    """Witness W, primary A and replica B under one Harness, on loopback.

    argv[node] is each server's original command line: a server is always
    restarted with it (A keeps saying --role=primary; the witness tells it
    who owns the epoch)."""

    def __init__(self, h, name, capacity, peer_delay_ms=0):
        self.h = h
        self.name = name
        self.addr = {n: f"127.0.0.1:{free_port()}" for n in "WAB"}
        server = h.bin("server/grantfs-server")
        common = lambda n: [f"--listen={self.addr[n]}",  # noqa: E731
                            f"--data_dir={h.path(f'{name}-{n.lower()}')}"]
        # With peer_delay_ms, A and B reach each other through
        # grantfs-latency-proxy (that many ms each way): a slower link
        # between the two machines. Clients and the witness reach them direct.
        peer = dict(self.addr)
        if peer_delay_ms > 0:
            for n in "AB":
                port = int(self.addr[n].rsplit(":", 1)[1])
                peer[n] = f"127.0.0.1:{h.start_proxy(f'{name}-to-{n}', port, peer_delay_ms)}"
        self.argv = {
            "W": [server, "--role=witness", *common("W")],
            "A": [server, "--role=primary", *common("A"), f"--peer={peer['B']}",
                  f"--witness={self.addr['W']}", f"--capacity={capacity}"],
            "B": [server, "--role=replica", *common("B"), f"--peer={peer['A']}",
                  f"--witness={self.addr['W']}", f"--capacity={capacity}"],
        }
        self.procs = {}  # node -> Proc, None once killed on purpose

    @property
    def servers(self):
        """The mount's server list."""
        return f"{self.addr['A']},{self.addr['B']}"

    @staticmethod
    def other(node):
        return "B" if node == "A" else "A"

    def launch(self, node):
        # The server refuses a missing data directory; an empty one is new.
        os.makedirs(self.h.path(f"{self.name}-{node.lower()}"), exist_ok=True)
        self.procs[node] = self.h.start_process(f"{self.name}-{node}", self.argv[node])

    def start(self, timeout=90):
        self.launch("W")
        port = int(self.addr["W"].rsplit(":", 1)[1])
        wait_for(lambda: self.check_alive() or listening(port), 30, "the witness listening")
        self.launch("A")
        self.launch("B")
        self.wait_in_sync("A", "B", timeout)

    def check_alive(self):
        """BenchError if a server we did not kill has exited."""
        for node, p in self.procs.items():
            if p is not None and not p.alive():
                raise BenchError(f"{self.name} server {node} exited with {p.popen.returncode}: "
                                 f"{tail(p.log_path, 1500)}")
        return False

    def status(self, node, timeout=5):
        """The server's parsed status, or None if it does not answer."""
        try:
            r = subprocess.run([self.h.bin("client/grantfsctl"), f"--server={self.addr[node]}",
                                "status"], capture_output=True, text=True, timeout=timeout,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None
        return parse_status(r.stdout) if r.returncode == 0 else None

    def in_sync(self, primary, replica):
        self.check_alive()
        sp = self.status(primary)
        if not sp or sp.get("role") != "primary" or sp.get("replica state") != "in sync":
            return False
        sr = self.status(replica)
        return bool(sr) and sr.get("role") == "replica"

    def wait_in_sync(self, primary, replica, timeout):
        wait_for(lambda: self.in_sync(primary, replica), timeout,
                 f"{primary} primary with {replica} in sync")

    def primary(self):
        """(node, epoch) of the server that says primary at the highest epoch."""
        best = None
        for node in "AB":
            s = self.status(node)
            if s and s.get("role") == "primary" and (best is None or s["epoch"] > best[1]):
                best = (node, s["epoch"])
        if best is None:
            raise BenchError(f"{self.name}: no server says it is primary")
        return best

    def note(self, node, text):
        """A line in the node's log, timestamped like glog's, so that what the
        drill did can be read beside what the server did."""
        now = time.time()
        with open(self.h.path(f"{self.name}-{node}.log"), "a") as f:
            f.write(f"=== {time.strftime('%Y%m%d %H:%M:%S', time.localtime(now))}."
                    f"{int(now % 1 * 1e6):06d} drill: {text}\n")

    def kill9(self, node):
        self.note(node, "kill -9")
        p = self.procs[node]
        p.popen.kill()
        p.popen.wait(timeout=30)
        self.procs[node] = None


# --- the writer and the probe ---------------------------------------------------------


class TimedWriter(threading.Thread):
    """Writes `data` to `path` in BLOCK-sized os.write() calls, then fsync and
    close, timestamping each call. Calls at_offset() from its own thread,
    between two writes, once `trigger` bytes are written (the kill happens
    while the writer is part-way, however fast it is)."""

    def __init__(self, path, data, trigger=None, at_offset=None):
        super().__init__(daemon=True)
        self.path, self.data = path, data
        self.trigger, self.at_offset = trigger, at_offset
        self.writes = []  # (t0, t1) of each write()
        self.fsync_s = None
        self.error = None
        self.done = False

    def run(self):
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view, off = memoryview(self.data), 0
                while off < len(view):
                    if self.at_offset and off >= self.trigger:
                        self.at_offset()
                        self.at_offset = None
                    t0 = time.monotonic()
                    off += os.write(fd, view[off:off + BLOCK])
                    self.writes.append((t0, time.monotonic()))
                t0 = time.monotonic()
                os.fsync(fd)
                self.fsync_s = time.monotonic() - t0
            finally:
                os.close(fd)
            self.done = True
        except OSError as e:
            self.error = e

    def longest_write_s(self):
        return max((b - a for a, b in self.writes), default=0.0)


class Probe(threading.Thread):
    """Creates a new empty file in `d` (O_CREAT|O_EXCL, then close) every
    ~10 ms until stopped: a change only the primary can make. Records
    (sent, returned, error) of each."""

    def __init__(self, d, interval=0.01):
        super().__init__(daemon=True)
        self.d, self.interval = d, interval
        self.ops = []
        self._halt = threading.Event()

    def run(self):
        n = 0
        while not self._halt.is_set():
            t0 = time.monotonic()
            err = None
            try:
                os.close(os.open(os.path.join(self.d, f"p{n}"), os.O_WRONLY | os.O_CREAT |
                                 os.O_EXCL, 0o644))
            except OSError as e:
                err = e
            t1 = time.monotonic()
            self.ops.append((t0, t1, err))
            n += 1
            self._halt.wait(max(0.0, t0 + self.interval - t1))

    def stop(self):
        self._halt.set()

    def first_served_after(self, t_kill):
        """Seconds from t_kill to the first create the new primary answered,
        or None."""
        for t0, t1, err in self.ops:
            if err is None and t1 > t_kill and (t0 >= t_kill or t1 - t_kill > STUCK_PROBE_S):
                return t1 - t_kill
        return None

    def longest_s(self, since):
        """The longest create sent at or after `since` (or still open then)."""
        return max((t1 - t0 for t0, t1, _ in self.ops if t1 >= since), default=0.0)

    def errors(self):
        return [f"{err} at +{t1:.3f}" for _, t1, err in self.ops if err is not None]


def bytes_lost(path, data):
    """Bytes of `data` that reading `path` does not give back (missing or
    different)."""
    lost, off = 0, 0
    if not os.path.exists(path):
        return len(data)
    with open(path, "rb") as f:
        while off < len(data):
            got = f.read(1 << 20)
            if not got:
                break
            want = data[off:off + len(got)]
            if got != want:
                for i in range(0, len(got), 4096):
                    a, b = got[i:i + 4096], want[i:i + 4096]
                    if a != b:
                        lost += sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
            off += len(got)
        extra = len(f.read())
    return lost + (len(data) - off) + extra


# Started before the writer opens its file, in a process of its own: a fork
# from a process that holds a GrantFS file open closes that descriptor in the
# child, which sends FUSE FLUSH and waits for the mount to write back the
# file's cached data, so status calls forked from the drill itself would
# measure the writer's flush, not the promotion.
_POLLER = """
import subprocess, sys, time
ctl, addr, until = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
while time.monotonic() < until:
    try:
        r = subprocess.run([ctl, "--server=" + addr, "status"], capture_output=True, text=True,
                           timeout=2, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        continue
    if r.returncode == 0 and any(l.split() == ["role:", "primary"] for l in r.stdout.splitlines()):
        print(time.monotonic())
        print(r.stdout, end="")
        sys.exit(0)
    time.sleep(0.05)
sys.exit(1)
"""


def one_drill(trio, run, data, writer_mount, reader_mount, kill_at=0.4, timeout=600):
    """Kills the primary during a write of `data`; returns the run's figures
    (a dict). Raises BenchError when something did not come back."""
    victim, epoch = trio.primary()
    heir = trio.other(victim)
    name = f"drill-{run}.bin"
    probe_dir = os.path.join(reader_mount, f"probe-{run}")
    os.mkdir(probe_dir)
    t_kill = {}

    def kill():
        t_kill["t"] = time.monotonic()
        trio.kill9(victim)

    poller = subprocess.Popen([sys.executable, "-c", _POLLER, trio.h.bin("client/grantfsctl"),
                               trio.addr[heir], str(timeout)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    writer = TimedWriter(os.path.join(writer_mount, name), data, int(len(data) * kill_at), kill)
    probe = Probe(probe_dir)
    try:
        probe.start()
        time.sleep(0.1)  # a few probes before the kill
        writer.start()
        wait_for(lambda: "t" in t_kill or not writer.is_alive(), timeout,
                 "the writer to get going")
        if "t" not in t_kill:
            raise BenchError(f"the writer stopped before the kill: {writer.error}")
        writer.join(timeout)
        if writer.is_alive():
            raise BenchError(f"the writer was still blocked {timeout} s after the kill")
        # Let the probe see the new primary even if the writer was quicker.
        wait_for(lambda: probe.first_served_after(t_kill["t"]) is not None or
                 not probe.is_alive(), 60, "a probe create answered by the new primary")
        try:
            said, _ = poller.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{heir} did not say primary within 60 s of the writer's end")
        if poller.returncode != 0:
            raise BenchError(f"{heir} did not say primary within {timeout} s of the kill")
    finally:
        probe.stop()
        probe.join(30)
        if poller.poll() is None:
            poller.kill()
            poller.wait()
    t_said, _, status = said.partition("\n")
    t_promoted = float(t_said) - t_kill["t"]
    new = parse_status(status)
    trio.note(heir, f"status says primary, {t_promoted * 1000:.0f} ms after the kill")
    served = probe.first_served_after(t_kill["t"])
    out = dict(run=run, killed=victim, new_primary=heir, epoch_before=epoch,
               epoch_after=new.get("epoch"), kill_to_served_ms=served * 1000,
               kill_to_status_primary_ms=t_promoted * 1000,
               longest_write_ms=writer.longest_write_s() * 1000,
               longest_create_ms=probe.longest_s(t_kill["t"]) * 1000,
               fsync_ms=(writer.fsync_s or 0) * 1000, writes=len(writer.writes),
               writer_error=str(writer.error) if writer.error else "",
               probe_errors=probe.errors())
    out["bytes_lost"] = bytes_lost(os.path.join(reader_mount, name), data)
    t0 = time.monotonic()
    trio.launch(victim)
    trio.wait_in_sync(heir, victim, timeout)
    out["resync_s"] = time.monotonic() - t0
    os.unlink(os.path.join(writer_mount, name))
    shutil.rmtree(probe_dir)
    return out


def drill_failed(r):
    """Why a drill's result is a failure ("" if it is not)."""
    why = []
    if r["bytes_lost"]:
        why.append(f"bytes lost: {r['bytes_lost']}")
    if r["writer_error"]:
        why.append(f"the writer got an error: {r['writer_error']}")
    if r["probe_errors"]:
        why.append(f"probe errors: {r['probe_errors'][:3]}")
    if r["epoch_after"] != r["epoch_before"] + 1:
        why.append(f"epoch {r['epoch_before']} -> {r['epoch_after']}, expected +1")
    return "; ".join(why)


# --- throughput: replica in sync vs no replica ----------------------------------------------


def dd_mbps(d, data):
    """512 KiB writes of `data` + fsync + close into a new file in d; MB/s."""
    path = os.path.join(d, "dd.bin")
    t0 = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view, off = memoryview(data), 0
        while off < len(view):
            off += os.write(fd, view[off:off + BLOCK])
        os.fsync(fd)
    finally:
        os.close(fd)
    secs = time.monotonic() - t0
    os.unlink(path)
    return len(data) / 1e6 / secs


def creates_per_s(d, n):
    """n empty files created (O_CREAT|O_EXCL, close) in a new directory; per s."""
    sub = os.path.join(d, f"creates-{time.monotonic_ns()}")
    os.mkdir(sub)
    t0 = time.monotonic()
    for i in range(n):
        os.close(os.open(os.path.join(sub, f"c{i}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                         0o644))
    secs = time.monotonic() - t0
    shutil.rmtree(sub)
    return n / secs


def lock_pairs_per_s(d, n):
    """n POSIX write-lock + unlock pairs (F_SETLK) on byte 0 of one file; per s.
    Each lock change is written to the metadata store (and replicated)."""
    path = os.path.join(d, f"locks-{time.monotonic_ns()}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    lock = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
    unlock = struct.pack("hhqqi4x", fcntl.F_UNLCK, os.SEEK_SET, 0, 1, 0)
    try:
        t0 = time.monotonic()
        for _ in range(n):
            fcntl.fcntl(fd, fcntl.F_SETLK, lock)
            fcntl.fcntl(fd, fcntl.F_SETLK, unlock)
        secs = time.monotonic() - t0
    finally:
        os.close(fd)
    os.unlink(path)
    return n / secs


IN_SYNC = "replica in sync"
STANDALONE = "no replica (standalone)"
# What replica_cost measures: (key, figure, unit).
COST_MEASURES = ("dd", "creates", "locks")
COST_FIGURES = {"dd": ("write+fsync MB/s", "MB/s"), "creates": ("creates/s", "ops/s"),
                "locks": ("lock+unlock pairs/s", "ops/s")}


def replica_cost(trio, trio_dir, solo_dir, data, creates, runs, progress, label=""):
    """What the replica costs: write + fsync MB/s of `data`, `creates`
    creates/s and `creates` lock + unlock pairs/s, on a mount of the trio
    (checked in sync before each run) and on one of a standalone server,
    interleaved. {(target, "dd" | "creates" | "locks"): [value per run]} with
    target IN_SYNC or STANDALONE."""
    dirs = ((IN_SYNC, trio_dir), (STANDALONE, solo_dir))
    got = {(t, m): [] for t, _ in dirs for m in COST_MEASURES}
    for run in range(1, runs + 1):
        for what in COST_MEASURES:
            for target, d in dirs:
                if target == IN_SYNC:
                    primary = trio.primary()[0]
                    if not trio.in_sync(primary, trio.other(primary)):
                        raise BenchError("the replica is not in sync before a cost run")
                if what == "dd":
                    progress.step(f"{label}{len(data) >> 20} MiB write + fsync on {target}, "
                                  f"run {run}/{runs}")
                    v = dd_mbps(d, data)
                    progress.done(f"{v:.0f} MB/s")
                elif what == "locks":
                    progress.step(f"{label}{creates} lock + unlock pairs on {target}, "
                                  f"run {run}/{runs}")
                    v = lock_pairs_per_s(d, creates)
                    progress.done(f"{v:.0f}/s")
                else:
                    progress.step(f"{label}{creates} creates on {target}, run {run}/{runs}")
                    v = creates_per_s(d, creates)
                    progress.done(f"{v:.0f}/s")
                got[(target, what)].append(v)
    return got


def sha256(data):
    return hashlib.sha256(data).hexdigest()
