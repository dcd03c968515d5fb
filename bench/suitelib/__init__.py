"""The pieces of the benchmark suite (bench/suite.py): modes, statistics,
processes and mounts, report writing, and the sections themselves."""
