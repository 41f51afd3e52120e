#!/usr/bin/env bash
# Server benchmarks (issue 4) side by side with Redis, in one run: unary Get
# against the empty Ping RPC and Redis GET at 1, 16 and 64 callers,
# BatchGet against Redis GET -P 16, full and filtered Scan, and the
# resident memory of both servers after the same idle time
# (benches/server/).
#
#   tools/bench-server.sh
#
# Installs redis-server from Debian's packages if it is missing, builds the
# server and the bench (release), then runs `cargo bench --bench server`,
# which starts `uuidmap serve` (gRPC and /metrics on free loopback ports)
# and a private redis-server (persistence off) as separate processes with
# temporary directories, loads both with the same N entries and drives them
# from the bench process on the same cores.
#
# Every phase runs UUIDMAP_BENCH_ROUNDS times (default 3), once per round,
# and the order of the phases rotates from round to round within each
# group: the phases at one caller count (Ping, Get, Redis GET), the batch
# phases (BatchGet and Redis -P 16), and the four scans. So no phase always
# gets the coldest window. Each row of the printed markdown table is the
# median of its rounds with their range (min-max), and the targets are
# judged on medians, never on a best run. The entries a scan examined are
# the server's own count (uuidmap_scan_entries_examined_total on its
# /metrics, read before and after each run). The raw output goes to
# target/bench-logs/server.txt.
#
# Knobs (environment): UUIDMAP_BENCH_N (entries, default 10M),
# UUIDMAP_BENCH_SECS (seconds per phase, default 5), UUIDMAP_BENCH_ROUNDS
# (default 3), UUIDMAP_BENCH_CALLERS (default 1,16,64), UUIDMAP_BENCH_CONNS
# (HTTP/2 connections our callers share, default 4), UUIDMAP_BENCH_BATCH
# (default 100,1000), UUIDMAP_BENCH_BATCH_CALLERS (default 4,16),
# UUIDMAP_BENCH_PIPELINE_CALLERS (Redis -P 16 connections, default 16,64).
# With the defaults there are 15 load phases of 5.5 s each (with warm-up)
# per round, so the rounds take ROUNDS x 15 x 5.5 s (about 4 min for 3;
# computed, not timed), after the build, the load and 15 s of idle; memory
# at 10M is about 1.5 GiB for Redis and 0.5 GiB for uuidmap.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/bench-logs
mkdir -p "$out"

. tools/install-redis.sh

# Builds the bench and, with it, the server binary it starts (cargo's
# CARGO_BIN_EXE_uuidmap: the same release-profile build).
echo "== cargo bench --bench server --no-run"
cargo bench --bench server --no-run

# The command as the report prints it: the knobs that were set, then the
# script.
command="tools/bench-server.sh"
for knob in UUIDMAP_BENCH_PIPELINE_CALLERS UUIDMAP_BENCH_BATCH_CALLERS \
  UUIDMAP_BENCH_BATCH UUIDMAP_BENCH_CONNS UUIDMAP_BENCH_CALLERS \
  UUIDMAP_BENCH_ROUNDS UUIDMAP_BENCH_SECS UUIDMAP_BENCH_N; do
  if [ -n "${!knob:-}" ]; then
    command="$knob=${!knob} $command"
  fi
done
echo "== cargo bench --bench server"
UUIDMAP_BENCH_COMMAND="$command" cargo bench --bench server 2>&1 | tee "$out/server.txt"
