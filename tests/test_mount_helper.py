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
from kit.mount import forget, is_mounted
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


def test_cmake_install_puts_the_programs_and_the_mount_helper_in_place(tmp_base):
    dest = os.path.join(tmp_base, "root")
    r = subprocess.run(["cmake", "--install", install_dir()], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, DESTDIR=dest))
    assert r.returncode == 0, r.stdout + r.stderr
    for prog in ("grantfs-server", "grantfs-mount", "grantfsctl"):
        path = os.path.join(dest, "usr/local/bin", prog)
        assert os.access(path, os.X_OK), f"{path} not installed: {r.stdout}"
    link = os.path.join(dest, "sbin/mount.grantfs")
    assert os.readlink(link) == "/usr/local/bin/grantfs-mount", r.stdout
    # The installed program runs (its usage, exit 2 without arguments).
    run = subprocess.run([os.path.join(dest, "usr/local/bin/grantfs-mount")],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 2 and "usage" in run.stderr


@pytest.fixture
def helper():
    """/sbin/mount.grantfs -> this build's grantfs-mount for the test (what
    was there before is put back afterwards)."""
    saved = HELPER + ".saved-by-test"
    had = os.path.lexists(HELPER)
    if had:
        os.rename(HELPER, saved)
    os.symlink(os.path.abspath(binary(MOUNT)), HELPER)
    try:
        yield HELPER
    finally:
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
        forget(path)
    assert r.returncode == 0, r.stderr
    assert not is_mounted(path)

    def daemon_gone():
        ps = subprocess.run(["pgrep", "-f", f"grantfs-mount .* {path}"], capture_output=True)
        return ps.returncode == 1

    wait_for(daemon_gone, timeout=30, what="grantfs-mount to exit after umount")


def test_mount_t_grantfs_runs_the_helper_with_flags_as_options(tmp_base, helper, server):
    mnt = os.path.join(tmp_base, "mnt")
    log = os.path.join(tmp_base, "mount.log")
    os.mkdir(mnt)
    opts = f"leases=off,log_file={log},tls_dir={use_cluster_keys()},noatime"
    r = subprocess.run(["mount", "-t", "grantfs", "-o", opts, f"{server.addr}:/", mnt],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr + (open(log).read() if os.path.exists(log) else "")
    check_mount(mnt, log, "off")


def test_an_fstab_line_mounts_with_its_options(tmp_base, helper, server):
    mnt = os.path.join(tmp_base, "mnt")
    log = os.path.join(tmp_base, "mount.log")
    os.mkdir(mnt)
    fstab = os.path.join(tmp_base, "fstab")
    with open(fstab, "w") as f:
        f.write(f"# a test fstab\n{server.addr}:/ {mnt} grantfs "
                f"_netdev,noauto,log_file={log},tls_dir={use_cluster_keys()} 0 0\n")
    r = subprocess.run(["mount", "--fstab", fstab, mnt], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr + (open(log).read() if os.path.exists(log) else "")
    check_mount(mnt, log, "on")


def test_a_bad_option_value_is_refused_and_nothing_is_mounted(tmp_base, helper, server):
    mnt = os.path.join(tmp_base, "mnt")
    os.mkdir(mnt)
    r = subprocess.run(["mount", "-t", "grantfs", "-o", "rpc_timeout_ms=soon",
                        f"{server.addr}:/", mnt], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "rpc_timeout_ms=soon" in r.stderr
    assert not is_mounted(mnt)
    shutil.rmtree(mnt)
