"""Section 8: the failover drill (suitelib/failover.py, also bench/drill.py),
a few runs sized to the mode, and the cost of the replica: write + fsync
MB/s and creates/s with the replica in sync against a standalone server.
Skipped, with what the server said, when this build cannot run a witness."""

import os

from kit.server import role_support

from . import failover as drill
from .context import Section
from .harness import BenchError
from .stats import fmt, fmt_ratio, fmt_summary

DRILL = "failover"
COST = "failover_cost"


def failover_drill(ctx):
    cfg, h, res = ctx.cfg, ctx.h, ctx.results
    sec = Section(ctx, 8, DRILL, "Failover drill (from the checkpoint issue)")
    ctx.progress.step("§8 does grantfs-server accept --role=witness?")
    ok, said = role_support(h.bin("server/grantfs-server"), h.path("witness-probe"))
    if not ok:
        ctx.progress.done("no")
        sec.text(f"""
**Skipped: no replica is configured, and this build cannot run one.** The drill (kill the
primary under a write load, measure the pause until the replica serves, and count the bytes
acknowledged before the kill that cannot be read back) needs a witness and a replica.
`grantfs-server --role=witness` exited with status 2:

    {said}
""")
        return [sec]
    ctx.progress.done("yes")
    runs, mib = cfg["drill_runs"], cfg["drill_mib"]
    data = os.urandom(mib << 20)
    trio = drill.make_trio(h, "failover", cfg["capacity"])
    ctx.progress.step("§8 witness, primary, replica: waiting for in sync")
    trio.start()
    ctx.progress.done("in sync")
    m1 = h.mount_grantfs("failover-1", trio.servers)
    m2 = h.mount_grantfs("failover-2", trio.servers)
    results = []
    for run in range(1, runs + 1):
        ctx.progress.step(f"§8 drill {run}/{runs}: kill -9 of the primary during a {mib} MiB "
                          f"write")
        r = drill.one_drill(trio, run, data, m1, m2)
        results.append(r)
        key = (("drill", "kill -9 during write"),)
        for metric, unit, field in (("kill to first served op", "ms", "kill_to_served_ms"),
                                    ("longest write()", "ms", "longest_write_ms"),
                                    ("fsync", "ms", "fsync_ms"),
                                    ("longest create", "ms", "longest_create_ms"),
                                    ("restarted server in sync", "s", "resync_s"),
                                    ("bytes lost", "bytes", "bytes_lost")):
            res.record(DRILL, key, metric, unit, r[field])
        ctx.progress.done(f"served after {r['kill_to_served_ms']:.0f} ms, longest write() "
                          f"{r['longest_write_ms']:.0f} ms, bytes lost: {r['bytes_lost']}")
    failures = [f"run {r['run']}: {drill.drill_failed(r)}" for r in results
                if drill.drill_failed(r)]
    if failures:
        raise BenchError("; ".join(failures))
    cost_runs, cost_mib, creates = ctx.runs, cfg["drill_cost_mib"], cfg["drill_creates"]
    solo = h.start_server("failover-solo", cfg["capacity"])
    solo_dir = h.mount_grantfs("failover-solo-mnt", solo.addr)
    cost_data = data[:cost_mib << 20] if cost_mib <= mib else os.urandom(cost_mib << 20)
    try:
        cost = drill.replica_cost(trio, m1, solo_dir, cost_data, creates, cost_runs,
                                  ctx.progress, label="§8 ")
    finally:
        h.unmount(solo_dir)
        h.unmount(m1)
        h.unmount(m2)
        h.stop(solo)
    for (target, what), values in cost.items():
        metric, unit = drill.COST_FIGURES[what]
        for v in values:
            res.record(COST, (("target", target),), metric, unit, v)

    sec.text(f"""
`bench/drill.py` logic: a witness, a primary and a replica (`grantfs-server --role=witness /
primary / replica`) on loopback; two mounts that know both servers. Each drill writes {mib} MiB
of random bytes in 512 KiB `write()` calls plus `fsync` on mount 1 while mount 2 creates an
empty file every ~10 ms; at 40 % of the file the primary gets SIGKILL. **Kill to first served
op**: until the first of those creates answered by the new primary. **Longest write()**: the
longest single call of the writer (the pause an application sees; a write() returns once its data
is in the mount's cache, so while the file fits in the cache the pause shows in the fsync
instead). **Longest create**: the longest of the probe's creates. **Bytes lost**: the file
read back through mount 2 against what was written. The killed server is then restarted with its
original command line and must be the in-sync replica before the next drill, which kills the
other server (roles alternate). {runs} drill(s); median (min–max). Repeat with
`bench/drill.py --runs 10 --size-mb 1024` (as root).
""")
    key = (("drill", "kill -9 during write"),)
    rows = [[m, unit, fmt_summary(res.get(DRILL, key, m)),
             fmt(res.get(DRILL, key, m).max)] for m, unit in
            (("kill to first served op", "ms"), ("longest write()", "ms"), ("fsync", "ms"),
             ("longest create", "ms"),
             ("restarted server in sync", "s"), ("bytes lost", "bytes"))]
    sec.table(["figure", "unit", "median (min–max)", "max"], rows)
    sec.table(["run", "killed", "epoch after", "kill to served ms", "longest write() ms",
               "bytes lost"],
              [[r["run"], r["killed"], r["epoch_after"], fmt(r["kill_to_served_ms"]),
                fmt(r["longest_write_ms"]), r["bytes_lost"]] for r in results])
    sec.csv(DRILL)
    sec.text(f"""
What the replica costs, same run, interleaved: {cost_mib} MiB in 512 KiB writes + fsync,
{creates} empty-file creates in a new directory, and {creates} POSIX write lock + unlock pairs
on one file, on a mount of the trio (every change is
acknowledged only once the replica has it durably) and on a mount of a standalone server.
Median (min–max) of {cost_runs} run(s).
""")
    rows = []
    for metric, _ in (drill.COST_FIGURES[w] for w in drill.COST_MEASURES):
        a = res.get(COST, (("target", drill.IN_SYNC),), metric)
        b = res.get(COST, (("target", drill.STANDALONE),), metric)
        rows.append([metric, fmt_summary(a), fmt_summary(b), fmt_ratio(a, b)])
    sec.table(["figure", drill.IN_SYNC, drill.STANDALONE, "in sync / standalone"], rows)
    sec.csv(COST)
    return [sec]
