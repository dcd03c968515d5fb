"""Safe by default (docs/security.md): every process runs with TLS and a
certificate of the cluster's CA (tests/kit/keys.py makes them); running
without takes --insecure and says so; each kind of certificate makes only
its own calls; a certificate of another CA or an expired one is refused."""

import os
import shutil
import subprocess
import time

from kit.build import CTL_BIN, MOUNT_BIN, SERVER_BIN
from kit.mount import Mount, is_mounted
from kit.server import Server, ctl_argv
from kit.waits import wait_for


def run(argv, env=None, timeout=60):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


def env_without_keys(tls_dir):
    env = dict(os.environ)
    env["GRANTFS_TLS_DIR"] = tls_dir
    return env


def test_a_server_without_keys_refuses_to_start_and_says_how(tmp_base):
    data = os.path.join(tmp_base, "data")
    os.makedirs(data)
    missing = os.path.join(tmp_base, "no-keys")
    r = run([SERVER_BIN, f"--data_dir={data}", "--listen=127.0.0.1:0"],
            env=env_without_keys(missing))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{missing}/ca.crt is missing" in r.stderr, r.stderr
    assert "grantfsctl init" in r.stderr and "--insecure" in r.stderr, r.stderr
    # grantfsctl and the mount say the same.
    r = run([CTL_BIN, "--server=127.0.0.1:1", "status"], env=env_without_keys(missing))
    assert r.returncode == 2 and "grantfsctl init" in r.stderr, r.stderr
    mnt = os.path.join(tmp_base, "mnt")
    os.makedirs(mnt)
    r = run([MOUNT_BIN, "127.0.0.1:1:/", mnt, f"--log_file={mnt}.log"],
            env=env_without_keys(missing))
    assert r.returncode != 0 and not is_mounted(mnt)


def test_insecure_is_explicit_and_warned_at_every_start(tmp_base):
    server = Server(os.path.join(tmp_base, "data"), extra=["--insecure"])
    server.ready = lambda: True  # grantfsctl uses TLS here; the mount checks readiness
    server.start()
    try:
        m = Mount(server.addr, os.path.join(tmp_base, "m"), ["--insecure"])
        m.start()
        with open(os.path.join(m.path, "f"), "w") as f:
            f.write("plain")
        with open(m.log_path) as f:
            assert "runs with --insecure: no TLS" in f.read()
        m.unmount()
        # A client with TLS cannot talk to it (and is not silently downgraded).
        r = run(ctl_argv(server.addr, "status"), timeout=60)
        assert r.returncode != 0
    finally:
        server.stop()
    with open(server.log_path) as f:
        assert f.read().count("grantfs-server runs with --insecure: no TLS") == 1
    server.start()  # warned again at the next start

    def warned_twice():
        with open(server.log_path) as f:
            return f.read().count("grantfs-server runs with --insecure: no TLS") == 2

    try:
        wait_for(warned_twice, what="the warning at the second start")
    finally:
        server.stop()


