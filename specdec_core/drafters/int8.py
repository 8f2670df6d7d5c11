"""Weight-only int8 matrix products for a shipped draft's decoding on CPU.

A draft step feeds one token (a few in a catch-up) through every weight the draft has: the feature draft's
projection and decoder layer (16.8 MB in float32) and its head over 16,384 vocabulary rows (37.7 MB in float32).
On a CPU such a step is memory-bound, and after each verify forward the target's weights have pushed the
draft's out of the caches. Kept as int8, one scale per output row (symmetric: scale = row max ÷ 127), the
same step reads a quarter of the bytes, and torch's weight-only int8 kernel (``torch._weight_int8pack_mm``,
bf16 activations) computes it: a feature-draft step takes about a third of the time.

q changes a little, which keeps the sampling exact (the rule holds for any q), and the draft is as good: its
measured agreement and acceptance moved by less than 0.004. Figures: docs/trained-drafts.md, "Int8 decoding".

Only on a CPU with native bf16 arithmetic (elsewhere bf16 activations would be emulated) and only where no
gradient is wanted: the loaders turn it on (``use_int8_decoding``), training never sees it.
"""
from __future__ import annotations

import torch
from torch import nn

from ..models.cpu_matmul import SmallBatchLinear, cpu_has_native_bf16


HAS_KERNEL = hasattr(torch, "_weight_int8pack_mm")


def int8_ready(weight: torch.Tensor) -> bool:
    """Whether ``weight`` (out, in) can take the int8 path: a float32 matrix on a CPU with native bf16, in a
    torch that has the kernel."""
    return (HAS_KERNEL and weight.device.type == "cpu" and weight.dtype == torch.float32 and weight.dim() == 2
            and cpu_has_native_bf16())


def decoding_precision(weight: torch.Tensor) -> str:
    """How a loaded draft whose weights are like ``weight`` multiplies, in words (for cards and reports)."""
    return "int8 weights, one scale per row; bf16 activations" if int8_ready(weight) else f"{weight.dtype} weights"


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, in) float → (int8 rows, bf16 scale per row): weight ≈ rows × scale[:, None]."""
    w = weight.detach().float()
    # the scale as stored (bf16), rounded so that it never falls below row max ÷ 127: no row value is clipped
    scale = (w.abs().amax(dim=1).clamp_min(1e-12) / 127.0 * (1 + 2 ** -8)).to(torch.bfloat16)
    rows = torch.round(w / scale.float()[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
    return rows, scale


def int8_linear(x: torch.Tensor, packed: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``x @ weightᵀ`` with the int8 ``packed = quantize_rows(weight)``, in x's dtype (the product in bf16)."""
    rows, scale = packed
    y = torch._weight_int8pack_mm(x.reshape(-1, x.shape[-1]).to(torch.bfloat16).contiguous(), rows, scale)
    return y.to(x.dtype).reshape(*x.shape[:-1], rows.shape[0])


class Int8Cache:
    """An int8 copy of one weight, made on first use and again for another tensor (a reload, a move) or after an
    in-place change."""

    def __init__(self) -> None:
        self._source: torch.Tensor | None = None
        self._version = -1
        self._packed: tuple[torch.Tensor, torch.Tensor] | None = None

    def get(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        version = -1 if weight.is_inference() else weight._version   # inference tensors keep no version
        if self._packed is None or weight is not self._source or version != self._version:
            self._packed, self._source, self._version = quantize_rows(weight), weight, version
        return self._packed


def wants_grad(*tensors: torch.Tensor) -> bool:
    """Whether autograd would record a product of these tensors here."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


class Int8DecodeLinear(SmallBatchLinear):
    """A linear layer that multiplies by its int8 copy where it can (see ``int8_ready``) and nothing asks for a
    gradient; elsewhere (a GPU, float16, training) it is the plain ``SmallBatchLinear``. Its parameters and
    state dict are the float ones, untouched; ``use_int8_decoding`` gives it its ``int8`` cache."""

    int8: Int8Cache

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bias is None and int8_ready(self.weight) and not wants_grad(x, self.weight):
            return int8_linear(x, self.int8.get(self.weight))
        return super().forward(x)


def use_int8_decoding(model: nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Switch the plain linear layers of ``model`` (``nn.Linear`` or ``SmallBatchLinear``) to
    :class:`Int8DecodeLinear`, in place, except those under a child named in ``skip`` (modules shared with the
    target, whose class must not change); returns how many."""
    n = 0
    for name, module in model.named_modules():
        if name.split(".")[0] in skip or type(module) not in (nn.Linear, SmallBatchLinear):
            continue
        module.__class__ = Int8DecodeLinear
        module.int8 = Int8Cache()
        n += 1
    return n
