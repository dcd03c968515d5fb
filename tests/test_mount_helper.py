"""mount(8) and /etc/fstab: the install step's mount.grantfs helper.

`cmake --install` puts the programs in PREFIX/bin and the link
/sbin/mount.grantfs -> PREFIX/bin/grantfs-mount, the program mount(8) runs
for `mount -t grantfs` and for fstab lines of type grantfs. A -o option that
names a grantfs-mount flag sets it (leases=off, tls_dir=..., log_file=...),
so an fstab line can say what a command line can; the others go to FUSE.
"""

import os
import shutil
import subprocess

import pytest

from kit.build import MOUNT, REPO, binary
from kit.keys import use_cluster_keys
from kit.mount import forget, is_mounted, track
from kit.server import Server
from kit.waits import wait_for

HELPER = "/sbin/mount.grantfs"


def install_dir():
    """A build directory cmake can install from: $GRANTFS_BUILD when it is
    one (not a copy of the binaries), else REPO/build."""
    for d in (os.environ.get("GRANTFS_BUILD"), os.path.join(REPO, "build")):
        if d and os.path.exists(os.path.join(d, "cmake_install.cmake")):
            return d
    pytest.fail("no configured build directory to install from")


@pytest.mark.parametrize("prefix", ["/usr/local", "/opt/grantfs"])
def test_cmake_install_puts_the_programs_and_the_mount_helper_in_place(tmp_base, prefix):
    dest = os.path.join(tmp_base, "root")
    r = subprocess.run(["cmake", "--install", install_dir(), "--prefix", prefix],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, DESTDIR=dest))
    assert r.returncode == 0, r.stdout + r.stderr
    for prog in ("grantfs-server", "grantfs-mount", "grantfsctl"):
        path = dest + os.path.join(prefix, "bin", prog)
        assert os.access(path, os.X_OK), f"{path} not installed: {r.stdout}"
    # Where mount(8) looks, whatever the prefix; pointing at the program
    # where it will be once the tree is copied to / (DESTDIR is packaging).
    link = os.path.join(dest, "sbin/mount.grantfs")
    assert os.readlink(link) == os.path.join(prefix, "bin/grantfs-mount"), r.stdout
    # The installed program runs (its usage, exit 2 without arguments).
    run = subprocess.run([dest + os.path.join(prefix, "bin/grantfs-mount")],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 2 and "usage" in run.stderr


@pytest.fixture
def helper():
    """/sbin/mount.grantfs -> this build's grantfs-mount for the test; what
    was there before is put back afterwards (also after a run that was
    killed: its saved copy is restored first)."""
    saved = HELPER + ".saved-by-test"
    if os.path.lexists(saved):  # a killed run's: the original
        os.replace(saved, HELPER)
    had = os.path.lexists(HELPER)
    if had:
        os.rename(HELPER, saved)
    try:
        os.symlink(os.path.abspath(binary(MOUNT)), HELPER)
        yield HELPER
    finally:
        if os.path.lexists(HELPER):
            os.unlink(HELPER)
        if had:
            os.rename(saved, HELPER)


@pytest.fixture
def server(tmp_base):
    s = Server(os.path.join(tmp_base, "data"), log_dir=tmp_base)
    s.start()
    yield s
    s.stop()


def mounted_type(path):
    """The file-system type of the mount at `path` (mountinfo), or None."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                return fields[fields.index("-") + 1]
    return None


def check_mount(path, log, leases):
    """The mount at `path` works and runs with `leases`; then umount(8)
    unmounts it and its daemon exits."""
    try:
        assert mounted_type(path) == "fuse.grantfs"
        with open(os.path.join(path, "hello"), "w") as f:
            f.write("through mount(8)\n")
        with open(os.path.join(path, "hello")) as f:
            assert f.read() == "through mount(8)\n"
        os.unlink(os.path.join(path, "hello"))
        with open(log) as f:
            assert f"metadata leases {leases}," in f.read()
    finally:
        r = subprocess.run(["umount", path], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True, timeout=60)
        forget(path)
    assert r.returncode == 0, r.stderr
    assert not is_mounted(path)
    wait_for(lambda: not daemons_of(path), timeout=30, what="the mount's daemon to exit")


def daemons_of(path):
    """Pids of processes whose command line names `path` (the mount's
    daemon: mount(8) ran it as /sbin/mount.grantfs SPEC PATH ...)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if os.fsencode(path) in argv and any(b"mount" in a for a in argv[:1]):
            found.append(int(pid))
    return found


def mount8(argv, path):
    """Runs mount(8); the mount it makes is unmounted (lazily) at exit if a
    test fails before it does."""
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if is_mounted(path):
        track(path)
    return r


def test_mount_t_grantfs_runs_the_helper_with_flags_as_options(tmp_base, helper, server):
    mnt = os.path.join(tmp_base, "mnt")
    log = os.path.join(tmp_base, "mount.log")
    os.mkdir(mnt)
    opts = f"leases=off,log_file={log},tls_dir={use_cluster_keys()},noatime"
    r = mount8(["mount", "-t", "grantfs", "-o", opts, f"{server.addr}:/", mnt], mnt)
    assert r.returncode == 0, r.stderr + (open(log).read() if os.path.exists(log) else "")
    assert daemons_of(mnt), "no daemon serves the mount"
    check_mount(mnt, log, "off")
    # mount -f (fake): everything but the mount.
    r = mount8(["mount", "-f", "-t", "grantfs", f"{server.addr}:/", mnt], mnt)
    assert r.returncode == 0, r.stderr
    assert not is_mounted(mnt) and not daemons_of(mnt)


def test_an_fstab_line_mounts_with_its_options(tmp_base, helper, server):
    mnt = os.path.join(tmp_base, "mnt")
    log = os.path.join(tmp_base, "mount.log")
    os.mkdir(mnt)
    fstab = os.path.join(tmp_base, "fstab")
    with open(fstab, "w") as f:
        f.write(f"# a test fstab\n{server.addr}:/ {mnt} grantfs "
                f"defaults,relatime,_netdev,noauto,noinsecure,log_file={log},"
                f"tls_dir={use_cluster_keys()} 0 0\n")
    r = mount8(["mount", "--fstab", fstab, mnt], mnt)
    assert r.returncode == 0, r.stderr + (open(log).read() if os.path.exists(log) else "")
    check_mount(mnt, log, "on")


@pytest.mark.parametrize("option,says", [
    ("rpc_timeout_ms=soon", "rpc_timeout_ms=soon"),
    ("tls_dir", "needs a value"),
    ("flagfile=/etc/passwd", "not an option of grantfs-mount"),
    ("foreground", "runs in the background"),
])
def test_an_option_it_cannot_take_is_refused_and_nothing_is_mounted(tmp_base, helper, server,
                                                                     option, says):
    mnt = os.path.join(tmp_base, "mnt")
    os.mkdir(mnt)
    r = mount8(["mount", "-t", "grantfs", "-o", option, f"{server.addr}:/", mnt], mnt)
    assert r.returncode != 0
    assert says in r.stderr, r.stderr
    assert not is_mounted(mnt)
    shutil.rmtree(mnt)


def test_a_mount_with_no_server_answering_fails_within_mount_wait(tmp_base):
    """--mount_wait_ms bounds how long mounting waits for a server (the node
    agent sets it below its own bound); the failure names what was tried."""
    from kit.ports import free_port
    mnt = os.path.join(tmp_base, "mnt-nowhere")
    os.makedirs(mnt)
    log = os.path.join(tmp_base, "nowhere.log")
    port = free_port()  # nothing listens there
    r = subprocess.run([binary(MOUNT), f"127.0.0.1:{port}:/", mnt, f"--log_file={log}",
                        f"--tls_dir={use_cluster_keys()}", "--mount_wait_ms=1500"],
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 1, r.stdout + r.stderr
    assert not is_mounted(mnt)
    with open(log) as f:
        text = f.read()
    assert "cannot mount / of 127.0.0.1:" in text and str(port) in text, text
    # A server that takes the connection and never answers: each attempt is
    # bounded too (not only by --rpc_timeout_ms, 30 s).
    import socket
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        r = subprocess.run([binary(MOUNT), f"127.0.0.1:{silent.getsockname()[1]}:/", mnt,
                            f"--log_file={log}", f"--tls_dir={use_cluster_keys()}",
                            "--mount_wait_ms=1500"],
                           capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    finally:
        silent.close()
    assert r.returncode == 1, r.stdout + r.stderr
    assert not is_mounted(mnt)
    bad = subprocess.run([binary(MOUNT), f"127.0.0.1:{port}:/", mnt, "--mount_wait_ms=-1",
                          f"--log_file={log}", f"--tls_dir={use_cluster_keys()}"],
                         capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert bad.returncode == 2, bad.stdout + bad.stderr


def test_a_background_mount_follows_its_log_when_it_is_moved_away(tmp_base, server):
    """The daemon keeps its log bounded itself (common/log_rotation.h): a log
    moved away (as logrotate does) is followed by name within its check
    period (10 s), and the mount's later lines go to the new file."""
    mnt = os.path.join(tmp_base, "mnt-log")
    os.makedirs(mnt)
    log = os.path.join(tmp_base, "rotated.log")
    r = subprocess.run([binary(MOUNT), f"{server.addr}:/", mnt, f"--log_file={log}",
                        f"--tls_dir={use_cluster_keys()}", "--log_max_mb=1"],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    track(mnt)
    try:
        os.rename(log, log + ".old")
        wait_for(lambda: os.path.exists(log), 30, "the daemon to open its log again")
        with open(log + ".old") as f:
            assert "mounted " in f.read()
    finally:
        subprocess.run(["umount", mnt], capture_output=True, timeout=60)
        forget(mnt)
    assert not is_mounted(mnt)
    wait_for(lambda: "unmounting " in open(log).read(), 30, "the daemon's last lines in the new log")
