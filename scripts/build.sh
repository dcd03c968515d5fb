#!/usr/bin/env bash
# Configures and builds GrantFS into ${BUILD_DIR:-build/} (Ninja, RelWithDebInfo).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# ccache: share hits between checkouts in different directories (CI clones
# afresh; with -g the directory would otherwise be part of every hash).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
JOBS=${JOBS:-2}  # a gRPC TU peaks near 400 MB; 2 cores here
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$BUILD_DIR" -j"$JOBS"
