#!/usr/bin/env python3
"""Randomized namespace checker: several processes change one small tree at
random through two or three mounts of the same file system, and what they see
is checked against what they were told.

    python3 tests/nscheck.py --mounts DIR1,DIR2[,DIR3] --workers N --ops N --seed S

Works on any directory: GrantFS mounts of one server, grantfs-passthrough
mounts of one source directory, or one local directory given several times
(the reference: a mismatch there is a bug of this checker, not of a file
system). tests/test_nscheck.py runs it on all three; docs/testing.md says how.

Everything happens in a fresh directory `nscheck-SEED-PID` under the first
mount (seen as the same directory under the others):

- `wI/` belongs to worker I alone. The worker keeps an exact model of it
  (class Model): every operation's errno must be the one the model predicts,
  every `check` (lstat, readlink, read, readdir, xattrs of one path) must
  match the model, and at the end the subtree must equal the model on every
  mount: types, modes, owners, link counts, hard-link groups, symlink
  targets, user xattrs and file contents.
- `shared/` is where every worker races on the same few names. Nothing is
  predicted there; every errno must be one a race can give, and at the end
  (final_checks) every mount must show the same tree, link counts must equal
  the names pointing at each inode, readdir and lookup must agree (no
  dangling entry), directories whose rmdir was seen to remove them must be
  gone, and every attribute, target and content must be one some worker set.

Workers move their own subtree's work from one mount to another only once
their changes through the other mounts are `bound` seconds old. GrantFS's stated
bound (docs/architecture.md, "Consistency between nodes"; DESIGN.md promise
6) is the 1 s kernel attribute and entry timeouts: the server pushes
invalidations "at once", but asynchronously, and a lookup through another
mount a few milliseconds after a change can still see the old entry. The
passthrough has the same 1 s timeouts and no invalidations at all. While it
waits, a worker keeps racing in shared/ through the old mount, so the wait
costs no time. The wait is `bound` plus 20 ms (TICK_SLACK): the kernel's
timeouts count in ticks. `--bound 0` checks what the invalidations alone give.

Each worker draws its operations from random.Random(seed * 1000 + worker): the same
seed replays the same operations (`--only-worker I` replays one worker's
subtree exactly, races aside). Every operation is logged with its time, mount,
expected and actual result; a worker's log is printed on a mismatch and kept
in --log-dir.

Names are bytes: a fraction of operations (--bad-names) use names, symlink
targets and xattr names that are not UTF-8, as Linux allows.
"""

import argparse
import errno
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

from nscheck_fs import (BAD_NAMES, DIR, GIDS, LNK, NOT_SUPPORTED, REG, SHARED_MODE, SHARED_NAMES,
                        UIDS, WRITE_CREATE_MODE, diff_trees, ename, join, short, show, walk)
from nscheck_worker import worker_main

def probe_capabilities(d):
    """Op kinds the file system at d does not have ({kind: errno name}):
    only 'not supported' errnos count, anything else is left to the run."""
    missing = {}
    f = join(d, b"f")
    os.close(os.open(f, os.O_WRONLY | os.O_CREAT, 0o644))
    tries = {
        "symlink": lambda: os.symlink(b"tgt-probe", join(d, b"l")),
        "link": lambda: os.link(f, join(d, b"h"), follow_symlinks=False),
        "setxattr": lambda: os.setxattr(f, b"user.probe", b"v"),
        "rmxattr": lambda: os.removexattr(f, b"user.probe"),
    }
    for kind, fn in tries.items():
        try:
            fn()
        except OSError as e:
            if e.errno in NOT_SUPPORTED or (kind == "link" and e.errno == errno.EPERM):
                missing[kind] = ename(e.errno)
            elif not (kind == "rmxattr" and "setxattr" in missing):
                raise
    return missing


