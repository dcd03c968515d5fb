"""One worker of the namespace checker (tests/nscheck.py): draws operations
on its own subtree (checked exactly against nscheck_model) and races on
shared/ (checked against what a race may give), switching mounts once
its changes are `bound` seconds old."""

import errno
import os
import random
import resource
import time
import traceback

from nscheck_fs import (BAD_NAMES, BAD_XATTR_NAMES, DIR, DIR_MODES, FILE_MODES, GIDS, LONG_NAME,
                        NAMES, REG, RENAME_EXCHANGE, RENAME_NOREPLACE, SHARED_NAMES,
                        SHARED_PAYLOAD_LEN, TARGET_PREFIXES, TOO_LONG_NAME, UIDS, XATTR_NAMES,
                        diff_entry, ename, join, show)
from nscheck_model import Model, execute, fmt_op

# The kernel counts cache timeouts in ticks: see Worker._switch_mount.
TICK_SLACK = 0.02  # seconds

# What a race in shared/ may give, besides success.
SHARED_ERRNOS = {
    # what the path is changes between lstat and what follows (readlink of a
    # non-symlink is EINVAL; a removed xattr ENODATA)
    "check": {errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EISDIR, errno.ENODATA,
              errno.EINVAL},
    "creat": {errno.EEXIST, errno.ENOENT, errno.ENOTDIR},
    "mkdir": {errno.EEXIST, errno.ENOENT, errno.ENOTDIR},
    "symlink": {errno.EEXIST, errno.ENOENT, errno.ENOTDIR},
    "link": {errno.EEXIST, errno.ENOENT, errno.ENOTDIR, errno.EPERM},
    "unlink": {errno.ENOENT, errno.ENOTDIR, errno.EISDIR},
    "rmdir": {errno.ENOENT, errno.ENOTDIR, errno.ENOTEMPTY},
    "rename": {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST,
               errno.EINVAL},
    "chmod": {errno.ENOENT, errno.ENOTDIR},
    "chown": {errno.ENOENT, errno.ENOTDIR},
    "setxattr": {errno.ENOENT, errno.ENOTDIR, errno.EPERM, errno.EEXIST, errno.ENODATA},
    "rmxattr": {errno.ENOENT, errno.ENOTDIR, errno.EPERM, errno.ENODATA},
    # EACCES: O_CREAT of another owner's name in a sticky directory
    "write": {errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EISDIR, errno.EACCES},
}

# ESTALE_NOTE: a directory that another node moved is still cached by this
# mount's kernel under its old name; when a lookup finds it under the new
# one, d_splice_alias() must move the cached entry and needs the file
# system's rename lock: while a rename runs on this mount it cannot take it,
# and the syscall fails with ESTALE (after the VFS's one retry), having done
# nothing. NFS clients see the same. So ESTALE is a race's errno in shared/,
# and an own-subtree op that gets it is retried.

# Operation kinds and how often a worker draws each.
OP_WEIGHTS = {
    "check": 14, "creat": 7, "mkdir": 7, "symlink": 5, "link": 6, "unlink": 7, "rmdir": 6,
    "rename": 16, "chmod": 4, "chown": 4, "setxattr": 5, "rmxattr": 2, "write": 12,
}
# How often an op draws a path that exists (else a name in an existing
# directory): most ops are more interesting on something that is there.
EXISTING_BIAS = {"creat": 0.2, "mkdir": 0.2, "symlink": 0.2, "link": 0.8, "rename": 0.8}
# What most ops on an existing path pick.
PREFERRED_TYPE = {
    "rmdir": lambda n: n.kind == DIR and not n.entries,
    "unlink": lambda n: n.kind != DIR,
    "write": lambda n: n.kind == REG,
    "link": lambda n: n.kind != DIR,
}
# Above this many entries in a worker's subtree, creating ops are drawn less.
TREE_SIZE = 40
CREATING_KINDS = ("creat", "mkdir", "symlink", "link")


