#!/usr/bin/env bash
# Conformance of uuidmap's Redis-protocol port against redis-server: starts
# Debian's redis-server (installed if missing) and `uuidmap serve
# --resp-listen`, each on a fresh temporary directory, and runs
# tools/resp-conformance.py, which sends both the same raw RESP2 commands
# and compares the answers byte for byte (the documented differences are
# checked against uuidmap's documented answer). Exits non-zero on any other
# difference. Then a session of redis-py (Debian's python3-redis, installed
# if missing) against uuidmap: pipelines, scan_iter, SET IFEQ, DELIFEQ.
#
#   tools/resp-conformance.sh              # builds the binary (profile `checked`)
#   UUIDMAP_BIN=path/to/uuidmap tools/resp-conformance.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

. tools/install-redis.sh
command -v redis-server >/dev/null || { echo "redis-server is missing" >&2; exit 1; }
# Debian's python3-redis goes into Debian's own Python, which may not be
# the first python3 on PATH.
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if ! "$py" -c 'import redis' 2>/dev/null; then
  . tools/apt-install.sh
  apt_install python3-redis || echo "without python3-redis, its session is skipped" >&2
fi
if [ -z "${UUIDMAP_BIN:-}" ]; then
  cargo build --profile checked --bin uuidmap >&2
  bin=${CARGO_TARGET_DIR:-$root/target}/checked/uuidmap
else
  bin=$UUIDMAP_BIN
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/resp-conformance.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

read -r grpc_port resp_port redis_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
"$bin" serve --data-dir "$work/data" --listen "127.0.0.1:$grpc_port" \
  --resp-listen "127.0.0.1:$resp_port" --metrics-listen off 2>"$work/server.log" &
pids+=($!)
mkdir "$work/redis"
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$work/redis" --daemonize no >"$work/redis.log" 2>&1 &
pids+=($!)
for port in "$resp_port" "$redis_port"; do
  for _ in $(seq 1 200); do
    [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && break
    sleep 0.05
  done
done
echo "redis-server $(redis-server --version | awk '{print $3}') against uuidmap"
"$py" tools/resp-conformance.py "$redis_port" "$resp_port"
