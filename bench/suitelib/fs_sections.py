"""Sections 1-5: file-system workloads through GrantFS, the FUSE
passthrough (the ceiling of any FUSE file system on this machine), tmpfs
and the local disk. Runs are interleaved across targets, so every
comparison is made within the same run."""

import os
import re
import time

from . import ctree, meta_leases, tree_work
from .context import Section
from .harness import BenchError
from .report import num, quote
from .stats import fmt_ratio, fmt_summary, scaled

GFS = "GrantFS"
GFS_OFF = meta_leases.GFS_OFF  # a grantfs-mount --leases=off (section 5)
GFS_NS = meta_leases.GFS_NS  # a grantfs-mount --ns_grants=on (sections 3-5)
PT = "FUSE passthrough"
TMPFS = "tmpfs"
LOCAL = "local disk"


def _csv_fields(out, tag, count):
    """The last `count` fields of the output line starting with CSV,<tag>,."""
    for line in out.splitlines():
        if line.startswith(f"CSV,{tag},"):
            return [float(x) for x in line.split(",")[-count:]]
    raise BenchError(f"grantfs-bench {tag}: no CSV line in its output: {out[-500:]}")


def run_dd(ctx, d, mib, zeros):
    """One grantfs-bench dd run: dict of open/write/fsync/close/total seconds."""
    argv = [ctx.bench(), "dd", f"--dir={d}", f"--mib={mib}", "--bs_kib=512", "--runs=1"]
    if zeros:
        argv.append("--zeros")
    out = ctx.h.run(argv, 60 + mib * 0.5, f"dd of {mib} MiB in {d}")
    o, w, f, c, t = _csv_fields(out, "dd", 5)
    return dict(open_s=o, write_s=w, fsync_s=f, close_s=c, total_s=t)


def run_smallfiles(ctx, d, files, kib):
    argv = [ctx.bench(), "smallfiles", f"--dir={d}", f"--files={files}", f"--file_kib={kib}",
            "--runs=1"]
    out = ctx.h.run(argv, 60 + files * 2.0, f"smallfiles ({files} files) in {d}")
    c, r, u = _csv_fields(out, "smallfiles", 3)
    return dict(create=c, read=r, unlink=u)


def mbps(mib, seconds):
    return mib * 2**20 / 1e6 / seconds


# --- 1 and 2: mkfile, dd, time split ---------------------------------------------------


