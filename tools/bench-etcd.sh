#!/usr/bin/env bash
# Replicated durable writes against etcd (issue 15's benchmark "replicated
# durable writes/s >= 5x etcd's on the same 3-process loopback setup"),
# every set-up driven by the same neutral C load generator, h2load (from
# nghttp2-client), with the same request sizes and the same concurrency:
#   etcd     three etcd 3.4 members (Debian's etcd-server) on loopback, a
#            static --initial-cluster, default durability (the WAL is
#            fsynced before each commit); unary gRPC /etcdserverpb.KV/Put,
#            a 16-byte key and a 16-byte value, sent to the leader
#   group    three `uuidmap serve --fsync always --node-id N` on loopback
#            (tools/cluster-3.sh); unary gRPC /uuidmap.v1.UuidMap/Write of
#            one put (16-byte key and value), sent to the leader
#   single   one `uuidmap serve --fsync always`, the same Write
# ROUNDS rounds, the set-ups' order reversed every other round, each run on
# fresh data directories under a temporary directory in TMPDIR (one disk
# for all; removed at exit). Servers and h2load share this machine's cores.
#
#   tools/bench-etcd.sh
#
# Installs etcd-server and etcd-client (Debian's packages) if etcd is not
# on PATH, and h2load (tools/install-h2load.sh); builds target/release/
# uuidmap unless UUIDMAP_BIN names a built binary.
#
# Each run: start the set-up, wait until it takes a write, find the leader
# (`etcdctl endpoint status`, `uuidmap cluster status`), check that one
# request answers grpc-status 0 (curl: h2load counts HTTP statuses only,
# and a gRPC error is an HTTP 200 too), read the log position (etcd's
# revision, uuidmap's applied_lsn from `uuidmap stats`), run h2load
# (-n REQUESTS -c CONNS -m STREAMS, `content-type: application/grpc`,
# `te: trailers`), read the log position again. A run prints the requests
# answered 2xx, h2load's req/s (the writes/s of the table) and how much the
# log grew: one revision (etcd) or one LSN (uuidmap) per durable write, so a
# growth below the answers would mean errors counted as writes, or
# identical puts skipped or merged; it is printed, flagged, never hidden.
# (A uuidmap group's log also holds entries that are no client write, such
# as a new leader's first entry, so it may grow by a few more.)
#
# Limitation: h2load repeats one request body, so every request puts the
# same key with the same value: an overwrite of one hot key, not a
# workload of distinct keys. Each side still logs (and syncs) every put as
# its own entry, which the log growth checks; h2load is also the only
# client measured (no client library's own overhead).
#
# etcd's line also gives its leader's WAL fsyncs during the run (the
# etcd_disk_wal_fsync_duration_seconds count of its /metrics): etcd syncs
# its WAL before each Raft round commits, many proposals to a sync.
#
# Knobs (environment): ROUNDS (default 3), REQUESTS (per run, default
# 100000), ETCD_REQUESTS (per etcd run, default REQUESTS), CONNS (h2load
# connections, default 4), STREAMS (streams in flight per connection,
# default 16: 64 in flight), UUIDMAP_BIN (a built binary; default: build
# target/release/uuidmap). The machine may be shared: the load average is
# printed with each round; record it with the results.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-100000}
ETCD_REQUESTS=${ETCD_REQUESTS:-$REQUESTS}
CONNS=${CONNS:-4}
STREAMS=${STREAMS:-16}
export ETCDCTL_API=3

. tools/install-etcd.sh || exit 2
. tools/install-h2load.sh

. tools/bench-lib.sh
bench_setup bench-etcd
trap 'exit 130' INT TERM

load() { cut -d' ' -f1 /proc/loadavg; }

fail() { # message, logs...: say why, show the logs' tails, exit
  local f
  echo "$1" >&2
  shift
  for f in "$@"; do
    echo "--- $f" >&2
    tail -20 "$f" >&2 || true
  done
  exit 1
}

grpc_status() { # url path body -> the answer's grpc-status (curl, one request)
  curl -s --max-time 10 --http2-prior-knowledge -H 'content-type: application/grpc' \
    -H 'te: trailers' --data-binary @"$3" -D - -o /dev/null "$1/$2" |
    tr -d '\r' | awk -F': ' '$1 == "grpc-status" {print $2}'
}

