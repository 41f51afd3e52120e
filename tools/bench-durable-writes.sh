#!/usr/bin/env bash
# Durable writes over the product's real path (issue 12): uuidmap `Put` over
# gRPC against Redis `SET` with `appendonly yes`, side by side on one disk,
# driven by neutral C load generators (h2load, redis-benchmark).
#
#   tools/bench-durable-writes.sh
#
# Installs h2load (nghttp2-client) and redis-server/redis-benchmark from
# Debian's packages if absent, builds `uuidmap` (release), then, for each
# fsync mode (`always`: uuidmap `--fsync always`, Redis `appendfsync always`;
# `never`: `--fsync never`, `appendfsync no`, the ceiling) runs ROUNDS
# rounds, alternating which server goes first, of:
#   - 1 writer:   h2load -c1 -m1         | redis-benchmark -t set -c 1  -d 16
#   - 64 writers: h2load -c4 -m16        | redis-benchmark -t set -c 64 -d 16
#                 h2load -c64 -m1        |
# and measures the disk's sync rate with `dd oflag=dsync bs=4k` in each
# round. Each server runs fresh on its own temporary directory under
# TMPDIR (same disk for both), removed at exit. Prints per-round figures
# and, per row, the median and the spread (min-max) of the rounds.
#
# Keys: h2load sends the same request body (one file, `-d`) on every
# request; it has no way to vary it. So every uuidmap Put writes the same
# key (an overwrite in place: the WAL record, its bytes and its fsync are
# the same as for a new key; the index apply does no insertion probing and
# never grows a table, which flatters apply by well under 1 µs per write
# against a ~250 µs sync-bound round trip). redis-benchmark gets `-r` for
# random keys out of 1M.
#
# h2load counts a 200 response as success; a gRPC error is also a 200 with
# a `grpc-status` trailer. The script therefore checks, after each uuidmap
# run, that the server is still up and that the applied LSN moved
# (`uuidmap stats`), and prints h2load's failed/errored counts.
#
# Knobs (environment): ROUNDS (default 3), N1 (requests at 1 writer,
# default 20000), N64 (requests at 64 writers, default 200000), MODES
# (default "always never"), PREALLOCATE (uuidmap's --wal-preallocate,
# default on), OVERLAP (uuidmap's --wal-overlap-syncs, one or more of on
# and off, default "off"; with both, each round runs uuidmap once with each,
# in alternating order, as `uuidmap/overlap-on` and `uuidmap/overlap-off`). The machine may be shared: the load average is
# printed with each round; record it with the results.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
N1=${N1:-20000}
N64=${N64:-200000}
MODES=${MODES:-"always never"}
PREALLOCATE=${PREALLOCATE:-on}
OVERLAP=${OVERLAP:-off}

. tools/install-redis.sh
. tools/install-h2load.sh
for tool in h2load redis-server redis-benchmark; do
  command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 2; }
done

echo "== cargo build --release --bin uuidmap"
cargo build --release --bin uuidmap
uuidmap=target/release/uuidmap

work=$(mktemp -d "${TMPDIR:-/tmp}/bench-durable-writes.XXXXXX")
server_pid=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
trap 'stop_server; rm -rf "$work"' EXIT

# A free loopback port (asked of the kernel through Python's socket).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_port() {
  for _ in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "port $1 never opened" >&2
  return 1
}

# The request body: one gRPC message frame (flag 0, u32 big-endian length)
# around PutRequest { key = 1: 16 bytes, value = 2: 16 bytes }. The key is
# neither the nil nor the max UUID.
body=$work/put.bin
{
  printf '\x00\x00\x00\x00\x24'
  printf '\x0a\x10'
  printf '\x01\x23\x45\x67\x89\xab\xcd\xef\x01\x23\x45\x67\x89\xab\xcd\xef'
  printf '\x12\x10'
  printf '\xfe\xdc\xba\x98\x76\x54\x32\x10\xfe\xdc\xba\x98\x76\x54\x32\x10'
} >"$body"
[ "$(stat -c %s "$body")" -eq 41 ] || { echo "bad body file" >&2; exit 2; }

