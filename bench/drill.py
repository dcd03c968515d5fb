#!/usr/bin/env python3
"""The failover drill, repeatable: kill -9 the primary during a streaming
write, N times, alternating roles; print the pauses and the bytes lost.

    bench/drill.py [--build DIR] [--runs 10] [--size-mb 1024] [--mode drill|compare|both|untar]

It starts a witness, a primary and a replica (grantfs-server --role=...) and
two mounts that know both servers, under a scratch directory in --workdir.
Each run writes --size-mb MiB of random bytes in 512 KiB os.write() calls
(then fsync) on mount 1 while mount 2 creates an empty file every ~10 ms;
at --kill-at of the way the primary gets SIGKILL. Per run it prints the time
from the kill to the first create served by the new primary, the longest
single write() (and the fsync: a write() returns once its data is in the
mount's cache, so while the file fits in the cache the pause shows in the
fsync), the longest probe create, and "bytes lost: N" from reading the file
back through mount 2; then the killed server is restarted with its original
command line and must come back as the in-sync replica before the next run,
which kills the other server. At the end: median and max over the runs.

--mode compare measures what the replica costs, in the same run: the same
write + fsync (MB/s), --creates empty-file creates (per s) and as many POSIX
lock + unlock pairs (per s) on a mount of the trio (replica in sync) and on a
mount of a standalone server, interleaved, median (min-max) of --compare-runs.
With --peer-delay-ms D the primary and the replica reach each other through
grantfs-latency-proxy, D ms each way (a slower link between two machines;
clients reach the servers direct): replication then adds 2 * D ms to every
change a client waits for, and the dd row shows whether it caps throughput.

--mode untar is the drill of namespace grants (issue 17): `tar x` of a
tarball of --tar-files small files (made on the local disk) into mount 1, a
`grantfs-mount --ns_grants=on`, while a probe process creates a file on the
same mount every ~10 ms; when tar has read --kill-at of the tarball the
primary gets SIGKILL, and tar goes on to the end. Then `sync -f` (syncfs) of
the mount and an fsync of every directory tar made, and the tree is checked
against the tarball's listing and bytes through mount 1 and through mount 2
(a mount without grants that never saw it: another node). Per run: tar's
time, the longest pause in tar's own progress (its --checkpoint lines; and
before the kill, for scale), the longest probe create, kill to the heir
saying primary, files lost or wrong on each mount, and the errors mount 1
logged (any fails the run; suitelib/untar_drill.py).

Exit status: 0 every run kept every byte with no error, 1 a run lost bytes,
saw an error or did not recover (the logs are kept and their place printed),
2 bad usage or this build cannot run a witness.
"""

import argparse
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from suitelib import failover as drill  # noqa: E402 (suitelib puts tests/ on the path)
from suitelib import tarball, untar_drill  # noqa: E402
from suitelib.context import Countdown, Progress  # noqa: E402
from suitelib.harness import BenchError, Harness, install_signal_handlers  # noqa: E402
from suitelib.stats import fmt, fmt_summary, summarize  # noqa: E402

from kit.server import role_support  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_line(r):
    return (f"run {r['run']}: killed {r['killed']} (primary at epoch {r['epoch_before']}), "
            f"{r['new_primary']} primary at epoch {r['epoch_after']}; kill -> first served op "
            f"{r['kill_to_served_ms']:.0f} ms (status says primary after "
            f"{r['kill_to_status_primary_ms']:.0f} ms); longest write() "
            f"{r['longest_write_ms']:.0f} ms of {r['writes']}; fsync {r['fsync_ms']:.0f} ms; "
            f"longest probe create {r['longest_create_ms']:.0f} ms; "
            f"{r['killed']} back in sync after {r['resync_s']:.1f} s; "
            f"bytes lost: {r['bytes_lost']}")


