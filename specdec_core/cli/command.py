"""Command line: python -m specdec_core --prompt "..." [--baseline] [--batch B] [--json OUT] (installed: ``specdec``).

Bad input (a setting out of range, an unknown model name, a device this machine lacks, a ``--json`` path that
cannot be written) gets one line on stderr and exit status 2, before any model loads (``check_args``)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from .. import limits
from ..config import SpecConfig, recommended_config
from ..limits import MAX_BATCH, MAX_K, MAX_NEW_TOKENS, MAX_TREE_NODES, MAX_TREE_TOP_K, SAMPLERS
from .batch import batch_lines, batch_number, batch_prompts, batch_texts, run_batch
from .lines import different_draws, pair_line


class Parser(argparse.ArgumentParser):
    """argparse with its refusals in one line (``error: …``, status 2) like every other bad input."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def prog_name(module: str, script: str) -> str:
    """``script`` when run as the installed command, else ``python -m module``."""
    return script if os.path.basename(sys.argv[0] if sys.argv else "") == script else f"python -m {module}"


def build_parser() -> argparse.ArgumentParser:
    """The CLI's options; every run setting defaults to ``recommended_config()`` (as the app and /generate)."""
    rec = recommended_config()
    ap = Parser(prog=prog_name("specdec_core", "specdec"),
                description="Speculative decoding with a full per-iteration trace. "
                            "With no model arguments it runs the bundled SmolLM2-135M offline.")
    ap.add_argument("--prompt", required=True, help="the user prompt")
    ap.add_argument("--target", default="bundled", help="'bundled' (default), a hub id or a local folder")
    ap.add_argument("--draft", default=None,
                    help="'feature' (default with the bundled target, as the app: the trained feature-reading draft), "
                         "'trained' (the token-only trained draft), 'ngram' (prompt lookup; the default for any other "
                         "target), 'self' (the target drafts for itself), 'bundled', a hub id or a local folder")
    ap.add_argument("--k", type=int, default=rec.k,
                    help=f"draft tokens per iteration, the maximum unless --k-policy fixed (1..{MAX_K}; "
                         f"default {rec.k})")
    ap.add_argument("--adaptive-k", action="store_true", help="same as --k-policy heuristic (K is the maximum)")
    ap.add_argument("--k-policy", default="", choices=("", "fixed", "heuristic", "cost"),
                    help="how K is chosen each iteration: fixed, heuristic (+2/-1) or cost (calibrated cost model; "
                         f"K is the maximum); default {rec.k_policy} (heuristic with --adaptive-k)")
    ap.add_argument("--confidence-stop", type=float, default=rec.confidence_stop,
                    help="a model draft stops drafting after a draft that takes its own confidence that all its "
                         "drafts so far will be accepted below this (that draft is still offered); 0 = off, "
                         f"below 1; default {rec.confidence_stop}")
    ap.add_argument("--tree-nodes", type=int, default=rec.tree_nodes,
                    help=f"draft a token tree of up to this many nodes per iteration (depth <= --k), verified in one "
                         f"target forward; 0 = a chain (0..{MAX_TREE_NODES}; default {rec.tree_nodes})")
    ap.add_argument("--tree-top-k", type=int, default=rec.tree_top_k,
                    help=f"a tree's most children per node (1..{MAX_TREE_TOP_K}; default {rec.tree_top_k})")
    ap.add_argument("--temperature", type=float, default=rec.temperature,
                    help=f"0 = greedy; default {rec.temperature:g}")
    ap.add_argument("--top-k", type=int, default=rec.top_k, help=f"0 = off; default {rec.top_k}")
    ap.add_argument("--top-p", type=float, default=rec.top_p, help=f"1.0 = off; default {rec.top_p:g}")
    ap.add_argument("--max-new-tokens", type=int, default=rec.max_new_tokens,
                    help=f"1..{MAX_NEW_TOKENS}; default {rec.max_new_tokens}")
    ap.add_argument("--seed", type=int, default=rec.seed, help=f"default {rec.seed}")
    ap.add_argument("--sampler", default=rec.sampler,
                    help=f"{' or '.join(SAMPLERS)}. standard: speculative sampling; coupled: drafter-invariant (noise "
                         "keyed by seed and position: "
                         "the text equals the coupled target-only run's for the same seed, whatever the draft, K or "
                         f"tree; --baseline is then coupled too); default {rec.sampler}")
    ap.add_argument("--batch", type=batch_number, default=1, metavar="B",
                    help=f"decode the prompt in a batch of B rows with B - 1 other users' requests, one draft pass and "
                         f"one target verify per iteration for every row (1..{MAX_BATCH}; default 1 = the prompt "
                         "alone; needs --tree-nodes 0); prints every row and the pooled figures")
    ap.add_argument("--raw", action="store_true", help="do not apply the chat template")
    ap.add_argument("--baseline", action="store_true", help="also run target-only generation and compare")
    ap.add_argument("--device", default=None, help="cpu, cuda or mps (default: the best available)")
    ap.add_argument("--json", metavar="OUT", help="write the trace (with the baseline) as JSON")
    return ap


