"""Section 10: what TLS costs. The same workloads on two servers of one run,
one with TLS and authentication (the default) and one started, with its
mount, with --insecure; runs alternate between the two."""

import os

from .context import Section
from .fs_sections import _csv_fields, mbps, run_dd
from .stats import fmt_ratio, fmt_summary

ON = "TLS on (default)"
OFF = "TLS off (--insecure)"


def tls_cost(ctx):
    cfg, h, res = ctx.cfg, ctx.h, ctx.results
    mib, n = cfg["tls_dd_mib"], cfg["tls_creates"]
    if h.insecure:
        # The whole suite runs without TLS: there is nothing to compare.
        sec = Section(ctx, 10, "tls_cost", "What TLS costs")
        sec.text("Not measured: this run of the suite was started with `--insecure`.")
        return [sec]
    servers, targets = [], []
    try:
        servers.append(h.start_server("tls-on-server", cfg["capacity"]))
        targets.append((ON, h.mount_grantfs("tls-on", servers[-1].addr)))
        servers.append(h.start_server("tls-off-server", cfg["capacity"], insecure=True))
        targets.append((OFF, h.mount_grantfs("tls-off", servers[-1].addr, insecure=True)))
        for run in range(ctx.runs):
            # Each first in turn: neither always runs on a cooler machine.
            for name, d in (targets if run % 2 == 0 else targets[::-1]):
                ctx.progress.step(f"§10 dd {mib} MiB and {n} creates, {name}, "
                                  f"run {run + 1}/{ctx.runs}")
                t = run_dd(ctx, d, mib, zeros=False)
                out = h.run([ctx.bench(), "meta", f"--dir={d}", f"--files={n}", "--runs=1"],
                            120 + n * 0.1, f"meta on {name}")
                create = _csv_fields(out, "meta", 4)[0]
                key = (("target", name),)
                res.record("tls_cost", key, "dd MB/s incl. fsync", "MB/s", mbps(mib, t["total_s"]))
                res.record("tls_cost", key, "creates/s", "ops/s", create)
                ctx.progress.done(f"{mbps(mib, t['total_s']):.0f} MB/s, {create:.0f} creates/s")
    finally:
        for _, d in targets:
            h.unmount(d)
        for server in servers:
            h.stop(server)
    sec = Section(ctx, 10, "tls_cost", "What TLS costs")
    sec.text(f"""
Two servers of this run on loopback, each with one fastwrite mount: one with TLS and the
cluster's certificates (every GrantFS process runs so by default, docs/security.md), one
started, with its mount, with `--insecure` (no TLS, no authentication). On each, `grantfs-bench
dd` writes {mib} MiB of non-zero data in 512 KiB write() calls (MB/s over
open+write+fsync+close, as section 1), and `grantfs-bench meta` creates {n:,} empty files (open
O_CREAT|O_EXCL + close: an RPC and a WAL fsync each, as section 5). Runs alternate between
the two, each first in turn; median (min–max) of {ctx.runs} run(s). On {os.cpu_count()} cores the
encryption competes with the mount, the server and the writer for the CPU.
""")
    rows = []
    for name, _ in targets:
        key = (("target", name),)
        dd = res.get("tls_cost", key, "dd MB/s incl. fsync")
        cr = res.get("tls_cost", key, "creates/s")
        off = (("target", OFF),)
        rows.append([name, fmt_summary(dd), fmt_summary(cr),
                     fmt_ratio(dd, res.get("tls_cost", off, "dd MB/s incl. fsync")),
                     fmt_ratio(cr, res.get("tls_cost", off, "creates/s"))])
    sec.table(["server and mount", "dd MB/s", "creates/s", "dd vs TLS off", "creates vs TLS off"],
              rows)
    sec.csv("tls_cost")
    return [sec]