def mkfile_and_dd(ctx):
    cfg, h, res = ctx.cfg, ctx.h, ctx.results
    mib = cfg["dd_mib"]
    server = ctx.main_server()
    targets = [(GFS, h.mount_grantfs("gfs-dd", server.addr)), (PT, h.mount_passthrough("pt-dd")),
               (LOCAL, h.local_dir("local-dd"))]
    try:
        for run in range(ctx.runs):
            for kind in ("mkfile", "dd"):
                for name, d in targets:
                    ctx.progress.step(f"§1 {kind} {mib} MiB on {name}, run {run + 1}/{ctx.runs}")
                    t = run_dd(ctx, d, mib, zeros=(kind == "mkfile"))
                    key = (("target", name), ("workload", kind))
                    res.record("mkfile_dd", key, "MB/s incl. fsync", "MB/s",
                               mbps(mib, t["total_s"]))
                    res.record("mkfile_dd", key, "write() MB/s", "MB/s", mbps(mib, t["write_s"]))
                    for phase in ("open", "write", "fsync", "close", "total"):
                        res.record("time_split", key, phase, "s", t[f"{phase}_s"])
                    ctx.progress.done(f"{mbps(mib, t['total_s']):.0f} MB/s")
    finally:
        h.unmount(targets[0][1])
        h.unmount(targets[1][1])

    s1 = Section(ctx, 1, "mkfile_dd", "mkfile and dd (PxFS)")
    s1.text(f"""
One {mib} MiB file written in 512 KiB write() calls, fsync, close, through GrantFS (a fastwrite
mount of a server on loopback), through `grantfs-passthrough` of a local directory (the FUSE
ceiling: no FUSE file system can be faster here) and on the local disk. **mkfile** writes zeros
(what mkfile writes by definition); **dd** writes a non-zero pattern that differs in every block,
as `dd bs=512k count={mib * 2} conv=fsync` would from a non-zero source
(`grantfs-bench dd --mib={mib} --bs_kib=512`). MB/s = 10^6 bytes per second over
open+write+fsync+close; median of {ctx.runs} run(s), (min–max).
""")
    rows = []
    for name, _ in targets:
        row = [name]
        for kind in ("mkfile", "dd"):
            row.append(fmt_summary(res.get("mkfile_dd", (("target", name), ("workload", kind)),
                                           "MB/s incl. fsync")))
        dd = res.get("mkfile_dd", (("target", name), ("workload", "dd")), "MB/s incl. fsync")
        row.append(fmt_ratio(dd, res.get("mkfile_dd", (("target", PT), ("workload", "dd")),
                                         "MB/s incl. fsync")))
        row.append(fmt_ratio(dd, res.get("mkfile_dd", (("target", LOCAL), ("workload", "dd")),
                                         "MB/s incl. fsync")))
        rows.append(row)
    s1.table(["target", "mkfile (zeros) MB/s", "dd (non-zero) MB/s", "dd vs passthrough (ceiling)",
              "dd vs local disk"], rows)
    wrows = []
    for name, _ in targets:
        wrows.append([name] + [fmt_summary(res.get("mkfile_dd", (("target", name),
                                                                 ("workload", k)), "write() MB/s"))
                               for k in ("mkfile", "dd")])
    s1.text("The write() calls alone (before fsync), MB/s:")
    s1.table(["target", "mkfile write()", "dd write()"], wrows)
    s1.csv("mkfile_dd")

    s2 = Section(ctx, 2, "time_split", "Time split (PxFS chunk.py)")
    s2.text(f"""
Where the time of the same runs goes: open, the write() calls, fsync, close of the {mib} MiB
written in 512 KiB chunks. Milliseconds, median (min–max) of {ctx.runs} run(s).
""")
    rows = []
    for name, _ in targets:
        for kind in ("dd", "mkfile"):
            key = (("target", name), ("workload", kind))
            rows.append([name, kind] + [fmt_summary(scaled(res.get("time_split", key, p), 1000))
                                        for p in ("open", "write", "fsync", "close", "total")])
    s2.table(["target", "data", "open ms", "write ms", "fsync ms", "close ms", "total ms"], rows)
    data = ""
    for phase in ("open", "write", "fsync", "close"):
        cells = []
        for name, _ in targets:
            s = res.get("time_split", (("target", name), ("workload", "dd")), phase)
            # log scale: a phase that took no measurable time is drawn at 1 us
            cells += [num(max(s.median, 1e-6)), num(max(s.min, 1e-6)), num(max(s.max, 1e-6))]
        data += f"{phase} " + " ".join(cells) + "\n"
    script = f"""
set title "Time split of dd ({mib} MiB, 512 KiB writes, non-zero): median, bars min-max"
set style data histogram
set style histogram errorbars gap 2 lw 1
set style fill solid 0.7 border -1
set logscale y
set ylabel "seconds (log scale)"
set format y "%g"
set key top left
set grid ytics
plot $d using 2:3:4:xtic(1) title {quote(GFS)}, '' using 5:6:7 title {quote(PT)}, \\
     '' using 8:9:10 title {quote(LOCAL)}
"""
    s2.figure("time_split", "time split", script, {"d": data})
    s2.csv("time_split")
    return [s1, s2]


# --- 3: latency sweep --------------------------------------------------------------------


