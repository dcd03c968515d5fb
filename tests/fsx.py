#!/usr/bin/env python3
"""fsx.py: a randomized file-data checker in the spirit of the classic fsx.

One process applies a long random sequence of operations to one file and
checks every byte it reads, and the file size after every operation, against
an in-memory model of what the file must hold (a bytearray). The same seed
gives the same sequence, so a failure found once can be run again.

    fsx.py --dir DIR [--dir2 DIR2] --mode MODE --ops N --seed S [--maxlen BYTES]
    fsx.py --dir DIR [--dir2 DIR2] --replay LOGFILE

Modes (each adds operations to the one before it, except nocache):

    plain      write, pwrite (also far past the end: holes), write with
               O_APPEND, read, pread (also inside holes, across and past the
               end), runs of consecutive reads (read-ahead), ftruncate up and
               down, fallocate (mode 0, FALLOC_FL_KEEP_SIZE,
               FALLOC_FL_PUNCH_HOLE), fsync
    mmap       + reads and writes through MAP_SHARED mappings (msync most
               times; the bytes past the end of file in its last page must
               read as zeros)
    reopen     + close and reopen (now and then with O_TRUNC),
               echo 3 > /proc/sys/vm/drop_caches
    twomounts  + switch: close through one mount point (after fsync half the
               time), open the same file through the other (--dir2);
               close-to-open is what GrantFS promises, and every read through
               either mount is checked
    nocache    the operations of plain; the caller mounts GrantFS with
               --write_mode=writethrough (the write cache off)
    grow       writes (holes too), reads, mmap reads, reopen (never with
               O_TRUNC), fsync: nothing that shortens, punches or truncates
               the file. With GrantFS's namespace grants the file stays the
               mount's own for the whole run (its attributes, and reads of
               bytes still cached, answered by the mount)

A fallocate mode the target answers with EOPNOTSUPP is not supported there: it
is logged and not tried again in this run. So is drop_caches when /proc refuses.

Sizes: ordinary operations keep the file within --maxlen (256 KiB) and move
at most --oplen (64 KiB); offsets and lengths are biased to 4 KiB block
boundaries, to the end of file and to far past it. A few percent of the
operations are big ones, up to --bigmax (4 MiB; 0 = none): writes and reads of
1-2 MiB (more than one 1 MiB FUSE request) and writes and truncates at 1 MiB
boundaries.

The log: one line per operation, replayable (`N op key=value ...`, `#` starts
a comment). Written data is a pattern of the operation's tag and of the file
offset, never a zero byte, so a hole, a misplaced block or stale data shows as
a wrong byte. On a mismatch the checker prints the last operations, the offset
of the first bad byte with what was expected and what was read and which
operation last set that byte, writes the whole log to a file (--log, default
/tmp/fsx-MODE-SEED.log) and exits 1. Cut the log down by hand to the few lines
that still fail for a minimal repro.

Stdlib only. Imported by tests/test_fsx.py: run() returns a Stats or raises
CheckFailed (with the report).
"""

import argparse
import ctypes
import ctypes.util
import errno
import faulthandler
import fcntl
import os
import random
import sys
import tempfile
import time
from array import array

KIB = 1 << 10
MIB = 1 << 20
BLOCK = 4096
PAGE = os.sysconf("SC_PAGE_SIZE")
DEFAULT_FILE = "fsx.file"
LAST_OPS = 40  # operations shown in a failure report
BIG_P = 0.03  # share of big operations (when --bigmax allows them)
PATTERN_PERIOD = 4099  # prime, so a block moved by any multiple of 4 KiB reads wrong

MODES = ("plain", "mmap", "reopen", "twomounts", "nocache", "grow")

# Relative weights of the operations in each mode. drop_caches is rare: it
# costs ~0.3 s and slows everything else on the machine.
_PLAIN = {"write": 10, "pwrite": 10, "append": 2, "read": 10, "pread": 10, "seqread": 2,
          "truncate": 4, "fallocate": 4, "fsync": 2}
_MMAP = {**_PLAIN, "mapread": 8, "mapwrite": 8}
_REOPEN = {**_MMAP, "reopen": 3, "dropcaches": 0.05}
WEIGHTS = {
    "plain": _PLAIN,
    "mmap": _MMAP,
    "reopen": _REOPEN,
    "twomounts": {**_REOPEN, "switch": 4},
    "nocache": _PLAIN,
    # Nothing that shortens or punches the file, or extends it by a
    # truncate: what a program that writes a new file does.
    "grow": {"write": 10, "pwrite": 10, "append": 2, "read": 10, "pread": 10, "seqread": 2,
             "mapread": 8, "reopen": 3, "fsync": 2},
}

