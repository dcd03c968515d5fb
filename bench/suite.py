#!/usr/bin/env python3
"""The GrantFS benchmark suite: every measurement of docs/benchmarks.md in
one run, on this machine, GrantFS beside the FUSE passthrough (the ceiling),
tmpfs and the local disk.

    bench/run.sh [--quick | --smoke] [--build DIR] [--out DIR] [--sections 1,3]

It starts its own grantfs-server(s), mounts and proxies under a scratch
directory in --workdir (default /var/tmp), prints one progress line per
step on stderr and each section's table on stdout, and writes
OUT/benchmarks.md with OUT/bench/*.csv (summaries), OUT/bench/runs.csv
(every sample) and OUT/bench/*.png. Everything it started is stopped and
unmounted on exit, also on failure or SIGINT/SIGTERM.

Exit status: 0 all sections ran, 1 a section failed (the report says which),
2 bad usage or a missing prerequisite.
"""

import argparse
import os
import shutil
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from suitelib import (failover_section, fs_sections, group_commit, modes, report,  # noqa: E402
                      rpc_sections, tls_section)
from suitelib.context import Context, Countdown, Progress  # noqa: E402
from suitelib.harness import BenchError, Harness, install_signal_handlers  # noqa: E402
from suitelib.stats import Results  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Section groups in the order they run: (numbers, function). 1 and 2 share
# their runs (the time split is of the same dd runs).
GROUPS = [
    ((1, 2), fs_sections.mkfile_and_dd),
    ((3,), fs_sections.latency_sweep),
    ((4,), fs_sections.parallel_build),
    ((5,), fs_sections.metadata_and_dbench),
    ((6,), rpc_sections.rpc_micro),
    ((7,), rpc_sections.thread_scaling),
    ((8,), failover_section.failover_drill),
    ((9,), group_commit.group_commit),
    ((10,), tls_section.tls_cost),
]
TITLES = {
    1: "mkfile and dd (PxFS)", 2: "Time split (PxFS chunk.py)",
    3: "Latency sweep (Plan 9: latency kills even on 10GbE)",
    4: "Parallel build (Plan 9 mk, NPROC=4 vs 24)",
    5: "Metadata and dbench (Tux3 vs tmpfs vs ext4)",
    6: "RPC microbenchmarks (GMS/Trapeze table)",
    7: "Server thread scaling (Linux knfsd SFS table)",
    8: "Failover drill (from the checkpoint issue)",
    9: "Group commit of concurrent metadata changes",
    10: "What TLS costs",
}

HOWTO = """\
How to regenerate this file (as root, from the repository, after building):

    bench/run.sh                  # full: about an hour on 2 cores
    bench/run.sh --quick          # small sizes, about 5 minutes (not for publishing)
    bench/run.sh --build build --out docs --sections 1,3   # some sections only

or `ninja -C build bench` (`bench-quick`), or `build/bench/grantfs-bench suite [--quick]`.
It needs `dbench`, `gnuplot-nox`, `make` and `gcc` (`scripts/install-deps.sh`). It writes this
file, `docs/bench/*.csv` (one per table, plus `runs.csv` with every sample) and
`docs/bench/*.png`. Each figure is the median of the runs with
(min–max); runs alternate between targets, so the columns of a table come from the same run.
"""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="small sizes, about 5 minutes")
    g.add_argument("--smoke", action="store_true", help="smallest sizes (the e2e test)")
    p.add_argument("--build", default=os.path.join(REPO, "build"), help="build directory")
    p.add_argument("--out", default=os.path.join(REPO, "docs"),
                   help="where benchmarks.md and bench/ go (default: docs)")
    p.add_argument("--workdir", default="/var/tmp", help="scratch space for files and servers")
    p.add_argument("--insecure", action="store_true",
                   help="run every GrantFS process without TLS (GRANTFS_INSECURE=1), to see "
                        "what TLS costs; the report says so")
    p.add_argument("--sections", default="1,2,3,4,5,6,7,8,9,10",
                   help="comma-separated section numbers to run (default: all)")
    a = p.parse_args(argv)
    try:
        wanted = {int(x) for x in a.sections.split(",") if x.strip()}
    except ValueError:
        p.error(f"--sections: expected numbers from 1 to {max(TITLES)}, got '{a.sections}'")
    if not wanted or not wanted <= set(TITLES):
        p.error(f"--sections: expected numbers from 1 to {max(TITLES)}, got '{a.sections}'")
    for nums, _ in GROUPS:  # 1 and 2 come from the same runs: either means both
        if set(nums) & wanted:
            wanted |= set(nums)
    a.wanted = wanted
    a.mode = "quick" if a.quick else "smoke" if a.smoke else "full"
    return a


def check_prerequisites(a, cfg):
    """A list of problems, each saying what is missing and how to get it."""
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root (FUSE and tmpfs mounts)")
    for rel in ("server/grantfs-server", "client/grantfs-mount", "bench/grantfs-bench",
                "bench/grantfs-passthrough", "bench/grantfs-latency-proxy"):
        if not os.access(os.path.join(a.build, rel), os.X_OK):
            problems.append(f"{os.path.join(a.build, rel)} not found: build first "
                            f"(BUILD_DIR={a.build} scripts/build.sh), or pass --build")
    for tool, pkg in (("dbench", "dbench"), ("gnuplot", "gnuplot-nox"), ("make", "make"),
                      ("cc", "gcc"), ("fusermount3", "fuse3"), ("findmnt", "util-linux")):
        if shutil.which(tool) is None:
            problems.append(f"{tool} not found: apt-get install {pkg} (scripts/install-deps.sh)")
    if 5 in a.wanted and not os.path.exists(fs_sections.DBENCH_LOAD):
        problems.append(f"{fs_sections.DBENCH_LOAD} not found: apt-get install dbench")
    if not os.path.isdir(a.workdir):
        problems.append(f"--workdir {a.workdir} is not a directory")
    else:
        need = modes.free_bytes_needed(cfg)
        free = shutil.disk_usage(a.workdir).free
        if free < need:
            problems.append(f"{a.workdir} has {free / 2**30:.1f} GiB free, this mode needs "
                            f"{need / 2**30:.1f} GiB: free space or pass --workdir")
    return problems