def test_each_kind_of_certificate_makes_only_its_calls(cluster, tmp_base):
    keys = os.environ["GRANTFS_TLS_DIR"]
    addr = cluster.server.addr
    # A mount's certificate (node) may read status but not run the online
    # check or a switchover: refused, nothing done.
    r = run(ctl_argv(addr, "--identity=node", "status"))
    assert r.returncode == 0, r.stderr
    r = run(ctl_argv(addr, "--identity=node", "fsck"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "may not make this call" in r.stdout + r.stderr, r.stdout + r.stderr
    r = run(ctl_argv(addr, "fsck"))  # an admin's may
    assert r.returncode == 0, r.stdout + r.stderr
    # A server's certificate cannot mount (servers make no file calls).
    mnt = os.path.join(tmp_base, "as-server")
    os.makedirs(mnt)
    r = run([MOUNT_BIN, f"{addr}:/", mnt, "--identity=server", f"--log_file={mnt}.log",
             "--retry_ms=2000"])
    assert r.returncode != 0 and not is_mounted(mnt)
    with open(os.path.join(cluster.server.log_path)) as f:
        log = f.read()
    assert "a server identity may not make it" in log, log[-2000:]
    # The mounts of the fixture (node certificates) work.
    with open(os.path.join(cluster.n1, "ok"), "w") as f:
        f.write("ok")
    with open(os.path.join(cluster.n2, "ok")) as f:
        assert f.read() == "ok"
    assert os.path.exists(os.path.join(keys, "node.crt"))


def test_another_cas_or_an_expired_certificate_is_refused(cluster, tmp_base):
    keys = os.environ["GRANTFS_TLS_DIR"]
    # Another cluster's keys: the handshake fails both ways.
    other = os.path.join(tmp_base, "other-keys")
    assert run([CTL_BIN, "init", f"--tls_dir={other}"]).returncode == 0
    r = run(ctl_argv(cluster.server.addr, f"--tls_dir={other}", "status"))
    assert r.returncode != 0
    # A certificate of this cluster's CA that has expired (made valid until
    # now), in a copy of the keys so the run's own stay as they are.
    mine = os.path.join(tmp_base, "keys-copy")
    shutil.copytree(keys, mine)
    r = run([CTL_BIN, "init", f"--tls_dir={mine}", "--admins=old", "--valid_days=0"])
    assert r.returncode == 0, r.stdout + r.stderr
    time.sleep(1.5)
    r = run(ctl_argv(cluster.server.addr, f"--tls_dir={mine}", "--identity=admin-old", "status"))
    assert r.returncode != 0
    # A new certificate from the same CA works at once.
    r = run([CTL_BIN, "init", f"--tls_dir={mine}", "--admins=new"])
    assert r.returncode == 0 and f"wrote {mine}/admin-new.crt" in r.stdout, r.stdout
    r = run(ctl_argv(cluster.server.addr, f"--tls_dir={mine}", "--identity=admin-new", "status"))
    assert r.returncode == 0, r.stderr


def test_root_squash_and_read_only_nodes(cluster, tmp_base):
    """A node certificate without "root" maps root to nobody (65534); one
    with "ro" can read but not change (EROFS)."""
    keys = os.path.join(tmp_base, "keys-copy")
    shutil.copytree(os.environ["GRANTFS_TLS_DIR"], keys)
    assert run([CTL_BIN, "init", f"--tls_dir={keys}", "--nodes=sq"]).returncode == 0
    r = run([CTL_BIN, "init", f"--tls_dir={keys}", "--nodes=reader", "--node_options=root,ro"])
    assert r.returncode == 0, r.stdout + r.stderr
    r = run([CTL_BIN, "init", f"--tls_dir={keys}", "--nodes=x", "--node_options=root,bogus"])
    assert r.returncode == 2 and "unknown --node_options: bogus" in r.stderr, r.stderr
    # On the fixture's node (root kept): a directory anyone may write in.
    shared = os.path.join(cluster.n1, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    with open(os.path.join(cluster.n1, "rootfile"), "w") as f:
        f.write("root's")
    sq = Mount(cluster.server.addr, os.path.join(tmp_base, "sq"),
               [f"--tls_dir={keys}", "--identity=node-sq"])
    ro = Mount(cluster.server.addr, os.path.join(tmp_base, "ro"),
               [f"--tls_dir={keys}", "--identity=node-reader"])
    sq.start()
    ro.start()
    try:
        # Root on the squashed node: nobody. It cannot create in the
        # root-owned root directory, and what it creates is nobody's.
        try:
            open(os.path.join(sq.path, "nope"), "w").close()
            raise AssertionError("squashed root created a file in a root-owned directory")
        except PermissionError:
            pass
        with open(os.path.join(sq.path, "shared", "mine"), "w") as f:
            f.write("x")
        st = os.stat(os.path.join(cluster.n1, "shared", "mine"))
        assert (st.st_uid, st.st_gid) == (65534, 65534)
        with open(os.path.join(sq.path, "rootfile")) as f:  # mode 0644: nobody may read
            assert f.read() == "root's"
        # The read-only node reads, and every change is EROFS.
        with open(os.path.join(ro.path, "rootfile")) as f:
            assert f.read() == "root's"
        for change in (lambda: open(os.path.join(ro.path, "new"), "w"),
                       lambda: open(os.path.join(ro.path, "rootfile"), "a"),
                       lambda: os.mkdir(os.path.join(ro.path, "d")),
                       lambda: os.unlink(os.path.join(ro.path, "rootfile")),
                       lambda: os.chmod(os.path.join(ro.path, "rootfile"), 0o600)):
            try:
                change()
                raise AssertionError("a change went through on a read-only node")
            except OSError as e:
                assert e.errno == 30, e  # EROFS
        assert os.stat(os.path.join(cluster.n1, "rootfile")).st_mode & 0o777 == 0o644
    finally:
        sq.unmount()
        ro.unmount()
    with open(cluster.server.log_path) as f:
        assert "a read-only node" in f.read()


def test_a_node_restricted_to_a_subtree_sees_only_it(cluster, tmp_base):
    """A node certificate with "subtree=/proj" mounts /proj (or below) and
    reaches nothing outside it; mounting "/" is refused. Any node may mount a
    directory as its root (SERVER:/PATH)."""
    keys = os.path.join(tmp_base, "keys-copy")
    shutil.copytree(os.environ["GRANTFS_TLS_DIR"], keys)
    r = run([CTL_BIN, "init", f"--tls_dir={keys}", "--nodes=proj",
             "--node_options=root,subtree=/proj"])
    assert r.returncode == 0, r.stdout + r.stderr
    r = run([CTL_BIN, "init", f"--tls_dir={keys}", "--nodes=y", "--node_options=subtree=proj"])
    assert r.returncode == 2 and "subtree=proj" in r.stderr, r.stderr
    os.makedirs(os.path.join(cluster.n1, "proj", "sub"))
    os.makedirs(os.path.join(cluster.n1, "secret"))
    with open(os.path.join(cluster.n1, "proj", "a"), "w") as f:
        f.write("A")
    with open(os.path.join(cluster.n1, "secret", "key"), "w") as f:
        f.write("S")
    addr = cluster.server.addr
    identity = [f"--tls_dir={keys}", "--identity=node-proj"]

    # "/" is outside its subtree: the mount fails and says why.
    mnt = os.path.join(tmp_base, "whole")
    os.makedirs(mnt)
    r = run([MOUNT_BIN, f"{addr}:/", mnt, *identity, f"--log_file={mnt}.log", "--retry_ms=2000"])
    assert r.returncode != 0 and not is_mounted(mnt)
    with open(mnt + ".log") as f:
        assert "outside the node's subtree" in f.read()

    p = Mount(addr, os.path.join(tmp_base, "p"), identity, root="/proj").start()
    sub = Mount(addr, os.path.join(tmp_base, "sub"), root="/proj/sub").start()
    try:
        assert sorted(os.listdir(p.path)) == ["a", "sub"]
        assert os.stat(p.path).st_ino == os.stat(os.path.join(cluster.n1, "proj")).st_ino
        with open(os.path.join(p.path, "a")) as f:
            assert f.read() == "A"
        with open(os.path.join(p.path, "b"), "w") as f:
            f.write("B")
        with open(os.path.join(cluster.n1, "proj", "b")) as f:
            assert f.read() == "B"
        os.rename(os.path.join(p.path, "b"), os.path.join(p.path, "sub", "b"))
        # A change on another node shows at once, at the mount's root too:
        # the kernel's node 1 is /proj here.
        with open(os.path.join(cluster.n1, "proj", "c"), "w") as f:
            f.write("C")
        assert os.path.exists(os.path.join(p.path, "c"))
        assert sorted(os.listdir(p.path)) == ["a", "c", "sub"]
        os.unlink(os.path.join(cluster.n1, "proj", "c"))
        assert not os.path.exists(os.path.join(p.path, "c"))
        os.chmod(os.path.join(cluster.n1, "proj"), 0o750)
        assert os.stat(p.path).st_mode & 0o777 == 0o750
        # The same of the volume's root on a mount of "/".
        mode = os.stat(cluster.n2).st_mode & 0o777
        os.chmod(cluster.n1, 0o711)
        try:
            assert os.stat(cluster.n2).st_mode & 0o777 == 0o711
        finally:
            os.chmod(cluster.n1, mode)
        # Any node may mount a directory as its root.
        assert sorted(os.listdir(sub.path)) == ["b"]
        with open(os.path.join(sub.path, "d"), "w") as f:
            f.write("D")
        assert sorted(os.listdir(os.path.join(p.path, "sub"))) == ["b", "d"]
        os.mkdir(os.path.join(sub.path, "dd"))
        assert os.path.isdir(os.path.join(cluster.n1, "proj", "sub", "dd"))
    finally:
        p.unmount()
        sub.unmount()
    with open(cluster.server.log_path) as f:
        assert "refused OpenSession" in f.read()
