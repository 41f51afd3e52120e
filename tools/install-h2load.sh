#!/usr/bin/env bash
# Installs h2load (Debian's nghttp2-client) if it is not on PATH (as root,
# or with sudo), and fails the caller if it still is not: every script that
# sources this one measures with h2load.
#
#   . tools/install-h2load.sh
if ! command -v h2load >/dev/null; then
  . "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh"
  apt_install nghttp2-client || true
  command -v h2load >/dev/null || {
    echo "h2load is missing and could not be installed: apt-get install nghttp2-client" >&2
    exit 2
  }
fi
