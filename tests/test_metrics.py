"""Prometheus metrics (docs/metrics.md): a server and a mount started with
--metrics_addr serve the text format at /metrics; the numbers follow what
the file system did. Scraped with curl, a real HTTP client."""

import json
import os
import re
import subprocess

import pytest

from kit.build import SERVER_BIN
from kit.ports import free_port
from kit.topology import Standalone, Trio, running

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')


def scrape(port):
    """{(name, labels): value} of http://127.0.0.1:port/metrics (fetched
    with curl), after checking every line is a comment or a well-formed
    sample."""
    r = subprocess.run(["curl", "--silent", "--show-error", "--fail", "--max-time", "10",
                        "--include", f"http://127.0.0.1:{port}/metrics"],
                       capture_output=True, timeout=30)
    assert r.returncode == 0, f"curl: exit {r.returncode}: {r.stderr.decode()}"
    head, sep, text = r.stdout.decode().partition("\r\n\r\n")
    assert sep, r.stdout[:500]
    headers = {k.strip().lower(): v.strip()
               for k, _, v in (line.partition(":") for line in head.splitlines()[1:])}
    assert headers["content-type"].startswith("text/plain; version=0.0.4"), head
    out = {}
    types = {}
    current = None  # the family whose lines these are: each family in one group
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert name not in types, f"TYPE of {name} twice"
            types[name] = kind
            current = name
            continue
        if line.startswith("# HELP "):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample: {line!r}"
        name = m.group(1)
        family = name
        if types.get(current) == "histogram":
            family = re.sub(r"_(bucket|sum|count)$", "", name)
        assert family == current, f"{name} outside its family's group (after {current})"
        out[(name, m.group(3) or "")] = float(m.group(4))
    return out, types


def check_histograms(samples, name):
    """Buckets are cumulative, +Inf equals _count; returns {op: count}."""
    counts = {}
    for (n, labels), v in samples.items():
        if n == name + "_count":
            counts[re.search(r'op="([^"]*)"', labels).group(1)] = v
    for op, count in counts.items():
        buckets = sorted(((float(re.search(r'le="([^"]*)"', l).group(1)), v)
                          for (n, l), v in samples.items()
                          if n == name + "_bucket" and f'op="{op}"' in l))
        values = [v for _, v in buckets]
        assert values == sorted(values), (op, buckets)
        assert buckets[-1][0] == float("inf") and buckets[-1][1] == count, (op, buckets)
        assert samples[(name + "_sum", f'op="{op}"')] >= 0
    return counts


@pytest.fixture
def metered(tmp_base):
    ports = (free_port(), free_port())
    topo = Standalone(tmp_base, server_extra=[f"--metrics_addr=127.0.0.1:{ports[0]}"])
    topo.mounts[0].extra.append(f"--metrics_addr=127.0.0.1:{ports[1]}")
    for t in running(topo):
        yield t, ports


