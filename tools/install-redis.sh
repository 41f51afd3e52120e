#!/usr/bin/env bash
# Installs redis-server and redis-tools from Debian's packages if
# redis-server is not on PATH (as root, or with sudo). Sourced by the bench
# scripts that run Redis side by side with uuidmap; never fails the caller:
# without Redis, those benches print their own rows only.
#
#   . tools/install-redis.sh
if ! command -v redis-server >/dev/null; then
  echo "== installing redis-server and redis-tools (Debian packages)"
  if [ "$(id -u)" -eq 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null; then
    as_root=(sudo)
  else
    as_root=(false)
  fi
  if ! { "${as_root[@]}" apt-get update -qq &&
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools; }; then
    echo "could not install redis-server (need root or sudo): the bench runs without the Redis figures" >&2
  fi
fi
