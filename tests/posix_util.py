"""Helpers the POSIX tests share: libc for the calls Python lacks, small file helpers.

Used by test_posix_files.py, test_posix_names.py and test_posix_attrs.py.
"""

import ctypes
import ctypes.util
import os

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

AT_FDCWD = -100
MIB = 1 << 20


def _raise_errno(what, path=None):
    e = ctypes.get_errno()
    raise OSError(e, f"{what}: {os.strerror(e)}", path)


def write_file(path, data, mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        assert os.write(fd, data) == len(data)
    finally:
        os.close(fd)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def _umask():
    old = os.umask(0)
    os.umask(old)
    return old
