#!/usr/bin/env bash
# Runs every index benchmark at full size, one after another, and keeps the
# raw output under target/bench-logs/. Run it on an otherwise idle machine.
#
#   tools/bench-index.sh            # all: floor, probing, maps, memory, latency
#   tools/bench-index.sh maps       # one of them
#
# Sizes can be overridden with UUIDMAP_BENCH_SIZES (entry counts, comma-separated)
# and PROBING_SLOTS; see BENCHMARKS.md for what each prints.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/bench-logs
mkdir -p "$out"
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(floor probing maps memory latency)
{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "# THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)"
} | tee "$out/machine.txt"
for b in "${benches[@]}"; do
  echo "== cargo bench --bench $b"
  cargo bench --bench "$b" 2>&1 | tee "$out/$b.txt"
done
