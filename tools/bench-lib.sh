#!/usr/bin/env bash
# Helpers shared by the replica-group benchmarks (tools/bench-cluster.sh,
# tools/bench-etcd.sh); sourced from the repository's root (`root`).
#
#   . tools/bench-lib.sh
#   bench_setup NAME

# bench_setup NAME: the uuidmap binary in `bin` (UUIDMAP_BIN, or
# target/release/uuidmap, built), an empty temporary directory in `work`
# (under TMPDIR), and `pids`: the processes to stop at exit, when `work`
# is removed.
bench_setup() {
  if [ -z "${UUIDMAP_BIN:-}" ]; then
    cargo build --release --bin uuidmap >&2
    bin=$root/target/release/uuidmap
  else
    bin=$UUIDMAP_BIN
  fi
  work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  pids=()
  trap bench_cleanup EXIT
}

bench_cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}

forget_pids() { # pids...: no longer ours to stop at exit (waited for: a pid may be reused)
  local p keep=()
  for p in "${pids[@]}"; do [[ " $* " == *" $p "* ]] || keep+=("$p"); done
  pids=("${keep[@]}")
}
stop_pids() { # pids...: TERM them, wait, forget them
  local p
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "$@"; do wait "$p" 2>/dev/null || true; done
  forget_pids "$@"
}

free_base() { # a base port with the next 30 free (best effort)
  python3 -c '
import socket, random
while True:
    base = random.randrange(20000, 60000, 10)
    try:
        socks = []
        for p in range(base, base + 30):
            s = socket.socket(); s.bind(("127.0.0.1", p)); socks.append(s)
        print(base); break
    except OSError:
        pass
    finally:
        for s in socks: s.close()'
}

median_range() { sort -g | awk '{a[NR]=$1} END {printf "%.0f (%.0f-%.0f)", a[int((NR+1)/2)], a[1], a[NR]}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

wait_writable() { # servers: until a put is taken (15 s)
  local i
  for i in $(seq 1 300); do
    if "$bin" put --server "$1" --timeout 1 ffffffff-0000-4000-8000-000000000001 \
      ffffffff-0000-4000-8000-000000000002 >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.05
  done
  echo "no write taken by $1 within 15 s" >&2
  return 1
}

applied_lsn() { # server -> its applied LSN (uuidmap stats)
  "$bin" stats --server "$1" | awk '$1 == "applied_lsn" {print $2}'
}

leader_of() { # servers -> the leader's client URL (uuidmap cluster status)
  "$bin" cluster status --server "$1" | awk '$1 == "leader_url" {print $2}'
}
