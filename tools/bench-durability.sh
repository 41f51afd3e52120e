#!/usr/bin/env bash
# Durability benchmarks (issue 3) side by side with Redis, in one run:
# snapshot write, restart to the first lookup, durable writes/s under fsync
# `always`, and read latency during snapshots (benches/durability/).
#
#   tools/bench-durability.sh
#
# Installs redis-server and redis-tools from Debian's packages if they are
# missing (as root, or with sudo), records the machine and the raw disk
# (sequential write + fdatasync, and small synchronous writes), then runs
# `cargo bench --bench durability`, which starts its own private
# redis-server instances on free loopback ports. Raw output goes to
# target/bench-logs/. Sizes: UUIDMAP_BENCH_SIZES (default 1M,10M); writers:
# UUIDMAP_BENCH_WRITERS (default 1,16,64); seconds per writer count:
# UUIDMAP_BENCH_SECS (default 4).
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/bench-logs
mkdir -p "$out"

. tools/install-redis.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "# THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)"
  echo "# temp dir $tmp on $(df --output=source,fstype "$tmp" | tail -1 | xargs)"
  echo "# redis: $(redis-server --version 2>/dev/null || echo 'not installed')"
  echo "# dd 400 MiB sequential write + fdatasync:"
  dd if=/dev/zero of="$tmp/dd" bs=1M count=400 conv=fdatasync 2>&1 | tail -1
  rm -f "$tmp/dd"
  echo "# dd 2000 x 4 KiB synchronous writes (oflag=dsync):"
  dd if=/dev/zero of="$tmp/dd" bs=4k count=2000 oflag=dsync 2>&1 | tail -1
  rm -f "$tmp/dd"
} | tee "$out/durability-machine.txt"

echo "== cargo bench --bench durability"
cargo bench --bench durability 2>&1 | tee "$out/durability.txt"
