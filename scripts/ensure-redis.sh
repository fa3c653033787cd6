#!/usr/bin/env bash
# The suite shares throttle windows through a real Redis: make sure redis-server exists.
# On a machine without it, install Debian's package (needs root and apt-get).
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing redis-server (Debian package) for the throttle probes..."
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  exit 0
fi
echo "redis-server is missing: install it (e.g. 'apt-get install redis-server') and re-run" >&2
exit 1
