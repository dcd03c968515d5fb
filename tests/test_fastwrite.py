"""Fastwrite end to end: exact ENOSPC, the ledger, grants returned, bounded memory.

Promises 1 and 5 of DESIGN.md, checked on real servers and real mounts:
- ENOSPC comes from write(), never from fsync or close, and every byte that
  write() accepted is stored;
- used + granted + reserved <= capacity, and used is exact after a clean unmount;
- a dead mount's grant comes back within one lease;
- a mount's memory does not grow with the file size.
"""

import errno
import hashlib
import os
import re
import threading
import time

import pytest

from kit.topology import Standalone, running_standalone

MiB = 1 << 20


def status(cluster):
    out = cluster.server.ctl("status")

    def num(label):
        m = re.search(rf"^{label}:\s+.*?\((\d+) bytes\)", out, re.M)
        assert m, f"no {label} in status:\n{out}"
        return int(m.group(1))

    return {
        "capacity": num("capacity"),
        "used": num("used"),
        "granted": num("granted"),
        "ledger_ok": "ledger:          ok" in out,
        "text": out,
    }


def pattern(seed, n):
    """Non-zero bytes that differ per writer and per offset."""
    block = hashlib.sha256(str(seed).encode()).digest() * (MiB // 32)
    return (block * (n // len(block) + 1))[:n]


@pytest.fixture
def small_cluster(tmp_base):
    yield from running_standalone(tmp_base, capacity="256M", lease_ms=2000)


def test_enospc_comes_from_write_and_every_accepted_byte_is_stored(small_cluster):
    c = small_cluster
    writers = [(c.n1, 0), (c.n1, 1), (c.n2, 2), (c.n2, 3)]
    results = {}

    def writer(root, idx):
        path = os.path.join(root, f"w{idx}")
        data = pattern(idx, MiB)
        accepted = 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = None
        try:
            while True:
                try:
                    n = os.write(fd, data)
                except OSError as e:
                    err = ("write", e.errno)
                    break
                assert n == len(data), "short write"
                accepted += n
            try:
                os.fsync(fd)
            except OSError as e:
                err = ("fsync", e.errno)
        finally:
            try:
                os.close(fd)
            except OSError as e:
                err = ("close", e.errno)
        results[idx] = (path, accepted, err)

    threads = [threading.Thread(target=writer, args=w) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
        assert not t.is_alive(), "a writer hung"

    total = 0
    for idx, (path, accepted, err) in sorted(results.items()):
        # The last error seen must be ENOSPC from write(): fsync and close
        # of what write() accepted must succeed.
        assert err == ("write", errno.ENOSPC), f"writer {idx}: {err}"
        total += accepted
        # Every accepted byte is there, read back on the other node.
        other = c.n2 if path.startswith(c.n1) else c.n1
        with open(os.path.join(other, os.path.basename(path)), "rb") as f:
            got = f.read()
        assert len(got) == accepted, f"writer {idx}: {len(got)} stored, {accepted} accepted"
        expect = pattern(idx, MiB)
        for off in range(0, accepted, MiB):
            assert got[off:off + MiB] == expect, f"writer {idx}: bytes differ at {off}"
    s = status(c)
    assert s["ledger_ok"], s["text"]
    assert total <= s["capacity"]
    assert s["used"] <= s["capacity"]
    # The volume really was filled: at most the last partial MiB per writer
    # and the small per-write allocation floor stay unused.
    assert total >= s["capacity"] - 4 * MiB - len(writers) * MiB, (total, s["text"])


def test_ledger_is_exact_after_mixed_work_and_a_clean_unmount(tmp_base):
    c = Standalone(tmp_base, capacity="1G")
    c.start()
    try:
        sizes = {}

        def write(path, data, offset=0):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, data, offset)
            finally:
                os.close(fd)

        for i in range(8):
            p = os.path.join(c.n1 if i % 2 else c.n2, f"f{i}")
            write(p, pattern(i, 3 * MiB + 1000 * i))
            sizes[f"f{i}"] = 3 * MiB + 1000 * i
        # Overwrites of allocated bytes do not count twice.
        write(os.path.join(c.n1, "f0"), pattern(99, 2 * MiB), offset=MiB // 2)
        # Truncate down and up (up leaves a hole: nothing allocated).
        os.truncate(os.path.join(c.n2, "f1"), 5000)
        sizes["f1"] = 5000
        os.truncate(os.path.join(c.n1, "f2"), 64 * MiB)
        # Appends extend.
        with open(os.path.join(c.n2, "f3"), "ab") as f:
            f.write(pattern(3, MiB))
        sizes["f3"] += MiB
        # Unlinks give space back (after the background deleter).
        os.unlink(os.path.join(c.n1, "f4"))
        del sizes["f4"]
        for m in c.mounts:
            m.unmount()
        block = 4096
        # f2 grew to 64 MiB by truncate: the hole is not allocated, so it
        # still counts with the size it was written to (sizes["f2"]).
        expected = sum((n + block - 1) // block * block for n in sizes.values())
        deadline = time.monotonic() + 10
        while True:
            s = status(c)
            if s["used"] == expected or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert s["used"] == expected, s["text"]
        assert s["granted"] == 0, s["text"]
        assert s["ledger_ok"]
    finally:
        c.stop()


def test_a_dead_mounts_grant_comes_back_within_one_lease(small_cluster):
    c = small_cluster
    with open(os.path.join(c.n1, "f"), "wb") as f:
        f.write(pattern(1, MiB))
    s = status(c)
    assert s["granted"] > 0, s["text"]
    c.mounts[0].kill9()
    c.mounts[1].unmount()  # a clean unmount returns its grant at once
    killed = time.monotonic()
    lease_s = 2.0
    while status(c)["granted"] > 0:
        # One lease, plus the server's 1 s maintenance tick.
        assert time.monotonic() - killed < lease_s + 1.5, status(c)["text"]
        time.sleep(0.05)


def vm_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def test_mount_memory_stays_under_the_dirty_limit_plus_overhead(tmp_base):
    dirty_limit_mb = 32
    # Stated in docs/write-path.md: 60-100 MiB measured, 97 MiB once on a
    # loaded machine; 128 MiB allowed. The file is 16x the dirty limit, so
    # a cache that grew with it would pass the bound by far.
    overhead = 128 * MiB
    c = Standalone(tmp_base, capacity="2G", mount_extra=[f"--dirty_limit_mb={dirty_limit_mb}"])
    c.start()
    try:
        pid = c.mounts[0].proc.pid
        peak = 0
        data = pattern(7, MiB)
        with open(os.path.join(c.n1, "big"), "wb") as f:
            for i in range(16 * dirty_limit_mb):  # 16x the dirty limit
                f.write(data)
                if i % 8 == 0:
                    peak = max(peak, vm_rss(pid))
            f.flush()
            os.fsync(f.fileno())
        peak = max(peak, vm_rss(pid))
        assert peak <= dirty_limit_mb * MiB + overhead, f"peak RSS {peak / MiB:.0f} MiB"
        assert os.stat(os.path.join(c.n2, "big")).st_size == 16 * dirty_limit_mb * MiB
    finally:
        c.stop()


@pytest.fixture
def small_cluster_asking_statfs(tmp_base):
    """small_cluster whose mounts ask the server at every statfs (they keep
    the counts 1 s by default: client/statfs_cache.h)."""
    yield from running_standalone(tmp_base, capacity="256M", lease_ms=2000,
                                  mount_extra=["--statfs_max_age_ms=0"])


def test_statfs_available_is_what_a_new_grant_could_get(small_cluster_asking_statfs):
    c = small_cluster_asking_statfs
    with open(os.path.join(c.n1, "f"), "wb") as f:
        f.write(pattern(2, 4 * MiB))
        f.flush()
        # Background refills may move the ledger between two reads: compare
        # statfs with a ledger that was the same just before and after it.
        for _ in range(50):
            before = status(c)
            st = os.statvfs(c.n2)
            after = status(c)
            if (before["used"], before["granted"]) == (after["used"], after["granted"]):
                break
        avail = st.f_bavail * st.f_frsize
        assert avail == after["capacity"] - after["used"] - after["granted"], (avail, after["text"])
        assert after["granted"] > 0


def test_writethrough_mode_writes_and_holds_no_grant(tmp_base):
    c = Standalone(tmp_base, capacity="1G", mount_extra=["--write_mode=writethrough"])
    c.start()
    try:
        with open(os.path.join(c.n1, "f"), "wb") as f:
            f.write(pattern(5, 3 * MiB))
        with open(os.path.join(c.n2, "f"), "rb") as f:
            assert f.read() == pattern(5, 3 * MiB)
        assert status(c)["granted"] == 0
    finally:
        c.stop()


def session_field(cluster, name):
    """`name` (e.g. "recalls", "peak writes") of every session, in status order."""
    return [int(v) for v in re.findall(rf"{name} (\d+)", status(cluster)["text"])]


def test_a_full_volume_recalls_the_grant_an_idle_mount_holds(small_cluster):
    """Mount 1 writes a little and keeps its grant; mount 2 then fills the
    volume. Without recall mount 2 would stop a whole grant short of full."""
    c = small_cluster
    with open(os.path.join(c.n1, "small"), "wb") as f:
        f.write(pattern(1, MiB))
    s = status(c)
    held = s["granted"]
    assert held >= 8 * MiB, s["text"]  # the idle mount's unused grant
    accepted = 0
    data = pattern(2, MiB)
    with open(os.path.join(c.n2, "fill"), "wb", buffering=0) as f:
        while True:
            try:
                accepted += f.write(data)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
        os.fsync(f.fileno())
    s = status(c)
    assert s["ledger_ok"], s["text"]
    # What the other mount held came back: the volume filled to within one
    # write of capacity (block rounding and the 1 MiB file).
    assert accepted + MiB >= s["capacity"] - MiB, (accepted, s["text"])
    assert sum(session_field(c, "recalls")) >= 1, s["text"]
    with open(os.path.join(c.n1, "fill"), "rb") as f:
        got = hashlib.sha256(f.read()).hexdigest()
    n = accepted // MiB
    assert got == hashlib.sha256(data * n).hexdigest()


@pytest.mark.parametrize("budget_mb,expect_one", [(1, True), (64, False)])
def test_flushers_keep_within_the_servers_in_flight_credit(tmp_base, budget_mb, expect_one):
    """With a 1 MiB budget the server's credit lets one write be in flight
    at a time, whatever the number of flushers; with the default budget the
    four flushers overlap (the control that shows the check can fail)."""
    c = Standalone(tmp_base, capacity="2G", server_extra=[f"--write_backlog_mb={budget_mb}"],
                mount_extra=["--flushers=4"])
    c.start()
    try:
        data = pattern(3, 96 * MiB)
        with open(os.path.join(c.n1, "f"), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with open(os.path.join(c.n2, "f"), "rb") as f:
            assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()
        peaks = session_field(c, "peak writes")
        assert "write backlog:   0 of" in status(c)["text"]
        if expect_one:
            assert max(peaks) == 1, status(c)["text"]
        else:
            assert max(peaks) >= 2, status(c)["text"]
    finally:
        c.stop()
