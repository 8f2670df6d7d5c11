"""ZeroGPU support: on Hugging Face Spaces with ZeroGPU hardware, GPU-using handlers must be wrapped
with ``spaces.GPU``. Elsewhere the ``spaces`` package is absent (or its decorator is a no-op), so
``gpu_task`` returns the handler unchanged. Looked up when the app is built, never at import."""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)

GPU_SECONDS = 120   # the longest a Live run may hold a ZeroGPU slice


def gpu_task(fn: F, duration: int = GPU_SECONDS) -> F:
    """``spaces.GPU(duration=...)(fn)`` when the ``spaces`` package is importable, else ``fn``."""
    if importlib.util.find_spec("spaces") is None:
        return fn
    import spaces
    return spaces.GPU(duration=duration)(fn)


def enable_zerogpu() -> bool:
    """Import ``spaces`` (when installed) before any model touches CUDA, as ZeroGPU requires. Call once at
    start-up, before loading models. Returns whether it was imported."""
    if importlib.util.find_spec("spaces") is None:
        return False
    import spaces  # noqa: F401
    return True
