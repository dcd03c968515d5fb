#!/usr/bin/env bash
# A local GrantFS cluster: one server and two mounts standing for two nodes.
#   scripts/demo.sh          install, build, start, mount, show a file cross nodes
#   scripts/demo.sh stop     unmount both nodes and stop the server
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
DATA=${GRANTFS_DEMO_DATA:-/var/lib/grantfs-demo}
PORT=${GRANTFS_DEMO_PORT:-7420}
NODES=(/mnt/grantfs/node1 /mnt/grantfs/node2)
[ "$(id -u)" -eq 0 ] || { echo "demo.sh: run as root (FUSE mounts)"; exit 1; }

stop() {
  for m in "${NODES[@]}"; do
    if mountpoint -q "$m"; then fusermount3 -u "$m" || umount -l "$m"; fi
  done
  if [ -f "$DATA/server.pid" ]; then
    kill "$(cat "$DATA/server.pid")" 2>/dev/null || true
    rm -f "$DATA/server.pid"
  fi
  echo "demo: stopped (data kept in $DATA; rm -rf it to start empty)"
}

if [ "${1:-}" = "stop" ]; then stop; exit 0; fi

scripts/install-deps.sh
scripts/build.sh
BIN="$ROOT/$BUILD_DIR"
mkdir -p "$DATA" "${NODES[@]}"
stop >/dev/null 2>&1 || true
"$BIN/server/grantfs-server" --data_dir="$DATA/volume" --capacity=4G \
  --listen=127.0.0.1:$PORT >"$DATA/server.log" 2>&1 &
echo $! >"$DATA/server.pid"
for i in $(seq 50); do
  "$BIN/client/grantfsctl" --server=127.0.0.1:$PORT status >/dev/null 2>&1 && break
  sleep 0.2
done
for m in "${NODES[@]}"; do
  "$BIN/client/grantfs-mount" 127.0.0.1:$PORT:/ "$m" --log_file="$DATA/mount-$(basename "$m").log"
done
echo "GrantFS says hello at $(date)" >"${NODES[0]}/hello.txt"
echo "demo: wrote ${NODES[0]}/hello.txt; reading it on node2:"
cat "${NODES[1]}/hello.txt"
cat <<EOT

GrantFS is running: server on 127.0.0.1:$PORT (data in $DATA, log $DATA/server.log),
mounted at ${NODES[0]} and ${NODES[1]}.
  $BIN/client/grantfsctl --server=127.0.0.1:$PORT status    sessions, space, inodes
  df -h ${NODES[0]}                                        capacity as every node sees it
  $0 stop                                   unmount and stop
EOT
