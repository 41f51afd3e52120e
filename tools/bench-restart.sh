#!/usr/bin/env bash
# Restart as a process (issue 16 item 2): the time from exec of
# `uuidmap serve` to its first served Get, and of redis-server to its first
# served GET, in three cases each, the median (and range) of
# UUIDMAP_BENCH_RUNS runs:
#
#   uuidmap warm   snapshot of N entries, its pages in the page cache
#   uuidmap cold   the same, the data files' pages evicted first
#   uuidmap WAL    snapshot of N plus a WAL tail of T entries to replay (warm)
#   Redis RDB warm / RDB cold   dump.rdb of N keys
#   Redis AOF      appendonly, N SETs to replay (warm)
#
#   tools/bench-restart.sh
#
# Readiness probe: curl (--http2-prior-knowledge, a gRPC-framed GetRequest
# from tools/grpc-body.py, content-type application/grpc, te trailers)
# until it answers grpc-status 0; for Redis, redis-cli GET until it returns
# the value (not LOADING, not a refused connection). curl rather than our
# own `uuidmap get`: a neutral client, and a smaller process to start on
# every poll (grpcurl is not packaged here). Polls are 5 ms apart, so a
# figure is late by up to ~5 ms plus one curl/redis-cli start (a few ms),
# alike for both servers.
#
# Cold: `sync`, then posix_fadvise(POSIX_FADV_DONTNEED) on every file of the
# data directory (python's os.posix_fadvise); fincore prints how much of the
# data stayed resident. If /proc/sys/vm/drop_caches is writable, it is used
# too (echo 1). Every run starts from a fresh copy of a prepared directory
# and the server is killed with SIGKILL after its first answer, so no run
# changes the next one's files (a graceful stop would snapshot the WAL tail
# away).
#
# Knobs (environment): UUIDMAP_BENCH_N (entries, default 10M),
# UUIDMAP_BENCH_TAIL (WAL tail entries, default N/10), UUIDMAP_BENCH_RUNS
# (default 3), UUIDMAP_BENCH_DIR (where the data directories go, default a
# temporary directory under target/; it needs ~3 x 0.5 GiB per 10M),
# UUIDMAP_BIN (the server to run; default: built here).
#
# Two builds side by side: UUIDMAP_BIN_B=<another uuidmap> runs the three
# uuidmap cases with both binaries in each round, the order of the two
# alternating from round to round, on the same prepared directories (made
# by UUIDMAP_BIN), and leaves Redis out.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
n=${UUIDMAP_BENCH_N:-10000000}
tail_n=${UUIDMAP_BENCH_TAIL:-$((n / 10))}
runs=${UUIDMAP_BENCH_RUNS:-3}

