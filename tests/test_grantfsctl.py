"""`grantfsctl status --json` against a real server: the same facts as the
text form, in fields a script can read (client/status_json.h)."""

import json
import os
import re
import subprocess

from kit.build import CTL_BIN, MOUNT_BIN, NODE_AGENT_BIN, PROXY_BIN, SERVER_BIN
from kit.build import binary as kit_binary
from kit.ports import free_port
from kit.topology import Trio


def numbers_in_text(text):
    """{label: bytes} of the text lines "label: 1.0 GiB (N bytes)" / "label: N bytes"."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"(\w[\w ]*):\s+(?:.*\()?(\d+) bytes\)?$", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def test_status_json_says_what_the_text_says(cluster):
    with open(os.path.join(cluster.n1, "f"), "wb") as f:
        f.write(b"x" * (1 << 20))
        f.flush()
        os.fsync(f.fileno())
    text = cluster.server.ctl("status")
    raw = cluster.server.ctl("--json", "status")
    assert raw.count("\n") == 1, "one line"
    doc = json.loads(raw)
    assert doc["unreachable"] == []
    [st] = doc["servers"]
    assert st["server"] == cluster.server.addr
    assert st["role"] == "standalone" and re.search(r"role:\s+standalone", text)
    assert st["epoch"] == 0 and st["replica_state"] == ""
    nums = numbers_in_text(text)
    for label, field in (("capacity", "capacity_bytes"), ("used", "used_bytes"),
                         ("granted", "granted_bytes"), ("reserved", "reserved_bytes"),
                         ("available", "available_bytes")):
        assert isinstance(st[field], int), (field, st[field])
    # Taken one after the other: the capacity is fixed, the rest may move a
    # little (grants); the ledger holds in both.
    assert st["capacity_bytes"] == nums["capacity"] == 4 << 30
    assert st["used_bytes"] >= 1 << 20
    assert st["available_bytes"] == (st["capacity_bytes"] - st["used_bytes"] -
                                     st["granted_bytes"] - st["reserved_bytes"])
    assert st["ledger_ok"] is True and re.search(r"ledger:\s+ok", text)
    assert int(re.search(r"inodes:\s+(\d+)", text).group(1)) == st["inodes"] >= 2
    assert len(st["sessions"]) == 2 and "sessions:        2" in text
    assert st["sessions_reclaiming"] == 0
    for ses in st["sessions"]:
        assert re.fullmatch(r"[0-9a-f]{16}", ses["client_id"])
        assert ses["client_id"] in text
        assert ses["lease_left_ms"] > 0 and ses["reclaiming"] is False
    assert st["write_budget_bytes"] > 0


def test_status_json_names_the_servers_that_did_not_answer(cluster):
    gone = f"127.0.0.1:{free_port()}"
    r = subprocess.run([CTL_BIN, f"--server={gone},{cluster.server.addr}", "--json", "status"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [s["server"] for s in doc["servers"]] == [cluster.server.addr]
    assert [u["server"] for u in doc["unreachable"]] == [gone]
    assert doc["unreachable"][0]["error"]

    r = subprocess.run([CTL_BIN, f"--server={gone}", "--json", "status"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1
    assert json.loads(r.stdout)["servers"] == []


def test_clients_lists_each_mount_with_what_it_holds(cluster):
    """`grantfsctl clients`: one line per mount (text) or object (--json)
    with its node, network address, mount point, last heartbeat, open and
    locked files and what its last heartbeat reported; `df --json`; exit 1
    naming the addresses when no server answers."""
    import fcntl
    import time

    def clients():
        r = subprocess.run([CTL_BIN, f"--server={cluster.server.addr}", "--json", "clients"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["server"] == cluster.server.addr
        return {c["client_name"].split(":", 1)[1]: c for c in doc["clients"]}

    path = os.path.join(cluster.n1, "held")
    with open(path, "wb") as f:
        f.write(os.urandom(1 << 20))
        fcntl.lockf(f, fcntl.LOCK_EX)
        deadline = time.monotonic() + 30
        while True:  # a heartbeat every lease / 3 carries the report
            c = clients()
            mine = c[cluster.n1]
            if mine["heartbeat_age_ms"] >= 0 and mine["locked_files"] == 1:
                break
            assert time.monotonic() < deadline, c
            time.sleep(0.5)
        assert set(c) == {cluster.n1, cluster.n2}
        assert mine["open_files"] >= 1
        assert mine["dirty_limit_bytes"] > 0  # fastwrite: the report came
        assert mine["kernel_inodes"] >= 1
        for key in ("grant_bytes", "credit_bytes", "dirty_bytes", "writes_in_flight"):
            assert isinstance(mine[key], int), (key, mine)
        assert re.fullmatch(r"[0-9a-f]{16}", mine["client_id"])
        assert mine["node"].startswith("node:")
        # The mount's network address: loopback here, the port its channel's.
        host, _, port = mine["address"].rpartition(":")
        assert host == "127.0.0.1" and 0 < int(port) < 65536, mine["address"]
        assert c[cluster.n2]["locked_files"] == 0
        r = subprocess.run([CTL_BIN, f"--server={cluster.server.addr}", "clients"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].startswith("2 mounts on ") and "heartbeat" in lines[1]
        row = next(line for line in lines if line.split()[3].endswith(cluster.n1))
        assert mine["client_id"] in row and " ago " in row
        assert row.split()[2] == mine["address"], row

    r = subprocess.run([CTL_BIN, f"--server={cluster.server.addr}", "--json", "df"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    df = json.loads(r.stdout)
    assert df["capacity_bytes"] == 4 << 30 and df["used_bytes"] >= 1 << 20
    assert 0 <= df["available_bytes"] <= df["capacity_bytes"] - df["used_bytes"]

    gone = f"127.0.0.1:{free_port()}"
    r = subprocess.run([CTL_BIN, f"--server={gone}", "clients"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and gone in r.stderr, r.stderr


def test_switchover_json_and_each_address_tried(tmp_base):
    """`grantfsctl switchover`: when no primary is among the addresses, exit
    1 naming each address and why (no answer: the error; the replica: its
    role); --json says the same as one object, and when it is done, who
    handed the role to whom."""
    t = Trio(tmp_base)
    try:
        t.start()
        a, b = t["A"].addr, t["B"].addr
        gone = f"127.0.0.1:{free_port()}"

        def ctl(*args):
            return subprocess.run([CTL_BIN, *args], capture_output=True, text=True, timeout=120)

        r = ctl(f"--server={gone},{b}", "switchover")
        assert r.returncode == 1 and r.stdout == "", r
        assert f"no primary among {gone},{b}" in r.stderr, r.stderr
        assert re.search(re.escape(gone) + r": \w+", r.stderr), r.stderr
        assert f"{b}: replica, not the primary" in r.stderr, r.stderr

        r = ctl(f"--server={gone},{b}", "--json", "switchover")
        assert r.returncode == 1 and r.stdout.count("\n") == 1, r
        doc = json.loads(r.stdout)
        assert doc["done"] is False and doc["server"] == "" and doc["new_primary"] == ""
        assert doc["error"].startswith("no primary among"), doc
        assert [x["server"] for x in doc["tried"]] == [gone, b]
        assert doc["tried"][0]["role"] == "" and doc["tried"][0]["error"], doc
        assert doc["tried"][1]["role"] == "replica", doc

        r = ctl(f"--server={gone},{b},{a}", "--json", "switchover")
        assert r.returncode == 0, r
        doc = json.loads(r.stdout)
        assert doc["done"] is True and doc["error"] == "", doc
        assert doc["server"] == a and doc["new_primary"] == b, doc
        assert isinstance(doc["took_ms"], int) and doc["took_ms"] >= 0, doc
        assert [x["role"] for x in doc["tried"]] == ["", "replica", "primary"], doc
        t.wait_role("B", "primary", 30)
    finally:
        t.stop()


def test_every_program_lists_all_its_flags_in_help():
    """--help of each program names its own flags and the TLS ones (abseil
    alone lists only flags of a file named like the program: none)."""
    for binary, flags in ((SERVER_BIN, ["--data_dir", "--role", "--metrics_addr", "--tls_dir"]),
                          (MOUNT_BIN, ["--leases", "--dirty_limit_mb", "--tls_dir"]),
                          (CTL_BIN, ["--data_dir", "--progress", "--json", "--tls_dir"]),
                          (NODE_AGENT_BIN, ["--config", "--state_dir", "--tls_dir"]),
                          (kit_binary("bench/grantfs-bench"), ["--dir", "--server", "--tls_dir"]),
                          (PROXY_BIN, ["--listen", "--target", "--delay_ms"])):
        r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
        out = r.stdout + r.stderr
        assert "No flags matched" not in out, binary
        for flag in flags:
            assert flag in out, (binary, flag)
