#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds, checks the locking
# annotations with clang, runs the unit tests (ctest), the fuzz targets for a
# bounded time (scripts/fuzz.sh: FUZZ_SECONDS per target, build-fuzz/) and the
# end-to-end tests (pytest, real server and FUSE mounts; as root).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "test.sh: run as root (FUSE mounts)"; exit 1; }
scripts/install-deps.sh
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
echo "== thread-safety analysis"
BUILD_DIR="$BUILD_DIR" scripts/check-thread-safety.sh
echo "== unit tests"
(cd "$BUILD_DIR" && ctest --output-on-failure -j2 --timeout 300)
echo "== fuzz targets, ${FUZZ_SECONDS:=45} s each (docs/testing.md, \"Fuzzing\")"
scripts/fuzz.sh "$FUZZ_SECONDS"
echo "== end-to-end tests"
GRANTFS_BUILD="$PWD/$BUILD_DIR" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests "$@"
