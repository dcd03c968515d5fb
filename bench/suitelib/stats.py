"""Every figure of the report is the median of several runs, shown with the
smallest and largest run. Results keeps each raw sample so that tables,
CSV files and plots all come from the same numbers."""

import math
from typing import NamedTuple


class Summary(NamedTuple):
    median: float
    min: float
    max: float
    n: int


def summarize(values):
    """Median (mean of the two middle values for an even count), min, max.

    Raises ValueError for no values or a value that is not a finite number.
    """
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("no samples to summarize")
    if any(not math.isfinite(v) for v in vals):
        raise ValueError(f"not a finite number among samples {vals}")
    vals.sort()
    n = len(vals)
    mid = n // 2
    median = vals[mid] if n % 2 else (vals[mid - 1] + vals[mid]) / 2
    return Summary(median, vals[0], vals[-1], n)


def fmt(x):
    """A number for a table: 3 significant digits below 1000, whole numbers
    with thousands separators above; '-' for None."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    if ax == 0:
        return "0"
    return f"{x:.3g}"


def fmt_summary(s):
    """'median (min–max)', or just the value when there was one run."""
    if s is None:
        return "-"
    if s.n == 1 or s.min == s.max:
        return fmt(s.median)
    return f"{fmt(s.median)} ({fmt(s.min)}–{fmt(s.max)})"


def fmt_ratio(a, b):
    """a / b as '0.74x' from two summaries' medians; '-' when undefined."""
    if a is None or b is None or b.median == 0:
        return "-"
    r = a.median / b.median
    return f"{r:.2f}x" if 0.01 <= r < 10 else f"{fmt(r)}x"


def scaled(s, k):
    """A summary with every figure multiplied by k (seconds -> ms); None stays None."""
    return None if s is None else Summary(s.median * k, s.min * k, s.max * k, s.n)


class Results:
    """Raw samples by section, key and metric.

    A key is a tuple of (column, value) pairs naming what was measured (the
    target, the payload size, ...); a metric names the figure and has a
    unit. Samples are kept in the order they were taken (the run number).
    """

    def __init__(self):
        self._samples = {}  # (section, key, metric) -> [values]
        self._units = {}  # (section, metric) -> unit
        self._order = []  # (section, key, metric) in first-recorded order

    def record(self, section, key, metric, unit, value):
        key = tuple(key)
        k = (section, key, metric)
        if k not in self._samples:
            self._samples[k] = []
            self._order.append(k)
        prev = self._units.setdefault((section, metric), unit)
        if prev != unit:
            raise ValueError(f"{section}/{metric}: unit {unit} after {prev}")
        self._samples[k].append(float(value))

    def get(self, section, key, metric):
        """The Summary of one figure, or None when it was never measured."""
        vals = self._samples.get((section, tuple(key), metric))
        return summarize(vals) if vals else None

    def csv_rows(self, section):
        """(header, rows) of one section's summary CSV: the key columns,
        then metric, unit, median, min, max, runs."""
        keys = [k for k in self._order if k[0] == section]
        cols = []
        for _, key, _ in keys:
            for name, _ in key:
                if name not in cols:
                    cols.append(name)
        header = cols + ["metric", "unit", "median", "min", "max", "runs"]
        rows = []
        for _, key, metric in keys:
            d = dict(key)
            s = summarize(self._samples[(section, key, metric)])
            rows.append([d.get(c, "") for c in cols] +
                        [metric, self._units[(section, metric)], f"{s.median:.6g}",
                         f"{s.min:.6g}", f"{s.max:.6g}", s.n])
        return header, rows

    def raw_rows(self):
        """(header, rows) of every sample: section, key, metric, unit, run, value."""
        header = ["section", "key", "metric", "unit", "run", "value"]
        rows = []
        for section, key, metric in self._order:
            for i, v in enumerate(self._samples[(section, key, metric)]):
                rows.append([section, ";".join(f"{n}={x}" for n, x in key), metric,
                             self._units[(section, metric)], i + 1, f"{v:.6g}"])
        return header, rows

    def sections(self):
        seen = []
        for section, _, _ in self._order:
            if section not in seen:
                seen.append(section)
        return seen
