"""Section 5's measurements of the mount's metadata leases (issue 16):
`find` and `ls -lR` over a tree, warm on the node that knows it and cold
from a node that has never seen it, and two nodes alternating in one
directory (every step recalls what the other node holds). GrantFS runs
with leases on (the default) and with `--leases=off` side by side, against
the same server; the passthrough and the local disk walk the same tree
warm, as the ceiling."""

import os
import time

from .harness import BenchError
from .stats import fmt_ratio, fmt_summary

# Target names; GFS, GFS_OFF and GFS_NS are the same as in fs_sections.
GFS = "GrantFS"
GFS_OFF = "GrantFS (leases off)"
GFS_NS = "GrantFS (ns grants)"
PT = "FUSE passthrough"
LOCAL = "local disk"

# The kernel caches names and attributes of a --leases=off mount for this
# long (grantfs-mount's default --entry_timeout and --attr_timeout). A warm
# GrantFS walk starts after a pause a little longer: what it measures is
# what the node itself knows, not what the kernel still holds from the walk
# just before (a second walk within a second is rare outside a benchmark).
KERNEL_CACHE_S = 1.0

FILES_PER_DIR = 100
DIRS_PER_TOP = 10
# find reads names only (d_type); find -ls stats every entry; ls -lR stats
# every entry and reads two extended attributes of each (lgetxattr of
# security.selinux and system.posix_acl_access).
TOOLS = ("find", "find -ls", "ls -lR")


def warm_pause(ctx):
    """Seconds between warm GrantFS walks: none in smoke mode (its figures
    only show that everything runs)."""
    return 0.0 if ctx.mode == "smoke" else KERNEL_CACHE_S + 0.2


