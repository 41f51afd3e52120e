#!/usr/bin/env bash
# Installs redis-server and redis-tools from Debian's packages if
# redis-server is not on PATH (as root, or with sudo). Sourced by the bench
# scripts that run Redis side by side with uuidmap; never fails the caller:
# without Redis, those benches print their own rows only.
#
#   . tools/install-redis.sh
if ! command -v redis-server >/dev/null; then
  . "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh"
  apt_install redis-server redis-tools ||
    echo "could not install redis-server: the bench runs without the Redis figures" >&2
fi
