"""Writing the report: markdown tables, CSV files, gnuplot PNGs, and the
facts of the machine the numbers come from."""

import csv
import datetime
import os
import platform
import re
import subprocess

from .harness import BenchError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out) + "\n"


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


# --- plots ------------------------------------------------------------------------


def gnuplot(script, data, png_path, timeout=60):
    """Runs a gnuplot script that draws from the inline data blocks in
    `data` ({name: text}) into png_path; checks that a PNG came out."""
    blocks = "".join(f"${name} << EOD\n{text}EOD\n" for name, text in data.items())
    full = (f"set terminal pngcairo size 900,540 font 'DejaVu Sans,10'\n"
            f"set output '{png_path}'\n{blocks}{script}\nunset output\n")
    try:
        r = subprocess.run(["gnuplot"], input=full, capture_output=True, text=True,
                           timeout=timeout)
    except FileNotFoundError:
        raise BenchError("gnuplot is not installed (scripts/install-deps.sh installs gnuplot-nox)")
    except subprocess.TimeoutExpired:
        raise BenchError(f"gnuplot: no result after {timeout} s for {png_path}")
    if r.returncode != 0:
        raise BenchError(f"gnuplot failed for {png_path}: {r.stderr[-1500:]}")
    with open(png_path, "rb") as f:
        if f.read(8) != PNG_MAGIC:
            raise BenchError(f"gnuplot wrote no PNG to {png_path}: {r.stderr[-500:]}")


def num(x):
    """A number for a gnuplot data block ('NaN' for a missing one)."""
    return "NaN" if x is None else f"{x:.6g}"


def quote(s):
    return '"' + str(s).replace('"', "'") + '"'


# --- machine facts ------------------------------------------------------------------


def _cmd(argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _meminfo_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "?"


def _disk(path):
    """The file system and block device under `path`."""
    src = _cmd(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "-T", path])
    if not src:
        return "?"
    dev, fstype = (src.split() + ["?"])[:2]
    desc = f"{fstype} on {dev}"
    if dev.startswith("/dev/"):
        parent = _cmd(["lsblk", "-dno", "PKNAME", dev]) or os.path.basename(dev)
        info = _cmd(["lsblk", "-dno", "MODEL,ROTA,SIZE", f"/dev/{parent}"])
        if info:
            parts = info.split()
            size = parts[-1] if parts else "?"
            rota = parts[-2] if len(parts) >= 2 else "?"
            model = " ".join(parts[:-2]) or "no model string"
            kind = "rotational" if rota == "1" else "non-rotational"
            desc += f" ({model}, {kind}, {size})"
    return desc


def _load():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def machine_facts(workdir, repo):
    lscpu = _cmd(["lscpu"])
    model = re.search(r"^Model name:\s*(.+)$", lscpu, re.M)
    commit = _cmd(["git", "-C", repo, "rev-parse", "--short", "HEAD"]) or "?"
    if _cmd(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"]):
        commit += " (with uncommitted changes)"
    gcc = _cmd(["gcc", "-dumpfullversion"]) or "?"
    dbench = _cmd(["dpkg-query", "-W", "-f=${Version}", "dbench"]) or "?"
    return [
        ("date", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
        ("CPU", model.group(1).strip() if model else platform.processor() or "?"),
        ("cores", str(os.cpu_count())),
        ("memory", _meminfo_gib()),
        ("kernel", platform.release()),
        ("disk under the work directory", f"{workdir}: {_disk(workdir)}"),
        ("load average at start (1, 5, 15 min)", _load()),
        ("GrantFS commit", commit),
        ("transport", "plain gRPC (--insecure: GRANTFS_INSECURE=1)"
         if os.environ.get("GRANTFS_INSECURE") == "1" else "TLS, mutual (docs/security.md)"),
        ("gcc, dbench", f"{gcc}, {dbench}"),
    ]


def load_average():
    return _load()