def drills(h, progress, runs, size_mb, kill_at, capacity):
    """Runs the drills; returns (results, failures)."""
    progress.step(f"{size_mb} MiB of random bytes")
    data = os.urandom(size_mb << 20)
    progress.done(drill.sha256(data)[:16])
    progress.step("starting witness, primary and replica; waiting for in sync")
    trio = drill.make_trio(h, "drill", capacity)
    trio.start()
    progress.done(f"A {trio['A'].addr}, B {trio['B'].addr}, witness {trio['W'].addr}")
    m1 = h.mount_grantfs("mnt1", trio.servers)
    m2 = h.mount_grantfs("mnt2", trio.servers)
    return repeat(h, progress, runs, (m1, m2),
                  lambda n: f"drill {n}: {size_mb} MiB write, kill -9 of the primary at "
                            f"{kill_at:.0%}",
                  lambda run: drill.one_drill(trio, run, data, m1, m2, kill_at),
                  run_line, drill.drill_failed)


def repeat(h, progress, runs, mounts, step, one, line, failed):
    """Runs `one(run)` for runs 1..runs with progress (`step(n)` says
    which), prints `line(result)` and what `failed(result)` says is wrong,
    then unmounts `mounts`; returns (results, failures)."""
    results, failures = [], []
    countdown = Countdown(runs)
    for run in range(1, runs + 1):
        progress.step(step(countdown.next()))
        r = one(run)
        countdown.finished()
        results.append(r)
        why = failed(r)
        progress.done("FAILED" if why else "ok")
        print(line(r), flush=True)
        if why:
            failures.append(f"run {run}: {why}")
            print(f"run {run} FAILED: {why}", flush=True)
    for m in mounts:
        h.unmount(m)
    return results, failures


def untar_line(r):
    pause = (f"{r['kill_to_primary_ms']:.0f} ms" if r["kill_to_primary_ms"] is not None
             else "not seen")
    line = (f"run {r['run']}: killed {r['killed']} (primary at epoch {r['epoch_before']}) "
            f"{r['kill_at_s']:.1f} s into tar, {r['new_primary']} primary at epoch "
            f"{r['epoch_after']} ({pause} after the kill); tar x of {r['files']:,} files "
            f"{r['tar_s']:.1f} s, exit {r['tar_rc']}; longest pause in tar's progress "
            f"{r['longest_tar_gap_ms']:.0f} ms (before the kill "
            f"{r['longest_tar_gap_before_kill_ms']:.0f} ms); longest probe create "
            f"{r['longest_create_ms']:.0f} ms of {r['probe_creates']}; sync -f "
            f"{r['syncfs_ms']:.0f} ms, fsync of every directory {r['fsync_dirs_ms']:.0f} ms; "
            f"on the mount: {r['here'].text()}; on another mount: {r['there'].text()}; "
            f"{r['killed']} back in sync after {r['resync_s']:.1f} s; mount log: "
            f"{len(r['log_errors'])} errors, {len(r['log_warnings'])} warnings (the failover's "
            f"retries among them)")
    return "\n    ".join([line] + r["log_errors"][:10])


def untars(h, progress, runs, files, kill_at, capacity):
    """Runs the untar drills; returns (results, failures)."""
    progress.step(f"a tarball of {files:,} small files on the local disk")
    tar = tarball.make_tarball(h.local_dir("untar-src"), files)
    listing, dirs = tarball.contents(tar)
    progress.done(f"{os.path.getsize(tar) >> 10} KiB")
    progress.step("starting witness, primary and replica; waiting for in sync")
    trio = drill.make_trio(h, "untar", capacity)
    trio.start()
    progress.done(f"A {trio['A'].addr}, B {trio['B'].addr}, witness {trio['W'].addr}")
    m1 = h.mount_grantfs("untar-ns", trio.servers, ns_grants="on")
    m2 = h.mount_grantfs("untar-other", trio.servers)
    return repeat(h, progress, runs, (m1, m2),
                  lambda n: f"untar drill {n}: tar x of {files:,} files, kill -9 of the primary "
                            f"at {kill_at:.0%}",
                  lambda run: untar_drill.one_untar(h, trio, run, tar, listing, dirs, m1, m2,
                                                    kill_at),
                  untar_line, untar_drill.untar_failed)


