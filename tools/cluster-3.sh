#!/usr/bin/env bash
# Starts a replica group of three `uuidmap serve` processes on loopback,
# in the foreground; Ctrl-C (or SIGTERM) stops all three gracefully.
#
#   tools/cluster-3.sh
#
#   member  client URL               Raft address      metrics
#   1       http://127.0.0.1:7878    127.0.0.1:7880    127.0.0.1:7879
#   2       http://127.0.0.1:7888    127.0.0.1:7890    127.0.0.1:7889
#   3       http://127.0.0.1:7898    127.0.0.1:7900    127.0.0.1:7899
#
# Member 1 makes the group (--cluster-init) the first time; the data
# directories (UUIDMAP_CLUSTER_DIR, default ./uuidmap-cluster, one
# node-N directory each) keep it across runs. Then, from another shell:
#
#   target/release/uuidmap put 6f1c1e5e-0000-4000-8000-000000000001 5ba4d000-0000-4000-8000-00000000000a
#   target/release/uuidmap get --server http://127.0.0.1:7888 6f1c1e5e-0000-4000-8000-000000000001
#
# A write sent to a member that does not lead is refused with UNAVAILABLE
# and the leader's URL (README, "Replica groups"). Each member logs to
# UUIDMAP_CLUSTER_DIR/node-N.log. Knobs: UUIDMAP_CLUSTER_DIR,
# UUIDMAP_CLUSTER_BASE_PORT (default 7878; member N uses base + 10(N-1)
# and the next two ports), UUIDMAP_BIN (a built binary; default: build
# target/release/uuidmap).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dir=${UUIDMAP_CLUSTER_DIR:-$root/uuidmap-cluster}
base=${UUIDMAP_CLUSTER_BASE_PORT:-7878}
if [ -z "${UUIDMAP_BIN:-}" ]; then
  cargo build --release --bin uuidmap >&2
  bin=$root/target/release/uuidmap
else
  bin=$UUIDMAP_BIN
fi
mkdir -p "$dir"

client_port() { echo $((base + 10 * ($1 - 1))); }
raft_port() { echo $((base + 10 * ($1 - 1) + 2)); }
metrics_port() { echo $((base + 10 * ($1 - 1) + 1)); }

peers_of() { # id -> the --peers value naming the two others
  local me=$1 out="" n
  for n in 1 2 3; do
    [ "$n" = "$me" ] && continue
    out+="${out:+,}$n=127.0.0.1:$(raft_port "$n")@http://127.0.0.1:$(client_port "$n")"
  done
  echo "$out"
}

pids=()
stop_all() {
  trap - INT TERM EXIT
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop_all INT TERM EXIT

for n in 1 2 3; do
  args=(serve
    --node-id "$n"
    --data-dir "$dir/node-$n"
    --listen "127.0.0.1:$(client_port "$n")"
    --metrics-listen "127.0.0.1:$(metrics_port "$n")"
    --raft-listen "127.0.0.1:$(raft_port "$n")"
    --peers "$(peers_of "$n")")
  [ "$n" = 1 ] && args+=(--cluster-init)
  "$bin" "${args[@]}" >"$dir/node-$n.log" 2>&1 &
  pids+=($!)
  echo "member $n: pid $!, http://127.0.0.1:$(client_port "$n"), Raft 127.0.0.1:$(raft_port "$n"), log $dir/node-$n.log"
done
echo "Ctrl-C stops the group"
# A member that exits (killed, or failed: see its log) is reported; the
# others keep serving, as a group that lost a member does.
live=("${pids[@]}")
while [ "${#live[@]}" -gt 0 ]; do
  code=0
  gone=
  wait -n -p gone "${live[@]}" || code=$?
  [ -n "$gone" ] || break
  for n in 1 2 3; do
    if [ "${pids[$((n - 1))]}" = "$gone" ]; then
      echo "member $n (pid $gone) exited with code $code; see $dir/node-$n.log" >&2
    fi
  done
  still=()
  for p in "${live[@]}"; do [ "$p" = "$gone" ] || still+=("$p"); done
  live=("${still[@]}")
done
