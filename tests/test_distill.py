"""The draft-training code on tiny in-process models: the loss falls, the agreement rises, the weights
round-trip through the shipped file format, and a broken file gives a clear error."""
from __future__ import annotations

import json
import os

import pytest
import torch

from specdec_core import SpecConfig, speculative_generate
from specdec_core.training.data import Example
from specdec_core.training.prompts import (BROAD_TEMPLATES, BROAD_TOPICS, FREEFORM_HELDOUT, HELDOUT_TEMPLATES,
    HELDOUT_TOPICS, N_HELDOUT_PROMPTS, N_TRAINING_PROMPTS, STANDALONE_PROMPTS, TRAIN_TEMPLATES, TRAIN_TOPICS,
    heldout_prompts, training_prompts)
from specdec_core.training.train import build_vocab, distill, make_batches, step1_agreement
from specdec_core.drafters.trained import DraftFilesError, build_draft, load_bundled_draft, save_draft
from tests.conftest import make_tiny_lm

V = 24


@torch.inference_mode()
def _examples(target: torch.nn.Module, n: int, seed: int, top_n: int = 8, greedy: bool = False) -> list[Example]:
    """Prompts of random tokens, responses sampled (or greedy) from the target, teacher top-n log-probs."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, V, (4,), generator=g).tolist()
        prompt_len = len(ids)
        for _ in range(12):
            logits = target(input_ids=torch.tensor([ids])).logits[0, -1]
            ids.append(int(logits.argmax()) if greedy else int(torch.multinomial(logits.softmax(-1), 1, generator=g)))
        logp = target(input_ids=torch.tensor([ids])).logits[0].log_softmax(-1)[prompt_len - 1:-1]
        vals, idx = logp.topk(top_n, dim=-1)
        out.append(Example(ids, prompt_len, idx.to(torch.int32), vals.to(torch.float16)))
    return out


@pytest.fixture(scope="module")
def tiny_target(one_thread):
    return make_tiny_lm(vocab_size=V, seed=3, layers=2, hidden=32, scale=4.0)


def test_prompt_sets_are_disjoint():
    templates, topics = TRAIN_TEMPLATES + BROAD_TEMPLATES, TRAIN_TOPICS + BROAD_TOPICS
    assert len(set(templates)) == len(templates) and len(set(topics)) == len(topics)
    assert not set(templates) & set(HELDOUT_TEMPLATES)
    for topic in HELDOUT_TOPICS:  # no held-out topic is a training topic in other words
        assert not any(topic.lower() in t.lower() or t.lower() in topic.lower() for t in topics), topic
    every_training_prompt = set(training_prompts(10**6)) | set(training_prompts(10**6, broad=False))
    assert len(every_training_prompt) == len(templates) * len(topics) + len(STANDALONE_PROMPTS)
    assert not every_training_prompt & set(heldout_prompts(N_HELDOUT_PROMPTS))


def test_training_pools():
    narrow = training_prompts(N_TRAINING_PROMPTS, broad=False)
    assert set(narrow) == {tpl.format(t=t) for tpl in TRAIN_TEMPLATES for t in TRAIN_TOPICS}
    assert narrow[:5] == training_prompts(5, broad=False)             # a prefix of the same seeded order
    broad = training_prompts(N_TRAINING_PROMPTS)
    assert len(set(broad)) == N_TRAINING_PROMPTS and broad == training_prompts(N_TRAINING_PROMPTS)
    assert set(STANDALONE_PROMPTS) <= set(broad)                        # every whole chat prompt is trained on
    assert len(set(broad) - set(narrow)) > N_TRAINING_PROMPTS // 2     # most come from the broad lists
    assert training_prompts(N_TRAINING_PROMPTS, seed=1) != broad


def test_heldout_prompts_alternate_free_form_and_template_pairs():
    held = heldout_prompts(N_HELDOUT_PROMPTS)
    assert len(set(held)) == N_HELDOUT_PROMPTS == len(FREEFORM_HELDOUT) + len(HELDOUT_TEMPLATES) * len(HELDOUT_TOPICS)
    assert [p in FREEFORM_HELDOUT for p in held[:6]] == [True, False] * 3
    assert held[:10] == heldout_prompts(10) and heldout_prompts(10, seed=2) != heldout_prompts(10)


def test_vocab_and_batches():
    data = [Example([1, 2, 3, 5, 5, 7], 3, torch.zeros((3, 2), dtype=torch.int32), torch.zeros((3, 2)))]
    vocab = build_vocab(data, 4, vocab_size=10, always=(9,))
    assert vocab.tolist() == [0, 5, 7, 9]          # 9 forced, 5 and 7 seen, then id order fills
    batches = make_batches(data * 10, tokens_per_batch=24, seed=0)
    assert sorted(i for b in batches for i in b) == list(range(10)) and all(len(b) <= 4 for b in batches)


def test_distill_learns_and_round_trips(tiny_target, tmp_path):
    train = _examples(tiny_target, 48, seed=0)
    held = _examples(tiny_target, 8, seed=1, greedy=True)   # agreement = with the target's argmax
    vocab = build_vocab(train, 20, V)
    draft = build_draft(tiny_target, [0], vocab)
    for p in [*draft.model.layers.parameters(), *draft.model.norm.parameters()]:
        p.requires_grad_(True)
    before = step1_agreement(draft, held, pad=0)
    log = distill(draft, train, epochs=6, lr=3e-3, seed=0, pad=0, heldout=held, evals=2, tokens_per_batch=128)
    # soft cross-entropy = KL(p‖q) + H(p): the part above the teacher's own entropy must shrink
    floor = sum(float(-(e.top_logp.float().exp() * e.top_logp.float()).sum()) for e in train) / \
        sum(len(e.top_logp) for e in train)
    first, last = sum(log["losses"][:5]) / 5 - floor, sum(log["losses"][-5:]) / 5 - floor
    assert last < 0.6 * first, (first, last)
    assert log["curve"][-1]["step1_agreement"] > before
    # the embedding and head are shared with the target, never trained
    assert draft.model.embed_tokens is tiny_target.model.embed_tokens and draft.lm_head is tiny_target.lm_head

    files = save_draft(draft, str(tmp_path), {"init_layers": [0]})
    assert all(os.path.getsize(tmp_path / f) < 10 * 2**20 for f in files)
    loaded = load_bundled_draft(tiny_target, str(tmp_path))
    x = torch.tensor([train[0].ids])
    with torch.inference_mode():
        a, b = draft(input_ids=x).logits, loaded(input_ids=x).logits
    assert torch.equal(torch.isinf(a), torch.isinf(b))                      # same draft vocabulary
    assert torch.allclose(a[~torch.isinf(a)], b[~torch.isinf(b)], atol=2e-2)  # fp16 on disk
    assert a.shape[-1] == V                                                  # full-vocabulary logits

    # it drives the engine and transformers' assisted generation
    cfg = SpecConfig(k=3, temperature=0.0, max_new_tokens=10)
    tr = speculative_generate(tiny_target, loaded, train[0].ids[:4], cfg)
    ref = tiny_target.generate(input_ids=x[:, :4], max_new_tokens=10, do_sample=False)
    assert tr.new_token_ids == ref[0, 4:].tolist()
    hf = tiny_target.generate(input_ids=x[:, :4], max_new_tokens=10, do_sample=False, assistant_model=loaded)
    assert hf[0, 4:].tolist() == ref[0, 4:].tolist()


def test_broken_files_are_named(tiny_target, tmp_path):
    draft = build_draft(tiny_target, [0, 1], build_vocab([], 8, V))
    files = save_draft(draft, str(tmp_path), {"init_layers": [0, 1]})
    (tmp_path / files[1]).write_bytes(b"not a safetensors file")
    with pytest.raises(DraftFilesError, match=r"layer_1\.safetensors.*python -m specdec_core\.distill"):
        load_bundled_draft(tiny_target, str(tmp_path))
    os.remove(tmp_path / files[1])
    with pytest.raises(DraftFilesError, match=r"layer_1\.safetensors"):
        load_bundled_draft(tiny_target, str(tmp_path))
    with pytest.raises(DraftFilesError, match=r"draft_card\.json"):
        load_bundled_draft(tiny_target, str(tmp_path / "nowhere"))
    card = json.loads((tmp_path / "draft_card.json").read_text())
    assert card["files"] == files


@pytest.mark.slow
def test_features_recorded_while_generating_equal_a_teacher_forced_pass(bundled):
    """The data stage's features come from the generation itself (a hook on the final norm): they must be the
    teacher-forced features of the same text, at every position, also when an EOS ends the whole batch."""
    from specdec_core.training.data import generate_dataset
    from specdec_core.training.features import target_features
    target, tok = bundled
    # batch 0 (greedy) ends by EOS before 12 tokens ("No." and "2 + 2 = 4"); batch 1 (sampled) runs on
    prompts = ["Is the sky blue? Yes or no.", "What is 2+2? Answer with a number only.", "Say hi.", "Name a color."]
    feats: list[torch.Tensor] = []
    data = generate_dataset(target, tok, prompts, 12, 2, seed=0, features=feats)
    plain = generate_dataset(target, tok, prompts, 12, 2, seed=0)
    assert len(data) == len(feats) == len(plain) == 4
    ended_early = 0
    for e, f, p, ref in zip(data, feats, plain, target_features(target, data)):
        assert p.ids[:len(e.ids)] == e.ids and len(e.ids) >= len(p.ids) - 1   # at most the batch-ending EOS dropped
        assert f.shape == ref.shape == (len(e.ids), target.config.hidden_size)
        assert torch.allclose(f.float(), ref.float(), atol=0.02, rtol=1e-3)
        assert len(e.top_ids) == len(e.ids) - e.prompt_len
        ended_early += len(e.ids) - e.prompt_len < 12
    assert ended_early >= 2                      # the EOS path was exercised


def test_recipe_search_cuts_answers_and_refuses_unknown_variants(capsys):
    from specdec_core.training.recipe_search import VARIANTS, _cut, main
    e = Example([1, 2, 3, 4, 5, 6], 2, torch.arange(8, dtype=torch.int32).view(4, 2), torch.zeros((4, 2)))
    f = torch.arange(6.0)[:, None]
    cut, cut_f = _cut(e, f, 3)
    assert cut.ids == [1, 2, 3, 4, 5] and cut.prompt_len == 2 and cut.top_ids.tolist() == [[0, 1], [2, 3], [4, 5]]
    assert cut_f.flatten().tolist() == [0, 1, 2, 3, 4]                    # a feature for every kept position
    assert _cut(e, f, 0)[0] is e and _cut(e, f, 9)[0] is e                # 0 = whole answer; short answers stay
    with pytest.raises(SystemExit):
        main(["--only", "no-such-variant"])
    assert "unknown variant(s) no-such-variant" in capsys.readouterr().err
    from specdec_core.training.recipe_search import PARTS
    assert all(set(v.answers) <= set(PARTS) and v.prompts > 0 and v.epochs > 0 for v in VARIANTS.values())


def test_nucleus_sampler_draws_from_transformers_warped_distribution():
    """The data stage's sampled answers: the same distribution as transformers' temperature, top-k and top-p
    warpers (chi-square), never a token outside their support, carried out by greedy search (one finite score)."""
    from scipy.stats import chisquare
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper
    from specdec_core.training.data import NucleusSampler
    torch.manual_seed(0)
    scores = torch.randn(1, 40) * 2
    ids = torch.zeros((1, 1), dtype=torch.long)
    warped = TopPLogitsWarper(0.9)(ids, TopKLogitsWarper(12)(ids, TemperatureLogitsWarper(0.8)(ids, scores.clone())))
    p = warped.softmax(-1)[0].double()
    assert 1 < int((p > 0).sum()) < 12                                    # top-p cuts inside the top 12
    n = 40_000
    out = NucleusSampler(0.8, 12, 0.9)(ids.expand(n, -1), scores.expand(n, -1).contiguous())
    assert bool((torch.isfinite(out).sum(-1) == 1).all())
    counts = torch.bincount(out.argmax(-1), minlength=40).double()
    assert counts[p == 0].sum() == 0
    expected = p[p > 0] / p[p > 0].sum() * counts.sum()
    assert chisquare(counts[p > 0].numpy(), expected.numpy()).pvalue > 1e-3


@pytest.mark.slow
def test_bf16_data_stage_is_deterministic_with_float32_labels(bundled):
    """``--data-dtype bf16``: the decoder runs under autocast, the head in float32, so every label is the exact
    log-softmax of the recorded feature; the same seed gives the same data; fp32's greedy choices are kept."""
    from specdec_core.training.data import decoder_autocast, generate_dataset
    target, tok = bundled
    prompts = ["Tell me about rivers.", "Give me a tip for learning to cook.", "Why do cats purr?", "Say hi."]
    runs = []
    for _ in range(2):
        feats: list[torch.Tensor] = []
        runs.append((generate_dataset(target, tok, prompts, 12, 2, seed=0, features=feats,
                                      compute_dtype=torch.bfloat16), feats))
    assert "forward" not in vars(target.get_decoder())               # the context manager put the class's back
    (data, feats), (again, feats2) = runs
    assert [e.ids for e in data] == [e.ids for e in again]
    assert all(torch.equal(a.top_logp, b.top_logp) and torch.equal(f, g)
               for a, b, f, g in zip(data, again, feats, feats2))
    with torch.inference_mode():
        for e, f in zip(data, feats):
            logp = torch.log_softmax(target.lm_head(f[e.prompt_len - 1:len(e.ids) - 1].float()), dim=-1)
            assert torch.allclose(logp.gather(1, e.top_ids.long()), e.top_logp.float(), atol=0.03)
    plain = generate_dataset(target, tok, prompts[:2], 12, 2, seed=0)            # batch 0: greedy, fp32
    same = sum(a == b for e, p in zip(data, plain) for a, b in zip(e.ids, p.ids))
    assert same >= 0.8 * sum(len(p.ids) for p in plain)
    with decoder_autocast(target, torch.float32):
        assert "forward" not in vars(target.get_decoder())          # float32: nothing is wrapped


def test_training_precision_and_epochs_defaults(monkeypatch):
    from specdec_core.training.__main__ import parse_args
    from specdec_core.training.pipeline import resolve_dtype
    feature, token = parse_args([]), parse_args(["--design", "token"])
    assert (feature.epochs, feature.train_dtype, feature.data_dtype, feature.prompts) == (5.0, "auto", "auto", 8424)
    assert (token.epochs, token.train_dtype, token.data_dtype, token.prompts) == (5.0, "fp32", "fp32", 4212)
    assert parse_args(["--epochs", "3", "--train-dtype", "bf16"]).epochs == 3.0
    cpu = torch.device("cpu")
    assert resolve_dtype("bf16", cpu) == torch.bfloat16 and resolve_dtype("fp32", cpu) == torch.float32
    monkeypatch.setattr("specdec_core.training.pipeline.cpu_has_native_bf16", lambda: True)
    assert resolve_dtype("auto", cpu) == torch.bfloat16
    monkeypatch.setattr("specdec_core.training.pipeline.cpu_has_native_bf16", lambda: False)
    assert resolve_dtype("auto", cpu) == torch.float32       # emulated bf16 would be slower than fp32
