"""The .deb on a fresh Debian 12 system, started with systemctl.

A clean Debian 12 root (debootstrap; tests/kit/debroot.py) booted with
systemd as PID 1 under systemd-nspawn, with a network of its own. In it, as
an operator following docs/operations.md would:

- `apt-get install ./grantfs_*.deb` pulls in every library it needs from the
  Debian mirror (its Depends line is complete);
- `grantfsctl init` makes the keys in /etc/grantfs, where every program
  looks by default;
- `systemctl start grantfs-server@standalone` runs a server from
  /etc/grantfs/standalone.conf, logging to the journal;
- an /etc/fstab line of type grantfs with _netdev is mounted by systemd
  (`systemctl start mnt-g.mount`, through /sbin/mount.grantfs) and works;
- `systemctl start grantfs-node` and `grantfsctl mount -g /global/x` with
  /etc/grantfs/cluster.conf and no flags: the global mount appears;
- `systemctl stop` ends each unit cleanly (SIGTERM, exit 0).

x-systemd.automount is not checked: it needs the kernel's autofs, which this
machine's kernel does not have (no autofs in /proc/filesystems).
"""

import json
import os
import re
import subprocess

import pytest

from kit.build import BUILD, REPO
from kit.debroot import Container
from kit.netlab import NetLab
from kit.waits import wait_for


