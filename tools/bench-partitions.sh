#!/usr/bin/env bash
# The partitioned cluster's figures (issue 37), on loopback with a real
# etcd (Debian's etcd-server, installed if missing):
#
#   routing   `uuidmap bench --op get` (and batch-get) against one server,
#             called directly and through the partition map (--etcd), in
#             alternating rounds: the same server, the same keys; a table
#             whose one group owns every partition, so the only difference
#             is the client's routing. Also counts the gRPC requests etcd
#             served during the routed runs (its /metrics), which should be
#             none but the registrations' lease renewals.
#   move      two groups (single nodes, or GROUP_SIZE=3 members each, on
#             --fsync FSYNC) holding ENTRIES entries in all; while
#             `uuidmap bench --op put --etcd` writes to the cluster, MOVES
#             partitions are moved one at a time with `uuidmap cluster
#             move` (each to the other group), printing each move's copy,
#             how long writes to it were refused, and the whole move.
#
#   tools/bench-partitions.sh            # both
#   MODE=routing tools/bench-partitions.sh
#   MODE=move ENTRIES=10000000 MOVES=5 tools/bench-partitions.sh
#   MODE=move GROUP_SIZE=3 FSYNC=always tools/bench-partitions.sh
#
# Knobs: ROUNDS (3), SECS (5), TASKS (64), ENTRIES (move: 10000000;
# routing: 100000), MOVES (5), GROUP_SIZE (move: 1 or 3), FSYNC (move:
# never), UUIDMAP_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. tools/bench-lib.sh
. tools/install-etcd.sh || exit 2
bench_setup bench-partitions
MODE=${MODE:-all}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
TASKS=${TASKS:-64}
MOVES=${MOVES:-5}
GROUP_SIZE=${GROUP_SIZE:-1}
FSYNC=${FSYNC:-never}
case $GROUP_SIZE in 1|3) ;; *) echo "GROUP_SIZE is 1 or 3" >&2; exit 2 ;; esac
base=$(free_base)
etcd_url=http://127.0.0.1:$base
export UUIDMAP_ETCD=$etcd_url

start_etcd() {
  etcd --name b --data-dir "$work/etcd" \
    --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
    --listen-peer-urls "http://127.0.0.1:$((base + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((base + 1))" \
    --initial-cluster "b=http://127.0.0.1:$((base + 1))" >"$work/etcd.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints "$etcd_url" endpoint health >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "etcd did not start; see $work/etcd.log" >&2
  exit 2
}

# serve N CLUSTER GROUP: a single node of GROUP on port base+10N (fsync:
# FSYNC in the move, never in the routing runs).
serve() {
  local port=$((base + 10 * $1))
  "$bin" serve --listen "127.0.0.1:$port" --data-dir "$work/s$1" --fsync "${4:-never}" \
    --metrics-listen off --etcd "$etcd_url" --etcd-cluster "$2" --group "$3" \
    >"$work/s$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    "$bin" stats --server "http://127.0.0.1:$port" 2>/dev/null |
      grep -q '^partitions_owned' && return
    sleep 0.1
  done
  echo "server $1 did not start; see $work/s$1.log" >&2
  exit 2
}

# serve_group N CLUSTER GROUP: three members of GROUP, on ports
# base+10N+{0,1,2} (client) and base+10N+{5,6,7} (Raft), fsync FSYNC;
# member 1 makes the group.
serve_group() {
  local n m peers
  for n in 0 1 2; do
    peers=""
    for m in 0 1 2; do
      [ "$m" = "$n" ] && continue
      peers+="${peers:+,}$((m + 1))=127.0.0.1:$((base + 10 * $1 + 5 + m))@http://127.0.0.1:$((base + 10 * $1 + m))"
    done
    local args=(serve --node-id $((n + 1)) --listen "127.0.0.1:$((base + 10 * $1 + n))"
      --raft-listen "127.0.0.1:$((base + 10 * $1 + 5 + n))" --peers "$peers"
      --data-dir "$work/s$1-$n" --fsync "$FSYNC" --metrics-listen off
      --etcd "$etcd_url" --etcd-cluster "$2" --group "$3")
    [ "$n" = 0 ] && args+=(--cluster-init)
    "$bin" "${args[@]}" >"$work/s$1-$n.log" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 300); do
    # (grep reads to the end: with pipefail, `grep -q` exiting early
    # would fail the pipe.)
    "$bin" stats --server "http://127.0.0.1:$((base + 10 * $1))" 2>/dev/null |
      grep '^partitions_owned' >/dev/null &&
      "$bin" cluster status --server "http://127.0.0.1:$((base + 10 * $1))" 2>/dev/null |
      grep '^leader_id  *[0-9]' >/dev/null && return
    sleep 0.1
  done
  echo "group $3 did not start within 30 s; the end of its members' logs:" >&2
  tail -n 5 "$work"/s"$1"-*.log >&2
  exit 2
}

