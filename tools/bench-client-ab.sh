#!/usr/bin/env bash
# Two builds of uuidmap side by side: each build's own `uuidmap bench --op
# get --tasks 64` against its own server (--fsync never, N entries), in
# rounds that alternate which goes first. Prints each build's calls/s.
#
#   ROUNDS=3 N=1000000 tools/bench-client-ab.sh OLD_BIN NEW_BIN
set -euo pipefail
A=$1; B=$2; rounds=${ROUNDS:-3}; n=${N:-1000000}
work=$(mktemp -d)
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
declare -A got
for bin in A B; do
  b=${!bin}; port=$(free_port)
  "$b" serve --listen 127.0.0.1:$port --data-dir $work/$bin --fsync never --metrics-listen off >$work/$bin.log 2>&1 &
  eval "pid_$bin=$!"; eval "port_$bin=$port"
done
sleep 1
for bin in A B; do b=${!bin}; p=port_$bin; "$b" bench --server http://127.0.0.1:${!p} --op get --tasks 1 --secs 1 --entries $n --load $n --json >/dev/null || true; done
for ((r=0;r<rounds;r++)); do
  if ((r%2==0)); then order="A B"; else order="B A"; fi
  for bin in $order; do
    b=${!bin}; p=port_$bin
    v=$("$b" bench --server http://127.0.0.1:${!p} --op get --tasks 64 --secs 5 --entries $n --json | tail -1 | python3 -c "import json,sys;print(json.loads(sys.stdin.read())['calls_per_s'])")
    got[$bin]="${got[$bin]:-} $v"; echo "round $r $bin $v" >&2
  done
done
kill $pid_A $pid_B; wait 2>/dev/null || true; rm -rf $work
for bin in A B; do echo "$bin: $(printf '%s\n' ${got[$bin]} | sort -g | tr '\n' ' ')"; done
