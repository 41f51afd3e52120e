#!/usr/bin/env bash
# What an unpipelined GET costs on uuidmap's Redis-protocol port, step by
# step, and what it costs redis-server (issue 36). Drives each server with
# `redis-benchmark -c CONNS -n REQUESTS -r N GET <UUID key>` (the GET row
# of tools/bench-resp.sh: the same UUID keys, every GET a hit) and reads:
#
# - the server process's CPU time over the run (/proc/<pid>/stat, utime +
#   stime) divided by the GETs: CPU µs per GET; and its threads' context
#   switches (voluntary + involuntary) per GET. RUNS rounds, alternating
#   the servers, without perf;
# - then RUNS more rounds of each (PERF_REQUESTS GETs, default 3 x
#   REQUESTS) under `perf record -F 999 --call-graph dwarf`: each sample
#   is put in one step by tools/resp-steps.py (the first step, in its
#   order, with a frame on the sample's stack), and a step's share of the
#   samples times the median CPU per GET of the rounds without perf is
#   that step's CPU per GET. perf slows the server it samples; only its
#   shares are used;
# - then RUNS more rounds of each under `perf stat`: the server's socket,
#   epoll and futex system calls (tracepoints), per GET.
#
#   tools/bench-resp-steps.sh
#   RUNS=5 REQUESTS=500000 tools/bench-resp-steps.sh
#
# Three servers, each loaded with the same N keys first: uuidmap with
# `--metrics-listen off` (as tools/bench-resp.sh runs it), uuidmap with its
# metrics served (a Prometheus recorder installed: the per-command series
# are recorded), and redis-server without persistence. uuidmap runs with
# `--fsync never` (GETs write nothing). Knobs: N (keys, default 1000000),
# REQUESTS (GETs per round, default 300000), CONNS (default 64), RUNS
# (default 3), PERF_REQUESTS (GETs in the perf round), PERF (on/off),
# UUIDMAP_BIN (default: target/release/uuidmap, built), KEEP=1 keeps the
# work directory (perf data and the steps).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
n=${N:-1000000}
requests=${REQUESTS:-300000}
conns=${CONNS:-64}
runs=${RUNS:-3}
perf_requests=${PERF_REQUESTS:-$((3 * requests))}
PERF=${PERF:-on}

. tools/install-redis.sh
if [ -z "${UUIDMAP_BIN:-}" ]; then
  cargo build --release --bin uuidmap >&2
  bin=${CARGO_TARGET_DIR:-$root/target}/release/uuidmap
else
  bin=$UUIDMAP_BIN
fi
if [ "$PERF" = on ] && ! command -v perf >/dev/null; then
  echo "perf is not installed (apt-get install linux-perf): the steps are skipped" >&2
  PERF=off
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-resp-steps.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
key_template=10000000-0000-4000-8000-__rand_int__
value=xxxxxxxxxxxxxxxx

declare -A port pid
port[uuidmap]=$(free_port)
port[uuidmap_metrics]=$(free_port)
port[redis]=$(free_port)
"$bin" serve --data-dir "$work/u1" --listen "127.0.0.1:$(free_port)" \
  --resp-listen "127.0.0.1:${port[uuidmap]}" --metrics-listen off --fsync never \
  2>"$work/uuidmap.log" &
pid[uuidmap]=$!
pids+=($!)
"$bin" serve --data-dir "$work/u2" --listen "127.0.0.1:$(free_port)" \
  --resp-listen "127.0.0.1:${port[uuidmap_metrics]}" \
  --metrics-listen "127.0.0.1:$(free_port)" --fsync never 2>"$work/uuidmap_metrics.log" &
pid[uuidmap_metrics]=$!
pids+=($!)
mkdir -p "$work/redis"
redis-server --port "${port[redis]}" --dir "$work/redis" --save "" --appendonly no \
  >"$work/redis.log" 2>&1 &
