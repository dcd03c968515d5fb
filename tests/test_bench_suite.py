"""The benchmark suite (bench/suite.py): its statistics helpers, its
argument and prerequisite errors, a whole run in the smallest mode, and
cleanup when it is stopped half-way.

Runs as root (FUSE and tmpfs mounts). The smoke run takes about 30 s.
"""

import csv
import math
import os
import re
import signal
import subprocess
import sys

import pytest

from kit.build import BUILD, REPO
from kit.mount import mounts_under
from kit.waits import wait_for

sys.path.insert(0, os.path.join(REPO, "bench"))
from suitelib import context, stats, tarball  # noqa: E402
from suitelib.report import PNG_MAGIC  # noqa: E402

SUITE = os.path.join(REPO, "bench", "suite.py")
SECTIONS = {
    1: "mkfile and dd", 2: "Time split", 3: "Latency sweep", 4: "Parallel build",
    5: "Metadata and dbench", 6: "RPC microbenchmarks", 7: "Server under offered load",
    8: "Failover drill", 9: "Group commit", 10: "What TLS costs",
}
CSVS = ["mkfile_dd", "time_split", "latency_sweep", "parallel_build", "metadata", "dbench",
        "tree_walk", "pingpong", "tree_work", "rpc", "rpc_rate", "thread_scaling", "group_commit", "tls_cost",
        "runs"]
PNGS = ["time_split", "latency_sweep", "thread_scaling"]


# --- helpers (no root needed) ----------------------------------------------------------


def test_summarize_median_min_max():
    assert stats.summarize([5, 1, 3]) == (3, 1, 5, 3)
    assert stats.summarize([4, 1, 2, 10]) == (3, 1, 10, 4)  # mean of the two middle ones
    assert stats.summarize([7]) == (7, 7, 7, 1)
    with pytest.raises(ValueError):
        stats.summarize([])
    with pytest.raises(ValueError):
        stats.summarize([1, math.nan])


def test_countdown_says_which_step_the_rate_and_the_time_left():
    now = [100.0]
    c = context.Countdown(4, clock=lambda: now[0])
    assert c.next() == "1/4"
    now[0] += 30
    c.finished()
    assert c.next() == "2/4, 2.0/min, ETA ~1m30s"
    now[0] += 90
    c.finished()
    assert c.next() == "3/4, 1.0/min, ETA ~2m00s"
    assert context.format_seconds(7) == "7s" and context.format_seconds(7300) == "2h01m"
    assert context.format_rate(3, 2) == "1.5/s" and context.format_rate(1, 7200) == "0.5/h"


def test_formatting():
    assert stats.fmt(1234.5) == "1,234"  # banker's rounding of .5 is fine for a table
    assert stats.fmt(441.2) == "441"
    assert stats.fmt(12.34) == "12.3"
    assert stats.fmt(0.01234) == "0.0123"
    assert stats.fmt(None) == "-"
    assert stats.fmt_summary(stats.summarize([245, 441, 465])) == "441 (245–465)"
    assert stats.fmt_summary(stats.summarize([3])) == "3.00"
    assert stats.fmt_ratio(stats.summarize([1]), stats.summarize([4])) == "0.25x"
    assert stats.fmt_ratio(stats.summarize([1]), stats.summarize([0])) == "-"
    assert stats.fmt_ratio(stats.summarize([1]), stats.summarize([700])) == "0.00143x"
    assert stats.fmt_ratio(stats.summarize([30]), stats.summarize([2])) == "15.0x"
    assert stats.scaled(stats.summarize([0.5, 0.25]), 1000) == (375, 250, 500, 2)
    assert stats.fmt_ratio(None, stats.summarize([1])) == "-"


def test_results_tables_come_from_the_samples():
    r = stats.Results()
    for v in (3, 1, 2):
        r.record("s", (("target", "a"), ("jobs", 4)), "wall", "s", v)
    r.record("s", (("target", "b"),), "wall", "s", 9)
    r.record("t", (("x", 1),), "rate", "ops/s", 5)
    assert r.get("s", (("target", "a"), ("jobs", 4)), "wall") == (2, 1, 3, 3)
    assert r.get("s", (("target", "zz"),), "wall") is None
    header, rows = r.csv_rows("s")
    assert header == ["target", "jobs", "metric", "unit", "median", "min", "max", "runs"]
    assert rows == [["a", 4, "wall", "s", "2", "1", "3", 3],
                    ["b", "", "wall", "s", "9", "9", "9", 1]]
    header, rows = r.raw_rows()
    assert len(rows) == 5 and rows[0] == ["s", "target=a;jobs=4", "wall", "s", 1, "3"]
    assert r.sections() == ["s", "t"]
    with pytest.raises(ValueError):
        r.record("s", (("target", "a"),), "wall", "ms", 1)  # one unit per metric


