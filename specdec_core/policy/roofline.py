"""The hardware what-if: a recorded run priced on other devices with a roofline forward-time model.

One forward of a model over n new tokens, on a device profile (``devices.json``):

    t(n) = max(bytes read ÷ memory bandwidth, 2 · weights · n ÷ peak FLOP/s) + overhead
    bytes read = weights × bytes per weight (the profile's dtype);   overhead = fixed + per layer × layers

``weights`` counts the parameters a forward multiplies with: every matrix once, the output head at the rows it
computes (a draft vocabulary, for the shipped drafts), the input embedding not at all (a forward gathers a few
of its rows) unless it is the head too. The target's verify curve t_target(1..n), the draft's one-token
forward t_draft(1) and both prefills come from this formula; the run's own acceptance pattern and K decisions
(``costmodel.predicted_split``) then give the predicted speedup on that device. Prompt lookup's lookup keeps the
time measured here (host work). Not modelled: attention over the context (its FLOPs and the KV cache read,
a few per cent for a 135M model at a few hundred tokens), kernel efficiency below peak, int8 weights of a draft
(priced in the profile's dtype), the host's speed on a GPU machine. docs/cost-model.md states the error on
this CPU.

``profiles()`` reads the profiles with the source of every figure; ``model_shape`` reads a model's size off
the module, and ``shape_meta`` writes both models' into a run's config so that a recorded trace can be priced.
"""
from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..trace import Trace
from .costmodel import Costs, predicted_split

DEVICES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "devices.json")
BYTES_PER_WEIGHT = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1}


@dataclass(frozen=True)
class Device:
    """A device profile: peak memory bandwidth and arithmetic, and what a forward costs beyond them."""
    id: str
    label: str
    dtype: str                          # what the app runs in there (float32 on a CPU, bf16/fp16 on a GPU)
    bandwidth_gb_s: float               # peak memory bandwidth, GB/s (10^9 bytes)
    peak_tflops: float                  # peak dense arithmetic in ``dtype``, TFLOP/s (10^12)
    overhead_ms: float = 0.0            # per forward, whatever the model (sampling, synchronisation)
    overhead_ms_per_layer: float = 0.0  # per forward and decoder layer (kernel launches, framework dispatch)
    sources: dict = field(default_factory=dict)   # figure -> where it comes from
    matches: str = ""                   # a GPU whose name contains this is this profile (its calibration replaces it)

    def __post_init__(self) -> None:
        if self.dtype not in BYTES_PER_WEIGHT:
            raise ValueError(f"{self.id}: unknown dtype {self.dtype!r}")
        if not (self.bandwidth_gb_s > 0 and self.peak_tflops > 0):
            raise ValueError(f"{self.id}: bandwidth and peak must be positive")
        if not (self.overhead_ms >= 0 and self.overhead_ms_per_layer >= 0):
            raise ValueError(f"{self.id}: overheads must be >= 0")


@dataclass(frozen=True)
class ModelShape:
    weights: int        # parameters a forward multiplies with (see the module docstring)
    layers: int         # decoder layers (the per-layer overhead counts these)


def forward_ms(device: Device, shape: ModelShape, n: int) -> float:
    """The roofline time of one forward over n new tokens, in ms."""
    if n < 1:
        raise ValueError(f"a forward feeds at least one token, got n = {n}")
    memory = shape.weights * BYTES_PER_WEIGHT[device.dtype] / (device.bandwidth_gb_s * 1e9) * 1e3
    compute = 2.0 * shape.weights * n / (device.peak_tflops * 1e12) * 1e3
    return max(memory, compute) + device.overhead_ms + device.overhead_ms_per_layer * shape.layers


def device_costs(device: Device, target: ModelShape, draft: ModelShape | None, n_max: int, prompt_len: int,
                 lookup_ms: float = 0.0) -> Costs:
    """The cost model's inputs on ``device``: the verify curve t_target(1..n_max), one draft forward (or the
    lookup's measured time for prompt lookup, ``draft`` None), the prefills of the prompt (both models'), no
    host overhead beyond the profile's per-forward one."""
    verify = tuple(forward_ms(device, target, n) for n in range(1, max(2, n_max) + 1))
    fill = forward_ms(device, target, max(1, prompt_len))
    if draft is None:
        return Costs(verify, lookup_ms, False, 0.0, fill, fill)
    return Costs(verify, forward_ms(device, draft, 1), True, 0.0, fill + forward_ms(device, draft, max(1, prompt_len)),
                 fill)


def priced_speedup(trace: Trace, costs: Costs) -> float | None:
    """The run's predicted speedup under ``costs``: its own K per iteration and per-position acceptance
    (``costmodel.predicted_split``) against target-only generation of as many tokens."""
    if not trace.iterations:
        return None
    spec = predicted_split(trace, costs)
    n = trace.stats.new_tokens
    base_ms = costs.baseline_prefill_ms + n * costs.baseline_per_token
    if spec.total <= 0 or base_ms <= 0:
        return None
    return (spec.tokens / spec.total) / (n / base_ms)