. tools/install-redis.sh
bin=${UUIDMAP_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --bin uuidmap >&2
  bin=$root/target/release/uuidmap
fi
bin_b=${UUIDMAP_BIN_B:-}
mkdir -p target
work=${UUIDMAP_BENCH_DIR:-$(mktemp -d "$root/target/bench-restart.XXXXXX")}
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  [ -n "${UUIDMAP_BENCH_DIR:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
now_ns() { date +%s%N; }
median_range() { # numbers on stdin -> "median (min-max)"
  sort -g | awk '{a[NR]=$1} END {printf "%.0f (%.0f-%.0f)", a[int((NR+1)/2)], a[1], a[NR]}'
}
grpc() { # port method body -> grpc-status
  curl -s --http2-prior-knowledge -H 'content-type: application/grpc' -H 'te: trailers' \
    --data-binary @"$3" -D - -o /dev/null "http://127.0.0.1:$1/uuidmap.v1.UuidMap/$2" 2>/dev/null |
    tr -d '\r' | awk -F': ' '$1 == "grpc-status" {print $2}'
}
evict() { # dir: drop its files' pages from the page cache
  sync
  find "$1" -type f -print0 | xargs -0 python3 -c '
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)'
  if [ -w /proc/sys/vm/drop_caches ]; then echo 1 >/proc/sys/vm/drop_caches || true; fi
  if command -v fincore >/dev/null; then
    find "$1" -type f -exec fincore -b -n -o RES,SIZE {} + |
      awk '{r += $1; s += $2} END {printf "   (after eviction: %d of %d data bytes resident)\n", r, s}' >&2
  fi
}
warm() { find "$1" -type f -exec cat {} + >/dev/null; }

load_uuidmap() { # port first count
  local chunk=50000 s c
  for ((s = $2; s < $2 + $3; s += chunk)); do
    c=$(($2 + $3 - s < chunk ? $2 + $3 - s : chunk))
    python3 tools/grpc-body.py write "$s" "$c" "$work/w.bin"
    [ "$(grpc "$1" Write "$work/w.bin")" = 0 ] || { echo "Write failed" >&2; exit 1; }
  done
}
load_redis() { # port first count
  local chunk=50000 s c
  for ((s = $2; s < $2 + $3; s += chunk)); do
    c=$(($2 + $3 - s < chunk ? $2 + $3 - s : chunk))
    python3 tools/grpc-body.py resp "$s" "$c" "$work/r.bin"
    redis-cli -p "$1" --pipe <"$work/r.bin" >/dev/null
  done
}
wait_grpc() { until [ "$(grpc "$1" Get "$work/get.bin")" = 0 ]; do sleep 0.005; done; }

probe=$((n / 2))
python3 tools/grpc-body.py get "$probe" "$work/get.bin"
# Redis's probe key is printable (redis-cli takes it as an argument) and
# holds the same 16-byte value; it is set last, so it answers only when the
# whole data set is loaded.
redis_probe_value=$(python3 -c "import hashlib;print(hashlib.md5(b'v$probe').hexdigest())")

echo "== preparing uuidmap: snapshot of $n, and snapshot of $n + WAL tail of $tail_n" >&2
port=$(free_port)
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$work/uuidmap-snap" --fsync never \
  --snapshot-interval off >"$work/serve.log" 2>&1 &
pid=$!
sleep 0.5; wait_grpc "$port" 2>/dev/null || true
load_uuidmap "$port" 0 "$n"
kill -TERM "$pid"; wait "$pid" || true; pid= # a graceful stop takes the final snapshot
cp -a "$work/uuidmap-snap" "$work/uuidmap-wal"
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$work/uuidmap-wal" --fsync always \
  --snapshot-interval off --snapshot-wal-bytes $((1 << 40)) >"$work/serve.log" 2>&1 &
pid=$!
wait_grpc "$port"
load_uuidmap "$port" "$n" "$tail_n"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true; pid= # no final snapshot: the tail stays in the WAL
du -sh "$work/uuidmap-snap" "$work/uuidmap-wal" >&2

[ -n "$bin_b" ] || echo "== preparing Redis: dump.rdb and appendonly of $n keys" >&2
[ -n "$bin_b" ] || mkdir -p "$work/redis-rdb" "$work/redis-aof"
for mode in rdb aof; do
  [ -n "$bin_b" ] && break
  aof=no; [ $mode = aof ] && aof=yes
  redis-server --port "$port" --dir "$work/redis-$mode" --save '' --appendonly $aof \
    --appendfsync no --auto-aof-rewrite-percentage 0 >"$work/redis.log" 2>&1 &
  pid=$!
  until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
  load_redis "$port" 0 "$n"
  redis-cli -p "$port" set bench-key "$redis_probe_value" >/dev/null
  [ $mode = rdb ] && redis-cli -p "$port" save >/dev/null
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" 2>/dev/null || true; pid=
done
[ -n "$bin_b" ] || du -sh "$work/redis-rdb" "$work/redis-aof" >&2

run_uuidmap() { # template cold? [binary] -> ms
  rm -rf "$work/run"; cp -a "$1" "$work/run"
  if [ "$2" = cold ]; then evict "$work/run"; else warm "$work/run"; fi
  local port t0 t1; port=$(free_port)
  t0=$(now_ns)
  "${3:-$bin}" serve --listen "127.0.0.1:$port" --data-dir "$work/run" --fsync always \
    --snapshot-interval off --snapshot-wal-bytes $((1 << 40)) >"$work/run.log" 2>&1 &
  pid=$!
  wait_grpc "$port"
  t1=$(now_ns)
  kill -9 "$pid"; wait "$pid" 2>/dev/null || true; pid=
  echo $(((t1 - t0) / 1000000))
}
run_redis() { # template cold? aof? -> ms
  rm -rf "$work/run"; cp -a "$1" "$work/run"
  if [ "$2" = cold ]; then evict "$work/run"; else warm "$work/run"; fi
  local port t0 t1; port=$(free_port)
  t0=$(now_ns)
  redis-server --port "$port" --dir "$work/run" --save '' --appendonly "$3" >"$work/run.log" 2>&1 &
  pid=$!
  until [ "$(redis-cli -p "$port" get bench-key 2>/dev/null)" = "$redis_probe_value" ]; do sleep 0.005; done
  t1=$(now_ns)
  kill -9 "$pid"; wait "$pid" 2>/dev/null || true; pid=
  echo $(((t1 - t0) / 1000000))
}

if [ -n "$bin_b" ]; then
  declare -A times
  for ((r = 0; r < runs; r++)); do
    echo "== round $((r + 1)) of $runs (A: $bin, B: $bin_b)" >&2
    order="a b"; [ $((r % 2)) = 1 ] && order="b a"
    for side in $order; do
      b=$bin; [ $side = b ] && b=$bin_b
      times[uw$side]+="$(run_uuidmap "$work/uuidmap-snap" warm "$b") "
      times[uc$side]+="$(run_uuidmap "$work/uuidmap-snap" cold "$b") "
      times[ul$side]+="$(run_uuidmap "$work/uuidmap-wal" warm "$b") "
    done
  done
  row() { echo "| $1 | $(tr ' ' '\n' <<<"${times[$2]}" | grep . | median_range) | ${times[$2]}|"; }
  echo
  echo "## Restart as a process, two builds: $n entries, median (range) of $runs, ms"
  echo
  echo "A: $bin"
  echo "B: $bin_b"
  echo
  echo "| case | ms | runs |"
  echo "| --- | ---: | --- |"
  for side in a b; do
    row "$side: snapshot, warm" uw$side
    row "$side: snapshot, cold (pages evicted)" uc$side
    row "$side: snapshot + WAL tail of $tail_n, warm" ul$side
  done
  exit 0
fi

declare -A times
for ((r = 0; r < runs; r++)); do
  # The cases alternate within each round, so a slow minute hits all alike.
  echo "== round $((r + 1)) of $runs" >&2
  times[uw]+="$(run_uuidmap "$work/uuidmap-snap" warm) "
  times[rw]+="$(run_redis "$work/redis-rdb" warm no) "
  times[uc]+="$(run_uuidmap "$work/uuidmap-snap" cold) "
  times[rc]+="$(run_redis "$work/redis-rdb" cold no) "
  times[ul]+="$(run_uuidmap "$work/uuidmap-wal" warm) "
  times[ra]+="$(run_redis "$work/redis-aof" warm yes) "
done
row() { echo "| $1 | $(tr ' ' '\n' <<<"${times[$2]}" | grep . | median_range) | ${times[$2]}|"; }
echo
echo "## Restart as a process, exec to first served Get: $n entries, median (range) of $runs, ms"
echo
echo "| case | ms | runs |"
echo "| --- | ---: | --- |"
row "uuidmap, snapshot, warm" uw
row "uuidmap, snapshot, cold (pages evicted)" uc
row "uuidmap, snapshot + WAL tail of $tail_n, warm" ul
row "Redis, RDB, warm" rw
row "Redis, RDB, cold (pages evicted)" rc
row "Redis, AOF of $n SETs, warm" ra
