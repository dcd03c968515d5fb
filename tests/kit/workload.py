"""Workloads that time each call: a streaming writer and a create probe,
used by the failover drills of tests/ and bench/."""

import os
import threading
import time

BLOCK = 512 * 1024
# A probe answered this long after the kill was answered by the new primary
# even if it was sent before the kill.
STUCK_PROBE_S = 0.05


class TimedWriter(threading.Thread):
    """Writes `data` to `path` in BLOCK-sized os.write() calls, then fsync and
    close, timestamping each call. Calls at_offset() from its own thread,
    between two writes, once `trigger` bytes are written (the kill happens
    while the writer is part-way, however fast it is)."""

    def __init__(self, path, data, trigger=None, at_offset=None):
        super().__init__(daemon=True)
        self.path, self.data = path, data
        self.trigger, self.at_offset = trigger, at_offset
        self.writes = []  # (t0, t1) of each write()
        self.fsync_s = None
        self.error = None
        self.done = False

    def run(self):
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view, off = memoryview(self.data), 0
                while off < len(view):
                    if self.at_offset and off >= self.trigger:
                        self.at_offset()
                        self.at_offset = None
                    t0 = time.monotonic()
                    off += os.write(fd, view[off:off + BLOCK])
                    self.writes.append((t0, time.monotonic()))
                t0 = time.monotonic()
                os.fsync(fd)
                self.fsync_s = time.monotonic() - t0
            finally:
                os.close(fd)
            self.done = True
        except OSError as e:
            self.error = e

    def longest_write_s(self):
        return max((b - a for a, b in self.writes), default=0.0)


class Probe(threading.Thread):
    """Creates a new empty file in `d` (O_CREAT|O_EXCL, then close) every
    ~10 ms until stopped: a change only the primary can make. Records
    (sent, returned, error) of each."""

    def __init__(self, d, interval=0.01):
        super().__init__(daemon=True)
        self.d, self.interval = d, interval
        self.ops = []
        self._halt = threading.Event()

    def run(self):
        n = 0
        while not self._halt.is_set():
            t0 = time.monotonic()
            err = None
            try:
                os.close(os.open(os.path.join(self.d, f"p{n}"), os.O_WRONLY | os.O_CREAT |
                                 os.O_EXCL, 0o644))
            except OSError as e:
                err = e
            t1 = time.monotonic()
            self.ops.append((t0, t1, err))
            n += 1
            self._halt.wait(max(0.0, t0 + self.interval - t1))

    def stop(self):
        self._halt.set()

    def first_served_after(self, t_kill):
        """Seconds from t_kill to the first create the new primary answered,
        or None."""
        for t0, t1, err in self.ops:
            if err is None and t1 > t_kill and (t0 >= t_kill or t1 - t_kill > STUCK_PROBE_S):
                return t1 - t_kill
        return None

    def longest_s(self, since):
        """The longest create sent at or after `since` (or still open then)."""
        return max((t1 - t0 for t0, t1, _ in self.ops if t1 >= since), default=0.0)

    def errors(self):
        return [f"{err} at +{t1:.3f}" for _, t1, err in self.ops if err is not None]
