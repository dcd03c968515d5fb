"""fsx (tests/fsx.py): random file-data operations checked byte for byte
against a model, on GrantFS (with namespace grants off and on), on the FUSE
passthrough and on the local disk.

The same checker runs on all three targets, so a failure on GrantFS can be
told from a checker bug or a kernel/FUSE limitation: if the passthrough and
the local disk pass the same seed and mode, the bug is GrantFS's.

Each (target, mode) runs a fixed seed and then one seed taken from the time,
so coverage grows from run to run; the seeds are printed (pytest shows them
with a failure, or with -rP) and every failure report names its seed.
FSX_SEED=S replaces the time seed (to rerun one), FSX_OPS=N the op count.
GRANTFS_LONG=1 runs 100,000 ops per seed instead (docs/testing.md).

On a failure the report shows the last ops, the first bad byte and the op
that last set it; the whole op log stays in /tmp (fsx-TARGET-MODE-SEED.log)
for `tests/fsx.py --replay` on a fresh mount. Every mount is unmounted and
every process stopped at teardown, also when the check fails.
"""

import contextlib
import os
import subprocess
import tempfile
import time

import pytest

import fsx
from kit.build import PASSTHROUGH_BIN
from kit.mount import force_unmount, start_fuse
from kit.processes import stop_process, tail_log
from kit.topology import Standalone


LONG = os.environ.get("GRANTFS_LONG") == "1"
FIXED_SEED = 1
TIME_SEED = int(os.environ.get("FSX_SEED") or time.time())
# Ops per seed. GrantFS gets the most (it is what is tested; ~1-3 ms an op
# here); the references only need enough to show that the checker is right.
OPS = {"grantfs": 2500, "grantfs_grants": 2500, "passthrough": 1500, "local": 1500}


def ops_for(target):
    if os.environ.get("FSX_OPS"):
        return int(os.environ["FSX_OPS"])
    return 100_000 if LONG else OPS[target]


# --- targets: each yields the directories to run in and a function giving the
# logs worth showing with a failure ---------------------------------------------------


@contextlib.contextmanager
def grantfs_target(base, mode):
    """A real grantfs-server and real grantfs-mount(s): two for twomounts,
    the write cache off (--write_mode=writethrough) for nocache."""
    extra = ["--write_mode=writethrough"] if mode == "nocache" else []
    c = Standalone(base, nodes=2 if mode == "twomounts" else 1, mount_extra=extra)
    try:
        c.start()
        yield ([m.path for m in c.mounts],
               lambda: "".join(f"\n--- {m.log_path} (tail)\n{m.log()}" for m in c.mounts))
    finally:
        c.stop()


@contextlib.contextmanager
def grantfs_grants_target(base, mode):
    """As grantfs, with namespace grants on (--ns_grants=on) and fsx's file
    in a directory the first mount made (granted to it): its create, opens,
    closes (which do not wait for the data), stats, and reads of bytes still
    cached are the mount's own (docs/namespace-grants.md); a truncate or
    fallocate hands the file back to the server. With twomounts, the second
    mount's first look recalls the grant."""
    extra = ["--ns_grants=on"] + (["--write_mode=writethrough"] if mode == "nocache" else [])
    c = Standalone(base, nodes=2 if mode == "twomounts" else 1, mount_extra=extra)
    try:
        c.start()
        dirs = [os.path.join(m.path, "granted") for m in c.mounts]
        os.mkdir(dirs[0])
        yield (dirs,
               lambda: "".join(f"\n--- {m.log_path} (tail)\n{m.log()}" for m in c.mounts))
    finally:
        c.stop()


@contextlib.contextmanager
def passthrough_target(base, mode):
    """grantfs-passthrough of a local directory; for twomounts, two of them
    over the same directory."""
    src = os.path.join(base, "src")
    os.makedirs(src)
    # FUSE itself has no close-to-open: the kernel does not fetch attributes
    # on open, so within --timeout (1 s) an open through the second mount
    # still sees the size it cached earlier (a checker run fails in a few
    # switches). GrantFS marks them stale in its open handler; the
    # passthrough, our reference, gets the same effect from a zero timeout.
    timeout = ["--timeout=0"] if mode == "twomounts" else []
    paths, procs = [], []
    try:
        for i in range(2 if mode == "twomounts" else 1):
            path = os.path.join(base, f"mnt{i + 1}")
            procs.append(start_fuse([PASSTHROUGH_BIN, *timeout, src, path, "-f"], path,
                                    path + ".log"))
            paths.append(path)
        yield paths, lambda: "".join(f"\n--- {p}.log (tail)\n{tail_log(p + '.log')}"
                                     for p in paths)
    finally:
        for path in paths:
            force_unmount(path)
        for proc in procs:
            stop_process(proc)


@contextlib.contextmanager
def local_target(base, mode):
    """A directory on the local disk; for twomounts, a bind mount of it as the
    second path (one file, one page cache: the behaviour two mounts of a
    coherent file system must match)."""
    d = os.path.join(base, "local")
    os.makedirs(d)
    if mode != "twomounts":
        yield [d], lambda: ""
        return
    d2 = os.path.join(base, "local2")
    os.makedirs(d2)
    subprocess.run(["mount", "--bind", d, d2], check=True, timeout=30)
    try:
        yield [d, d2], lambda: ""
    finally:
        subprocess.run(["umount", "-l", d2], capture_output=True, timeout=30)


TARGETS = {"grantfs": grantfs_target, "grantfs_grants": grantfs_grants_target,
           "passthrough": passthrough_target, "local": local_target}
# nocache is a GrantFS mount option; on the other targets it would repeat plain.
CASES = [(t, m) for t in TARGETS for m in fsx.MODES
         if m != "nocache" or t.startswith("grantfs")]


@pytest.mark.parametrize("target,mode", CASES, ids=[f"{t}-{m}" for t, m in CASES])
def test_fsx(tmp_base, target, mode):
    seeds = [TIME_SEED] if LONG else [FIXED_SEED, TIME_SEED]
    ops = ops_for(target)
    failure = None
    with TARGETS[target](tmp_base, mode) as (dirs, logs):
        for seed in seeds:
            log_path = os.path.join(tempfile.gettempdir(), f"fsx-{target}-{mode}-{seed}.log")
            print(f"fsx {target} {mode}: seed {seed}, {ops} ops")
            try:
                fsx.run(dirs[0], mode, ops, seed, dir2=dirs[1] if len(dirs) > 1 else None,
                        name=f"fsx-{seed}", log_path=log_path)
            except fsx.CheckFailed as e:
                failure = (f"{e.report}\n(that target is torn down: replay the log on a new "
                           f"{target} target, e.g. python3 tests/fsx.py --dir MNT [--dir2 MNT2] "
                           f"--file fsx-{seed} --replay {e.log_path})\n{logs()}")
                break
    if failure:
        pytest.fail(failure, pytrace=False)
