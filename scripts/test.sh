#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds, checks the locking
# annotations with clang, runs the unit tests (ctest), the fuzz targets for a
# bounded time (scripts/fuzz.sh: FUZZ_SECONDS per target, build-fuzz/) and the
# end-to-end tests (pytest, real server and FUSE mounts; as root).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "test.sh: run as root (FUSE mounts)"; exit 1; }
scripts/install-deps.sh
# The clean Debian 12 root the package test boots (tests/kit/debroot.py):
# made while the build runs, as it mostly waits on the mirror.
(cd tests && /usr/bin/python3 -c 'from kit.debroot import pristine_root; pristine_root()') \
  > /tmp/grantfs-debian12-root.log 2>&1 &
debroot=$!
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
echo "== thread-safety analysis"
BUILD_DIR="$BUILD_DIR" scripts/check-thread-safety.sh
echo "== unit tests"
(cd "$BUILD_DIR" && ctest --output-on-failure -j2 --timeout 300)
echo "== fuzz targets, ${FUZZ_SECONDS:=30} s each (docs/testing.md, \"Fuzzing\")"
scripts/fuzz.sh "$FUZZ_SECONDS"
echo "== end-to-end tests"
wait "$debroot" || echo "test.sh: preparing the Debian root failed (the package test retries): $(tail -3 /tmp/grantfs-debian12-root.log)"
GRANTFS_BUILD="$PWD/$BUILD_DIR" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests "$@"