def check_args(args: argparse.Namespace) -> SpecConfig:
    """Every check of the command line that needs no model, so that bad input is refused before anything
    loads: the settings (``recommended_config``), the batch size, the prompt, the model names, the device and the
    output path (ValueError). Returns the run's settings; ``args.batch`` becomes the checked batch size."""
    cfg = config_from_args(args)
    args.batch = limits.check_batch(args.batch)
    limits.check_batch_trees(args.batch, cfg.tree_nodes)
    limits.check_prompt(args.prompt)
    check_pair(args.target, args.draft)
    check_device(args.device)
    check_output(args.json)
    return cfg


def summary_lines(trace, baseline=None) -> list[str]:
    from ..stats.intervals import acceptance_interval, speedup_interval, verdict
    st = trace.stats
    c = trace.config
    lo, hi = acceptance_interval(trace)
    lines = [
        pair_line(c),
        f"tokens: {st.new_tokens} in {st.iterations} iterations, {st.mean_tokens_per_iteration:.2f} tokens/iteration",
        f"acceptance: {st.accepted}/{st.drafted} drafts ({100 * st.acceptance_rate:.1f} %, "
        f"95 % CI {100 * lo:.1f}–{100 * hi:.1f} %, Wilson)",
        f"forwards: target {st.target_forwards}, draft {st.draft_forwards}",
        *_tree_line(trace),
        settings_line(c),
        f"speculative: {st.wall_ms:.0f} ms, {st.tokens_per_s:.2f} tokens/s (measured)",
    ]
    if baseline is not None:
        same = baseline.new_token_ids == trace.new_token_ids
        lines += [f"baseline:    {baseline.wall_ms:.0f} ms, {baseline.tokens_per_s:.2f} tokens/s, "
                  f"target forwards {baseline.target_forwards} (measured)",
                  f"speedup: {verdict(speedup_interval(trace))}"
                  if baseline.tokens_per_s > 0 else "speedup: n/a",
                  f"output identical to baseline: {'yes' if same else 'no'}"
                  + different_draws(same, c, "; --sampler coupled keeps the sample")]
    return lines


def settings_line(c: dict) -> str:
    """The run's K and sampling settings in one line; the confidence stop only for a model draft (prompt
    lookup has no confidence to stop on, so the setting does nothing there)."""
    policy = c.get("k_policy") or ("heuristic" if c.get("adaptive_k") else "fixed")
    parts = [f"K = {c.get('k')} (fixed)" if policy == "fixed" else f"K ≤ {c.get('k')} ({policy} policy)"]
    temp = c.get("temperature") or 0
    parts.append("greedy" if temp == 0 else f"temperature {temp:g}"
                 + (", coupled sampler (drafter-invariant)" if c.get("sampler") == "coupled" else ""))
    if temp and c.get("top_k"):
        parts.append(f"top-k {c['top_k']}")
    if temp and (c.get("top_p") or 1.0) < 1.0:
        parts.append(f"top-p {c['top_p']:g}")
    if c.get("tree_nodes"):
        parts.append(f"trees of ≤ {c['tree_nodes']} nodes (≤ {c.get('tree_top_k')} children each)")
    if (c.get("confidence_stop") or 0) > 0 and c.get("drafter") != "ngram":
        parts.append(f"confidence stop {c['confidence_stop']:g}")
    return "settings: " + ", ".join(parts)


def _tree_line(trace) -> list[str]:
    trees = [it.tree for it in trace.iterations if it.tree is not None]
    if not trace.config.get("tree_nodes"):
        return []
    if not trees:
        return ["trees: none drafted (this drafter drafts chains, or the K policy chose chains)"]
    return [f"trees: {len(trees)} of {len(trace.iterations)} iterations, {sum(len(t.nodes) for t in trees)} nodes, "
            f"{sum(len(t.path) for t in trees) / len(trees):.2f} accepted per tree ({trees[-1].rule})"]


def config_from_args(args: argparse.Namespace) -> SpecConfig:
    """The run's settings: ``recommended_config()`` with the options given (their defaults are its values),
    checked against the input limits every entrance shares (``limits.check_run``)."""
    values = limits.check_run(k=args.k, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                              max_new_tokens=args.max_new_tokens, seed=args.seed,
                              confidence_stop=args.confidence_stop, tree_nodes=args.tree_nodes,
                              tree_top_k=args.tree_top_k, sampler=args.sampler)
    return recommended_config(**values, adaptive_k=args.adaptive_k, k_policy=args.k_policy)


TARGETS = ("bundled",)                                     # the built-in names of --target
DRAFTS = ("feature", "trained", "ngram", "self", "bundled")  # and of --draft


