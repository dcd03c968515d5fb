"""Permission checks through GrantFS mounts, as a non-root user (nobody).

Objects are prepared as root, then the operation under test runs in a forked
child with the credentials of nobody (kit.users.as_user), whose errno is
checked exactly.
"""

import errno
import os
import stat

import pytest

from kit.users import NOBODY, NOGROUP, as_user, expect_errno

OTHER_UID = 1000
GROUP = 100


def nobody(fn, groups=()):
    return as_user(NOBODY, NOGROUP, fn, groups=groups)


def make_file(path, data=b"", mode=0o644, uid=0, gid=0):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return path


def make_dir(path, mode, uid=0, gid=0):
    os.mkdir(path)
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return path


def create(path, mode=0o644):
    def fn():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
    return fn


def read(path):
    def fn():
        with open(path, "rb") as f:
            return f.read()
    return fn


def open_for_write(path):
    def fn():
        os.close(os.open(path, os.O_WRONLY))
    return fn


def expect_child_errno(err, fn, groups=()):
    expect_errno(err, nobody, fn, groups=groups)


class TestCreate:
    def test_create_in_root_owned_0755_dir_is_eacces(self, cluster):
        d = make_dir(os.path.join(cluster.n1, "d"), 0o755)
        expect_child_errno(errno.EACCES, create(os.path.join(d, "f")))
        expect_child_errno(errno.EACCES, lambda: os.mkdir(os.path.join(d, "sub")))
        expect_child_errno(errno.EACCES, lambda: os.symlink("t", os.path.join(d, "l")))
        assert os.listdir(d) == []

    def test_unlink_in_root_owned_0755_dir_is_eacces(self, cluster):
        d = make_dir(os.path.join(cluster.n1, "d"), 0o755)
        f = make_file(os.path.join(d, "f"), uid=NOBODY, gid=NOGROUP)
        expect_child_errno(errno.EACCES, lambda: os.unlink(f))
        expect_child_errno(errno.EACCES, lambda: os.rename(f, os.path.join(d, "g")))
        assert os.listdir(d) == ["f"]

    def test_create_in_0777_dir_is_owned_by_creator(self, cluster):
        d = make_dir(os.path.join(cluster.n1, "d"), 0o777)
        f = os.path.join(d, "f")
        nobody(create(f))
        st = os.stat(f)
        assert (st.st_uid, st.st_gid) == (NOBODY, NOGROUP)
        sub = os.path.join(d, "sub")
        nobody(lambda: os.mkdir(sub))
        st = os.stat(sub)
        assert (st.st_uid, st.st_gid) == (NOBODY, NOGROUP)
        assert stat.S_ISDIR(st.st_mode)

    def test_setgid_directory_passes_its_group(self, cluster):
        d = os.path.join(cluster.n1, "d")
        os.mkdir(d)
        os.chmod(d, 0o2777)
        os.chown(d, -1, GROUP)
        st = os.stat(d)
        assert stat.S_IMODE(st.st_mode) == 0o2777, "chown cleared S_ISGID of a directory"
        assert st.st_gid == GROUP
        f = os.path.join(d, "f")
        sub = os.path.join(d, "sub")
        nobody(create(f))
        nobody(lambda: os.mkdir(sub, 0o755))
        st = os.stat(f)
        assert (st.st_uid, st.st_gid) == (NOBODY, GROUP)
        assert not st.st_mode & stat.S_ISGID
        st = os.stat(sub)
        assert (st.st_uid, st.st_gid) == (NOBODY, GROUP)
        assert st.st_mode & stat.S_ISGID
        # ...and the subdirectory passes both on again.
        nobody(create(os.path.join(sub, "g")))
        assert os.stat(os.path.join(sub, "g")).st_gid == GROUP


class TestReadWrite:
    def test_read_0600_root_file_is_eacces(self, cluster):
        f = make_file(os.path.join(cluster.n1, "secret"), b"top secret", 0o600)
        expect_child_errno(errno.EACCES, read(f))
        with open(f, "rb") as fh:  # root still can
            assert fh.read() == b"top secret"

    def test_read_0644_root_file_works(self, cluster):
        f = make_file(os.path.join(cluster.n1, "pub"), b"public", 0o644)
        assert nobody(read(f)) == b"public"

    def test_write_0444_file_is_eacces(self, cluster):
        root_f = make_file(os.path.join(cluster.n1, "ro-root"), b"r", 0o444)
        own_f = make_file(os.path.join(cluster.n1, "ro-own"), b"o", 0o444,
                          uid=NOBODY, gid=NOGROUP)
        for f in (root_f, own_f):
            expect_child_errno(errno.EACCES, open_for_write(f))
            expect_child_errno(errno.EACCES, lambda: os.truncate(f, 0))
        with open(root_f, "rb") as fh:
            assert fh.read() == b"r"
        with open(own_f, "rb") as fh:
            assert fh.read() == b"o"

    def test_write_0666_root_file_works(self, cluster):
        f = make_file(os.path.join(cluster.n1, "rw"), b"", 0o666)

        def fn():
            with open(f, "ab") as fh:
                fh.write(b"by nobody")
        nobody(fn)
        with open(f, "rb") as fh:
            assert fh.read() == b"by nobody"

    def test_lookup_in_0700_dir_is_eacces(self, cluster):
        d = make_dir(os.path.join(cluster.n1, "private"), 0o700)
        f = make_file(os.path.join(d, "f"), b"x", 0o644)
        expect_child_errno(errno.EACCES, lambda: os.stat(f))
        expect_child_errno(errno.EACCES, lambda: os.listdir(d))


