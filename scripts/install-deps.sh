#!/usr/bin/env bash
# Installs what GrantFS needs to build, run and test, from Debian 12 packages.
# Idempotent and non-interactive; run as root.
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config ccache clang-format clang
      libfuse3-dev fuse3 libmicrohttpd-dev
      libgrpc++-dev libgrpc-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev libssl-dev
      librocksdb-dev libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev libgoogle-glog-dev
      python3 python3-pytest sqlite3 rsync git tar attr acl psmisc procps iproute2 curl
      dbench gnuplot-nox util-linux dpkg-dev systemd debootstrap systemd-container)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The e2e tests run as root and check access as another user through the mount.
grep -q '^user_allow_other' /etc/fuse.conf 2>/dev/null || echo user_allow_other >> /etc/fuse.conf
echo "install-deps: all dependencies present"
