"""Names, modes and payloads the namespace checker (tests/nscheck.py) uses,
and how it touches and observes a file system: renameat2, xattrs, a walk
of a tree into comparable entries, and the diff of two trees."""

import ctypes
import errno
import os
import stat

# --- the pools everything is drawn from ---------------------------------------------
# Few names, so operations collide often.
NAMES = [b"a", b"b", b"c", b"d"]
BAD_NAMES = [b"bad\xff\xfe", b"\xc3(", b"\x80lone"]  # not UTF-8
LONG_NAME = b"L" * 255  # the longest name Linux allows
TOO_LONG_NAME = b"T" * 256
SHARED_NAMES = [b"a", b"b", b"c"]
XATTR_NAMES = [b"user.a", b"user.b"]
BAD_XATTR_NAMES = [b"user.\xff\xfe"]
UIDS = [0, 1000, 4242, 65534]
GIDS = [0, 100, 4242, 65534]
# No setuid/setgid bits: chown and write would clear them, which is not
# what this checker is about.
FILE_MODES = [0o644, 0o600, 0o755, 0o444, 0o000, 0o1644]
DIR_MODES = [0o755, 0o700, 0o555, 0o1777, 0o000]
WRITE_CREATE_MODE = 0o644
SHARED_MODE = 0o755  # of shared/ itself
SHARED_PAYLOAD_LEN = 64  # every write in shared/ replaces the file by one payload

# Every symlink target starts with a name no operation creates, so every
# target dangles and following one always gives ENOENT (the model never has
# to resolve a target).
TARGET_PREFIXES = [b"tgt-", b"../tgt-", b"/nonexistent-nscheck/tgt-"]

REG, DIR, LNK = stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK
TYPE_NAMES = {REG: "file", DIR: "dir", LNK: "symlink"}


def _sysctl(name):
    try:
        with open(f"/proc/sys/{name}") as f:
            return int(f.read())
    except OSError:
        return 0


PROTECTED_REGULAR = _sysctl("fs/protected_regular")

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
AT_FDCWD = -100

_libc = ctypes.CDLL(None, use_errno=True)
_libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                            ctypes.c_uint]


def renameat2(old, new, flags):
    """renameat2(2) of two paths; raises OSError like os.rename."""
    if _libc.renameat2(AT_FDCWD, old, AT_FDCWD, new, flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old, None, new)


def ename(err):
    """'ENOENT' for errno.ENOENT, 'ok' for 0, '*' for None (not predicted)."""
    if err is None:
        return "*"
    return "ok" if err == 0 else errno.errorcode.get(err, str(err))


def show(path):
    """A bytes path for messages: repr without the b''."""
    return repr(path)[2:-1] if path else "."


def join(*parts):
    return b"/".join(p for p in parts if p not in (b"", b"."))


# --- what a path looks like -----------------------------------------------------------

NOT_SUPPORTED = (errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)


def user_xattrs(path):
    """name -> value of the user.* xattrs of path (not followed); {} where the
    file system has no xattrs at all."""
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        if e.errno in NOT_SUPPORTED:
            return {}
        raise
    out = {}
    for n in sorted(names):
        b = os.fsencode(n)
        if b.startswith(b"user."):
            out[b] = os.getxattr(path, n, follow_symlinks=False)
    return out


def read_file(path):
    """The whole contents of the regular file `path` (not followed)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def observe(path):
    """What the checker compares about one path (not followed); raises
    OSError. The same keys as Model.entry()."""
    st = os.lstat(path)
    kind = stat.S_IFMT(st.st_mode)
    e = {"type": kind, "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "gid": st.st_gid,
         "nlink": st.st_nlink, "ino": st.st_ino}
    if kind == REG:
        e["data"] = read_file(path)
        e["size"] = st.st_size
        e["xattrs"] = user_xattrs(path)
    elif kind == LNK:
        e["target"] = os.readlink(path)
    elif kind == DIR:
        e["xattrs"] = user_xattrs(path)
        e["names"] = sorted(os.listdir(path))
    return e


def walk(root, problems):
    """rel path -> observe() of everything under root ('.' is root itself).
    A name readdir lists but lstat cannot find is a dangling entry: it goes
    to `problems`, not to the result."""
    entries = {}

    def visit(path, rel):
        e = observe(path)
        entries[rel] = e
        if e["type"] == DIR:
            for name in e["names"]:
                r = join(rel, name) if rel != b"." else name
                try:
                    visit(path + b"/" + name, r)
                except OSError as err:
                    problems.append(f"{show(r)}: listed by readdir, but {ename(err.errno)}")

    visit(root, b".")
    return entries


def link_groups(entries):
    """Sets of paths that are names of one non-directory inode with more than
    one name."""
    by_ino = {}
    for rel, e in entries.items():
        if e["type"] != DIR:
            by_ino.setdefault(e["ino"], set()).add(rel)
    return {frozenset(s) for s in by_ino.values() if len(s) > 1}


def short(value):
    """A value for a message: long bytes as length and head."""
    if isinstance(value, bytes) and len(value) > 48:
        return f"<{len(value)} bytes {value[:24]!r}...>"
    return repr(value)


def diff_entry(rel, expected, actual):
    """Differences between two entries (ino not compared)."""
    out = []
    for k in sorted(set(expected) | set(actual)):
        if k == "ino":
            continue
        if expected.get(k) != actual.get(k):
            fmt = oct if k in ("mode", "type") and k in expected and k in actual else short
            out.append(f"{show(rel)}: {k} expected {fmt(expected.get(k))}, "
                       f"got {fmt(actual.get(k))}")
    return out


def diff_trees(expected, actual):
    """Differences between two walk()/Model.entries() results: entries and
    hard-link groups."""
    out = [f"missing: {show(r)}" for r in sorted(set(expected) - set(actual))]
    out += [f"unexpected: {show(r)}" for r in sorted(set(actual) - set(expected))]
    for rel in sorted(set(expected) & set(actual)):
        out += diff_entry(rel, expected[rel], actual[rel])
    eg, ag = link_groups(expected), link_groups(actual)
    if eg != ag:
        fmt = lambda gs: sorted(sorted(show(p) for p in g) for g in gs)  # noqa: E731
        out.append(f"hard-link groups: expected {fmt(eg)}, got {fmt(ag)}")
    return out


# --- the model of one worker's subtree ------------------------------------------------