def final_checks(cfg, results, problems):
    """After every worker is done and `bound` has passed: each subtree equals
    its model on every mount; shared/ is the same on every mount and keeps
    the invariants. Appends what is wrong to problems."""
    bases = [join(m, cfg["base"]) for m in cfg["mounts"]]
    for r in results:
        if r["model"] is None:
            continue
        for m, base in enumerate(bases):
            found = []
            try:
                found += diff_trees(r["model"], walk(join(base, b"w%d" % r["index"]), found))
            except OSError as e:
                found.append(f"cannot walk: {e}")
            problems += [f"w{r['index']} on mount {m}: {p}" for p in found[:40]]

    trees = []
    for m, base in enumerate(bases):
        found = []
        try:
            trees.append(walk(join(base, b"shared"), found))
        except OSError as e:
            found.append(f"cannot walk: {e}")
        problems += [f"shared on mount {m}: {p}" for p in found[:40]]
    if len(trees) < len(bases):
        return
    for m in range(1, len(trees)):
        d = diff_trees(trees[0], trees[m])
        for rel in sorted(set(trees[0]) & set(trees[m])):  # the very same inodes, too
            if trees[0][rel]["ino"] != trees[m][rel]["ino"]:
                d.append(f"{show(rel)}: inode {trees[0][rel]['ino']} on mount 0, "
                         f"{trees[m][rel]['ino']} here")
        problems += [f"shared: mount {m} differs from mount 0: {p}" for p in d[:40]]

    used = {k: set() for k in results[0]["used"]} if results else {}
    for r in results:
        for k, v in r["used"].items():
            used[k] |= v
    removed = {}
    for r in results:
        removed.update(dict(r["removed_dirs"]))
    for m, tree in enumerate(trees):
        problems += [f"shared on mount {m}: {p}"
                     for p in shared_invariants(tree, used, removed, join(bases[m], b"shared"))]


def shared_invariants(tree, used, removed, root):
    """What must hold of shared/ however the races went."""
    out = []
    names = {}
    for rel, e in tree.items():
        if e["type"] != DIR:
            names.setdefault(e["ino"], []).append(rel)
    for rel, e in sorted(tree.items()):
        kind = e["type"]
        if kind == DIR:
            subdirs = sum(1 for n in e["names"] if tree.get(join(rel, n) if rel != b"." else n,
                                                             {}).get("type") == DIR)
            if e["nlink"] != 2 + subdirs:
                out.append(f"{show(rel)}: directory nlink {e['nlink']}, has {subdirs} subdirs")
            if e["ino"] in removed:
                out.append(f"{show(rel)}: directory removed by `{removed[e['ino']]}` "
                           f"(inode {e['ino']}) is still there")
            # lookup and readdir agree: a pool name readdir does not list is not there
            for n in SHARED_NAMES + BAD_NAMES:
                if n not in e["names"] and (rel == b"." or rel.count(b"/") == 0):
                    p = join(root, rel, n) if rel != b"." else join(root, n)
                    try:
                        os.lstat(p)
                        out.append(f"{show(join(rel, n))}: found by lookup, not by readdir")
                    except OSError as err:
                        if err.errno != errno.ENOENT:
                            out.append(f"{show(join(rel, n))}: lookup gave {ename(err.errno)}")
        elif e["nlink"] != len(names[e["ino"]]):
            out.append(f"{show(rel)}: nlink {e['nlink']}, but {len(names[e['ino']])} names "
                       f"({', '.join(show(p) for p in sorted(names[e['ino']]))})")
        if kind == REG and e["data"] and e["data"] not in used["payloads"]:
            out.append(f"{show(rel)}: content {short(e['data'])} was never written")
        if kind == LNK and e["target"] not in used["targets"]:
            out.append(f"{show(rel)}: target {short(e['target'])} was never set")
        if kind != LNK and e["mode"] not in used["modes"] | {WRITE_CREATE_MODE, SHARED_MODE}:
            out.append(f"{show(rel)}: mode {oct(e['mode'])} was never set")
        if e["uid"] not in UIDS or e["gid"] not in GIDS:
            out.append(f"{show(rel)}: owner {e['uid']}:{e['gid']} was never set")
        for k, v in e.get("xattrs", {}).items():
            if v not in used["xattr_values"]:
                out.append(f"{show(rel)}: xattr {show(k)}={short(v)} was never set")
    return out


