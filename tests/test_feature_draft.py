"""The feature-reading (EAGLE-style) draft on tiny in-process models: the engine hands it the right
features (its cached drafts equal a from-scratch recomputation in every iteration), greedy output is
the target's, sampling stays exact (chi-square), training lowers the loss and raises agreement, the
weights round-trip, and a broken file gives a clear error."""
from __future__ import annotations

import json
import os

import pytest
import torch

from specdec_core import FeatureDraft, SpecConfig, load_feature_draft, speculative_generate
from specdec_core.training.features import target_features
from specdec_core.training.train import build_vocab
from specdec_core.training.train_feature import distill_features, feature_agreement, trainable_feature_draft
from specdec_core.drafters.model import model_drafter
from specdec_core.decoding.target import TargetModel
from specdec_core.drafters.feature import WEIGHTS, FeatureDrafter, save_feature_draft
from specdec_core.drafters.int8 import Int8DecodeLinear
from specdec_core.drafters.trained import DraftFilesError
from test_distill import V, _examples
from test_exactness import PROMPT, VOCAB, chi_square_p, empirical_first_tokens, exact_first_tokens
from tests.conftest import make_tiny_lm

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_target():
    return make_tiny_lm(vocab_size=V, seed=3, layers=2, hidden=32, scale=4.0)


@pytest.fixture(scope="module")
def trained(tiny_target):
    """A feature draft trained briefly on the tiny target's own samples (so that it gets drafts accepted)."""
    train = _examples(tiny_target, 48, seed=0)
    held = _examples(tiny_target, 8, seed=1, greedy=True)
    draft = trainable_feature_draft(tiny_target, 1, build_vocab(train, 20, V))
    held_f = target_features(tiny_target, held)
    before = feature_agreement(draft, held, held_f)
    log = distill_features(draft, train, target_features(tiny_target, train), epochs=8, lr=3e-3, seed=0, pad=0,
                           heldout=(held, held_f), evals=2, tokens_per_batch=128)
    draft.requires_grad_(False)
    return draft, log, before, train


def test_target_features_leave_the_logits_unchanged(tiny_target):
    ids = [1, 5, 7, 2, 9, 4]
    plain, keep = TargetModel(tiny_target), TargetModel(tiny_target, keep_features=True)
    assert torch.equal(plain.forward(ids[:4]), keep.forward(ids[:4]))
    assert keep.features.shape == (4, 32) and keep.features_from == 0
    assert torch.equal(plain.forward(ids, [3], logits_to_keep=3), keep.forward(ids, [3], logits_to_keep=3))
    assert keep.features.shape[0] == 3 and keep.features_from == 4
    with torch.inference_mode():   # the post-norm last hidden state, as one full pass computes it
        full = tiny_target.get_decoder()(input_ids=torch.tensor([ids + [3]])).last_hidden_state[0]
    assert torch.allclose(keep.features, full[4:], atol=1e-5)


@pytest.mark.slow
def test_training_lowers_the_loss_and_raises_agreement(trained):
    draft, log, before, _ = trained
    assert sum(log["losses"][-5:]) < 0.85 * sum(log["losses"][:5])   # the floor is the teacher entropy (×1.5)
    assert log["curve"][-1]["step1_agreement"] > before[0] + 0.1
    assert draft.embed_tokens.weight.requires_grad is False and draft.lm_head.weight.requires_grad is False


def test_mixed_precision_training_learns_and_keeps_fp32_weights(tiny_target):
    train = _examples(tiny_target, 48, seed=0)
    draft = trainable_feature_draft(tiny_target, 1, build_vocab(train, 20, V))
    log = distill_features(draft, train, target_features(tiny_target, train), epochs=8, lr=3e-3, seed=0, pad=0,
                           tokens_per_batch=128, compute_dtype=torch.bfloat16)
    assert sum(log["losses"][-5:]) < 0.85 * sum(log["losses"][:5])
    assert all(p.dtype == torch.float32 for p in draft.parameters())     # autocast: the weights stay fp32


