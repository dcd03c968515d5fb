"""Section 9: group commit under concurrent metadata changes. Callers make
directories at the same time through one mount, against a standalone
server and against a trio (witness, primary, replica; suitelib/failover.py
make_trio); the server's Status counters before and after say how many WAL
fsyncs and replica round trips the changes needed (docs/architecture.md,
"Group commit")."""

import os
import threading
import time

from kit.server import status

from . import failover as drill
from .context import Section
from .harness import BenchError
from .stats import fmt_summary

SLUG = "group_commit"
STANDALONE = "standalone"
TRIO = "trio (replica in sync)"


def _counters(h, addr):
    st = status(addr, timeout=10, build=h.build)
    if st is None:
        raise BenchError(f"grantfsctl status of {addr} did not answer")
    if "meta_changes" not in st:
        raise BenchError(f"{addr}: status has no group-commit counters (an older server?)")
    return st


def _prepare(root, callers):
    """A new directory under `root` for each caller: the kernel serializes
    the creates of one directory (the parent's inode lock), so callers
    that share one would never reach the server together."""
    os.mkdir(root)
    dirs = [os.path.join(root, f"c{i}") for i in range(callers)]
    for d in dirs:
        os.mkdir(d)
    return dirs


def _mkdirs(dirs, ops):
    """`ops` mkdirs split over one thread per directory of `dirs`, started
    together; returns the seconds from start to the last one's end. Python
    threads: the GIL is released in each mkdir call."""
    callers = len(dirs)
    per = [ops // callers + (1 if i < ops % callers else 0) for i in range(callers)]
    errors = []
    start = threading.Barrier(callers + 1)

    def work(i):
        try:
            start.wait()
            for j in range(per[i]):
                os.mkdir(os.path.join(dirs[i], str(j)))
        except Exception as e:  # reported after the join
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.monotonic()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    if errors:
        raise BenchError(f"mkdir with {callers} callers: {errors[0]}")
    return elapsed


def _measure(ctx, target, mnt, addr, callers_list, ops):
    res = ctx.results
    for run in range(ctx.runs):
        for callers in callers_list:
            ctx.progress.step(f"§9 {target}: {ops} mkdirs from {callers} caller(s), "
                              f"run {run + 1}/{ctx.runs}")
            dirs = _prepare(os.path.join(mnt, f"gc-{callers}-{run}"), callers)
            before = _counters(ctx.h, addr)
            secs = _mkdirs(dirs, ops)
            after = _counters(ctx.h, addr)
            changes = after["meta_changes"] - before["meta_changes"]
            syncs = after["meta_wal_syncs"] - before["meta_wal_syncs"]
            trips = after.get("repl_round_trips", 0) - before.get("repl_round_trips", 0)
            if changes < ops:
                raise BenchError(f"{target}: {ops} mkdirs but the server counted {changes} "
                                 f"changes")
            key = (("target", target), ("callers", callers))
            res.record(SLUG, key, "mkdir", "ops/s", ops / secs)
            res.record(SLUG, key, "WAL fsyncs per change", "fsyncs", syncs / changes)
            if target == TRIO:
                res.record(SLUG, key, "replica round trips per change", "round trips",
                           trips / changes)
            ctx.progress.done(f"{ops / secs:.0f}/s, {changes} changes, {syncs} fsyncs"
                              + (f", {trips} round trips" if target == TRIO else ""))


def group_commit(ctx):
    cfg, h, res = ctx.cfg, ctx.h, ctx.results
    callers_list, ops = cfg["gc_callers"], cfg["gc_ops"]
    sec = Section(ctx, 9, SLUG, "Group commit of concurrent metadata changes")

    solo = h.start_server("gc-solo", cfg["capacity"])
    mnt = h.mount_grantfs("gc-solo-mnt", solo.addr)
    try:
        _measure(ctx, STANDALONE, mnt, solo.addr, callers_list, ops)
    finally:
        h.unmount(mnt)
        h.stop(solo)

    # A build without roles fails here; section 8 says why in its report.
    trio = drill.make_trio(h, "gc", cfg["capacity"])
    ctx.progress.step("§9 witness, primary, replica: waiting for in sync")
    trio.start()
    ctx.progress.done("in sync")
    tmnt = h.mount_grantfs("gc-trio-mnt", trio.servers)
    try:
        _measure(ctx, TRIO, tmnt, trio["A"].addr, callers_list, ops)
    finally:
        h.unmount(tmnt)
        trio.stop()

    sec.text(f"""
{ops} `mkdir` calls through one grantfs-mount, split over 1 to {max(callers_list)} threads
started together, each thread in a directory of its own (the kernel serializes the creates of
one directory: with a shared one, the callers would never reach the server together). Each
mkdir is a synchronous FUSE request and one MkNod call, so up to that many changes reach the
server at once. Each change is acknowledged only once its
RocksDB batch is durable (WAL fsync) and, in the trio, once the replica acknowledged it. The
server shares work between concurrent changes (docs/architecture.md, "Group commit"): one WAL
fsync covers every batch applied before it started, and one replica acknowledgement releases
every change up to the seq it names. The per-change figures come from the server's counters
(`grantfsctl status`: `meta_changes`, `meta_wal_syncs`, `repl_round_trips`) before and after
each point, so they include anything else the server changed meanwhile (nothing else runs).
Median (min–max) of {ctx.runs} run(s).
""")
    rows = []
    for target in (STANDALONE, TRIO):
        for c in callers_list:
            key = (("target", target), ("callers", c))
            rows.append([target, c] + [fmt_summary(res.get(SLUG, key, m)) for m in
                                       ("mkdir", "WAL fsyncs per change")] +
                        [fmt_summary(res.get(SLUG, key, "replica round trips per change"))
                         if target == TRIO else "-"])
    sec.table(["server", "callers", "mkdir ops/s", "WAL fsyncs per change",
               "replica round trips per change"], rows)
    sec.csv(SLUG)
    return [sec]