pid[redis]=$!
pids+=($!)
servers=(uuidmap uuidmap_metrics redis)
for s in "${servers[@]}"; do
  for _ in $(seq 1 200); do
    [ "$(redis-cli -p "${port[$s]}" PING 2>/dev/null)" = PONG ] && break
    sleep 0.05
  done
  python3 tools/resp-load.py "${port[$s]}" "$n" "$value"
  echo "$s (pid ${pid[$s]}, port ${port[$s]}): DBSIZE $(redis-cli -p "${port[$s]}" DBSIZE)" >&2
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
switches() { cat /proc/"$1"/task/*/status | awk '/ctxt_switches/ {n += $2} END {print n}'; }
bench() { # server: requests/s of one redis-benchmark run of `requests` GETs
  redis-benchmark -h 127.0.0.1 -p "${port[$1]}" -c "$conns" -n "$requests" -r "$n" --csv \
    GET "$key_template" 2>/dev/null | tail -n1 | awk -F'","' '{print $2}'
}

echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the start; redis-benchmark -c $conns -n $requests -r $n GET $key_template" >&2
: >"$work/rounds"
for r in $(seq 1 "$runs"); do
  for s in "${servers[@]}"; do
    t0=$(ticks "${pid[$s]}")
    x0=$(switches "${pid[$s]}")
    rps=$(bench "$s")
    t1=$(ticks "${pid[$s]}")
    x1=$(switches "${pid[$s]}")
    echo "$s $rps $((t1 - t0)) $((x1 - x0))" >>"$work/rounds"
  done
done
if [ "$PERF" = on ]; then
  for r in $(seq 1 "$runs"); do
    for s in "${servers[@]}"; do
      perf record -q -F 999 --call-graph dwarf,16384 -o "$work/$s.perf" -p "${pid[$s]}" \
        2>/dev/null &
      perf_pid=$!
      sleep 0.5
      requests=$perf_requests bench "$s" >>"$work/$s.perf-rps"
      kill -INT "$perf_pid"
      wait "$perf_pid" 2>/dev/null || true
      perf script -i "$work/$s.perf" -F comm,tid,ip,sym --inline 2>/dev/null |
        python3 tools/resp-steps.py "${s%_metrics}" >"$work/$s.steps.$r"
    done
  done
  # The system calls, counted in rounds of their own: tracing every call
  # slows the calls, and would show in the profile's shares.
  for r in $(seq 1 "$runs"); do
    for s in "${servers[@]}"; do
      perf stat -x, -o "$work/$s.calls.$r" -p "${pid[$s]}" \
        -e syscalls:sys_enter_recvfrom,syscalls:sys_enter_read \
        -e syscalls:sys_exit_recvfrom --filter 'ret < 0' -e syscalls:sys_exit_read --filter 'ret < 0' \
        -e syscalls:sys_enter_sendto,syscalls:sys_enter_write \
        -e syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex 2>/dev/null &
      stat_pid=$!
      sleep 0.5
      bench "$s" >/dev/null
      kill -INT "$stat_pid"
      wait "$stat_pid" 2>/dev/null || true
    done
  done
fi
echo "== load $(cut -d' ' -f1-3 /proc/loadavg) at the end" >&2

python3 - "$work" "$requests" "$(getconf CLK_TCK)" "$PERF" "$perf_requests" <<'EOF'
import statistics, sys
work, requests, hz, perf = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "on"
perf_requests = int(sys.argv[5])
rounds = {}
for line in open(f"{work}/rounds"):
    s, rps, ticks, sw = line.split()
    rounds.setdefault(s, []).append((float(rps), int(ticks) * 1e6 / hz / requests, int(sw) / requests))

def mr(xs, f):
    xs = sorted(xs)
    return f"{f(statistics.median(xs))} ({f(xs[0])}-{f(xs[-1])})"

names = {"uuidmap": "uuidmap (metrics off)", "uuidmap_metrics": "uuidmap (metrics on)",
         "redis": "redis-server"}
print("| server | GET/s | CPU µs per GET | context switches per GET |")
print("| --- | --- | --- | --- |")
cpu = {}
for s, rs in rounds.items():
    cpu[s] = statistics.median(r[1] for r in rs)
    print(f"| {names[s]} | {mr([r[0] for r in rs], lambda v: f'{v:.0f}')} "
          f"| {mr([r[1] for r in rs], lambda v: f'{v:.2f}')} "
          f"| {mr([r[2] for r in rs], lambda v: f'{v:.3f}')} |")
if not perf:
    sys.exit(0)

def steps(path):
    out = {}
    for line in open(path):
        value, name = line.rstrip("\n").split("\t")
        out[name] = float(value)
    return out

def table(servers):
    st = {s: [steps(f"{work}/{s}.steps.{r}") for r in range(1, len(rounds[s]) + 1)] for s in servers}
    print("| step (perf: each sample in one step) | "
          + " | ".join(f"{names[s]} µs CPU/GET" for s in servers) + " |")
    print("| --- |" + " --- |" * len(servers))
    for name in st[servers[0]][0]:
        if name != "samples":
            print(f"| {name} | " + " | ".join(
                mr([x[name] * cpu[s] / 100 for x in st[s]], lambda v: f"{v:.2f}")
                + f" ({statistics.median(x[name] for x in st[s]):.1f} %)" for s in servers) + " |")
    print("| **all** (perf samples a round: " + ", ".join(
        "-".join(f"{x['samples']:.0f}" for x in st[s]) for s in servers)
          + ") | " + " | ".join(f"**{cpu[s]:.2f}**" for s in servers) + " |")

print()
print("(a step: median (range) over the perf rounds of its share times the median CPU per GET")
print(" of the rounds without perf; in brackets its median share)")
print()
table(["uuidmap", "uuidmap_metrics"])
print()
table(["redis"])
def calls(path):
    out = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) > 2 and f[0].replace(".", "").isdigit():
            out[f[2]] = out.get(f[2], 0) + float(f[0])
    return out

print()
print("System calls per GET (perf stat, RUNS rounds of their own: median (range); `failed`:")
print("returned an error, EAGAIN on a non-blocking socket)")
print()
ev = [("recvfrom", "syscalls:sys_enter_recvfrom"), ("read", "syscalls:sys_enter_read"),
      ("failed recvfrom", "syscalls:sys_exit_recvfrom"), ("failed read", "syscalls:sys_exit_read"),
      ("sendto", "syscalls:sys_enter_sendto"), ("write", "syscalls:sys_enter_write"),
      ("epoll_wait", "syscalls:sys_enter_epoll_wait"), ("futex", "syscalls:sys_enter_futex")]
print("| system call | " + " | ".join(names[s] for s in names) + " |")
print("| --- |" + " --- |" * len(names))
cs = {s: [calls(f"{work}/{s}.calls.{r}") for r in range(1, len(rounds[s]) + 1)] for s in names}
for label, e in ev:
    print(f"| {label} | " + " | ".join(
        mr([c.get(e, 0) / requests for c in cs[s]], lambda v: f"{v:.3f}") for s in names) + " |")

print()
print("GET/s under perf: " + "; ".join(
    f"{names[s]} " + ", ".join(f"{float(v):.0f}" for v in open(f"{work}/{s}.perf-rps").read().split())
    for s in names))
EOF
