#!/usr/bin/env bash
# Two builds of uuidmap side by side on the single node's unary calls, one
# row per call shape (issue 32: "no read path slower than before"):
#
#   get1        Get of one key, 1 in flight            h2load -c1 -m1
#   get64       Get, 64 in flight on 4 connections     h2load -c4 -m16
#   get64x1     Get, 64 connections of 1 call each     h2load -c64 -m1
#   batchget16  BatchGet of 100 keys, 16 in flight     h2load -c4 -m4
#   write1      Write of one put, 1 in flight          h2load -c1 -m1
#   write64     Write, 64 in flight on 4 connections   h2load -c4 -m16
#   write64x1   Write, 64 connections of 1 call each   h2load -c64 -m1
#
#   A_BIN=/tmp/uuidmap-before B_BIN=target/release/uuidmap tools/bench-calls-ab.sh
#
# For ROUNDS rounds (default 3), each build in turn (the order alternating
# by round) runs a fresh `uuidmap serve --fsync always` on its own data
# directory, waits for its spare WAL file, puts the key (a Write of key 0),
# and runs every row (REQUESTS_1 calls at 1 in flight, default 20000;
# REQUESTS_64 at 64, default 200000). h2load (a neutral C client) repeats
# one body, so every call reads or overwrites the same key. h2load counts
# HTTP statuses and a gRPC error is a 200: before the rows, one Get is sent
# with curl and must answer grpc-status 0, and after the write rows the
# applied LSN must have grown by at least the writes h2load counts.
#
# Prints each run's calls/s and, per row, each build's median (min-max) and
# B / A. Data directories live under a temporary directory in TMPDIR,
# removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${A_BIN:?A_BIN: the first build}" "${B_BIN:?B_BIN: the second build}"
ROUNDS=${ROUNDS:-3}
REQUESTS_1=${REQUESTS_1:-20000}
REQUESTS_64=${REQUESTS_64:-200000}

. tools/install-h2load.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-calls-ab.XXXXXX")
spid=""
trap '[ -n "$spid" ] && kill "$spid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
python3 tools/grpc-body.py get 0 "$work/get.bin"
python3 tools/grpc-body.py batchget 0 100 "$work/batchget.bin"
python3 tools/grpc-body.py write 0 1 "$work/write.bin"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port/uuidmap.v1.UuidMap

call() { # method body h2load-args... -> calls/s
  local out
  out=$(h2load "${@:3}" -d "$work/$2" -H 'content-type: application/grpc' -H 'te: trailers' \
    "$url/$1" 2>&1)
  grep -q " 0 failed, 0 errored" <<<"$out" || { echo "$out" >&2; exit 1; }
  sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' <<<"$out"
}
applied() { "$1" stats --server "http://127.0.0.1:$port" | awk '$1 == "applied_lsn" {print $2}'; }

run() { # label binary
  local label=$1 bin=$2 dir=$work/data a0 a1 rate n args
  rm -rf "$dir"
  mkdir -p "$dir"
  "$bin" serve --data-dir "$dir" --listen "127.0.0.1:$port" --fsync always \
    --metrics-listen off >"$work/serve.log" 2>&1 &
  spid=$!
  for _ in $(seq 100); do [ -e "$dir/wal-spare" ] && break; sleep 0.1; done
  call Write write.bin -n 20 -c1 -m1 >/dev/null
  [ "$(curl -s --http2-prior-knowledge -o /dev/null -w '%header{grpc-status}' \
    -H 'content-type: application/grpc' -H 'te: trailers' --data-binary "@$work/get.bin" \
    "$url/Get")" = 0 ] || { echo "$label: a Get did not answer grpc-status 0" >&2; exit 1; }
  for row in get1 get64 get64x1 batchget16 write1 write64 write64x1; do
    case $row in
      get1) n=$REQUESTS_1 args=(Get get.bin -c1 -m1) ;;
      get64) n=$REQUESTS_64 args=(Get get.bin -c4 -m16) ;;
      get64x1) n=$REQUESTS_64 args=(Get get.bin -c64 -m1) ;;
      batchget16) n=$((REQUESTS_64 / 4)) args=(BatchGet batchget.bin -c4 -m4) ;;
      write1) n=$((REQUESTS_1 / 2)) args=(Write write.bin -c1 -m1) ;;
      write64) n=$REQUESTS_64 args=(Write write.bin -c4 -m16) ;;
      write64x1) n=$((REQUESTS_64 / 2)) args=(Write write.bin -c64 -m1) ;;
    esac
    a0=$(applied "$bin")
    rate=$(call "${args[@]}" -n "$n")
    if [[ $row == write* ]]; then
      a1=$(applied "$bin")
      [ $((a1 - a0)) -ge "$n" ] ||
        { echo "$label $row: the LSN grew by $((a1 - a0)), not $n" >&2; exit 1; }
    fi
    echo "$row $label $rate" | tee -a "$work/results"
  done
  kill "$spid"
  wait "$spid" 2>/dev/null || true
  spid=""
}

echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); A=$A_BIN B=$B_BIN; fsync always"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then run A "$A_BIN"; run B "$B_BIN"; else run B "$B_BIN"; run A "$A_BIN"; fi
done
echo
echo "| row | A calls/s, median (min-max) | B calls/s, median (min-max) | B / A |"
echo "| --- | --- | --- | --- |"
python3 - "$work/results" <<'EOF'
import statistics, sys
d = {}
for line in open(sys.argv[1]):
    row, label, rate = line.split()
    d.setdefault(row, {}).setdefault(label, []).append(float(rate))
for row, by in d.items():
    a, b = by["A"], by["B"]
    f = lambda v: f"{statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})"
    print(f"| {row} | {f(a)} | {f(b)} | {statistics.median(b) / statistics.median(a):.2f} |")
EOF