@torch.inference_mode()
def _reference_drafts(target, draft, ids: list[int], k: int) -> list[int]:
    """Greedy drafts recomputed from scratch: target features for every position but the last, then the
    draft over the whole sequence, feeding its own last feature back for every further draft."""
    f = target.get_decoder()(input_ids=torch.tensor([ids[:-1]])).last_hidden_state[0]
    toks, feats, out = list(ids[1:]), list(f), []
    for _ in range(k):
        pos = torch.arange(len(toks))[None]
        hidden = draft(torch.tensor([toks]), torch.stack(feats)[None], pos)[0, -1]
        nxt = int(draft.full_logits(hidden).argmax())
        out.append(nxt)
        toks.append(nxt)
        feats.append(hidden)
    return out


@pytest.mark.parametrize("compute_dtype", [torch.float32, torch.bfloat16])
def test_training_is_reproducible(tiny_target, compute_dtype):
    """Same data and seed: the same weights, bit for bit (why ``python -m specdec_core.distill`` rebuilds the
    shipped draft exactly), in fp32 and in bf16 mixed precision; another seed: other weights."""
    train = _examples(tiny_target, 12, seed=0)
    feats = target_features(tiny_target, train)

    def weights(seed: int) -> dict[str, torch.Tensor]:
        torch.manual_seed(seed)           # the init's random part (the command seeds it: see pipeline.py)
        draft = trainable_feature_draft(tiny_target, 1, build_vocab(train, 20, V))
        distill_features(draft, train, feats, epochs=2, lr=3e-3, seed=seed, pad=0, tokens_per_batch=64,
                         compute_dtype=compute_dtype)
        return {k: v.clone() for k, v in draft.state_dict().items()}

    first, again, other = weights(0), weights(0), weights(1)
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert any(not torch.equal(first[k], other[k]) for k in first)


def test_cached_drafting_matches_recomputation_and_greedy_is_the_targets(tiny_target, trained):
    draft, _, _, train = trained
    prompt = train[3].ids[:5]
    cfg = SpecConfig(k=3, temperature=0.0, max_new_tokens=24, full_trace=False)
    tr = speculative_generate(tiny_target, draft, prompt, cfg)     # a FeatureDraft module: as_drafter wraps it
    assert tr.config["drafter"] == "feature draft"
    ref = tiny_target.generate(input_ids=torch.tensor([prompt]), max_new_tokens=24, do_sample=False)
    assert tr.new_token_ids == ref[0, 5:].tolist()
    assert tr.stats.accepted > 0 and tr.stats.accepted < tr.stats.drafted   # both fates occur
    seq = prompt + tr.new_token_ids
    for it in tr.iterations:
        drafted = [d.token_id for d in it.drafts]
        assert drafted == _reference_drafts(tiny_target, draft, seq[:it.start_len], len(drafted)), it.index


@pytest.mark.slow
def test_sampling_with_the_feature_draft_is_exact():
    target = make_tiny_lm(vocab_size=VOCAB, seed=1, scale=10.0)
    draft = FeatureDraft(target, 0, torch.arange(VOCAB - 1))   # one token outside the draft vocabulary: q = 0
    s = dict(temperature=1.0, top_k=0, top_p=1.0)
    counts = empirical_first_tokens(target, lambda: model_drafter(draft), k=2, **s, n=2000)
    p, tv = chi_square_p(counts, exact_first_tokens(target, PROMPT, **s), 2000)
    assert p > 1e-3, f"chi-square p={p:.2e}, TV={tv:.3f}"