def latency_sweep(ctx):
    cfg, h, res = ctx.cfg, ctx.h, ctx.results
    mib, files, kib = cfg["sweep_mib"], cfg["small_files"], cfg["small_kib"]
    ns_files = cfg["sweep_ns_files"]
    delays = cfg["sweep_delays_ms"]
    server = ctx.main_server()
    proxies = {d: h.start_proxy(f"proxy-{d}ms", server.port, d) for d in delays}
    pt = h.mount_passthrough("pt-sweep")
    ceiling = f"{PT} (no network)"
    modes = ("fastwrite", "writethrough")
    ns_label = f"{GFS} fastwrite, ns grants"  # small files only, ns_files of them

    def measure_small(label, d, target_dir, n):
        key = (("target", label), ("delay_ms", d))
        ctx.progress.step(f"§3 {n} small files, {label}, {d} ms")
        s = run_smallfiles(ctx, target_dir, n, kib)
        for op in ("create", "read", "unlink"):
            res.record("latency_sweep", key, f"small {op}/s", "files/s", s[op])
        ctx.progress.done(f"create {s['create']:.0f}/s, read {s['read']:.0f}/s, "
                          f"unlink {s['unlink']:.0f}/s")

    def measure(label, d, target_dir):
        key = (("target", label), ("delay_ms", d))
        ctx.progress.step(f"§3 dd {mib} MiB, {label}, {d} ms")
        t = run_dd(ctx, target_dir, mib, zeros=False)
        res.record("latency_sweep", key, "write() MB/s", "MB/s", mbps(mib, t["write_s"]))
        res.record("latency_sweep", key, "MB/s incl. fsync", "MB/s", mbps(mib, t["total_s"]))
        res.record("latency_sweep", key, "fsync s", "s", t["fsync_s"])
        ctx.progress.done(f"write() {mbps(mib, t['write_s']):.0f} MB/s, "
                          f"incl. fsync {mbps(mib, t['total_s']):.0f} MB/s")
        measure_small(label, d, target_dir, files)

    try:
        for run in range(ctx.runs):
            ctx.progress.note(f"§3 latency sweep, run {run + 1}/{ctx.runs}")
            measure(ceiling, "none", pt)
            for d in delays:
                for mode in modes:
                    m = h.mount_grantfs(f"sweep-{mode}-{d}ms-{run}", f"127.0.0.1:{proxies[d]}",
                                        mode)
                    try:
                        measure(f"{GFS} {mode}", d, m)
                    finally:
                        h.unmount(m)
                m = h.mount_grantfs(f"sweep-ns-{d}ms-{run}", f"127.0.0.1:{proxies[d]}",
                                    ns_grants="on")
                try:
                    measure_small(ns_label, d, m, ns_files)
                finally:
                    h.unmount(m)
    finally:
        h.unmount(pt)

    sec = Section(ctx, 3, "latency_sweep", "Latency sweep (Plan 9: latency kills even on 10GbE)")
    sec.text(f"""
GrantFS mounted through `grantfs-latency-proxy`, which adds {", ".join(map(str, delays))} ms each
way between client and server (this kernel has no netem), in both write modes: **fastwrite**
(space grants, write-back cache: no round trip per write) and **writethrough** (one RPC per
write). dd: {mib} MiB in 512 KiB writes of non-zero data, fsync. Small files: {files} files of
{kib} KiB each (non-zero) created (open+write+close), read back and checked, unlinked, in a
directory the benchmark makes. The ceiling is the FUSE passthrough without any network. Median
(min–max) of {ctx.runs} run(s).
""")
    rows = []
    ceil = res.get("latency_sweep", (("target", ceiling), ("delay_ms", "none")), "MB/s incl. fsync")
    labels = [(ceiling, "none")] + [(f"{GFS} {m}", d) for m in modes for d in delays]
    for label, d in labels:
        key = (("target", label), ("delay_ms", d))
        w = res.get("latency_sweep", key, "write() MB/s")
        zero = res.get("latency_sweep", (("target", label), ("delay_ms", delays[0])),
                       "write() MB/s") if d != "none" else None
        tot = res.get("latency_sweep", key, "MB/s incl. fsync")
        rows.append([label, "-" if d == "none" else f"{d} ms", fmt_summary(w),
                     fmt_ratio(w, zero) if zero else "-", fmt_summary(tot), fmt_ratio(tot, ceil)])
    sec.table(["target", "added each way", "write() MB/s", f"write() vs {delays[0]} ms",
               "MB/s incl. fsync", "incl. fsync vs passthrough (ceiling)"], rows)

    def small_rows(labels):
        """A row per (label, delay): each op's files/s and, past the first
        delay, its fraction of the figure at the first delay."""
        rows = []
        for label, d in labels:
            key = (("target", label), ("delay_ms", d))
            row = [label, "-" if d == "none" else f"{d} ms"]
            for op in ("create", "read", "unlink"):
                got = res.get("latency_sweep", key, f"small {op}/s")
                zero = (res.get("latency_sweep", (("target", label), ("delay_ms", delays[0])),
                                f"small {op}/s") if d not in ("none", delays[0]) else None)
                row += [fmt_summary(got), fmt_ratio(got, zero) if zero else "-"]
            rows.append(row)
        return rows

    small_header = ["target", "added each way"]
    for op in ("create+write+close", "open+read+close", "unlink"):
        small_header += [f"{op} /s", f"vs {delays[0]} ms"]
    sec.text(f"Small files, files per second, and the fraction of the {delays[0]} ms figure:")
    sec.table(small_header, small_rows(labels))
    # The mount's log holds 4,096 entries, and at most 4,096 closed files may owe their data.
    enough = (", enough that the mount's log (4,096 entries, sent in batches of up to 1,024) and "
              "its closes that do not wait for their data (at most 4,096 files owed at a time) "
              "run full: the rates are the steady state, not what the log absorbs"
              if ns_files > 4096 else
              ", fewer than the mount's log holds (4,096 entries): in this mode the rates include "
              "what the log absorbs, not only its steady state")
    sec.text(f"""
The same small-file workload on a fastwrite mount with namespace grants
(`grantfs-mount --ns_grants=on`, docs/namespace-grants.md), through the same proxies:
{ns_files:,} files{enough}. The directory the
benchmark makes is granted to the mount: the creates, the closes and the unlinks are answered
by the mount and sent as a log; each file's data is one call of its own, sent after its close;
a read of a file whose data has been sent is a call. Files per second and the fraction of
the {delays[0]} ms figure (the goal of issue 17: at least 0.5x at 1 and 5 ms):
""")
    sec.table(small_header, small_rows([(ns_label, d) for d in delays]))

    def block(metric, labels):
        out = ""
        for d in delays:
            cells = []
            for label in labels:
                s = res.get("latency_sweep", (("target", label), ("delay_ms", d)), metric)
                cells += [num(s.median), num(s.min), num(s.max)]
            out += f"{d} " + " ".join(cells) + "\n"
        return out

    gfs_labels = [f"{GFS} {m}" for m in modes]

    cw = res.get("latency_sweep", (("target", ceiling), ("delay_ms", "none")), "write() MB/s")
    script = f"""
set multiplot layout 1,2 title "GrantFS through an added latency: median, bars min-max"
set xlabel "added latency each way (ms)"
set xrange [-0.5:{max(delays) + 0.5}]
set grid
set key below horizontal maxcols 2 font ",9"
set ylabel "MB/s (dd {mib} MiB)"
set yrange [0:*]
plot $w using 1:2:3:4 with yerrorlines lw 2 title "fastwrite write()", \\
     $w using 1:5:6:7 with yerrorlines lw 2 title "writethrough write()", \\
     $t using 1:2:3:4 with yerrorlines dt 2 title "fastwrite incl. fsync", \\
     $t using 1:5:6:7 with yerrorlines dt 2 title "writethrough incl. fsync", \\
     {num(cw.median)} with lines lc rgb "gray40" lw 2 dt 4 title "passthrough write() (ceiling)"
set ylabel "small files created per second"
set logscale y
set yrange [*:*]
plot $c using 1:2:3:4 with yerrorlines lw 2 title "fastwrite", \\
     $c using 1:5:6:7 with yerrorlines lw 2 title "writethrough", \\
     $c using 1:8:9:10 with yerrorlines lw 2 title "fastwrite, ns grants ({ns_files:,} files)"
unset multiplot
"""
    sec.figure("latency_sweep", "latency sweep", script,
               {"w": block("write() MB/s", gfs_labels), "t": block("MB/s incl. fsync", gfs_labels),
                "c": block("small create/s", gfs_labels + [ns_label])})
    sec.csv("latency_sweep")
    return [sec]


