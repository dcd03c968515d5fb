#!/usr/bin/env bash
# The benchmark suite (bench/suite.py), as root: bench/run.sh [--quick|--smoke] [--build DIR]
# [--out DIR] [--workdir DIR] [--sections 1,2,...]. Writes docs/benchmarks.md by default.
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 bench/suite.py "$@"