def test_tarball_and_the_check_of_an_extracted_tree(tmp_path):
    tar = tarball.make_tarball(str(tmp_path / "src"), 250)
    files, dirs = tarball.contents(tar)
    assert len(files) == 250 and "tree/d00/s002" in dirs
    assert all(b and b"\0" not in b for b in files.values())
    dest = tmp_path / "x"
    dest.mkdir()
    subprocess.run(["tar", "xf", tar, "-C", str(dest)], check=True)
    assert tarball.compare_tree(str(dest), files, dirs).ok()
    os.unlink(dest / "tree/d00/s001/f000150.c")
    (dest / "tree/d00/s000/f000001.c").write_bytes(files["tree/d00/s000/f000001.c"][:-1] + b"!")
    (dest / "tree/d00/s002/stray").write_bytes(b"x")
    by_size = tarball.compare_tree(str(dest), files, dirs, read=False)
    assert by_size.missing == ["tree/d00/s001/f000150.c"] and not by_size.wrong
    diff = tarball.compare_tree(str(dest), files, dirs)
    assert diff.missing == ["tree/d00/s001/f000150.c"]
    assert diff.wrong == ["tree/d00/s000/f000001.c (54 bytes, expected 54)"]
    assert diff.extra == ["tree/d00/s002/stray"] and not diff.ok()
    assert diff.text().startswith("1 missing: tree/d00/s001/f000150.c; 1 wrong: ")


# --- the suite as a program -------------------------------------------------------------


def run_suite(*args, timeout=60):
    return subprocess.run([sys.executable, SUITE, *args], capture_output=True, text=True,
                          timeout=timeout)


def test_bad_arguments_are_refused_precisely(tmp_path):
    r = run_suite("--sections", "1,11")
    assert r.returncode == 2 and "--sections: expected numbers from 1 to 10" in r.stderr
    r = run_suite("--quick", "--smoke")
    assert r.returncode == 2 and "not allowed with" in r.stderr
    r = run_suite("--smoke", "--build", str(tmp_path / "nobuild"), "--out", str(tmp_path))
    assert r.returncode == 2
    assert f"{tmp_path}/nobuild/server/grantfs-server not found" in r.stderr
    r = run_suite("--smoke", "--build", BUILD, "--workdir", str(tmp_path / "missing"))
    assert r.returncode == 2 and "is not a directory" in r.stderr
    assert not os.path.exists(tmp_path / "benchmarks.md")