class TestOwnership:
    def test_chmod_of_root_owned_file_is_eperm(self, cluster):
        f = make_file(os.path.join(cluster.n1, "f"), mode=0o666)
        expect_child_errno(errno.EPERM, lambda: os.chmod(f, 0o777))
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o666

    def test_chown_is_eperm(self, cluster):
        f = make_file(os.path.join(cluster.n1, "f"), mode=0o666)
        expect_child_errno(errno.EPERM, lambda: os.chown(f, NOBODY, NOGROUP))
        own = make_file(os.path.join(cluster.n1, "own"), uid=NOBODY, gid=NOGROUP)
        expect_child_errno(errno.EPERM, lambda: os.chown(own, 0, -1))
        expect_child_errno(errno.EPERM, lambda: os.chown(own, -1, GROUP))
        assert (os.stat(f).st_uid, os.stat(f).st_gid) == (0, 0)
        assert (os.stat(own).st_uid, os.stat(own).st_gid) == (NOBODY, NOGROUP)

    def test_owner_may_chmod_and_chgrp_to_own_group(self, cluster):
        own = make_file(os.path.join(cluster.n1, "own"), uid=NOBODY, gid=NOGROUP)
        nobody(lambda: os.chmod(own, 0o600))
        assert stat.S_IMODE(os.stat(own).st_mode) == 0o600
        nobody(lambda: os.chown(own, -1, GROUP), groups=[GROUP])
        assert os.stat(own).st_gid == GROUP

    @pytest.mark.parametrize("mode", [0o4777, 0o2777, 0o6777])
    @pytest.mark.parametrize("flags", [os.O_WRONLY, os.O_RDWR])
    def test_write_by_non_owner_clears_set_id_bits(self, cluster, mode, flags):
        # Linux: a write by someone who may write but is not the owner
        # succeeds and drops set-user-ID and set-group-ID.
        f = make_file(os.path.join(cluster.n1, "f"), b"old", mode, uid=OTHER_UID, gid=OTHER_UID)

        def write():
            fd = os.open(f, flags)
            try:
                return os.write(fd, b"new")
            finally:
                os.close(fd)

        assert nobody(write) == 3
        st = os.stat(os.path.join(cluster.n2, "f"))
        assert stat.S_IMODE(st.st_mode) == 0o777
        with open(os.path.join(cluster.n2, "f"), "rb") as fh:
            assert fh.read() == b"new"

    def test_non_owner_cannot_clear_set_id_bits_without_write_access(self, cluster):
        f = make_file(os.path.join(cluster.n1, "f"), b"", 0o4755, uid=OTHER_UID, gid=OTHER_UID)
        expect_child_errno(errno.EPERM, lambda: os.chmod(f, 0o755))
        expect_child_errno(errno.EPERM, lambda: os.chmod(f, 0o4777))
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o4755

    def test_ftruncate_through_a_descriptor_of_a_mode_0_file(self, cluster):
        # Permission is checked at open: a file created with mode 0 and
        # O_RDWR can be truncated through that descriptor, then removed.
        d = make_dir(os.path.join(cluster.n1, "d"), 0o777)
        f = os.path.join(d, "f")

        def fn():
            fd = os.open(f, os.O_CREAT | os.O_RDWR, 0)
            try:
                os.write(fd, b"abcdef")
                os.ftruncate(fd, 2)
                os.ftruncate(fd, 0)
                os.ftruncate(fd, 10)
                return os.fstat(fd).st_size
            finally:
                os.close(fd)

        assert nobody(fn) == 10
        assert os.stat(f).st_size == 10
        assert stat.S_IMODE(os.stat(f).st_mode) == 0
        expect_child_errno(errno.EACCES, lambda: os.truncate(f, 0))  # by name: checked now
        # open(O_CREAT) of the existing name is an open: checked.
        expect_child_errno(errno.EACCES, lambda: os.open(f, os.O_CREAT | os.O_RDWR, 0))
        nobody(lambda: os.unlink(f))
        assert os.listdir(d) == []

    def test_utime_explicit_on_others_file_is_eperm(self, cluster):
        f = make_file(os.path.join(cluster.n1, "f"), mode=0o666)
        os.utime(f, ns=(5 * 10**9, 6 * 10**9))
        expect_child_errno(errno.EPERM, lambda: os.utime(f, (1, 2)))
        assert os.stat(f).st_mtime_ns == 6 * 10**9
        # "now" only needs write permission.
        nobody(lambda: os.utime(f, None))
        assert os.stat(f).st_mtime_ns != 6 * 10**9


