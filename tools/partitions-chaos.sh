#!/usr/bin/env bash
# The chaos run of partitions over etcd (issue 37): a 3-member etcd and two
# replica groups of three on loopback, one partition moved back and forth
# between the groups under Put, compare-and-set and Get load, while fault
# rounds stop and restart a group's leader, kill the etcd leader (a quorum
# stays), and kill the whole etcd for 0.7 s. Each run checks that no
# acknowledged write was lost, the compare-and-set chain never skipped,
# reads of the hot key never went back, and a cluster scan returned every
# key exactly once; two clients' histories of Puts, compare-and-sets and
# Gets on four keys of the moved partition are linearizable (the testkit's
# checker); and a cluster-wide watch running all along gives each
# key's values in the order they were written, with no delete and no
# repeat (nothing of a move's copy or drop), up to each key's final value.
# Installs etcd from Debian's packages if it is missing.
#
#   tools/partitions-chaos.sh                  # 5 runs of 12 fault rounds
#   tools/partitions-chaos.sh --runs 20        # more runs
#   tools/partitions-chaos.sh --rounds 40      # longer runs
#   tools/partitions-chaos.sh --profile release
#
# It is the ignored test `partition_groups` of the `client` test binary
# (tests/client/partition_groups.rs), with UUIDMAP_CHAOS_ROUNDS. One line
# per run on stdout:
#
#   run=1 moves=M rounds=R acked_keys=K lost=0 cas_chain=C reads=N watched=B lin_ops=L linearizable=yes
#
# (watched: the batches the cluster-wide watch delivered; lin_ops: the
# operations of the checked histories.)
#
# Exits non-zero at the first run that fails, after printing its output.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=5
rounds=12
profile=checked
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=${2:?--runs needs a number}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --profile) profile=${2:?--profile needs a cargo profile}; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (give --runs N, --rounds R, --profile P)" >&2; exit 2 ;;
  esac
done
case $runs in ''|*[!0-9]*) echo "--runs $runs is not a number" >&2; exit 2 ;; esac
case $rounds in ''|*[!0-9]*) echo "--rounds $rounds is not a number" >&2; exit 2 ;; esac

command -v etcd >/dev/null || bash tools/install-etcd.sh >&2
export UUIDMAP_CHAOS_ROUNDS=$rounds
test=partition_groups::moves_under_load_with_leaders_and_etcd_stopped_lose_nothing
cargo test --profile "$profile" --test client --no-run >&2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for run in $(seq 1 "$runs"); do
  code=0
  cargo test --profile "$profile" --test client -- --exact --nocapture --ignored "$test" \
    >"$out" 2>&1 || code=$?
  summary=$(grep -o 'moves=[0-9]* rounds=.*reads=[0-9]*' "$out" | tail -n 1 || true)
  if [ "$code" != 0 ] || [ -z "$summary" ] || ! grep -q 'test result: ok. 1 passed' "$out"; then
    cat "$out" >&2
    echo "partitions-chaos: run $run failed (exit code $code)" >&2
    exit $((code == 0 ? 1 : code))
  fi
  watched=$(grep -o 'watched=[0-9]*' "$out" | tail -n 1 || true)
  lin=$(grep -o 'lin_ops=[0-9]* linearizable=yes' "$out" | tail -n 1 || true)
  echo "run=$run $summary $watched $lin"
done
