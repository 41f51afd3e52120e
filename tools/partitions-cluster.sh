#!/usr/bin/env bash
# Starts a partitioned cluster on loopback, in the foreground: a 3-member
# etcd (Debian's etcd-server, installed by tools/install-etcd.sh if it is
# missing) and two replica groups of three `uuidmap serve` processes,
# groups g1 and g2, each owning half of the 4096 partitions. Ctrl-C (or
# SIGTERM) stops everything gracefully.
#
#   tools/partitions-cluster.sh
#
#   etcd      http://127.0.0.1:2379, :12379, :22379   (peers :2380, :12380, :22380)
#   group g1  members 1-3: http://127.0.0.1:7878, :7888, :7898   (Raft +2)
#   group g2  members 1-3: http://127.0.0.1:7978, :7988, :7998   (Raft +2)
#
# The first run makes the partition table (`uuidmap cluster partitions
# init --groups g1,g2`) and each group (--cluster-init on its member 1);
# the directories (UUIDMAP_PARTITIONS_DIR, default ./uuidmap-partitions)
# keep them across runs. Then, from another shell:
#
#   export UUIDMAP_ETCD=http://127.0.0.1:2379,http://127.0.0.1:12379,http://127.0.0.1:22379
#   target/release/uuidmap cluster partitions
#   target/release/uuidmap cluster move --partition 7 --to g2
#
# Logs: UUIDMAP_PARTITIONS_DIR/etcd-N.log and gG-node-N.log. Knobs:
# UUIDMAP_PARTITIONS_DIR, UUIDMAP_BIN (a built binary; default: build
# target/release/uuidmap), UUIDMAP_FSYNC (default always).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dir=${UUIDMAP_PARTITIONS_DIR:-$root/uuidmap-partitions}
fsync=${UUIDMAP_FSYNC:-always}
. tools/install-etcd.sh || exit 2
if [ -z "${UUIDMAP_BIN:-}" ]; then
  cargo build --release --bin uuidmap >&2
  bin=$root/target/release/uuidmap
else
  bin=$UUIDMAP_BIN
fi
mkdir -p "$dir"

pids=()
stop_all() {
  trap - INT TERM EXIT
  # The servers first (they leave the map), then etcd.
  for p in "${pids[@]:3}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]:3}"; do wait "$p" 2>/dev/null || true; done
  for p in "${pids[@]:0:3}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]:0:3}"; do wait "$p" 2>/dev/null || true; done
}
trap stop_all INT TERM EXIT

etcd_port() { echo $((2379 + 10000 * ($1 - 1))); }
initial=""
for n in 1 2 3; do
  initial+="${initial:+,}e$n=http://127.0.0.1:$(($(etcd_port "$n") + 1))"
done
endpoints=""
for n in 1 2 3; do
  c=$(etcd_port "$n")
  endpoints+="${endpoints:+,}http://127.0.0.1:$c"
  etcd --name "e$n" --data-dir "$dir/etcd-$n" \
    --listen-client-urls "http://127.0.0.1:$c" --advertise-client-urls "http://127.0.0.1:$c" \
    --listen-peer-urls "http://127.0.0.1:$((c + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((c + 1))" \
    --initial-cluster "$initial" --initial-cluster-state new \
    >"$dir/etcd-$n.log" 2>&1 &
  pids+=($!)
  echo "etcd e$n: pid $!, http://127.0.0.1:$c, log $dir/etcd-$n.log"
done
for _ in $(seq 100); do
  ETCDCTL_API=3 etcdctl --endpoints "$endpoints" endpoint health >/dev/null 2>&1 && break
  sleep 0.2
done
export UUIDMAP_ETCD=$endpoints
if "$bin" cluster partitions | grep -q '^table none'; then
  "$bin" cluster partitions init --groups g1,g2 >/dev/null
  echo "made the partition table: g1 and g2 own half each"
fi

for g in 1 2; do
  base=$((7878 + 100 * (g - 1)))
  client_port() { echo $((base + 10 * ($1 - 1))); }
  raft_port() { echo $((base + 10 * ($1 - 1) + 2)); }
  for n in 1 2 3; do
    peers=""
    for m in 1 2 3; do
      [ "$m" = "$n" ] && continue
      peers+="${peers:+,}$m=127.0.0.1:$(raft_port "$m")@http://127.0.0.1:$(client_port "$m")"
    done
    args=(serve --node-id "$n" --data-dir "$dir/g$g-node-$n" --fsync "$fsync"
      --listen "127.0.0.1:$(client_port "$n")"
      --metrics-listen "127.0.0.1:$(($(client_port "$n") + 1))"
      --raft-listen "127.0.0.1:$(raft_port "$n")" --peers "$peers"
      --etcd "$endpoints" --group "g$g")
    [ "$n" = 1 ] && args+=(--cluster-init)
    "$bin" "${args[@]}" >"$dir/g$g-node-$n.log" 2>&1 &
    pids+=($!)
    echo "group g$g member $n: pid $!, http://127.0.0.1:$(client_port "$n"), log $dir/g$g-node-$n.log"
  done
done
echo "UUIDMAP_ETCD=$endpoints; Ctrl-C stops the cluster"
# A process that exits (killed, or failed: see its log) is reported; the
# others keep serving.
live=("${pids[@]}")
while [ "${#live[@]}" -gt 0 ]; do
  code=0
  gone=
  wait -n -p gone "${live[@]}" || code=$?
  [ -n "$gone" ] || break
  echo "pid $gone exited with code $code; see its log in $dir" >&2
  still=()
  for p in "${live[@]}"; do [ "$p" = "$gone" ] || still+=("$p"); done
  live=("${still[@]}")
done
