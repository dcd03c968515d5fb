"""The randomized namespace checker (tests/nscheck.py) on three targets:
GrantFS (three mounts of one server), grantfs-passthrough (three mounts of
one source directory) and the local disk (one directory given three times).
A failure on GrantFS alone is GrantFS's; one on the local disk is the
checker's.

Each target runs two fixed seeds and one taken from the clock (printed, and
in the test id), so CI keeps exploring while a failure can always be
replayed: the failure message holds the command. GRANTFS_LONG=1 runs the
long mode (4 workers x 25,000 ops each; docs/testing.md).

Must run as root (/dev/fuse is root-only here). Every mount is unmounted and
every process stopped at teardown, also when a test fails.
"""

import os
import re
import time

import pytest

import nscheck
import treesnap
from kit.build import PASSTHROUGH_BIN
from kit.mount import force_unmount, start_fuse
from kit.processes import stop_process
from kit.topology import Standalone

LONG = os.environ.get("GRANTFS_LONG") == "1"
WORKERS = 4 if LONG else 3
# Ops per worker: the whole file takes about a minute on a 2-core machine.
# The passthrough waits out the 1 s bound at every switch of mount (racing in
# shared/ meanwhile), so it runs fewer; GrantFS, exact with metadata leases,
# switches at once.
OPS = {"local": 3000, "passthrough": 400, "grantfs": 2000}
if LONG:
    OPS = {k: 25000 for k in OPS}
TIME_SEED = int(time.time()) % 1_000_000
SEEDS = [pytest.param(1, id="seed=1"), pytest.param(2, id="seed=2"),
         pytest.param(TIME_SEED, id=f"seed={TIME_SEED}")]
TIMEOUT = 6 * 3600 if LONG else 300  # seconds one run may take before it counts as hung


def check(mounts, target, seed, **kwargs):
    """Runs the checker; fails the test with its report."""
    print(f"nscheck on {target}, seed {seed}")
    r = nscheck.run(mounts, workers=WORKERS, ops=OPS[target], seed=seed, timeout=TIMEOUT,
                    **kwargs)
    print(r.report())
    assert r.ok, r.report()
    return r


@pytest.fixture
def local_dir(tmp_base):
    d = os.path.join(tmp_base, "local")
    os.mkdir(d)
    return d


@pytest.fixture
def passthrough_mounts(tmp_base):
    """Three grantfs-passthrough mounts of one source directory."""
    src = os.path.join(tmp_base, "src")
    os.mkdir(src)
    started = []
    try:
        for i in range(3):
            path = os.path.join(tmp_base, f"pt{i + 1}")
            started.append((path, start_fuse([PASSTHROUGH_BIN, src, path, "-f"], path,
                                             path + ".log")))
        yield [path for path, _ in started]
    finally:
        for path, proc in started:
            force_unmount(path)
            stop_process(proc)


@pytest.fixture
def grantfs_mounts(tmp_base):
    """One server, three mounts standing for three nodes."""
    # Exact leases: no object falls back to the 1 s caches for being
    # recalled too often (workers switch nodes at every step).
    c = Standalone(tmp_base, nodes=3, server_extra=["--lease_hot_recalls=0"])
    try:
        c.start()
        yield [m.path for m in c.mounts]
    finally:
        c.stop()


@pytest.fixture
def grantfs_grants_mounts(tmp_base):
    """The same, the mounts with namespace grants on (issue 17): each
    worker's directories are made by one mount and granted to it, so the
    creates and removals in them are answered by the mount and sent as a
    log; the checker's switches between nodes recall the grants."""
    c = Standalone(tmp_base, nodes=3, server_extra=["--lease_hot_recalls=0"],
                   mount_extra=["--ns_grants=on"])
    try:
        c.start()
        yield c
    finally:
        c.stop()


def changes_made_locally(c):
    """Unmounts `c`'s mounts; returns what their logs say they made on their
    own (the line each writes at unmount)."""
    for m in c.mounts:
        m.unmount()
    total = 0
    for m in c.mounts:
        found = re.search(r"namespace grants: (\d+) changes made here.*", m.log())
        assert found, m.log()[-2000:]
        print(found.group(0))
        total += int(found.group(1))
    return total