def cpack(out):
    config = os.path.join(BUILD, "CPackConfig.cmake")
    if not os.path.exists(config):  # a copy of the binaries: package the repo's build
        config = os.path.join(REPO, "build", "CPackConfig.cmake")
    assert os.path.exists(config), "no CPackConfig.cmake: configure with scripts/build.sh"
    r = subprocess.run(["cpack", "--config", config, "-B", out], capture_output=True, text=True,
                       timeout=600, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    debs = [f for f in os.listdir(out) if re.fullmatch(r"grantfs_[0-9.]+_amd64\.deb", f)]
    assert len(debs) == 1, os.listdir(out)
    return debs[0]


@pytest.fixture
def container(tmp_base):
    ct = Container(os.path.join(tmp_base, "debian12"))
    try:
        yield ct.create()
    finally:
        ct.stop()


def test_the_deb_installs_on_a_clean_debian_12_and_its_units_run(tmp_base, container):
    pkg = os.path.join(tmp_base, "pkg")
    deb = cpack(pkg)

    # apt-get resolves the package's dependencies from the mirror: nothing
    # of GrantFS's libraries is in the fresh root before.
    r = container.once("dpkg -s libgrpc++1.51 >/dev/null 2>&1 && echo present || echo absent")
    assert r.stdout.strip() == "absent"
    container.once("apt-get -q update && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                   f"--no-install-recommends /pkg/{deb}", binds=[f"{pkg}:/pkg"])

    container.boot()
    c = container.sh
    for prog in ("grantfs-server", "grantfs-mount", "grantfsctl", "grantfs-node"):
        c(f"test -x /usr/bin/{prog}")
    assert c("readlink /sbin/mount.grantfs").stdout.strip() == "/usr/bin/grantfs-mount"

    # The keys, where every program looks by default; a server from its
    # instance's configuration file.
    c("grantfsctl init --tls_dir=/etc/grantfs")
    c("mkdir -p /var/lib/grantfs && cat > /etc/grantfs/standalone.conf <<'EOF'\n"
      "listen = 127.0.0.1:7420\ndata_dir = /var/lib/grantfs\nEOF")
    c("systemctl start grantfs-server@standalone")
    up = c("for i in $(seq 100); do grantfsctl --config= --server=127.0.0.1:7420 --retry_s=1 "
           "status >/tmp/status 2>&1 && exit 0; sleep 0.2; done; cat /tmp/status; exit 1",
           check=False, timeout=120)
    if up.returncode != 0:
        c("systemctl status grantfs-server@standalone --no-pager; "
          "journalctl -u grantfs-server@standalone --no-pager | tail -30", check=False)
    assert up.returncode == 0, up.stdout
    assert c("systemctl is-active grantfs-server@standalone").stdout.strip() == "active"
    journal = c("journalctl -u grantfs-server@standalone --no-pager").stdout
    assert "grantfs-server: " in journal and "127.0.0.1:7420" in journal, journal

    # Safe by default: the default node certificate squashes root.
    c("mkdir -p /mnt/sq && mount -t grantfs 127.0.0.1:7420:/ /mnt/sq")
    denied = c("echo x > /mnt/sq/f", check=False)
    assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied.stderr
    c("umount /mnt/sq")
    # A trusted node's certificate (root is root), and an fstab line that
    # uses it, mounted by systemd through mount.grantfs.
    c("grantfsctl init --tls_dir=/etc/grantfs --nodes=ct1 --node_options=root")
    c("mkdir -p /mnt/g && echo '127.0.0.1:7420:/ /mnt/g grantfs _netdev,noatime,identity=node-ct1 "
      "0 0' >> /etc/fstab && systemctl daemon-reload")
    c("systemctl start mnt-g.mount", timeout=60)
    assert c("findmnt -n -o FSTYPE /mnt/g").stdout.strip() == "fuse.grantfs"
    c("echo hello from the container > /mnt/g/f && sync")
    assert c("cat /mnt/g/f").stdout == "hello from the container\n"

    # The node agent from cluster.conf, and a global mount with no flags.
    c("cat > /etc/grantfs/cluster.conf <<'EOF'\n"
      "servers = 127.0.0.1:7420\ntls_dir = /etc/grantfs\nnode = ct1\nEOF")
    c("systemctl start grantfs-node")
    c("for i in $(seq 100); do grantfsctl nodes | grep -q '^ct1 *yes' && exit 0; sleep 0.2; "
      "done; grantfsctl nodes; exit 1", timeout=60)
    out = c("grantfsctl mount -g /global/x", timeout=60).stdout
    assert "ct1" in out and "mounted" in out, out
    assert c("cat /global/x/f").stdout == "hello from the container\n"
    c("grantfsctl umount -g /global/x", timeout=60)
    assert c("findmnt -n /global/x", check=False).returncode != 0

    # Each unit stops cleanly on SIGTERM: exit 0, nothing left mounted.
    c("systemctl stop mnt-g.mount", timeout=60)
    assert c("findmnt -n /mnt/g", check=False).returncode != 0
    c("systemctl stop grantfs-node grantfs-server@standalone", timeout=90)
    for unit in ("grantfs-node", "grantfs-server@standalone"):
        show = c(f"systemctl show -p Result -p ExecMainStatus -p ActiveState {unit}").stdout
        assert "Result=success" in show and "ExecMainStatus=0" in show, (unit, show)
        assert "ActiveState=inactive" in show, (unit, show)


def status_json(machine):
    r = machine.sh("grantfsctl --server=a:7420,b:7420 --json --retry_s=2 status", check=False,
                   timeout=60)
    try:
        return json.loads(r.stdout)
    except ValueError:
        return None


def roles(machine):
    """{server: (role, replica_state)} as `grantfsctl status --json` says."""
    st = status_json(machine)
    if not st:
        return {}
    return {s.get("server"): (s.get("role"), s.get("replica_state", ""))
            for s in st.get("servers", []) if "role" in s}


def in_sync(machine, primary, replica):
    """`primary` serves as the primary with its replica in sync, and
    `replica` says it is the replica."""
    r = roles(machine)
    return (r.get(f"{primary}:7420") == ("primary", "in sync")
            and r.get(f"{replica}:7420", ("", ""))[0] == "replica")


@pytest.fixture
def machines(tmp_base):
    """Three clean Debian 12 machines a, b and w with the package installed
    (installed once, then copied), on one network (a NetLab bridge), each
    knowing the others by name."""
    pkg = os.path.join(tmp_base, "pkg")
    deb = cpack(pkg)
    lab = NetLab(["w", "a", "b"])
    made = {}
    try:
        first = Container(os.path.join(tmp_base, "installed"), name="ct-installed").create()
        made["installed"] = first
        first.once("apt-get -q update && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                   f"--no-install-recommends /pkg/{deb}", binds=[f"{pkg}:/pkg"])
        hosts = "".join(f"{lab.ip(h)} {h}\n" for h in ("a", "b", "w"))
        for h in ("a", "b", "w"):
            m = Container(os.path.join(tmp_base, f"machine-{h}"), name=f"ct-{h}").create(first.root)
            made[h] = m
            with open(os.path.join(m.root, "etc/hostname"), "w") as f:
                f.write(h + "\n")
            with open(os.path.join(m.root, "etc/hosts"), "a") as f:
                f.write(hosts)
        made.pop("installed").stop()
        for h in ("w", "a", "b"):
            made[h].boot(netns=lab.ns(h))
        made["lab"] = lab
        yield made
    finally:
        for k, m in made.items():
            if k != "lab":
                m.stop()
        lab.destroy()


def copy_keys(src_root, dst_root):
    """Step 2's `tar --exclude=ca.key | ssh X tar -x`, between the roots."""
    os.makedirs(os.path.join(dst_root, "etc/grantfs"), exist_ok=True)
    tar = subprocess.run(["tar", "-C", os.path.join(src_root, "etc/grantfs"), "--exclude=ca.key",
                          "-cf", "-", "."], capture_output=True, check=True, timeout=60)
    subprocess.run(["tar", "-C", os.path.join(dst_root, "etc/grantfs"), "-xf", "-"],
                   input=tar.stdout, check=True, timeout=60)


def test_a_cluster_on_three_machines_as_operations_md_says(machines):
    a, b, w, lab = machines["a"], machines["b"], machines["w"], machines["lab"]
    # 2. Keys on a, copied to b and w without the CA's key.
    a.sh("grantfsctl init --tls_dir=/etc/grantfs --node_options=root")
    for m in (b, w):
        copy_keys(a.root, m.root)
        assert not os.path.exists(os.path.join(m.root, "etc/grantfs/ca.key"))
    # 3. The witness.
    w.sh("cp /usr/share/doc/grantfs/examples/witness.conf /etc/grantfs/witness.conf && "
         "systemctl enable --now grantfs-witness")
    # 4. The servers.
    for m, me, peer, role in ((a, "a", "b", "primary"), (b, "b", "a", "replica")):
        conf = (f"role = {role}\nlisten = 0.0.0.0:7420\nadvertise = {me}:7420\n"
                f"peer = {peer}:7420\nwitness = w:7420\ndata_dir = /var/lib/grantfs\n"
                "capacity = 1G\nmetrics_addr = 0.0.0.0:9420\n")
        with open(os.path.join(m.root, f"etc/grantfs/{role}.conf"), "w") as f:
            f.write(conf)
        m.sh(f"mkdir -p /var/lib/grantfs && systemctl enable --now grantfs-server@{role}")
    # 5. Look: a primary, b an in-sync replica.
    wait_for(lambda: in_sync(w, "a", "b"), 90, "a primary and b in sync", interval=1)
    text = w.sh("grantfsctl --server=a:7420,b:7420 status").stdout
    assert "primary" in text and "replica" in text, text
    # 6. Every machine a node.
    for m in (a, b, w):
        with open(os.path.join(m.root, "etc/grantfs/cluster.conf"), "w") as f:
            f.write("servers = a:7420,b:7420\ntls_dir = /etc/grantfs\n")
        m.sh("systemctl enable --now grantfs-node")
    wait_for(lambda: all(re.search(rf"^{h} +yes", a.sh("grantfsctl nodes").stdout, re.M)
                         for h in ("a", "b", "w")), 30, "three nodes alive", interval=0.5)
    # 7. Mount everywhere.
    out = b.sh("grantfsctl mount -g /global/data", timeout=60).stdout
    assert re.findall(r"^  ([abw]) +mounted$", out, re.M) == ["a", "b", "w"], out
    a.sh("echo hello > /global/data/hello")
    assert w.sh("cat /global/data/hello").stdout == "hello\n"
    # 8. Metrics, from the network: curl on the lab's network (the minimal
    # systems have none).
    metrics = subprocess.run(lab.wrap("w", ["curl", "-sf", "--max-time", "10",
                                            f"http://{lab.ip('a')}:9420/metrics"]),
                             capture_output=True, text=True, timeout=30, check=True).stdout
    assert re.search(r"^grantfs_ledger_capacity_bytes 1073741824$", metrics, re.M), metrics[:2000]
    # 9. Switchover: b primary, a replica; the mounts go on.
    w.sh("grantfsctl switchover", timeout=60)
    wait_for(lambda: in_sync(w, "b", "a"), 90, "b primary and a in sync", interval=1)
    b.sh("echo after the switchover >> /global/data/hello")
    assert a.sh("cat /global/data/hello").stdout == "hello\nafter the switchover\n"
    # 10. The primary's machine (b) dies: a takes over; the others' mounts
    # go on with nothing acknowledged lost.
    b.kill9()
    wait_for(lambda: roles(w).get("a:7420", ("", ""))[0] == "primary", 60, "a primary",
             interval=0.5)
    assert w.sh("cat /global/data/hello", timeout=90).stdout == "hello\nafter the switchover\n"
    w.sh("echo while b was down >> /global/data/hello", timeout=90)
    # b is down: listed as not alive, or (the primary changed) not at all.
    wait_for(lambda: not re.search(r"^b +yes", a.sh("grantfsctl nodes").stdout, re.M), 30,
             "node b not alive", interval=0.5)
    # b boots again: its units start, it joins as the replica, catches up,
    # and its agent mounts /global/data again.
    b.boot(netns=lab.ns("b"))
    wait_for(lambda: in_sync(w, "a", "b"), 120, "b in sync again", interval=1)
    wait_for(lambda: b.sh("cat /global/data/hello", check=False).stdout
             == "hello\nafter the switchover\nwhile b was down\n", 60, "b's mount again",
             interval=0.5)
    # Every unit stops cleanly (the agents leave the mounts; the primary
    # hands over on its way out).
    for m, units in ((a, "grantfs-node grantfs-server@primary"),
                     (b, "grantfs-node grantfs-server@replica"),
                     (w, "grantfs-node grantfs-witness")):
        m.sh(f"systemctl stop {units}", timeout=120)
        for unit in units.split():
            show = m.sh(f"systemctl show -p Result -p ExecMainStatus {unit}").stdout
            if "Result=success" not in show or "ExecMainStatus=0" not in show:
                # What the unit did on its way out (gone with the container
                # once the test ends).
                journal = m.sh(f"journalctl -u {unit} -n 120 --no-pager -o short-precise",
                               check=False).stdout
                pytest.fail(f"{m.name}: {unit} did not stop cleanly: {show}\n{journal}")