def sizes_text(cfg, mode):
    return (f"mode {mode}: {cfg['runs']} run(s) per figure; dd {cfg['dd_mib']} MiB; sweep dd "
            f"{cfg['sweep_mib']} MiB and {cfg['small_files']} small files "
            f"({cfg['sweep_ns_files']:,} with namespace grants); build "
            f"{cfg['build_files']} modules; metadata {cfg['meta_files']:,} files, tree walks "
            f"{cfg['tree_files']:,} files, {cfg['pingpong_rounds']:,} ping-pong rounds "
            f"({cfg['lease_runs']} run(s)), tar x of {cfg['tar_files']:,} files, git clone of "
            f"{cfg['git_files']:,}; dbench "
            f"{cfg['dbench_secs']} s; RPC {cfg['rpc_secs']} s per point; load "
            f"{cfg['load_secs']} s per step; failover {cfg['drill_runs']} drill(s) of "
            f"{cfg['drill_mib']} MiB; group commit {cfg['gc_ops']} mkdirs per point")


def write_report(a, cfg, facts, sections, failures, timings, results, started, total_s):
    os.makedirs(os.path.join(a.out, "bench"), exist_ok=True)
    header, rows = results.raw_rows()
    report.write_csv(os.path.join(a.out, "bench", "runs.csv"), header, rows)
    md = ["# Benchmarks\n",
          f"Generated by `bench/suite.py` ({a.mode} mode) on {started}. Do not edit by hand: "
          f"regenerate.\n", HOWTO,
          "## Machine and run\n",
          report.md_table(["fact", "value"],
                          facts + [("sizes", sizes_text(cfg, a.mode)),
                                   ("load average at end", report.load_average()),
                                   ("suite duration", f"{total_s:.0f} s")]),
          "Server, mounts and load generators share this machine, on loopback; latency is added by "
          "`grantfs-latency-proxy`. Where other work ran on the machine at the same time, the "
          "load averages above show it.\n"]
    by_number = {s.number: s for s in sections}
    for n in sorted(TITLES):
        if n not in a.wanted:
            continue
        if n in by_number:
            md.append(by_number[n].markdown())
        else:
            md.append(f"## {n}. {TITLES[n]}\n\n**Failed:** {failures.get(n, 'did not run')}\n")
    md.append("## Section timings\n")
    md.append(report.md_table(["sections", "seconds"],
                              [(", ".join(map(str, nums)), f"{s:.1f}") for nums, s in timings]))
    with open(os.path.join(a.out, "benchmarks.md"), "w") as f:
        f.write("\n".join(md))


def main(argv):
    a = parse_args(argv)
    cfg = modes.MODES[a.mode]
    a.build = os.path.abspath(a.build)
    a.out = os.path.abspath(a.out)
    problems = check_prerequisites(a, cfg)
    if problems:
        for pr in problems:
            print(f"suite: {pr}", file=sys.stderr)
        return 2
    install_signal_handlers()
    progress = Progress()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    progress.note(f"GrantFS benchmark suite, {sizes_text(cfg, a.mode)}")
    if a.insecure:
        os.environ["GRANTFS_INSECURE"] = "1"
        progress.note("without TLS (--insecure): every process runs with GRANTFS_INSECURE=1")
    facts = report.machine_facts(a.workdir, REPO)
    results = Results()
    harness = Harness(a.build, a.workdir, progress)
    ctx = Context(harness, cfg, a.mode, results, progress, a.out)
    os.makedirs(ctx.bench_dir, exist_ok=True)
    sections, failures, timings = [], {}, []
    groups = [(nums, fn) for nums, fn in GROUPS if set(nums) & a.wanted]
    countdown = Countdown(len(groups))
    try:
        for nums, fn in groups:
            progress.note(f"section {', '.join(map(str, nums))} ({countdown.next()}): "
                          f"{TITLES[nums[0]]}")
            t0 = time.monotonic()
            try:
                for sec in fn(ctx):
                    sections.append(sec)
                    print(sec.markdown(), flush=True)
            except BenchError as e:
                progress.note(f"section {nums} FAILED: {e}")
                for n in nums:
                    failures[n] = str(e)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception:  # a bug in the suite: say where, and go on to the next section
                tb = traceback.format_exc()
                progress.note(f"section {nums} FAILED with an internal error:\n{tb}")
                for n in nums:
                    failures[n] = "internal error: " + tb.strip().splitlines()[-1]
            timings.append((nums, time.monotonic() - t0))
            countdown.finished()
            progress.note(f"sections {', '.join(map(str, nums))} took {timings[-1][1]:.1f} s")
    except KeyboardInterrupt as e:
        progress.note(f"interrupted ({str(e) or 'SIGINT'}): cleaning up, no report written")
        return 130
    finally:
        harness.cleanup()
    total = progress.elapsed()
    write_report(a, cfg, facts, sections, failures, timings, results, started, total)
    progress.note(f"wrote {os.path.join(a.out, 'benchmarks.md')} and {ctx.bench_dir}/ "
                  f"in {total:.0f} s" + (f"; FAILED sections: {sorted(failures)}" if failures
                                         else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