def check_name(what: str, key: str, names: tuple[str, ...]) -> None:
    """A built-in name, an existing local folder or a hub id (owner/name, checked by ``validate_model_id``;
    whether it exists only loading can tell). Anything else is refused with the choices (ValueError)."""
    from ..models.loading import validate_model_id
    if key in names or os.path.isdir(key):
        return
    if key.startswith(("/", ".", "~", os.sep)):
        raise ValueError(f"--{what} {key}: no such folder, and not a valid Hugging Face model id (owner/name)")
    if "/" not in key:
        raise ValueError(f"unknown {what} {key!r}: use {'one of ' if len(names) > 1 else ''}{', '.join(names)}, "
                         "a hub id (owner/name) or a local folder")
    validate_model_id(key)


def check_device(name: str | None) -> None:
    """Refuse a ``--device`` this machine does not have (ValueError), naming the ones it has."""
    if not name:
        return
    import torch
    here = ["cpu"] + (["cuda"] if torch.cuda.is_available() else []) \
        + (["mps"] if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available() else [])
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"--device {name}: not a device; use cpu, cuda or mps (available here: {', '.join(here)})")
    if dev.type not in here:
        raise ValueError(f"--device {name}: {dev.type.upper()} is not available on this machine "
                         f"(available: {', '.join(here)})")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        n = torch.cuda.device_count()
        raise ValueError(f"--device {name}: this machine has {n} CUDA device{'s' if n != 1 else ''} "
                         f"(cuda:0{f' … cuda:{n - 1}' if n > 1 else ''})")


def check_output(path: str | None, flag: str = "--json") -> None:
    """Refuse an output file that could not be written at the end of a run (ValueError): a folder, a missing
    folder, a place without write permission. Tried by opening it for appending (which changes nothing);
    a file that was not there before is removed again."""
    if path is None:
        return
    if not path.strip():
        raise ValueError(f"{flag}: no file name given")
    if os.path.isdir(path):
        raise ValueError(f"{flag} {path}: is a folder, not a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"{flag} {path}: the folder {folder} does not exist")
    existed = os.path.lexists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as e:
        raise ValueError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None
    if not existed:
        os.remove(path)


def check_pair(target_key: str, draft_key: str) -> None:
    """Refuse bad names and a shipped draft with another target, before anything is loaded (ValueError)."""
    from ..drafters.registry import SHIPPED
    check_name("target", target_key, TARGETS)
    check_name("draft", draft_key, DRAFTS)
    if draft_key in SHIPPED and target_key != "bundled":
        raise ValueError(f"--draft {draft_key}: {SHIPPED[draft_key]} is made for the bundled SmolLM2-135M-Instruct "
                         f"only, not for {target_key!r}")


def load_pair(target_key: str, draft_key: str, device: str | None = None) -> tuple:
    """(the target as a pool's LoadedModel, a drafter for it) from the CLI's names (see ``--target``, ``--draft``);
    ValueError / RuntimeError / OSError say what is wrong."""
    from ..drafters.registry import make_drafter
    from ..models.pool import ModelPool
    check_pair(target_key, draft_key)
    pool = ModelPool(allow_local=True, device=device)
    target = pool.get(target_key)
    return target, make_drafter(pool, target, draft_key)


def run(args: argparse.Namespace) -> int:
    from ..decoding.baseline import baseline_generate, warm_up
    from ..decoding.engine import speculative_generate
    from ..models.loading import encode_prompt
    from ..stats.intervals import fill_stats
    if args.draft is None:   # the app's default pair for the bundled target; prompt lookup works with any other
        args.draft = "feature" if args.target == "bundled" else "ngram"
    cfg = check_args(args)
    target, drafter = load_pair(args.target, args.draft, args.device)
    if args.batch > 1:
        texts, ids = batch_prompts(args, cfg, target)      # every row checked against the context
    else:
        ids = encode_prompt(target.tokenizer, args.prompt, chat=not args.raw)
        limits.check_context(len(ids), cfg.max_new_tokens, limits.context_length(target.model))
    warm_up(*{id(m): m for m in (target.model, getattr(drafter, "model", target.model))}.values())
    if args.batch > 1:
        trace = run_batch(args, cfg, target, drafter, texts, ids)
        lines = [*batch_texts(trace), "---", *batch_lines(trace, settings_line(trace.config))]
    else:
        trace = speculative_generate(target.model, drafter, ids, cfg, target.tokenizer, prompt=args.prompt,
                                     meta={"target": target.label, "draft": args.draft})
        if args.baseline:
            trace.baseline = baseline_generate(target.model, ids, cfg, target.tokenizer)
            fill_stats(trace)
        lines = [trace.text, "---", *summary_lines(trace, trace.baseline)]
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(trace.to_dict(), f)
        print(f"trace written to {args.json}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
