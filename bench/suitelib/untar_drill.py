"""The untar drill of issue 17, as a library (bench/drill.py --mode untar):
`tar x` on a mount with namespace grants while the primary is killed.

The trio is failover.make_trio's (witness, primary, replica). One drill: GNU
tar extracts a tarball of small files (on the local disk) into a new
directory of mount 1, a `grantfs-mount --ns_grants=on`, so the directory is
granted to the mount and tar's creates, mkdirs and attribute changes go into
the mount's log; a probe process creates a small file in a directory of the
same mount every ~10 ms. When tar has read --kill-at of the tarball (its
own --checkpoint progress, one line per 10 KiB record read), the primary
gets SIGKILL; tar goes on to the end. Then `sync -f` of the mount (syncfs,
which does not reach a FUSE file system: docs/namespace-grants.md) and an
fsync of every directory tar made (what makes a granted directory's log and
its closed files' data durable on primary and replica), and the tree is
checked against the tarball's listing and bytes twice: through mount 1, and
through mount 2, a mount of the same trio that had never looked into it
(another node: each directory it reads recalls mount 1's grant). Measured:

- the longest pause tar saw: the longest time between two of its
  checkpoints (and the same before the kill, for scale);
- the longest probe create on the same mount (app-visible pause of a
  metadata change), and the errors any of them got;
- kill to the heir saying primary (kit RolePoller, every 100 ms);
- files lost, wrong or unexpected, on each mount;
- the warnings (the failover's retries) and errors mount 1 logged during
  the drill; an error fails the run, as a lost file does.

The drill process holds no file of a mount open while anything runs on it
(tar and the probe are processes of their own): see failover.py on forks.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time

from kit.topology import RolePoller

from . import tarball
from .harness import LOG_PROBLEM, BenchError

RECORD = 10240  # bytes per tar record (blocking factor 20): one checkpoint each
CHECKPOINT = re.compile(r"^tar: (\d+)$")

# The probe: kit.workload.Probe in a process of its own, in the directory
# argv[2], until its standard input closes; then (sent, returned, error) of
# every create as JSON on standard output. argv[1] is tests/ (the kit).
_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from kit.workload import Probe
p = Probe(sys.argv[2])
p.start()
sys.stdin.read()
p.stop()
p.join(60)
json.dump([(a, b, str(e) if e else None) for a, b, e in p.ops], sys.stdout)
"""
TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     "tests")


