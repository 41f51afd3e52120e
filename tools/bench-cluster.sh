#!/usr/bin/env bash
# Replicated durable writes against a single node (issue 15's benchmark
# "replicated durable writes/s at 64 writers >= 50 % of a single node"):
# `uuidmap bench --op put --tasks 64` against
#   single   one `uuidmap serve --fsync always`
#   group    three `uuidmap serve --fsync always --node-id N` on loopback
#            (tools/cluster-3.sh), the client given all three URLs (its
#            writes go to the leader)
# side by side, ROUNDS rounds, alternating which goes first, each on fresh
# data directories under a temporary directory (removed at exit). All
# processes (servers and the bench client) share this machine's cores.
#
#   tools/bench-cluster.sh
#
# Prints each run's writes/s and, per set-up, the median (min-max) and the
# group's median as a share of the single node's.
#
# MODE=reads measures lookups instead (issue 15's "follower lookups keep
# their single-node rates"): ENTRIES entries are put first (through the
# group's leader), then `uuidmap bench --op lookup --keys 100` runs
# against the single node, and against one follower of the group alone.
#
# Knobs (environment): MODE (writes or reads, default writes), ROUNDS
# (default 3), SECS (seconds per run, default 5), TASKS (default 64),
# ENTRIES (MODE=reads, default 100000), UUIDMAP_BIN (a built binary;
# default: build target/release/uuidmap).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
TASKS=${TASKS:-64}
MODE=${MODE:-writes}
ENTRIES=${ENTRIES:-100000}
if [ -z "${UUIDMAP_BIN:-}" ]; then
  cargo build --release --bin uuidmap >&2
  bin=$root/target/release/uuidmap
else
  bin=$UUIDMAP_BIN
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-cluster.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_base() { # a base port with the next 30 free (best effort)
  python3 -c '
import socket, random
while True:
    base = random.randrange(20000, 60000, 10)
    try:
        socks = []
        for p in range(base, base + 30):
            s = socket.socket(); s.bind(("127.0.0.1", p)); socks.append(s)
        print(base); break
    except OSError:
        pass
    finally:
        for s in socks: s.close()'
}
median_range() { sort -g | awk '{a[NR]=$1} END {printf "%.0f (%.0f-%.0f)", a[int((NR+1)/2)], a[1], a[NR]}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

wait_writable() { # servers: until a put is taken (15 s)
  local i
  for i in $(seq 1 300); do
    if "$bin" put --server "$1" --timeout 1 ffffffff-0000-4000-8000-000000000001 \
      ffffffff-0000-4000-8000-000000000002 >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.05
  done
  echo "no write taken by $1 within 15 s" >&2
  return 1
}

json_field() { # field: from bench's JSON line on stdin (no wrong answers, no misses)
  tail -1 | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['wrong']==0 and d.get('misses',0)==0, d; print(round(d['$1']))"
}

bench() { # servers -> writes/s, or (MODE=reads) lookups/s of keys
  if [ "$MODE" = reads ]; then
    "$bin" bench --op put --tasks "$TASKS" --secs 1 --json --entries "$ENTRIES" \
      --load "$ENTRIES" --server "$1" >/dev/null
    local target=$1
    if [ -n "${2:-}" ]; then target=$2; fi
    sleep 1
    "$bin" bench --op lookup --keys 100 --tasks "$TASKS" --secs "$SECS" --json \
      --entries "$ENTRIES" --server "$target" | json_field keys_per_s
  else
    "$bin" bench --op put --tasks "$TASKS" --secs "$SECS" --json --server "$1" |
      json_field calls_per_s
  fi
}

follower_of() { # servers -> the URL of one member that does not lead
  local leader
  leader=$("$bin" cluster status --server "$1" | awk '$1 == "leader_url" {print $2}')
  tr ',' '\n' <<<"$1" | grep -vxF "$leader" | head -1
}

run_single() { # round -> writes/s
  local base dir
  base=$(free_base)
  dir=$work/single-$1
  "$bin" serve --fsync always --data-dir "$dir" --listen "127.0.0.1:$base" \
    --metrics-listen off >"$work/single-$1.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  wait_writable "http://127.0.0.1:$base"
  bench "http://127.0.0.1:$base"
  kill -TERM "$pid"
  wait "$pid" || true
}

run_group() { # round -> writes/s
  local base
  base=$(free_base)
  UUIDMAP_CLUSTER_DIR=$work/group-$1 UUIDMAP_CLUSTER_BASE_PORT=$base UUIDMAP_BIN=$bin \
    tools/cluster-3.sh >"$work/group-$1.out" 2>&1 &
  local pid=$!
  pids+=("$pid")
  local urls="http://127.0.0.1:$base,http://127.0.0.1:$((base + 10)),http://127.0.0.1:$((base + 20))"
  wait_writable "$urls"
  if [ "$MODE" = reads ]; then
    local follower
    follower=$(follower_of "$urls")
    if [ -z "$follower" ]; then
      echo "no follower found among $urls" >&2
      exit 1
    fi
    bench "$urls" "$follower"
  else
    bench "$urls"
  fi
  kill -TERM "$pid"
  wait "$pid" || true
}

unit="writes/s"
[ "$MODE" = reads ] && unit="keys/s (lookups of 100 keys, on a follower for the group)"
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $TASKS tasks, $SECS s per run, $ROUNDS rounds; $unit"
single=()
group=()
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then
    s=$(run_single "$r"); g=$(run_group "$r")
  else
    g=$(run_group "$r"); s=$(run_single "$r")
  fi
  single+=("$s")
  group+=("$g")
  echo "round $r: single $s, group of 3 $g (load $(cut -d' ' -f1 /proc/loadavg))"
done
sm=$(printf '%s\n' "${single[@]}" | median)
gm=$(printf '%s\n' "${group[@]}" | median)
echo "| set-up | $unit, median (min-max) |"
echo "| --- | --- |"
echo "| single node, fsync always | $(printf '%s\n' "${single[@]}" | median_range) |"
echo "| group of 3, fsync always, one machine | $(printf '%s\n' "${group[@]}" | median_range) |"
python3 -c "print(f'group / single: {$gm / $sm:.2f}')"
