"""The weight-major CPU path for few-token linear layers: same values as F.linear, only where it applies,
and the loaders switch the bundled model to it without touching its weights."""
import pytest
import torch

from conftest import make_tiny_lm
from specdec_core.cpu_matmul import SMALL_ROWS, SmallBatchLinear, small_batch_linear, use_small_batch_matmul


@pytest.mark.parametrize("shape", [(1, 1, 24), (1, 2, 24), (2, 3, 24), (1, 8, 24), (1, 9, 24), (5, 24), (1, 0, 24)])
@pytest.mark.parametrize("bias", [False, True])
def test_same_values_as_linear(shape, bias):
    torch.manual_seed(0)
    w, b = torch.randn(40, 24), torch.randn(40) if bias else None
    x = torch.randn(*shape)
    got, want = small_batch_linear(x, w, b), torch.nn.functional.linear(x, w, b)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_path_is_taken_only_for_a_few_float32_cpu_rows(monkeypatch):
    calls = []
    real = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *a: calls.append(a[0].shape) or real(*a))
    w = torch.randn(8, 4)
    for rows in range(1, 12):
        small_batch_linear(torch.randn(1, rows, 4), w)
    small_batch_linear(torch.randn(1, 3, 4, dtype=torch.float64), w.double())
    stock_rows = [s[1] for s in calls]
    assert stock_rows == [1, 9, 10, 11, 3]            # 2..8 float32 rows went weight-major, the rest stock
    assert SMALL_ROWS == (2, 8)


def test_switch_keeps_weights_and_outputs():
    model = make_tiny_lm(vocab_size=32, seed=3, layers=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, 32, (1, 5))
    with torch.no_grad():
        want = model(ids).logits
        n = use_small_batch_matmul(model)
        got = model(ids).logits
    assert n == sum(isinstance(m, SmallBatchLinear) for m in model.modules()) == 2 * 7 + 1
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert use_small_batch_matmul(model) == 0          # idempotent: already switched layers are not plain Linear


def test_bundled_model_is_loaded_with_the_fast_path(bundled):
    model, _ = bundled
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(type(m) is SmallBatchLinear for m in linears)
    assert model.lm_head.weight is model.model.embed_tokens.weight   # tied weights stay tied