# uuidmap <mode> <overlap> <label> <h2load flags...>: one fresh server, one
# h2load run.
run_uuidmap() {
  local mode=$1 overlap=$2 label=$3 name=uuidmap
  shift 3
  [ "$(wc -w <<<"$OVERLAP")" -gt 1 ] && name=uuidmap/overlap-$overlap
  local dir=$work/uuidmap port metrics_port out
  rm -rf "$dir"
  mkdir -p "$dir"
  port=$(free_port)
  "$uuidmap" serve --data-dir "$dir" --listen "127.0.0.1:$port" --fsync "$mode" \
    --wal-preallocate "$PREALLOCATE" --wal-overlap-syncs "$overlap" --metrics-listen off >"$work/uuidmap.log" 2>&1 &
  server_pid=$!
  wait_port "$port"
  # Steady state: a fresh server makes its first spare WAL file in the
  # background within about a second, and its first write after that moves
  # the log onto it. Wait for it and send a few writes first.
  if [ "$PREALLOCATE" = on ]; then
    for _ in $(seq 100); do [ -e "$dir/wal-spare" ] && break; sleep 0.1; done
  fi
  h2load -n 20 -c1 -m1 -d "$body" -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:$port/uuidmap.v1.UuidMap/Put" >/dev/null 2>&1
  out=$(h2load "$@" -d "$body" -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:$port/uuidmap.v1.UuidMap/Put" 2>&1)
  kill -0 "$server_pid" || { echo "uuidmap died:" >&2; cat "$work/uuidmap.log" >&2; exit 1; }
  stop_server
  local rate ok
  rate=$(sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' <<<"$out")
  ok=$(grep '^requests:' <<<"$out")
  echo "$mode $label $name $rate" >>"$work/results"
  printf '  %-22s %-20s %10s /s   (%s)\n' "$label" "$name" "$rate" "$ok"
}

# redis <mode> <label> <clients>: one fresh server, one redis-benchmark run.
run_redis() {
  local mode=$1 label=$2 clients=$3 n=$4
  local dir=$work/redis port fsync out rate
  rm -rf "$dir"
  mkdir -p "$dir"
  port=$(free_port)
  fsync=always
  [ "$mode" = never ] && fsync=no
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' \
    --appendonly yes --appendfsync "$fsync" --daemonize no >"$work/redis.log" 2>&1 &
  server_pid=$!
  wait_port "$port"
  out=$(redis-benchmark -p "$port" -q -t set -c "$clients" -d 16 -r 1000000 -n "$n" 2>&1)
  stop_server
  rate=$(tr '\r' '\n' <<<"$out" | sed -n 's/^SET: \([0-9.]*\) requests per second.*/\1/p' | tail -1)
  echo "$mode $label redis $rate" >>"$work/results"
  printf '  %-22s redis   %10s /s\n' "$label" "$rate"
}

run_dd() {
  local count=2000 secs
  secs=$(dd if=/dev/zero of="$work/dd" bs=4k count=$count oflag=dsync 2>&1 |
    sed -n 's/.* copied, \([0-9.]*\) s.*/\1/p')
  rm -f "$work/dd"
  echo "dd - - $(python3 -c "print(round($count / $secs))")" >>"$work/results"
  echo "  dd oflag=dsync bs=4k   $(python3 -c "print(round($count / $secs))") syncs/s"
}

# The OVERLAP settings, in the order of round $2 (reversed every other
# round, so that neither always runs first).
overlaps() {
  if [ $(($2 % 2)) -eq 1 ]; then echo $1; else echo $1 | tr ' ' '\n' | tac | tr '\n' ' '; fi
}
uuidmap_rows() {
  local overlap
  for overlap in $(overlaps "$OVERLAP" "$2"); do
    run_uuidmap "$1" "$overlap" "1 writer" -n "$N1" -c1 -m1
    run_uuidmap "$1" "$overlap" "64: 4 conns x 16" -n "$N64" -c4 -m16
    run_uuidmap "$1" "$overlap" "64: 64 conns x 1" -n "$N64" -c64 -m1
  done
}
redis_rows() {
  run_redis "$1" "1 writer" 1 "$N1"
  run_redis "$1" "64: 64 conns" 64 "$N64"
}

: >"$work/results"
for round in $(seq 1 "$ROUNDS"); do
  echo "== round $round of $ROUNDS, $(date -u +%FT%TZ), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  run_dd
  for mode in $MODES; do
    if [ $((round % 2)) -eq 1 ]; then
      uuidmap_rows "$mode" "$round"
      redis_rows "$mode"
    else
      redis_rows "$mode"
      uuidmap_rows "$mode" "$round"
    fi
  done
done

# Median and spread per (mode, row, server) over the rounds; ratio of the
# medians against Redis's row with the same writer count (64 connections
# for both 64-writer rows).
echo
echo "== medians over $ROUNDS rounds (min-max); $(nproc) cores, $(uname -r)"
python3 - "$work/results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    parts = line.split()
    mode, server, rate = parts[0], parts[-2], float(parts[-1])
    label = " ".join(parts[1:-2])
    rows.setdefault((mode, label, server), []).append(rate)
def med(k): return statistics.median(rows[k]) if k in rows else None
print("| fsync | writers | server | median /s | spread /s | vs Redis |")
print("| --- | --- | --- | --- | --- | --- |")
for (mode, label, server), v in rows.items():
    m = statistics.median(v)
    ratio = ""
    if server.startswith("uuidmap"):
        r = med((mode, "1 writer" if label == "1 writer" else "64: 64 conns", "redis"))
        ratio = f"{m / r:.2f}x" if r else ""
    print(f"| {mode} | {label} | {server} | {m:,.0f} | {min(v):,.0f}-{max(v):,.0f} | {ratio} |")
EOF
