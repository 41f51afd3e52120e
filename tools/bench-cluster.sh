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
# MODE=scans measures scans (issue 15's "... and scans keep their
# single-node rates"), with h2load (nghttp2-client, a neutral C client
# that costs the shared cores little): ENTRIES entries are written in
# batches of 50,000 (curl, gRPC Write; through the group's leader), the
# follower is waited for until it has applied them, one full scan's
# entries are counted (`uuidmap scan | wc -l`), and then h2load runs
# SCANS Scan calls one after another (-c 1 -m 1) against the single node,
# and against one follower of the group: a full scan (FILTER=0), or one
# filtered by the values of FILTER entries (each scan still examines
# every entry). Rates are entries scanned (examined) per second.
#
# MODE=levels measures read consistency levels (issue 31's "linearizable
# reads on a follower >= 0.5x its stale reads" and "lease reads on the
# leader >= 0.9x its stale reads"), with h2load at TASKS in flight (-c 4
# -m TASKS/4): ENTRIES entries are put through the group's leader; then,
# per round, Get of one existing key for SECS seconds on a follower at
# `linearizable` and `stale`, and on the leader at `linearizable` (its
# lease) and `stale`, in an order that alternates by round. Each run's
# body is first sent once with curl and must answer grpc-status 0 (h2load
# counts HTTP, not gRPC, failures); the follower's
# uuidmap_raft_read_index_rounds_total shows its linearizable reads went
# through ReadIndex. Rates are Gets/s; the table gives each set-up's
# median (min-max) and the two ratios.
#
# No figure from a run with errors: the script stops, saying why, when
# `uuidmap bench` exits non-zero (failed calls, wrong answers) or its JSON
# shows errors, wrong answers or misses, and when an h2load run has failed
# requests. h2load counts HTTP statuses, and a gRPC error is a 200, so
# after each h2load run the target's uuidmap_rpc_requests_total (its
# /metrics; in MODE=scans the single node serves them too) must show at
# least as many more calls of the RPC answered OK as h2load counted
# successes, and no more calls ended otherwise than h2load abandoned (its
# started minus done: the calls cut when its -D time is up, which the
# server records as CANCELLED or UNKNOWN). Its reads do not move the LSN,
# so the LSN cannot count them.
#
# Knobs (environment): MODE (writes, reads, scans or levels, default writes),
# ROUNDS (default 3), SECS (seconds per run, default 5), TASKS (default
# 64), ENTRIES (MODE=reads, default 100000; MODE=scans, default 1000000),
# SCANS (MODE=scans, scans per run, default 20), FILTER (MODE=scans,
# default 0), LEVEL (MODE=reads: the lookups' consistency, linearizable,
# the default, or stale; scans use the default), UUIDMAP_BIN (a built binary; default: build
# target/release/uuidmap).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
TASKS=${TASKS:-64}
LEVEL=${LEVEL:-linearizable}
case $LEVEL in linearizable|stale) ;; *) echo "LEVEL=$LEVEL: give linearizable or stale" >&2; exit 2 ;; esac
MODE=${MODE:-writes}
if [ "$MODE" = scans ]; then
  ENTRIES=${ENTRIES:-1000000}
  . tools/install-h2load.sh
elif [ "$MODE" = levels ]; then
  ENTRIES=${ENTRIES:-100000}
  . tools/install-h2load.sh
else
  ENTRIES=${ENTRIES:-100000}
fi
SCANS=${SCANS:-20}
FILTER=${FILTER:-0}
. tools/bench-lib.sh
bench_setup bench-cluster

json_field() { # field: from bench's JSON line on stdin; fails if it shows errors, wrong answers or misses
  tail -1 | python3 -c "
import json, sys
d = json.load(sys.stdin)
bad = {k: d.get(k) for k in ('errors', 'wrong', 'misses') if d.get(k) != 0}
if bad:
    sys.exit(f'uuidmap bench reported {bad}: no figure from this run ({d})')
print(round(d['$1']))"
}

