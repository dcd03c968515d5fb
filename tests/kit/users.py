"""Running a check as another user, and expecting an errno."""

import errno
import os
import pickle

import pytest

NOBODY = 65534
NOGROUP = 65534


def as_user(uid, gid, fn, groups=()):
    """Runs fn() in a child process with the given ids.

    Returns fn's result, or raises OSError with the child's errno.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups(list(groups))
            os.setgid(gid)
            os.setuid(uid)
            out = ("ok", fn())
        except OSError as e:
            out = ("err", e.errno)
        except BaseException as e:  # report, never run the rest of pytest in the child
            out = ("exc", repr(e))
        try:
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data)
    if kind == "err":
        raise OSError(value, os.strerror(value))
    if kind == "exc":
        raise RuntimeError(value)
    return value


def expect_errno(err, fn, *args, **kwargs):
    """Asserts that fn(*args) fails with exactly `err`."""
    with pytest.raises(OSError) as info:
        fn(*args, **kwargs)
    assert info.value.errno == err, (
        f"expected {errno.errorcode[err]}, got "
        f"{errno.errorcode.get(info.value.errno, info.value.errno)}")
