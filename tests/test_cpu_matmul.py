"""The weight-major CPU path for few-token linear layers: same values as F.linear, only where it applies,
and the loaders switch the bundled model to it without touching its weights."""
import pytest
import torch

from conftest import make_tiny_lm
from specdec_core.models.cpu_matmul import (ONE_THREAD_MAX_ROWS, SMALL_ROWS, SmallBatchLinear, max_rows,
    small_batch_linear, use_small_batch_matmul)


@pytest.mark.parametrize("shape", [(1, 1, 24), (1, 2, 24), (1, 3, 24), (2, 3, 24), (1, 8, 24), (1, 13, 24), (3, 5, 24),
                                   (1, 17, 24), (5, 24), (1, 0, 24)])
@pytest.mark.parametrize("bias", [False, True])
def test_same_values_as_linear(shape, bias):
    torch.manual_seed(0)
    w, b = torch.randn(40, 24), torch.randn(40) if bias else None
    x = torch.randn(*shape)
    got, want = small_batch_linear(x, w, b), torch.nn.functional.linear(x, w, b)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_path_is_taken_only_for_a_few_float32_cpu_rows(monkeypatch, threads):
    calls = []
    real = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *a: calls.append(a[0].shape) or real(*a))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        w = torch.randn(8, 4)
        for rows in (1, 2, 4, 5, 16, 17, 150):
            small_batch_linear(torch.randn(1, rows, 4), w)
        small_batch_linear(torch.randn(1, 3, 4, dtype=torch.float64), w.double())
    finally:
        torch.set_num_threads(before)
    stock_rows = [s[1] for s in calls]
    if threads == 1:   # compute-bound from 5 rows on: the stock kernel is faster there
        assert stock_rows == [5, 16, 17, 150, 3]
    else:
        assert stock_rows == [17, 150, 3]
    assert max_rows() == (SMALL_ROWS[1] if before > 1 else ONE_THREAD_MAX_ROWS)


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
