"""Helpers for the tools and tests that run servers as child processes: a free loopback port, and a child stopped
politely, then by force."""
from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen, wait_s: float) -> None:
    """Terminate ``proc``, wait ``wait_s`` for it, and kill it if it is still there."""
    proc.terminate()
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(wait_s / 2)
