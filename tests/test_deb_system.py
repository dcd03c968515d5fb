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

import os
import re
import subprocess

import pytest

from kit.build import BUILD, REPO
from kit.debroot import Container


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
      'GRANTFS_SERVER_FLAGS="--listen=127.0.0.1:7420 --data_dir=/var/lib/grantfs"\n'
      "EOF")
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
