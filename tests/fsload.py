#!/usr/bin/env python3
"""Workloads for the failover drills, run as separate processes so that a
test can start several, kill a server under them, and check afterwards that
every change the kernel acknowledged to them is there.

    fsload.py files --dir D --journal J [--file-kib 4096] [--keep 16] [--rate-mb 20]
                    [--max-files N]
        Writes files f000000, f000001, ... in 512 KiB write() calls, each
        followed by fsync and close, until SIGTERM (the file being written is
        finished first) or --max-files. With --keep K, the file written K
        files earlier is unlinked after each one (the volume stays small).
    fsload.py meta  --dir D --journal J --ops N [--seed S]
        N random metadata changes in D: create with 1-8 KiB of data (closed,
        so acknowledged), rename (also over an existing name, also across
        subdirectories), unlink, overwrite with O_TRUNC.

The journal (a local file, one JSON object per line) records each change
after the system call that made it returned: {"op": "put", "name", "sha256",
"t"} and {"op": "del", "name", "t"} (t: CLOCK_MONOTONIC seconds, comparable
between processes); {"op": "begin", "name"} before a file of `files` is
started (so a file whose writing failed half-way is known); "progress" lines
for the test to follow; at the end one {"op": "summary"} with the longest
single system call seen ("pauses": the longest of each kind, in ms) or an
{"op": "error"} with the call, the errno and the message, and exit status 1.

Stdlib only. Imported by the tests for expected_state() and read_journal().
"""

import argparse
import hashlib
import json
import os
import random
import signal
import sys
import time

BLOCK = 512 * 1024


class Journal:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def add(self, **entry):
        self.f.write(json.dumps(entry) + "\n")


class Timer:
    """Times each system call by kind; keeps the longest of each kind."""

    def __init__(self):
        self.longest = {}  # kind -> (ms, what)
        self.count = 0

    def call(self, kind, what, fn, *args):
        t0 = time.monotonic()
        try:
            return fn(*args)
        finally:
            ms = (time.monotonic() - t0) * 1000
            self.count += 1
            if ms > self.longest.get(kind, (-1.0, ""))[0]:
                self.longest[kind] = (ms, what)

    def summary(self):
        worst = max(self.longest.items(), key=lambda kv: kv[1][0], default=(None, (0.0, "")))
        return {"pauses": {k: round(v[0], 1) for k, v in sorted(self.longest.items())},
                "longest": {"kind": worst[0], "ms": round(worst[1][0], 1), "what": worst[1][1]},
                "calls": self.count}


class Failed(Exception):
    def __init__(self, what, err):
        super().__init__(f"{what}: {err}")
        self.what = what
        self.err = err


def _do(timer, kind, what, fn, *args):
    try:
        return timer.call(kind, what, fn, *args)
    except OSError as e:
        raise Failed(f"{kind} {what}", e)


def write_whole(timer, path, data, fsync):
    """create + 512 KiB writes (+ fsync) + close; raises Failed."""
    fd = _do(timer, "create", path, os.open, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        off = 0
        while off < len(view):
            n = _do(timer, "write", f"{path}@{off}", os.write, fd, view[off:off + BLOCK])
            off += n
        if fsync:
            _do(timer, "fsync", path, os.fsync, fd)
    finally:
        _do(timer, "close", path, os.close, fd)


# --- files ---------------------------------------------------------------------------


def run_files(a, journal, timer, stop):
    size = a.file_kib * 1024
    budget_s = size / (a.rate_mb * 1e6) if a.rate_mb > 0 else 0.0
    i = 0
    while not stop["now"] and (a.max_files <= 0 or i < a.max_files):
        t0 = time.monotonic()
        name = f"f{i:06d}"
        data = os.urandom(size)
        journal.add(op="begin", name=name)
        write_whole(timer, os.path.join(a.dir, name), data, fsync=True)
        journal.add(op="put", name=name, sha256=hashlib.sha256(data).hexdigest(),
                    t=time.monotonic())
        if a.keep > 0 and i >= a.keep:
            old = f"f{i - a.keep:06d}"
            _do(timer, "unlink", old, os.unlink, os.path.join(a.dir, old))
            journal.add(op="del", name=old, t=time.monotonic())
        i += 1
        journal.add(op="progress", done=i)
        left = budget_s - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)
    return i


