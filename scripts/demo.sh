#!/usr/bin/env bash
# A local GrantFS cluster: a witness, a primary, its replica, and two mounts
# standing for two nodes (each mount knows both servers); this machine's node
# agent (grantfs-node) for global mounts, and the cluster's configuration
# file, so that `grantfsctl mount -g /global/NAME` works with no flags.
#   scripts/demo.sh          install, build, start, mount, show a file cross nodes
#   scripts/demo.sh stop     stop the agent (its global mounts go), unmount both
#                            nodes and stop the servers
# GRANTFS_DEMO_CONFIG: where the configuration goes (default
# /etc/grantfs/cluster.conf; one the demo did not write is left alone).
# GRANTFS_DEMO_PORT (7420), GRANTFS_DEMO_METRICS_PORT (9420): the first ports.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
DATA=${GRANTFS_DEMO_DATA:-/var/lib/grantfs-demo}
PORT=${GRANTFS_DEMO_PORT:-7420}  # primary; replica PORT+1, witness PORT+2
# Prometheus metrics (docs/metrics.md): primary MPORT, replica +1, witness +2,
# the two mounts +3 and +4, the node agent +5.
MPORT=${GRANTFS_DEMO_METRICS_PORT:-9420}
NODES=(/mnt/grantfs/node1 /mnt/grantfs/node2)
CONFIG=${GRANTFS_DEMO_CONFIG:-/etc/grantfs/cluster.conf}
DEMO_MARK="# written by scripts/demo.sh"
[ "$(id -u)" -eq 0 ] || { echo "demo.sh: run as root (FUSE mounts)"; exit 1; }
A=127.0.0.1:$PORT
B=127.0.0.1:$((PORT + 1))
W=127.0.0.1:$((PORT + 2))
metrics() { echo "--metrics_addr=127.0.0.1:$((MPORT + $1))"; }

stop() {
  # The agent first: with --unmount_on_stop it takes its global mounts down.
  if [ -f "$DATA/node.pid" ]; then
    kill "$(cat "$DATA/node.pid")" 2>/dev/null || true
    for i in $(seq 50); do kill -0 "$(cat "$DATA/node.pid")" 2>/dev/null || break; sleep 0.2; done
    rm -f "$DATA/node.pid"
  fi
  # What it could not take down (busy): detached.
  if [ -f "$DATA/node-agent/mounts.list" ]; then
    while IFS=$'\t' read -r m _; do  # PATH<TAB>SUBDIR<TAB>OPTIONS
      if mountpoint -q "$m" 2>/dev/null; then umount -l "$m" || true; fi
    done <"$DATA/node-agent/mounts.list"
  fi
  for m in "${NODES[@]}"; do
    if mountpoint -q "$m"; then fusermount3 -u "$m" || umount -l "$m"; fi
  done
  for p in a b witness; do
    if [ -f "$DATA/$p.pid" ]; then
      kill "$(cat "$DATA/$p.pid")" 2>/dev/null || true
      rm -f "$DATA/$p.pid"
    fi
  done
  echo "demo: stopped (data kept in $DATA; rm -rf it to start empty)"
}

if [ "${1:-}" = "stop" ]; then stop; exit 0; fi

scripts/install-deps.sh
scripts/build.sh
BIN="$ROOT/$BUILD_DIR"
# The servers refuse a missing data directory (a data disk not mounted);
# an empty one is a new volume.
mkdir -p "$DATA" "$DATA/a" "$DATA/b" "${NODES[@]}"
stop >/dev/null 2>&1 || true
# The cluster's keys (made once, kept with the data): every server, mount
# and grantfsctl runs with TLS and a certificate, and finds them through
# GRANTFS_TLS_DIR (docs/security.md).
export GRANTFS_TLS_DIR="$DATA/keys"
# The demo's nodes act as root: their certificate keeps root (no root squash).
"$BIN/client/grantfsctl" init --node_options=root >/dev/null
"$BIN/server/grantfs-server" --role=witness --listen=$W --data_dir="$DATA/witness" "$(metrics 2)" \
  >"$DATA/witness.log" 2>&1 &
