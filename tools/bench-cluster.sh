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
# group's median as a share of the single node's. Knobs (environment):
# ROUNDS (default 3), SECS (seconds per run, default 5), TASKS (default
# 64), UUIDMAP_BIN (a built binary; default: build target/release/uuidmap).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
TASKS=${TASKS:-64}
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

bench() { # servers -> writes/s
  "$bin" bench --op put --tasks "$TASKS" --secs "$SECS" --json --server "$1" |
    tail -1 | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["wrong"]==0; print(round(d["calls_per_s"]))'
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
  bench "$urls"
  kill -TERM "$pid"
  wait "$pid" || true
}

echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $TASKS writers, $SECS s per run, $ROUNDS rounds"
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
  echo "round $r: single $s writes/s, group of 3 $g writes/s (load $(cut -d' ' -f1 /proc/loadavg))"
done
sm=$(printf '%s\n' "${single[@]}" | median)
gm=$(printf '%s\n' "${group[@]}" | median)
echo "| set-up | writes/s, median (min-max) |"
echo "| --- | --- |"
echo "| single node, fsync always | $(printf '%s\n' "${single[@]}" | median_range) |"
echo "| group of 3, fsync always, one machine | $(printf '%s\n' "${group[@]}" | median_range) |"
python3 -c "print(f'group / single: {$gm / $sm:.2f}')"