def tree_shape(files):
    """(leaf directories, top directories) of a tree of `files` files:
    FILES_PER_DIR files per leaf, DIRS_PER_TOP leaves per top directory."""
    leaves = max(1, -(-files // FILES_PER_DIR))
    return leaves, max(1, -(-leaves // DIRS_PER_TOP))


def make_tree(root, files):
    """root/tNN/dNNN/fNNNNNN, each file a few non-zero bytes (its own name):
    ls -l shows a real size."""
    os.makedirs(root)
    for i in range(files):
        leaf = i // FILES_PER_DIR
        d = os.path.join(root, f"t{leaf // DIRS_PER_TOP:02d}", f"d{leaf:04d}")
        if i % FILES_PER_DIR == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:06d}"), "w") as f:
            f.write(f"file {i} of the tree walked by find and ls -lR\n")


def walk(ctx, tool, root, files, what):
    """Runs one of TOOLS over root to completion; its wall seconds. Checks
    that it saw every entry (and, where sizes are listed, no empty file)."""
    leaves, tops = tree_shape(files)
    argv = tool.split() + [root] if tool == "ls -lR" else ["find", root] + tool.split()[1:]
    t0 = time.monotonic()
    out = ctx.h.run(argv, 120 + files * 0.02, f"{tool} over {what}")
    secs = time.monotonic() - t0
    lines = out.splitlines()
    if tool == "find":
        got, want = len(lines), 1 + tops + leaves + files
    else:
        perms, size = (2, 6) if tool == "find -ls" else (0, 4)
        fields = (ln.split() for ln in lines)
        regular = [f for f in fields if len(f) > size and f[perms].startswith("-")]
        got, want = len(regular), files
        if any(f[size] == "0" for f in regular):
            raise BenchError(f"{tool} over {what}: a file of size 0 in a tree of non-empty files")
    if got != want:
        raise BenchError(f"{tool} over {what}: {got} entries, expected {want}")
    return secs


def tree_walks(ctx, server):
    """Records section "tree_walk": wall seconds of find and ls -lR, warm
    (a run after one on the same mount) on every target and cold (the first
    run of a fresh mount of the same server) for GrantFS with leases on and
    off."""
    cfg, h, res = ctx.cfg, ctx.h, ctx.results
    n, runs = cfg["tree_files"], cfg["lease_runs"]
    warm = [(GFS, h.mount_grantfs("gfs-tree", server.addr)),
            (GFS_OFF, h.mount_grantfs("gfs-tree-off", server.addr, leases="off")),
            (PT, h.mount_passthrough("pt-tree")), (LOCAL, h.local_dir("local-tree"))]
    pt_src = h.path("pt-tree-src")  # what the cold passthrough mounts show
    roots = {}
    try:
        # GrantFS's tree is made once, through the leases-on mount, which
        # then holds leases on all of it; the leases-off mount reads it.
        for name, d in warm:
            if name == GFS_OFF:
                roots[name] = os.path.join(d, "tree")
                continue
            ctx.progress.step(f"§5 making a tree of {n:,} files on {name}")
            t0 = time.monotonic()
            roots[name] = os.path.join(d, "tree")
            make_tree(roots[name], n)
            ctx.progress.done(f"{time.monotonic() - t0:.1f} s")
        for name, _ in warm:  # the first run of each, not counted: warm means the second
            for tool in TOOLS:
                walk(ctx, tool, roots[name], n, f"{name} (first run)")
        for run in range(runs):
            for name, _ in warm:
                for tool in TOOLS:
                    if name in (GFS, GFS_OFF):
                        time.sleep(warm_pause(ctx))
                    ctx.progress.step(f"§5 {tool} warm on {name}, run {run + 1}/{runs}")
                    s = walk(ctx, tool, roots[name], n, name)
                    res.record("tree_walk", (("target", name), ("cache", "warm"),
                                             ("tool", tool)), "wall", "s", s)
                    ctx.progress.done(f"{s:.2f} s")
            for name, leases in ((GFS, "on"), (GFS_OFF, "off"), (PT, None)):
                for t, tool in enumerate(TOOLS):  # a fresh node per walk
                    if name == PT:  # a fresh mount of the same source directory
                        m = h.mount_passthrough(f"pt-cold-{t}-{run}", src=pt_src)
                    else:
                        m = h.mount_grantfs(f"gfs-cold-{leases}-{t}-{run}", server.addr,
                                            leases=leases)
                    try:
                        ctx.progress.step(f"§5 {tool} cold on {name}, run {run + 1}/{runs}")
                        s = walk(ctx, tool, os.path.join(m, "tree"), n, f"{name}, a fresh mount")
                        res.record("tree_walk", (("target", name), ("cache", "cold"),
                                                 ("tool", tool)), "wall", "s", s)
                        ctx.progress.done(f"{s:.2f} s")
                    finally:
                        h.unmount(m)
    finally:
        for name, d in warm[:3]:
            h.unmount(d)
    return [name for name, _ in warm]


def tree_walk_text(sec, ctx, targets):
    cfg, res = ctx.cfg, ctx.results
    n, runs = cfg["tree_files"], cfg["lease_runs"]
    leaves, tops = tree_shape(n)
    pause = (f", each GrantFS walk {warm_pause(ctx):.1f} s after the one before it, past the "
             f"{KERNEL_CACHE_S:.0f} s for which the kernel caches a `--leases=off` mount's names "
             f"and attributes" if warm_pause(ctx) else " (no pause between walks in this mode)")
    sec.text(f"""
### Tree walks: find, find -ls and ls -lR, warm and cold

A tree of {n:,} files (up to {FILES_PER_DIR} per directory: {leaves} directories in {tops}
top-level ones; each file holds a line of text) walked by `find` (names), `find -ls` (names
and every entry's attributes) and `ls -lR` (the same, plus two extended attributes of every
file that `ls -l` asks for: `lgetxattr` of security.selinux and system.posix_acl_access),
output counted and checked. **Warm**: a run on the same mount after a first one (GrantFS: the
mount with leases that made the tree, and a `--leases=off` mount of the same server){pause}.
**Cold**: the first run of a
fresh mount of the same server, which has never seen the tree (another node), one fresh mount
per walk (a walk after another would be warm); the server's own caches are warm. For the
passthrough, a fresh mount of the same source directory (its page cache and the source file
system's caches are warm, as the server's are). Wall seconds, median (min–max) of {runs}
run(s).

What each asks of its FUSE daemon: the passthrough answers the xattrs from its source file
system (as libfuse's passthrough_ll; one FUSE round trip each). A GrantFS mount with leases
answers them itself from the leased attributes, which say when a file has no xattrs at all,
and refuses the `system.` namespace, which GrantFS does not store, as its server would. With
leases the kernel is asked for plain readdir, not readdirplus: a cold walk then sends one
lookup per entry to the mount (answered there, no RPC, but a FUSE round trip each: the cost of
a cold `find -ls`), because the kernel cannot keep names a readdirplus hands it under a lease
(docs/architecture.md, "Consistency between nodes"). A `--leases=off` mount uses readdirplus.
""")

    def get(name, cache, tool):
        return res.get("tree_walk", (("target", name), ("cache", cache), ("tool", tool)), "wall")

    rows = []
    for name in targets:
        rows.append([name] + [fmt_summary(get(name, c, t)) for t in TOOLS
                              for c in ("warm", "cold")])
    sec.table(["target"] + [f"{t} {c} s" for t in TOOLS for c in ("warm", "cold")], rows)
    rows = [["leases on vs off (speedup, higher is better)"] +
            [fmt_ratio(get(GFS_OFF, c, t), get(GFS, c, t)) for t in TOOLS
             for c in ("warm", "cold")],
            ["GrantFS (leases on) time vs passthrough's"] +
            [fmt_ratio(get(GFS, c, t), get(PT, c, t)) for t in TOOLS for c in ("warm", "cold")]]
    sec.table(["GrantFS"] + [f"{t} {c}" for t in TOOLS for c in ("warm", "cold")], rows)
    sec.csv("tree_walk")


def ping_pong(ctx, server):
    """Records section "pingpong": two mounts of one server (nodes A and
    B) take turns in one directory, each creating a file and then stat'ing
    the file the other node made last; operations per second, for leases
    on and off, and for both mounts with namespace grants."""
    cfg, h, res = ctx.cfg, ctx.h, ctx.results
    rounds, runs = cfg["pingpong_rounds"], cfg["lease_runs"]
    pairs = [(name, tag, h.mount_grantfs(f"pp-a-{tag}", server.addr, leases=leases,
                                         ns_grants=ns),
              h.mount_grantfs(f"pp-b-{tag}", server.addr, leases=leases, ns_grants=ns))
             for name, tag, leases, ns in ((GFS, "on", "on", "off"), (GFS_OFF, "off", "off", "off"),
                                           (GFS_NS, "ns", "on", "on"))]
    try:
        for run in range(runs):
            for name, tag, a, b in pairs:
                ctx.progress.step(f"§5 two nodes alternating, {rounds} rounds on {name}, "
                                  f"run {run + 1}/{runs}")
                rel = f"pingpong-{tag}-{run}"  # one server: a directory per mode and run
                os.mkdir(os.path.join(a, rel))
                nodes = (os.path.join(a, rel), os.path.join(b, rel))
                os.listdir(nodes[1])  # B knows the directory before the rounds start
                ops = 0
                t0 = time.monotonic()
                for i in range(rounds):
                    for me, who in ((0, "a"), (1, "b")):
                        fd = os.open(os.path.join(nodes[me], f"{who}{i:06d}"),
                                     os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                        os.close(fd)
                        # The other node's last file: B's of the previous round for A.
                        last = f"b{i - 1:06d}" if me == 0 else f"a{i:06d}"
                        ops += 1
                        if me == 1 or i > 0:
                            os.stat(os.path.join(nodes[me], last))
                            ops += 1
                secs = time.monotonic() - t0
                if len(os.listdir(nodes[0])) != 2 * rounds:
                    raise BenchError(f"two nodes alternating on {name}: node A lists "
                                     f"{len(os.listdir(nodes[0]))} files, expected {2 * rounds}")
                res.record("pingpong", (("target", name),), "ops/s", "ops/s", ops / secs)
                res.record("pingpong", (("target", name),), "us per op", "us", secs / ops * 1e6)
                ctx.progress.done(f"{ops / secs:.0f} ops/s")
    finally:
        for _, _, a, b in pairs:
            h.unmount(a)
            h.unmount(b)


def ping_pong_text(sec, ctx):
    cfg, res = ctx.cfg, ctx.results
    rounds, runs = cfg["pingpong_rounds"], cfg["lease_runs"]
    sec.text(f"""
### Two nodes alternating in one directory

Two mounts of the same server (nodes A and B), one process driving both in turn, {rounds:,}
rounds in a fresh directory: A creates a file (open O_CREAT|O_EXCL + close) and stats the file
B made last, then B creates one and stats A's. With leases each step changes or reads what the
other node holds, so the server recalls it first: the worst case for leases. **{GFS_NS}**: both
mounts with `--ns_grants=on`; A makes the directory, which is granted to it, and B's first
look into it (before the rounds) recalls the grant: the rounds show what grants cost where two
nodes share a directory. Operations (creates + stats) per second and the mean time of one,
median (min–max) of {runs} run(s).
""")
    on = res.get("pingpong", (("target", GFS),), "ops/s")
    off = res.get("pingpong", (("target", GFS_OFF),), "ops/s")
    ns = res.get("pingpong", (("target", GFS_NS),), "ops/s")
    rows = [[name, fmt_summary(res.get("pingpong", (("target", name),), "ops/s")),
             fmt_summary(res.get("pingpong", (("target", name),), "us per op"))]
            for name in (GFS, GFS_OFF, GFS_NS)]
    sec.table(["target", "ops/s", "us per op"], rows)
    sec.text(f"Leases on vs off: {fmt_ratio(on, off)} the operations per second; namespace grants "
             f"on vs off (both with leases): {fmt_ratio(ns, on)}.")
    sec.csv("pingpong")