# Requests etcd's gRPC server has started (its /metrics), all methods.
etcd_requests() {
  curl -s "$etcd_url/metrics" |
    awk '/^grpc_server_started_total/ {s += $NF} END {printf "%d", s}'
}

json_field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" | tail -1; }

routing() {
  local entries=${ENTRIES:-100000}
  "$bin" cluster partitions --etcd-cluster routing init --groups g1 >/dev/null
  serve 1 routing g1
  local url=http://127.0.0.1:$((base + 10))
  "$bin" bench --server "$url" --op put --load "$entries" --secs 1 --json >/dev/null
  echo "== routing: one server, $entries entries, $TASKS tasks, $SECS s a run, $ROUNDS rounds"
  local op
  for op in get batch-get; do
    local direct=() routed=() r d e0 e1
    for r in $(seq "$ROUNDS"); do
      for side in direct routed; do
        [ $((r % 2)) = 0 ] && side=$([ "$side" = direct ] && echo routed || echo direct)
        if [ "$side" = direct ]; then
          d=$("$bin" bench --server "$url" --op "$op" --tasks "$TASKS" --secs "$SECS" \
            --entries "$entries" --json | json_field keys_per_s)
          direct+=("$d")
        else
          e0=$(etcd_requests)
          d=$("$bin" bench --etcd "$etcd_url" --etcd-cluster routing --op "$op" \
            --tasks "$TASKS" --secs "$SECS" --entries "$entries" --json | json_field keys_per_s)
          e1=$(etcd_requests)
          routed+=("$d")
          echo "  $op routed round $r: $d keys/s; etcd served $((e1 - e0)) gRPC requests in the run (its connect, load and watch included)"
        fi
      done
    done
    local dm rm
    dm=$(printf '%s\n' "${direct[@]}" | median)
    rm=$(printf '%s\n' "${routed[@]}" | median)
    echo "$op direct keys/s: ${direct[*]} (median $dm)"
    echo "$op routed keys/s: ${routed[*]} (median $rm)"
    awk -v d="$dm" -v r="$rm" -v op="$op" \
      'BEGIN {printf "%s routed/direct: %.3f (routing costs %.1f %%)\n", op, r / d, 100 * (1 - r / d)}'
  done
  # At rest: what the servers alone ask of etcd (lease renewals, the watch).
  e0=$(etcd_requests)
  sleep 10
  e1=$(etcd_requests)
  echo "at rest, one server registered: etcd served $((e1 - e0)) gRPC requests in 10 s"
}

move() {
  local entries=${ENTRIES:-10000000}
  "$bin" cluster partitions --etcd-cluster moves init --groups g1,g2 >/dev/null
  if [ "$GROUP_SIZE" = 3 ]; then
    serve_group 1 moves g1
    serve_group 2 moves g2
    echo "== move: two groups of three (fsync $FSYNC), loading $entries entries"
  else
    serve 2 moves g1 "$FSYNC"
    serve 3 moves g2 "$FSYNC"
    echo "== move: two single-node groups (fsync $FSYNC), loading $entries entries"
  fi
  local t0=$SECONDS
  "$bin" bench --etcd "$etcd_url" --etcd-cluster moves --op put --load "$entries" --secs 1 \
    --json >/dev/null
  echo "loaded in $((SECONDS - t0)) s"
  "$bin" cluster partitions --etcd-cluster moves | sed -n 3,4p
  # Writes to the whole cluster meanwhile (their keys include the moved
  # partitions'): every one acknowledged is read back after.
  "$bin" bench --etcd "$etcd_url" --etcd-cluster moves --op put --tasks 16 \
    --secs $((MOVES * 3 + 5)) --entries "$entries" --json >"$work/load.json" &
  local load=$!
  sleep 2
  local i p to
  for i in $(seq "$MOVES"); do
    p=$(((i * 997) % 4096))
    to=$([ "$p" -lt 2048 ] && echo g2 || echo g1)
    "$bin" cluster move --etcd-cluster moves --partition "$p" --to "$to" 2>/dev/null |
      tr '\n' ' '
    echo
    sleep 1
  done
  wait "$load" || echo "the write load exited with $? (see below)"
  echo "write load during the moves: $(cat "$work/load.json")"
}

start_etcd
case $MODE in
  routing) routing ;;
  move) move ;;
  all) routing; move ;;
  *) echo "MODE is routing, move or all" >&2; exit 2 ;;
esac
