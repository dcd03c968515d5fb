#!/usr/bin/env bash
# Checks the locking rules with clang's thread-safety analysis: a field marked
# ABSL_GUARDED_BY used without its mutex, a function marked
# ABSL_EXCLUSIVE_LOCKS_REQUIRED called without it, or one marked
# ABSL_LOCKS_EXCLUDED called with it, fails the check. GCC (the normal build)
# ignores these annotations; this is where they are enforced.
#
# Runs clang++ -fsyntax-only (no code generated) over every C++ translation
# unit of the project listed in BUILD_DIR/compile_commands.json, with the
# normal build's flags, JOBS at a time. Needs only a configured build dir
# whose protobuf headers are generated (scripts/build.sh makes both).
# Exits non-zero on any thread-safety warning, or if clang cannot parse a TU;
# other clang warnings are printed but do not fail it (GCC's -Werror build is
# the warning gate). -Wthread-safety-beta is on because the code is clean
# under it; drop it here if a newer clang flags a correct pattern.
#
# Usage: [BUILD_DIR=build] [JOBS=2] [CLANGXX=clang++] scripts/check-thread-safety.sh [FILE...]
# (FILE...: check only these sources, e.g. server/meta_store.cc.)
set -euo pipefail
files=()
for f in "$@"; do files+=("$(realpath -m "$f")"); done
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
CLANGXX=${CLANGXX:-clang++}
command -v "$CLANGXX" >/dev/null || { echo "check-thread-safety: no $CLANGXX (scripts/install-deps.sh)"; exit 1; }
[ -f "$BUILD_DIR/compile_commands.json" ] ||
  { echo "check-thread-safety: no $BUILD_DIR/compile_commands.json (run scripts/build.sh)"; exit 1; }
[ -f "$BUILD_DIR/proto/grantfs.pb.h" ] ||
  { echo "check-thread-safety: protobuf headers not generated in $BUILD_DIR (run scripts/build.sh)"; exit 1; }

exec python3 - "$PWD" "$BUILD_DIR" "$JOBS" "$CLANGXX" ${files[@]+"${files[@]}"} <<'EOF'
import json, os, re, shlex, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor

src_dir, build_dir = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
jobs, clangxx = int(sys.argv[3]), sys.argv[4]
only = set(sys.argv[5:])

# Flags that mean nothing without code generation, or that only GCC knows.
# Unknown -W flags are covered by -Wno-unknown-warning-option.
DROP_WITH_VALUE = {"-o", "-MF", "-MT", "-MQ"}
DROP = re.compile(r"^(-c|-O.*|-g.*|-MD|-MMD|-flto.*|-ffat-lto-objects|-fno-fat-lto-objects"
                  r"|-fmax-errors=.*|-fconcepts.*|-f(no-)?var-tracking.*|-f(no-)?ipa-.*|--param=.*)$")
CHECK = ["-fsyntax-only", "-ferror-limit=0", "-Wno-unknown-warning-option",
         "-Wthread-safety", "-Wthread-safety-beta", "-Werror=thread-safety"]

def clang_args(entry):
    args = entry.get("arguments") or shlex.split(entry["command"])
    out, skip = [clangxx], False
    for a in args[1:]:  # args[0] is the build's compiler (g++)
        if skip:
            skip = False
        elif a in DROP_WITH_VALUE:
            skip = True
        elif a != "-Werror" and not DROP.match(a):  # only thread-safety fails here
            out.append(a)
    return out + CHECK

units, seen = [], set()
for e in json.load(open(os.path.join(build_dir, "compile_commands.json"))):
    f = os.path.realpath(os.path.join(e["directory"], e["file"]))
    # The project's own sources: not generated code (protobuf) in a build dir.
    rel = os.path.relpath(f, src_dir)
    if rel.startswith("..") or rel.startswith("build") or f.startswith(build_dir + "/") or f in seen:
        continue
    if only and f not in only:
        continue
    seen.add(f)
    units.append((f, e["directory"], clang_args(e)))
if not units:
    sys.exit("check-thread-safety: no translation unit to check")

def check(unit):
    f, cwd, args = unit
    r = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    return f, r.returncode, r.stderr

start = time.monotonic()
ts_warnings = other_warnings = failed_units = 0
with ThreadPoolExecutor(max_workers=jobs) as pool:
    for f, rc, err in pool.map(check, units):
        if err:
            sys.stdout.write(err)
        ts_warnings += len(re.findall(r"\[-W(?:error,-W)?thread-safety[\w-]*\]", err))
        other_warnings += len(re.findall(r"warning: .*\[-W(?!thread-safety)[\w-]+\]", err))
        failed_units += rc != 0
print(f"check-thread-safety: {len(units)} translation units, {ts_warnings} thread-safety "
      f"warnings, {other_warnings} other clang warnings, {failed_units} failed, "
      f"{time.monotonic() - start:.0f} s")
sys.exit(1 if failed_units or ts_warnings else 0)
EOF
