"""Speculative decoding engine: exact sampling, KV-cached, traced per iteration, with a measured
target-only baseline. Notation: p = target distribution, q = draft distribution (see sampling.py)."""
from .bugs import InjectedBugs
from .config import MAX_K, MAX_NEW_TOKENS, SpecConfig
from .drafters import Drafter, DraftPolicy, ModelDrafter, NGramDrafter, Proposal
from .engine import baseline_generate, speculative_generate, stream_baseline, stream_speculative, warm_up
from .feature_draft import FeatureDraft, FeatureDrafter, load_feature_draft
from .model_pool import LoadedModel, ModelPool
from .models import PRESETS, check_tokenizer_compat, encode_prompt, load_bundled_model, load_model
from .trace import BaselineResult, Trace
from .trained_draft import DraftFilesError, load_bundled_draft

__all__ = ["SpecConfig", "speculative_generate", "baseline_generate", "stream_speculative", "stream_baseline",
           "NGramDrafter", "ModelDrafter", "Drafter", "DraftPolicy", "Proposal", "Trace", "BaselineResult",
           "load_bundled_model", "load_model", "check_tokenizer_compat", "encode_prompt", "PRESETS",
           "InjectedBugs", "warm_up", "MAX_K", "MAX_NEW_TOKENS", "ModelPool", "LoadedModel", "load_bundled_draft", "DraftFilesError",
           "load_feature_draft", "FeatureDraft", "FeatureDrafter"]
