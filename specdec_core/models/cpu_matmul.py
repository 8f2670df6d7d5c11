"""A faster CPU path for linear layers fed a few tokens at once: every decode step and every verify forward.

For 1-16 rows ``F.linear`` picks poor kernels on this project's CPU (MKL, float32): a GEMV on one core for one
row, GEMM shapes that read the weights more than once for 2-3 rows. Written weight-major, ``W @ colsᵀ`` with
``cols`` contiguous (one row padded to two, so that it is a GEMM), forwards of 1-8 tokens take up to 60 % less
time (the one-token baseline gains as much as the verify) and the verify curve is nearly flat up to 4 tokens,
as on a GPU. Widths slow in themselves are padded with zero rows to a cheaper one (``PAD_ROWS``); with one
thread only 1-4 rows take this path (from 5 rows the product is compute-bound and the stock kernel as fast),
with more threads up to ``SMALL_ROWS[1]``. Off CPU, in other dtypes and for prefills the stock path is kept.
The timings behind these choices: docs/benchmarks.md, "The CPU matrix-product path".

It is the same matrix product in another summation order: logits agree with the stock path to ~1e-4
(float32 rounding, the size of difference there already was between a one-token and a many-token forward).

``use_small_batch_matmul(model)`` switches every plain ``nn.Linear`` of a model in place (the class only:
parameters, state dict and tied weights are untouched). The model loaders apply it, so the baseline,
the speculative run, the drafts copied from the target and transformers' own generation all use it.
"""
from __future__ import annotations

import functools

import torch
from torch import nn

SMALL_ROWS = (1, 16)     # inclusive: row counts where weight-major beats F.linear with >= 2 threads (measured)
ONE_THREAD_MAX_ROWS = 4  # ... and with one thread
PAD_ROWS = {1: 2, 3: 4, **{n: 16 for n in range(11, 16)}}   # rows -> the cheaper width they are padded to:
                         # 1 row would be a GEMV on one core; 3 and 11-15 rows are slow widths (measured)


def small_batch_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, computed weight-major when x holds a few rows of float32 on CPU."""
    width = x.shape[-1]
    rows = x.numel() // width if width else 0
    if (x.device.type != "cpu" or x.dtype != torch.float32 or weight.dtype != torch.float32
            or not SMALL_ROWS[0] <= rows <= max_rows()):
        return nn.functional.linear(x, weight, bias)
    cols = x.reshape(rows, width).contiguous()
    width_used = PAD_ROWS.get(rows, rows)
    if width_used > rows:      # zero rows: their outputs are computed and dropped
        cols = torch.cat([cols, cols.new_zeros(width_used - rows, width)])
    y = (weight @ cols.t()).t()[:rows].contiguous()   # cols.t() is column-major: the layout GEMM streams fast
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU has native bf16 arithmetic (AVX-512 BF16 or AMX, as oneDNN reports it; False where this
    torch build cannot say: the check is a private torch operator)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def max_rows() -> int:
    """The most rows the weight-major path takes with the current intra-op thread count."""
    return SMALL_ROWS[1] if torch.get_num_threads() > 1 else min(SMALL_ROWS[1], ONE_THREAD_MAX_ROWS)


class SmallBatchLinear(nn.Linear):
    """``nn.Linear`` whose forward takes the weight-major path for a few rows (see the module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return small_batch_linear(x, self.weight, self.bias)


def use_small_batch_matmul(model: nn.Module) -> int:
    """Switch every plain ``nn.Linear`` in ``model`` to :class:`SmallBatchLinear`, in place; returns how many.
    Subclasses of ``nn.Linear`` (quantized or custom layers) are left alone."""
    n = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = SmallBatchLinear
            n += 1
    return n
