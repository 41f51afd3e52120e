#!/usr/bin/env bash
# Two builds of uuidmap side by side as a group of three (issue 32: keep a
# change only if it pays): for ROUNDS rounds, each build in turn (the
# order alternating by round) runs a fresh group on loopback
# (tools/cluster-3.sh, fsync always) and h2load sends unary Writes of one
# put to its leader (-c CONNS -m STREAMS) for SECS seconds; the leader's
# applied LSN must grow by at least the writes h2load counts.
#
#   A_BIN=/tmp/uuidmap-before B_BIN=target/release/uuidmap tools/bench-group-ab.sh
#   OP=reads A_BIN=... B_BIN=... tools/bench-group-ab.sh
#   GROUP_SIZE=1 A_BIN=... B_BIN=... tools/bench-group-ab.sh
#
# GROUP_SIZE=1 runs a single node instead of the group (`uuidmap serve`,
# fsync always, a fresh data directory per run), the LSN checked the same
# way.
#
# OP=reads measures linearizable Gets on the leader instead (its lease
# path), while a second h2load keeps writes going to it (-c 1 -m 8): the
# Gets/s of each build, and the writes' growth of the LSN checked the same
# way.
#
# Prints each run's writes/s and each build's median. Data directories
# live under a temporary directory in TMPDIR, removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${A_BIN:?give A_BIN, a built uuidmap}" "${B_BIN:?give B_BIN, a built uuidmap}"
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-12}
CONNS=${CONNS:-4}
STREAMS=${STREAMS:-16}
GROUP_SIZE=${GROUP_SIZE:-3}
case $GROUP_SIZE in 1|3) ;; *) echo "GROUP_SIZE is 1 (a single node) or 3" >&2; exit 2 ;; esac
. tools/install-h2load.sh
. tools/bench-lib.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/uuidmap-ab.XXXXXX")
gpid=""
trap '[ -n "$gpid" ] && kill "$gpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
OP=${OP:-writes}
case $OP in writes|reads) ;; *) echo "OP is writes or reads" >&2; exit 2 ;; esac
python3 tools/grpc-body.py write 0 1 "$work/write.bin"
python3 tools/grpc-body.py get 0 "$work/get.bin" 1

run() { # bin round -> writes/s
  local bin=$1 base urls leader a0 a1 rate done_
  base=$(free_base)
  if [ "$GROUP_SIZE" = 1 ]; then
    rm -rf "$work/single"
    "$bin" serve --data-dir "$work/single" --listen "127.0.0.1:$base" --fsync always \
      --metrics-listen off >"$work/cluster.out" 2>&1 &
    gpid=$!
    urls=http://127.0.0.1:$base
  else
    rm -rf "$work/group"
    UUIDMAP_CLUSTER_DIR=$work/group UUIDMAP_CLUSTER_BASE_PORT=$base UUIDMAP_BIN=$bin \
      tools/cluster-3.sh >"$work/cluster.out" 2>&1 &
    gpid=$!
    urls="http://127.0.0.1:$base,http://127.0.0.1:$((base + 10)),http://127.0.0.1:$((base + 20))"
  fi
  for _ in $(seq 200); do
    "$bin" put --server "$urls" 00000000-0000-0000-0000-000000000001 \
      00000000-0000-0000-0000-000000000002 >/dev/null 2>&1 && break
    sleep 0.2
  done
  if [ "$GROUP_SIZE" = 1 ]; then
    leader=$urls
  else
    leader=$("$bin" cluster status --server "$urls" | awk '$1 == "leader_url" {print $2}') ||
      { kill "$gpid"; cat "$work/cluster.out" >&2; exit 1; }
  fi
  a0=$("$bin" stats --server "$leader" | awk '$1 == "applied_lsn" {print $2}')
  if [ "$OP" = reads ]; then
    h2load -D "$((SECS + 1))" -c 1 -m 8 -d "$work/write.bin" \
      -H 'content-type: application/grpc' -H 'te: trailers' \
      "$leader/uuidmap.v1.UuidMap/Write" >"$work/h2load-writes.out" 2>&1 &
    local writes=$!
    h2load -D "$SECS" -c "$CONNS" -m "$STREAMS" -d "$work/get.bin" \
      -H 'content-type: application/grpc' -H 'te: trailers' \
      "$leader/uuidmap.v1.UuidMap/Get" >"$work/h2load.out" 2>&1
    wait "$writes"
  else
    h2load -D "$SECS" -c "$CONNS" -m "$STREAMS" -d "$work/write.bin" \
      -H 'content-type: application/grpc' -H 'te: trailers' \
      "$leader/uuidmap.v1.UuidMap/Write" >"$work/h2load.out" 2>&1
  fi
  a1=$("$bin" stats --server "$leader" | awk '$1 == "applied_lsn" {print $2}')
  # Stopped here: this runs in a subshell, which the EXIT trap does not see.
  kill "$gpid" 2>/dev/null
  wait "$gpid" 2>/dev/null || true
  gpid=""
  grep -q " 0 failed, 0 errored" "$work/h2load.out" || { cat "$work/h2load.out" >&2; exit 1; }
  local counted=$work/h2load.out
  if [ "$OP" = reads ]; then
    counted=$work/h2load-writes.out
    grep -q " 0 failed, 0 errored" "$counted" || { cat "$counted" >&2; exit 1; }
  fi
  done_=$(awk '/^requests:/ {print $8}' "$counted")
  if [ $((a1 - a0)) -lt "$done_" ]; then
    echo "the log grew by $((a1 - a0)) for $done_ answers" >&2
    exit 1
  fi
  awk '/^finished in/ {gsub(",", "", $4); printf "%.0f\n", $4}' "$work/h2load.out"
}

what="a group of 3"; [ "$GROUP_SIZE" = 1 ] && what="a single node"
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $what, fsync always; h2load -c $CONNS -m $STREAMS, ${SECS}s a run; $OP/s"
a=(); b=()
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for which in $order; do
    if [ "$which" = A ]; then rate=$(run "$A_BIN"); a+=("$rate"); else rate=$(run "$B_BIN"); b+=("$rate"); fi
    echo "round $r: $which $rate"
  done
done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
ma=$(median "${a[@]}"); mb=$(median "${b[@]}")
echo "A ($A_BIN): median $ma (${a[*]})"
echo "B ($B_BIN): median $mb (${b[*]})"
python3 -c "print(f'B / A: {$mb / $ma:.3f}')"
