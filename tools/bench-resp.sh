#!/usr/bin/env bash
# redis-benchmark against uuidmap's Redis-protocol port (`--resp-listen`)
# and against redis-server, side by side, in alternating rounds (issue 36's
# targets). Prints markdown rows: each server's requests/s (median and
# range of the rounds) and the ratio uuidmap / Redis.
#
#   tools/bench-resp.sh
#
# UUID keys: redis-benchmark's `-r N` replaces `__rand_int__` in an
# argument with a random 12-digit number below N, and a UUID's last group
# is 12 hex digits, so the key template `10000000-0000-4000-8000-__rand_int__`
# makes a valid UUID text key (36 characters) for both servers. The value
# is 16 bytes (`xxxxxxxxxxxxxxxx`, the `-d 16` of the issue: 16 raw bytes
# are a UUID to uuidmap); redis-benchmark does not fill `__data__` in a
# custom command, so the value is written out. Both servers are first
# loaded with the same N keys (MSET batches of 1000 over one socket), so
# GETs hit.
#
# Rows: GET at 64 connections; GET -P 16 at 64 connections; MGET of 100
# keys at 64 connections (each of the 100 `__rand_int__` is drawn anew);
# SET at 1 and at 64 connections, uuidmap under `--fsync always` and
# Redis under `appendonly yes, appendfsync always` (both acknowledge a SET
# after its fsync). Redis runs without RDB snapshots; uuidmap with its
# defaults (metrics off). Then, unless UUIDMAP_BENCH_SCAN_N=0, fresh
# servers are loaded with UUIDMAP_BENCH_SCAN_N keys (default 10000000)
# whose first bytes are spread as random UUIDs' are, and `redis-cli
# --scan` (its default COUNT, 10) walks each to the end: the seconds and
# the keys counted (every key, and on uuidmap no key twice).
#
# Knobs (environment): UUIDMAP_BENCH_N (keys, default 1000000),
# UUIDMAP_BENCH_REQUESTS (GETs per round, default 500000),
# UUIDMAP_BENCH_SET_REQUESTS (SETs per round, default 20000),
# UUIDMAP_BENCH_RUNS (rounds, default 3), UUIDMAP_BENCH_SCAN_N (keys for
# the scan rows, default 10000000; 0: no scan rows), UUIDMAP_BIN (the binary;
# default: target/release/uuidmap, built).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
n=${UUIDMAP_BENCH_N:-1000000}
requests=${UUIDMAP_BENCH_REQUESTS:-500000}
set_requests=${UUIDMAP_BENCH_SET_REQUESTS:-20000}
runs=${UUIDMAP_BENCH_RUNS:-3}
scan_n=${UUIDMAP_BENCH_SCAN_N:-10000000}

. tools/install-redis.sh
if [ -z "${UUIDMAP_BIN:-}" ]; then
  cargo build --release --bin uuidmap >&2
  bin=${CARGO_TARGET_DIR:-$root/target}/release/uuidmap
