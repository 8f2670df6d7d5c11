"""Honest clocks: synchronize the device before reading the time."""
from __future__ import annotations

import time

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def now_ms(device: torch.device) -> float:
    """Milliseconds on a monotonic clock, after all queued device work has finished."""
    sync(device)
    return time.perf_counter() * 1000.0
