"""The offline check of a stopped server's data directory
(`grantfsctl fsck --data_dir=DIR`), as every drill ends."""

import subprocess

from kit.build import CTL_BIN


def offline_fsck(data_dir, *flags):
    """Runs the check; returns the CompletedProcess (text output)."""
    return subprocess.run([CTL_BIN, "fsck", f"--data_dir={data_dir}", *flags],
                          capture_output=True, text=True, timeout=300)


def assert_offline_fsck_clean(data_dir):
    """Exit 0 and no problem."""
    r = offline_fsck(data_dir)
    assert r.returncode == 0, r.stdout + r.stderr
