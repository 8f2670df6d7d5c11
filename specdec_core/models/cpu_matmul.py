"""A faster CPU path for linear layers fed a few tokens at once: every decode step and every verify forward.

Measured on this project's 2-core machine (MKL, float32, 2 threads) with the bundled SmolLM2-135M, a forward
of 1 / 2 / 3 / 4 / 8 new tokens over a 150-token cache took 42 / 67 / 83 / 64 / 66 ms with ``F.linear``.
Two kernel choices cause it:
- one row goes to GEMV, which runs on one core here (the same 42–46 ms with one thread or two);
- 2–3 rows go to a GEMM shape that reads the weights more than once, and a GEMM whose small operand is
  row-major (what a transposed previous result gives) is several times slower again.
Written weight-major, ``W @ colsᵀ`` with ``cols`` contiguous (one row padded with a zero row so that it is a
GEMM), the same forwards take 25–30 / 26–31 / 33–40 / 28–34 / 49–55 ms: the range over several runs,
interleaved with the stock path, on a machine whose neighbours take some of its time. The one-token
baseline gains as much as the verify (speedup ratios do not get easier), and the verify curve becomes
nearly flat up to 4 tokens, as on a GPU.

Some widths are slow in themselves: 3 rows, and 11–15 rows with two threads (a forward of 13–15 tokens
took 88–107 ms against 58 ms for 16). Those are padded with zero rows to the width that is cheaper (3 → 4,
11–15 → 16): a forward of n = 3 / 11 / 12 / 13–15 tokens then took 25 / 58–59 / 58 / 58–60 ms instead of
28 / 64–65 / 70–71 / 88–107 (two threads, two interleaved series of 7 rounds), and 39 instead
of 48 ms for 3 tokens with one thread. ``PAD_ROWS`` holds the table.

With one thread, 5 rows and more are compute-bound: for 5–8 rows the two paths took 61–100 ms (weight-major)
against 72–86 ms (stock) over two runs, and from 9 rows the stock kernel is ahead. So the path takes 1–4
rows always, and up to ``SMALL_ROWS[1]`` rows with two threads or more. Off CPU, in other dtypes and for
prefills the stock path is kept.

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
