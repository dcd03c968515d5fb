"""Sizes and repetitions of each mode.

full: the report's numbers (2 GiB files, 10,000 files, 30 s of dbench,
      3 runs of everything); about 25 minutes on an idle 2-core machine
      (estimated from quick-mode step times: sections 1-2 2 min, 3 3 min,
      4 4 min, 5 9 min of which dbench 6, 6 1 min, 7 3 min; 8 measured alone:
      142 s in full mode, 16 s in quick, 10 s in smoke).
      The latency sweep writes 1 GiB per dd, not section 1's 2 GiB: writethrough
      at 5 ms runs at ~37 MB/s, and 2 GiB there (3 runs, 3 delays, 2 modes) would
      add ~5 minutes and bring the full run to the 30-minute limit.
      Section 5's lease measurements (the leases-off meta column, tree walks
      over 20,000 files, 2,000 ping-pong rounds) add an estimated 8-10 minutes
      (extrapolated from quick mode on a loaded machine: making the tree
      through GrantFS ~100 s, each GrantFS ls -lR 10-15 s, a ping-pong run
      ~20 s, a leases-off meta run ~1 min); not yet measured in full mode.
      Section 10 (TLS on and off: 1 GiB dd and 2,000 creates on each, 3 runs)
      took 67 s in full mode.
      The namespace-grants targets (issue 17) add an estimated 15-20 minutes,
      not yet measured in full mode: section 3's 5,000 small files at 0, 1
      and 5 ms (~5 min: reads of files whose data has gone are a call each,
      ~70/s at 5 ms in quick mode), section 4's builds on one more mount
      (~2 min), section 5's tree work (tar x and rm -rf of 20,000 files and
      a git clone of 3,000 on four targets, 3 runs: ~11 min, most of it
      the GrantFS mount without grants, extrapolated from quick mode).
quick: the same sections, small sizes; about 5 minutes (section 5 took 128 s at
       load 3-4 on 2 cores, ~75 s of it the lease measurements; 215 s at load 5-6
       with the tree work, ~50 s of it).
smoke: the smallest run that still exercises every section (the e2e test).
"""

MODES = {
    "full": dict(
        runs=3,
        dd_mib=2048,            # 1-2: mkfile and dd, 512 KiB writes
        sweep_mib=1024,         # 3: dd through the latency proxy (not 2 GiB: see below)
        sweep_delays_ms=(0, 1, 5),
        small_files=60,         # 3: small-file workload, 4 KiB each
        small_kib=4,
        sweep_ns_files=5000,    # 3: the same with namespace grants (past the log's 4,096)
        build_files=200,        # 4: generated C tree
        build_jobs=(1, 4, 24),
        meta_files=10000,       # 5
        tree_files=20000,       # 5: find and ls -lR over a tree of this many files
        pingpong_rounds=2000,   # 5: two nodes alternating in one directory
        lease_runs=3,           # 5: runs of the tree walks and the ping-pong
        tar_files=20000,        # 5: tar x and rm -rf of a tree of this many small files
        git_files=3000,         # 5: git clone of a local repository of this many files
        git_commits=20,         #    made in this many commits
        dbench_secs=30,
        dbench_clients=4,
        rpc_secs=1.0,           # 6: seconds per payload size and mode
        rpc_callers=8,
        load_threads=(1, 4, 16, 64),  # 7
        load_rates=(1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000),
        load_secs=1.5,
        change_rates=(500, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000),  # 7: setattr
        drill_runs=3,           # 8: failover drills (kill -9 of the primary)
        drill_mib=1024,         # 8: MiB written per drill
        drill_cost_mib=512,     # 8: write + fsync, replica in sync vs standalone
        drill_creates=2000,     # 8: creates, the same comparison
        gc_ops=2000,            # 9: mkdirs per point
        gc_callers=(1, 4, 16),  # 9: concurrent callers
        tls_dd_mib=1024,        # 10: dd with TLS on and off
        tls_creates=2000,       # 10: creates with TLS on and off
        capacity="16G",
    ),
    "quick": dict(
        runs=1,
        dd_mib=256,
        sweep_mib=64,
        sweep_delays_ms=(0, 1, 5),
        small_files=30,
        small_kib=4,
        sweep_ns_files=1000,
        build_files=40,
        build_jobs=(1, 4, 24),
        meta_files=1000,
        tree_files=2000,
        pingpong_rounds=300,
        lease_runs=3,           # cheap at these sizes: a median with min and max even here
        tar_files=2000,
        git_files=500,
        git_commits=5,
        dbench_secs=8,
        dbench_clients=4,
        rpc_secs=0.3,
        rpc_callers=8,
        load_threads=(1, 64),
        load_rates=(1000, 4000, 16000, 64000, 128000, 256000),
        load_secs=1.0,
        change_rates=(1000, 4000, 16000, 32000, 64000),
        drill_runs=1,
        drill_mib=128,
        drill_cost_mib=64,
        drill_creates=300,
        gc_ops=400,
        gc_callers=(1, 4, 16),
        tls_dd_mib=128,
        tls_creates=300,
        capacity="4G",
    ),
    "smoke": dict(
        runs=1,
        dd_mib=16,
        sweep_mib=4,
        sweep_delays_ms=(0, 1, 5),
        small_files=8,
        small_kib=4,
        sweep_ns_files=8,
        build_files=6,
        build_jobs=(1, 4, 24),
        meta_files=100,
        tree_files=60,
        pingpong_rounds=10,
        lease_runs=1,
        tar_files=100,
        git_files=30,
        git_commits=2,
        dbench_secs=2,
        dbench_clients=2,
        rpc_secs=0.05,
        rpc_callers=4,
        load_threads=(1, 4),
        load_rates=(200, 1000),
        load_secs=0.5,
        change_rates=(100, 400),
        drill_runs=1,
        drill_mib=32,
        drill_cost_mib=16,
        drill_creates=50,
        gc_ops=64,
        gc_callers=(1, 4, 16),
        tls_dd_mib=16,
        tls_creates=50,
        capacity="2G",
    ),
}


def free_bytes_needed(cfg):
    """Scratch space a mode needs under its work directory: one dd file per
    target at a time (local, passthrough source, GrantFS chunks whose
    deletion may lag), the drill's file on both servers of the failover
    trio, plus room for everything small."""
    return (3 * cfg["dd_mib"] + 2 * cfg["drill_mib"]) * 2**20 + 2 * 2**30
