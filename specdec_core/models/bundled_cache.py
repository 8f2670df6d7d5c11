"""The bundled model, converted once per machine.

Reading the bundled GGUF file costs about 30 s on a 2-core CPU: transformers parses the file three times
(config, tokenizer, weights) and dequantizes every tensor. The same float32 weights load from safetensors
in under a second. So the first load writes what it read, the dequantized weights (``model.safetensors``,
about 540 MB), the config and the tokenizer, into a folder named by the GGUF file's SHA-256 and the
transformers version that converted it; later loads, in this process or any other (the app, the CLI, a
test's subprocess), read that folder instead. A folder that fails to load is converted again; a cache that
cannot be written (a read-only home, a full disk) only costs the slow path; of two processes converting at
once, the first to finish writes the folder. Older folders, and any a killed writer left, are removed when
a new one is written, so at most one stays.

Where: ``$SPECDEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/speculative-decoding-explorer``, else
``~/.cache/speculative-decoding-explorer``. The folder holds safetensors weights only: nothing in it is
executed (no pickles, no remote code).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

PREFIX = "smollm2-135m-instruct-"
WRITING = ".writing-"
Loaded = tuple[torch.nn.Module, Any]


def cache_root() -> str:
    """The folder the converted model is kept in (see the module docstring)."""
    if os.environ.get("SPECDEC_CACHE_DIR"):
        return os.environ["SPECDEC_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "speculative-decoding-explorer")


def entry_name(gguf_path: str) -> str:
    """The cache folder's name: the GGUF file's content and the converting transformers version."""
    import transformers
    h = hashlib.sha256()
    with open(gguf_path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return f"{PREFIX}{h.hexdigest()[:16]}-transformers-{transformers.__version__}"


def load_converted(gguf_path: str, convert: Callable[[], Loaded]) -> Loaded:
    """(model in float32 on CPU, tokenizer): from the cache when it holds this GGUF file's conversion, else
    ``convert()`` (the slow GGUF read), whose result is then written to the cache."""
    folder = os.path.join(cache_root(), entry_name(gguf_path))
    if os.path.isdir(folder):
        try:
            return _read(folder, name_or_path=os.path.dirname(gguf_path))
        except Exception:  # noqa: BLE001 - a damaged entry is converted again and replaced
            shutil.rmtree(folder, ignore_errors=True)
    model, tok = convert()
    try:
        _write(folder, model, tok)
    except Exception:  # noqa: BLE001 - best effort: a read-only or full disk, or another process first
        pass
    return model, tok


def _read(folder: str, name_or_path: str) -> Loaded:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, use_safetensors=True,
                                                 trust_remote_code=False)
    model.config._name_or_path = name_or_path  # the same identity as a GGUF load (calibration keys on it)
    return model.eval(), tok


def _write(folder: str, model: torch.nn.Module, tok: Any) -> None:
    """Write into a fresh sibling folder, then rename it into place: a reader never sees half an entry, and
    of two processes converting at once the first rename wins."""
    from safetensors.torch import save_model
    root = os.path.dirname(folder)
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=WRITING, dir=root)
    try:
        config = type(model.config).from_dict(
            {k: v for k, v in model.config.to_dict().items() if k != "quantization_config"})
        config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        save_model(model, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})  # tied head kept once
        tok.save_pretrained(tmp)
        os.rename(tmp, folder)  # fails if another process renamed its copy into place first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for name in os.listdir(root):  # older conversions, and what a killed writer left (an hour old: not live)
        path = os.path.join(root, name)
        if (name.startswith(PREFIX) and name != os.path.basename(folder)
                or name.startswith(WRITING) and time.time() - os.path.getmtime(path) > 3600):
            shutil.rmtree(path, ignore_errors=True)