def test_server_and_mount_metrics_follow_the_work(metered):
    topo, (server_port, mount_port) = metered
    before, _ = scrape(server_port)
    data = os.urandom(8192)
    for i in range(20):
        with open(os.path.join(topo.n1, f"f{i}"), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    with open(os.path.join(topo.n2, "f3"), "rb") as f:
        assert f.read() == data

    s, types = scrape(server_port)
    assert s[("grantfs_server_role", 'role="standalone"')] == 1
    assert s[("grantfs_server_serving", "")] == 1
    assert s[("grantfs_server_sessions", "")] == 2
    assert s[("grantfs_ledger_capacity_bytes", "")] == 4 << 30
    assert s[("grantfs_ledger_used_bytes", "")] >= 20 * 8192
    assert (s[("grantfs_ledger_used_bytes", "")] + s[("grantfs_ledger_granted_bytes", "")] +
            s[("grantfs_ledger_reserved_bytes", "")] <= s[("grantfs_ledger_capacity_bytes", "")])
    assert s[("grantfs_server_inodes", "")] >= 21
    assert types["grantfs_server_meta_changes_total"] == "counter"
    assert types["grantfs_ledger_used_bytes"] == "gauge"
    # Durations in seconds (Prometheus's base unit), none in milliseconds.
    assert not [n for n in types if n.endswith("_ms")], sorted(types)
    assert types["grantfs_session_lease_left_seconds"] == "gauge"
    assert all(0 < v <= 10 for (n, _), v in s.items() if n == "grantfs_session_lease_left_seconds")
    # Space grants: the sessions holding one, and the recalls sent.
    granted = [v for (n, _), v in s.items() if n == "grantfs_session_grant_bytes" and v > 0]
    assert s[("grantfs_server_grants_outstanding", "")] == len(granted) >= 1
    assert types["grantfs_server_grant_recalls_total"] == "counter"
    assert s[("grantfs_server_takeovers_total", "")] == 0
    assert types["grantfs_server_call_seconds"] == "histogram"
    written = s[("grantfs_server_write_bytes_total", "")]
    assert written - before.get(("grantfs_server_write_bytes_total", ""), 0) >= 20 * 8192
    assert s[("grantfs_server_read_bytes_total", "")] >= 8192
    calls = check_histograms(s, "grantfs_server_call_seconds")
    # The creates: a MkNod call each, or (namespace grants on) in the
    # mount's log, sent as ApplyLog batches before each file's data.
    assert calls.get("MkNod", 0) >= 20 or calls.get("ApplyLog", 0) >= 1, calls
    assert calls.get("OpenSession", 0) == 2, calls
    assert calls.get("Write", 0) >= 1, calls
    sessions = [labels for (n, labels) in s if n == "grantfs_session_grant_bytes"]
    assert len(sessions) == 2 and any("node1" in l for l in sessions), sessions
    assert all(re.match(r'client_id="[0-9a-f]{16}"', l) for l in sessions), sessions

    m, types_m = scrape(mount_port)
    ops = check_histograms(m, "grantfs_mount_op_seconds")
    assert ops.get("create", 0) >= 20, ops
    assert ops.get("write", 0) >= 20, ops
    assert ops.get("fsync", 0) >= 20, ops
    assert m[("grantfs_mount_fastwrite", "")] == 1
    assert m[("grantfs_mount_kernel_inodes", "")] >= 1
    assert m[("grantfs_mount_dirty_bytes", "")] >= 0
    assert m[("grantfs_mount_dirty_limit_bytes", "")] > 0
    # 20 files of 8 KiB, each fsync'd: all of it acknowledged.
    assert m[("grantfs_mount_flushed_bytes_total", "")] >= 20 * 8192
    assert m[("grantfs_mount_waiting_writers", "")] == 0
    assert types_m["grantfs_mount_throttled_writes_total"] == "counter"
    # Each file was looked up (or made) here: stats of them come from leases.
    for i in range(20):
        os.stat(os.path.join(topo.n1, f"f{i}"))
    m2, _ = scrape(mount_port)
    assert m2[("grantfs_mount_leased_attrs", "")] >= 1
    assert m2[("grantfs_mount_lease_hits_total", "")] + m2[("grantfs_mount_lease_misses_total", "")] > 0
    # Node 2 read f3, whose lease node 1 held: a change of it on node 2
    # recalls it from node 1.
    recalls = m2[("grantfs_mount_lease_recalls_total", "")]
    os.chmod(os.path.join(topo.n2, "f3"), 0o600)
    m3, _ = scrape(mount_port)
    assert m3[("grantfs_mount_lease_recalls_total", "")] > recalls


def test_a_bad_or_taken_metrics_address_stops_the_server_at_once(tmp_base):
    data = os.path.join(tmp_base, "data")
    os.makedirs(data)
    for addr, says in (("nowhere", "must be HOST:PORT"),
                       (None, "cannot listen for metrics")):
        if addr is None:  # a port another socket holds
            import socket
            held = socket.socket()
            held.bind(("127.0.0.1", 0))
            held.listen()
            addr = f"127.0.0.1:{held.getsockname()[1]}"
        r = subprocess.run([SERVER_BIN, f"--data_dir={data}", f"--listen=127.0.0.1:{free_port()}",
                            f"--metrics_addr={addr}"], capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        assert r.returncode == 2 and says in r.stderr, r.stderr


def test_a_server_shows_each_role_it_takes(tmp_base):
    """One server process serves its metrics across roles: A primary and B
    replica, then the other way round after a switchover."""
    ports = {"A": free_port(), "B": free_port(), "W": free_port()}
    t = Trio(tmp_base, server_extra={n: [f"--metrics_addr=127.0.0.1:{p}"]
                                     for n, p in ports.items()})
    try:
        t.start()
        mnt = t.mount("node1")
        with open(os.path.join(mnt, "f"), "wb") as f:
            f.write(os.urandom(4096))
        a, _ = scrape(ports["A"])
        assert a[("grantfs_server_role", 'role="primary"')] == 1
        assert a[("grantfs_server_replica_state", 'state="in sync"')] == 1
        assert a[("grantfs_server_serving", "")] == 1
        assert a[("grantfs_server_repl_records_total", "")] > 0
        # A's first act was a resync of the empty replica.
        assert a[("grantfs_server_resync_active", "")] == 0
        assert a[("grantfs_server_resync_total_bytes", "")] > 0
        assert a[("grantfs_server_resync_elapsed_seconds", "")] >= 0
        assert a[("grantfs_server_takeovers_total", "")] == 0
        r = subprocess.run(t["A"].ctl_argv("status"), capture_output=True, text=True, timeout=60)
        assert "resync:          last one sent" in r.stdout, r.stdout
        b, _ = scrape(ports["B"])
        assert b[("grantfs_server_role", 'role="replica"')] == 1
        assert b[("grantfs_server_serving", "")] == 0
        # A replica serves no volume: no ledger (it would read 0: "broken").
        assert ("grantfs_server_ledger_ok", "") not in b
        assert ("grantfs_ledger_capacity_bytes", "") not in b
        assert ("grantfs_server_acked_seq", "") in b
        assert b[("grantfs_server_takeovers_total", "")] == 0
        w, _ = scrape(ports["W"])
        assert w[("grantfs_server_role", 'role="witness"')] == 1
        r = subprocess.run(t["A"].ctl_argv("switchover"), capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        t.wait_role("B", "primary", 30)
        t.wait_in_sync("B", "A", 60)
        b, _ = scrape(ports["B"])
        assert b[("grantfs_server_role", 'role="primary"')] == 1
        assert b[("grantfs_server_serving", "")] == 1
        # B became the primary after being the replica: a takeover.
        assert b[("grantfs_server_takeovers_total", "")] == 1
        assert b[("grantfs_ledger_capacity_bytes", "")] > 0
        a, _ = scrape(ports["A"])
        assert a[("grantfs_server_role", 'role="replica"')] == 1
        assert a[("grantfs_server_takeovers_total", "")] == 0
        # The calls A served as primary are still counted.
        assert check_histograms(a, "grantfs_server_call_seconds").get("MkNod", 0) >= 1
    finally:
        t.stop()


def test_the_grafana_dashboard_uses_only_metrics_that_exist(metered):
    """docs/grafana-dashboard.json: every metric its panels ask for is served
    by a server or a mount (a renamed metric would leave a panel empty)."""
    topo, (server_port, mount_port) = metered
    with open(os.path.join(topo.n1, "f"), "wb") as f:
        f.write(os.urandom(8192))
        os.fsync(f.fileno())
    served = set()
    for port in (server_port, mount_port):
        samples, types = scrape(port)
        served |= set(types)
    path = os.path.join(os.path.dirname(__file__), "..", "docs", "grafana-dashboard.json")
    with open(path) as f:
        dashboard = json.load(f)
    used = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            for name in re.findall(r"grantfs_[a-z_]+", target["expr"]):
                used.add(re.sub(r"_(bucket|count|sum)$", "", name))
    assert used, "no metric in the dashboard"
    assert used <= served, sorted(used - served)
