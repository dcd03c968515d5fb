"""POSIX operations through one GrantFS mount: success and error cases.

Every test runs against a fresh server and a fresh mount (`cluster.n1`);
results are checked with exact values and exact errnos.
"""

import ctypes
import ctypes.util
import errno
import hashlib
import os
import stat
import time

import pytest

from kit.topology import running_standalone
from kit.users import expect_errno
from treesnap import poll_until

# --- helpers -------------------------------------------------------------------

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2
GIB = 1 << 30
MIB = 1 << 20


def _raise_errno(what, path=None):
    e = ctypes.get_errno()
    raise OSError(e, f"{what}: {os.strerror(e)}", path)


def renameat2(old, new, flags):
    _libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                ctypes.c_uint]
    _libc.renameat2.restype = ctypes.c_int
    if _libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new), flags) != 0:
        _raise_errno("renameat2", old)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def utimensat(path, atime, mtime):
    """atime/mtime: (sec, nsec) tuples, or UTIME_NOW / UTIME_OMIT."""
    def ts(v):
        if isinstance(v, tuple):
            return _Timespec(v[0], v[1])
        return _Timespec(0, v)
    times = (_Timespec * 2)(ts(atime), ts(mtime))
    _libc.utimensat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_Timespec),
                                ctypes.c_int]
    _libc.utimensat.restype = ctypes.c_int
    if _libc.utimensat(AT_FDCWD, os.fsencode(path), times, 0) != 0:
        _raise_errno("utimensat", path)


def fallocate(fd, mode, offset, length):
    _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    _libc.fallocate.restype = ctypes.c_int
    if _libc.fallocate(fd, mode, offset, length) != 0:
        _raise_errno("fallocate")


class _Dirent(ctypes.Structure):
    _fields_ = [("d_ino", ctypes.c_uint64), ("d_off", ctypes.c_int64),
                ("d_reclen", ctypes.c_ushort), ("d_type", ctypes.c_ubyte),
                ("d_name", ctypes.c_char * 256)]


def raw_readdir(path):
    """All names readdir(3) returns, including '.' and '..'."""
    _libc.opendir.argtypes = [ctypes.c_char_p]
    _libc.opendir.restype = ctypes.c_void_p
    _libc.readdir.argtypes = [ctypes.c_void_p]
    _libc.readdir.restype = ctypes.POINTER(_Dirent)
    _libc.closedir.argtypes = [ctypes.c_void_p]
    d = _libc.opendir(os.fsencode(path))
    if not d:
        _raise_errno("opendir", path)
    names = []
    try:
        while True:
            ctypes.set_errno(0)
            ent = _libc.readdir(d)
            if not ent:
                if ctypes.get_errno() != 0:
                    _raise_errno("readdir", path)
                break
            names.append(os.fsdecode(ent.contents.d_name))
    finally:
        _libc.closedir(d)
    return names


