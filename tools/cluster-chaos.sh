#!/usr/bin/env bash
# The chaos run of a replica group (issue 15): three `uuidmap serve`
# processes on loopback, every Raft link behind its own fault proxy
# (`--raft-dial`), under write and compare-and-set load from the client
# crate, while a randomized schedule kills the leader or a follower
# (SIGKILL, started again 1-3 s later), cuts the leader or a follower off
# for 2-5 s, and removes, wipes and adds back a follower. At the end every
# member is restarted and the run checks that no acknowledged write was
# lost, that the hot keys' histories are linearizable, and that the three
# members hold the same contents.
#
#   tools/cluster-chaos.sh                # 5 minutes, a random seed
#   tools/cluster-chaos.sh --secs 60      # a shorter run
#   tools/cluster-chaos.sh --seed 42      # replay a schedule (the seed is printed)
#   tools/cluster-chaos.sh --netns        # across network namespaces (root)
#   tools/cluster-chaos.sh --netns --rounds 100  # and on until 100 of each fault
#   tools/cluster-chaos.sh --profile checked  # build with another cargo profile
#
# With --netns it runs the multi-host rig instead (issue 31): each member
# in a network namespace of its own on a bridge, the load in another,
# faults between them (SIGKILL, SIGSTOP, link down, one-way drop with
# iptables, 1-5 ms of delay on Raft links, a full disk, a leader paused
# while a follower is killed, the whole group killed), in rounds of every
# kind once, with 1 ms of delay each way on every Raft link at all times
# and linearizable Gets on every member in the histories; test
# `netns_chaos` (tests/client/netns_chaos.rs, ignored by `cargo test`). It
# needs root and `ip netns`, and installs Debian's iptables if it is
# missing. Its summary adds `reads_checked=R`, the count of each fault kind
# (`faults=kill:a,stop:b,...`) and `disk_stops=D`, the full disks that
# stopped their member. The faults come in rounds of every kind once;
# `--rounds R` goes on past --secs until R rounds are done (R of each).
#
# It is the test `cluster_chaos` of the `client` test binary
# (tests/client/cluster_chaos.rs), run in release with
# UUIDMAP_CHAOS_SECS and UUIDMAP_CHAOS_SEED; `cargo test` runs the same
# test for about 15 s in debug. The log (each fault, the seed, the
# members' output on a failure) goes to stderr; the last line on stdout is
# the summary:
#
#   acked=N lost=0 linearizable=yes failovers=K failover_p50_ms=P failover_max_ms=M
#
# acked: fresh-key writes acknowledged (each read back on every member);
# lost: those missing on any member; failovers: leader kills and cuts,
# each measured from the fault to the first write a new leader
# acknowledged. Exits non-zero if the test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=300
seed=
rounds=1
netns=
profile=release
while [ $# -gt 0 ]; do
  case $1 in
    --netns) netns=1; shift ;;
    --profile) profile=${2:?--profile needs a cargo profile}; shift 2 ;;
    --secs) secs=${2:?--secs needs a number of seconds}; shift 2 ;;
    --seed) seed=${2:?--seed needs a number}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (give --secs N, --seed S, --netns, --rounds R, --profile P)" >&2; exit 2 ;;
  esac
done
case $secs in ''|*[!0-9]*) echo "--secs $secs is not a number of seconds" >&2; exit 2 ;; esac
case $seed in *[!0-9]*) echo "--seed $seed is not a number" >&2; exit 2 ;; esac
case $rounds in ''|*[!0-9]*) echo "--rounds $rounds is not a number" >&2; exit 2 ;; esac

export UUIDMAP_CHAOS_SECS=$secs UUIDMAP_CHAOS_ROUNDS=$rounds
if [ -n "$seed" ]; then export UUIDMAP_CHAOS_SEED=$seed; else unset UUIDMAP_CHAOS_SEED; fi

test=cluster_chaos::a_group_under_random_faults_loses_no_acknowledged_write_and_stays_linearizable
ignored=()
if [ -n "$netns" ]; then
  if [ "$(id -u)" != 0 ] || ! ip netns list >/dev/null 2>&1; then
    echo "cluster-chaos: SKIPPED: --netns needs root and ip netns (iproute2)" >&2
    exit 77
  fi
  if ! command -v iptables >/dev/null; then
    echo "cluster-chaos: installing iptables (Debian) for the one-way drops" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q iptables >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iptables >&2; }
  fi
  test=netns_chaos::a_group_across_hosts_under_random_faults_loses_no_acknowledged_write_and_stays_linearizable
  ignored=(--ignored)
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
code=0
cargo test --profile "$profile" --test client -- --exact --nocapture "${ignored[@]}" "$test" \
  >"$out" || code=$?
if grep -q 'netns_chaos: SKIPPED' "$out"; then
  grep -o 'netns_chaos: SKIPPED.*' "$out" >&2
  exit 77
fi
# libtest's own lines go to stdout too; the summary may share a line with
# "test ... ".
summary=$(grep -o 'acked=[0-9]* lost=.*failover_max_ms=[0-9]*\( faults=[a-z_:0-9,]*\)\?\( disk_stops=[0-9]*\)\?' "$out" | tail -n 1 || true)
if [ -z "$summary" ]; then
  cat "$out" >&2
  echo "cluster-chaos: the run printed no summary (exit code $code)" >&2
  exit $((code == 0 ? 1 : code))
fi
[ "$code" = 0 ] || cat "$out" >&2
echo "$summary"
exit "$code"
