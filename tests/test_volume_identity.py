"""Whose data (issue 21, item 5): a server restarted with its data disk not
mounted (an empty mount point, or no data directory at all), or on another
volume's data, never becomes primary and never costs the replica its copy.

Real servers and mounts: a witness, a primary and a replica (tests/kit/topology.py)
on loopback. To make sure the restarted server asks the witness while it still
names it primary, the replica is paused (SIGSTOP) from the kill until the
restarted server has had its answer; then it takes over as in a failover.
Runs as root; about a minute on 2 cores. A failing test keeps the logs in
/tmp/grantfs-failover-logs/<test>-<time>/.
"""

import os
import shutil
import signal
import subprocess
import time

import pytest

from kit.build import SERVER_BIN
from kit.ports import free_port
from kit.server import role_support
from kit.topology import Standalone, Trio
from kit.waits import wait_for

MiB = 1 << 20
MISSING = "does not exist: refusing to start (is the data disk mounted?)"
REFUSED_ROLE = "the witness refused the primary role to this server's data"


@pytest.fixture(scope="module", autouse=True)
def replication_available(tmp_path_factory):
    ok, said = role_support(SERVER_BIN, str(tmp_path_factory.mktemp("witness-probe")))
    if not ok:
        pytest.skip(f"grantfs-server has no replication yet: --role=witness -> {said}")


@pytest.fixture
def trio(tmp_base, request):
    """Witness + primary A + replica B, A in sync; node1 mounts A,B."""
    t = Trio(tmp_base)
    try:
        t.start()
        t.n1 = t.mount("node1")
        yield t
    finally:
        for n in t.nodes.values():  # never leave a server stopped
            if n.alive():
                n.proc.send_signal(signal.SIGCONT)
        t.stop()
        rep = getattr(request.node, "rep_call", None)
        if rep is None or rep.failed:
            t.keep_logs(request.node.name)


# --- helpers ---------------------------------------------------------------------------


def write_files(root, n=4):
    """n files of 1 MiB and a directory under root, each fsync'd: {relpath: bytes}."""
    files = {}
    os.mkdir(os.path.join(root, "d"))
    for i in range(n):
        rel = os.path.join("d", f"f{i}")
        data = os.urandom(MiB)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
            os.fsync(f.fileno())
        files[rel] = data
    return files


def check_files(root, files):
    for rel, data in files.items():
        with open(os.path.join(root, rel), "rb") as f:
            assert f.read() == data, f"{rel} differs through {root}"


class LogFrom:
    """A server log from the current end on (what a restart writes)."""

    def __init__(self, node):
        self.path = node.log_path
        self.offset = os.path.getsize(self.path)

    def text(self):
        with open(self.path, errors="replace") as f:
            f.seek(self.offset)
            return f.read()

    def wait(self, needle, timeout=30):
        wait_for(lambda: needle in self.text(), timeout, f"{needle!r} in {self.path}")


def pause(node):
    node.note("SIGSTOP (the replica must not take over before the restarted server asked)")
    node.proc.send_signal(signal.SIGSTOP)


def resume(node):
    node.note("SIGCONT")
    node.proc.send_signal(signal.SIGCONT)


def take_over(t, victim, heir, epoch, restart):
    """kill -9 of the primary `victim` with `heir` paused; restart() (the
    victim on its changed data) runs, then the heir resumes and must become
    primary at the next epoch."""
    pause(t[heir])
    try:
        t.kill9(victim)
        restart()
    finally:
        resume(t[heir])
    new = t.wait_role(heir, "primary", 60)
    assert new["epoch"] == epoch + 1, f"{heir} primary at epoch {new['epoch']}, was {epoch}"
    return new


def fresh_mount(t, name):
    time.sleep(1.5)  # attribute and entry caches lapse
    return t.mount(name)


# --- a. an empty data directory -------------------------------------------------------------


def test_primary_restarted_on_an_empty_data_dir_runs_as_replica_and_the_data_survives(trio):
    t = trio
    files = write_files(t.n1)
    victim, st = t.primary()
    heir = t.other(victim)
    volume = st["volume_id"]
    assert len(volume) == 32, st
    assert t.status(heir)["volume_id"] == volume

    log = LogFrom(t[victim])

    def restart_empty():
        # The data disk was not mounted at boot: its mount point is empty.
        shutil.rmtree(t.data_dirs[victim])
        os.mkdir(t.data_dirs[victim])
        t[victim].note("data directory emptied (data disk not mounted); restarting")
        t.restart(victim)
        log.wait(REFUSED_ROLE)

    take_over(t, victim, heir, st["epoch"], restart_empty)
    text = log.text()
    assert "has no data (its data directory is empty)" in text, text[-3000:]
    assert "grantfs-server: primary" not in text, "the empty server served as primary"

    # It gets the volume from the new primary, as a replica.
    t.wait_in_sync(heir, victim, 120)
    got = t.status(victim)
    assert got["role"] == "replica"
    assert got["volume_id"] == volume
    assert t.status(heir)["volume_id"] == volume
    check_files(t.n1, files)
    check_files(fresh_mount(t, "node2"), files)
    assert "grantfs-server: primary" not in log.text()