# Arguments of each operation, in log order.
ARGS = {
    "write": ("off", "len", "tag"),
    "pwrite": ("off", "len", "tag"),
    "append": ("len", "tag"),
    "read": ("off", "len"),
    "pread": ("off", "len"),
    "seqread": ("off", "len", "chunk"),
    "mapread": ("off", "len"),
    "mapwrite": ("off", "len", "tag", "msync"),
    "truncate": ("size",),
    "fallocate": ("mode", "off", "len"),
    "fsync": (),
    "reopen": ("trunc",),
    "dropcaches": (),
    "switch": ("fsync",),
}

# Arguments a hand-written log may leave out, and their values.
OPTIONAL = {("reopen", "trunc"): 0, ("switch", "fsync"): 1}

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_MODES = {  # log name -> fallocate(2) mode
    "alloc": 0,
    "keep_size": FALLOC_FL_KEEP_SIZE,
    "punch_hole": FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
}

# --- system calls the os module lacks ------------------------------------------------

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
_libc.fallocate.restype = ctypes.c_int
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.mmap.restype = ctypes.c_void_p
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munmap.restype = ctypes.c_int
_libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.msync.restype = ctypes.c_int
_PROT_READ, _PROT_WRITE, _MAP_SHARED, _MS_SYNC = 1, 2, 1, 4
_MAP_FAILED = ctypes.c_void_p(-1).value


def _check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def fallocate(fd, mode, off, length):
    """fallocate(2) itself: os.posix_fallocate would emulate what the file
    system refuses (glibc writes zeros), hiding EOPNOTSUPP."""
    _check(_libc.fallocate(fd, mode, off, length), "fallocate")


class Mapping:
    """A MAP_SHARED mapping of [off, off + length) of fd, off page-aligned.
    Used as a context manager: unmapped on exit, so no mapping outlives the
    operation that made it (a later truncate never cuts under one)."""

    def __init__(self, fd, off, length, writable):
        assert off % PAGE == 0 and length > 0
        prot = _PROT_READ | (_PROT_WRITE if writable else 0)
        self.length = length
        self.addr = _libc.mmap(None, length, prot, _MAP_SHARED, fd, off)
        if self.addr in (None, _MAP_FAILED):
            e = ctypes.get_errno()
            raise OSError(e, f"mmap: {os.strerror(e)}")

    def read(self, at, n):
        return ctypes.string_at(self.addr + at, n)

    def write(self, at, data):
        ctypes.memmove(self.addr + at, data, len(data))

    def msync(self):
        _check(_libc.msync(self.addr, self.length, _MS_SYNC), "msync")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _check(_libc.munmap(self.addr, self.length), "munmap")


# --- data and log format ---------------------------------------------------------------

_unit_cache = {}


def pattern(tag, off, n):
    """The n bytes an operation tagged `tag` writes at file offset `off`: a
    function of tag and offset only (a replayed or shortened log writes the
    same bytes), with no zero byte (so it cannot pass for a hole)."""
    unit = _unit_cache.get(tag)
    if unit is None:
        raw = random.Random(tag).randbytes(PATTERN_PERIOD)
        unit = raw.translate(bytes([1]) + bytes(range(1, 256)))
        if len(_unit_cache) > 64:
            _unit_cache.clear()
        _unit_cache[tag] = unit
    start = off % PATTERN_PERIOD
    reps = (start + n) // PATTERN_PERIOD + 1
    return (unit * reps)[start:start + n]


def format_op(num, op):
    name = op["op"]
    return " ".join([str(num), name] + [f"{k}={op[k]}" for k in ARGS[name]])


def parse_op(line):
    """(num or None, op) from a log line, or None for a blank or comment line."""
    line = line.split("#", 1)[0].split()
    if not line:
        return None
    num = None
    if line[0].isdigit():
        num = int(line.pop(0))
    name = line.pop(0)
    if name not in ARGS:
        raise ValueError(f"unknown operation {name!r}")
    op = {"op": name}
    for kv in line:
        k, v = kv.split("=", 1)
        op[k] = v if k == "mode" else int(v)
    for k, v in OPTIONAL.items():
        if k[0] == name and k[1] not in op:
            op[k[1]] = v
    missing = [k for k in ARGS[name] if k not in op]
    if missing:
        raise ValueError(f"{name}: missing {', '.join(missing)}")
    return num, op