rpc_codes() { # metrics-url rpc -> its calls so far: ended OK, and otherwise
  curl -sf --max-time 10 "$1/metrics" | awk -v rpc="rpc=\"$2\"" '
    index($1, "uuidmap_rpc_requests_total{") == 1 && index($1, rpc) {
      if (index($1, "code=\"OK\"")) ok += $2; else bad += $2
    }
    END { printf "%d %d\n", ok, bad }'
}

check_h2load() { # metrics-url rpc codes-before: fails unless h2load's successes were gRPC ones
  local ok0 bad0 ok1 bad1 succeeded abandoned
  read -r ok0 bad0 <<<"$3"
  read -r ok1 bad1 <<<"$(rpc_codes "$1" "$2")"
  succeeded=$(awk '/^requests:/ {print $8}' "$work/h2load.out")
  abandoned=$(awk '/^requests:/ {print $4 - $6}' "$work/h2load.out")
  if ! grep -q " 0 failed, 0 errored" "$work/h2load.out" || [ -z "$succeeded" ] ||
    [ $((ok1 - ok0)) -lt "$succeeded" ] || [ $((bad1 - bad0)) -gt "$abandoned" ]; then
    cat "$work/h2load.out" >&2
    echo "h2load's $2 calls had errors: $succeeded succeeded by HTTP ($abandoned abandoned)," \
      "but the server ended $((ok1 - ok0)) OK and $((bad1 - bad0)) otherwise ($1/metrics, since its start:)" >&2
    curl -s --max-time 10 "$1/metrics" | grep "^uuidmap_rpc_requests_total{.*rpc=\"$2\"" >&2
    return 1
  fi
}

grpc() { # url method body-file: one unary call with curl; fails unless grpc-status 0
  local status
  status=$(curl -s --max-time 60 --http2-prior-knowledge -H 'content-type: application/grpc' \
    -H 'te: trailers' --data-binary @"$3" -D - -o /dev/null "$1/uuidmap.v1.UuidMap/$2" |
    tr -d '\r' | awk -F': ' '$1 == "grpc-status" {print $2}')
  [ "$status" = 0 ] || { echo "$2 at $1 answered grpc-status '$status'" >&2; return 1; }
}

# The functions whose answer is read with `$(...)`, where `set -e` does
# not hold, return at the first failure themselves (`|| return 1`).

scan_rate() { # writer target -> entries scanned (examined) per second on target
  local s c lsn codes
  for ((s = 0; s < ENTRIES; s += 50000)); do
    c=$((ENTRIES - s < 50000 ? ENTRIES - s : 50000))
    python3 tools/grpc-body.py write "$s" "$c" "$work/w.bin"
    grpc "$1" Write "$work/w.bin" || return 1
  done
  lsn=$(applied_lsn "$1")
  for _ in $(seq 1 300); do
    [ "$(applied_lsn "$2")" -ge "$lsn" ] && break
    sleep 0.1
  done
  c=$("$bin" scan --server "$2" | wc -l)
  # The readiness probe's entry is there too.
  [ "$c" -ge "$ENTRIES" ] || { echo "a full scan of $2 gave $c entries, not $ENTRIES" >&2; return 1; }
  python3 tools/grpc-body.py scan 0 "$FILTER" "$work/scan.bin"
  grpc "$2" Scan "$work/scan.bin" || return 1
  codes=$(rpc_codes "$(metrics_of "$2")" Scan)
  h2load -n "$SCANS" -c 1 -m 1 -d "$work/scan.bin" -H 'content-type: application/grpc' \
    -H 'te: trailers' "$2/uuidmap.v1.UuidMap/Scan" >"$work/h2load.out"
  grep -q "$SCANS succeeded, 0 failed, 0 errored" "$work/h2load.out" ||
    { cat "$work/h2load.out" >&2; echo "h2load: not all $SCANS Scans succeeded" >&2; return 1; }
  check_h2load "$(metrics_of "$2")" Scan "$codes" || return 1
  awk -v n="$c" '/^finished in/ {gsub(",", "", $4); printf "%.0f\n", $4 * n}' "$work/h2load.out"
}

