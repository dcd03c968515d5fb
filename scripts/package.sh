#!/usr/bin/env bash
# Builds the Debian package of GrantFS (the programs, /sbin/mount.grantfs,
# the systemd units grantfs-server@.service and grantfs-node.service, the docs) from a build made by
# scripts/build.sh: `scripts/package.sh [OUT_DIR]` (default build/package).
# Install it with `apt-get install ./build/package/grantfs_*.deb` (it names
# its Debian dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT=${1:-$BUILD_DIR/package}
[ -f "$BUILD_DIR/CPackConfig.cmake" ] || scripts/build.sh
cmake --build "$BUILD_DIR" --target grantfs-server grantfs-mount grantfsctl grantfs-node
cpack --config "$BUILD_DIR/CPackConfig.cmake" -B "$OUT" >/dev/null
ls "$OUT"/grantfs_*.deb
