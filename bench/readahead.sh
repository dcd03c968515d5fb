#!/usr/bin/env bash
# Sequential read MB/s of one non-zero file through GrantFS, read-ahead on
# (--readahead_kib, default 8192) and off (0), with 0, 1 and 5 ms added each
# way by grantfs-latency-proxy. Every run is `dd bs=1M` of the whole file on a
# fresh mount (nothing cached on the client); the figure is the median of RUNS.
#   bench/readahead.sh [BUILD_DIR] [MIB] [RUNS] [READAHEAD_KIB]
set -euo pipefail
cd "$(dirname "$0")/.."
B=$(realpath "${1:-build}")
MIB=${2:-256}
RUNS=${3:-3}
RA_KIB=${4:-8192}
[ "$(id -u)" -eq 0 ] || { echo "readahead.sh: run as root"; exit 1; }
. bench/lib.sh  # the cwd is the repository
bench_init grantfs-ra-bench
bench_start_server "$B"

mount_at() {  # DIR PORT READAHEAD_KIB
  mkdir -p "$1"
  "$B/client/grantfs-mount" "127.0.0.1:$2:/" "$1" --readahead_kib="$3" --log_file="$1.log"
  MOUNTS+=("$1")
}
unmount() {
  fusermount3 -u "$1"
  for _ in $(seq 100); do grep -q "unmounting" "$1.log" 2>/dev/null && break; sleep 0.05; done
  sleep 0.2
}

# The file: MIB MiB of random bytes, written through a mount without proxy.
mount_at "$W/w" "$SP" 0
head -c "${MIB}M" /dev/urandom >"$W/w/f"
WANT=$(sha256sum <"$W/w/f" | cut -d' ' -f1)
unmount "$W/w"

# One run: fresh mount, dd the file to /dev/null (timed), MB/s; with CHECK,
# its sha256 is then checked too (untimed, read again on that mount).
run() {  # PORT READAHEAD_KIB CHECK -> MB/s
  local d="$W/m$RANDOM$RANDOM"
  mount_at "$d" "$1" "$2"
  local t0 t1
  t0=$(date +%s.%N)
  dd if="$d/f" of=/dev/null bs=1M status=none
  t1=$(date +%s.%N)
  if [ "$3" = 1 ] && [ "$(sha256sum <"$d/f" | cut -d' ' -f1)" != "$WANT" ]; then
    echo "sha256 mismatch through $d" >&2
    exit 1
  fi
  unmount "$d"
  awk -v b="$((MIB * 1048576))" -v a="$t0" -v z="$t1" 'BEGIN { printf "%.0f", b / 1e6 / (z - a) }'
}
median() { tr ' ' '\n' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "## Read-ahead: sequential read of a $MIB MiB non-zero file (dd bs=1M, fresh mount), MB/s, median of $RUNS"
echo
echo "| added latency each way | read-ahead off | read-ahead on ($RA_KIB KiB) | on / off |"
echo "| --- | --- | --- | --- |"
for d in 0 1 5; do
  PP=$(bench_port)
  "$B/bench/grantfs-latency-proxy" --listen=127.0.0.1:$PP --target=127.0.0.1:$SP --delay_ms=$d \
    >"$W/proxy$d.log" 2>&1 &
  PIDS+=($!)
  sleep 0.3
  off=(); on=()
  for i in $(seq "$RUNS"); do
    check=$([ "$i" = 1 ] && echo 1 || echo 0)
    off+=("$(run "$PP" 0 "$check")")
    on+=("$(run "$PP" "$RA_KIB" "$check")")
  done
  mo=$(echo "${off[*]}" | median)
  mn=$(echo "${on[*]}" | median)
  echo "| $d ms | $mo (${off[*]}) | $mn (${on[*]}) | $(awk -v a="$mn" -v b="$mo" 'BEGIN { printf "%.1fx", a / b }') |"
done