def _numbers(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows, f"{path} has no rows"
    return rows


def test_smoke_run_writes_every_section_csv_and_plot(tmp_base):
    out = os.path.join(tmp_base, "out")
    work = os.path.join(tmp_base, "work")
    os.makedirs(work)
    # (Bounded by the timeout; tests assert no wall-clock time.)
    r = run_suite("--smoke", "--build", BUILD, "--out", out, "--workdir", work, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    # Progress on stderr, one line per step; the tables on stdout.
    assert "§1 dd" in r.stderr and "§7 --threads=" in r.stderr
    # Each section group counted, with the rate and the time left from the
    # second on.
    assert "section 1, 2 (1/9): " in r.stderr
    assert re.search(r"section 10 \(9/9, [\d.]+/(s|min|h), ETA ~", r.stderr), r.stderr[-4000:]
    assert "| target |" in r.stdout

    with open(os.path.join(out, "benchmarks.md")) as f:
        md = f.read()
    for n, title in SECTIONS.items():
        assert f"## {n}. {title}" in md, f"section {n} missing"
    for fact in ("| date |", "| CPU |", "| cores |", "| kernel |", "| disk under the work"):
        assert fact in md
    assert "**Failed" not in md
    # Section 5: leases on and off side by side, and the tree walks and ping-pong tables.
    assert "| GrantFS (leases off) |" in md
    assert "### Tree walks" in md and "### Two nodes alternating" in md
    # Namespace grants beside GrantFS: the sweep's small files, the build, the two nodes
    # alternating and the tree work.
    assert "| GrantFS fastwrite, ns grants | 5 ms |" in md
    assert md.count("| GrantFS (ns grants) |") >= 5  # build, meta, dbench, ping-pong, tree work
    assert "### Tree work" in md and "| GrantFS (ns grants) | the local disk's |" in md
    # Section 8: the failover drill ran against a real witness, primary and replica.
    assert "| kill to first served op |" in md
    bytes_lost = [line for line in md.splitlines() if line.startswith("| bytes lost |")]
    assert bytes_lost and bytes_lost[0].split("|")[3].strip().startswith("0"), bytes_lost
    # Section 9: both servers, every number of callers.
    assert "| standalone | 1 | " in md and "| trio (replica in sync) | 16 | " in md
    # Section 10: TLS on and off, side by side.
    assert "| TLS on (default) |" in md and "| TLS off (--insecure) |" in md
    assert "bench/run.sh" in md and "sudo" not in md  # how to regenerate it, as root (no sudo)

    for name in CSVS:
        rows = _numbers(os.path.join(out, "bench", f"{name}.csv"))
        value_cols = ["value"] if name == "runs" else ["median", "min", "max"]
        for row in rows:
            for c in value_cols:
                v = float(row[c])
                assert math.isfinite(v) and v >= 0, (name, row)
        assert any(float(row[value_cols[0]]) > 0 for row in rows), name
    # The figures every comparison rests on are positive.
    for name, metric in (("mkfile_dd", "MB/s incl. fsync"), ("metadata", "create/s"),
                         ("group_commit", "mkdir"),
                         ("tree_walk", "wall"), ("pingpong", "ops/s"), ("tree_work", "tar x"),
                         ("tree_work", "git clone"), ("latency_sweep", "small create/s"),
                         ("dbench", "throughput"), ("parallel_build", "wall"),
                         ("rpc", "median"), ("latency_sweep", "write() MB/s"),
                         ("tls_cost", "dd MB/s incl. fsync"), ("tls_cost", "creates/s")):
        rows = [row for row in _numbers(os.path.join(out, "bench", f"{name}.csv"))
                if row["metric"] == metric]
        assert rows and all(float(row["median"]) > 0 for row in rows), (name, metric)
    for name in PNGS:
        with open(os.path.join(out, "bench", f"{name}.png"), "rb") as f:
            assert f.read(8) == PNG_MAGIC, name
        assert f"(bench/{name}.png)" in md

    # Nothing left behind: no mounts, no scratch directory, no processes.
    assert mounts_under(work) == []
    assert os.listdir(work) == []
    assert not _processes_mentioning(work)


def _processes_mentioning(text):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def test_sigterm_midway_unmounts_and_stops_everything(tmp_base):
    work = os.path.join(tmp_base, "work")
    os.makedirs(work)
    p = subprocess.Popen([sys.executable, SUITE, "--smoke", "--sections", "3", "--build", BUILD,
                          "--out", os.path.join(tmp_base, "out"), "--workdir", work],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(mounts_under(work)) >= 2 or p.poll() is not None, timeout=60,
                 what="the sweep's mounts")
        assert p.poll() is None, p.stderr.read()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
    assert p.returncode == 130, err[-3000:]
    assert "interrupted" in err
    assert mounts_under(work) == []
    assert os.listdir(work) == []
    assert not os.path.exists(os.path.join(tmp_base, "out", "benchmarks.md"))
    wait_for(lambda: not _processes_mentioning(work), timeout=30, what="children to exit")


def test_every_mode_sets_every_size():
    from suitelib import modes
    keys = set(modes.MODES["full"])
    for name, cfg in modes.MODES.items():
        assert set(cfg) == keys, name
        assert cfg["runs"] >= 1 and cfg["dd_mib"] >= 1 and cfg["load_rates"], name
    assert modes.MODES["full"]["runs"] >= 3  # a median with min and max
    assert modes.MODES["full"]["dd_mib"] == 2048 and modes.MODES["full"]["meta_files"] == 10000
    assert modes.MODES["full"]["dbench_secs"] == 30
    assert modes.MODES["full"]["tree_files"] == 20000
    assert modes.MODES["full"]["pingpong_rounds"] == 2000 and modes.MODES["full"]["lease_runs"] >= 3
