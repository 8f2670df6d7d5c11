"""A throw-away ``redis-server`` for the tests and the class load test: Debian's binary (``apt-get install
redis-server``; valkey's ``valkey-server`` where that is what the system has) started on a free loopback port with
no persistence, in a temporary folder, and stopped on exit.

    with redis_server() as server:       # server.url: "redis://127.0.0.1:PORT/0"; server.pid
        ...
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tools.procs import free_port, stop

BINARIES = ("redis-server", "valkey-server")


def server_binary() -> str | None:
    """The path of a Redis server binary here, or None."""
    for name in BINARIES:
        found = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None)
        if found:
            return found
    return None


def redis_missing() -> str | None:
    """Why no Redis server can be started here, or None when one can."""
    if server_binary() is None:
        return ("redis-server is not installed (apt-get install redis-server; .ci/run installs it, "
                "scripts/install-redis.sh): the Redis store's tests are skipped")
    return None


@dataclass(frozen=True)
class RedisServer:
    url: str
    pid: int


@contextmanager
def redis_server(start_timeout_s: float = 10.0) -> Iterator[RedisServer]:
    """A redis-server on 127.0.0.1 and a free port (no disk persistence): its URL and process id. Stopped (and its
    folder removed) on exit. RuntimeError when none can be started."""
    binary = server_binary()
    if binary is None:
        raise RuntimeError(redis_missing() or "no redis-server")
    folder = tempfile.mkdtemp(prefix="specdec-redis-")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", folder, "--protected-mode", "yes", "--loglevel", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {proc.stderr.read().decode(errors='replace')[-500:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not answer on port {port} within {start_timeout_s:.0f} s")
            time.sleep(0.05)
        yield RedisServer(f"redis://127.0.0.1:{port}/0", proc.pid)
    finally:
        stop(proc, 10)
        if proc.stderr is not None:
            proc.stderr.close()
        shutil.rmtree(folder, ignore_errors=True)


__all__ = ["RedisServer", "redis_server", "redis_missing", "server_binary"]
