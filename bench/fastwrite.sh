#!/usr/bin/env bash
# The fastwrite benchmarks of one run, on this machine (root):
#  1. latency sweep: write-phase MB/s of fastwrite and writethrough mounts with
#     0, 1 and 5 ms added each way by grantfs-latency-proxy;
#  2. the ceiling: dd (--mib, 512 KiB writes, fsync) through GrantFS, through
#     grantfs-passthrough of a local directory, and on the local disk, with
#     non-zero data and with zeros (mkfile-style).
# Every figure is the median of --runs runs (grantfs-bench prints min and max).
#   bench/fastwrite.sh [BUILD_DIR] [MIB_SWEEP] [MIB_CEILING] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
B=$(realpath "${1:-build}")
MIB_SWEEP=${2:-256}
MIB_CEIL=${3:-2048}
RUNS=${4:-3}
[ "$(id -u)" -eq 0 ] || { echo "fastwrite.sh: run as root"; exit 1; }
. bench/lib.sh  # the cwd is the repository
bench_init grantfs-bench
bench_start_server "$B"
mount_via() {  # NAME TARGET_PORT MODE
  mkdir -p "$W/$1"
  "$B/client/grantfs-mount" "127.0.0.1:$2:/" "$W/$1" --write_mode="$3" --log_file="$W/$1.log"
  MOUNTS+=("$W/$1")
}
dd_csv() {  # DIR MIB [--zeros] -> "write_s total_s"
  "$B/bench/grantfs-bench" dd --dir="$1" --mib="$2" --runs="$RUNS" ${3:-} | awk -F, '/^CSV,dd/ {print $8, $11}'
}
mbps() { awk -v mib="$1" -v s="$2" 'BEGIN { printf "%.0f", mib * 1.048576 / s }'; }

echo "## Latency sweep: write phase of dd --mib=$MIB_SWEEP (512 KiB writes), MB/s, median of $RUNS"
echo
echo "| added latency each way | fastwrite write MB/s | fastwrite total MB/s | writethrough write MB/s | writethrough total MB/s |"
echo "| --- | --- | --- | --- | --- |"
for d in 0 1 5; do
  PP=$(bench_port)
  "$B/bench/grantfs-latency-proxy" --listen=127.0.0.1:$PP --target=127.0.0.1:$SP --delay_ms=$d \
    >"$W/proxy$d.log" 2>&1 &
  PIDS+=($!)
  sleep 0.3
  mount_via "fw$d" "$PP" fastwrite
  mount_via "wt$d" "$PP" writethrough
  read -r fw_w fw_t < <(dd_csv "$W/fw$d" "$MIB_SWEEP")
  read -r wt_w wt_t < <(dd_csv "$W/wt$d" "$MIB_SWEEP")
  echo "| $d ms | $(mbps "$MIB_SWEEP" "$fw_w") | $(mbps "$MIB_SWEEP" "$fw_t") | $(mbps "$MIB_SWEEP" "$wt_w") | $(mbps "$MIB_SWEEP" "$wt_t") |"
done
echo

mkdir -p "$W/ptsrc" "$W/pt" "$W/local"
"$B/bench/grantfs-passthrough" "$W/ptsrc" "$W/pt"
MOUNTS+=("$W/pt")
mount_via gfs "$SP" fastwrite
echo "## The ceiling: dd --mib=$MIB_CEIL, 512 KiB writes, fsync, median of $RUNS (MB/s)"
echo
echo "| target | data | write phase MB/s | total MB/s (incl. fsync) |"
echo "| --- | --- | --- | --- |"
for data in non-zero zeros; do
  z=""; [ "$data" = zeros ] && z="--zeros"
  for t in gfs pt local; do
    name=$([ $t = gfs ] && echo "GrantFS (fastwrite)" || ([ $t = pt ] && echo "FUSE passthrough" || echo "local disk"))
    read -r w s < <(dd_csv "$W/$t" "$MIB_CEIL" "$z")
    echo "| $name | $data | $(mbps "$MIB_CEIL" "$w") | $(mbps "$MIB_CEIL" "$s") |"
  done
done
