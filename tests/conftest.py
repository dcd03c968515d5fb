"""pytest fixtures for the end-to-end tests; the harness itself is the
test kit (tests/kit/: servers, mounts, topologies, waits), shared with bench/.

Every test that takes the `cluster` fixture gets a fresh standalone server
(own data directory, own loopback port) and two mounts standing for two
nodes, `cluster.n1` and `cluster.n2`. Everything is torn down after the test,
also when it fails; mounts left by a crashed run are lazily unmounted at exit.
Every process runs with TLS and certificates made once per run
(tests/kit/keys.py). Must run as root (/dev/fuse is root-only here).
"""

import os
import shutil
import tempfile

import pytest

from kit.keys import use_cluster_keys
from kit.mount import cleanup_mounts_under
from kit.topology import running_standalone


def pytest_configure(config):
    # Every server, mount and grantfsctl the tests start runs with TLS and
    # the certificates made here (tests/kit/keys.py).
    use_cluster_keys()
    # ... and aborts on a lock-order cycle among its mutexes, which the
    # daemons do not look for by default (common/mutex_checks.h).
    os.environ.setdefault("GRANTFS_MUTEX_CHECK", "1")


@pytest.fixture
def tmp_base():
    base = tempfile.mkdtemp(prefix="grantfs-e2e-")
    os.chmod(base, 0o755)  # other users must reach the mounts inside
    yield base
    cleanup_mounts_under(base)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def cluster(tmp_base):
    yield from running_standalone(tmp_base)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the test item (item.rep_setup,
    item.rep_call), so a fixture's teardown can tell whether the test failed
    (and, say, keep the server logs)."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