class TestSticky:
    def test_cannot_remove_or_rename_others_file(self, cluster):
        d = make_dir(os.path.join(cluster.n1, "tmp"), 0o1777)
        f = make_file(os.path.join(d, "theirs"), b"keep", 0o666, uid=OTHER_UID, gid=OTHER_UID)
        expect_child_errno(errno.EPERM, lambda: os.unlink(f))
        expect_child_errno(errno.EPERM, lambda: os.rename(f, os.path.join(d, "mine-now")))
        assert sorted(os.listdir(d)) == ["theirs"]
        with open(f, "rb") as fh:
            assert fh.read() == b"keep"

    def test_cannot_replace_others_file_by_rename(self, cluster):
        d = make_dir(os.path.join(cluster.n1, "tmp"), 0o1777)
        theirs = make_file(os.path.join(d, "theirs"), b"keep", 0o666,
                           uid=OTHER_UID, gid=OTHER_UID)
        mine = os.path.join(d, "mine")
        nobody(create(mine))
        expect_child_errno(errno.EPERM, lambda: os.rename(mine, theirs))
        with open(theirs, "rb") as fh:
            assert fh.read() == b"keep"

    def test_can_remove_and_rename_own_file(self, cluster):
        d = make_dir(os.path.join(cluster.n1, "tmp"), 0o1777)
        make_file(os.path.join(d, "theirs"), uid=OTHER_UID, gid=OTHER_UID)
        mine = os.path.join(d, "mine")
        nobody(create(mine))
        nobody(lambda: os.rename(mine, os.path.join(d, "mine2")))
        assert sorted(os.listdir(d)) == ["mine2", "theirs"]
        nobody(lambda: os.unlink(os.path.join(d, "mine2")))
        assert os.listdir(d) == ["theirs"]

    def test_directory_owner_can_remove_others_file(self, cluster):
        d = make_dir(os.path.join(cluster.n1, "tmp"), 0o1777, uid=NOBODY, gid=NOGROUP)
        make_file(os.path.join(d, "theirs"), uid=OTHER_UID, gid=OTHER_UID)
        nobody(lambda: os.unlink(os.path.join(d, "theirs")))
        assert os.listdir(d) == []


class TestGroups:
    def test_supplementary_group_grants_read(self, cluster):
        f = make_file(os.path.join(cluster.n1, "grp"), b"for group 100", 0o640, gid=GROUP)
        assert nobody(read(f), groups=[GROUP]) == b"for group 100"
        expect_child_errno(errno.EACCES, read(f))
        expect_child_errno(errno.EACCES, open_for_write(f), groups=[GROUP])

    def test_primary_group_grants_read(self, cluster):
        f = make_file(os.path.join(cluster.n1, "grp"), b"g", 0o640, gid=GROUP)
        assert as_user(NOBODY, GROUP, read(f)) == b"g"

    def test_supplementary_group_grants_create_in_group_dir(self, cluster):
        d = make_dir(os.path.join(cluster.n1, "d"), 0o770, gid=GROUP)
        nobody(create(os.path.join(d, "f")), groups=[GROUP])
        expect_child_errno(errno.EACCES, create(os.path.join(d, "g")))
        assert os.listdir(d) == ["f"]


class TestAcrossNodes:
    def test_chmod_on_node1_is_honoured_on_node2_at_once(self, cluster):
        f1 = make_file(os.path.join(cluster.n1, "f"), b"data", 0o644)
        f2 = os.path.join(cluster.n2, "f")
        for _ in range(3):
            assert nobody(read(f2)) == b"data"  # node2 now caches the 0644 attributes
            os.chmod(f1, 0o600)
            expect_child_errno(errno.EACCES, read(f2))
            os.chmod(f1, 0o644)
            assert nobody(read(f2)) == b"data"

    def test_chown_on_node1_is_honoured_on_node2_at_once(self, cluster):
        f1 = make_file(os.path.join(cluster.n1, "f"), b"data", 0o600, uid=NOBODY, gid=NOGROUP)
        f2 = os.path.join(cluster.n2, "f")
        assert nobody(read(f2)) == b"data"
        os.chown(f1, OTHER_UID, OTHER_UID)
        expect_child_errno(errno.EACCES, read(f2))

    def test_directory_chmod_on_node1_is_honoured_on_node2_at_once(self, cluster):
        d1 = make_dir(os.path.join(cluster.n1, "d"), 0o777)
        d2 = os.path.join(cluster.n2, "d")
        nobody(create(os.path.join(d2, "a")))
        os.chmod(d1, 0o755)
        expect_child_errno(errno.EACCES, create(os.path.join(d2, "b")))
        assert os.listdir(d1) == ["a"]
