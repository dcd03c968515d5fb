"""The cluster secret: a mount with the right one works, a wrong one is refused."""

import os
import subprocess

from kit.build import MOUNT_BIN
from kit.mount import Mount, is_mounted
from kit.server import Server


def test_cluster_secret_is_required(tmp_base):
    secret = os.path.join(tmp_base, "secret")
    with open(secret, "w") as f:
        f.write("correct horse\n")
    wrong = os.path.join(tmp_base, "wrong")
    with open(wrong, "w") as f:
        f.write("battery staple\n")
    server = Server(os.path.join(tmp_base, "data"), extra=[f"--secret_file={secret}"])
    # grantfsctl has no secret here, so readiness is checked by the mount.
    server.ready = lambda: True
    server.start()
    try:
        good = Mount(server.addr, os.path.join(tmp_base, "good"), [f"--secret_file={secret}"])
        good.start()
        with open(os.path.join(good.path, "f"), "w") as f:
            f.write("ok")
        good.unmount()
        bad = os.path.join(tmp_base, "bad")
        os.makedirs(bad)
        r = subprocess.run([MOUNT_BIN, f"{server.addr}:/", bad, f"--secret_file={wrong}",
                            f"--log_file={bad}.log", "--retry_ms=2000"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0
        assert not is_mounted(bad)
        with open(f"{bad}.log") as f:
            assert "cluster secret" in f.read()
    finally:
        server.stop()
