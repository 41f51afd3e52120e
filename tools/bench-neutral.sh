#!/usr/bin/env bash
# Neutral load generators beside ours (issue 16 item 5): h2load (C, from
# nghttp2-client) against uuidmap's unary Get and BatchGet, and
# redis-benchmark against Redis GET and GET -P 16, on the same entries, so
# that each row of benches/server's tables (our Rust tonic / RESP clients)
# gets a row from a client that is not ours. Prints markdown rows.
#
#   tools/bench-neutral.sh
#
# Both servers run as their own processes on loopback, loaded with the same
# N entries (tools/grpc-body.py: key i = MD5("k<i>")), uuidmap through
# curl posting gRPC-framed Write bodies, Redis through redis-cli --pipe
# (persistence off). h2load sends a gRPC-framed body with
# `content-type: application/grpc` and `te: trailers`; it counts HTTP
# statuses only, so the script first checks one answer's grpc-status with
# curl. h2load repeats one body, so every request asks for the same key (or
# the same batch): a hot-cache figure, which redis-benchmark's GET of one
# existing key (bench-key) matches. "N in flight" is min(N, conns)
# connections with N/conns streams each for h2load, N clients for
# redis-benchmark.
#
# Knobs (environment): UUIDMAP_BENCH_N (entries, default 1M),
# UUIDMAP_BENCH_REQUESTS (per row, default 200000), UUIDMAP_BENCH_CALLERS
# (streams in flight, default 1,16,64), UUIDMAP_BENCH_CONNS (h2load
# connections / redis-benchmark clients, default 4),
# UUIDMAP_BENCH_BATCH (default 100,1000), UUIDMAP_BENCH_RUNS (default 3;
# the median and the range are printed), UUIDMAP_BENCH_ROWS (which groups
# of rows: default get,batch,lookup).
#
# The lookup rows (issue 14, item 2) compare the streaming Lookup with the
# unary calls it replaces, by keys/s: each h2load "request" is one Lookup
# stream whose body holds UUIDMAP_BENCH_LOOKUP_REQUESTS (default 100)
# requests of b keys (b = 1 and each batch size), and the script checks
# first that such a stream answers every request (curl, counting answers).
# A row runs min(20000, 2000000 / b) streams (UUIDMAP_BENCH_REQUESTS does
# not apply to it).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
n=${UUIDMAP_BENCH_N:-1000000}
requests=${UUIDMAP_BENCH_REQUESTS:-200000}
callers=${UUIDMAP_BENCH_CALLERS:-1,16,64}
conns=${UUIDMAP_BENCH_CONNS:-4}
batches=${UUIDMAP_BENCH_BATCH:-100,1000}
runs=${UUIDMAP_BENCH_RUNS:-3}
rows=${UUIDMAP_BENCH_ROWS:-get,batch,lookup}
per_stream=${UUIDMAP_BENCH_LOOKUP_REQUESTS:-100}

. tools/install-redis.sh
. tools/install-h2load.sh

cargo build --release --bin uuidmap >&2
bin=$root/target/release/uuidmap
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
median_range() { # numbers on stdin -> "median (min-max)"
  sort -g | awk '{a[NR]=$1} END {printf "%.0f (%.0f-%.0f)", a[int((NR+1)/2)], a[1], a[NR]}'
}

gport=$(free_port)
"$bin" serve --listen "127.0.0.1:$gport" --data-dir "$work/uuidmap" --fsync never \
  >"$work/serve.log" 2>&1 &
pids+=($!)
rport=$(free_port)
redis-server --port "$rport" --save '' --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
pids+=($!)
sleep 1

echo "== loading $n entries into both" >&2
chunk=50000
for ((s = 0; s < n; s += chunk)); do
  c=$((n - s < chunk ? n - s : chunk))
  python3 tools/grpc-body.py write "$s" "$c" "$work/w.bin"
  curl -sf --http2-prior-knowledge -H 'content-type: application/grpc' -H 'te: trailers' \
    --data-binary @"$work/w.bin" -o /dev/null "http://127.0.0.1:$gport/uuidmap.v1.UuidMap/Write"
  python3 tools/grpc-body.py resp "$s" "$c" "$work/r.bin"
  redis-cli -p "$rport" --pipe <"$work/r.bin" >/dev/null
done
"$bin" stats --server "http://127.0.0.1:$gport" | grep -i entries >&2 || true
redis-cli -p "$rport" dbsize >&2

mid=$((n / 2))
# redis-benchmark takes its key on the command line, so the key it GETs is a
# printable one holding the same 16-byte value (a hit, like uuidmap's Get).
python3 -c "import hashlib,sys;sys.stdout.buffer.write(hashlib.md5(b'v$mid').digest())" |
  redis-cli -p "$rport" -x set bench-key >/dev/null
