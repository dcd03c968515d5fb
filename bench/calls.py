#!/usr/bin/env python3
"""Where the calls go: a workload on one mount of a standalone server, with
what it cost in calls and CPU, for one or more builds alternated.

    bench/calls.py [--builds DIR ...] [--runs 3] [--workload dbench|coldfind|untar]
                   [--secs 15] [--mount-flag=--ns_grants=on ...] [--server-flag=...]
                   [--perf server|mount]

dbench: `dbench -D MOUNT -t SECS 4` on a fresh mount (of a fresh server).
Prints dbench's throughput, the server's calls by name (its
grantfs_server_call_seconds_count and _sum), the CPU seconds
(utime + stime) the server and the mount used during the run, and the
mount's FUSE operations by the time their handlers took
(grantfs_mount_op_seconds: where dbench waited).

coldfind: a tree of 20,000 files (20 x 10 directories of 100 one-line
files) made on one mount, then `find` over it from a fresh mount of the
same server (another node that never saw it; the server's caches are
warm), and again from that mount (warm). Prints both times and the cold
walk's calls.

untar: `tar x` of a tarball of 20,000 small files (bench/suitelib/tarball.py,
on the local disk, made once per invocation) into the mount, then fsync of
the tree's top directory (with namespace grants: the mount's whole log, so
everything it answered is on the server, durable; `sync` does not reach a
FUSE mount). Prints the time of both together, the tar alone, the calls and
the CPU. --files N changes the count.

With several --builds, run i of each build is made before run i+1 of any, so
a machine that slows down (builds, other tests) shows in every build alike;
compare builds only within one invocation. --perf records the server's or
the mount's CPU profile of the first run of the first build with
`perf record -g` into /tmp/calls-perf.data (coldfind: of the cold mount).

The default build is $GRANTFS_BUILD or ./build.
"""

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import suitelib  # noqa: E402,F401 (puts tests/ on the path)
from suitelib.tarball import make_tarball  # noqa: E402
from kit.keys import use_cluster_keys  # noqa: E402
from kit.mount import Mount  # noqa: E402
from kit.ports import free_port  # noqa: E402
from kit.topology import Standalone  # noqa: E402


