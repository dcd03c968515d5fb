"""What every section gets: the harness, the mode's sizes, the results
store, the progress display, and a builder for its part of the report."""

import os
import sys
import time

from . import report


class Progress:
    """One line per step on stderr: elapsed time, what runs, then its result."""

    def __init__(self, stream=sys.stderr):
        self.stream = stream
        self.t0 = time.monotonic()
        self._open = False

    def elapsed(self):
        return time.monotonic() - self.t0

    def _close_line(self):
        if self._open:
            print(file=self.stream, flush=True)
            self._open = False

    def step(self, msg):
        self._close_line()
        print(f"[{self.elapsed():7.1f}s] {msg} ...", end="", file=self.stream, flush=True)
        self._open = True

    def done(self, result):
        if self._open:
            print(f" {result}", file=self.stream, flush=True)
            self._open = False
        else:
            self.note(result)

    def note(self, msg):
        self._close_line()
        print(f"[{self.elapsed():7.1f}s] {msg}", file=self.stream, flush=True)


class Countdown:
    """How far a run of `total` like steps got: "i/N" and, once one step is
    done, the rate and the time left at the average pace so far
    ("2.0/min, ETA ~2m10s")."""

    def __init__(self, total, clock=time.monotonic):
        self.total = total
        self.clock = clock
        self.t0 = clock()
        self.done = 0

    def next(self):
        """Text for the step about to start (call finished() after it)."""
        text = f"{self.done + 1}/{self.total}"
        if self.done > 0:
            elapsed = self.clock() - self.t0
            left = elapsed / self.done * (self.total - self.done)
            text += f", {format_rate(self.done, elapsed)}, ETA ~{format_seconds(left)}"
        return text

    def finished(self):
        self.done += 1


def format_rate(n, seconds):
    """`n` steps in `seconds` as a rate with a unit that keeps it readable:
    "1.5/s", "2.0/min", "0.5/h"."""
    per_s = n / seconds if seconds > 0 else float("inf")
    if per_s >= 1:
        return f"{per_s:.1f}/s"
    if per_s * 60 >= 1:
        return f"{per_s * 60:.1f}/min"
    return f"{per_s * 3600:.1f}/h"


def format_seconds(s):
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Section:
    """One numbered section of the report: markdown parts, and the CSV and
    PNG files written for it (into out_dir/bench/)."""

    def __init__(self, ctx, number, slug, title):
        self.ctx = ctx
        self.number = number
        self.slug = slug
        self.title = title
        self.parts = []
        self.seconds = 0.0

    def text(self, s):
        self.parts.append(s.strip() + "\n")

    def table(self, header, rows):
        self.parts.append(report.md_table(header, rows))

    def csv(self, name, results_section=None):
        """Writes the summary CSV of a results section; links it."""
        header, rows = self.ctx.results.csv_rows(results_section or name)
        report.write_csv(os.path.join(self.ctx.bench_dir, f"{name}.csv"), header, rows)
        self.parts.append(f"Data: [bench/{name}.csv](bench/{name}.csv)\n")

    def figure(self, name, caption, script, data):
        png = os.path.join(self.ctx.bench_dir, f"{name}.png")
        report.gnuplot(script, data, png)
        self.parts.append(f"![{caption}](bench/{name}.png)\n")

    def markdown(self):
        return f"## {self.number}. {self.title}\n\n" + "\n".join(self.parts)


class Context:
    def __init__(self, harness, cfg, mode, results, progress, out_dir):
        self.h = harness
        self.cfg = cfg
        self.mode = mode
        self.results = results
        self.progress = progress
        self.out_dir = out_dir
        self.bench_dir = os.path.join(out_dir, "bench")
        self._server = None

    @property
    def runs(self):
        return self.cfg["runs"]

    def bench(self):
        return self.h.bin("bench/grantfs-bench")

    def main_server(self):
        """The grantfs-server of the file-system sections (started once)."""
        if self._server is None:
            self.progress.step("starting grantfs-server for the file-system sections")
            self._server = self.h.start_server("server", self.cfg["capacity"])
            self.progress.done(self._server.addr)
        return self._server
