#!/usr/bin/env bash
# Issue 31's "a member with a damaged WAL serves again <= 10 s after its
# start, for 1M entries": a group of three `uuidmap serve` processes on
# loopback is loaded with ENTRIES entries (Write batches of 1,000, one Raft
# entry each); a follower is stopped, a byte in the middle of its WAL is
# flipped (inside a record it acknowledged), and it is started again. It
# cuts its log at the damage, is made a learner, catches up from the
# leader and is promoted back (docs/replication.md 8.5). The test
# `damaged_member` (tests/client/damaged_member.rs, ignored by `cargo
# test`) asserts that it then holds every entry, and prints, in ms from
# the member's start: when it answered on its port, when it answered a
# linearizable Get of the newest key, and when the leader listed it as a
# voter again.
#
#   tools/bench-damaged-member.sh            # 1M entries, 3 runs
#   ENTRIES=100000 RUNS=1 tools/bench-damaged-member.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ENTRIES=${ENTRIES:-1000000}
RUNS=${RUNS:-3}
case $ENTRIES$RUNS in *[!0-9]*) echo "ENTRIES and RUNS must be numbers" >&2; exit 2 ;; esac
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $ENTRIES entries, $RUNS runs; ms from the damaged member's start"
for r in $(seq 1 "$RUNS"); do
  out=$(UUIDMAP_DAMAGED_ENTRIES=$ENTRIES cargo test --release --test client -- \
    --ignored --exact --nocapture \
    damaged_member::a_follower_with_a_damaged_wal_serves_again_soon_after_its_start 2>&1) ||
    { echo "$out" >&2; exit 1; }
  echo "run $r: $(grep -o 'entries=[0-9]* cut_lsn=.*voter_ms=[0-9]*' <<<"$out")"
done