bench() { # servers -> writes/s, or (MODE=reads) lookups/s of keys
  if [ "$MODE" = scans ]; then
    scan_rate "$1" "${2:-$1}"
  elif [ "$MODE" = reads ]; then
    "$bin" bench --op put --tasks "$TASKS" --secs 1 --json --entries "$ENTRIES" \
      --load "$ENTRIES" --server "$1" >/dev/null ||
      { echo "loading $ENTRIES entries into $1 failed" >&2; return 1; }
    local target=$1
    if [ -n "${2:-}" ]; then target=$2; fi
    sleep 1
    "$bin" bench --op lookup --keys 100 --tasks "$TASKS" --secs "$SECS" --json \
      --consistency "$LEVEL" --entries "$ENTRIES" --server "$target" | json_field keys_per_s
  else
    "$bin" bench --op put --tasks "$TASKS" --secs "$SECS" --json --server "$1" |
      json_field calls_per_s
  fi
}

follower_of() { # servers -> the URL of one member that does not lead
  local leader
  leader=$(leader_of "$1")
  tr ',' '\n' <<<"$1" | grep -vxF "$leader" | head -1
}

# The set-ups run in this shell (not in `$(...)`), so that a failure
# stops the servers they started (at exit, with `pids`); each sets `rate`.
run_single() { # round -> sets rate
  local base dir
  base=$(free_base)
  dir=$work/single-$1
  # Metrics for the scans' check of h2load (on the group's members too);
  # off otherwise, as the figures were first measured.
  local metrics=off
  [ "$MODE" = scans ] && metrics=127.0.0.1:$((base + 1))
  "$bin" serve --fsync always --data-dir "$dir" --listen "127.0.0.1:$base" \
    --metrics-listen "$metrics" >"$work/single-$1.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  wait_writable "http://127.0.0.1:$base"
  rate=$(bench "http://127.0.0.1:$base")
  stop_pids "$pid"
}

run_group() { # round -> sets rate
  local base
  base=$(free_base)
  UUIDMAP_CLUSTER_DIR=$work/group-$1 UUIDMAP_CLUSTER_BASE_PORT=$base UUIDMAP_BIN=$bin \
    tools/cluster-3.sh >"$work/group-$1.out" 2>&1 &
  local pid=$!
  pids+=("$pid")
  local urls="http://127.0.0.1:$base,http://127.0.0.1:$((base + 10)),http://127.0.0.1:$((base + 20))"
  wait_writable "$urls"
  if [ "$MODE" = reads ] || [ "$MODE" = scans ]; then
    local follower
    follower=$(follower_of "$urls")
    if [ -z "$follower" ]; then
      echo "no follower found among $urls" >&2
      exit 1
    fi
    if [ "$MODE" = scans ]; then
      rate=$(bench "$(leader_of "$urls")" "$follower")
    else
      rate=$(bench "$urls" "$follower")
    fi
  else
    rate=$(bench "$urls")
  fi
  stop_pids "$pid"
}

metrics_of() { # a member's client URL -> its metrics URL (the next port, as tools/cluster-3.sh and run_single place it)
  echo "http://127.0.0.1:$((${1##*:} + 1))"
}

metric() { # metrics-url name -> its value
  curl -s "$1/metrics" | awk -v n="$2" '$1 == n {print $2}'
}

get_rate() { # target level(1|2) -> Gets/s at that level, h2load, TASKS in flight
  python3 tools/grpc-body.py get 7 "$work/get-$2.bin" "$2"
  local codes
  grpc "$1" Get "$work/get-$2.bin" || return 1
  codes=$(rpc_codes "$(metrics_of "$1")" Get)
  h2load -D "$SECS" -c 4 -m $((TASKS / 4)) -d "$work/get-$2.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' "$1/uuidmap.v1.UuidMap/Get" \
    >"$work/h2load.out"
  check_h2load "$(metrics_of "$1")" Get "$codes" || return 1
  grpc "$1" Get "$work/get-$2.bin" || return 1
  awk '/^finished in/ {gsub(",", "", $4); printf "%.0f\n", $4}' "$work/h2load.out"
}