# One h2load run: url path body requests. Sets h2_ok (2xx answers), h2_done
# (requests done), h2_bad (failed + errored + timed out) and h2_rate
# (h2load's req/s); its whole report is kept in $work/h2load.out.
h2run() {
  # In the background, so that a signal ends the script (and h2load) at once.
  h2load -n "$4" -c "$CONNS" -m "$STREAMS" -d "$3" \
    -H 'content-type: application/grpc' -H 'te: trailers' "$1/$2" >"$work/h2load.out" 2>&1 &
  local h=$!
  pids+=("$h")
  local code=0
  wait "$h" || code=$?
  forget_pids "$h"
  [ "$code" = 0 ] || fail "h2load failed (exit $code)" "$work/h2load.out"
  h2_rate=$(awk '/^finished in/ {gsub(",", "", $4); print $4}' "$work/h2load.out")
  h2_done=$(awk '/^requests:/ {print $6}' "$work/h2load.out")
  h2_bad=$(awk '/^requests:/ {print $10 + $12 + $14}' "$work/h2load.out")
  h2_ok=$(awk '/^status codes:/ {print $3}' "$work/h2load.out")
  [ -n "$h2_rate" ] && [ -n "$h2_ok" ] || fail "could not read h2load's report" "$work/h2load.out"
}

# Prints what a run found (growth: how much the log grew) and sets rate.
report() { # label (its words joined)
  local flag=""
  [ "$h2_bad" = 0 ] || flag+=" h2load: $h2_bad requests failed, errored or timed out;"
  [ "$growth" -ge "$h2_ok" ] ||
    flag+=" LOG GREW BY $((h2_ok - growth)) LESS THAN THE 2xx ANSWERS (skipped or merged writes, or errors);"
  echo "  $*: $h2_ok of $h2_done answered 2xx, $h2_rate writes/s, log +$growth" \
    "($(awk -v g="$growth" -v o="$h2_ok" 'BEGIN {printf "%.4f", o ? g / o : 0}') per answer)${flag:+ !!$flag}" \
    "(load $(load))"
  rate=$h2_rate
}

# --- etcd ---

etcd_revision() { # endpoint -> its revision
  etcdctl --endpoints "$1" --command-timeout=5s endpoint status -w json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["Status"]["header"]["revision"])'
}

etcd_fsyncs() { # endpoint -> its WAL fsyncs so far (/metrics)
  curl -s --max-time 5 "$1/metrics" |
    awk '$1 == "etcd_disk_wal_fsync_duration_seconds_count" {print $2}'
}

etcd_leader() { # endpoints -> the leader's endpoint (empty while none)
  etcdctl --endpoints "$1" --command-timeout=5s endpoint status -w json 2>/dev/null |
    python3 -c '
import json, sys
for e in json.load(sys.stdin):
    s = e["Status"]
    if s["leader"] and s["leader"] == s["header"]["member_id"]:
        print(e["Endpoint"])
        break' || true
}

python3 tools/grpc-body.py etcdput 0 "$work/etcd-put.bin"
run_etcd() { # round -> sets rate
  local base n i cluster="" eps="" epids=() logs=() leader status before after syncs_before syncs
  base=$(free_base)
  for n in 1 2 3; do
    cluster+="${cluster:+,}e$n=http://127.0.0.1:$((base + 10 * (n - 1) + 1))"
    eps+="${eps:+,}http://127.0.0.1:$((base + 10 * (n - 1)))"
  done
  for n in 1 2 3; do
    local client=http://127.0.0.1:$((base + 10 * (n - 1)))
    local peer=http://127.0.0.1:$((base + 10 * (n - 1) + 1))
    logs+=("$work/etcd-$1-e$n.log")
    etcd --name "e$n" --data-dir "$work/etcd-$1/e$n" \
      --listen-client-urls "$client" --advertise-client-urls "$client" \
      --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
      --initial-cluster "$cluster" --initial-cluster-state new \
      --initial-cluster-token "bench-etcd-$1" --logger zap --log-outputs stderr \
      >"$work/etcd-$1-e$n.log" 2>&1 &
    pids+=("$!")
    epids+=("$!")
  done
  for i in $(seq 1 300); do
    etcdctl --endpoints "$eps" --command-timeout=1s put bench-ready 1 >/dev/null 2>&1 && break
    [ "$i" = 300 ] && fail "etcd took no write within ~30 s" "${logs[@]}"
    sleep 0.1
  done
  leader=$(etcd_leader "$eps")
  [ -n "$leader" ] || fail "no etcd leader among $eps" "${logs[@]}"
  status=$(grpc_status "$leader" etcdserverpb.KV/Put "$work/etcd-put.bin")
  [ "$status" = 0 ] || fail "etcd's Put answered grpc-status '$status', not 0" "${logs[@]}"
  syncs_before=$(etcd_fsyncs "$leader")
  before=$(etcd_revision "$leader")
  h2run "$leader" etcdserverpb.KV/Put "$work/etcd-put.bin" "$ETCD_REQUESTS"
  after=$(etcd_revision "$leader")
  syncs=$(($(etcd_fsyncs "$leader") - syncs_before))
  growth=$((after - before))
  [ "$(etcd_leader "$eps")" = "$leader" ] || echo "  (etcd's leader changed during the run)"
  report "etcd, 3 members, leader $leader (revision $before -> $after;" \
    "leader's WAL fsyncs +$syncs, $(awk -v g="$growth" -v n="$syncs" 'BEGIN {printf "%.1f", n ? g / n : 0}') revisions each)"
  stop_pids "${epids[@]}"
  rm -rf "$work/etcd-$1"
}

