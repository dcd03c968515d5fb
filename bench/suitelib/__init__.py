"""The pieces of the benchmark suite (bench/suite.py): modes, statistics,
processes and mounts, report writing, and the sections themselves.

Servers, mounts, topologies and waits are the test kit's (tests/kit/): this
is the one place that puts tests/ on sys.path for bench/."""

import os
import sys

_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "tests")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