class Worker:
    """One process: its own subtree (exact model) and its share of the races
    in shared/. Runs in a child process; the parent gets `result()`."""

    HELD_DIR_FDS = 200  # removed directories kept open (their inode numbers stay unused)

    def __init__(self, cfg, index):
        self.cfg = cfg
        self.index = index
        self.rng = random.Random(cfg["seed"] * 1000 + index)
        # Shared-area ops done while waiting for the bound: how many depends
        # on timing, so they draw from their own generator.
        self.filler_rng = random.Random(cfg["seed"] * 1000 + index + 500)
        self.model = Model()
        self.mounts = [join(m, cfg["base"]) for m in cfg["mounts"]]
        self.disabled = set(cfg["disabled"])
        self.kinds = [k for k in OP_WEIGHTS if k not in self.disabled]
        self.weights = [OP_WEIGHTS[k] for k in self.kinds]
        self.log = []
        self.failure = None
        self.stopped = None  # why the worker stopped early without failing (quirk estale)
        self.ops_done = 0
        self.filler_done = 0  # shared-area ops done while waiting for the bound
        self.counts = {}
        self.mount = index % len(self.mounts)
        self.last_change = [float("-inf")] * len(self.mounts)  # own subtree, per mount
        self.t0 = cfg["t0"]
        # What went into shared/, for the final checks.
        self.used = {"modes": set(), "payloads": set(), "targets": set(), "xattr_values": set()}
        self.removed_dirs = []  # (ino, log line) of directories seen removed by our rmdir
        self.held_fds = []

    # -- drawing operations

    def _name(self, rng, pool, bad_pool):
        r = rng.random()
        if r < self.cfg["bad_names"]:
            return rng.choice(bad_pool)
        return rng.choice(pool)

    def _own_name(self):
        r = self.rng.random()
        if r < 0.01:
            return LONG_NAME
        return self._name(self.rng, NAMES, BAD_NAMES)

    def _own_path(self, existing, kind=None, src=None, flags=0):
        """A path in the subtree: with probability `existing` one that is
        there (mostly of the type that op `kind` works on); else a name in
        an existing directory, sometimes under a name that is not a
        directory (or missing)."""
        if self.rng.random() < existing:
            pred = None
            if self.rng.random() < 0.8:
                pred = PREFERRED_TYPE.get(kind)
            paths = self.model.paths(pred)
            if paths:
                return self.rng.choice(paths)
        parent = self.rng.choice(self.model.dirs())
        if self.rng.random() < 0.04:
            parent += (self._own_name(),)
        return parent + (self._own_name(),)

    def _target(self, rng, tag):
        t = rng.choice(TARGET_PREFIXES) + tag
        r = rng.random()
        if r < self.cfg["bad_names"]:
            t += b"\xff\xfe"
        elif r < 0.1:
            t += b"/x" * rng.randrange(100, 1500)  # long, short components
        return t

    def _data(self, rng):
        n = rng.choice([0, 1, 100, 4095, 4096, 4097, rng.randrange(1, 12000)])
        return rng.randbytes(n)

    def _draw(self, rng, kind, pick_path, shared, tag):
        """The arguments of one op of `kind`; pick_path() draws a path; tag
        names the op in what it writes."""
        path = pick_path(EXISTING_BIAS.get(kind, 0.7), kind=kind)
        if kind in ("creat", "mkdir"):
            if not shared and rng.random() < 0.01:
                path = path[:-1] + (TOO_LONG_NAME,)
            return (kind, path, rng.choice(FILE_MODES if kind == "creat" else DIR_MODES))
        if kind == "symlink":
            return (kind, path, self._target(rng, tag))
        if kind == "link":
            return (kind, path, pick_path(0.1))
        if kind == "rename":
            flags = rng.choice([0, 0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE])
            return (kind, path, pick_path(0.4, src=path, flags=flags), flags)
        if kind == "chmod":
            return (kind, path, rng.choice(FILE_MODES + DIR_MODES))
        if kind == "chown":
            return (kind, path, rng.choice(UIDS), rng.choice(GIDS))
        if kind in ("setxattr", "rmxattr"):
            name = self._name(rng, XATTR_NAMES, BAD_XATTR_NAMES)
            if kind == "rmxattr":
                return (kind, path, name)
            value = rng.randbytes(rng.choice([0, 1, 16, 200, 1000]))  # all fit ext4's 4 KiB
            flags = rng.choice([0, 0, os.XATTR_CREATE, os.XATTR_REPLACE])
            return (kind, path, name, value, flags)
        if kind == "write":
            if shared:  # one whole payload, so any final content is one of them
                data = tag.ljust(SHARED_PAYLOAD_LEN, b"#")[:SHARED_PAYLOAD_LEN]
                return (kind, path, "replace", True, 0, data)
            how = rng.choice(["replace", "append", "pwrite", "truncate"])
            create = rng.random() < 0.5 and how != "truncate"
            offset = rng.randrange(0, 9000) if how in ("pwrite", "truncate") else 0
            return (kind, path, how, create, offset, b"" if how == "truncate" else self._data(rng))
        return (kind, path)  # check, unlink, rmdir

    def _shared_path(self, rng, existing=None, kind=None, src=None, flags=0):
        """A path in shared/, one or two names deep. Renames never move
        anything deeper (`src` and `flags` given: a rename's destination),
        so no directory ever holds more than one level: a directory two
        names deep can only be made by mkdir there, and is empty."""
        name = lambda: self._name(rng, SHARED_NAMES, BAD_NAMES)  # noqa: E731
        if src is None:
            return (name(),) if rng.random() < 0.6 else (name(), name())
        if len(src) == 1:
            if rng.random() < 0.1:  # into itself: EINVAL, ENOTDIR or ENOENT, never a change
                return src + (name(),)
            return (name(),)
        if flags & RENAME_EXCHANGE:
            return (name(), name())
        return (name(),) if rng.random() < 0.5 else (name(), name())

    # -- running them

    def _note(self, area, op, expected, actual, extra=""):
        t = time.monotonic() - self.t0
        line = (f"{t:10.4f} w{self.index} #{self.ops_done} m{self.mount} {area} {fmt_op(op)}"
                f" -> expected {ename(expected)}, got {ename(actual)}{extra}")
        self.log.append(line)
        return line

    def _fail(self, line, details=()):
        self.failure = "\n".join([f"worker {self.index} mismatch: {line}", *details])

    def _own_op(self):
        weights = self.weights
        if len(self.model.paths()) > TREE_SIZE:  # keep the tree small: names collide
            weights = [w * (0.25 if k in CREATING_KINDS else 2) for k, w in
                       zip(self.kinds, weights)]
        kind = self.rng.choices(self.kinds, weights)[0]
        tag = b"w%d.%d" % (self.index, self.ops_done)
        op = self._draw(self.rng, kind, self._own_path, False, tag)
        base = self.mounts[self.mount]
        if kind == "check":
            node, want = self.model.lookup(op[1])
            got, seen = execute(join(base, b"w%d" % self.index), op)
            line = self._note("own", op, want, got)
            if want != got:
                return self._fail(line)
            if node is not None:
                details = diff_entry(b"/".join(op[1]), self.model.entry(node), seen)
                if details:
                    self._fail(line, details)
            return
        want = self.model.apply(op)
        notes = []
        got = execute(join(base, b"w%d" % self.index), op, notes)
        for _ in range(3):
            if got != errno.ESTALE or want == errno.ESTALE:
                break
            # ESTALE means nothing was done (see ESTALE_NOTE); try again.
            self._note("own", op, want, got, "  (ESTALE: retried)")
            time.sleep(0.05 + self.cfg["bound"] * ("estale" in self.cfg["quirks"]))
            got = execute(join(base, b"w%d" % self.index), op)
        self.counts[(kind, ename(got))] = self.counts.get((kind, ename(got)), 0) + 1
        line = self._note("own", op, want, got, "".join(f" ({n})" for n in notes))
        if got == errno.ESTALE and "estale" in self.cfg["quirks"]:
            # Still ESTALE: the op was not done, but the model took it. The
            # worker stops; its subtree is not compared at the end.
            self.stopped = line
            return
        if got == 0:
            self.last_change[self.mount] = time.monotonic()
        if want != got:
            self._fail(line)

    def _shared_op(self, rng, area="shared"):
        kind = rng.choices(self.kinds, self.weights)[0]
        if area == "shared":
            tag = b"w%d.%d" % (self.index, self.ops_done)
        else:
            self.filler_done += 1
            tag = b"w%d.f%d" % (self.index, self.filler_done)
        op = self._draw(rng, kind, lambda *a, **kw: self._shared_path(rng, *a, **kw), True,
                        tag)
        base = join(self.mounts[self.mount], b"shared")
        notes = []
        if kind == "rmdir":
            got = self._shared_rmdir(base, op)
        else:
            got = execute(base, op, notes)
            if kind == "check":
                got = got[0]
        self._record_used(op)
        allowed = set(SHARED_ERRNOS[kind])
        if len(op[1]) == 1 and kind not in ("link", "rename", "rmdir", "check"):
            allowed.discard(errno.ENOTDIR)  # the directory is shared/ itself
            if kind in ("creat", "mkdir", "symlink", "write"):
                allowed.discard(errno.ENOENT)  # creating in a directory that is there
        allowed.add(errno.ESTALE)  # see ESTALE_NOTE
        extra = "".join(f" ({n})" for n in notes)
        if got != 0 and got not in allowed:
            extra += "  <-- not an errno a race gives"
        line = self._note(area, op, None, got, extra)
        if got != 0 and got not in allowed:
            self._fail(line)

    def _shared_rmdir(self, base, op):
        """rmdir in shared/; a directory we hold open and see removed by it
        is remembered, so the final check can tell it is gone everywhere."""
        path = join(base, *op[1])
        fd = None
        ino = None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            ino = os.fstat(fd).st_ino
        except OSError:
            # Not a directory, or removed by another node between the open
            # and the fstat (ESTALE): nothing to remember.
            if fd is not None:
                os.close(fd)
                fd = None
        try:
            os.rmdir(path)
            got = 0
        except OSError as e:
            got = e.errno
        if fd is None:
            return got
        gone = False
        if got == 0:
            try:
                gone = os.fstat(fd).st_nlink == 0
            except OSError as e:
                gone = e.errno in (errno.ENOENT, errno.ESTALE)
        if gone and len(self.held_fds) < self.HELD_DIR_FDS:
            self.held_fds.append(fd)  # held until the final checks: the ino stays unused
            self.removed_dirs.append((ino, f"w{self.index} #{self.ops_done} m{self.mount} "
                                           f"rmdir {show(b'/'.join(op[1]))}"))
        else:
            os.close(fd)
        return got

    def _record_used(self, op):
        kind = op[0]
        if kind in ("creat", "mkdir", "chmod"):
            self.used["modes"].add(op[2])
        elif kind == "symlink":
            self.used["targets"].add(op[2])
        elif kind == "setxattr":
            self.used["xattr_values"].add(op[3])
        elif kind == "write":
            self.used["payloads"].add(op[5])

    def _switch_mount(self):
        """Moves to another mount once every change made through the others
        is `bound` seconds old (the documented staleness bound); meanwhile
        races in shared/ through the current one."""
        new = self.rng.choice([m for m in range(len(self.mounts)) if m != self.mount])
        ready = max(t for m, t in enumerate(self.last_change) if m != new) + self.cfg["bound"]
        if self.cfg["bound"] > 0:
            # The kernel counts cache timeouts in ticks (4 ms at HZ=250) from a
            # tick-old clock, so an entry cached for 1 s can live up to two
            # ticks longer: seen on the passthrough in CI (expired 1.5 ms
            # before the op, still used).
            ready += TICK_SLACK
        while time.monotonic() < ready and self.failure is None:
            if self.cfg["shared"] == 0:  # no races wanted: just wait
                time.sleep(ready - time.monotonic())
                break
            self._shared_op(self.filler_rng, area="shared(wait)")
        self.mount = new

    def run(self):
        os.umask(0)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
        next_switch = 0
        try:
            while self.ops_done < self.cfg["ops"] and self.failure is None and not self.stopped:
                if len(self.mounts) > 1 and self.ops_done == next_switch:
                    if self.ops_done:
                        self._switch_mount()
                    # Phases of a few ops (a switch right after a change)
                    # and of many.
                    next_switch += self.rng.choice([1, 2, 5, 20, 100, 300])
                if self.failure is None:
                    if self.rng.random() < self.cfg["shared"]:
                        self._shared_op(self.rng)
                    else:
                        self._own_op()
                self.ops_done += 1
        except Exception:  # a checker bug: report it like a mismatch
            self.failure = (f"worker {self.index} crashed at op {self.ops_done}:\n"
                            + traceback.format_exc())

    def result(self):
        return {"index": self.index, "failure": self.failure, "ops": self.ops_done,
                "log": self.log if self.failure or self.cfg["log_dir"] else self.log[-50:],
                "model": None if self.failure or self.stopped else self.model.entries(),
                "stopped": self.stopped,
                "used": self.used, "removed_dirs": self.removed_dirs, "counts": self.counts}


def worker_main(cfg, index, conn):
    """Child process: runs the worker, sends its result, then holds the
    removed directories open until the parent has done its final checks."""
    w = Worker(cfg, index)
    w.run()
    conn.send(w.result())
    try:
        conn.recv()
    except EOFError:
        pass


# --- setup, final checks, report -----------------------------------------------------