def untar_summary_lines(results):
    out = []
    for key, what in (("tar_s", "tar x (s)"),
                      ("longest_tar_gap_ms", "longest pause in tar's progress"),
                      ("longest_tar_gap_before_kill_ms", "the same before the kill"),
                      ("longest_create_ms", "longest probe create on the same mount"),
                      ("kill_to_primary_ms", "kill -> heir says primary"),
                      ("fsync_dirs_ms", "fsync of every directory after tar"),
                      ("resync_s", "restarted server back in sync (s)")):
        vals = [r[key] for r in results if r[key] is not None]
        if not vals:
            out.append(f"{what}: not measured")
            continue
        s = summarize(vals)
        unit = "" if key.endswith("_s") else " ms"
        out.append(f"{what}: median {fmt(s.median)}{unit}, max {fmt(s.max)}{unit} "
                   f"(min {fmt(s.min)}, {s.n} runs)")
    for where, what in (("here", "the mount that ran tar"), ("there", "another mount")):
        lost = sum(len(r[where].missing) for r in results)
        wrong = sum(len(r[where].wrong) + len(r[where].extra) for r in results)
        out.append(f"on {what}: {lost} files lost, {wrong} wrong or unexpected, in total over "
                   f"{len(results)} runs")
    out.append(f"mount log: {sum(len(r['log_errors']) for r in results)} errors and "
               f"{sum(len(r['log_warnings']) for r in results)} warnings in total")
    return out


def summary_lines(results):
    out = []
    for key, what in (("kill_to_served_ms", "kill -> first served op"),
                      ("longest_write_ms", "longest write()"), ("fsync_ms", "fsync"),
                      ("longest_create_ms", "longest probe create (metadata op)"),
                      ("resync_s", "restarted server back in sync (s)")):
        s = summarize([r[key] for r in results])
        unit = "" if key.endswith("_s") else " ms"
        out.append(f"{what}: median {fmt(s.median)}{unit}, max {fmt(s.max)}{unit} "
                   f"(min {fmt(s.min)}, {s.n} runs)")
    lost = sum(r["bytes_lost"] for r in results)
    out.append(f"bytes lost: {lost} in total over {len(results)} runs")
    return out


def compare(h, progress, runs, size_mb, creates, capacity, peer_delay_ms=0):
    """Summaries of dd MB/s and creates/s, replica in sync vs standalone."""
    progress.step("compare: starting a trio and a standalone server")
    trio = drill.make_trio(h, "cmp", capacity, peer_delay_ms)
    trio.start()
    solo = h.start_server("standalone", capacity)
    progress.done("up")
    got = drill.replica_cost(trio, h.mount_grantfs("cmp-trio", trio.servers),
                             h.mount_grantfs("cmp-solo", solo.addr), os.urandom(size_mb << 20),
                             creates, runs, progress)
    return {k: summarize(v) for k, v in got.items()}


