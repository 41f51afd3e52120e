#!/usr/bin/env bash
# Where one replicated durable write's time and CPU go (issue 32, item 2),
# on the leader and on a follower of a group of three on loopback
# (tools/cluster-3.sh, every member on --fsync always), under h2load (a
# neutral C client) sending unary Write calls of one put to the leader
# (-c CONNS -m STREAMS in flight) for SECS seconds.
#
#   tools/bench-replicated-steps.sh
#   SECS=20 CONNS=4 STREAMS=16 tools/bench-replicated-steps.sh
#
# In the middle of the run, for WINDOW seconds, it reads:
# - the writes applied (the leader's applied_lsn, before and after);
# - each thread's CPU time (/proc/<pid>/task/*/stat, utime + stime) on the
#   leader and one follower: CPU per write by thread (uuidmap-rpc are the
#   tokio workers: gRPC, openraft, the proposal task; uuidmap-replica is
#   the writer thread: decide and apply; raft-log the log thread: append,
#   write, fsync);
# - the members' own wall-time counters (below).
# Then, for another WINDOW seconds, a perf profile of each member (`perf
# record --call-graph dwarf`, PERF=off to skip it): the share of samples
# under each step's frames, times the process's CPU per write from the
# first window, is that step's CPU per write (a frame's share includes
# what it calls; the steps do not nest in each other). The windows are
# apart because perf's recorders take a good part of the two cores: until
# 2026-11-28 both were one window, and the CPU per write read with perf
# running was up to 1.7 times what it is without (47.7 against 28.0 µs).
# The members' own wall-time counters are (/metrics,
#   uuidmap_write_step_seconds_total): queue, decide, the Raft log's write
#   and fsync, replicate (a proposal handed to openraft until answered:
#   append, replication to a majority, commit, apply), apply, whole call.
#
# Needs perf (linux-perf) for the CPU per step; the rest runs without it.
# Data directories live under a temporary directory in TMPDIR, removed at
# exit. Builds target/release/uuidmap unless UUIDMAP_BIN names one.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-15}
WINDOW=${WINDOW:-4}
CONNS=${CONNS:-4}
STREAMS=${STREAMS:-16}
PERF=${PERF:-on}
. tools/install-h2load.sh
if [ -z "${UUIDMAP_BIN:-}" ]; then
  cargo build --release --bin uuidmap >/dev/null 2>&1 || cargo build --release --bin uuidmap
  bin=$PWD/target/release/uuidmap
else
  bin=$UUIDMAP_BIN
