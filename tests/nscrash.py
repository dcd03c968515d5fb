#!/usr/bin/env python3
"""Randomized crash checker of namespace grants (docs/namespace-grants.md):
the exact model of the namespace checker (tests/nscheck_model.py) driven
through mounts with `--ns_grants=on` while servers or mounts are killed
with -9 at random moments.

    python3 tests/nscrash.py trio --seed 7 [--workers 2] [--kills 4] [--ops 3000]
    python3 tests/nscrash.py mountkill --seed 7 [--rounds 8] [--ops 60] [--m2-grants]

Two scenarios (tests/test_nscrash.py runs both; docs/testing.md says how):

- `trio` (trio_primary_kills): a witness, a primary and a replica; one or
  two workers, each on its own mount with grants on (node1, node2), each in
  a subtree of its own that its mount made (so granted to it), run random
  operations (creates, mkdir, symlink, link, unlink, rmdir, rename within
  and across directories, chmod, lchown, utimes, xattrs, small writes,
  appends, pwrites past the end, truncates, checks of one path) while the
  harness kills -9 the current primary at random moments, waits for the
  other server to take over, restarts the killed one and waits until it is
  the replica, in sync, before the next kill. The mounts live on: every
  operation's errno must be the one the model predicts (a failover is a
  pause, never an error), every check must match the model, and at the end
  (fsync of every file and directory) the subtree seen through every mount
  and through a mount made after the end must equal the model exactly
  (types, modes, owners, link counts, hard-link groups, targets, xattrs,
  contents, and the mtimes utimes set); the volume must hold exactly the
  model's inodes (nothing made twice, nothing leaked), and the offline fsck
  of the last primary must be clean.

- `mountkill` (mount_kills): one server; mount 1 (grants on) works in its
  subtree. One to three times a round the harness makes the state durable:
  fully (fsync of every directory, or of every file and directory: syncfs
  and sync do not reach a FUSE file system, the contract says), or by the
  fsync of one file it opened before the last ops (its data, and the log up
  to its last entry about the file, with everything before it). Then 0..N
  more operations (most often until one leaves entries in the mount's log)
  and kill -9 of mount 1. Mount 2 (a fresh one: nothing cached) must then
  show the model after some op from the durable point, or from the last op
  that was surely a call (surely_a_call: a call applies the whole log first
  and is durable when it returns), whichever came later, to the last op
  (the contract: "a prefix of the log, in the order the changes were
  made"): names, types, targets, modes, owners, link counts, hard-link
  groups, xattrs, and the mtimes utimes set. File contents: a file whose
  content was made durable and did not change since must hold exactly
  that; any other must hold a content the file had since, or nothing
  (b"") if it was made or truncated by O_TRUNC since: file data written
  and closed but not yet flushed is lost with the mount (the contract),
  and reaches the server apart from the namespace entries (a write entry
  is appended when the write cache flushes). The volume must hold the
  matched state's inodes. Then mount 1 is started again and the next round
  goes on from the state found; the volume ends with a clean offline fsck.

Every operation is logged with the wall-clock time (to match the server
and mount logs), the expected and the actual result. Operations are drawn
from random.Random(seed * 1000 + worker) (trio) and seed * 1000 + round
(mountkill): the operations of a trio worker and of the first mountkill
round are the same on every run with that seed; kill moments depend on
timing, and later mountkill rounds on the state each crash left.
"""

import argparse
import copy
import json
import multiprocessing
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import urllib.request

from kit.fsck import offline_fsck
from kit.ports import free_port
from kit.processes import tail_log
from kit.topology import Standalone, Trio
from kit.waits import wait_for
from nscheck_fs import (DIR, RENAME_EXCHANGE, REG, diff_entry, diff_trees, ename, join, observe,
                        short, show, walk)
from nscheck_model import Model, execute, fmt_op
from nscheck_worker import CREATING_KINDS, OP_WEIGHTS, TREE_SIZE, Worker

GRANTS = ["--ns_grants=on"]
# How often a worker draws each op kind: nscheck's kinds (and its draw of
# the arguments), plus utimes, weighted towards what a mount with grants
# makes itself (creates, removals, renames of files, writes of files made
# there, their chmod and utimes) so that its log holds entries when a kill
# comes; ops that are calls (lchown to other owners, link, xattrs, renames
# of directories) apply the log first.
OP_WEIGHTS_HERE = {
    "check": 10, "creat": 10, "mkdir": 6, "symlink": 6, "link": 2, "unlink": 10, "rmdir": 5,
    "rename": 12, "chmod": 3, "chown": 1, "setxattr": 2, "rmxattr": 1, "write": 14, "utimes": 4,
}
BAD_NAMES = 0.05  # fraction of names that are not UTF-8, as in nscheck
LOG_DIR = "/tmp/nscrash-logs"
LEASE_MS = 4000  # mountkill: the server's session lease


# --- the model: nscheck's, plus utimes and the mtimes it sets -------------------------


