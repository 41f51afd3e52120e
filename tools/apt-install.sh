#!/usr/bin/env bash
# apt_install PACKAGE...: installs Debian packages as root, or with sudo;
# returns non-zero (and says why) when neither is possible or apt fails.
# Sourced by tools/install-*.sh.
#
#   . tools/apt-install.sh && apt_install nghttp2-client
apt_install() {
  local as_root
  if [ "$(id -u)" -eq 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null; then
    as_root=(sudo)
  else
    echo "cannot install $* (Debian packages): need root or sudo" >&2
    return 1
  fi
  echo "== installing $* (Debian packages)"
  "${as_root[@]}" apt-get update -qq &&
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}
