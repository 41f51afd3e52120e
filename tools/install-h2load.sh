#!/usr/bin/env bash
# Installs h2load (Debian's nghttp2-client) if it is not on PATH (as root,
# or with sudo), and fails the caller if it still is not: every script that
# sources this one measures with h2load.
#
#   . tools/install-h2load.sh
if ! command -v h2load >/dev/null; then
  echo "== installing h2load (Debian package nghttp2-client)"
  if [ "$(id -u)" -eq 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null; then
    as_root=(sudo)
  else
    as_root=(false)
  fi
  "${as_root[@]}" apt-get update -qq &&
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nghttp2-client ||
    true
  command -v h2load >/dev/null || {
    echo "h2load is missing and could not be installed (need root or sudo): apt-get install nghttp2-client" >&2
    exit 2
  }
fi
