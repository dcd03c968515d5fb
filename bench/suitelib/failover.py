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
the suite. The servers are the test kit's Trio (tests/kit/topology.py), the
writer and the probe its workloads (tests/kit/workload.py); every figure of
a server is read from `grantfsctl status --json`.
"""

import fcntl
import hashlib
import os
import shutil
import struct
import subprocess
import sys
import time

from kit.server import parse_status
from kit.topology import Trio
from kit.waits import wait_for
from kit.workload import BLOCK, Probe, TimedWriter

from .harness import BenchError


def make_trio(h, name, capacity, peer_delay_ms=0):
    """A kit Trio (witness W, primary A, replica B) on loopback under the
    harness h: files h.path(f"{name}-data-a"), f"{name}-server-a.log", ...;
    servers in sessions of their own, stopped by h.cleanup(). With
    peer_delay_ms, A and B reach each other through grantfs-latency-proxy
    (that many ms each way): a slower link between the two machines.
    Clients and the witness reach them direct. Not started."""

    def via_proxy(node, addr):
        port = int(addr.rsplit(":", 1)[1])
        return f"127.0.0.1:{h.start_proxy(f'{name}-to-{node}', port, peer_delay_ms)}"

    trio = Trio(h.base, capacity=capacity, prefix=f"{name}-",
                peer_via=via_proxy if peer_delay_ms > 0 else None, new_session=True,
                build=h.build, tag="drill")
    h.own(trio)
    return trio


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
# Its arguments: the status argv (`grantfsctl --server=X --json status`),
# then the timeout; it prints the time and the status line that said primary.
_POLLER = """
import json, subprocess, sys, time
argv, until = sys.argv[1:-1], time.monotonic() + float(sys.argv[-1])
while time.monotonic() < until:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=2,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        continue
    try:
        said = json.loads(r.stdout)["servers"] if r.returncode == 0 else []
    except (ValueError, KeyError):
        said = []
    if said and said[0].get("role") == "primary":
        print(time.monotonic())
        print(r.stdout, end="")
        sys.exit(0)
    time.sleep(0.05)
sys.exit(1)
"""


def one_drill(trio, run, data, writer_mount, reader_mount, kill_at=0.4, timeout=600):
    """Kills the primary during a write of `data`; returns the run's figures
    (a dict). Raises BenchError when something did not come back."""
    victim, st = trio.primary()
    epoch = st["epoch"]
    heir = trio.other(victim)
    name = f"drill-{run}.bin"
    probe_dir = os.path.join(reader_mount, f"probe-{run}")
    os.mkdir(probe_dir)
    t_kill = {}

    def kill():
        t_kill["t"] = time.monotonic()
        trio.kill9(victim)

    status_argv = trio[heir].ctl_argv("--json", "status")
    poller = subprocess.Popen([sys.executable, "-c", _POLLER, *status_argv, str(timeout)],
                              stdout=subprocess.PIPE,
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
    new = parse_status(status) or {}
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
    trio.restart(victim)
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
