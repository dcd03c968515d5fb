"""POSIX file data through one GrantFS mount: success and error cases.

Create, open, read, write, truncate, fallocate, the largest file size,
unlinked open files and large I/O.

Every test runs against a fresh server and a fresh mount (`cluster.n1`);
results are checked with exact values and exact errnos.
"""

import ctypes
import errno
import hashlib
import os
import stat

import pytest

from kit.topology import running_standalone
from kit.users import expect_errno
from posix_util import MIB, _libc, _raise_errno, _umask, read_file, write_file
from treesnap import poll_until


# --- helpers -------------------------------------------------------------------

FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2


def fallocate(fd, mode, offset, length):
    _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    _libc.fallocate.restype = ctypes.c_int
    if _libc.fallocate(fd, mode, offset, length) != 0:
        _raise_errno("fallocate")


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


# --- the largest file size ---------------------------------------------------------------------


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