echo $! >"$DATA/witness.pid"
"$BIN/server/grantfs-server" --role=primary --listen=$A --peer=$B --witness=$W \
  --data_dir="$DATA/a" --capacity=4G "$(metrics 0)" >"$DATA/a.log" 2>&1 &
echo $! >"$DATA/a.pid"
"$BIN/server/grantfs-server" --role=replica --listen=$B --peer=$A --witness=$W \
  --data_dir="$DATA/b" --capacity=4G "$(metrics 1)" >"$DATA/b.log" 2>&1 &
echo $! >"$DATA/b.pid"
# Ready when the primary says its replica is in sync (whichever server is
# primary: after a restart of the demo the roles may be the other way).
for i in $(seq 100); do
  "$BIN/client/grantfsctl" --server=$A,$B status 2>/dev/null | grep -q "replica state:   in sync" &&
    break
  sleep 0.2
done
n=3
for m in "${NODES[@]}"; do
  "$BIN/client/grantfs-mount" "$A,$B:/" "$m" --log_file="$DATA/mount-$(basename "$m").log" \
    "$(metrics $n)"
  n=$((n + 1))
done
# The cluster's configuration (servers, keys, node name), where grantfsctl
# and the node agent look by default; then this machine's agent.
if [ -f "$CONFIG" ] && ! grep -qF "$DEMO_MARK" "$CONFIG"; then
  echo "demo: $CONFIG exists and was not written by the demo: leaving it alone;" \
    "the demo's is $DATA/cluster.conf (grantfsctl --config=$DATA/cluster.conf ...)"
  CONFIG=$DATA/cluster.conf
fi
mkdir -p "$(dirname "$CONFIG")"
cat >"$CONFIG" <<EOC
$DEMO_MARK: the demo cluster (docs/operations.md, "Global mounts")
servers = $A,$B
tls_dir = $GRANTFS_TLS_DIR
node = $(hostname -s)
EOC
mkdir -p "$DATA/node-agent"
"$BIN/client/grantfs-node" --config="$CONFIG" --state_dir="$DATA/node-agent" --unmount_on_stop \
  "$(metrics 5)" >"$DATA/node.log" 2>&1 &
echo $! >"$DATA/node.pid"
CTL_CONFIG=""
[ "$CONFIG" = /etc/grantfs/cluster.conf ] || CTL_CONFIG=" --config=$CONFIG"
echo "GrantFS says hello at $(date)" >"${NODES[0]}/hello.txt"
echo "demo: wrote ${NODES[0]}/hello.txt; reading it on node2:"
cat "${NODES[1]}/hello.txt"
cat <<EOT

GrantFS is running: primary $A, replica $B, witness $W (data and logs in $DATA),
mounted at ${NODES[0]} and ${NODES[1]}, with TLS and the keys in $DATA/keys:
  export GRANTFS_TLS_DIR=$DATA/keys                         for the commands below
  $BIN/client/grantfsctl --server=$A,$B status       roles, epoch, replica state, space
  df -h ${NODES[0]}                                        capacity as every node sees it
  kill -9 \$(cat $DATA/a.pid)                          a failover drill: the replica takes over
  $BIN/client/grantfsctl --server=$A,$B switchover   planned switchover
  curl -s http://127.0.0.1:$MPORT/metrics                 the primary's metrics (docs/metrics.md);
      the replica's on port $((MPORT + 1)), the witness's $((MPORT + 2)), the mounts' $((MPORT + 3))
      and $((MPORT + 4)), the node agent's $((MPORT + 5)); docs/grafana-dashboard.json shows them
This machine's node agent runs (log $DATA/node.log), and $CONFIG says where
the cluster is, so these need no other flags:
  $BIN/client/grantfsctl$CTL_CONFIG mount -g /global/demo        a global mount: on every node's agent
  $BIN/client/grantfsctl$CTL_CONFIG mounts                         global mounts and each node's state
  $BIN/client/grantfsctl$CTL_CONFIG nodes                          the node agents and their heartbeats
  $BIN/client/grantfsctl$CTL_CONFIG umount -g /global/demo       unmounted everywhere
  $0 stop                                   unmount and stop
EOT
