# Shared preamble of the bench/*.sh scripts (sourced, as root): a work dir
# under /var/tmp removed on exit, mounts and processes registered in MOUNTS
# and PIDS are unmounted / killed on exit, even after a failure.
#   bench_init NAME          -> W (work dir), traps cleanup
#   bench_start_server B     -> SP (port of a grantfs-server with 16 GiB capacity)
# Every process runs with TLS and certificates made in $W/keys
# (GRANTFS_TLS_DIR, exported; needs the build's grantfsctl: bench_keys B).
bench_init() {
  W=$(mktemp -d "/var/tmp/$1.XXXXXX")
  PIDS=()
  MOUNTS=()
  trap bench_cleanup EXIT
}
bench_keys() {
  [ -n "${GRANTFS_TLS_DIR:-}" ] && return 0
  "$1/client/grantfsctl" init --tls_dir="$W/keys" --node_options=root >/dev/null || return 1
  export GRANTFS_TLS_DIR="$W/keys"
}
bench_cleanup() {
  for m in "${MOUNTS[@]}"; do fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$W"
}
bench_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
bench_start_server() {
  bench_keys "$1" || return 1
  SP=$(bench_port)
  mkdir -p "$W/server"  # the server refuses a missing data directory
  "$1/server/grantfs-server" --data_dir="$W/server" --listen=127.0.0.1:$SP --capacity=16G \
    >"$W/server.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do "$1/client/grantfsctl" --server=127.0.0.1:$SP status >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "grantfs-server did not start; log:" >&2
  cat "$W/server.log" >&2
  return 1
}
