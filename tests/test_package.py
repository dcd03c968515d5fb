"""The Debian package (scripts/package.sh, CPack): what it holds, what it
depends on, that its programs run from it and that systemd takes its unit."""

import os
import re
import subprocess

from kit.build import BUILD, REPO


def run(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL, **kw)
    assert r.returncode == 0, f"{argv}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_the_package_installs_the_programs_the_helper_and_the_unit(tmp_base):
    config = os.path.join(BUILD, "CPackConfig.cmake")
    if not os.path.exists(config):  # a copy of the binaries: package the repo's build
        config = os.path.join(REPO, "build", "CPackConfig.cmake")
    assert os.path.exists(config), "no CPackConfig.cmake: configure with scripts/build.sh"
    out = os.path.join(tmp_base, "pkg")
    run(["cpack", "--config", config, "-B", out])
    debs = [f for f in os.listdir(out) if re.fullmatch(r"grantfs_[0-9.]+_amd64\.deb", f)]
    assert len(debs) == 1, os.listdir(out)
    deb = os.path.join(out, debs[0])

    listing = run(["dpkg-deb", "-c", deb])
    for path in ("./usr/bin/grantfs-server", "./usr/bin/grantfs-mount", "./usr/bin/grantfsctl",
                 "./usr/bin/grantfs-node",
                 "./usr/lib/systemd/system/grantfs-server@.service",
                 "./usr/lib/systemd/system/grantfs-node.service",
                 "./usr/lib/systemd/system/grantfs-witness.service",
                 "./usr/share/doc/grantfs/operations.md",
                 "./usr/share/doc/grantfs/grafana-dashboard.json",
                 "./usr/share/doc/grantfs/examples/example.conf",
                 "./usr/share/doc/grantfs/examples/cluster.conf"):
        assert re.search(rf" {re.escape(path)}$", listing, re.M), path
    assert "./sbin/mount.grantfs -> /usr/bin/grantfs-mount" in listing
    depends = run(["dpkg-deb", "-f", deb, "Depends"])
    for dep in ("fuse3", "libfuse3-3", "libgrpc++1.51", "librocksdb7.8", "libmicrohttpd12"):
        assert dep in depends, depends

    # The programs run from where the package puts them (stripped).
    root = os.path.join(tmp_base, "root")
    run(["dpkg-deb", "-x", deb, root])
    keys = os.path.join(tmp_base, "keys")
    run([os.path.join(root, "usr/bin/grantfsctl"), "init", f"--tls_dir={keys}"])
    assert os.path.exists(os.path.join(keys, "ca.crt"))

    # systemd takes the unit (checked with the extracted program and the
    # example configuration in place of /usr/bin and /etc/grantfs).
    with open(os.path.join(root, "usr/lib/systemd/system/grantfs-server@.service")) as f:
        unit = f.read()
    assert "ExecStart=/usr/bin/grantfs-server --config=/etc/grantfs/%i.conf" in unit
    conf = os.path.join(root, "usr/share/doc/grantfs/examples/example.conf")
    check = os.path.join(tmp_base, "units")
    os.makedirs(check)
    with open(os.path.join(check, "grantfs-server@primary.service"), "w") as f:
        f.write(unit.replace("/usr/bin/grantfs-server", os.path.join(root, "usr/bin/grantfs-server"))
                .replace("/etc/grantfs/%i.conf", conf))
    run(["systemd-analyze", "verify", os.path.join(check, "grantfs-server@primary.service")])

    # The node agent's unit: the agent alone gets SIGTERM (the mounts stay),
    # and it reads /etc/grantfs/cluster.conf.
    with open(os.path.join(root, "usr/lib/systemd/system/grantfs-node.service")) as f:
        node_unit = f.read()
    assert "ExecStart=/usr/bin/grantfs-node --state_dir=/var/lib/grantfs-node" in node_unit
    assert "KillMode=process" in node_unit
    with open(os.path.join(check, "grantfs-node.service"), "w") as f:
        f.write(node_unit.replace("/usr/bin/grantfs-node",
                                  os.path.join(root, "usr/bin/grantfs-node")))
    run(["systemd-analyze", "verify", os.path.join(check, "grantfs-node.service")])
    # The witness's unit, with its example configuration.
    with open(os.path.join(root, "usr/lib/systemd/system/grantfs-witness.service")) as f:
        witness_unit = f.read()
    assert ("ExecStart=/usr/bin/grantfs-server --role=witness --config=/etc/grantfs/witness.conf"
            in witness_unit)
    with open(os.path.join(check, "grantfs-witness.service"), "w") as f:
        f.write(witness_unit
                .replace("/usr/bin/grantfs-server", os.path.join(root, "usr/bin/grantfs-server"))
                .replace("/etc/grantfs/witness.conf",
                         os.path.join(root, "usr/share/doc/grantfs/examples/witness.conf")))
    run(["systemd-analyze", "verify", os.path.join(check, "grantfs-witness.service")])
    # The example configurations are ones the programs read: every line a
    # flag the server has (checked up to the start, which --help stops).
    for example in ("example.conf", "witness.conf"):
        r = subprocess.run([os.path.join(root, "usr/bin/grantfs-server"),
                            "--config=" + os.path.join(root, "usr/share/doc/grantfs/examples",
                                                       example), "--help"],
                           capture_output=True, text=True, timeout=60)
        assert "cannot be set" not in r.stderr and "unknown flag" not in r.stderr, r.stderr
        assert "--data_dir" in r.stdout + r.stderr, (example, r.stdout, r.stderr)
    bad = os.path.join(tmp_base, "bad.conf")
    with open(bad, "w") as f:
        f.write("listen = 127.0.0.1:1\nno_such_flag = 1\n")
    r = subprocess.run([os.path.join(root, "usr/bin/grantfs-server"), f"--config={bad}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"{bad}:2: unknown flag 'no_such_flag'" in r.stderr, r.stderr
    r = subprocess.run([os.path.join(root, "usr/bin/grantfs-node"),
                        "--config=" + os.path.join(root, "usr/share/doc/grantfs/examples/cluster.conf"),
                        "--poll_ms=1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--poll_ms must be 100 to 2000" in r.stderr, r.stderr
