#!/usr/bin/env bash
# Debian's chromium for the browser tests and `make screenshots`. Needs root (or sudo); without it the browser
# tests are skipped with a message saying so.
set -eu
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else
  echo "install-chromium: not root and no sudo; the browser tests will be skipped" >&2; exit 0; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium >/dev/null
