"""POSIX names through one GrantFS mount: success and error cases.

Directories, special files, symlinks, hard links, rename, and the limits of
names and paths.

Every test runs against a fresh server and a fresh mount (`cluster.n1`);
results are checked with exact values and exact errnos.
"""

import ctypes
import errno
import os
import stat

import pytest

from kit.users import expect_errno
from posix_util import AT_FDCWD, _libc, _raise_errno, _umask, read_file, write_file


# --- helpers -------------------------------------------------------------------

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


def renameat2(old, new, flags):
    _libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                ctypes.c_uint]
    _libc.renameat2.restype = ctypes.c_int
    if _libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new), flags) != 0:
        _raise_errno("renameat2", old)


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


# --- name and path limits ----------------------------------------------------------------------


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
