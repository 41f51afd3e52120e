#!/usr/bin/env bash
# Speaks to uuidmap's Redis-protocol port (`serve --resp-listen`) with
# Debian's redis-cli: PING, SET/GET with text UUIDs, MGET, DEL, SCAN to the
# end (each key exactly once, both through `redis-cli --scan` and a
# `SCAN cursor COUNT 7` loop), DBSIZE. Installs redis-tools if redis-cli is
# missing. Exits non-zero, naming the command, on a wrong answer.
#
#   tools/resp-check.sh              # builds the binary (profile `checked`)
#   UUIDMAP_BIN=path/to/uuidmap tools/resp-check.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

if ! command -v redis-cli >/dev/null; then
  . tools/apt-install.sh
  apt_install redis-tools
fi
if [ -z "${UUIDMAP_BIN:-}" ]; then
  cargo build --profile checked --bin uuidmap >&2
  bin=${CARGO_TARGET_DIR:-$root/target}/checked/uuidmap
else
  bin=$UUIDMAP_BIN
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/resp-check.XXXXXX")
pid=
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

read -r grpc_port resp_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
"$bin" serve --data-dir "$work/data" --listen "127.0.0.1:$grpc_port" \
  --resp-listen "127.0.0.1:$resp_port" --metrics-listen off --fsync always \
  2>"$work/server.log" &
pid=$!

cli() { redis-cli -h 127.0.0.1 -p "$resp_port" "$@"; }
for _ in $(seq 1 200); do
  [ "$(cli PING 2>/dev/null)" = PONG ] && break
  sleep 0.05
done

failed=0
check() { # what expected actual
  if [ "$2" = "$3" ]; then
    echo "ok    $1"
  else
    printf 'FAIL  %s\n  expected: %q\n  got:      %q\n' "$1" "$2" "$3"
    failed=1
  fi
}

k1=67e55044-10b1-426f-9247-bb680e5fe0c8
k2=67e55044-10b1-426f-9247-bb680e5fe0c9
missing=67e55044-10b1-426f-9247-bb680e5fe0ca
v1=5ba4d000-0000-4000-8000-00000000000a
v2=5ba4d000-0000-4000-8000-00000000000b

check "PING" PONG "$(cli PING)"
check "SET k1 v1" OK "$(cli SET $k1 $v1)"
check "SET k2 v2" OK "$(cli SET $k2 $v2)"
check "GET k1" "$v1" "$(cli GET $k1)"
check "GET missing (nil)" "" "$(cli GET $missing)"
check "MGET k1 missing k2" "$(printf '%s\n\n%s' $v1 $v2)" "$(cli MGET $k1 $missing $k2)"
check "GET not-a-uuid (an error)" "yes" \
  "$(cli GET user:1000 2>&1 | grep -q 'not a UUID' && echo yes || echo no)"
check "DEL k2 missing" 1 "$(cli DEL $k2 $missing)"
check "DEL k2 again" 0 "$(cli DEL $k2)"

# 1000 more keys in two MSETs, then SCAN to the end both ways.
for half in 0 1; do
  args=()
  for i in $(seq 1 500); do
    args+=("$(printf '10000000-0000-4000-8000-%012d' $((half * 500 + i)))" "$v1")
  done
  check "MSET 500 pairs" OK "$(cli MSET "${args[@]}")"
done
check "DBSIZE" 1001 "$(cli DBSIZE)"
cli --scan >"$work/scan"
check "redis-cli --scan: every key" 1001 "$(wc -l <"$work/scan")"
check "redis-cli --scan: no key twice" 1001 "$(sort -u "$work/scan" | wc -l)"
cursor=0
: >"$work/paged"
while :; do
  cli SCAN "$cursor" COUNT 7 >"$work/page"
  cursor=$(head -n1 "$work/page")
  tail -n +2 "$work/page" >>"$work/paged"
  [ "$cursor" = 0 ] && break
done
check "SCAN COUNT 7 loop: every key once" \
  "$(sort "$work/scan")" "$(sort "$work/paged")"
check "DBSIZE after DEL" 1000 "$( cli DEL $k1 >/dev/null; cli DBSIZE)"

kill -TERM "$pid"
wait "$pid" && status=0 || status=$?
pid=
check "the server stops cleanly" 0 "$status"
if [ "$failed" != 0 ]; then
  echo "server log:" && cat "$work/server.log"
  exit 1
fi
echo "all RESP checks passed (redis-cli $(redis-cli --version | awk '{print $2}'))"
