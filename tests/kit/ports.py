"""Loopback ports."""

import socket
import threading

_lock = threading.Lock()
_handed = set()  # ports handed out by this process: never twice


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago, and not one this
    process handed out before (the kernel may give a port just released
    again at once: two servers of one test then got the same port)."""
    for _ in range(1000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with _lock:
            if port not in _handed:
                _handed.add(port)
                return port
    raise RuntimeError("no loopback port left that this process did not hand out")