def keep_logs(h):
    dest = os.path.join(os.path.dirname(h.base), f"grantfs-drill-logs-{time.strftime('%H%M%S')}")
    os.makedirs(dest, exist_ok=True)
    for name in os.listdir(h.base):
        if name.endswith(".log"):
            shutil.copy(os.path.join(h.base, name), dest)
    return dest


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(REPO, "build"), help="build directory")
    p.add_argument("--runs", type=int, default=10, help="drills (each kills the primary)")
    p.add_argument("--size-mb", type=int, default=1024, help="MiB written per drill")
    p.add_argument("--kill-at", type=float, default=0.4,
                   help="fraction of the file written when the primary is killed")
    p.add_argument("--mode", choices=("drill", "compare", "both", "untar"), default="drill")
    p.add_argument("--tar-files", type=int, default=20000,
                   help="untar: small files in the tarball")
    p.add_argument("--compare-runs", type=int, default=3)
    p.add_argument("--creates", type=int, default=2000,
                   help="compare: files created (and lock + unlock pairs) per run")
    p.add_argument("--peer-delay-ms", type=int, default=0,
                   help="compare: one-way delay between primary and replica (latency proxy)")
    p.add_argument("--capacity", default="16G", help="each server's --capacity")
    p.add_argument("--workdir", default="/var/tmp", help="scratch space")
    p.add_argument("--keep-logs", action="store_true",
                   help="keep the server and mount logs also when every run passed")
    a = p.parse_args(argv)
    if a.runs < 1 or a.size_mb < 1 or a.tar_files < 1 or not 0 < a.kill_at < 1:
        p.error("--runs, --size-mb and --tar-files must be >= 1, --kill-at between 0 and 1")
    if os.geteuid() != 0:
        print("drill: must run as root (FUSE mounts)", file=sys.stderr)
        return 2
    build = os.path.abspath(a.build)
    for rel in ("server/grantfs-server", "client/grantfs-mount", "client/grantfsctl"):
        if not os.access(os.path.join(build, rel), os.X_OK):
            print(f"drill: {os.path.join(build, rel)} not found: build first, or pass --build",
                  file=sys.stderr)
            return 2
    install_signal_handlers()
    progress = Progress()
    os.makedirs(a.workdir, exist_ok=True)
    h = Harness(build, a.workdir, progress)
    failed = False
    try:
        ok, said = role_support(h.bin("server/grantfs-server"), h.path("probe"))
        if not ok:
            print(f"drill: this grantfs-server cannot run a witness: {said}", file=sys.stderr)
            return 2
        if a.mode in ("drill", "both"):
            results, failures = drills(h, progress, a.runs, a.size_mb, a.kill_at, a.capacity)
            print(f"\n{a.runs} drill(s), {a.size_mb} MiB each, kill -9 at {a.kill_at:.0%}:")
            for line in summary_lines(results):
                print("  " + line)
            if failures:
                failed = True
                print("FAILED runs:\n  " + "\n  ".join(failures))
        if a.mode == "untar":
            results, failures = untars(h, progress, a.runs, a.tar_files, a.kill_at, a.capacity)
            print(f"\n{a.runs} untar drill(s), {a.tar_files:,} files each, kill -9 at "
                  f"{a.kill_at:.0%} of the tarball:")
            for line in untar_summary_lines(results):
                print("  " + line)
            if failures:
                failed = True
                print("FAILED runs:\n  " + "\n  ".join(failures))
        if a.mode in ("compare", "both"):
            s = compare(h, progress, a.compare_runs, a.size_mb, a.creates, a.capacity,
                        a.peer_delay_ms)
            link = f", {a.peer_delay_ms} ms each way to the replica" if a.peer_delay_ms else ""
            print(f"\nreplica in sync{link} vs no replica, median (min-max) of "
                  f"{a.compare_runs}: {a.size_mb} MiB in 512 KiB writes + fsync, {a.creates} "
                  f"creates, {a.creates} lock + unlock pairs")
            for m, unit in (("dd", "MB/s"), ("creates", "creates/s"), ("locks", "pairs/s")):
                rs, ss = s[(drill.IN_SYNC, m)], s[(drill.STANDALONE, m)]
                print(f"  {m:8s} {unit:10s} in sync {fmt_summary(rs):>22s}   standalone "
                      f"{fmt_summary(ss):>22s}   in sync / standalone "
                      f"{rs.median / ss.median:.2f}x")
    except BenchError as e:
        failed = True
        print(f"drill: FAILED: {e}", file=sys.stderr)
    except KeyboardInterrupt as e:
        print(f"drill: interrupted ({str(e) or 'SIGINT'}): cleaning up", file=sys.stderr)
        return 130
    finally:
        if failed or a.keep_logs:
            print(f"drill: server and mount logs kept in {keep_logs(h)}", file=sys.stderr)
        h.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
