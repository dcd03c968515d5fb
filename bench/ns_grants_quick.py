"""A quick same-run comparison for namespace grants (issue 17): grantfs-bench
meta (10,000 files: create, stat, unlink, rename) and dbench (4 clients) on a
GrantFS mount with namespace grants on, one with them off (two mounts of one
server), the FUSE passthrough and the local disk (/var/tmp). Prints each run,
then the figures of every run and their medians; docs/benchmarks.md section 5
quotes them.

    GRANTFS_BUILD=$PWD/build RUNS=3 python3 bench/ns_grants_quick.py
    ... ONLY_DBENCH=1 DB_SECS=20 ...   # dbench only
    ... ONLY_TAR=1 TAR_FILES=20000 ...  # tar x and rm -rf of a tree only

The full suite (bench/suite.py) measures the same in section 5, beside tmpfs
and with the tree walks. Run as root.
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # suitelib, which puts tests/ (the kit) on the path
os.environ.setdefault("GRANTFS_BUILD", os.path.join(HERE, "..", "build"))

from suitelib.tarball import make_tarball  # noqa: E402 (first: it puts tests/ on the path)

from kit.keys import use_cluster_keys  # noqa: E402
from kit.mount import force_unmount, start_fuse  # noqa: E402
from kit.processes import stop_process  # noqa: E402
from kit.topology import Standalone  # noqa: E402

BUILD = os.environ["GRANTFS_BUILD"]
RUNS = int(os.environ.get("RUNS", "3"))
FILES = int(os.environ.get("FILES", "10000"))
DB_SECS = int(os.environ.get("DB_SECS", "20"))
DBENCH_RE = re.compile(r"Throughput ([\d.]+) MB/sec\s+(\d+) clients.*max_latency=([\d.]+) ms")
META = ("create", "stat", "unlink", "rename")  # the order of grantfs-bench's CSV line
TAR_FILES = int(os.environ.get("TAR_FILES", "20000"))


def timed(argv):
    t0 = time.monotonic()
    subprocess.run(argv, check=True, timeout=1800)
    return time.monotonic() - t0


def meta(d):
    out = subprocess.run([f"{BUILD}/bench/grantfs-bench", "meta", f"--dir={d}",
                          f"--files={FILES}", "--runs=1"], capture_output=True, text=True,
                         timeout=900).stdout
    line = [ln for ln in out.splitlines() if ln.startswith("CSV,meta,")]
    if not line:
        raise RuntimeError(f"grantfs-bench meta on {d}: {out[-300:]}")
    return [float(x) for x in line[-1].split(",")[-4:]]


def dbench(d):
    out = subprocess.run(["dbench", "-c", "/usr/share/dbench/client.txt", "-D", d, "-t",
                          str(DB_SECS), "4"], capture_output=True, text=True,
                         timeout=DB_SECS + 300).stdout
    m = DBENCH_RE.search(out)
    if not m:
        raise RuntimeError(f"dbench on {d}: {out[-300:]}")
    return float(m.group(1))


def main():
    use_cluster_keys()
    base = tempfile.mkdtemp(prefix="nsbench-")
    os.chmod(base, 0o755)
    c = Standalone(base, nodes=2)
    c.mounts[1].extra.append("--ns_grants=on")
    c.start()
    pt_src, pt = os.path.join(base, "pt-src"), os.path.join(base, "pt")
    os.mkdir(pt_src)
    os.mkdir(pt)
    ptp = start_fuse([f"{BUILD}/bench/grantfs-passthrough", pt_src, pt, "-f"], pt, pt + ".log")
    local = tempfile.mkdtemp(prefix="nsbench-local-", dir="/var/tmp")
    targets = [("grants off", c.n1), ("grants on", c.n2), ("passthrough", pt), ("local", local)]
    res = {}
    only = os.environ.get("ONLY_DBENCH") or os.environ.get("ONLY_TAR")
    try:
        if not os.environ.get("ONLY_DBENCH"):
            tarball = make_tarball(local, TAR_FILES)
            for run in range(RUNS):
                for name, d in targets:
                    dd = os.path.join(d, f"tar-{name.replace(' ', '-')}-{run}")
                    os.makedirs(dd)
                    # (No sync after tar: with grants the last second of
                    # changes may still be in the mount's log, as in the
                    # page cache of the local disk.)
                    x = timed(["tar", "xf", tarball, "-C", dd])
                    rm = timed(["rm", "-rf", dd])
                    res.setdefault((name, "tar x s"), []).append(x)
                    res.setdefault((name, "rm -rf s"), []).append(rm)
                    print(name, f"tar x {x:.2f} s, rm -rf {rm:.2f} s", flush=True)
        for run in range(0 if only else RUNS):
            for name, d in targets:
                res.setdefault((name, "meta"), []).append(meta(d))
                print(name, "meta", dict(zip(META, res[(name, "meta")][-1])), flush=True)
        for run in range(0 if os.environ.get("ONLY_TAR") else RUNS):
            for name, d in targets:
                # A directory of each target's own: the two GrantFS mounts
                # show one namespace, and only what a mount made is granted
                # to it.
                dd = os.path.join(d, f"db-{name.replace(' ', '-')}-{run}")
                os.makedirs(dd)
                res.setdefault((name, "dbench"), []).append(dbench(dd))
                print(name, "dbench", res[(name, "dbench")][-1], "MB/s", flush=True)
    finally:
        for m in c.mounts:
            m.unmount()
        force_unmount(pt)
        stop_process(ptp)
        c.server.stop()
        print([ln for ln in open(c.mounts[1].log_path).read().splitlines()
               if "namespace grants:" in ln])
    for (name, what), runs in sorted(res.items()):
        if what == "meta":
            med = {op: statistics.median(r[i] for r in runs) for i, op in enumerate(META)}
            print(name, what, "medians", med, "runs", runs)
        else:
            print(name, what, "median", statistics.median(runs), "runs", runs)


if __name__ == "__main__":
    main()
