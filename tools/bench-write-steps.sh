#!/usr/bin/env bash
# Where one durable write's time goes (issue 12): a fresh `uuidmap serve
# --fsync always`, driven by h2load (a neutral C client) with W writers,
# and the server's own per-step counters (`uuidmap_write_step_seconds_total`
# on /metrics) read before and after the run. Prints, per step, the
# microseconds per write (queue and decide are per batch; the WAL steps,
# apply and complete are per group, shown per write too), and the whole
# call as h2load saw it.
#
#   tools/bench-write-steps.sh                 # 1 writer, preallocation on
#   WRITERS="-c4 -m16" tools/bench-write-steps.sh
#   PREALLOCATE=off tools/bench-write-steps.sh
#   OVERLAP=on WRITERS="-c4 -m16" tools/bench-write-steps.sh
#
# Knobs: N (requests, default 10000), WRITERS (h2load flags, default
# "-c1 -m1"), PREALLOCATE (on|off, default on), FSYNC (default always),
# OVERLAP (--wal-overlap-syncs, on|off, default off). Under overlap the
# `wal_sync` step runs on the sync thread while the writer thread goes on,
# so the steps overlap and do not add up to the call.
# The server starts on a temporary directory under TMPDIR, removed at exit.
# With preallocation on, the script waits for the first spare WAL file
# (made in the background within a second of a fresh start) and sends a
# few warm-up writes, so that the run measures the steady state.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-10000}
WRITERS=${WRITERS:-"-c1 -m1"}
PREALLOCATE=${PREALLOCATE:-on}
FSYNC=${FSYNC:-always}
OVERLAP=${OVERLAP:-off}

. tools/install-h2load.sh
cargo build --release --bin uuidmap >/dev/null 2>&1 || cargo build --release --bin uuidmap
uuidmap=target/release/uuidmap

work=$(mktemp -d "${TMPDIR:-/tmp}/uuidmap-steps.XXXXXX")
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port); mport=$(free_port)

# PutRequest { key = 1: 16 bytes, value = 2: 16 bytes } in a gRPC frame.
body=$work/put.bin
{
  printf '\x00\x00\x00\x00\x24\x0a\x10'
  printf '\x01\x23\x45\x67\x89\xab\xcd\xef\x01\x23\x45\x67\x89\xab\xcd\xef'
  printf '\x12\x10'
  printf '\xfe\xdc\xba\x98\x76\x54\x32\x10\xfe\xdc\xba\x98\x76\x54\x32\x10'
} >"$body"

"$uuidmap" serve --data-dir "$work/data" --listen "127.0.0.1:$port" --fsync "$FSYNC" \
  --wal-preallocate "$PREALLOCATE" --wal-overlap-syncs "$OVERLAP" --metrics-listen "127.0.0.1:$mport" >"$work/log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
if [ "$PREALLOCATE" = on ]; then
  for _ in $(seq 100); do [ -e "$work/data/wal-spare" ] && break; sleep 0.1; done
fi
h2l() {
  h2load "$@" -d "$body" -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:$port/uuidmap.v1.UuidMap/Put"
}
h2l -n 20 -c1 -m1 >/dev/null 2>&1
sleep 0.5
scrape() { curl -s "http://127.0.0.1:$mport/metrics" | grep -E '^uuidmap_write_'; }
scrape >"$work/before"
out=$(h2l -n "$N" $WRITERS 2>&1)
scrape >"$work/after"
rate=$(sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' <<<"$out")
echo "== $N Puts, h2load $WRITERS, --fsync $FSYNC, --wal-preallocate $PREALLOCATE, load $(cut -d' ' -f1-3 /proc/loadavg)"
grep '^requests:' <<<"$out"
python3 - "$work/before" "$work/after" "$rate" <<'PY'
import sys
def load(p):
    d = {}
    for line in open(p):
        k, v = line.rsplit(" ", 1)
        d[k] = float(v)
    return d
b, a, rate = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
delta = {k: a[k] - b.get(k, 0) for k in a}
batches = delta["uuidmap_write_batches"]
groups = delta["uuidmap_write_groups"]
calls = delta["uuidmap_write_calls"]
step = lambda s: delta['uuidmap_write_step_seconds_total{step="%s"}' % s] * 1e6
overlapped = delta.get("uuidmap_write_overlapped_groups", 0)
print(f"batches {batches:.0f}, groups {groups:.0f} ({batches / groups:.1f} batches a group, {overlapped:.0f} of them overlapped), h2load {rate:,.0f} Puts/s")
print("| step | µs per write | µs per group | in one write's latency, µs |")
print("| --- | --- | --- | --- |")
rows = [("queue (submit → the writer takes it; includes waiting for the group before)", "queue", False),
        ("decide", "decide", False),
        ("WAL write", "wal_write", True), ("WAL fsync (slot write included)", "wal_sync", True),
        ("apply + publish", "apply", True), ("complete (send the answers, waking the callers)", "complete", True)]
latency = 0
for name, key, per_group in rows:
    total = step(key)
    # A batch waits for its whole group's steps, and its own per-batch ones.
    own = total / groups if per_group else total / batches
    latency += own
    group_col = f"{total / groups:.1f}" if per_group else ""
    print(f"| {name} | {total / batches:.1f} | {group_col} | {own:.1f} |")
call = step("call") / calls
print(f"| **steps above, as one write meets them** | | | **{latency:.1f}** |")
print(f"| whole `write` call in the server (submit → answer in the handler) | | | {call:.1f} |")
print(f"| so: the caller's wake-up after `complete` | | | {call - latency:.1f} |")
PY