class TarWatch:
    """`tar xf TARBALL -C DEST` with a checkpoint line per record read on
    stderr, timestamped by a reader thread, which calls at_record() once
    tar has read `trigger` records (from that thread, between two reads)."""

    def __init__(self, tar, dest, trigger, at_record):
        self.trigger, self.at_record = trigger, at_record
        self.checkpoints = []  # (time, record number)
        self.other = []  # any other line tar printed: its errors
        self.t0 = time.monotonic()
        self.popen = subprocess.Popen(["tar", "xf", tar, "-C", dest, "--checkpoint=1",
                                       "--checkpoint-action=echo=%u"],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.popen.stderr:
            now = time.monotonic()
            m = CHECKPOINT.match(line.strip())
            if not m:
                self.other.append(line.rstrip())
                continue
            self.checkpoints.append((now, int(m.group(1))))
            if self.at_record and int(m.group(1)) >= self.trigger:
                self.at_record()
                self.at_record = None

    def wait(self, timeout):
        """tar's exit status and wall seconds; BenchError if it is still
        running after `timeout` s."""
        try:
            rc = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            raise BenchError(f"tar x was still running {timeout} s after it started")
        self.reader.join(30)
        self.t1 = time.monotonic()
        return rc, self.t1 - self.t0

    def longest_gap(self, until=None):
        """The longest time between two checkpoints (start and exit count as
        checkpoints), among those that ended by `until` if given."""
        times = [self.t0] + [t for t, _ in self.checkpoints] + [self.t1]
        gaps = [b - a for a, b in zip(times, times[1:]) if until is None or b <= until]
        return max(gaps, default=0.0)


def _log_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _log_problems(path, since):
    """The warning and error lines of a log written after byte `since`."""
    try:
        with open(path, errors="replace") as f:
            f.seek(since)
            return [ln.rstrip() for ln in f if LOG_PROBLEM.match(ln)]
    except OSError:
        return []


def _fsync_dirs(root):
    """fsync of root and every directory below it; seconds."""
    t0 = time.monotonic()
    for top, _, _ in os.walk(root):
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return time.monotonic() - t0


def one_untar(h, trio, run, tar, files, dirs, ns_mount, other_mount, kill_at=0.4,
              timeout=1800):
    """Kills the primary during a tar x into ns_mount; returns the run's
    figures (a dict). Raises BenchError when something did not come back."""
    victim, st = trio.primary()
    epoch = st["epoch"]
    heir = trio.other(victim)
    name = f"untar-{run}"
    dest = os.path.join(ns_mount, name)
    probe_dir = os.path.join(ns_mount, f"probe-{run}")
    os.mkdir(dest)
    os.mkdir(probe_dir)
    log_path = h.path(f"{os.path.basename(ns_mount)}.log")
    log_from = _log_size(log_path)
    records = max(1, os.path.getsize(tar) // RECORD)
    t_kill = {}

    def kill():
        t_kill["t"] = time.monotonic()
        trio.kill9(victim)

    poller = RolePoller(trio)
    poller.start()
    probe = subprocess.Popen([sys.executable, "-c", _PROBE, TESTS, probe_dir],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.1)  # a few probes before tar starts
        watch = TarWatch(tar, dest, max(1, int(records * kill_at)), kill)
        rc, tar_s = watch.wait(timeout)
        if "t" not in t_kill:
            raise BenchError(f"tar x ended (exit {rc}) before it read {kill_at:.0%} of the "
                             f"tarball: {watch.other[:3]}")
        # Let the probe and the poller see the new primary if tar was quicker.
        wait = time.monotonic() + 60
        while time.monotonic() < wait and poller.first(
                lambda s: (s.get(heir) or (None, 0))[0] == "primary") is None:
            time.sleep(0.1)
        ops, _ = probe.communicate("", timeout=120)
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait()
        poller.stop()
    ops = json.loads(ops or "[]")
    promoted = poller.first(lambda s: (s.get(heir) or (None, 0))[0] == "primary" and
                            (s.get(heir) or (None, 0))[1] > epoch)
    new = trio.status(heir) or {}
    t0 = time.monotonic()
    subprocess.run(["sync", "-f", ns_mount], check=True, timeout=600)
    syncfs_s = time.monotonic() - t0
    fsync_s = _fsync_dirs(dest)
    here = tarball.compare_tree(dest, files, dirs)
    there = tarball.compare_tree(os.path.join(other_mount, name), files, dirs)
    problems = _log_problems(log_path, log_from)
    out = dict(run=run, killed=victim, new_primary=heir, epoch_before=epoch,
               epoch_after=new.get("epoch"), tar_rc=rc, tar_errors=watch.other, tar_s=tar_s,
               records=records, files=len(files),
               kill_at_s=t_kill["t"] - watch.t0,
               longest_tar_gap_ms=watch.longest_gap() * 1000,
               longest_tar_gap_before_kill_ms=watch.longest_gap(until=t_kill["t"]) * 1000,
               kill_to_primary_ms=(promoted - t_kill["t"]) * 1000 if promoted else None,
               longest_create_ms=max((b - a for a, b, _ in ops), default=0.0) * 1000,
               probe_creates=len(ops), probe_errors=[f"{e} at +{b - t_kill['t']:.3f} s"
                                                     for _, b, e in ops if e],
               syncfs_ms=syncfs_s * 1000, fsync_dirs_ms=fsync_s * 1000,
               here=here, there=there,
               log_errors=[ln for ln in problems if ln[0] != "W"],
               log_warnings=[ln for ln in problems if ln[0] == "W"])
    t0 = time.monotonic()
    trio.restart(victim)
    trio.wait_in_sync(heir, victim, 600)
    out["resync_s"] = time.monotonic() - t0
    return out


def untar_failed(r):
    """Why an untar drill's result is a failure ("" if it is not)."""
    why = []
    if r["tar_rc"] != 0 or r["tar_errors"]:
        why.append(f"tar exited {r['tar_rc']}: {r['tar_errors'][:3]}")
    if not r["here"].ok():
        why.append(f"on the mount that ran tar: {r['here'].text()}")
    if not r["there"].ok():
        why.append(f"on another mount: {r['there'].text()}")
    if r["probe_errors"]:
        why.append(f"probe errors: {r['probe_errors'][:3]}")
    if r["epoch_after"] != r["epoch_before"] + 1:
        why.append(f"epoch {r['epoch_before']} -> {r['epoch_after']}, expected +1")
    if r["log_errors"]:
        why.append(f"the mount logged errors: {r['log_errors'][:3]}")
    return "; ".join(why)