# --- meta ----------------------------------------------------------------------------

SUBDIRS = ("d0", "d1", "d2", "d3")


def run_meta(a, journal, timer, stop):
    rnd = random.Random(a.seed)
    files = []  # relpaths that exist
    serial = 0

    def new_name():
        nonlocal serial
        serial += 1
        return f"{rnd.choice(SUBDIRS)}/n{serial:06d}"

    for d in SUBDIRS:
        _do(timer, "mkdir", d, os.mkdir, os.path.join(a.dir, d))
        journal.add(op="mkdir", name=d, t=time.monotonic())
    done = 0
    while done < a.ops and not stop["now"]:
        r = rnd.random()
        if not files or r < 0.40:
            rel = new_name()
            data = os.urandom(rnd.randint(1, 8) * 1024)
            write_whole(timer, os.path.join(a.dir, rel), data, fsync=False)
            files.append(rel)
            journal.add(op="put", name=rel, sha256=hashlib.sha256(data).hexdigest(),
                        t=time.monotonic())
        elif r < 0.65:
            src = files.pop(rnd.randrange(len(files)))
            # One rename in four replaces an existing file.
            dst = files.pop(rnd.randrange(len(files))) if files and rnd.random() < 0.25 \
                else new_name()
            _do(timer, "rename", f"{src} -> {dst}", os.rename, os.path.join(a.dir, src),
                os.path.join(a.dir, dst))
            files.append(dst)
            journal.add(op="rename", name=src, to=dst, t=time.monotonic())
        elif r < 0.85:
            rel = files.pop(rnd.randrange(len(files)))
            _do(timer, "unlink", rel, os.unlink, os.path.join(a.dir, rel))
            journal.add(op="del", name=rel, t=time.monotonic())
        else:
            rel = rnd.choice(files)
            data = os.urandom(rnd.randint(1, 8) * 1024)
            write_whole(timer, os.path.join(a.dir, rel), data, fsync=False)
            journal.add(op="put", name=rel, sha256=hashlib.sha256(data).hexdigest(),
                        t=time.monotonic())
        done += 1
        if done % 50 == 0:
            journal.add(op="progress", done=done)
    journal.add(op="progress", done=done)
    return done


# --- reading a journal (used by the tests) -------------------------------------------


def read_journal(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def expected_state(entries):
    """(files, dirs, uncertain) after replaying a journal: files maps relpath
    to sha256; uncertain is the name begun last and never acknowledged (its
    write failed or was cut short), which may or may not exist."""
    files, dirs = {}, set()
    begun = None
    for e in entries:
        op = e["op"]
        if op == "begin":
            begun = e["name"]
        elif op == "put":
            files[e["name"]] = e["sha256"]
            if begun == e["name"]:
                begun = None
        elif op == "del":
            files.pop(e["name"])
        elif op == "rename":
            files[e["to"]] = files.pop(e["name"])
        elif op == "mkdir":
            dirs.add(e["name"])
    return files, dirs, begun


def last(entries, op):
    return next((e for e in reversed(entries) if e["op"] == op), None)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=("files", "meta"))
    p.add_argument("--dir", required=True)
    p.add_argument("--journal", required=True)
    p.add_argument("--file-kib", type=int, default=4096)
    p.add_argument("--keep", type=int, default=0)
    p.add_argument("--rate-mb", type=float, default=0.0, help="MB/s cap (files)")
    p.add_argument("--max-files", type=int, default=0)
    p.add_argument("--ops", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    stop = {"now": False}

    def on_term(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_term)
    journal = Journal(a.journal)
    timer = Timer()
    journal.add(op="start", mode=a.mode, pid=os.getpid(), t=time.monotonic())
    try:
        n = (run_files if a.mode == "files" else run_meta)(a, journal, timer, stop)
    except Failed as e:
        journal.add(op="error", what=e.what, errno=e.err.errno, msg=str(e.err),
                    t=time.monotonic(), **timer.summary())
        print(f"fsload: {e}", file=sys.stderr)
        return 1
    journal.add(op="summary", done=n, t=time.monotonic(), **timer.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
