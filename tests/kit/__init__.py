"""The GrantFS test kit: real grantfs-server processes, real FUSE mounts,
and the topologies made of them, for tests/ and bench/ alike.

    build      where the binaries are (GRANTFS_BUILD, or REPO/build)
    errors     HarnessError, WaitTimeout
    waits      wait_for(pred, timeout, what), listening(host, port)
    ports      free_port()
    processes  Proc (a child with its log), stop_process (SIGTERM, then
               SIGKILL), tail_log
    mount      is_mounted, mounts_under, force_unmount, start_fuse, Mount,
               NsMount; mounts left by a crashed run are lazily unmounted
               at exit
    server     Server (one standalone grantfs-server), status()/statuses()
               (`grantfsctl status --json`), role_support()
    topology   Standalone (a server and N mounts), Trio (witness, primary,
               replica), RolePoller
    netlab     NetLab: network namespaces standing for machines
    agents     AgentNode: a node (network and mount namespace) with its
               grantfs-node, for the global-mount tests
    users      as_user(), NOBODY, NOGROUP; expect_errno()

tests/conftest.py holds the pytest fixtures only; bench/ puts tests/ on
sys.path once (bench/suitelib/__init__.py) and imports `kit` as the tests do.
Everything here must run as root (/dev/fuse, mounts, namespaces).
"""