# --- 4: parallel build -------------------------------------------------------------------


def parallel_build(ctx):
    cfg, h, res = ctx.cfg, ctx.h, ctx.results
    files, jobs = cfg["build_files"], cfg["build_jobs"]
    server = ctx.main_server()
    targets = [(GFS, h.mount_grantfs("gfs-build", server.addr)),
               (GFS_NS, h.mount_grantfs("gfs-build-ns", server.addr, ns_grants="on")),
               (PT, h.mount_passthrough("pt-build")), (LOCAL, h.local_dir("local-build"))]
    expected = ctree.expected_output(files)
    try:
        trees = {}
        for name, d in targets:
            ctx.progress.step(f"§4 generating {files} C modules on {name}")
            t0 = time.monotonic()
            # A name of each target's own: the two GrantFS mounts show one
            # namespace, and only what a mount made is granted to it.
            trees[name] = ctree.generate(os.path.join(d, f"ctree-{os.path.basename(d)}"), files)
            ctx.progress.done(f"{time.monotonic() - t0:.1f} s")
        for run in range(ctx.runs):
            for name, _ in targets:
                tree = trees[name]
                for j in jobs:
                    h.run(["make", "-s", "-C", tree, "clean"], 120, f"make clean on {name}")
                    ctx.progress.step(f"§4 make -j{j} on {name}, run {run + 1}/{ctx.runs}")
                    t0 = time.monotonic()
                    h.run(["make", "-s", "-C", tree, f"-j{j}"], 60 + files * 4.0,
                          f"make -j{j} on {name}")
                    secs = time.monotonic() - t0
                    got = h.run([os.path.join(tree, "prog")], 30, f"the program built on {name}")
                    if got.strip() != expected:
                        raise BenchError(f"the program built on {name} printed {got.strip()!r}, "
                                         f"expected {expected!r}")
                    res.record("parallel_build", (("target", name), ("jobs", j)), "wall", "s",
                               secs)
                    ctx.progress.done(f"{secs:.1f} s")
    finally:
        for _, d in targets[:3]:
            h.unmount(d)

    sec = Section(ctx, 4, "parallel_build", "Parallel build (Plan 9 mk, NPROC=4 vs 24)")
    sec.text(f"""
A generated C tree of {files} modules (each a .c including its own header, three others and a
shared one) plus main.c, built with GNU make and `cc -O1` at -j{", -j".join(map(str, jobs))} on
each target after `make clean`; the program it builds is run and its output checked. Wall
seconds, median (min–max) of {ctx.runs} run(s). This machine has {os.cpu_count()} cores:
beyond -j{os.cpu_count()} more jobs can only hide file-system waits, as NPROC=24 did for mk.
**{GFS}** is a mount of the server as every other section's; **{GFS_NS}** a
`grantfs-mount --ns_grants=on` of the same server (namespace grants: the tree is generated
through it, so its directories are granted to it, and `make clean`'s `rm -rf obj`, the
compiler's creates of the objects and dependency files and `mkdir obj` are answered by the
mount and sent as a log, docs/namespace-grants.md).
""")
    rows = []
    for name, _ in targets:
        row = [name]
        for j in jobs:
            row.append(fmt_summary(res.get("parallel_build", (("target", name), ("jobs", j)),
                                           "wall")))
        first = res.get("parallel_build", (("target", name), ("jobs", jobs[0])), "wall")
        last = res.get("parallel_build", (("target", name), ("jobs", jobs[-1])), "wall")
        row.append(fmt_ratio(first, last))
        rows.append(row)
    sec.table(["target"] + [f"make -j{j} s" for j in jobs] +
              [f"speedup -j{jobs[-1]} vs -j{jobs[0]}"], rows)
    rows = []
    for name in (GFS, GFS_NS):
        for j in jobs:
            g = res.get("parallel_build", (("target", name), ("jobs", j)), "wall")
            rows.append([name, f"-j{j}"] +
                        [fmt_ratio(g, res.get("parallel_build", (("target", other), ("jobs", j)),
                                              "wall")) for other in (PT, LOCAL)])
    sec.text("Each GrantFS mount's build time as a multiple of (higher is slower):")
    sec.table(["target", "jobs", "the passthrough's (ceiling)", "the local disk's"], rows)
    sec.csv("parallel_build")
    return [sec]


