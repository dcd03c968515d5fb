"""The cluster's keys for everything the kit starts.

Servers, mounts, grantfsctl and grantfs-bench run with TLS and certificates
(common/transport_flags.h) and find them through $GRANTFS_TLS_DIR. Once per
process, `use_cluster_keys` makes a fresh set with `grantfsctl init` in a
temporary directory (removed at exit) and points $GRANTFS_TLS_DIR at it, so
every child process inherits it. A directory already named by
$GRANTFS_TLS_DIR is used as it is.
"""

import atexit
import os
import shutil
import subprocess
import tempfile

from kit.build import CTL, binary


def use_cluster_keys(build=None, extra_nodes=()):
    """Returns the keys directory (made on first use)."""
    d = os.environ.get("GRANTFS_TLS_DIR")
    if d:
        return d
    d = tempfile.mkdtemp(prefix="grantfs-keys-")
    # The tests run as root on the mounts: the node certificate keeps root
    # (no root squash); tests of squashing make their own.
    args = [binary(CTL, build), "init", f"--tls_dir={d}", "--node_options=root"]
    if extra_nodes:
        args.append("--nodes=" + ",".join(extra_nodes))
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        shutil.rmtree(d, ignore_errors=True)
        raise RuntimeError(f"grantfsctl init failed ({r.returncode}): {r.stdout}{r.stderr}")
    os.environ["GRANTFS_TLS_DIR"] = d
    atexit.register(shutil.rmtree, d, True)
    return d