# --- a run's models ---------------------------------------------------------------------------------------

def _weight(model: Any, getter: str, attr: str) -> Any:
    fn = getattr(model, getter, None)
    mod = fn() if callable(fn) else getattr(model, attr, None)
    return getattr(mod, "weight", None)


def model_shape(model: Any) -> ModelShape:
    """The size of a torch causal LM (or a shipped draft) as the roofline counts it."""
    params = {id(p): p for p in model.parameters()}
    weights = sum(p.numel() for p in params.values())
    emb = _weight(model, "get_input_embeddings", "embed_tokens")
    head = _weight(model, "get_output_embeddings", "lm_head")
    if emb is not None and emb is not head and id(emb) in params:
        weights -= emb.numel()                                   # gathered, not multiplied
    vocab = getattr(model, "draft_vocab", None)
    if vocab is not None and head is not None and id(head) in params:
        weights += (len(vocab) - head.shape[0]) * head.shape[1]   # the head's rows a draft computes
    layers = int(getattr(getattr(model, "config", None), "num_hidden_layers", 1) or 1)
    return ModelShape(int(weights), layers)


def shape_meta(target: Any, drafter: Any) -> dict:
    """{"target_weights", "target_layers"[, "draft_weights", "draft_layers"]} for a run's config."""
    t = model_shape(target)
    out = {"target_weights": t.weights, "target_layers": t.layers}
    draft = getattr(drafter, "model", None) or getattr(drafter, "draft", None)
    if draft is not None and hasattr(draft, "parameters"):
        d = model_shape(draft)
        out.update(draft_weights=d.weights, draft_layers=d.layers)
    return out


def trace_shapes(trace: Trace) -> tuple[ModelShape | None, ModelShape | None]:
    """(target, draft) sizes recorded in the run's config (None where absent: older traces; prompt lookup
    has no draft model)."""
    def shape(prefix: str) -> ModelShape | None:
        w, l = trace.config.get(f"{prefix}_weights"), trace.config.get(f"{prefix}_layers")
        ok = all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (w, l))
        return ModelShape(w, l) if ok else None
    return shape("target"), shape("draft")


# --- the profiles and the what-if table -------------------------------------------------------------------

@functools.cache
def profiles(path: str = DEVICES_FILE) -> tuple[Device, ...]:
    """The device profiles of ``devices.json`` (read once)."""
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    return tuple(Device(**{k: v for k, v in d.items() if k != "notes"}) for d in raw["devices"])


def here_id(device: str, gpu: str = "") -> str:
    """The profile id of the run's device when it is a GPU a profile ``matches`` by name, else the GPU's name,
    else the device ("cpu")."""
    if device.startswith("cuda") and gpu:
        return next((d.id for d in profiles() if d.matches and d.matches.lower() in gpu.lower()), gpu)
    return device or "this device"


def gpu_name() -> str:
    """This machine's first GPU's name ("" without one)."""
    import torch
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""


@dataclass(frozen=True)
class WhatIf:
    device: str
    label: str
    speedup: float | None
    t1_ms: float | None          # the target's one-token forward there
    draft_ms: float | None       # one draft forward there (prompt lookup: the lookup)
    measured: bool               # priced with this device's own measured costs rather than a profile
    note: str = ""


def what_if(trace: Trace, devices: Sequence[Device] | None = None, here: str = "",
            measured_costs: Costs | None = None) -> list[WhatIf]:
    """The run priced on each profile; first, when ``measured_costs`` is given (this device's calibration and
    the run's own costs), the run on this device as measured, labelled ``here``; a profile whose id is ``here``
    is then left out (its calibration replaces it)."""
    rows = []
    devices = list(devices if devices is not None else profiles())
    if measured_costs is not None:
        named = next((d.label for d in devices if d.id == here), here or "as calibrated")
        rows.append(WhatIf(here or "this device", f"this device ({named}), measured costs",
                           priced_speedup(trace, measured_costs), measured_costs.t1, measured_costs.draft_ms, True))
    target, draft = trace_shapes(trace)
    model_draft = trace.stats.draft_forwards > 0
    lookups = [ms for it in trace.iterations for ms in it.draft_ms]
    for dev in devices:
        if measured_costs is not None and dev.id == here:
            continue
        if target is None or (model_draft and draft is None):
            rows.append(WhatIf(dev.id, dev.label, None, None, None, False,
                               "the trace does not record its models' sizes"))
            continue
        n_max = max((len(it.drafts) for it in trace.iterations), default=0) + 1
        costs = device_costs(dev, target, draft if model_draft else None, n_max, len(trace.prompt_ids),
                             sum(lookups) / len(lookups) if lookups and not model_draft else 0.0)
        rows.append(WhatIf(dev.id, dev.label, priced_speedup(trace, costs), costs.t1, costs.draft_ms, False))
    return rows
