"""The crash checker of namespace grants (tests/nscrash.py): nscheck's exact
model of a subtree, driven through mounts with --ns_grants=on while

- the primary of a trio is killed with -9 at random moments (the mounts
  live on: no operation may fail or differ from the model, and at the end
  every mount and a fresh one show exactly the model; the last primary's
  data directory checks clean offline);
- a mount with grants is killed with -9 at random moments after a durable
  point (fsync of the directories, or of every file and directory) and
  0..N more operations: another mount must show the model after a prefix
  of those operations (file contents: see nscrash's docstring); the next
  round goes on from there with the mount started again.

Each scenario runs fixed seeds and one from the clock (printed, and in the
test id); NSCRASH_SEED=S replaces the clock's. GRANTFS_LONG=1 runs the long
mode (more kills, rounds and operations). A failure prints the operations,
what was expected and found, and the command that replays the seed
(docs/testing.md, "nscrash").

Must run as root (/dev/fuse is root-only here). The servers and mounts are
stopped in every case; a watchdog kills the mounts of a run that hangs.
"""

import os
import time

import pytest

import nscrash

LONG = os.environ.get("GRANTFS_LONG") == "1"
TIME_SEED = int(os.environ.get("NSCRASH_SEED", int(time.time()) % 1_000_000))

# Trio: kills of the primary, and at most this many ops per worker (the
# workers stop once every kill is done and they made AFTER_OPS more).
KILLS = 40 if LONG else 3
TRIO_OPS = 100_000 if LONG else 5000
AFTER_OPS = 1000 if LONG else 200
# Mount kills: rounds (one kill each), and at most this many ops between two
# durable points and after the last one.
ROUNDS = 40 if LONG else 4
ROUND_OPS = 60 if LONG else 40
TIMEOUT = 3600 if LONG else 300  # seconds before the watchdog ends a run as hung


def check(r):
    print(r.report())
    assert r.ok, r.report()


@pytest.mark.parametrize("seed,workers", [
    pytest.param(1, 1, id="seed=1-one_mount"),
    pytest.param(TIME_SEED, 2, id=f"seed={TIME_SEED}-two_mounts"),
])
def test_kill9_of_the_primary_loses_nothing_and_applies_nothing_twice(tmp_base, seed, workers):
    check(nscrash.trio_primary_kills(tmp_base, seed, workers=workers, kills=KILLS,
                                     max_ops=TRIO_OPS, after_ops=AFTER_OPS, timeout=TIMEOUT))


@pytest.mark.parametrize("seed,m2_grants", [
    pytest.param(1, False, id="seed=1"),
    pytest.param(2, True, id="seed=2-mount2_with_grants"),
    pytest.param(TIME_SEED, TIME_SEED % 2 == 1, id=f"seed={TIME_SEED}"),
])
def test_kill9_of_a_mount_leaves_a_prefix_of_what_it_did(tmp_base, seed, m2_grants):
    check(nscrash.mount_kills(tmp_base, seed, rounds=ROUNDS, max_ops=ROUND_OPS,
                              m2_grants=m2_grants, timeout=TIMEOUT))