def test_round_trip_and_broken_files(tiny_target, trained, tmp_path):
    draft = trained[0]
    files = save_feature_draft(draft, str(tmp_path), {"init_layer": 1})
    assert files == [WEIGHTS] and os.path.getsize(tmp_path / WEIGHTS) < 10 * 2**20
    loaded = load_feature_draft(tiny_target, str(tmp_path))
    x, f, pos = torch.tensor([[1, 2, 3]]), torch.randn(1, 3, 32), torch.arange(3)[None]
    with torch.inference_mode():
        a, b = draft.full_logits(draft(x, f, pos)), loaded.full_logits(loaded(x, f, pos))
    assert torch.equal(torch.isinf(a), torch.isinf(b)) and a.shape[-1] == V
    assert torch.allclose(a[~torch.isinf(a)], b[~torch.isinf(b)], atol=2e-2)   # fp16 on disk
    drafter = model_drafter(loaded)
    assert isinstance(drafter, FeatureDrafter)
    drafter.start([1, 2, 3])
    other = drafter.fresh()                      # the same weights, a state of its own (runs side by side)
    assert other.draft is loaded and other.name == drafter.name and other.cache is None
    assert loaded.int8_head is not None and draft.int8_head is None  # only a loaded draft decodes in int8
    assert type(loaded.eh_proj) is Int8DecodeLinear and type(loaded.lm_head) is not Int8DecodeLinear
    assert json.loads((tmp_path / "draft_card.json").read_text())["files"] == [WEIGHTS]

    (tmp_path / WEIGHTS).write_bytes(b"not a safetensors file")
    with pytest.raises(DraftFilesError, match=r"feature_draft\.safetensors.*python -m specdec_core\.distill --design feature"):
        load_feature_draft(tiny_target, str(tmp_path))
    os.remove(tmp_path / WEIGHTS)
    with pytest.raises(DraftFilesError, match=r"feature_draft\.safetensors"):
        load_feature_draft(tiny_target, str(tmp_path))
    with pytest.raises(DraftFilesError, match=r"draft_card\.json"):
        load_feature_draft(tiny_target, str(tmp_path / "nowhere"))


def test_transformers_mtp_loop_runs_the_same_draft(tiny_target, trained):
    """transformers' ``generate(use_mtp=True)`` with the draft as its one MTP layer proposes the same token
    as our engine at K = 1 wherever both draft the same position, and both give the target's greedy output.
    (Its first iteration is a plain target step, so its drafts start one position later than ours.)"""
    from transformers.modeling_layers import MtpModel

    from specdec_core.bench.mtp_peer import build_mtp_model, mtp_generation
    draft, _, _, train = trained
    prompt = train[5].ids[:6]
    before = {k: v.clone() for k, v in tiny_target.state_dict().items()}
    loader = MtpModel.__dict__["from_pretrained"]
    mtp = build_mtp_model(tiny_target, draft)
    assert mtp.layers[0].mtp_block is draft.mtp_block and mtp.layers[0].eh_proj is draft.eh_proj
    theirs: dict[int, int] = {}   # position drafted -> token

    def record(module, args, kwargs, out):
        theirs[kwargs["full_input_ids"].shape[1]] = int(out[0][0, 0])
    hook = mtp.register_forward_hook(record, with_kwargs=True)
    with mtp_generation(tiny_target, mtp):
        out = tiny_target.generate(input_ids=torch.tensor([prompt]), max_new_tokens=20, do_sample=False,
                                   use_mtp=True)
    hook.remove()
    ours_tr = speculative_generate(tiny_target, draft, prompt, SpecConfig(k=1, temperature=0.0, max_new_tokens=20))
    ref = tiny_target.generate(input_ids=torch.tensor([prompt]), max_new_tokens=20, do_sample=False)
    assert out[0].tolist() == ref[0].tolist() == prompt + ours_tr.new_token_ids
    ours = {it.start_len: it.drafts[0].token_id for it in ours_tr.iterations if it.drafts}
    common = sorted(set(ours) & set(theirs))
    assert len(common) >= 5 and [ours[i] for i in common] == [theirs[i] for i in common]
    assert 0 < ours_tr.stats.accepted < sum(len(it.drafts) for it in ours_tr.iterations)
    assert all(torch.equal(before[k], v) for k, v in tiny_target.state_dict().items())   # target untouched
    assert not hasattr(tiny_target.config, "num_mtp_layers") and MtpModel.__dict__["from_pretrained"] is loader