def _hex(b):
    return " ".join(f"{x:02x}" for x in b)


# --- the checker --------------------------------------------------------------------------


class CheckFailed(Exception):
    """A read, a size or a system call did not match the model. `report` is
    the whole text to show (the op log tail, the first bad byte, the log's
    path and the replay command)."""

    def __init__(self, report, log_path):
        super().__init__(report)
        self.report = report
        self.log_path = log_path


class Stats:
    """What a run did: operations applied per kind and what was skipped."""

    def __init__(self):
        self.ops = 0
        self.by_op = {}
        self.unsupported = []  # e.g. "fallocate punch_hole: EOPNOTSUPP"
        self.seconds = 0.0

    def __str__(self):
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.by_op.items()))
        s = f"{self.ops} ops in {self.seconds:.1f} s ({kinds})"
        if self.unsupported:
            s += "; not supported by the target: " + "; ".join(self.unsupported)
        return s


class _Mismatch(Exception):
    """Raised inside an operation; Fsx turns it into a CheckFailed report."""


class Fsx:
    """The file, its model and the op log. `paths` holds one path, or two
    paths to the same file through two mount points (twomounts)."""

    def __init__(self, paths, mode, seed=None, maxlen=256 * KIB, oplen=64 * KIB,
                 bigmax=4 * MIB, log_path=None, verbose=False, out=sys.stdout):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        if mode == "twomounts" and len(paths) != 2:
            raise ValueError("twomounts needs a second directory (--dir2)")
        self.paths = list(paths)
        self.mode = mode
        self.seed = seed
        self.maxlen = maxlen
        self.oplen = max(1, min(oplen, maxlen))
        self.bigmax = bigmax if bigmax >= 2 * MIB else 0
        self.log_path = log_path or os.path.join(tempfile.gettempdir(),
                                                 f"fsx-{mode}-{seed}.log")
        self.verbose = verbose
        self.out = out
        self.good = bytearray()  # the model: what the file must hold
        self.setter = array("I")  # per byte: the op that last set it (0: none)
        self.log = []  # formatted lines, one per op applied or attempted
        self.ops_by_num = {}
        self.unsupported = set()  # fallocate modes and "dropcaches"
        self.stats = Stats()
        self.fd = -1
        self.cur = 0  # index in paths of the mount the file is open through
        self.same_file_checked = False
        self.replaying = None  # "replay of LOGFILE" while replaying

    # --- running ---------------------------------------------------------------------

    def header(self):
        return (f"# fsx.py log: mode={self.mode} seed={self.seed} maxlen={self.maxlen} "
                f"oplen={self.oplen} bigmax={self.bigmax} file={self.paths[0]}"
                + (f" file2={self.paths[1]}" if len(self.paths) > 1 else ""))

    def start(self):
        """Creates (or empties) the file through the first path."""
        self.fd = os.open(self.paths[0], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.cur = 0

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def run_random(self, ops):
        rng = random.Random(self.seed)
        weights = WEIGHTS[self.mode]
        names = list(weights)
        w = [weights[n] for n in names]
        for num in range(1, ops + 1):
            while True:
                name = rng.choices(names, w)[0]
                op = getattr(self, "_gen_" + name)(rng, num)
                if op is not None:
                    break
            self.step(num, op)
        self.verify_all(ops + 1)

    def replay(self, lines, name):
        self.replaying = f"replay of {name}"
        num = 0
        for line in lines:
            parsed = parse_op(line)
            if parsed is None:
                continue
            n, op = parsed
            num = n if n is not None else num + 1
            self.step(num, op)
        self.verify_all(num + 1)

    def step(self, num, op):
        """Applies one op to the file and the model, then checks the size."""
        line = format_op(num, op)
        self.log.append(line)
        self.ops_by_num[num] = line
        if self.verbose:
            print(line, file=self.out, flush=True)
        try:
            getattr(self, "_do_" + op["op"])(num, op)
            self._check_size(num)
        except _Mismatch as e:
            self._fail(num, str(e))
        except OSError as e:
            self._fail(num, f"{op['op']} failed: {e!r} ({errno.errorcode.get(e.errno, '?')})")
        self.stats.ops += 1
        self.stats.by_op[op["op"]] = self.stats.by_op.get(op["op"], 0) + 1

    def verify_all(self, num):
        """A last read of the whole file (in 1 MiB preads) against the model."""
        line = f"{num} pread off=0 len={len(self.good)}  # final check of the whole file"
        self.log.append(line)
        try:
            for off in range(0, len(self.good), MIB):
                n = min(MIB, len(self.good) - off)
                self._compare(num, "final pread", off, n, os.pread(self.fd, n, off))
        except _Mismatch as e:
            self._fail(num, str(e))
        except OSError as e:
            self._fail(num, f"final read failed: {e!r}")

    # --- operations: generators (state-aware, so every op is valid) ---------------------

    def _offset(self, rng, limit):
        """An offset below limit, biased to block boundaries and to the end of file."""
        size = len(self.good)
        r = rng.random()
        if r < 0.35:
            off = rng.randrange(limit)
        elif r < 0.6:  # on or next to a 4 KiB boundary
            off = rng.randrange(limit // BLOCK + 1) * BLOCK + rng.choice((0, 0, -1, 1, -3, 3))
        elif r < 0.8:  # around the end of file: inside, at, just past
            off = size + rng.randint(-BLOCK - 3, BLOCK + 3)
        elif r < 0.9:  # far past the end of file: a hole below
            off = size + rng.randint(BLOCK, max(BLOCK, limit // 2))
        else:  # the first blocks
            off = rng.randrange(2 * BLOCK)
        off = max(0, off)
        return off if off < limit else rng.randrange(limit)

    def _length(self, rng):
        r = rng.random()
        if r < 0.3:
            return rng.randint(1, 16)
        if r < 0.5:
            return max(1, rng.randint(1, 4) * BLOCK + rng.choice((0, 0, -1, 1, -3, 3)))
        return rng.randint(1, self.oplen)

    def _big(self, rng):
        """An offset at or near a 1 MiB boundary, and a length that is either
        small (a write far past the end) or 1-2 MiB (more than one FUSE
        request), within bigmax; None when big ops are off or not drawn."""
        if not self.bigmax or rng.random() >= BIG_P:
            return None
        off = rng.randrange(self.bigmax // MIB) * MIB
        off = max(0, off + rng.choice((0, 0, -1, 1, -BLOCK, BLOCK, rng.randint(-BLOCK, BLOCK))))
        if rng.random() < 0.7:
            n = rng.randint(MIB - BLOCK, 2 * MIB + BLOCK)
        else:
            n = self._length(rng)
        n = min(n, self.bigmax - off)
        return (off, n) if n > 0 else None

    def _extent(self, rng):
        """(off, len) of a write-like op: within maxlen, or a big one."""
        big = self._big(rng)
        if big:
            return big
        off = self._offset(rng, self.maxlen)
        return off, max(1, min(self._length(rng), self.maxlen - off))

    def _read_extent(self, rng):
        """(off, len) of a read: anywhere up to past the end of file."""
        big = self._big(rng)
        if big:
            return big
        limit = max(len(self.good), self.maxlen) + 2 * BLOCK
        return self._offset(rng, limit), self._length(rng)

    def _gen_write(self, rng, num):
        off, n = self._extent(rng)
        return {"op": "write", "off": off, "len": n, "tag": num}

    def _gen_pwrite(self, rng, num):
        off, n = self._extent(rng)
        return {"op": "pwrite", "off": off, "len": n, "tag": num}

    def _gen_append(self, rng, num):
        big = self._big(rng)
        limit = self.bigmax if big else self.maxlen
        n = min(big[1] if big else self._length(rng), limit - len(self.good))
        return {"op": "append", "len": n, "tag": num} if n > 0 else None

    def _gen_read(self, rng, num):
        off, n = self._read_extent(rng)
        return {"op": "read", "off": off, "len": n}

    def _gen_pread(self, rng, num):
        off, n = self._read_extent(rng)
        return {"op": "pread", "off": off, "len": n}

    def _gen_seqread(self, rng, num):
        # Consecutive read() calls: the kernel's and GrantFS's read-ahead
        # only start for a sequential reader.
        limit = max(len(self.good), self.maxlen)
        off = rng.choice((0, rng.randrange(limit // BLOCK + 1) * BLOCK, self._offset(rng, limit)))
        n = rng.randint(16 * KIB, max(16 * KIB, min(2 * MIB, limit - off + BLOCK)))
        chunk = rng.choice((BLOCK, 32 * KIB, 128 * KIB, MIB, rng.randint(1, 64 * KIB)))
        return {"op": "seqread", "off": off, "len": n, "chunk": chunk}

    def _gen_mapread(self, rng, num):
        size = len(self.good)
        if size == 0:
            return None  # nothing to map
        off = self._offset(rng, size)
        return {"op": "mapread", "off": off, "len": max(1, min(self._length(rng), size - off))}

    def _gen_mapwrite(self, rng, num):
        off, n = self._extent(rng)
        return {"op": "mapwrite", "off": off, "len": n, "tag": num,
                "msync": int(rng.random() < 0.75)}

    def _gen_truncate(self, rng, num):
        size = len(self.good)
        big = self._big(rng)
        r = rng.random()
        if big:
            new = big[0]
        elif size > self.maxlen and r < 0.5:  # back from a big op
            new = rng.randrange(self.maxlen + 1)
        elif r < 0.05:
            new = 0
        elif r < 0.35:
            new = rng.randrange(self.maxlen + 1)
        elif r < 0.55:  # a few bytes or a block up or down
            new = size + rng.choice((-1, 1, -BLOCK, BLOCK, rng.randint(-BLOCK, BLOCK)))
        elif r < 0.8:  # on or next to a block boundary
            new = rng.randrange(self.maxlen // BLOCK + 1) * BLOCK + rng.choice((0, 0, -1, 1))
        else:  # up: a hole at the end
            new = size + rng.randint(1, max(1, self.maxlen // 2))
        new = max(0, min(new, max(self.maxlen, self.bigmax)))
        return {"op": "truncate", "size": new}

    def _gen_fallocate(self, rng, num):
        modes = [m for m in FALLOC_MODES if m not in self.unsupported]
        if not modes:
            return None
        off, n = self._extent(rng)
        return {"op": "fallocate", "mode": rng.choice(modes), "off": off, "len": n}

    def _gen_fsync(self, rng, num):
        return {"op": "fsync"}

    def _gen_reopen(self, rng, num):
        return {"op": "reopen", "trunc": int(self.mode != "grow" and rng.random() < 0.05)}

    def _gen_dropcaches(self, rng, num):
        return None if "dropcaches" in self.unsupported else {"op": "dropcaches"}

    def _gen_switch(self, rng, num):
        return {"op": "switch", "fsync": int(rng.random() < 0.5)}

    # --- operations: doing them on the file and the model ---------------------------------

    def _set(self, num, off, data):
        """Model: data at off (a gap up to off becomes a hole of zeros)."""
        end = off + len(data)
        if end > len(self.good):
            self._resize(num, end)
        self.good[off:end] = data
        self.setter[off:end] = array("I", [num]) * len(data)

    def _resize(self, num, size):
        old = len(self.good)
        if size < old:
            del self.good[size:]
            del self.setter[size:]
        elif size > old:
            self.good.extend(bytes(size - old))
            self.setter.extend(array("I", [num]) * (size - old))

    def _zero(self, num, off, end):
        end = min(end, len(self.good))
        if off < end:
            self.good[off:end] = bytes(end - off)
            self.setter[off:end] = array("I", [num]) * (end - off)

    def _do_write(self, num, op):
        data = pattern(op["tag"], op["off"], op["len"])
        os.lseek(self.fd, op["off"], os.SEEK_SET)
        n = os.write(self.fd, data)
        if n != len(data):
            raise _Mismatch(f"short write: {n} of {len(data)} bytes")
        self._set(num, op["off"], data)

    def _do_pwrite(self, num, op):
        data = pattern(op["tag"], op["off"], op["len"])
        n = os.pwrite(self.fd, data, op["off"])
        if n != len(data):
            raise _Mismatch(f"short pwrite: {n} of {len(data)} bytes")
        self._set(num, op["off"], data)

    def _do_append(self, num, op):
        # O_APPEND set on the open file for this one write(): the kernel
        # writes at the size it knows, which must be the model's.
        off = len(self.good)
        data = pattern(op["tag"], off, op["len"])
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        fcntl.fcntl(self.fd, fcntl.F_SETFL, flags | os.O_APPEND)
        try:
            n = os.write(self.fd, data)
        finally:
            fcntl.fcntl(self.fd, fcntl.F_SETFL, flags)
        if n != len(data):
            raise _Mismatch(f"short append: {n} of {len(data)} bytes")
        self._set(num, off, data)

    def _do_read(self, num, op):
        os.lseek(self.fd, op["off"], os.SEEK_SET)
        self._compare(num, "read", op["off"], op["len"], os.read(self.fd, op["len"]))

    def _do_pread(self, num, op):
        self._compare(num, "pread", op["off"], op["len"], os.pread(self.fd, op["len"], op["off"]))

    def _do_seqread(self, num, op):
        os.lseek(self.fd, op["off"], os.SEEK_SET)
        pos, end = op["off"], op["off"] + op["len"]
        while pos < end:
            n = min(op["chunk"], end - pos)
            got = os.read(self.fd, n)
            self._compare(num, f"seqread (read at {pos})", pos, n, got)
            if not got:
                break  # end of file, as the model says
            pos += len(got)

    def _do_mapread(self, num, op):
        off, n = op["off"], op["len"]
        size = len(self.good)
        if n < 1 or off + n > size:
            raise ValueError(f"mapread [{off}, {off + n}) outside the file (size {size})")
        base = off - off % PAGE
        # Mapped up to the end of the page holding the last byte read: if that
        # is the page holding the end of file, the bytes past the end in it
        # are checked as well (they must read as zeros: mmap(2)).
        end = _round_up(off + n, PAGE)
        with Mapping(self.fd, base, end - base, writable=False) as m:
            self._compare(num, "mapread", off, n, m.read(off - base, n))
            self._check_eof_page(m, base, end)

    def _do_mapwrite(self, num, op):
        off, n = op["off"], op["len"]
        data = pattern(op["tag"], off, n)
        if off + n > len(self.good):
            # A store past the end of file does not extend it (and past its
            # last page raises SIGBUS): extend first, as fsx does.
            os.ftruncate(self.fd, off + n)
            self._resize(num, off + n)
        base = off - off % PAGE
        end = _round_up(off + n, PAGE)
        with Mapping(self.fd, base, end - base, writable=True) as m:
            m.write(off - base, data)
            if op["msync"]:
                m.msync()
            self._set(num, off, data)
            self._check_eof_page(m, base, end)
        # Without msync the stores reach the file system from the kernel's
        # writeback: at the latest on fsync or close (the pages stay dirty in
        # the page cache, which every later read of this mount goes through).

    def _check_eof_page(self, m, base, end):
        size = len(self.good)
        if base <= size < end and size % PAGE:
            tail = m.read(size - base, _round_up(size, PAGE) - size)
            if tail.count(0) != len(tail):
                bad = next(i for i, b in enumerate(tail) if b)
                raise _Mismatch(
                    f"mapped page past the end of file not zero: file offset {size + bad} "
                    f"(0x{size + bad:x}, end of file {size}) reads 0x{tail[bad]:02x}; "
                    f"from there: {_hex(tail[bad:bad + 16])}")

    def _do_truncate(self, num, op):
        os.ftruncate(self.fd, op["size"])
        self._resize(num, op["size"])

    def _do_fallocate(self, num, op):
        mode, off, n = op["mode"], op["off"], op["len"]
        if mode not in FALLOC_MODES:
            raise ValueError(f"unknown fallocate mode {mode!r}")
        try:
            fallocate(self.fd, FALLOC_MODES[mode], off, n)
        except OSError as e:
            if e.errno != errno.EOPNOTSUPP:
                raise
            # Not supported by the target (GrantFS allocates with mode 0 only;
            # a FUSE daemon without fallocate gets EOPNOTSUPP for every mode):
            # never tried again in this run, the file unchanged.
            self.unsupported.add(mode)
            self.stats.unsupported.append(f"fallocate {mode}: EOPNOTSUPP")
            self.log[-1] += "  # EOPNOTSUPP: not tried again"
            return
        if mode == "alloc" and off + n > len(self.good):
            self._resize(num, off + n)
        elif mode == "punch_hole":
            self._zero(num, off, off + n)
        # keep_size: neither the size nor a byte changes.

    def _do_fsync(self, num, op):
        os.fsync(self.fd)

    def _do_reopen(self, num, op):
        os.close(self.fd)
        self.fd = -1
        self.fd = os.open(self.paths[self.cur], os.O_RDWR | (os.O_TRUNC if op["trunc"] else 0))
        if op["trunc"]:
            self._resize(num, 0)

    def _do_dropcaches(self, num, op):
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        except OSError as e:
            self.unsupported.add("dropcaches")
            self.stats.unsupported.append(f"drop_caches: {e.strerror}")
            self.log[-1] += f"  # {e.strerror}: not tried again"

    def _do_switch(self, num, op):
        if len(self.paths) < 2:
            raise ValueError("switch needs a second directory (--dir2)")
        # Close-to-open: what one mount closed is what an open through the
        # other mount reads. Half the time fsync comes first (as the
        # issue asks); close alone must do as well (FUSE FLUSH waits for the
        # mount's cached writes, and the kernel writes back mmap'd pages).
        if op["fsync"]:
            os.fsync(self.fd)
        old = os.fstat(self.fd)
        os.close(self.fd)
        self.fd = -1
        self.cur = 1 - self.cur
        self.fd = os.open(self.paths[self.cur], os.O_RDWR)
        if not self.same_file_checked:
            new = os.fstat(self.fd)
            if new.st_ino != old.st_ino:
                raise _Mismatch(f"{self.paths[self.cur]} is not the file of {self.paths[1 - self.cur]}"
                                f" (inode {new.st_ino}, not {old.st_ino}): --dir2 must be the "
                                f"same file system")
            self.same_file_checked = True

    # --- checks ------------------------------------------------------------------------

    def _check_size(self, num):
        got = os.fstat(self.fd).st_size
        if got != len(self.good):
            raise _Mismatch(f"fstat size {got} (0x{got:x}), expected {len(self.good)} "
                            f"(0x{len(self.good):x})")

    def _compare(self, num, what, off, n, got):
        """Checks bytes read at off (n asked for) against the model. A read
        returns exactly what lies below the end of file: no short read."""
        expected = bytes(self.good[off:off + n])
        if got == expected:
            return
        msg = [f"{what} of {n} bytes at {off} (0x{off:x}) returned {len(got)} bytes, "
               f"expected {len(expected)} (model size {len(self.good)})"]
        common = min(len(got), len(expected))
        bad = next((i for i in range(common) if got[i] != expected[i]), common)
        pos = off + bad
        if bad < common:
            nbad = sum(1 for i in range(bad, common) if got[i] != expected[i])
            last = max(i for i in range(bad, common) if got[i] != expected[i])
            msg.append(f"first bad byte at file offset {pos} (0x{pos:x}): expected "
                       f"0x{expected[bad]:02x}, got 0x{got[bad]:02x}; {nbad} bad bytes in "
                       f"[{pos}, {off + last + 1})")
            msg.append(f"  expected from 0x{pos:x}: {_hex(expected[bad:bad + 16])}")
            msg.append(f"  got      from 0x{pos:x}: {_hex(got[bad:bad + 16])}")
        elif len(got) < len(expected):
            msg.append(f"short read: the bytes from file offset {pos} (0x{pos:x}) are missing "
                       f"(expected from there: {_hex(expected[bad:bad + 16])})")
        else:
            msg.append(f"read past the end of file: {len(got) - len(expected)} bytes from "
                       f"{pos} (0x{pos:x}): {_hex(got[bad:bad + 16])}")
        if pos < len(self.good):
            setter = self.setter[pos]
            kind = "data" if self.good[pos] else "zeros (hole, truncate or punch)"
            msg.append(f"byte {pos} holds {kind}, last set by: "
                       + (self.ops_by_num.get(setter, f"op {setter}") if setter else
                          "nothing (never written)"))
        raise _Mismatch("\n".join(msg))

    def _fail(self, num, what):
        path = self.paths[self.cur]
        self.write_log()
        tail = self.log[-LAST_OPS:]
        dirs = f"--dir {os.path.dirname(self.paths[0])}"
        if len(self.paths) > 1:
            dirs += f" --dir2 {os.path.dirname(self.paths[1])}"
        dirs += f" --file {os.path.basename(self.paths[0])}"
        run = self.replaying or f"mode {self.mode}, seed {self.seed}"
        report = "\n".join(
            [f"fsx: FAILED at op {num} ({run}) on {path}",
             what,
             f"last {len(tail)} ops (the failing one last):",
             *("  " + line for line in tail),
             f"full log: {self.log_path}",
             f"replay: python3 {os.path.abspath(__file__)} {dirs} --replay {self.log_path}"])
        raise CheckFailed(report, self.log_path) from None  # the report says it all

    def write_log(self):
        with open(self.log_path, "w") as f:
            f.write(self.header() + "\n")
            f.write("\n".join(self.log) + "\n")


def _round_up(x, unit):
    return (x + unit - 1) // unit * unit


# --- entry points -------------------------------------------------------------------------


def run(dir, mode, ops, seed, dir2=None, maxlen=256 * KIB, oplen=64 * KIB, bigmax=4 * MIB,
        name=DEFAULT_FILE, log_path=None, verbose=False, replay=None, out=sys.stdout):
    """Runs the checker on DIR/NAME (and DIR2/NAME for twomounts; replay uses
    DIR2 if given). Returns Stats; raises CheckFailed on any mismatch. With
    replay (a log file's path), the log's ops are applied instead of random
    ones (mode, seed, ops only label the run)."""
    paths = [os.path.join(dir, name)] + ([os.path.join(dir2, name)] if dir2 else [])
    if replay:
        mode = "twomounts" if dir2 else "plain"  # replay: only the paths matter
        log_path = log_path or replay + ".replay"
    fsx = Fsx(paths, mode, seed=seed, maxlen=maxlen, oplen=oplen, bigmax=bigmax,
              log_path=log_path, verbose=verbose, out=out)
    if replay:
        print(f"fsx: replaying {replay} on {' and '.join(paths)}", file=out, flush=True)
    else:
        print(f"fsx: seed {seed} mode {mode} ops {ops} maxlen {maxlen} bigmax {fsx.bigmax} "
              f"file {' and '.join(paths)}", file=out, flush=True)
    t0 = time.monotonic()
    fsx.start()
    try:
        if replay:
            with open(replay) as f:
                fsx.replay(f.readlines(), replay)
        else:
            fsx.run_random(ops)
    finally:
        fsx.close()
    fsx.stats.seconds = time.monotonic() - t0
    fsx.stats.unsupported = sorted(set(fsx.stats.unsupported))
    print(f"fsx: passed: {fsx.stats}", file=out, flush=True)
    return fsx.stats


def _size(text):
    """A byte count: 262144, 256k, 4m."""
    text = text.strip().lower()
    mult = {"k": KIB, "m": MIB, "g": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if mult > 1 else text) * mult


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--dir", required=True, help="directory of the file (created, emptied)")
    p.add_argument("--dir2", help="the same directory through a second mount (twomounts)")
    p.add_argument("--mode", choices=MODES, default="plain")
    p.add_argument("--ops", type=int, default=10000)
    p.add_argument("--seed", type=int, help="default: from the time (printed)")
    p.add_argument("--maxlen", type=_size, default=256 * KIB, help="file size of ordinary ops")
    p.add_argument("--oplen", type=_size, default=64 * KIB, help="most bytes of an ordinary op")
    p.add_argument("--bigmax", type=_size, default=4 * MIB,
                   help="file size of the big ops (1-2 MiB, at 1 MiB boundaries); 0: none")
    p.add_argument("--file", default=DEFAULT_FILE, help="file name in DIR")
    p.add_argument("--log", help="where the full op log goes on a failure")
    p.add_argument("--replay", metavar="LOGFILE", help="apply the ops of a log instead")
    p.add_argument("-v", "--verbose", action="store_true", help="print every op")
    a = p.parse_args(argv)
    if a.mode == "twomounts" and not a.dir2:
        p.error("--mode twomounts needs --dir2")
    seed = a.seed if a.seed is not None else int(time.time() * 1000) % 1_000_000_007
    faulthandler.enable()  # a SIGBUS in a mapping shows where
    try:
        run(a.dir, a.mode, a.ops, seed, dir2=a.dir2, maxlen=a.maxlen, oplen=a.oplen,
            bigmax=a.bigmax, name=a.file, log_path=a.log, verbose=a.verbose, replay=a.replay)
    except CheckFailed as e:
        print(e.report, file=sys.stderr, flush=True)
        return 1
    except ValueError as e:  # a log that does not parse or fit the file
        print(f"fsx: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