# --- 5: metadata and dbench --------------------------------------------------------------

DBENCH_LOAD = "/usr/share/dbench/client.txt"
DBENCH_RE = re.compile(r"Throughput ([\d.]+) MB/sec\s+(\d+) clients.*max_latency=([\d.]+) ms")


def metadata_and_dbench(ctx):
    cfg, h, res = ctx.cfg, ctx.h, ctx.results
    n, secs, clients = cfg["meta_files"], cfg["dbench_secs"], cfg["dbench_clients"]
    server = ctx.main_server()
    targets = [(GFS, h.mount_grantfs("gfs-meta", server.addr)),
               (GFS_OFF, h.mount_grantfs("gfs-meta-off", server.addr, leases="off")),
               (GFS_NS, h.mount_grantfs("gfs-meta-ns", server.addr, ns_grants="on")),
               (PT, h.mount_passthrough("pt-meta")), (TMPFS, h.mount_tmpfs("tmpfs-meta")),
               (LOCAL, h.local_dir("local-meta"))]
    dbench_targets = [(name, d) for name, d in targets if name != GFS_OFF]
    ops = ("create", "stat", "rename", "unlink")
    try:
        for run in range(ctx.runs):
            for name, d in targets:
                ctx.progress.step(f"§5 metadata, {n} files on {name}, run {run + 1}/{ctx.runs}")
                out = h.run([ctx.bench(), "meta", f"--dir={d}", f"--files={n}", "--runs=1"],
                            120 + n * 0.1, f"meta on {name}")
                create, stat, unlink, rename = _csv_fields(out, "meta", 4)
                vals = dict(create=create, stat=stat, rename=rename, unlink=unlink)
                for op in ops:
                    res.record("metadata", (("target", name),), f"{op}/s", "ops/s", vals[op])
                ctx.progress.done(", ".join(f"{op} {vals[op]:.0f}/s" for op in ops))
        for run in range(ctx.runs):
            for name, d in dbench_targets:
                ctx.progress.step(f"§5 dbench {clients} clients {secs} s on {name}, "
                                  f"run {run + 1}/{ctx.runs}")
                # A directory of each target's own, made through its mount:
                # the two GrantFS mounts show one namespace, and only what a
                # mount made is granted to it.
                dd = os.path.join(d, f"dbench-{os.path.basename(d)}-{run}")
                os.mkdir(dd)
                out = h.run(["dbench", "-c", DBENCH_LOAD, "-D", dd, "-t", str(secs),
                             str(clients)], secs + 180, f"dbench on {name}")
                m = DBENCH_RE.search(out)
                if not m:
                    raise BenchError(f"dbench on {name}: no Throughput line: {out[-800:]}")
                res.record("dbench", (("target", name),), "throughput", "MB/s", float(m.group(1)))
                res.record("dbench", (("target", name),), "max latency", "ms", float(m.group(3)))
                ctx.progress.done(f"{float(m.group(1)):.1f} MB/s, max latency {m.group(3)} ms")
    finally:
        for _, d in targets[:5]:
            h.unmount(d)
    tree_targets = meta_leases.tree_walks(ctx, server)
    meta_leases.ping_pong(ctx, server)
    tree_work.measure(ctx, server)

    sec = Section(ctx, 5, "metadata", "Metadata and dbench (Tux3 vs tmpfs vs ext4)")
    sec.text(f"""
`grantfs-bench meta`: {n:,} empty files in one directory, created (open O_CREAT|O_EXCL + close),
stat'ed, renamed (same directory) and unlinked, one process; operations per second, median
(min–max) of {ctx.runs} run(s). **GrantFS** is a mount with metadata leases (the
default: names and attributes answered by the mount while the server leases them);
**{GFS_OFF}** a `grantfs-mount --leases=off` of the same server (every lookup and
getattr an RPC, cached by the kernel for 1 s); **{GFS_NS}** a `grantfs-mount --ns_grants=on`
(namespace grants: the creates, renames and unlinks in the directory the benchmark made are
answered by the mount and sent as a log, docs/namespace-grants.md). dbench runs on the mounts
with leases, with and without namespace grants.
""")
    rows = [[name] + [fmt_summary(res.get("metadata", (("target", name),), f"{op}/s"))
                      for op in ops] for name, _ in targets]
    sec.table(["target"] + [f"{op}/s" for op in ops], rows)
    rows = []
    for other in (GFS_OFF, GFS_NS, PT, TMPFS, LOCAL):
        rows.append([other] + [fmt_ratio(res.get("metadata", (("target", GFS),), f"{op}/s"),
                                         res.get("metadata", (("target", other),), f"{op}/s"))
                               for op in ops])
    sec.text("GrantFS (leases on) rate as a fraction of:")
    sec.table(["target"] + [f"{op}" for op in ops], rows)
    rows = []
    for other in (GFS, PT, TMPFS, LOCAL):
        rows.append([other] + [fmt_ratio(res.get("metadata", (("target", GFS_NS),), f"{op}/s"),
                                         res.get("metadata", (("target", other),), f"{op}/s"))
                               for op in ops])
    sec.text(f"{GFS_NS} rate as a fraction of:")
    sec.table(["target"] + [f"{op}" for op in ops], rows)
    sec.csv("metadata")
    sec.text(f"""
`dbench -c {DBENCH_LOAD} -t {secs} {clients}` ({clients} clients replaying the NetBench client.txt
load for {secs} s) in a new directory of each target made through its mount (on
{GFS_NS}, granted to it): throughput and the largest latency of any operation. dbench writes its
own buffers (zeros); the non-zero workloads above stand beside it. Median (min–max) of
{ctx.runs} run(s).
""")
    gt = res.get("dbench", (("target", GFS),), "throughput")
    gn = res.get("dbench", (("target", GFS_NS),), "throughput")
    rows = []
    for name, _ in dbench_targets:
        t = res.get("dbench", (("target", name),), "throughput")
        rows.append([name, fmt_summary(t),
                     fmt_summary(res.get("dbench", (("target", name),), "max latency")),
                     fmt_ratio(gt, t) if name != GFS else "-",
                     fmt_ratio(gn, t) if name != GFS_NS else "-"])
    sec.table(["target", "throughput MB/s", "max latency ms", "GrantFS throughput vs this",
               f"{GFS_NS} vs this"], rows)
    sec.csv("dbench")
    meta_leases.tree_walk_text(sec, ctx, tree_targets)
    meta_leases.ping_pong_text(sec, ctx)
    tree_work.text(sec, ctx)
    return [sec]