# --- b. no data directory -------------------------------------------------------------------


@pytest.mark.parametrize("role", ["standalone", "primary", "replica"])
def test_a_missing_data_dir_is_refused_with_exit_1(tmp_base, role):
    data = os.path.join(tmp_base, "not-mounted", "data")
    argv = [SERVER_BIN, f"--data_dir={data}", f"--listen=127.0.0.1:{free_port()}"]
    if role != "standalone":
        # Nobody listens there: the data directory is looked at first.
        argv += [f"--role={role}", f"--peer=127.0.0.1:{free_port()}",
                 f"--witness=127.0.0.1:{free_port()}"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert f"data directory {data} {MISSING}" in r.stderr, r.stderr[-2000:]
    assert not os.path.exists(os.path.dirname(data))


def test_primary_restarted_without_its_data_dir_exits_and_the_replica_takes_over(trio):
    t = trio
    files = write_files(t.n1)
    victim, st = t.primary()
    heir = t.other(victim)
    log = LogFrom(t[victim])

    def restart_missing():
        shutil.rmtree(t.data_dirs[victim])
        t[victim].make_data_dir = False
        t[victim].note("data directory removed (data disk not mounted, no mount point)")
        t.restart(victim)
        rc = t[victim].proc.wait(timeout=30)
        t[victim].expected_down = True
        assert rc == 1, f"exit {rc}: {log.text()[-2000:]}"

    take_over(t, victim, heir, st["epoch"], restart_missing)
    assert MISSING in log.text()
    assert not os.path.exists(t.data_dirs[victim])
    check_files(t.n1, files)

    # The disk is back (here: an empty directory again): it rejoins.
    os.mkdir(t.data_dirs[victim])
    t[victim].make_data_dir = True
    t.restart(victim)
    t.wait_in_sync(heir, victim, 120)


# --- c. another volume's data directory --------------------------------------------------------


def test_a_server_on_another_volumes_data_is_refused_and_that_data_kept(trio, tmp_base):
    t = trio
    files = write_files(t.n1)
    victim, st = t.primary()
    heir = t.other(victim)
    volume = st["volume_id"]

    # Another volume: a standalone server's, with a file of its own.
    other_base = os.path.join(tmp_base, "other")
    os.mkdir(other_base)
    other = Standalone(other_base, nodes=1, capacity="1G").start()
    try:
        with open(os.path.join(other.n1, "theirs"), "w") as f:
            f.write("another volume's file")
        other_volume = other.server.ctl("status").split("volume:")[1].split()[0]
    finally:
        other.stop()
    assert other_volume != volume

    log = LogFrom(t[victim])

    def restart_on_other():
        # The wrong disk mounted at the primary's data directory.
        shutil.rmtree(t.data_dirs[victim])
        os.rename(other.server.data_dir, t.data_dirs[victim])
        t[victim].note(f"data directory replaced by volume {other_volume}'s; restarting")
        t.restart(victim)
        log.wait(REFUSED_ROLE)

    take_over(t, victim, heir, st["epoch"], restart_on_other)
    assert f"holds volume {other_volume}, not volume {volume}" in log.text()
    # The new primary's stream is refused too: the other volume stays.
    log.wait(f"the primary serves volume {volume} but this copy is of volume {other_volume}")
    got = t.status(victim)
    assert got["role"] == "replica" and got["volume_id"] == other_volume, got
    assert t.status(heir)["replica_state"] != "in sync"
    check_files(t.n1, files)
    check_files(fresh_mount(t, "node2"), files)
    assert "grantfs-server: primary" not in log.text()

    # Its own data is intact: served alone, it is the other volume still.
    t.kill9(victim)
    alone = Standalone(other_base, nodes=1, capacity="1G", data_dir=t.data_dirs[victim]).start()
    try:
        with open(os.path.join(alone.n1, "theirs")) as f:
            assert f.read() == "another volume's file"
        assert not os.path.exists(os.path.join(alone.n1, "d"))
    finally:
        alone.stop()
