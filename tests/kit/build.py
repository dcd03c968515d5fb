"""Where the binaries are: $GRANTFS_BUILD, or REPO/build.

Every class of the kit that starts a binary takes `build=` (a build
directory) and defaults to BUILD; the bench passes its --build.
"""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("GRANTFS_BUILD", os.path.join(REPO, "build"))

# Paths inside a build directory.
SERVER = "server/grantfs-server"
MOUNT = "client/grantfs-mount"
CTL = "client/grantfsctl"
NODE_AGENT = "client/grantfs-node"
PASSTHROUGH = "bench/grantfs-passthrough"
PROXY = "bench/grantfs-latency-proxy"


def binary(rel, build=None):
    """The path of `rel` (SERVER, MOUNT, ...) in `build` (default BUILD)."""
    return os.path.join(build or BUILD, rel)


SERVER_BIN = binary(SERVER)
MOUNT_BIN = binary(MOUNT)
CTL_BIN = binary(CTL)
NODE_AGENT_BIN = binary(NODE_AGENT)
PASSTHROUGH_BIN = binary(PASSTHROUGH)
PROXY_BIN = binary(PROXY)
