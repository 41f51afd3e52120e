#!/usr/bin/env bash
# Installs etcd-server and etcd-client (etcd 3.4) from Debian's packages if
# etcd or etcdctl is not on PATH (as root, or with sudo); returns non-zero,
# saying why, when they are still missing. Sourced by `.ci/run`, the
# partition scripts and tools/bench-etcd.sh; the partition tests run it
# themselves when etcd is missing.
#
#   . tools/install-etcd.sh || exit 2
install_etcd() {
  if command -v etcd >/dev/null && command -v etcdctl >/dev/null; then
    return 0
  fi
  . "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh"
  apt_install etcd-server etcd-client || true
  if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
    echo "etcd is missing and could not be installed: apt-get install etcd-server etcd-client" >&2
    return 1
  fi
  # Debian's package starts a system etcd on 2379; ours pick their own ports.
  if command -v systemctl >/dev/null && systemctl is-active --quiet etcd 2>/dev/null; then
    systemctl stop etcd 2>/dev/null || true
  fi
}
install_etcd
