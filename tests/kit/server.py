"""grantfs-server processes and what they say (`grantfsctl status --json`)."""

import json
import os
import signal
import subprocess
import time

from .build import CTL, SERVER, binary
from .errors import HarnessError
from .ports import free_port
from .processes import stop_process, tail_log
from .waits import wait_for


def ctl_argv(addr, *args, build=None):
    return [binary(CTL, build), f"--server={addr}", *args]


def _number(text):
    # The JSON printer may write a large whole number as 1.6777216e+07.
    v = float(text)
    return int(v) if v.is_integer() else v


def parse_status(text):
    """The first server's object of `grantfsctl status --json` output (a
    dict named as in client/status_json.h: "role", "epoch",
    "replica_state", "used_bytes", "sessions", ...), or None."""
    try:
        servers = json.loads(text, parse_float=_number).get("servers", [])
    except ValueError:
        return None
    return servers[0] if servers else None


def status(addr, timeout=5, enter=None, build=None):
    """What the server at addr says about itself (parse_status), or None
    when it does not answer within `timeout` s. `enter` wraps the argv (a
    network namespace)."""
    argv = ctl_argv(addr, "--json", "status", build=build)
    try:
        r = subprocess.run(enter(argv) if enter else argv, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None
    return parse_status(r.stdout) if r.returncode == 0 else None


def statuses(argvs, timeout=2):
    """{name: parse_status or None} of {name: status argv}, asked in parallel."""
    procs = {n: subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 stdin=subprocess.DEVNULL, text=True) for n, a in argvs.items()}
    out = {}
    deadline = time.monotonic() + timeout
    for n, p in procs.items():
        try:
            so, _ = p.communicate(timeout=max(0.01, deadline - time.monotonic()))
            out[n] = parse_status(so) if p.returncode == 0 else None
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            out[n] = None
    return out


def role_support(server_bin, scratch, timeout=5.0):
    """Whether this grantfs-server can run a witness: (True, "") or (False,
    what it said) when it refuses `--role=witness` with exit status 2 and
    "not available". Any other outcome counts as supported (a real problem
    then shows in the drill itself, not hidden as a skip)."""
    os.makedirs(scratch, exist_ok=True)
    log = os.path.join(scratch, "witness-probe.log")
    argv = [server_bin, "--role=witness", f"--listen=127.0.0.1:{free_port()}",
            f"--data_dir={os.path.join(scratch, 'witness-probe')}"]
    with open(log, "wb") as f:
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=15)
    said = tail_log(log, 600).strip()
    if rc == 2 and "not available" in said:
        return False, said.splitlines()[-1]
    return True, ""


class Server:
    """One standalone grantfs-server process on 127.0.0.1:<port>, its log
    server-<port>.log in log_dir (default: beside data_dir). Ready when
    `grantfsctl status` answers."""

    def __init__(self, data_dir, port=None, capacity="4G", lease_ms=10000, extra=(),
                 log_dir=None, build=None):
        self.data_dir = data_dir
        self.port = port or free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.capacity = capacity
        self.lease_ms = lease_ms
        self.extra = list(extra)
        self.build = build
        self.proc = None
        self.log_path = os.path.join(log_dir or os.path.dirname(data_dir),
                                     f"server-{self.port}.log")

    def start(self):
        # The server refuses a missing data directory (a data disk that is
        # not mounted); an empty one is a new volume.
        os.makedirs(self.data_dir, exist_ok=True)
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                [binary(SERVER, self.build), f"--data_dir={self.data_dir}",
                 f"--listen={self.addr}", f"--capacity={self.capacity}",
                 f"--lease_ms={self.lease_ms}", *self.extra],
                stdout=log, stderr=subprocess.STDOUT)
        wait_for(self.ready, what=f"server on {self.addr}")
        return self

    def ready(self):
        if self.proc.poll() is not None:
            raise HarnessError(f"server exited with {self.proc.returncode}: {self.log()}")
        return subprocess.run(ctl_argv(self.addr, "status", build=self.build),
                              capture_output=True, timeout=10).returncode == 0

    def ctl(self, *args):
        """grantfsctl --server=<this> ARGS; its stdout (asserts exit 0)."""
        r = subprocess.run(ctl_argv(self.addr, *args, build=self.build), capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def status(self, timeout=5):
        """status() of this server."""
        return status(self.addr, timeout, build=self.build)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self):
        if self.proc:
            stop_process(self.proc)

    def log(self):
        return tail_log(self.log_path)
