#!/usr/bin/env bash
# Configures and builds GrantFS into ${BUILD_DIR:-build/} (Ninja, RelWithDebInfo).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}  # a gRPC TU peaks near 400 MB; 2 cores here
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$BUILD_DIR" -j"$JOBS"
