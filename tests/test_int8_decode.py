"""Weight-only int8 for a loaded draft's decoding: the quantisation's error bound, the product against float32,
where the int8 path is taken and where the float one is, and the loaders' use of it."""
import pytest
import torch
from torch import nn

from specdec_core.drafters import int8 as int8_decode
from specdec_core.models.cpu_matmul import SmallBatchLinear
from specdec_core.drafters.int8 import Int8DecodeLinear, int8_linear, int8_ready, quantize_rows, use_int8_decoding

NATIVE = int8_ready(torch.zeros(2, 2))
needs_native = pytest.mark.skipif(not NATIVE, reason="this CPU has no native bf16: the int8 path is off here")


def test_quantize_rows_within_half_a_step():
    w = torch.randn(48, 40, generator=torch.Generator().manual_seed(0))
    w[3, 7] = 9.0                                            # an outlier widens only its own row's step
    rows, scale = quantize_rows(w)
    assert rows.dtype == torch.int8 and scale.dtype == torch.bfloat16 and rows.shape == w.shape
    step = scale.float()[:, None]
    assert ((rows.float() * step - w).abs() <= step * 0.51 + 1e-6).all()
    assert scale[3] > 4 * scale[4]


@needs_native
@pytest.mark.parametrize("rows", [1, 3, 17])
def test_int8_product_close_to_float32(rows):
    g = torch.Generator().manual_seed(1)
    w, x = torch.randn(96, 64, generator=g) * 0.1, torch.randn(2, rows, 64, generator=g)
    ref = x @ w.t()
    got = int8_linear(x, quantize_rows(w))
    assert got.shape == ref.shape and got.dtype == torch.float32
    assert (got - ref).abs().max() < 0.02 * ref.abs().max()
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() > 0.9


@needs_native
def test_linear_uses_int8_without_grad_and_follows_weight_changes():
    lin = nn.Linear(64, 32, bias=False)
    use_int8_decoding(nn.Sequential(lin))
    assert type(lin) is Int8DecodeLinear
    x = torch.randn(1, 64)
    exact = x @ lin.weight.t()
    with torch.no_grad():
        approx = lin(x)
    assert not torch.equal(approx, exact) and torch.allclose(approx, exact, atol=0.05)
    assert torch.equal(lin(x), SmallBatchLinear.forward(lin, x))        # a gradient wanted: the float path
    with torch.no_grad():
        lin.weight.mul_(-1)                                              # an in-place change: re-quantised
        assert torch.allclose(lin(x), -approx, atol=1e-3)


def test_float_path_where_the_cpu_has_no_native_bf16(monkeypatch):
    monkeypatch.setattr(int8_decode, "cpu_has_native_bf16", lambda: False)
    lin = nn.Linear(16, 8, bias=False)
    use_int8_decoding(nn.Sequential(lin))
    x = torch.randn(2, 16)
    with torch.no_grad():
        assert torch.allclose(lin(x), x @ lin.weight.t(), atol=1e-6)
    assert not int8_ready(lin.weight)


def test_use_int8_decoding_skips_shared_modules_and_keeps_the_state():
    model = nn.Module()
    model.own = nn.Linear(8, 8, bias=False)
    model.lm_head = nn.Linear(8, 20, bias=False)
    model.block = nn.Sequential(nn.Linear(8, 8, bias=False), nn.ReLU())
    keys = set(model.state_dict())
    assert use_int8_decoding(model, skip=("lm_head",)) == 2
    assert type(model.lm_head) is nn.Linear and type(model.block[0]) is Int8DecodeLinear
    assert set(model.state_dict()) == keys
