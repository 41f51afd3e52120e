#!/usr/bin/env bash
# Server benchmarks (issue 4) side by side with Redis, in one run: unary Get
# against the empty Ping RPC and Redis GET at 1, 16 and 64 callers,
# BatchGet against Redis GET -P 16, full and filtered Scan
# (benches/server/).
#
#   tools/bench-server.sh
#
# Installs redis-server from Debian's packages if it is missing, builds the
# server and the bench (release), then runs `cargo bench --bench server`,
# which starts `uuidmap serve` and a private redis-server (persistence off)
# as separate processes on free loopback ports with temporary directories,
# loads both with the same N entries and drives them from the bench process
# on the same cores. Prints a markdown table; the raw output goes to
# target/bench-logs/server.txt.
#
# Knobs (environment): UUIDMAP_BENCH_N (entries, default 10M),
# UUIDMAP_BENCH_SECS (seconds per phase, default 5), UUIDMAP_BENCH_CALLERS
# (default 1,16,64), UUIDMAP_BENCH_CONNS (HTTP/2 connections our callers
# share, default 4), UUIDMAP_BENCH_BATCH (default 100,1000),
# UUIDMAP_BENCH_BATCH_CALLERS (default 4,16), UUIDMAP_BENCH_PIPELINE_CALLERS
# (Redis -P 16 connections, default 16,64). At 10M the run takes ~3-4 min
# after the build (about 1.5 GiB for Redis, 0.5 GiB for uuidmap).
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/bench-logs
mkdir -p "$out"

. tools/install-redis.sh

# Builds the bench and, with it, the server binary it starts (cargo's
# CARGO_BIN_EXE_uuidmap: the same release-profile build).
echo "== cargo bench --bench server --no-run"
cargo bench --bench server --no-run

command="tools/bench-server.sh"
if [ -n "${UUIDMAP_BENCH_N:-}" ]; then
  command="UUIDMAP_BENCH_N=$UUIDMAP_BENCH_N $command"
fi
echo "== cargo bench --bench server"
UUIDMAP_BENCH_COMMAND="$command" cargo bench --bench server 2>&1 | tee "$out/server.txt"
