#!/usr/bin/env bash
# What each layer of a unary call costs (issue 14, item 3): installs h2load
# (nghttp2-client) when missing, then runs benches/layers.rs, which serves
# the data service with the server's stack built up one layer at a time and
# drives each with h2load. Prints a markdown table (see the bench's docs).
#
#   tools/bench-layers.sh              # 3 rounds
#   UUIDMAP_BENCH_RUNS=5 tools/bench-layers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/install-h2load.sh
exec cargo bench -p uuidmap-benches --bench layers