# --- uuidmap ---

python3 tools/grpc-body.py write 0 1 "$work/write.bin"
measure_uuidmap() { # label url logs... -> sets rate
  local label=$1 url=$2 status before after
  shift 2
  status=$(grpc_status "$url" uuidmap.v1.UuidMap/Write "$work/write.bin")
  [ "$status" = 0 ] || fail "uuidmap's Write at $url answered grpc-status '$status', not 0" "$@"
  before=$(applied_lsn "$url")
  h2run "$url" uuidmap.v1.UuidMap/Write "$work/write.bin" "$REQUESTS"
  after=$(applied_lsn "$url")
  growth=$((after - before))
  report "$label (applied_lsn $before -> $after)"
}

run_group() { # round -> sets rate
  local base pid urls leader
  base=$(free_base)
  # UUIDMAP_FSYNC pins the members' --fsync to always (its default), whatever
  # the caller's environment says.
  UUIDMAP_FSYNC=always UUIDMAP_CLUSTER_DIR=$work/group-$1 UUIDMAP_CLUSTER_BASE_PORT=$base \
    UUIDMAP_BIN=$bin tools/cluster-3.sh >"$work/group-$1.out" 2>&1 &
  pid=$!
  pids+=("$pid")
  urls="http://127.0.0.1:$base,http://127.0.0.1:$((base + 10)),http://127.0.0.1:$((base + 20))"
  wait_writable "$urls" ||
    fail "the group took no write" "$work/group-$1.out" "$work/group-$1"/node-*.log
  leader=$(leader_of "$urls")
  [ -n "$leader" ] || fail "no leader among $urls" "$work/group-$1"/node-*.log
  measure_uuidmap "uuidmap group of 3, leader $leader" "$leader" "$work/group-$1"/node-*.log
  [ "$(leader_of "$urls")" = "$leader" ] || echo "  (the group's leader changed during the run)"
  stop_pids "$pid"
  rm -rf "$work/group-$1"
}

run_single() { # round -> sets rate
  local base pid url
  base=$(free_base)
  url=http://127.0.0.1:$base
  "$bin" serve --fsync always --data-dir "$work/single-$1" --listen "127.0.0.1:$base" \
    --metrics-listen off >"$work/single-$1.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  wait_writable "$url" || fail "the single node took no write" "$work/single-$1.log"
  measure_uuidmap "uuidmap single node" "$url" "$work/single-$1.log"
  stop_pids "$pid"
  rm -rf "$work/single-$1"
}

etcd_version=$(etcd --version | awk '/^etcd Version:/ {print $3}')
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); etcd $etcd_version," \
  "h2load $(h2load --version | awk '{print $2}'); $CONNS connections x $STREAMS streams" \
  "= $((CONNS * STREAMS)) in flight; $ETCD_REQUESTS requests per etcd run, $REQUESTS per" \
  "uuidmap run; $ROUNDS rounds; 16-byte keys and values, one key repeated"
etcd_rates=()
group_rates=()
single_rates=()
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r (load $(load)):"
  if [ $((r % 2)) = 1 ]; then order=(etcd group single); else order=(single group etcd); fi
  for s in "${order[@]}"; do
    # (Not `run_x && ...`: errexit would not apply inside run_x.)
    case $s in
      etcd)
        run_etcd "$r"
        etcd_rates+=("$rate")
        ;;
      group)
        run_group "$r"
        group_rates+=("$rate")
        ;;
      single)
        run_single "$r"
        single_rates+=("$rate")
        ;;
    esac
  done
done
em=$(printf '%s\n' "${etcd_rates[@]}" | median)
gm=$(printf '%s\n' "${group_rates[@]}" | median)
sm=$(printf '%s\n' "${single_rates[@]}" | median)
ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
echo
echo "| set-up | writes/s, median (min-max) | ratio |"
echo "| --- | ---: | ---: |"
echo "| etcd $etcd_version, 3 members, default durability | $(printf '%s\n' "${etcd_rates[@]}" | median_range) | 1.00 (etcd) |"
echo "| uuidmap group of 3, fsync always | $(printf '%s\n' "${group_rates[@]}" | median_range) | $(ratio "$gm" "$em") x etcd |"
echo "| uuidmap single node, fsync always | $(printf '%s\n' "${single_rates[@]}" | median_range) | $(ratio "$sm" "$em") x etcd |"
echo "| uuidmap group / etcd | | $(ratio "$gm" "$em") |"
echo "| uuidmap group / uuidmap single | | $(ratio "$gm" "$sm") |"
echo
echo "(h2load, $((CONNS * STREAMS)) in flight ($CONNS x $STREAMS), one 16-byte key and value repeated;" \
  "ratios of the medians; load at the end $(cut -d' ' -f1-3 /proc/loadavg))"