def server_calls(port, metric="grantfs_server_call_seconds"):
    """{call: (count, seconds)} of the histogram `metric` (by op) at
    127.0.0.1:`port`/metrics: the server's calls, or a mount's FUSE
    operations with metric="grantfs_mount_op_seconds"."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(metric + r'_(count|sum)\{op="(\w+)"\} (\S+)', line)
        if m:
            count, secs = out.get(m.group(2), (0.0, 0.0))
            if m.group(1) == "count":
                count = float(m.group(3))
            else:
                secs = float(m.group(3))
            out[m.group(2)] = (count, secs)
    return out


def cpu_seconds(proc):
    """utime + stime of the process `proc` (a Popen)."""
    try:
        with open(f"/proc/{proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def diff_calls(before, after):
    return {op: (after[op][0] - before.get(op, (0, 0))[0], after[op][1] - before.get(op, (0, 0))[1])
            for op in after if after[op][0] != before.get(op, (0, 0))[0]}


def start_perf(proc):
    p = subprocess.Popen(["perf", "record", "-g", "-F", "499", "-o", "/tmp/calls-perf.data",
                          "-p", str(proc.pid)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return p


@contextlib.contextmanager
def standalone(build, args):
    """A server serving its metrics on `sport` and one mount, under a
    scratch directory removed afterwards: yields (topology, sport)."""
    base = tempfile.mkdtemp(prefix="calls-", dir="/var/tmp")
    sport, mport = free_port(), free_port()
    t = Standalone(base, nodes=1, mount_extra=args.mount_flag + [f"--metrics_addr=127.0.0.1:{mport}"],
                   server_extra=args.server_flag + [f"--metrics_addr=127.0.0.1:{sport}"],
                   build=build)
    try:
        t.start()
        t.mount_metrics_port = mport
        yield t, sport
    finally:
        t.stop()
        subprocess.run(["rm", "-rf", base])


def run_dbench(build, args, perf):
    with standalone(build, args) as (t, sport):
        server, mount = t.server.proc, t.mounts[0].proc
        p = start_perf(server if perf == "server" else mount) if perf else None
        ops = "grantfs_mount_op_seconds"
        o0 = server_calls(t.mount_metrics_port, ops)
        c0, s0, m0 = server_calls(sport), cpu_seconds(server), cpu_seconds(mount)
        r = subprocess.run(["dbench", "-D", t.n1, "-t", str(args.secs), "4"], capture_output=True,
                           text=True, timeout=args.secs + 300)
        s1, m1, c1 = cpu_seconds(server), cpu_seconds(mount), server_calls(sport)
        o1 = server_calls(t.mount_metrics_port, ops)
        if p:
            p.send_signal(2)
            p.wait(timeout=60)
        m = re.search(r"Throughput ([\d.]+) MB/sec", r.stdout)
        if not m:
            raise RuntimeError(f"dbench: {r.stdout[-500:]} {r.stderr[-500:]}")
        return {"value": float(m.group(1)), "unit": "MB/s", "calls": diff_calls(c0, c1),
                "ops": diff_calls(o0, o1), "cpu": (s1 - s0, m1 - m0)}


def run_coldfind(build, args, perf):
    with standalone(build, args) as (t, sport):
        cold = Mount(t.server.addr, os.path.join(t.base, "cold"), args.mount_flag, build)
        try:
            return coldfind(t, cold, sport, perf)
        finally:
            cold.unmount()


def coldfind(t, cold, sport, perf):
    """The tree made through `t`'s mount, then walked by `cold` (not yet
    started: it must never have seen the tree)."""
    root = os.path.join(t.n1, "tree")
    for a in range(20):
        for b in range(10):
            d = os.path.join(root, f"t{a}", f"d{b}")
            os.makedirs(d)
            for i in range(100):
                with open(os.path.join(d, f"f{i}"), "w") as f:
                    f.write("x\n")
    subprocess.run(["sync", "-f", t.n1], check=True)
    cold.start()
    p = start_perf(t.server.proc if perf == "server" else cold.proc) if perf else None
    c0, s0, m0 = server_calls(sport), cpu_seconds(t.server.proc), cpu_seconds(cold.proc)
    w = time.monotonic()
    r = subprocess.run(["find", os.path.join(cold.path, "tree")], capture_output=True,
                       text=True, check=True)
    elapsed = time.monotonic() - w
    c1, s1, m1 = server_calls(sport), cpu_seconds(t.server.proc), cpu_seconds(cold.proc)
    if p:
        p.send_signal(2)
        p.wait(timeout=60)
    if len(r.stdout.splitlines()) != 1 + 20 + 200 + 20000:
        raise RuntimeError(f"find listed {len(r.stdout.splitlines())} names")
    w = time.monotonic()
    subprocess.run(["find", os.path.join(cold.path, "tree")], capture_output=True, check=True)
    warm = time.monotonic() - w
    return {"value": elapsed, "unit": "s cold", "warm": warm, "calls": diff_calls(c0, c1),
            "cpu": (s1 - s0, m1 - m0)}


_TARBALLS = {}


def tarball(files):
    """A tarball of `files` small files on the local disk, made once."""
    if files not in _TARBALLS:
        base = tempfile.mkdtemp(prefix="calls-tar-", dir="/var/tmp")
        _TARBALLS[files] = (base, make_tarball(base, files))
    return _TARBALLS[files][1]


def run_untar(build, args, perf):
    tar = tarball(args.files)
    with standalone(build, args) as (t, sport):
        server, mount = t.server.proc, t.mounts[0].proc
        p = start_perf(server if perf == "server" else mount) if perf else None
        c0, s0, m0 = server_calls(sport), cpu_seconds(server), cpu_seconds(mount)
        w = time.monotonic()
        subprocess.run(["tar", "xf", tar, "-C", t.n1], check=True, timeout=1800)
        untar = time.monotonic() - w
        fd = os.open(os.path.join(t.n1, "tree"), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        elapsed = time.monotonic() - w
        s1, m1, c1 = cpu_seconds(server), cpu_seconds(mount), server_calls(sport)
        if p:
            p.send_signal(2)
            p.wait(timeout=60)
        return {"value": elapsed, "unit": "s (tar x + fsync of its top directory)", "warm": untar,
                "calls": diff_calls(c0, c1), "cpu": (s1 - s0, m1 - m0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--builds", nargs="+",
                    default=[os.environ.get("GRANTFS_BUILD", os.path.join(os.getcwd(), "build"))])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workload", choices=["dbench", "coldfind", "untar"], default="dbench")
    ap.add_argument("--files", type=int, default=20000, help="untar: files in the tarball")
    ap.add_argument("--secs", type=int, default=15)
    ap.add_argument("--mount-flag", action="append", default=[],
                    help="a grantfs-mount flag, e.g. --mount-flag=--ns_grants=on (repeatable)")
    ap.add_argument("--server-flag", action="append", default=[],
                    help="a grantfs-server flag, e.g. --server-flag=--sync_data=false (repeatable)")
    ap.add_argument("--perf", choices=["server", "mount"])
    args = ap.parse_args()
    use_cluster_keys()
    run = {"dbench": run_dbench, "coldfind": run_coldfind, "untar": run_untar}[args.workload]
    results = {b: [] for b in args.builds}
    for i in range(args.runs):
        for j, b in enumerate(args.builds):
            r = run(b, args, args.perf if i == 0 and j == 0 else None)
            results[b].append(r)
            calls = ", ".join(f"{op} {int(n)} ({s:.2f} s)"
                              for op, (n, s) in sorted(r["calls"].items(), key=lambda x: -x[1][0]))
            label = "tar x alone" if args.workload == "untar" else "warm"
            extra = f", {label} {r['warm']:.3f} s" if "warm" in r else ""
            print(f"run {i + 1} {b}: {r['value']:.3f} {r['unit']}{extra}; cpu server "
                  f"{r['cpu'][0]:.1f} s, mount {r['cpu'][1]:.1f} s; calls: {calls}", flush=True)
            if "ops" in r:
                ops = ", ".join(f"{op} {int(n)} ({s:.2f} s)"
                                for op, (n, s) in sorted(r["ops"].items(), key=lambda x: -x[1][1]))
                print(f"  the mount's FUSE operations, by time: {ops}", flush=True)
    for base, _ in _TARBALLS.values():
        subprocess.run(["rm", "-rf", base])
    for b, rs in results.items():
        v = [r["value"] for r in rs]
        print(f"{b}: median {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f}) "
              f"{rs[0]['unit']} over {len(v)} run(s)")


if __name__ == "__main__":
    main()
