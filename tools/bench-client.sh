#!/usr/bin/env bash
# The client SDK against Redis (issue 14's targets), side by side on one
# machine: `uuidmap bench` (the SDK, one client thread, every answer
# checked) against a fresh `uuidmap serve`, and redis-benchmark (C) against
# a fresh Redis, over the same number of entries, in rounds that alternate
# which goes first. Prints one markdown row per case: median (range).
#
#   tools/bench-client.sh
#
# Knobs: UUIDMAP_BENCH_N (entries, default 1000000), UUIDMAP_BENCH_SECS
# (seconds per uuidmap case, default 5), UUIDMAP_BENCH_RUNS (rounds,
# default 3), UUIDMAP_BENCH_REQUESTS (redis-benchmark requests per case,
# default 1000000).
#
# Cases: auto-batched `get` from 64 tasks vs redis GET from 64 clients;
# `get` and unary `get-unary` from 1 task (the client's overhead with
# nothing to batch: p50 against p50); `lookup` of 100 keys per call from
# 64 tasks, and from 16 tasks, vs redis GET -P 16 from 64 clients (keys/s). Redis keys are
# redis-benchmark's random keyspace of the same size (-r), loaded first.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${UUIDMAP_BENCH_N:-1000000}
secs=${UUIDMAP_BENCH_SECS:-5}
runs=${UUIDMAP_BENCH_RUNS:-3}
requests=${UUIDMAP_BENCH_REQUESTS:-1000000}

. tools/install-redis.sh
command -v redis-benchmark >/dev/null || { echo "redis-benchmark is missing" >&2; exit 2; }
cargo build --release --bin uuidmap >&2
bin=$PWD/target/release/uuidmap
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
median_range() { sort -g | awk '{a[NR]=$1} END {printf "%.0f (%.0f-%.0f)", a[int((NR+1)/2)], a[1], a[NR]}'; }

gport=$(free_port)
"$bin" serve --listen "127.0.0.1:$gport" --data-dir "$work/uuidmap" --fsync never \
  --metrics-listen off >"$work/serve.log" 2>&1 &
pids+=($!)
rport=$(free_port)
redis-server --port "$rport" --save '' --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
pids+=($!)
sleep 1
url=http://127.0.0.1:$gport
echo "== loading $n entries into both" >&2
"$bin" bench --server "$url" --op get --tasks 1 --secs 1 --entries "$n" --load "$n" --json >&2
redis-benchmark -p "$rport" -q -t set -r "$n" -n $((n * 3)) -d 16 -c 64 -P 16 >&2

declare -A got
ub() { # name json-field args...
  local name=$1 field=$2
  shift 2
  "$bin" bench --server "$url" --secs "$secs" --entries "$n" --json "$@" |
    python3 -c "import json,sys;d=json.loads(sys.stdin.read().strip().splitlines()[-1]);
assert d['wrong']==0 and d['errors']==0, d;print(d['$field'])"
}
rb() { # args...
  redis-benchmark -p "$rport" -q -t get -r "$n" -n "$requests" -d 16 "$@" |
    tr '\r' '\n' | awk '/requests per second/ {for (i=1;i<=NF;i++) if ($i ~ /^[0-9.]+$/) {print $i; exit}}'
}
add() { got[$1]="${got[$1]:-} $2"; }
for ((r = 0; r < runs; r++)); do
  echo "== round $((r + 1)) of $runs" >&2
  if ((r % 2 == 0)); then order="u r"; else order="r u"; fi
  for side in $order; do
    if [ "$side" = u ]; then
      add get64 "$(ub get64 calls_per_s --op get --tasks 64)"
      add lookup64 "$(ub lookup64 keys_per_s --op lookup --tasks 64 --keys 100)"
      add lookup16 "$(ub lookup16 keys_per_s --op lookup --tasks 16 --keys 100)"
      add get1p50 "$(ub get1 p50_us --op get --tasks 1)"
      add unary1p50 "$(ub unary1 p50_us --op get-unary --tasks 1)"
    else
      add redis64 "$(rb -c 64)"
      add redisP16 "$(rb -c 64 -P 16)"
    fi
  done
done
row() { printf '%s\n' ${got[$1]} | median_range; }
echo
echo "## The client against Redis, $n entries, median (range) of $runs rounds"
echo
echo "| case | uuidmap (uuidmap bench) | Redis (redis-benchmark) |"
echo "| --- | ---: | ---: |"
echo "| get from 64 tasks (auto-batched) vs GET from 64 clients, calls/s | $(row get64) | $(row redis64) |"
echo "| lookup of 100 keys from 64 tasks vs GET -P 16 from 64 clients, keys/s | $(row lookup64) | $(row redisP16) |"
echo "| lookup of 100 keys from 16 tasks vs GET -P 16 from 64 clients, keys/s | $(row lookup16) | $(row redisP16) |"
echo "| get from 1 task, p50 µs: auto-batched | $(row get1p50) | |"
echo "| get from 1 task, p50 µs: unary Get | $(row unary1p50) | |"