fi
if [ "$PERF" = on ] && ! command -v perf >/dev/null; then
  echo "perf is not installed (apt-get install linux-perf): CPU per step is skipped" >&2
  PERF=off
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/uuidmap-rsteps.XXXXXX")
gpid=""
trap '[ -n "$gpid" ] && kill "$gpid" 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
base=$(python3 -c 'import socket,random
while True:
    b = random.randrange(20000, 50000, 100)
    try:
        ss = []
        for o in (0, 1, 2, 10, 11, 12, 20, 21, 22):
            s = socket.socket(); s.bind(("127.0.0.1", b + o)); ss.append(s)
        print(b); break
    except OSError:
        pass')
UUIDMAP_CLUSTER_DIR=$work/group UUIDMAP_CLUSTER_BASE_PORT=$base UUIDMAP_BIN=$bin \
  tools/cluster-3.sh >"$work/cluster.out" 2>&1 &
gpid=$!
urls="http://127.0.0.1:$base,http://127.0.0.1:$((base + 10)),http://127.0.0.1:$((base + 20))"
for _ in $(seq 200); do
  "$bin" put --server "$urls" 00000000-0000-0000-0000-000000000001 \
    00000000-0000-0000-0000-000000000002 >/dev/null 2>&1 && break
  sleep 0.2
done
leader=$("$bin" cluster status --server "$urls" | awk '$1 == "leader_url" {print $2}')
[ -n "$leader" ] || { echo "no leader among $urls" >&2; cat "$work/cluster.out" >&2; exit 1; }
lport=${leader##*:}
fport=$base
[ "$fport" = "$lport" ] && fport=$((base + 10))
pid_on() { ss -ltnpH "sport = :$1" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2; }
lpid=$(pid_on "$lport")
fpid=$(pid_on "$fport")
applied() { "$bin" stats --server "$1" | awk '$1 == "applied_lsn" {print $2}'; }
steps() { # metrics-port -> "step seconds" lines
  curl -s "http://127.0.0.1:$1/metrics" |
    sed -n 's/^uuidmap_write_step_seconds_total{step="\([a-z_]*\)"} \(.*\)$/\1 \2/p'
}
threads() { # pid -> "comm ticks switches" per thread
  for t in /proc/"$1"/task/*; do
    printf '%s %s %s\n' "$(tr ' ' '_' <"$t/comm")" "$(awk '{print $14 + $15}' "$t/stat")" \
      "$(awk '/ctxt_switches/ {n += $2} END {print n}' "$t/status")"
  done
}

python3 tools/grpc-body.py write 0 1 "$work/write.bin"
h2load -D "$SECS" -c "$CONNS" -m "$STREAMS" -d "$work/write.bin" \
  -H 'content-type: application/grpc' -H 'te: trailers' \
  "$leader/uuidmap.v1.UuidMap/Write" >"$work/h2load.out" 2>&1 &
hpid=$!
look() { # n: each member's threads and step counters, into $work/<side>.{cpu,steps}<n>
  threads "$lpid" >"$work/leader.cpu$1"
  steps $((lport + 1)) >"$work/leader.steps$1"
  threads "$fpid" >"$work/follower.cpu$1"
  steps $((fport + 1)) >"$work/follower.steps$1"
}
# The CPU and the counters first, with nothing else running: perf's own
# work (its recorders write megabytes a second) would take the members'
# cores and inflate their CPU per write. Then the profile, for the shares.
sleep $(((SECS - 2 * WINDOW) / 2))
look 0
a0=$(applied "$leader")
sleep "$WINDOW"
a1=$(applied "$leader")
look 1
if [ "$PERF" = on ]; then
  perf record -q -F 499 --call-graph dwarf,16384 -o "$work/leader.perf" -p "$lpid" \
    -- sleep "$WINDOW" 2>/dev/null &
  perf_pid=$!
  perf record -q -F 499 --call-graph dwarf,16384 -o "$work/follower.perf" -p "$fpid" \
    -- sleep "$WINDOW" 2>/dev/null
  wait "$perf_pid" 2>/dev/null || true
fi
wait "$hpid" || true
writes=$((a1 - a0))
rate=$(awk '/^finished in/ {gsub(",", "", $4); print $4}' "$work/h2load.out")
grep -q " 0 failed, 0 errored" "$work/h2load.out" || { cat "$work/h2load.out" >&2; exit 1; }
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); h2load -c $CONNS -m $STREAMS for ${SECS}s: $rate writes/s; window ${WINDOW}s: $writes writes applied (leader applied_lsn $a0 -> $a1)"
for side in leader follower; do
  if [ "$PERF" = on ]; then
    perf report -i "$work/$side.perf" --children --sort sym -q -g none --percent-limit 0.3 \
      2>/dev/null >"$work/$side.report" || true
  else
    : >"$work/$side.report"
  fi
done
python3 - "$work" "$writes" "$(getconf CLK_TCK)" <<'EOF'
import re, sys
work, writes, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
us = lambda ticks: ticks * 1e6 / hz / writes

def cpu(side, col=1):
    def load(name):
        d = {}
        for line in open(f"{work}/{side}.{name}"):
            fields = line.split()
            d[fields[0]] = d.get(fields[0], 0) + int(fields[col])
        return d
    a, b = load("cpu0"), load("cpu1")
    return {k: b[k] - a.get(k, 0) for k in b if b[k] - a.get(k, 0) > 0}

# Each step: the frames (regular expressions on perf's symbol) whose
# samples, callees included, make it. The leader's client calls and a
# follower's AppendEntries both arrive through the gRPC server frames.
STEPS = [
    ("gRPC server: HTTP/2, tonic, the handler (client calls; a follower's AppendEntries)",
     [r"^tonic::transport::server::serve_connection::\{\{closure\}\}$",
      r"^<hyper::proto::h2::server::H2Stream<F,B,Ex> as core::future::future::Future>::poll$"]),
    ("writer thread: decide, apply", [r"^uuidmap_engine::writer::writer_loop::run$"]),
    ("log thread: encode, write, fsync", [r"^uuidmap_cluster::log_store::thread::LogThread::run$"]),
    ("  of which the group's write and fsync", [r"^uuidmap_cluster::log_store::thread::LogThread::commit$"]),
    ("openraft core", [r"^openraft::core::raft_core::RaftCore<C,NF,LS,SM>::runtime_loop::\{\{closure\}\}::\{\{closure\}\}$"]),
    ("openraft state machine worker (apply hand-off)", [r"^openraft::core::sm::worker::Worker<C,SM,LR>::worker_loop::\{\{closure\}\}::\{\{closure\}\}$"]),
    ("replication: AppendEntries calls (encode, send)", [r"^openraft::network::v2::network::<impl openraft::network::append_trait::NetAppend<C> for T>::append_entries::\{\{closure\}\}$"]),
    ("replication: HTTP/2 client (AppendEntries out)", [r"^<h2::client::Connection<T,B> as core::future::future::Future>::poll$"]),
    ("proposal task: propose, answer", [r"^uuidmap_cluster::leadership::run_proposals::\{\{closure\}\}$"]),
]

def shares(side):
    out = {}
    for line in open(f"{work}/{side}.report"):
        m = re.match(r"\s*([\d.]+)%\s+([\d.]+)%\s+\[[.k]\]\s+(.*\S)\s*$", line)
        if m:
            sym = m.group(3)
            out[sym] = max(out.get(sym, 0.0), float(m.group(1)))
    return out

print()
print("| thread | leader µs CPU/write | follower µs CPU/write | leader switches/write | follower switches/write |")
print("| --- | --- | --- | --- | --- |")
cl, cf = cpu("leader"), cpu("follower")
xl, xf = cpu("leader", 2), cpu("follower", 2)
for comm in sorted(set(cl) | set(cf)):
    print(f"| {comm} | {us(cl.get(comm, 0)):.1f} | {us(cf.get(comm, 0)):.1f} "
          f"| {xl.get(comm, 0) / writes:.2f} | {xf.get(comm, 0) / writes:.2f} |")
tl, tf = us(sum(cl.values())), us(sum(cf.values()))
print(f"| **all** | **{tl:.1f}** | **{tf:.1f}** | **{sum(xl.values()) / writes:.2f}** "
      f"| **{sum(xf.values()) / writes:.2f}** |")

sl, sf = shares("leader"), shares("follower")
if sl or sf:
    print()
    print("| step (perf: samples under its frames) | leader µs CPU/write | follower µs CPU/write |")
    print("| --- | --- | --- |")
    rest_l = rest_f = 100.0
    for name, pats in STEPS:
        def pick(s):
            return sum(v for pat in pats for k, v in s.items() if re.match(pat, k))
        pl, pf = pick(sl), pick(sf)
        if not name.startswith(" "):
            rest_l -= pl
            rest_f -= pf
        print(f"| {name} | {pl * tl / 100:.1f} ({pl:.0f} %) | {pf * tf / 100:.1f} ({pf:.0f} %) |")
    print(f"| the rest: tokio's scheduler and parking, other tasks | {rest_l * tl / 100:.1f} ({rest_l:.0f} %) "
          f"| {rest_f * tf / 100:.1f} ({rest_f:.0f} %) |")
    kl = sum(v for k, v in sl.items() if k == "entry_SYSCALL_64_after_hwframe")
    kf = sum(v for k, v in sf.items() if k == "entry_SYSCALL_64_after_hwframe")
    print(f"| (across the steps: system calls) | {kl * tl / 100:.1f} ({kl:.0f} %) | {kf * tf / 100:.1f} ({kf:.0f} %) |")

def steps(side):
    def load(name):
        return {l.split()[0]: float(l.split()[1]) for l in open(f"{work}/{side}.{name}") if l.strip()}
    a, b = load("steps0"), load("steps1")
    return {k: (b[k] - a.get(k, 0)) * 1e6 / writes for k in b}

print()
print("(wall time: queue, decide, replicate and call are each one's mean; wal_write, wal_sync,")
print(" apply and complete are per group, shown as the group's time over its writes)")
print()
print("| wall-time step (members' counters) | leader µs/write | follower µs/write |")
print("| --- | --- | --- |")
wl, wf = steps("leader"), steps("follower")
for k in ["queue", "decide", "wal_write", "wal_sync", "replicate", "apply", "complete", "call"]:
    print(f"| {k} | {wl.get(k, 0):.1f} | {wf.get(k, 0):.1f} |")
EOF