python3 tools/grpc-body.py get "$mid" "$work/get.bin"
status=$(curl -s --http2-prior-knowledge -H 'content-type: application/grpc' -H 'te: trailers' \
  --data-binary @"$work/get.bin" -D - -o /dev/null "http://127.0.0.1:$gport/uuidmap.v1.UuidMap/Get" |
  tr -d '\r' | awk -F': ' '$1 == "grpc-status" {print $2}')
[ "$status" = 0 ] || { echo "Get answered grpc-status '$status', not 0" >&2; exit 1; }

h2row() { # label path body streams [keys per request, for a keys/s column]
  local rates=() c=$((conns < $4 ? conns : $4)) keys=${5:-}
  for ((r = 0; r < runs; r++)); do
    rates+=("$(h2load -n "$requests" -c "$c" -m $(( ($4 + c - 1) / c )) -d "$3" \
      -H 'content-type: application/grpc' -H 'te: trailers' \
      "http://127.0.0.1:$gport/uuidmap.v1.UuidMap/$2" |
      awk '/^finished in/ {gsub(",", "", $4); print $4}')")
  done
  if [ -n "$keys" ]; then
    echo "| $1 | h2load, $c conns | $(printf '%s\n' "${rates[@]}" | median_range) |" \
      "$(printf '%s\n' "${rates[@]}" | awk -v k="$keys" '{print $1 * k}' | median_range) |"
  else
    echo "| $1 | h2load, $c conns | $(printf '%s\n' "${rates[@]}" | median_range) | |"
  fi
}
rrow() { # label pipeline clients
  local rates=()
  for ((r = 0; r < runs; r++)); do
    rates+=("$(redis-benchmark -p "$rport" -n "$requests" -c "$3" -P "$2" --csv GET bench-key |
      awk -F'","' '!/^"test"/ {gsub("\"", "", $2); print $2; exit}')")
  done
  echo "| $1 | redis-benchmark | $(printf '%s\n' "${rates[@]}" | median_range) | |"
}

echo
echo "## Neutral clients, $n entries, $requests requests a row, median (range) of $runs runs"
echo
echo "| case | client | requests (streams) /s | keys/s |"
echo "| --- | --- | ---: | ---: |"
IFS=, read -ra cs <<<"$callers"
IFS=, read -ra bs <<<"$batches"
if [[ ,$rows, == *,get,* ]]; then
  for c in "${cs[@]}"; do
    h2row "uuidmap Get, $c in flight" Get "$work/get.bin" "$c" 1
    rrow "Redis GET, $c clients" 1 "$c"
  done
fi
if [[ ,$rows, == *,batch,* ]]; then
  for b in "${bs[@]}"; do
    python3 tools/grpc-body.py batchget "$mid" "$b" "$work/batch.bin"
    h2row "uuidmap BatchGet of $b, 16 in flight" BatchGet "$work/batch.bin" 16 "$b"
    rrow "Redis GET -P 16, 16 clients (one key per request)" 16 16
  done
fi
if [[ ,$rows, == *,lookup,* ]]; then
  for b in 1 "${bs[@]}"; do
    python3 tools/grpc-body.py lookup "$mid" "$b" "$per_stream" "$work/lookup.bin"
    # One stream, checked: it ends OK with one answer per request, and no
    # answer carries an error (field 5 of LookupResponse).
    curl -s --http2-prior-knowledge -H 'content-type: application/grpc' -H 'te: trailers' \
      --data-binary @"$work/lookup.bin" -D "$work/lookup.h" -o "$work/lookup.out" \
      "http://127.0.0.1:$gport/uuidmap.v1.UuidMap/Lookup"
    answers=$(python3 - "$work/lookup.out" <<'PY'
import struct, sys
def varint(b, i):
    n = s = 0
    while True:
        n |= (b[i] & 0x7F) << s; s += 7; i += 1
        if b[i - 1] < 0x80:
            return n, i
d = open(sys.argv[1], "rb").read(); i = ok = 0
while i < len(d):
    end = i + 5 + struct.unpack(">I", d[i + 1:i + 5])[0]; i += 5; error = False
    while i < end:
        tag, i = varint(d, i)
        if tag & 7 == 0:
            _, i = varint(d, i)
        else:
            n, i = varint(d, i); i += n
        error |= tag >> 3 == 5
    ok += not error
print(ok)
PY
)
    status=$(tr -d '\r' <"$work/lookup.h" | awk -F': ' '$1 == "grpc-status" {print $2}')
    [ "$status" = 0 ] && [ "$answers" = "$per_stream" ] || {
      echo "a Lookup stream of $per_stream requests: $answers answered without error," \
        "grpc-status '$status'" >&2
      exit 1
    }
    # Streams per row: about as many keys as 20,000 streams of 100 keys,
    # and never more streams than that.
    streams=$((2000000 / b < 20000 ? 2000000 / b : 20000))
    requests=$streams h2row \
      "uuidmap Lookup, $streams streams of $per_stream requests of $b keys, 16 streams in flight" \
      Lookup "$work/lookup.bin" 16 $((per_stream * b))
  done
fi