class CrashModel(Model):
    """nscheck's Model, with one more op: ("utimes", path, atime_ns,
    mtime_ns), not following a symlink. A node's mtime is known (and
    compared) from a utimes until an op changes its data or its entries;
    chmod, lchown and xattrs keep it (Linux changes ctime only)."""

    def apply(self, op):
        if op[0] == "utimes":
            node, err = self.lookup(op[1])
            if err:
                return err
            node.mtime = op[3]
            return 0
        touched = self._touched(op)
        err = super().apply(op)
        if err == 0:
            for n in touched + self._touched(op):
                n.mtime = None
        return err

    def _touched(self, op):
        """Nodes whose mtime op may change: the directories it changes names
        in and the nodes it names (a rename, a link or an unlink changes
        only the ctime of the node it moves; counted anyway: unknown, not
        wrong)."""
        if op[0] not in CREATING_KINDS + ("unlink", "rmdir", "rename", "write"):
            return []
        out = []
        paths = [op[1], op[2]] if op[0] in ("link", "rename") else [op[1]]
        for path in paths:
            parent, _ = self.parent_of(path)
            node, _ = self.lookup(path)
            out += [n for n in (parent, node) if n is not None]
        return out

    def entry(self, node):
        e = super().entry(node)
        if getattr(node, "mtime", None) is not None:
            e["mtime"] = node.mtime
        return e

    def inodes(self):
        """How many inodes the subtree holds (its root included)."""
        return len({e["ino"] for e in self.entries().values()})


def fmt(op):
    if op[0] == "utimes":
        return f"utimes {show(b'/'.join(op[1]))} mtime={op[3]}"
    return fmt_op(op)


def run_op(root, op, notes=None):
    """Runs op on the subtree at root; 0 or the errno (execute() of nscheck,
    plus utimes)."""
    if op[0] == "utimes":
        try:
            os.utime(join(root, *op[1]), ns=(op[2], op[3]), follow_symlinks=False)
        except OSError as e:
            return e.errno
        return 0
    return execute(root, op, notes)


def observe_tree(root):
    """(walk() of root with each entry's mtime in ns, problems)."""
    problems = []
    entries = walk(root, problems)
    for rel, e in entries.items():
        e["mtime"] = os.lstat(join(root, rel)).st_mtime_ns
    return entries, problems


def _comparable(entries, ref, contents):
    out = {}
    for rel, e in entries.items():
        e = dict(e)
        if "mtime" not in ref.get(rel, {}):
            e.pop("mtime", None)
        if not contents:
            e.pop("data", None)
            e.pop("size", None)
        out[rel] = e
    return out


def compare(expected, actual, contents=True):
    """diff_trees() of a model's entries and an observed tree; mtime only
    where the model knows it; contents=False: names, types, modes, owners,
    link counts, link groups, targets, xattrs and known mtimes only."""
    return diff_trees(_comparable(expected, expected, contents),
                      _comparable(actual, expected, contents))