else
  bin=$UUIDMAP_BIN
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-resp.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
median_range() { sort -g | awk '{a[NR]=$1} END {printf "%.0f (%.0f-%.0f)", a[int((NR+1)/2)], a[1], a[NR]}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

key_template=10000000-0000-4000-8000-__rand_int__
value=xxxxxxxxxxxxxxxx

grpc_port=$(free_port)
u_port=$(free_port)
r_port=$(free_port)
start_servers() { # uuidmap-fsync redis-aof-args...: both, fresh, answering PING
  local fsync=$1
  shift
  "$bin" serve --data-dir "$work/uuidmap" --listen "127.0.0.1:$grpc_port" \
    --resp-listen "127.0.0.1:$u_port" --metrics-listen off --fsync "$fsync" \
    2>"$work/uuidmap.log" &
  pids+=($!)
  mkdir -p "$work/redis"
  redis-server --port "$r_port" --dir "$work/redis" --save "" "$@" \
    >"$work/redis.log" 2>&1 &
  pids+=($!)
  for port in "$u_port" "$r_port"; do
    for _ in $(seq 1 200); do
      [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && break
      sleep 0.05
    done
  done
}
start_servers always --appendonly yes --appendfsync always

load() { # port count [spread]: tools/resp-load.py
  python3 tools/resp-load.py "$1" "$2" "$value" "${3:-}"
}
echo "loading $n keys into each server" >&2
load "$u_port" "$n"
load "$r_port" "$n"
for port in "$u_port" "$r_port"; do
  echo "port $port: DBSIZE $(redis-cli -p "$port" DBSIZE)" >&2
done

rps() { # port args...: requests/s of one redis-benchmark run
  local port=$1
  shift
  # (stderr: against uuidmap redis-benchmark warns that `CONFIG GET`, which
  # it asks for its report, is refused; the run is not affected.)
  redis-benchmark -h 127.0.0.1 -p "$port" -r "$n" --csv "$@" 2>/dev/null |
    tail -n1 | awk -F'","' '{print $2}'
}

row() { # name args...
  local name=$1
  shift
  local i u r
  : >"$work/u"
  : >"$work/r"
  for i in $(seq 1 "$runs"); do
    rps "$u_port" "$@" >>"$work/u"
    rps "$r_port" "$@" >>"$work/r"
  done
  u=$(median <"$work/u")
  r=$(median <"$work/r")
  printf '| %s | %s | %s | %.2fx |\n' "$name" "$(median_range <"$work/u")" \
    "$(median_range <"$work/r")" "$(echo "$u $r" | awk '{print $1 / $2}')"
}

echo "| redis-benchmark | uuidmap req/s | Redis req/s | uuidmap / Redis |"
echo "| --- | --- | --- | --- |"
row "GET, 64 connections" -c 64 -n "$requests" GET "$key_template"
row "GET -P 16, 64 connections" -c 64 -P 16 -n "$requests" GET "$key_template"
mget=()
for _ in $(seq 1 100); do mget+=("$key_template"); done
row "MGET of 100 keys, 64 connections" -c 64 -n "$((requests / 10))" MGET "${mget[@]}"
row "SET, 1 connection (fsync always)" -c 1 -n "$((set_requests / 10))" \
  SET "$key_template" "$value"
row "SET, 64 connections (fsync always)" -c 64 -n "$set_requests" \
  SET "$key_template" "$value"

[ "$scan_n" -gt 0 ] || exit 0
# The scan rows run on fresh servers holding scan_n keys whose first four
# bytes are spread (a multiplicative hash of the key's number), as random
# UUIDs' are: uuidmap's SCAN reply ends after every key sharing the first
# four bytes of its last key, so the GET rows' keys (all `10000000-...`)
# would make each reply a whole segment and flatter it.
for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
pids=()
rm -rf "$work/uuidmap" "$work/redis"
start_servers never --appendonly no
echo "loading $scan_n keys with spread prefixes into fresh servers" >&2
load "$u_port" "$scan_n" spread
load "$r_port" "$scan_n" spread
echo
echo "| redis-cli --scan, $scan_n keys | uuidmap s | keys | distinct | Redis s | keys | uuidmap / Redis (speed) |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
scan_once() { # port: seconds, keys, distinct keys of one redis-cli --scan
  local start end
  start=$(date +%s.%N)
  redis-cli -p "$1" --scan >"$work/keys"
  end=$(date +%s.%N)
  printf '%s %s %s\n' "$(echo "$start $end" | awk '{printf "%.2f", $2 - $1}')" \
    "$(wc -l <"$work/keys")" "$(sort -u "$work/keys" | wc -l)"
}
read -r us uk ud < <(scan_once "$u_port")
read -r rs rk _ < <(scan_once "$r_port")
printf '| default COUNT (10) | %s | %s | %s | %s | %s | %.1fx |\n' \
  "$us" "$uk" "$ud" "$rs" "$rk" "$(echo "$us $rs" | awk '{print $2 / $1}')"