def write_file(path, data, mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        assert os.write(fd, data) == len(data)
    finally:
        os.close(fd)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def tick():
    """Lets the clock move on so that timestamps of the next step differ."""
    time.sleep(0.01)


# --- files: create / open / read / write / close --------------------------------


class TestFiles:
    def test_create_write_read_close(self, cluster):
        p = os.path.join(cluster.n1, "f")
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o640)
        assert os.write(fd, b"hello world") == 11
        assert os.pread(fd, 5, 6) == b"world"
        assert os.fstat(fd).st_size == 11
        os.close(fd)
        st = os.stat(p)
        assert stat.S_ISREG(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o640 & ~_umask()
        assert st.st_size == 11
        assert st.st_nlink == 1
        assert (st.st_uid, st.st_gid) == (0, 0)
        assert read_file(p) == b"hello world"

    def test_overwrite_in_the_middle_and_sparse_write(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"0123456789")
        fd = os.open(p, os.O_RDWR)
        os.pwrite(fd, b"ab", 3)
        os.pwrite(fd, b"Z", 20)  # leaves a hole 10..19
        os.close(fd)
        assert read_file(p) == b"012ab56789" + b"\0" * 10 + b"Z"
        assert os.stat(p).st_size == 21

    def test_hole_below_a_cached_write_reads_as_zeros(self, cluster):
        # Through the descriptor that wrote past the end (the data still in
        # the mount's write cache): the hole below it is zeros, not EOF.
        p = os.path.join(cluster.n1, "f")
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            data = os.urandom(45179)
            os.pwrite(fd, data, 0x2440C)
            assert os.fstat(fd).st_size == 0x2440C + 45179
            assert os.pread(fd, 0x30AD, 0x14827) == b"\0" * 0x30AD
            os.fsync(fd)
            assert os.pread(fd, 0x30AD, 0x14827) == b"\0" * 0x30AD
            assert os.pread(fd, 45179, 0x2440C) == data
        finally:
            os.close(fd)
        q = os.path.join(cluster.n1, "g")
        fd = os.open(q, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, b"a" * 100, 0)
            os.pwrite(fd, b"b" * 100, 200000)
            assert os.pread(fd, 1000, 1000) == b"\0" * 1000
            assert os.pread(fd, 1000, 199950) == b"\0" * 50 + b"b" * 100
        finally:
            os.close(fd)
        assert read_file(q) == b"a" * 100 + b"\0" * (200000 - 100) + b"b" * 100

    def test_size_never_goes_back_while_a_flush_lands(self, cluster):
        # Found by tests/fsx.py: a GETATTR answered before a flush landed,
        # read after the flush left the write cache, showed the old size;
        # the kernel then cut its size (reads hit EOF, O_APPEND wrote inside
        # the file).
        p = os.path.join(cluster.n1, "f")
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for i in range(1500):
                os.ftruncate(fd, 0)  # flushes: the server's size is 0
                os.pwrite(fd, b"x" * 16384, 4096)  # cached
                os.pwrite(fd, b"y", 0)  # seals the extent above: flushed now
                assert os.fstat(fd).st_size == 20480, f"iteration {i}"
        finally:
            os.close(fd)

    def test_o_trunc_empties_file(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"x" * 1000)
        os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))
        assert os.stat(p).st_size == 0
        assert read_file(p) == b""

    def test_rewrite_existing_file_shorter_with_open_w(self, cluster):
        # open(..., "w") of an existing name: O_CREAT|O_TRUNC on a cached entry.
        p = os.path.join(cluster.n1, "f")
        with open(p, "wb") as f:
            f.write(b"a long first version\n")
        with open(p, "wb") as f:
            f.write(b"short\n")
        assert os.stat(p).st_size == 6
        assert read_file(p) == b"short\n"

    def test_o_append_writes_at_end(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"abc")
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"def")
        os.close(fd)
        assert read_file(p) == b"abcdef"

    def test_o_excl_on_existing_is_eexist(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"keep")
        expect_errno(errno.EEXIST, os.open, p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        assert read_file(p) == b"keep"

    def test_open_missing_is_enoent(self, cluster):
        expect_errno(errno.ENOENT, os.open, os.path.join(cluster.n1, "missing"), os.O_RDONLY)
        expect_errno(errno.ENOENT, os.stat, os.path.join(cluster.n1, "missing"))
        expect_errno(errno.ENOENT, os.open, os.path.join(cluster.n1, "nodir", "f"),
                     os.O_WRONLY | os.O_CREAT, 0o644)

    def test_open_directory_for_writing_is_eisdir(self, cluster):
        d = os.path.join(cluster.n1, "d")
        os.mkdir(d)
        expect_errno(errno.EISDIR, os.open, d, os.O_WRONLY)

    def test_o_directory_on_file_is_enotdir(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        expect_errno(errno.ENOTDIR, os.open, p, os.O_RDONLY | os.O_DIRECTORY)


def _umask():
    old = os.umask(0)
    os.umask(old)
    return old


# --- directories -----------------------------------------------------------------


class TestDirectories:
    def test_mkdir_and_rmdir(self, cluster):
        d = os.path.join(cluster.n1, "d")
        os.mkdir(d, 0o750)
        st = os.stat(d)
        assert stat.S_ISDIR(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o750 & ~_umask()
        assert st.st_nlink == 2
        os.mkdir(os.path.join(d, "sub"))
        assert os.stat(d).st_nlink == 3
        os.rmdir(os.path.join(d, "sub"))
        assert os.stat(d).st_nlink == 2
        os.rmdir(d)
        assert not os.path.exists(d)

    def test_mkdir_existing_is_eexist(self, cluster):
        d = os.path.join(cluster.n1, "d")
        os.mkdir(d)
        expect_errno(errno.EEXIST, os.mkdir, d)
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        expect_errno(errno.EEXIST, os.mkdir, p)

    def test_rmdir_non_empty_is_enotempty(self, cluster):
        d = os.path.join(cluster.n1, "d")
        os.mkdir(d)
        write_file(os.path.join(d, "f"), b"x")
        expect_errno(errno.ENOTEMPTY, os.rmdir, d)
        assert os.path.isdir(d)

    def test_mkdir_under_file_is_enotdir(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        expect_errno(errno.ENOTDIR, os.mkdir, os.path.join(p, "sub"))

    def test_rmdir_of_file_is_enotdir(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        expect_errno(errno.ENOTDIR, os.rmdir, p)
        assert os.path.isfile(p)

    def test_unlink_of_directory_is_eisdir(self, cluster):
        d = os.path.join(cluster.n1, "d")
        os.mkdir(d)
        expect_errno(errno.EISDIR, os.unlink, d)
        assert os.path.isdir(d)

    def test_unlink_missing_is_enoent(self, cluster):
        expect_errno(errno.ENOENT, os.unlink, os.path.join(cluster.n1, "missing"))
        expect_errno(errno.ENOENT, os.rmdir, os.path.join(cluster.n1, "missing"))

    def test_readdir_returns_exactly_the_names(self, cluster):
        d = os.path.join(cluster.n1, "d")
        os.mkdir(d)
        assert sorted(raw_readdir(d)) == [".", ".."]
        names = {f"file-{i:04d}" for i in range(300)} | {"sub", "x" * 255}
        for n in names:
            if n == "sub":
                os.mkdir(os.path.join(d, n))
            else:
                write_file(os.path.join(d, n), b"")
        got = raw_readdir(d)
        assert len(got) == len(names) + 2, "duplicates or missing entries"
        assert sorted(got) == sorted(names | {".", ".."})
        assert sorted(os.listdir(d)) == sorted(names)
        os.unlink(os.path.join(d, "file-0007"))
        assert sorted(os.listdir(d)) == sorted(names - {"file-0007"})

    def test_readdir_of_root(self, cluster):
        write_file(os.path.join(cluster.n1, "a"), b"")
        os.mkdir(os.path.join(cluster.n1, "b"))
        assert sorted(raw_readdir(cluster.n1)) == [".", "..", "a", "b"]


# --- special files -------------------------------------------------------------------


class TestSpecialFiles:
    def test_mkfifo(self, cluster):
        p = os.path.join(cluster.n1, "fifo")
        os.mkfifo(p, 0o600)
        st = os.stat(p)
        assert stat.S_ISFIFO(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600
        # A FIFO works as a pipe.
        fd = os.open(p, os.O_RDWR | os.O_NONBLOCK)
        try:
            os.write(fd, b"through the fifo")
            assert os.read(fd, 100) == b"through the fifo"
        finally:
            os.close(fd)
        expect_errno(errno.EEXIST, os.mkfifo, p)

    def test_mknod_char_device_as_root(self, cluster):
        p = os.path.join(cluster.n1, "null")
        os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        st = os.stat(p)
        assert stat.S_ISCHR(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o666 & ~_umask()
        assert st.st_rdev == os.makedev(1, 3)
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3)


class TestSymlinks:
    def test_symlink_and_readlink(self, cluster):
        target = os.path.join(cluster.n1, "f")
        write_file(target, b"data")
        link = os.path.join(cluster.n1, "l")
        os.symlink("f", link)
        assert os.readlink(link) == "f"
        st = os.lstat(link)
        assert stat.S_ISLNK(st.st_mode)
        assert st.st_size == 1
        assert read_file(link) == b"data"
        expect_errno(errno.EEXIST, os.symlink, "other", link)

    def test_dangling_symlink(self, cluster):
        link = os.path.join(cluster.n1, "l")
        os.symlink("nowhere", link)
        assert os.readlink(link) == "nowhere"
        expect_errno(errno.ENOENT, os.stat, link)

    def test_readlink_of_regular_file_is_einval(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        expect_errno(errno.EINVAL, os.readlink, p)

    def test_4000_byte_target(self, cluster):
        link = os.path.join(cluster.n1, "long")
        target = ("a" * 199 + "/") * 20  # 4000 bytes
        assert len(target) == 4000
        os.symlink(target, link)
        assert os.readlink(link) == target
        assert os.lstat(link).st_size == 4000

    @pytest.mark.parametrize("size", [4096, 5000])
    def test_target_of_4096_or_more_bytes_is_enametoolong(self, cluster, size):
        link = os.path.join(cluster.n1, "long")
        expect_errno(errno.ENAMETOOLONG, os.symlink, "b" * size, link)
        assert not os.path.lexists(link)


class TestHardLinks:
    def test_link_counts(self, cluster):
        a = os.path.join(cluster.n1, "a")
        b = os.path.join(cluster.n1, "b")
        write_file(a, b"shared")
        assert os.stat(a).st_nlink == 1
        os.link(a, b)
        assert os.stat(a).st_nlink == 2
        assert os.stat(b).st_nlink == 2
        assert os.stat(a).st_ino == os.stat(b).st_ino
        assert read_file(b) == b"shared"
        os.unlink(a)
        assert os.stat(b).st_nlink == 1
        assert read_file(b) == b"shared"

    def test_link_to_existing_name_is_eexist(self, cluster):
        a = os.path.join(cluster.n1, "a")
        b = os.path.join(cluster.n1, "b")
        write_file(a, b"")
        write_file(b, b"")
        expect_errno(errno.EEXIST, os.link, a, b)

    def test_link_of_directory_is_eperm(self, cluster):
        d = os.path.join(cluster.n1, "d")
        os.mkdir(d)
        expect_errno(errno.EPERM, os.link, d, os.path.join(cluster.n1, "d2"))


# --- rename --------------------------------------------------------------------------


class TestRename:
    def test_plain(self, cluster):
        a = os.path.join(cluster.n1, "a")
        b = os.path.join(cluster.n1, "b")
        write_file(a, b"AAA")
        ino = os.stat(a).st_ino
        os.rename(a, b)
        assert not os.path.exists(a)
        assert read_file(b) == b"AAA"
        assert os.stat(b).st_ino == ino
        assert sorted(os.listdir(cluster.n1)) == ["b"]

    def test_over_existing_file(self, cluster):
        a = os.path.join(cluster.n1, "a")
        b = os.path.join(cluster.n1, "b")
        write_file(a, b"new")
        write_file(b, b"old contents")
        os.rename(a, b)
        assert read_file(b) == b"new"
        assert os.stat(b).st_nlink == 1
        assert sorted(os.listdir(cluster.n1)) == ["b"]

    def test_across_directories(self, cluster):
        d1 = os.path.join(cluster.n1, "d1")
        d2 = os.path.join(cluster.n1, "d2")
        os.mkdir(d1)
        os.mkdir(d2)
        write_file(os.path.join(d1, "f"), b"moving")
        os.rename(os.path.join(d1, "f"), os.path.join(d2, "g"))
        assert os.listdir(d1) == []
        assert os.listdir(d2) == ["g"]
        assert read_file(os.path.join(d2, "g")) == b"moving"

    def test_directory_across_directories_fixes_nlink(self, cluster):
        d1 = os.path.join(cluster.n1, "d1")
        d2 = os.path.join(cluster.n1, "d2")
        os.mkdir(d1)
        os.mkdir(d2)
        os.mkdir(os.path.join(d1, "sub"))
        assert os.stat(d1).st_nlink == 3
        os.rename(os.path.join(d1, "sub"), os.path.join(d2, "sub"))
        assert os.stat(d1).st_nlink == 2
        assert os.stat(d2).st_nlink == 3
        assert os.path.isdir(os.path.join(d2, "sub"))

    def test_directory_over_empty_directory(self, cluster):
        a = os.path.join(cluster.n1, "a")
        b = os.path.join(cluster.n1, "b")
        os.mkdir(a)
        write_file(os.path.join(a, "inside"), b"x")
        os.mkdir(b)
        os.rename(a, b)
        assert not os.path.exists(a)
        assert os.listdir(b) == ["inside"]
        assert sorted(os.listdir(cluster.n1)) == ["b"]

    def test_directory_over_non_empty_directory_is_enotempty(self, cluster):
        a = os.path.join(cluster.n1, "a")
        b = os.path.join(cluster.n1, "b")
        os.mkdir(a)
        os.mkdir(b)
        write_file(os.path.join(b, "f"), b"")
        expect_errno(errno.ENOTEMPTY, os.rename, a, b)
        assert os.path.isdir(a)
        assert os.listdir(b) == ["f"]

    def test_file_over_directory_is_eisdir(self, cluster):
        f = os.path.join(cluster.n1, "f")
        d = os.path.join(cluster.n1, "d")
        write_file(f, b"")
        os.mkdir(d)
        expect_errno(errno.EISDIR, os.rename, f, d)
        assert os.path.isfile(f)
        assert os.path.isdir(d)

    def test_directory_over_file_is_enotdir(self, cluster):
        f = os.path.join(cluster.n1, "f")
        d = os.path.join(cluster.n1, "d")
        write_file(f, b"")
        os.mkdir(d)
        expect_errno(errno.ENOTDIR, os.rename, d, f)
        assert os.path.isfile(f)
        assert os.path.isdir(d)

    def test_directory_into_its_own_subdirectory_is_einval(self, cluster):
        d = os.path.join(cluster.n1, "d")
        os.makedirs(os.path.join(d, "sub"))
        expect_errno(errno.EINVAL, os.rename, d, os.path.join(d, "sub", "d"))
        expect_errno(errno.EINVAL, os.rename, d, os.path.join(d, "x"))
        assert os.listdir(d) == ["sub"]

    def test_missing_source_is_enoent(self, cluster):
        expect_errno(errno.ENOENT, os.rename, os.path.join(cluster.n1, "missing"),
                     os.path.join(cluster.n1, "x"))

    def test_rename_noreplace(self, cluster):
        a = os.path.join(cluster.n1, "a")
        b = os.path.join(cluster.n1, "b")
        write_file(a, b"A")
        write_file(b, b"B")
        expect_errno(errno.EEXIST, renameat2, a, b, RENAME_NOREPLACE)
        assert read_file(a) == b"A"
        assert read_file(b) == b"B"
        c = os.path.join(cluster.n1, "c")
        renameat2(a, c, RENAME_NOREPLACE)
        assert not os.path.exists(a)
        assert read_file(c) == b"A"

    def test_rename_exchange(self, cluster):
        a = os.path.join(cluster.n1, "a")
        b = os.path.join(cluster.n1, "b")
        write_file(a, b"contents of a")
        write_file(b, b"contents of b, longer")
        ino_a, ino_b = os.stat(a).st_ino, os.stat(b).st_ino
        renameat2(a, b, RENAME_EXCHANGE)
        assert read_file(a) == b"contents of b, longer"
        assert read_file(b) == b"contents of a"
        assert os.stat(a).st_ino == ino_b
        assert os.stat(b).st_ino == ino_a

    def test_rename_exchange_file_and_directory_across_dirs(self, cluster):
        d1 = os.path.join(cluster.n1, "d1")
        d2 = os.path.join(cluster.n1, "d2")
        os.mkdir(d1)
        os.mkdir(d2)
        write_file(os.path.join(d1, "x"), b"file")
        os.mkdir(os.path.join(d2, "y"))
        renameat2(os.path.join(d1, "x"), os.path.join(d2, "y"), RENAME_EXCHANGE)
        assert os.path.isdir(os.path.join(d1, "x"))
        assert read_file(os.path.join(d2, "y")) == b"file"
        assert os.stat(d1).st_nlink == 3
        assert os.stat(d2).st_nlink == 2

    def test_rename_exchange_with_missing_target_is_enoent(self, cluster):
        a = os.path.join(cluster.n1, "a")
        write_file(a, b"A")
        expect_errno(errno.ENOENT, renameat2, a, os.path.join(cluster.n1, "missing"),
                     RENAME_EXCHANGE)
        assert read_file(a) == b"A"


# --- truncate -------------------------------------------------------------------------


class TestTruncate:
    def test_truncate_up_and_down(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"0123456789")
        os.truncate(p, 10000)
        assert os.stat(p).st_size == 10000
        assert read_file(p) == b"0123456789" + b"\0" * 9990
        os.truncate(p, 4)
        assert os.stat(p).st_size == 4
        assert read_file(p) == b"0123"
        # Growing again must show zeros, not the old bytes 4..9.
        os.truncate(p, 10)
        assert read_file(p) == b"0123" + b"\0" * 6
        os.truncate(p, 0)
        assert os.stat(p).st_size == 0
        assert read_file(p) == b""

    def test_truncate_across_chunk_boundaries(self, cluster):
        p = os.path.join(cluster.n1, "f")
        data = os.urandom(9 * MIB)
        write_file(p, data)
        os.truncate(p, 5 * MIB + 7)
        assert read_file(p) == data[:5 * MIB + 7]
        os.truncate(p, 9 * MIB)
        assert read_file(p) == data[:5 * MIB + 7] + b"\0" * (4 * MIB - 7)

    def test_ftruncate(self, cluster):
        p = os.path.join(cluster.n1, "f")
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"abcdefgh")
            os.ftruncate(fd, 3)
            assert os.fstat(fd).st_size == 3
            assert os.pread(fd, 100, 0) == b"abc"
            os.ftruncate(fd, 6)
            assert os.fstat(fd).st_size == 6
            assert os.pread(fd, 100, 0) == b"abc\0\0\0"
        finally:
            os.close(fd)
        assert read_file(p) == b"abc\0\0\0"

    def test_truncate_of_directory_is_eisdir(self, cluster):
        d = os.path.join(cluster.n1, "d")
        os.mkdir(d)
        expect_errno(errno.EISDIR, os.truncate, d, 0)

    def test_truncate_missing_is_enoent(self, cluster):
        expect_errno(errno.ENOENT, os.truncate, os.path.join(cluster.n1, "missing"), 0)


# --- setattr ---------------------------------------------------------------------------


class TestSetAttr:
    def test_chmod(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        for mode in (0o600, 0o4755, 0o2711, 0o1777, 0o000):
            os.chmod(p, mode)
            st = os.stat(p)
            assert stat.S_IMODE(st.st_mode) == mode
            assert stat.S_ISREG(st.st_mode)

    def test_chmod_directory(self, cluster):
        d = os.path.join(cluster.n1, "d")
        os.mkdir(d)
        os.chmod(d, 0o1777)
        st = os.stat(d)
        assert stat.S_IMODE(st.st_mode) == 0o1777
        assert stat.S_ISDIR(st.st_mode)

    def test_chown(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        os.chown(p, 65534, 65534)
        st = os.stat(p)
        assert (st.st_uid, st.st_gid) == (65534, 65534)
        os.chown(p, -1, 100)
        st = os.stat(p)
        assert (st.st_uid, st.st_gid) == (65534, 100)
        os.chown(p, 0, -1)
        st = os.stat(p)
        assert (st.st_uid, st.st_gid) == (0, 100)

    def test_lchown_of_symlink(self, cluster):
        link = os.path.join(cluster.n1, "l")
        os.symlink("nowhere", link)
        os.lchown(link, 65534, 65534)
        st = os.lstat(link)
        assert (st.st_uid, st.st_gid) == (65534, 65534)

    def test_utime_explicit(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        os.utime(p, (1000000000, 1100000000))
        st = os.stat(p)
        assert st.st_atime_ns == 1000000000 * 10**9
        assert st.st_mtime_ns == 1100000000 * 10**9

    def test_utime_none_is_now(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        os.utime(p, (1000000000, 1100000000))
        before = time.time_ns()
        os.utime(p, None)
        after = time.time_ns()
        st = os.stat(p)
        # "now" of the server clock, which is this machine's clock; allow
        # for the coarse kernel clock (a tick) on both sides.
        slack = 50 * 10**6
        assert before - slack <= st.st_mtime_ns <= after + slack
        assert before - slack <= st.st_atime_ns <= after + slack

    def test_utime_ns_exact(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        atime = 1234567890 * 10**9 + 123456789
        mtime = 1300000000 * 10**9 + 987654321
        os.utime(p, ns=(atime, mtime))
        st = os.stat(p)
        assert st.st_atime_ns == atime
        assert st.st_mtime_ns == mtime

    def test_utime_before_1970(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        os.utime(p, ns=(-10**9 - 5, -1))
        st = os.stat(p)
        assert st.st_atime_ns == -10**9 - 5
        assert st.st_mtime_ns == -1

    def test_utimensat_omit(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        os.utime(p, ns=(1000 * 10**9 + 1, 2000 * 10**9 + 2))
        # atime set, mtime omitted
        utimensat(p, (3000, 3), UTIME_OMIT)
        st = os.stat(p)
        assert st.st_atime_ns == 3000 * 10**9 + 3
        assert st.st_mtime_ns == 2000 * 10**9 + 2
        # mtime set, atime omitted
        utimensat(p, UTIME_OMIT, (4000, 4))
        st = os.stat(p)
        assert st.st_atime_ns == 3000 * 10**9 + 3
        assert st.st_mtime_ns == 4000 * 10**9 + 4
        # both omitted: nothing changes
        utimensat(p, UTIME_OMIT, UTIME_OMIT)
        st = os.stat(p)
        assert st.st_atime_ns == 3000 * 10**9 + 3
        assert st.st_mtime_ns == 4000 * 10**9 + 4

    def test_utimensat_now_with_omit(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        os.utime(p, ns=(1000 * 10**9 + 1, 2000 * 10**9 + 2))
        before = time.time_ns()
        utimensat(p, UTIME_OMIT, UTIME_NOW)
        after = time.time_ns()
        st = os.stat(p)
        slack = 50 * 10**6
        assert st.st_atime_ns == 1000 * 10**9 + 1
        assert before - slack <= st.st_mtime_ns <= after + slack
        utimensat(p, UTIME_NOW, UTIME_OMIT)
        st2 = os.stat(p)
        assert st2.st_mtime_ns == st.st_mtime_ns
        assert before - slack <= st2.st_atime_ns <= time.time_ns() + slack


# --- timestamps -----------------------------------------------------------------------


class TestTimestamps:
    def test_create_updates_parent_mtime_and_ctime(self, cluster):
        d = os.path.join(cluster.n1, "d")
        os.mkdir(d)
        before = os.stat(d)
        tick()
        write_file(os.path.join(d, "f"), b"")
        after = os.stat(d)
        assert after.st_mtime_ns > before.st_mtime_ns
        assert after.st_ctime_ns > before.st_ctime_ns

    def test_mkdir_and_unlink_update_parent_mtime(self, cluster):
        d = os.path.join(cluster.n1, "d")
        os.mkdir(d)
        s0 = os.stat(d)
        tick()
        os.mkdir(os.path.join(d, "sub"))
        s1 = os.stat(d)
        assert s1.st_mtime_ns > s0.st_mtime_ns
        tick()
        os.rmdir(os.path.join(d, "sub"))
        s2 = os.stat(d)
        assert s2.st_mtime_ns > s1.st_mtime_ns
        assert s2.st_ctime_ns > s1.st_ctime_ns

    def test_new_file_has_equal_times(self, cluster):
        p = os.path.join(cluster.n1, "f")
        before = time.time_ns()
        write_file(p, b"")
        st = os.stat(p)
        assert st.st_mtime_ns == st.st_ctime_ns
        assert st.st_mtime_ns >= before - 50 * 10**6

    def test_chmod_changes_ctime_not_mtime(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"x")
        before = os.stat(p)
        tick()
        os.chmod(p, 0o600)
        after = os.stat(p)
        assert after.st_ctime_ns > before.st_ctime_ns
        assert after.st_mtime_ns == before.st_mtime_ns

    def test_chown_changes_ctime_not_mtime(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"x")
        before = os.stat(p)
        tick()
        os.chown(p, 65534, 65534)
        after = os.stat(p)
        assert after.st_ctime_ns > before.st_ctime_ns
        assert after.st_mtime_ns == before.st_mtime_ns

    def test_write_changes_mtime_and_ctime(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"x")
        before = os.stat(p)
        tick()
        fd = os.open(p, os.O_WRONLY)
        os.write(fd, b"y")
        os.close(fd)
        after = os.stat(p)
        assert after.st_mtime_ns > before.st_mtime_ns
        assert after.st_ctime_ns > before.st_ctime_ns

    def test_truncate_changes_mtime_and_ctime(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"xyz")
        before = os.stat(p)
        tick()
        os.truncate(p, 1)
        after = os.stat(p)
        assert after.st_mtime_ns > before.st_mtime_ns
        assert after.st_ctime_ns > before.st_ctime_ns

    def test_read_does_not_change_mtime(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"xyz")
        before = os.stat(p)
        tick()
        assert read_file(p) == b"xyz"
        after = os.stat(p)
        assert after.st_mtime_ns == before.st_mtime_ns
        assert after.st_ctime_ns == before.st_ctime_ns

    def test_rename_updates_both_directories(self, cluster):
        d1 = os.path.join(cluster.n1, "d1")
        d2 = os.path.join(cluster.n1, "d2")
        os.mkdir(d1)
        os.mkdir(d2)
        write_file(os.path.join(d1, "f"), b"")
        b1, b2 = os.stat(d1), os.stat(d2)
        tick()
        os.rename(os.path.join(d1, "f"), os.path.join(d2, "f"))
        a1, a2 = os.stat(d1), os.stat(d2)
        assert a1.st_mtime_ns > b1.st_mtime_ns
        assert a2.st_mtime_ns > b2.st_mtime_ns
        assert a1.st_ctime_ns > b1.st_ctime_ns
        assert a2.st_ctime_ns > b2.st_ctime_ns

    def test_link_updates_file_ctime(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        before = os.stat(p)
        tick()
        os.link(p, os.path.join(cluster.n1, "g"))
        after = os.stat(p)
        assert after.st_ctime_ns > before.st_ctime_ns
        assert after.st_mtime_ns == before.st_mtime_ns

    def test_unlink_updates_remaining_link_ctime(self, cluster):
        p = os.path.join(cluster.n1, "f")
        q = os.path.join(cluster.n1, "g")
        write_file(p, b"")
        os.link(p, q)
        before = os.stat(q)
        tick()
        os.unlink(p)
        after = os.stat(q)
        assert after.st_ctime_ns > before.st_ctime_ns


# --- statfs ------------------------------------------------------------------------------


class TestStatFs:
    def test_statvfs(self, cluster):
        sv = os.statvfs(cluster.n1)
        assert sv.f_bsize == 4096
        assert sv.f_frsize == 4096
        assert sv.f_blocks * sv.f_frsize == 4 * GIB
        assert sv.f_namemax == 255
        assert sv.f_bfree <= sv.f_blocks
        assert sv.f_bavail <= sv.f_bfree

    def test_writing_uses_space(self, cluster):
        before = os.statvfs(cluster.n1).f_bfree
        write_file(os.path.join(cluster.n1, "f"), b"z" * (8 * MIB))
        after = os.statvfs(cluster.n1).f_bfree
        assert before - after >= (8 * MIB) // 4096


# --- xattrs --------------------------------------------------------------------------------


class TestXattrs:
    def test_set_get_list_remove(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        assert os.listxattr(p) == []
        os.setxattr(p, "user.a", b"alpha")
        os.setxattr(p, "user.b", b"")
        os.setxattr(p, "user.bin", bytes(range(256)))
        assert os.getxattr(p, "user.a") == b"alpha"
        assert os.getxattr(p, "user.b") == b""
        assert os.getxattr(p, "user.bin") == bytes(range(256))
        assert sorted(os.listxattr(p)) == ["user.a", "user.b", "user.bin"]
        os.setxattr(p, "user.a", b"replaced")
        assert os.getxattr(p, "user.a") == b"replaced"
        os.removexattr(p, "user.a")
        assert sorted(os.listxattr(p)) == ["user.b", "user.bin"]
        expect_errno(errno.ENODATA, os.getxattr, p, "user.a")

    def test_xattr_on_directory(self, cluster):
        d = os.path.join(cluster.n1, "d")
        os.mkdir(d)
        os.setxattr(d, "user.tag", b"dir")
        assert os.getxattr(d, "user.tag") == b"dir"
        assert os.listxattr(d) == ["user.tag"]

    def test_xattr_create_on_existing_is_eexist(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        os.setxattr(p, "user.a", b"1", os.XATTR_CREATE)
        expect_errno(errno.EEXIST, os.setxattr, p, "user.a", b"2", os.XATTR_CREATE)
        assert os.getxattr(p, "user.a") == b"1"

    def test_xattr_replace_on_missing_is_enodata(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        expect_errno(errno.ENODATA, os.setxattr, p, "user.a", b"2", os.XATTR_REPLACE)
        assert os.listxattr(p) == []
        os.setxattr(p, "user.a", b"1")
        os.setxattr(p, "user.a", b"2", os.XATTR_REPLACE)
        assert os.getxattr(p, "user.a") == b"2"

    def test_get_and_remove_missing_is_enodata(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        expect_errno(errno.ENODATA, os.getxattr, p, "user.missing")
        expect_errno(errno.ENODATA, os.removexattr, p, "user.missing")

    @pytest.mark.parametrize("name", ["system.foo", "foo", "unprefixed.name"])
    def test_unsupported_namespace_is_eopnotsupp(self, cluster, name):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"")
        expect_errno(errno.EOPNOTSUPP, os.setxattr, p, name, b"v")
        assert os.listxattr(p) == []


# --- fallocate -------------------------------------------------------------------------------


class TestFallocate:
    def test_posix_fallocate_extends_and_allocates(self, cluster):
        p = os.path.join(cluster.n1, "f")
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"head")
            blocks_before = os.fstat(fd).st_blocks
            os.posix_fallocate(fd, 0, 3 * MIB)
            st = os.fstat(fd)
            assert st.st_size == 3 * MIB
            assert st.st_blocks > blocks_before
            assert st.st_blocks * 512 >= 3 * MIB
            assert os.pread(fd, 8, 0) == b"head\0\0\0\0"
            assert os.pread(fd, 16, 3 * MIB - 16) == b"\0" * 16
        finally:
            os.close(fd)
        assert os.stat(p).st_size == 3 * MIB

    def test_posix_fallocate_inside_file_keeps_size(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"q" * 10000)
        fd = os.open(p, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 100, 200)
            assert os.fstat(fd).st_size == 10000
        finally:
            os.close(fd)
        assert read_file(p) == b"q" * 10000

    def test_punch_hole_is_eopnotsupp(self, cluster):
        p = os.path.join(cluster.n1, "f")
        write_file(p, b"w" * 8192)
        fd = os.open(p, os.O_RDWR)
        try:
            expect_errno(errno.EOPNOTSUPP, fallocate, fd,
                         FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096)
        finally:
            os.close(fd)
        assert read_file(p) == b"w" * 8192


# --- name and path limits ----------------------------------------------------------------------


TIB = 1 << 40  # the server's largest file size


@pytest.fixture(params=["fastwrite", "writethrough"])
def any_mode_cluster(request, tmp_base):
    yield from running_standalone(tmp_base, nodes=1, mount_extra=[f"--write_mode={request.param}"])


class TestMaxFileSize:
    def test_writes_at_the_limit_are_checked_at_write(self, any_mode_cluster):
        # A write crossing the limit stores what lies below it (a short
        # write, as Linux does at s_maxbytes); one at or past it is EFBIG at
        # write(), in every mode: no accepted byte can become unflushable.
        p = os.path.join(any_mode_cluster.n1, "f")
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            data = os.urandom(8192)
            assert os.pwrite(fd, data, TIB - 4096) == 4096
            expect_errno(errno.EFBIG, os.pwrite, fd, data, TIB)
            expect_errno(errno.EFBIG, os.pwrite, fd, b"x", TIB)
            expect_errno(errno.EFBIG, os.pwrite, fd, data, 1 << 62)
            expect_errno(errno.EFBIG, os.pwrite, fd, b"x", (1 << 63) - 2)
            # 2 bytes there overflow the offset: the kernel's EINVAL, as on ext4.
            expect_errno(errno.EINVAL, os.pwrite, fd, b"xy", (1 << 63) - 2)
            os.fsync(fd)
            assert os.fstat(fd).st_size == TIB
            assert os.pread(fd, 8192, TIB - 4096) == data[:4096]
            expect_errno(errno.EFBIG, os.ftruncate, fd, TIB + 1)
            expect_errno(errno.EFBIG, os.posix_fallocate, fd, TIB - 4096, 8192)
            os.ftruncate(fd, 4096)  # still possible from this mount
            assert os.fstat(fd).st_size == 4096
        finally:
            os.close(fd)
        assert os.stat(p).st_size == 4096
        expect_errno(errno.EFBIG, os.truncate, p, TIB + 4096)


class TestNameLimits:
    def test_255_byte_name_works(self, cluster):
        name = "n" * 255
        p = os.path.join(cluster.n1, name)
        write_file(p, b"long name")
        assert read_file(p) == b"long name"
        assert os.listdir(cluster.n1) == [name]
        d = os.path.join(cluster.n1, "d" * 255)
        os.mkdir(d)
        assert os.path.isdir(d)
        os.rename(p, os.path.join(d, "m" * 255))
        assert read_file(os.path.join(d, "m" * 255)) == b"long name"

    def test_255_byte_multibyte_name_works(self, cluster):
        name = "\u00e9" * 127 + "x"  # 255 bytes in UTF-8
        assert len(name.encode()) == 255
        p = os.path.join(cluster.n1, name)
        write_file(p, b"")
        assert os.listdir(cluster.n1) == [name]

    def test_names_are_bytes_not_utf8(self, cluster):
        # Linux names are bytes: ones that are not valid UTF-8 work
        # everywhere a name does, and come back exactly as given.
        n1, n2 = os.fsencode(cluster.n1), os.fsencode(cluster.n2)
        bad = b"bad\xff\xfe"
        write_file(os.path.join(n1, bad), b"bytes")
        os.mkdir(os.path.join(n1, b"dir\xc3\x28"))
        os.symlink(b"target\xff\x80", os.path.join(n1, b"ln\xfe"))
        os.link(os.path.join(n1, bad), os.path.join(n1, b"hard\xed\xa0\x80"))
        os.rename(os.path.join(n1, b"dir\xc3\x28"), os.path.join(n1, b"moved\x80"))
        assert sorted(os.listdir(n1)) == sorted(
            [bad, b"moved\x80", b"ln\xfe", b"hard\xed\xa0\x80"])
        assert sorted(os.listdir(n2)) == sorted(os.listdir(n1))
        assert read_file(os.path.join(n2, bad)) == b"bytes"
        assert os.stat(os.path.join(n2, bad)).st_nlink == 2
        assert os.readlink(os.path.join(n2, b"ln\xfe")) == b"target\xff\x80"
        assert os.path.isdir(os.path.join(n2, b"moved\x80"))
        os.setxattr(os.path.join(n1, bad), b"user.x\xff", b"v\xff")
        assert os.getxattr(os.path.join(n2, bad), b"user.x\xff") == b"v\xff"
        assert os.fsencode("user.x\udcff") in [os.fsencode(x) for x in
                                                os.listxattr(os.path.join(n2, bad))]
        os.removexattr(os.path.join(n1, bad), b"user.x\xff")
        expect_errno(errno.ENODATA, os.getxattr, os.path.join(n1, bad), b"user.x\xff")
        os.unlink(os.path.join(n1, bad))
        os.rmdir(os.path.join(n1, b"moved\x80"))
        expect_errno(errno.ENOENT, os.stat, os.path.join(n2, b"moved\x80"))

    def test_256_byte_name_is_enametoolong(self, cluster):
        p = os.path.join(cluster.n1, "n" * 256)
        expect_errno(errno.ENAMETOOLONG, os.open, p, os.O_WRONLY | os.O_CREAT, 0o644)
        expect_errno(errno.ENAMETOOLONG, os.mkdir, p)
        expect_errno(errno.ENAMETOOLONG, os.symlink, "t", p)
        src = os.path.join(cluster.n1, "src")
        write_file(src, b"")
        expect_errno(errno.ENAMETOOLONG, os.rename, src, p)
        expect_errno(errno.ENAMETOOLONG, os.link, src, p)
        assert os.listdir(cluster.n1) == ["src"]

    def test_path_of_about_4000_bytes(self, cluster):
        comp = "p" * 200
        depth = 19
        root_fd = os.open(cluster.n1, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fd = os.dup(root_fd)
            for _ in range(depth):
                os.mkdir(comp, dir_fd=fd)
                nfd = os.open(comp, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = nfd
            fname = "f" * 180
            rel = "/".join([comp] * depth + [fname])
            assert 3990 <= len(rel) <= 4010
            # Create through the whole ~4000-byte relative path in one call.
            wfd = os.open(rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=root_fd)
            os.write(wfd, b"deep")
            os.close(wfd)
            assert os.listdir(fd) == [fname]
            os.close(fd)
            full = os.path.join(cluster.n1, rel)
            assert len(full.encode()) < 4096
            assert read_file(full) == b"deep"
            assert os.stat(full).st_size == 4
        finally:
            os.close(root_fd)


# --- open-unlinked files --------------------------------------------------------------------------


class TestUnlinkedWhileOpen:
    def test_file_unlinked_while_open_stays_usable(self, cluster):
        p = os.path.join(cluster.n1, "f")
        base_free = os.statvfs(cluster.n1).f_bfree
        data = os.urandom(8 * MIB)
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        closed = False
        try:
            os.write(fd, data)
            os.unlink(p)
            assert not os.path.exists(p)
            assert os.listdir(cluster.n1) == []
            assert os.fstat(fd).st_nlink == 0
            assert os.pread(fd, len(data), 0) == data
            os.pwrite(fd, b"after unlink", 8 * MIB)
            assert os.fstat(fd).st_size == 8 * MIB + 12
            assert os.pread(fd, 100, 8 * MIB) == b"after unlink"
            assert os.pread(fd, 16, 100) == data[100:116]
            # Space stays taken while the file is open.
            assert os.statvfs(cluster.n1).f_bfree <= base_free - (8 * MIB) // 4096
            os.close(fd)
            closed = True
        finally:
            if not closed:
                os.close(fd)
        freed = poll_until(lambda: os.statvfs(cluster.n1).f_bfree == base_free, 5.0)
        assert freed, (f"f_bfree {os.statvfs(cluster.n1).f_bfree} did not return to "
                       f"{base_free} within 5 s after close")

    def test_unlink_closed_file_frees_space(self, cluster):
        p = os.path.join(cluster.n1, "f")
        base_free = os.statvfs(cluster.n1).f_bfree
        write_file(p, b"k" * (4 * MIB))
        assert os.statvfs(cluster.n1).f_bfree < base_free
        os.unlink(p)
        assert poll_until(lambda: os.statvfs(cluster.n1).f_bfree == base_free, 5.0)


# --- large I/O -------------------------------------------------------------------------------------


class TestLargeIO:
    def test_64_mib_file_with_1_mib_writes(self, cluster):
        p = os.path.join(cluster.n1, "big")
        h = hashlib.sha256()
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for i in range(64):
                block = os.urandom(MIB)
                h.update(block)
                assert os.write(fd, block) == MIB
        finally:
            os.close(fd)
        assert os.stat(p).st_size == 64 * MIB
        r = hashlib.sha256()
        n = 0
        with open(p, "rb") as f:
            while True:
                chunk = f.read(MIB)
                if not chunk:
                    break
                n += len(chunk)
                r.update(chunk)
        assert n == 64 * MIB
        assert r.hexdigest() == h.hexdigest()

    def test_unaligned_reads_across_chunks(self, cluster):
        p = os.path.join(cluster.n1, "f")
        data = os.urandom(9 * MIB + 123)
        write_file(p, data)
        fd = os.open(p, os.O_RDONLY)
        try:
            for off, n in ((0, 1), (4 * MIB - 3, 10), (4 * MIB - 1, 4 * MIB + 2),
                           (9 * MIB, 1000), (len(data) - 1, 10), (len(data), 10)):
                assert os.pread(fd, n, off) == data[off:off + n]
        finally:
            os.close(fd)
