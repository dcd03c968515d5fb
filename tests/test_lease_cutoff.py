"""A mount cut off from the server for longer than its session lease.

The server then ends the session and takes its space grant back, for others
to use. The mount has a lease of its own (a tenth shorter, on the monotonic
clock): once it has lapsed, write() is no longer accepted against the grant
(it goes to the server, which decides), and when the server answers again
and says the session was lost, the mount stops counting on the old grant.
Before, the cut-off mount kept accepting writes into a grant that was gone:
write() succeeded on a full volume and close() said ENOSPC."""

import os
import re
import threading
import time

from kit.mount import Mount, NsMount
from kit.netlab import NetLab
from kit.server import Server
from kit.waits import wait_for
from test_real_disk import block, expected, write_on

MIB = 1 << 20
LEASE_MS = 2000


def sessions(server):
    return int(re.search(r"sessions:\s+(\d+)", server.ctl("status")).group(1))


def test_a_mount_cut_off_past_its_lease_accepts_no_write_the_volume_cannot_hold(tmp_base):
    lab = NetLab(["a"])
    server = mount_a = mount_b = None
    try:
        data = os.path.join(tmp_base, "data")
        os.makedirs(data)
        server = Server(data, capacity="256M", lease_ms=LEASE_MS, log_dir=tmp_base)
        server.addr = f"{lab.ip('root')}:{server.port}"
        server.start()
        mount_a = NsMount(server.addr, os.path.join(tmp_base, "a"),
                          lambda argv: lab.wrap("a", argv)).start()
        mount_b = Mount(server.addr, os.path.join(tmp_base, "b")).start()

        # A writes and so holds a grant (its first refill is 64 MiB).
        with open(os.path.join(mount_a.path, "before"), "wb") as f:
            f.write(block("a", 0))
            f.flush()
            os.fsync(f.fileno())
        assert sessions(server) == 2
        # Each session's lease, as status shows it, is within one lease.
        leases = [float(x) for x in re.findall(r" lease ([-+][0-9.]+)s", server.ctl("status"))]
        assert len(leases) == 2 and all(0 < x <= LEASE_MS / 1000 for x in leases), leases

        # A is cut off until the server ends its session and takes its grant.
        lab.cut("a")
        wait_for(lambda: sessions(server) == 1, timeout=4 * LEASE_MS / 1000,
                 what="the server ending the cut-off mount's session")

        # B fills the volume, the space A's grant held included.
        fd = os.open(os.path.join(mount_b.path, "fill"), os.O_WRONLY | os.O_CREAT, 0o644)
        filled, error = write_on(fd, "b")
        assert error is None, error
        assert filled > 200 * MIB, f"B could write only {filled} bytes"

        # A writes while still cut off, then is healed. Every byte its
        # write() accepts must be fsync'd, closed and read back.
        results = {}

        def writer():
            fd = os.open(os.path.join(mount_a.path, "during"), os.O_WRONLY | os.O_CREAT, 0o644)
            results["during"] = write_on(fd, "during")

        t = threading.Thread(target=writer)
        t.start()
        time.sleep(1.0)
        lab.heal("a")
        t.join(timeout=120)
        assert not t.is_alive(), "A's write did not end after the heal"
        accepted, error = results["during"]
        assert error is None, error
        assert accepted < 8 * MIB, f"A accepted {accepted} bytes on a full volume"
        with open(os.path.join(mount_b.path, "during"), "rb") as f:
            assert f.read() == expected("during", accepted)

        # A learned that its grant is gone, and the ledger is exact.
        wait_for(lambda: "released this mount's grant" in open(mount_a.log_path).read(),
                 timeout=10, what="the mount told that its session was lost")
        status = server.ctl("status")
        assert re.search(r"ledger:\s+ok", status), status

        # Once B's file is gone, A writes at local speed again.
        os.unlink(os.path.join(mount_b.path, "fill"))
        wait_for(lambda: write_ok(mount_a.path), timeout=20, what="A writing again")
    except BaseException:
        for m in (mount_a, mount_b, server):
            if m is not None:
                with open(m.log_path) as f:
                    lines = [line for line in f if "flush of inode" not in line]
                print(f"--- {m.log_path}\n{''.join(lines[-40:])}")
        raise
    finally:
        for m in (mount_a, mount_b):
            if m is not None:
                m.unmount()
        if server is not None:
            server.stop()
        lab.destroy()
    assert not lab.leftovers()


def write_ok(path):
    try:
        with open(os.path.join(path, "after"), "wb") as f:
            f.write(block("after", 0) * 8)
            f.flush()
            os.fsync(f.fileno())
        return True
    except OSError:
        return False