@pytest.mark.parametrize("seed", SEEDS)
def test_local_disk(local_dir, seed):
    r = check([local_dir] * 3, "local", seed)
    assert not r.cfg["disabled"], r.cfg["disabled"]


@pytest.mark.parametrize("seed", SEEDS)
def test_passthrough(passthrough_mounts, seed):
    # The passthrough has no link, symlink or xattrs (left out, as the report
    # says), and its mounts are three processes over one source directory
    # that fall short where GrantFS must not: a create racing a change
    # through another mount can fail with EIO or ENOENT (its create and the
    # lookup after it are two steps), a mount answers ESTALE for an inode
    # its kernel still names but it has forgotten, and a listing can lag
    # for more than the 1 s timeouts. So here: no races in shared/
    # (shared=0), an ESTALE is retried and else stops that worker, and the
    # final checks may take 5 s to pass. The exact model and the switching
    # between mounts after the bound stay as on GrantFS.
    check(passthrough_mounts, "passthrough", seed, quirks={"estale"}, settle=5.0, shared=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_grantfs(grantfs_mounts, seed):
    # Strict: every worker's own subtree against its exact model, switching
    # between the three nodes at once (bound 0: with metadata leases a change
    # that returned is what every node sees). The racing area is in
    # test_grantfs_racing below.
    r = check(grantfs_mounts, "grantfs", seed, shared=0, bound=0.0)
    assert not r.cfg["disabled"], f"GrantFS lacks {r.cfg['disabled']}"


# The racing area shared/: every worker also races the others' changes
# through other mounts (renames, exchanges, removals, creates of one name);
# every errno must be one some order of the racing ops allows, and every
# node must list what the server holds once the bound has passed.
# Strict since the long runs of seeds 8, 11, 12 and 13 (4 workers x 25,000
# ops each, docs/testing.md) ran clean on 2026-11-27. Seed 8 had once ended
# with one node listing a live directory of shared/ as empty; it did not come
# back in those runs, and its cause was not identified: a failure here prints
# the command that replays it.
@pytest.mark.parametrize("seed", [pytest.param(TIME_SEED, id=f"seed={TIME_SEED}")])
def test_grantfs_racing(grantfs_mounts, seed):
    check(grantfs_mounts, "grantfs", seed, bound=0.0)


# Namespace grants on (issue 17): the same strict checks, the fixed seed 1
# and one from the clock; and the racing area.
@pytest.mark.parametrize("seed", [SEEDS[0], SEEDS[2]])
def test_grantfs_ns_grants(grantfs_grants_mounts, seed):
    c = grantfs_grants_mounts
    check([m.path for m in c.mounts], "grantfs", seed, shared=0, bound=0.0)
    local = changes_made_locally(c)
    print(f"{local} changes made locally by the mounts")
    assert local > 0


@pytest.mark.parametrize("seed", [pytest.param(TIME_SEED, id=f"seed={TIME_SEED}")])
def test_grantfs_ns_grants_racing(grantfs_grants_mounts, seed):
    c = grantfs_grants_mounts
    check([m.path for m in c.mounts], "grantfs", seed, bound=0.0)
    print(f"{changes_made_locally(c)} changes made locally by the mounts")


# Namespace grants where they do most: every worker stays on one node, so
# the directories it makes stay granted and its changes there are made by
# the mount (the runs above switch nodes at every few ops, which recalls
# the grants). Then another node walks the tree: every look recalls the
# grants (the holder applies its log first) and must find exactly what the
# holder showed, inode numbers, link counts and times included.
@pytest.mark.parametrize("seed", [SEEDS[0], SEEDS[2]])
def test_grantfs_ns_grants_one_node_then_another_looks(grantfs_grants_mounts, seed):
    c = grantfs_grants_mounts
    n1, n2 = c.mounts[0].path, c.mounts[1].path
    r = check([n1] * 3, "grantfs", seed, shared=0, keep=True)
    base = r.cfg["base"].decode()
    here = treesnap.snapshot(os.path.join(n1, base), exact=True)
    there = treesnap.snapshot(os.path.join(n2, base), exact=True)
    assert not treesnap.diff(here, there), treesnap.diff(here, there)[:20]
    local = changes_made_locally(c)
    print(f"{local} changes made locally by the mounts")
    assert local > 0