if [ "$MODE" = levels ]; then
  echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); Get of one existing key, h2load -c 4 -m $((TASKS / 4)) ($TASKS in flight), $SECS s per run, $ROUNDS rounds; Gets/s"
  fl=(); fs=(); ll=(); lst=()
  for r in $(seq 1 "$ROUNDS"); do
    base=$(free_base)
    UUIDMAP_CLUSTER_DIR=$work/levels-$r UUIDMAP_CLUSTER_BASE_PORT=$base UUIDMAP_BIN=$bin \
      tools/cluster-3.sh >"$work/levels-$r.out" 2>&1 &
    gpid=$!
    pids+=("$gpid")
    urls="http://127.0.0.1:$base,http://127.0.0.1:$((base + 10)),http://127.0.0.1:$((base + 20))"
    wait_writable "$urls"
    "$bin" bench --op put --tasks "$TASKS" --secs 1 --json --entries "$ENTRIES" \
      --load "$ENTRIES" --server "$urls" >/dev/null
    python3 tools/grpc-body.py write 0 100 "$work/w.bin"
    leader=$(leader_of "$urls")
    grpc "$leader" Write "$work/w.bin"
    follower=$(follower_of "$urls")
    [ -n "$follower" ] || { echo "no follower found among $urls" >&2; exit 1; }
    fport=${follower##*:}
    before=$(metric "http://127.0.0.1:$((fport + 1))" uuidmap_raft_read_index_rounds_total)
    if [ $((r % 2)) = 1 ]; then
      a=$(get_rate "$follower" 1); b=$(get_rate "$follower" 2)
      c=$(get_rate "$leader" 1); d=$(get_rate "$leader" 2)
    else
      d=$(get_rate "$leader" 2); c=$(get_rate "$leader" 1)
      b=$(get_rate "$follower" 2); a=$(get_rate "$follower" 1)
    fi
    after=$(metric "http://127.0.0.1:$((fport + 1))" uuidmap_raft_read_index_rounds_total)
    fl+=("$a"); fs+=("$b"); ll+=("$c"); lst+=("$d")
    echo "round $r: follower linearizable $a, stale $b; leader linearizable (lease) $c, stale $d; follower ReadIndex rounds $((after - before)) (load $(cut -d' ' -f1 /proc/loadavg))"
    stop_pids "$gpid"
  done
  echo "| member | level | Gets/s, median (min-max) |"
  echo "| --- | --- | --- |"
  echo "| follower | linearizable (ReadIndex) | $(printf '%s\n' "${fl[@]}" | median_range) |"
  echo "| follower | stale | $(printf '%s\n' "${fs[@]}" | median_range) |"
  echo "| leader | linearizable (lease) | $(printf '%s\n' "${ll[@]}" | median_range) |"
  echo "| leader | stale | $(printf '%s\n' "${lst[@]}" | median_range) |"
  python3 -c "print(f'follower linearizable / stale: {$(printf '%s\n' "${fl[@]}" | median) / $(printf '%s\n' "${fs[@]}" | median):.2f}; leader lease / stale: {$(printf '%s\n' "${ll[@]}" | median) / $(printf '%s\n' "${lst[@]}" | median):.2f}')"
  exit 0
fi

unit="writes/s"
[ "$MODE" = reads ] && unit="keys/s (lookups of 100 keys, on a follower for the group)"
if [ "$MODE" = scans ]; then
  unit="entries scanned/s (full scans of $ENTRIES, h2load, on a follower for the group)"
  [ "$FILTER" = 0 ] ||
    unit="entries examined/s (scans of $ENTRIES filtered by $FILTER values, h2load, on a follower for the group)"
fi
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $TASKS tasks, $SECS s per run, $ROUNDS rounds; $unit"
single=()
group=()
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then
    run_single "$r"; s=$rate; run_group "$r"; g=$rate
  else
    run_group "$r"; g=$rate; run_single "$r"; s=$rate
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
