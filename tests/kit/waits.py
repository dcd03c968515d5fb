"""Polling with a deadline: every wait of the kit has one."""

import socket
import time

from .errors import WaitTimeout


def wait_for(pred, timeout=20.0, what="condition", interval=0.05):
    """Calls pred() every `interval` s until it returns true; WaitTimeout
    (a TimeoutError) naming `what` after `timeout` s. An exception from
    pred() (say, "the server exited") ends the wait at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(interval)
    raise WaitTimeout(f"timed out after {timeout:.0f} s waiting for {what}")


def listening(host, port):
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False