class Result:
    """What run() found: ok, failures (text), report()."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.failures = []
        self.logs = []
        self.stats = []
        self.counts = {}  # (op kind, result) -> how many, own subtrees only
        self.warnings = []  # final checks that failed first and passed within `settle`
        self.elapsed = 0.0
        self.log_dir = None

    @property
    def ok(self):
        return not self.failures

    def replay(self, worker=None):
        c = self.cfg
        cmd = (f"python3 tests/nscheck.py --mounts {','.join(map(os.fsdecode, c['mounts']))} "
               f"--workers {c['workers']} --ops {c['ops']} --seed {c['seed']} "
               f"--bound {c['bound']} --bad-names {c['bad_names']}")
        if c["shared"] != 0.25:
            cmd += f" --shared {c['shared']}"
        if c["quirks"]:
            cmd += f" --quirks {','.join(sorted(c['quirks']))}"
        return cmd + (f" --only-worker {worker}" if worker is not None else "")

    def report(self):
        lines = [f"nscheck seed {self.cfg['seed']}: {self.cfg['workers']} workers x "
                 f"{self.cfg['ops']} ops on {len(self.cfg['mounts'])} mounts, bound "
                 f"{self.cfg['bound']} s, {self.elapsed:.1f} s: "
                 + ("OK" if self.ok else f"{len(self.failures)} FAILURES")]
        if self.cfg["disabled"]:
            lines.append(f"  not supported here, not run: {self.cfg['disabled']}")
        lines += [f"  {s}" for s in self.stats]
        lines += [f"  warning: {w}" for w in self.warnings]
        kinds = sorted({k for k, _ in self.counts})
        for k in kinds:
            res = sorted((r for kk, r in self.counts if kk == k), key=lambda r: r != "ok")
            lines.append(f"  {k:9} " + ", ".join(f"{r} {self.counts[(k, r)]}" for r in res))
        for f in self.failures:
            lines.append("FAILURE: " + f)
        for index, log in self.logs:
            lines.append(f"--- worker {index}: last {min(len(log), 40)} of its ops "
                         f"(replay: {self.replay(index)})")
            lines += log[-40:]
        if self.log_dir:
            lines.append(f"full logs: {self.log_dir}")
        return "\n".join(lines)


def run(mounts, workers=3, ops=1000, seed=1, bound=None, bad_names=0.05, shared=0.25,
        log_dir=None, only_worker=None, keep=False, timeout=None, quirks=(), settle=0.0):
    """Runs the checker; returns a Result. mounts: paths of the same file
    system (str or bytes). bound: seconds after which a change through one
    mount must show through the others (default: 1.0, the 1 s kernel cache
    timeouts of GrantFS and of the passthrough; 0 when every mount is the
    same directory).

    For targets known to fall short where GrantFS must not (several
    grantfs-passthrough processes over one source directory):
    quirks={"estale"}: an own-subtree op that keeps getting ESTALE (after
    retries 1 s apart) stops its worker instead of failing it; settle:
    seconds the final checks are retried (every 0.5 s) before their problems
    count."""
    mounts = [os.fsencode(m) for m in mounts]
    if bound is None:
        bound = 0.0 if len({os.path.realpath(m) for m in mounts}) == 1 else 1.0
    cfg = {"mounts": mounts, "workers": workers, "ops": ops, "seed": seed, "bound": bound,
           "bad_names": bad_names, "shared": shared, "log_dir": log_dir, "quirks": set(quirks),
           "base": b"nscheck-%d-%d" % (seed, os.getpid()), "t0": time.monotonic()}
    result = Result(cfg)
    start = time.monotonic()
    base0 = join(mounts[0], cfg["base"])
    old_umask = os.umask(0)
    try:
        os.mkdir(base0, 0o755)
        os.mkdir(join(base0, b"probe"), 0o755)
        cfg["disabled"] = probe_capabilities(join(base0, b"probe"))
        shutil.rmtree(join(base0, b"probe"))
        os.mkdir(join(base0, b"shared"), SHARED_MODE)
        for i in range(workers):
            os.mkdir(join(base0, b"w%d" % i), 0o755)
    finally:
        os.umask(old_umask)
    time.sleep(bound)  # the other mounts see the new directories

    ctx = multiprocessing.get_context("fork")
    procs = []
    indexes = [only_worker] if only_worker is not None else range(workers)
    for i in indexes:
        parent_end, child_end = ctx.Pipe()
        p = ctx.Process(target=worker_main, args=(cfg, i, child_end), daemon=True)
        p.start()
        child_end.close()
        procs.append((i, p, parent_end))
    results = []
    deadline = None if timeout is None else start + timeout
    for i, p, conn in procs:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if conn.poll(left):
            try:
                results.append(conn.recv())
                continue
            except EOFError:
                pass
        result.failures.append(f"worker {i} did not finish (exit code {p.exitcode}, "
                               f"timeout {timeout} s)")

    try:
        for r in results:
            if r["failure"]:
                result.failures.append(r["failure"])
                result.logs.append((r["index"], r["log"]))
            size = f"{len(r['model'])} entries at the end" if r["model"] else "stopped"
            if r["stopped"]:
                result.warnings.append(f"worker {r['index']} stopped (quirk estale), its "
                                       f"subtree not compared: {r['stopped'].strip()}")
            result.stats.append(f"worker {r['index']}: {r['ops']} ops, own subtree {size}, "
                                f"{len(r['removed_dirs'])} removed shared dirs tracked")
            for key, n in r["counts"].items():
                result.counts[key] = result.counts.get(key, 0) + n
        time.sleep(bound + 0.1 * (bound > 0))  # every change is now bound seconds old
        problems = []
        if results and len(results) == len(procs):
            final_checks(cfg, results, problems)
            settle_end = time.monotonic() + settle
            while problems and time.monotonic() < settle_end:
                result.warnings.append(f"settling: {len(problems)} final problems still "
                                       f"there, e.g. {problems[0]}")
                time.sleep(0.5)
                problems = []
                final_checks(cfg, results, problems)
        result.failures += problems[:200]
    finally:
        for _, p, conn in procs:
            try:
                conn.send("done")
            except (BrokenPipeError, OSError):
                pass
        for _, p, _ in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    if log_dir or not result.ok:
        result.log_dir = log_dir or tempfile.mkdtemp(prefix="nscheck-logs-")
        os.makedirs(result.log_dir, exist_ok=True)
        for r in results:
            with open(os.path.join(result.log_dir, f"worker-{r['index']}.log"), "w") as f:
                f.write("\n".join(r["log"]) + "\n")
    if result.ok and not keep:
        shutil.rmtree(base0, ignore_errors=True)
    result.elapsed = time.monotonic() - start
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mounts", required=True,
                    help="comma-separated directories that are one file system")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--ops", type=int, default=1000, help="operations per worker")
    ap.add_argument("--seed", type=int, default=None, help="default: from the time (printed)")
    ap.add_argument("--bound", type=float, default=None,
                    help="seconds a change may take to show through another mount "
                         "(default 1.0; 0 if every mount is the same directory)")
    ap.add_argument("--bad-names", type=float, default=0.05,
                    help="fraction of names, targets and xattr names that are not UTF-8")
    ap.add_argument("--shared", type=float, default=0.25,
                    help="fraction of operations that race in shared/")
    ap.add_argument("--only-worker", type=int, default=None, help="run just this worker")
    ap.add_argument("--log-dir", default=None, help="write every worker's full log here")
    ap.add_argument("--keep", action="store_true", help="keep the tree after a clean run")
    ap.add_argument("--timeout", type=float, default=None, help="give up after this many s")
    ap.add_argument("--quirks", default="", help="'estale' for grantfs-passthrough mounts")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds the final checks may take to pass (passthrough: 5)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time() * 1000) % 1_000_000
    if args.seed is None:
        print(f"seed {seed}")
    r = run(args.mounts.split(","), workers=args.workers, ops=args.ops, seed=seed,
            bound=args.bound, bad_names=args.bad_names, shared=args.shared,
            log_dir=args.log_dir, only_worker=args.only_worker, keep=args.keep,
            timeout=args.timeout, quirks=[q for q in args.quirks.split(",") if q],
            settle=args.settle)
    print(r.report())
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
