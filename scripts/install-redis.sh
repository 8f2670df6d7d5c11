#!/usr/bin/env bash
# Debian's redis-server for the tests of the classes' shared room store (RedisRoomStore) and the class load test's
# --replicas mode. Needs root (or sudo); without it those tests are skipped with a message saying so.
set -eu
if command -v redis-server >/dev/null || command -v valkey-server >/dev/null || [ -x /usr/bin/redis-server ]; then exit 0; fi
if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else
  echo "install-redis: not root and no sudo; the Redis store's tests will be skipped" >&2; exit 0; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Debian's package starts a system service where one can run; the tests start their own on a free port
$SUDO apt-get install -y -qq redis-server >/dev/null || $SUDO apt-get install -y -qq valkey-server >/dev/null