def fsync_tree(root, model, files=True):
    """fsync of every directory of the model's subtree (each applies the
    mount's whole log and sends the data of the files made and closed in
    it), and of every regular file too if `files`."""
    paths = [p for p in model.dirs()]
    if files:
        paths += model.paths(lambda n: n.kind == REG)
    for p in paths:
        fd = os.open(join(root, *p) if p else root, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def clock():
    t = time.time()
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"


def _writable_here(d, create):
    """Whether the mount may change names in directory node d itself (with
    its grant): the caller (root) owns it and has write and search by the
    owner bits, and for a create it is of the caller's group
    (NsGrants::WritableDir, LocalCreate)."""
    return d.uid == 0 and d.mode & 0o300 == 0o300 and (d.gid == 0 or not create)


def surely_a_call(model, op):
    """Whether op, if it succeeds and changes something, is surely made by a
    call to the server, never by the mount itself, whatever it holds: the
    documented fallbacks (docs/namespace-grants.md: links, xattrs, renames
    of directories and exchanges, truncations, attributes of anything but
    a regular file, set-id and sticky bits; changes in a directory the
    caller does not own with write and search bits, creates in one of
    another group; removes and renames of files with other names). Such a
    call applies the whole log first, and is durable when it returns (as
    without grants), so a crash after it keeps it and all before it.
    False for a rename of two names of one inode (the kernel does
    nothing) and where not sure."""
    kind = op[0]
    if kind in ("link", "setxattr", "rmxattr"):
        return True
    node, _ = model.lookup(op[1])
    parent, _ = model.parent_of(op[1])
    if kind in ("chmod", "chown", "utimes"):
        return node is not None and (node.kind != REG or (kind == "chmod" and op[2] & 0o7000))
    if kind == "write":
        return op[2] == "truncate" or (node is None and parent is not None and
                                       not _writable_here(parent, True))
    if parent is None:
        return False
    if kind in ("creat", "mkdir", "symlink"):
        return not _writable_here(parent, True)
    if kind in ("unlink", "rmdir"):
        return not _writable_here(parent, False) or (node is not None and node.kind != DIR and
                                                     node.nlink > 1)
    if kind == "rename":
        dst, _ = model.lookup(op[2])
        dparent, _ = model.parent_of(op[2])
        if node is None or dparent is None or dst is node:
            return False
        return (op[3] & RENAME_EXCHANGE or node.kind == DIR or node.nlink != 1 or
                (dst is not None and (dst.kind == DIR or dst.nlink != 1)) or
                not _writable_here(parent, False) or not _writable_here(dparent, False))
    return False


# --- one worker -----------------------------------------------------------------------


class CrashWorker(Worker):
    """Draws operations on its own subtree at `root` as an nscheck worker
    does (its kinds and its draw of their arguments, plus utimes, weighted
    by OP_WEIGHTS_HERE), runs each and checks its errno, and every `check`,
    against the exact model. No ESTALE retry: one mount works in the
    subtree, a failover or a crash of another mount must not show. Keeps
    the list of operations done."""

    def __init__(self, seed, index, root, model=None, rng_seed=None):
        cfg = {"seed": seed, "mounts": [b"/"], "base": b"", "disabled": [], "bad_names": BAD_NAMES,
               "t0": time.monotonic(), "bound": 0.0, "shared": 0, "quirks": set(),
               "log_dir": None}
        super().__init__(cfg, index)
        if rng_seed is not None:
            self.rng = random.Random(rng_seed)
        self.root = os.fsencode(root)
        self.model = model if model is not None else CrashModel()
        assert set(OP_WEIGHTS_HERE) == set(OP_WEIGHTS) | {"utimes"}
        self.kinds = list(OP_WEIGHTS_HERE)
        self.weights = [OP_WEIGHTS_HERE[k] for k in self.kinds]
        self.ops = []  # every op done, in order
        # For each op: ids of the nodes it named (before or after it) if it
        # succeeded: what a log entry of it is "about" (NsLog::TouchedBy).
        self.touched = []
        # For each op: whether it succeeded as a call of the mount's
        # (surely_a_call): it applied the whole log first and was durable
        # when it returned.
        self.synchronous = []

    def _time(self):
        return self.rng.randrange(10**18, 19 * 10**17)  # 2001..2030, in ns

    def step(self):
        """One operation; returns whether it changed the model. Sets
        self.failure on a mismatch."""
        weights = self.weights
        if len(self.model.paths()) > TREE_SIZE:  # keep the tree small: names collide
            weights = [w * (0.25 if k in CREATING_KINDS else 2)
                       for k, w in zip(self.kinds, weights)]
        kind = self.rng.choices(self.kinds, weights)[0]
        tag = b"w%d.%d" % (self.index, self.ops_done)
        if kind == "utimes":
            op = (kind, self._own_path(0.9, kind=kind), self._time(), self._time())
        else:
            op = self._draw(self.rng, kind, self._own_path, False, tag)
        details, notes = [], []
        if kind == "check":
            node, want = self.model.lookup(op[1])
            path = join(self.root, *op[1])
            try:
                seen = observe(path)
                seen["mtime"] = os.lstat(path).st_mtime_ns
                got = 0
            except OSError as e:
                got, seen = e.errno, None
            if want == got and node is not None:
                expected = self.model.entry(node)
                if "mtime" not in expected:
                    seen.pop("mtime", None)
                details = diff_entry(b"/".join(op[1]), expected, seen)
        else:
            call = surely_a_call(self.model, op)
            named = [self.model.lookup(op[1])[0]]
            if kind in ("link", "rename"):
                named.append(self.model.lookup(op[2])[0])
            want = self.model.apply(op)
            named.append(self.model.lookup(op[1])[0])
            got = run_op(self.root, op, notes)
        self.touched.append({n.id for n in named if n is not None} if kind != "check" and want == 0
                            else set())
        self.synchronous.append(kind != "check" and want == 0 and call)
        self.counts[(kind, ename(got))] = self.counts.get((kind, ename(got)), 0) + 1
        line = (f"{clock()} w{self.index} #{self.ops_done} {fmt(op)} -> expected {ename(want)}, "
                f"got {ename(got)}" + "".join(f" ({n})" for n in notes))
        self.log.append(line)
        self.ops.append(op)
        self.ops_done += 1
        if want != got or details:
            self._fail(line, details)
        return want == 0 and kind != "check"


# --- results --------------------------------------------------------------------------


class Result:
    """What a run found: ok, failures, report()."""

    def __init__(self, name, seed, replay):
        self.name = name
        self.seed = seed
        self.replay = replay
        self.failures = []
        self.notes = []
        self.counts = {}
        self.logs = []  # (title, lines)
        self.elapsed = 0.0
        self.log_path = None

    @property
    def ok(self):
        return not self.failures

    def add_counts(self, counts):
        for k, n in counts.items():
            self.counts[k] = self.counts.get(k, 0) + n

    def keep_logs(self, logs):
        """Writes every worker's whole log to LOG_DIR."""
        os.makedirs(LOG_DIR, exist_ok=True)
        self.log_path = os.path.join(LOG_DIR, f"{self.name}-{self.seed}-"
                                              f"{time.strftime('%H%M%S')}.log")
        with open(self.log_path, "w") as f:
            for title, lines in logs:
                f.write(f"--- {title}\n" + "\n".join(lines) + "\n")

    def report(self):
        lines = [f"nscrash {self.name} seed {self.seed}, {self.elapsed:.1f} s: "
                 + ("OK" if self.ok else f"{len(self.failures)} FAILURES")]
        lines += [f"  {n}" for n in self.notes]
        for k in sorted({k for k, _ in self.counts}):
            res = sorted((r for kk, r in self.counts if kk == k), key=lambda r: r != "ok")
            lines.append(f"  {k:9} " + ", ".join(f"{r} {self.counts[(k, r)]}" for r in res))
        for f in self.failures:
            lines.append("FAILURE: " + f)
        for title, log in self.logs:
            lines.append(f"--- {title}")
            lines += log
        if not self.ok:
            lines.append(f"replay: {self.replay}")
        if self.log_path:
            lines.append(f"whole logs: {self.log_path}")
        return "\n".join(lines)


class Watchdog:
    """After `seconds`, SIGKILLs the processes procs() returns (mount
    daemons, workers): a FUSE call blocked on a mount then fails, so a hung
    run ends in a failure, never hangs."""

    def __init__(self, seconds, procs):
        self.fired = False
        self._procs = procs
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self.seconds = seconds
        self._timer.start()

    def _fire(self):
        self.fired = True
        print(f"nscrash: watchdog: run longer than {self.seconds} s, killing the mounts",
              flush=True)
        for p in self._procs():
            try:
                os.kill(p.pid, signal.SIGKILL)
            except (OSError, AttributeError):
                pass

    def cancel(self):
        self._timer.cancel()


def mount_procs(mounts):
    return [m.proc for m in mounts if m.proc is not None]


def ns_metrics(port):
    """{name: value} of the grantfs_mount_ns_* samples of a mount's /metrics
    (changes made there, entries in its log), {} if it does not answer."""
    out = {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("grantfs_mount_ns_") and "{" not in line:
                    name, value = line.split()
                    out[name[len("grantfs_mount_ns_"):]] = int(float(value))
    except OSError:
        pass
    return out


def local_changes(port):
    """Changes a mount made itself (its metrics), or None."""
    return ns_metrics(port).get("local_changes_total")


def fsck_problem(data_dir, killed):
    """None when the offline fsck of data_dir is clean; on a server that was
    killed with -9, an `orphan_chunk_file` alone is accepted (a chunk write
    whose commit the kill cut: tests/test_failover.py, _teardown)."""
    r = offline_fsck(data_dir, "--json")
    try:
        kinds = {p["kind"] for p in json.loads(r.stdout).get("problems", [])}
    except ValueError:
        kinds = {"(unreadable report)"}
    if r.returncode == 0 or (killed and kinds == {"orphan_chunk_file"}):
        return None
    return f"offline fsck of {data_dir}: exit {r.returncode}\n{r.stdout[-3000:]}{r.stderr[-2000:]}"


def check_inodes(mount, want, what, problems, timeout=10.0):
    """The volume's used inodes (statvfs) must become `want` within timeout."""
    got = None

    def ok():
        nonlocal got
        st = os.statvfs(mount)
        got = st.f_files - st.f_ffree
        return got == want

    try:
        wait_for(ok, timeout, "inode count", interval=0.5)
    except TimeoutError:
        problems.append(f"{what}: the volume holds {got} inodes, the model {want} "
                        f"(made twice, or leaked?)")


# --- scenario 1: kill -9 of the primary of a trio -------------------------------------


def _trio_worker(seed, index, root, max_ops, stop, progress, conn):
    os.umask(0)
    w = CrashWorker(seed, index, root)
    try:
        os.mkdir(w.root, 0o755)  # made here: granted to this mount
        while w.failure is None and w.ops_done < max_ops and not stop.is_set():
            w.step()
            progress[index] = w.ops_done
    except Exception:  # a checker bug, or a call that hung and was killed
        w.failure = f"worker {index} crashed at op {w.ops_done}:\n" + traceback.format_exc()
    progress[index] = -1 - w.ops_done  # done
    conn.send({"index": index, "failure": w.failure, "ops": w.ops_done, "log": w.log,
               "model": None if w.failure else w.model, "counts": w.counts})


def trio_primary_kills(base, seed, workers=1, kills=2, max_ops=3000, after_ops=100,
                       timeout=600):
    """Scenario 1 (see the module's docstring) under directory `base`;
    returns a Result."""
    res = Result("trio", seed, f"python3 tests/nscrash.py trio --seed {seed} --workers {workers}"
                               f" --kills {kills} --ops {max_ops}")
    start = time.monotonic()
    rng = random.Random(seed)  # the kill moments
    t = Trio(base)
    ctx = multiprocessing.get_context("fork")
    procs = []
    results = []
    dog = Watchdog(timeout, lambda: mount_procs(t.mounts) + [p for _, p, _ in procs])
    killed = set()
    survivor = None
    ports = []
    try:
        t.start()
        paths = []
        for i in range(workers):
            ports.append(free_port())
            paths.append(t.mount(f"node{i + 1}",
                                 extra=GRANTS + [f"--metrics_addr=127.0.0.1:{ports[i]}"]))
        roots = [join(os.fsencode(p), b"nscrash-%d-w%d" % (seed, i)) for i, p in enumerate(paths)]
        progress = ctx.Array("l", workers)
        stop = ctx.Event()
        for i in range(workers):
            parent_end, child_end = ctx.Pipe()
            p = ctx.Process(target=_trio_worker, daemon=True,
                            args=(seed, i, roots[i], max_ops, stop, progress, child_end))
            p.start()
            child_end.close()
            procs.append((i, p, parent_end))

        def running():
            return all(n >= 0 for n in progress[:])

        def done_ops():
            return [n if n >= 0 else -1 - n for n in progress[:]]

        for k in range(kills):
            # A random moment: after some more ops of every worker, then a
            # pause of up to 1 s (the log's 1 s age batch may or may not
            # have gone).
            want = [n + rng.randint(5, 200) for n in done_ops()]
            wait_for(lambda: not running() or all(a >= b for a, b in zip(done_ops(), want)),
                     180, "workers making progress")
            if not running():
                break
            time.sleep(rng.choice([0, 0, rng.uniform(0, 1.2)]))
            victim, st = t.primary()
            heir = t.other(victim)
            at = done_ops()
            t0 = time.monotonic()
            t.kill9(victim)
            killed.add(victim)
            new = t.wait_role(heir, "primary", 60)
            took = time.monotonic() - t0
            if new["epoch"] != st["epoch"] + 1:
                res.failures.append(f"kill {k + 1}: {heir} primary at epoch {new['epoch']}, "
                                    f"was {st['epoch']}")
            t.restart(victim)
            t.wait_in_sync(heir, victim, 180)
            res.notes.append(f"{clock()} kill {k + 1}: {victim} killed with -9 after ops {at}, "
                             f"{heir} primary at epoch {new['epoch']} in {took:.1f} s, "
                             f"{victim} in sync again after {time.monotonic() - t0:.1f} s")
        want = [n + after_ops for n in done_ops()]
        wait_for(lambda: not running() or all(a >= b for a, b in zip(done_ops(), want)),
                 180, "workers making progress after the last failover")
        stop.set()
        for i, p, conn in procs:
            if conn.poll(max(1.0, timeout - (time.monotonic() - start))):
                try:
                    results.append(conn.recv())
                    continue
                except EOFError:
                    pass
            res.failures.append(f"worker {i} did not finish (exit code {p.exitcode})")
        total_inodes = 1  # the volume's root
        for r in results:
            res.add_counts(r["counts"])
            res.notes.append(f"worker {r['index']} (node{r['index'] + 1}): {r['ops']} ops")
            if r["failure"]:
                res.failures.append(r["failure"])
                res.logs.append((f"worker {r['index']}: last 40 ops", r["log"][-40:]))
                continue
            try:
                fsync_tree(roots[r["index"]], r["model"])
            except OSError as e:  # the mount reports a refused log entry here
                res.failures.append(f"w{r['index']}: fsync at the end: {e}")
            total_inodes += r["model"].inodes()
        local = [local_changes(p) for p in ports]
        res.notes.append(f"changes made locally by the mounts (metrics): {local}")
        if res.ok and not any(local):
            res.failures.append("no change was made by a mount itself: grants not used")
        if res.ok and len(results) == workers:
            fresh = t.mount("node9")  # grants as the run's default, nothing cached
            views = [(f"node{i + 1}", p) for i, p in enumerate(paths)] + [("fresh node9", fresh)]
            for r in results:
                rel = os.path.basename(roots[r["index"]])
                for name, mnt in views:
                    try:
                        actual, found = observe_tree(join(os.fsencode(mnt), rel))
                        found += compare(r["model"].entries(), actual)
                    except OSError as e:
                        found = [f"cannot walk: {e}"]
                    res.failures += [f"w{r['index']} through {name}: {p}" for p in found[:40]]
            check_inodes(fresh, total_inodes, "at the end", res.failures)
        survivor = t.primary()[0]
    except Exception:
        res.failures.append("harness: " + traceback.format_exc())
    finally:
        dog.cancel()
        for _, p, conn in procs:
            if p.is_alive():
                p.kill()
            p.join(10)
        t.stop()
    if dog.fired:
        res.failures.append(f"watchdog: the run took longer than {timeout} s (hung?)")
    if survivor is not None:
        problem = fsck_problem(t.data_dirs[survivor], survivor in killed)
        if problem:
            res.failures.append(problem)
        else:
            res.notes.append(f"offline fsck of {survivor} (the last primary): clean")
    if not res.ok:
        res.keep_logs([(f"worker {r['index']}", r["log"]) for r in results])
        for n in "AB":
            res.logs.append((f"end of server {n}'s log ({t.nodes[n].log_path})",
                             _tail(t.nodes[n].log_path)))
    res.elapsed = time.monotonic() - start
    return res


def _tail(path):
    return tail_log(path, 3000).splitlines()[1:]


# --- scenario 2: kill -9 of a mount ---------------------------------------------------


class Round:
    """One round of mount_kills: the worker's ops up to the kill, and what
    the state after the kill may be.

    states: (op number, model after it) for the model at the last full
    durable point (states[0]: every directory, or every file and
    directory, fsync'd) and after every change since. floor: the op
    number up to which the namespace is durable (a full durable point, or
    a later fsync of one file: the log up to its last entry about that
    file). durable_data: node id -> index in states where its content was
    durable (every file at a full durable point, the fsync'd file at its
    fsync)."""

    def __init__(self, worker, rng, port):
        self.w = worker
        self.rng = rng  # the harness's choices
        self.port = port  # mount 1's metrics
        self.durable = ["the start of the round"]
        self.kill_how = ""
        self._full_durable_point()

    def _full_durable_point(self):
        w = self.w
        self.states = [(w.ops_done - 1, copy.deepcopy(w.model))]
        self.floor = w.ops_done - 1
        self.durable_data = {e["ino"]: 0 for e in w.model.entries().values()
                             if e["type"] == REG}
        self.replaced = {}  # node id -> index in states of its last O_TRUNC write

    def _op(self):
        w = self.w
        changed = w.step()
        if changed:
            self.states.append((w.ops_done - 1, copy.deepcopy(w.model)))
            op = w.ops[-1]
            if op[0] == "write" and op[2] == "replace":
                self.replaced[w.model.lookup(op[1])[0].id] = len(self.states) - 1
        return changed

    def run(self, max_ops):
        """Ops, durable points (one to three), ops after the last one, up to
        the moment of the kill; stops early if the worker fails."""
        w, rng = self.w, self.rng
        for _ in range(rng.randint(1, 3)):
            held = self._hold_a_file() if rng.random() < 0.4 else None
            try:
                for _ in range(rng.randint(0, max_ops)):
                    if w.failure:
                        return
                    self._op()
                if w.failure:
                    return
                if held:
                    self._fsync_held(*held)
                else:
                    how = rng.choice(["fsync of every directory",
                                      "fsync of every file and directory"])
                    fsync_tree(w.root, w.model, files="file" in how)
                    self._full_durable_point()
                    self.durable = [f"{how} after op #{self.floor}"]
            except OSError as e:  # the mount reports a refused log entry here
                w._fail(f"{clock()} fsync after op #{w.ops_done - 1}: {e}")
                return
            finally:
                if held:
                    os.close(held[0])
        for _ in range(rng.randint(0, max_ops)):
            if w.failure:
                return
            self._op()
        # Most kills come right after a change that left entries in the
        # mount's log (made there, not sent yet): what a crash may lose.
        if rng.random() < 0.7:
            self.kill_how = "right after a change that left entries in its log"
            for _ in range(max_ops):
                if w.failure or (self._op() and
                                 ns_metrics(self.port).get("log_entries", 0) > 0):
                    return
        else:
            # ... else at once, or while the log's batch (sent when its
            # oldest entry is 1 s old) may be on its way, or after it.
            pause = rng.choice([0, round(rng.uniform(0.7, 1.3), 2), 1.5])
            time.sleep(pause)
            self.kill_how = f"{pause} s after the last op"

    def _hold_a_file(self):
        """Opens a file of the subtree, to fsync it after the next ops
        (its open, an entry of the log if the file was made here, comes
        now: a later open would put one at the end of the log, and the
        fsync would then make all of the log durable)."""
        files = self.w.model.paths(lambda n: n.kind == REG)
        if not files:
            return None
        path = self.rng.choice(files)
        fd = os.open(join(self.w.root, *path), os.O_RDONLY | os.O_NOFOLLOW)
        return fd, self.w.model.lookup(path)[0].id, path, self.w.ops_done - 1

    def _fsync_held(self, fd, ino, path, opened_at):
        """fsync of a file held open: its data, and the log up to its last
        entry about the file, with everything before it, are durable."""
        os.fsync(fd)
        w = self.w
        last = max([i for i in range(opened_at + 1, w.ops_done) if ino in w.touched[i]],
                   default=opened_at)
        self.floor = max(self.floor, last)
        self.durable_data[ino] = len(self.states) - 1
        self.durable.append(f"fsync of {show(b'/'.join(path))} (opened after op #{opened_at}) "
                            f"after op #{w.ops_done - 1}: its last change op #{last}")

    @property
    def last_call(self):
        """The number of the last op that was surely a call (-1: none)."""
        return max((i for i, c in enumerate(self.w.synchronous) if c), default=-1)

    def match(self, actual):
        """(op number, model) of the latest state actual is, or None, and
        what failed. Candidates: the states from the durable point (floor)
        or the last call, whichever came later, on."""
        found = []
        lowest = max(self.floor, self.last_call)
        first = max(i for i, (at, _) in enumerate(self.states) if at <= lowest)
        for at, state in reversed(self.states[first:]):
            if compare(state.entries(), actual, contents=False):
                continue
            content = self.content_problems(state, actual)
            if not content:
                return (at, state), found
            found += [f"the state after op #{at} has the structure, not the contents: {p}"
                      for p in content[:20]]
        return None, found

    def content_problems(self, state, actual):
        """Contents (and sizes) of actual, whose structure matched `state`,
        against what each file held since its content was durable: exactly
        that if it did not change since, else one it had since (or b"" if
        it was made, or truncated by an O_TRUNC write, since)."""
        datas = {}  # node id -> [data in each state, None where it is not there]
        for i, (_, m) in enumerate(self.states):
            for e in m.entries().values():
                if e["type"] == REG:
                    datas.setdefault(e["ino"], [None] * len(self.states))[i] = e["data"]
        out = []
        for rel, e in sorted(state.entries().items()):
            if e["type"] != REG:
                continue
            got = actual[rel]
            if got["size"] != len(got["data"]):
                out.append(f"{show(rel)}: size {got['size']}, but {len(got['data'])} bytes read")
            ino = e["ino"]
            since = self.durable_data.get(ino)
            had = {d for d in datas[ino][since or 0:] if d is not None}
            if since is not None and had == {datas[ino][since]}:
                if got["data"] != datas[ino][since]:
                    out.append(f"{show(rel)}: content {short(got['data'])}, but it was "
                               f"{short(datas[ino][since])} when made durable and never "
                               f"changed since")
                continue
            if since is None or self.replaced.get(ino, -1) > since:
                had.add(b"")
            if got["data"] not in had:
                out.append(f"{show(rel)}: content {short(got['data'])} is none the file had "
                           f"since it was durable ({', '.join(short(a) for a in had)})")
        return out

    def mismatch(self, actual, found):
        """The failure's text: what failed, the diffs against the closest
        state, the durable one and the last one."""
        at, near = min(((a, compare(st.entries(), actual, contents=False))
                        for a, st in self.states), key=lambda x: len(x[1]))
        parts = [("", found),
                 (f"against the closest state (after op #{at}), contents aside:", near),
                 (f"against the last full durable point's state (after op "
                  f"#{self.states[0][0]}):", compare(self.states[0][1].entries(), actual)),
                 (f"against the state after the last op (#{self.w.ops_done - 1}):",
                  compare(self.states[-1][1].entries(), actual))]
        return "\n".join(f"  {title}\n" + "".join(f"    {d}\n" for d in diffs[:40])
                         for title, diffs in parts if title or diffs)


def mount_kills(base, seed, rounds=3, max_ops=40, m2_grants=False, timeout=600):
    """Scenario 2 (see the module's docstring) under directory `base`;
    returns a Result."""
    res = Result("mountkill", seed, f"python3 tests/nscrash.py mountkill --seed {seed} "
                                    f"--rounds {rounds} --ops {max_ops}"
                                    + (" --m2-grants" if m2_grants else ""))
    start = time.monotonic()
    # Sessions live LEASE_MS without heartbeats: the killed mount's
    # attribute leases go with its session, and until then the new mount 1
    # is not granted the directories that mount holds names in.
    c = Standalone(base, nodes=2, lease_ms=LEASE_MS)
    m1, m2 = c.mounts
    port = free_port()
    m1.extra += GRANTS + [f"--metrics_addr=127.0.0.1:{port}"]
    if m2_grants:
        m2.extra += GRANTS
    dog = Watchdog(timeout, lambda: mount_procs(c.mounts))
    name = b"nscrash-%d" % seed
    local_total = pending_total = 0
    logs = []  # (title, every op of a round)
    old_umask = os.umask(0)
    try:
        c.start()
        root1 = join(os.fsencode(m1.path), name)
        root2 = join(os.fsencode(m2.path), name)
        os.mkdir(root1, 0o755)
        model = CrashModel()
        fsync_tree(root1, model)
        for rnd in range(rounds):
            if rnd:
                # A new mount 1 (metrics on another port: the killed one's
                # may linger in TIME_WAIT).
                port = free_port()
                m1.extra[-1] = f"--metrics_addr=127.0.0.1:{port}"
                m1.start()
                wait_for(lambda: len((c.server.status() or {}).get("sessions", [])) == 2, 30,
                         "the killed mount's session to end")
            w = CrashWorker(seed, 0, root1, model=model, rng_seed=seed * 1000 + rnd)
            logs.append((f"round {rnd + 1}", w.log))
            r = Round(w, random.Random(seed * 1000 + 500 + rnd), port)
            r.run(max_ops)
            res.add_counts(w.counts)
            if w.failure:
                res.failures.append(f"round {rnd + 1}: {w.failure}")
                res.logs.append((f"round {rnd + 1}: last 40 ops", w.log[-40:]))
                break
            before = ns_metrics(port)
            local_total += before.get("local_changes_total", 0)
            pending_total += before.get("log_entries", 0)
            m1.kill9()
            desc = (f"round {rnd + 1}: {w.ops_done} ops; durable: {'; '.join(r.durable)}; "
                    f"kill -9 of mount 1 at {clock()}, {r.kill_how} "
                    f"({before.get('local_changes_total')} changes made there, "
                    f"{before.get('log_entries')} entries in its log)")
            # Mount 2 (fresh: started anew after every round) looks: its
            # first lookup waits until mount 1's grants run out.
            actual, found = observe_tree(root2)
            matched, why = r.match(actual)
            if matched is None or found:
                res.failures.append(f"{desc}: the tree through mount 2 is no state between "
                                    f"the durable point and the last op\n"
                                    + r.mismatch(actual, found + why))
                res.logs.append((f"round {rnd + 1}: the ops since the last full durable point",
                                 w.log[r.states[0][0] + 1:]))
                break
            at, state = matched
            older = sum(1 for rel, e in state.entries().items()
                        if e["type"] == REG and actual[rel]["data"] != e["data"])
            lowest = max(r.floor, r.last_call)
            res.notes.append(f"{desc}: found the state after op #{at} "
                             f"({sum(1 for a, _ in r.states if a > lowest)} changes after op "
                             f"#{lowest} (the durable point or the last call), "
                             f"{sum(1 for a, _ in r.states if a > at)} of them lost; "
                             f"{older} files with an earlier content)")
            check_inodes(m2.path, 1 + state.inodes(), f"round {rnd + 1}", res.failures)
            if not res.ok:
                break
            # The next round starts from what is there, file contents too.
            model = copy.deepcopy(state)
            for rel, e in actual.items():
                if e["type"] == REG:
                    model.lookup(tuple(rel.split(b"/")))[0].data = e["data"]
            m2.unmount()  # its leases go: mount 1 may be granted the directories again
            m2.start()
        res.notes.append(f"changes made by mount 1 itself: {local_total}, entries in its log "
                         f"at the kills: {pending_total}")
        if res.ok and not local_total:
            res.failures.append("no change was made by mount 1 itself: grants not used")
    except Exception:
        res.failures.append("harness: " + traceback.format_exc())
    finally:
        os.umask(old_umask)
        dog.cancel()
        c.stop()
    if dog.fired:
        res.failures.append(f"watchdog: the run took longer than {timeout} s (hung?)")
    problem = fsck_problem(c.server.data_dir, killed=False)
    if problem:
        res.failures.append(problem)
    else:
        res.notes.append("offline fsck: clean")
    if not res.ok:
        res.keep_logs(logs)
        res.logs.append(("end of the server's log", _tail(c.server.log_path)))
        res.logs.append(("end of mount 1's log", _tail(m1.log_path)))
    res.elapsed = time.monotonic() - start
    return res


# --- command line ---------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", choices=["trio", "mountkill"])
    ap.add_argument("--seed", type=int, default=None, help="default: from the time (printed)")
    ap.add_argument("--workers", type=int, default=1, help="trio: 1 or 2 mounts with workers")
    ap.add_argument("--kills", type=int, default=2, help="trio: kills of the primary")
    ap.add_argument("--ops", type=int, default=None,
                    help="trio: at most this many ops per worker (default 3000); mountkill: "
                         "at most this many ops between two durable points (default 40)")
    ap.add_argument("--rounds", type=int, default=3, help="mountkill: kills of mount 1")
    ap.add_argument("--m2-grants", action="store_true", help="mountkill: mount 2 with grants")
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    print(f"seed {seed}", flush=True)
    from kit.keys import use_cluster_keys
    use_cluster_keys()
    os.environ.setdefault("GRANTFS_MUTEX_CHECK", "1")
    base = tempfile.mkdtemp(prefix="nscrash-")
    os.chmod(base, 0o755)
    try:
        if args.scenario == "trio":
            r = trio_primary_kills(base, seed, workers=args.workers, kills=args.kills,
                                   max_ops=args.ops or 3000, timeout=args.timeout)
        else:
            r = mount_kills(base, seed, rounds=args.rounds, max_ops=args.ops or 40,
                            m2_grants=args.m2_grants, timeout=args.timeout)
    finally:
        from kit.mount import cleanup_mounts_under
        cleanup_mounts_under(base)
        shutil.rmtree(base, ignore_errors=True)
    print(r.report())
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
