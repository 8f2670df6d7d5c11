"""Speculative decoding engine: exact sampling, KV-cached, traced per iteration, with a measured
target-only baseline. Notation: p = target distribution, q = draft distribution (see sampling.py)."""
from .bugs import InjectedBugs
from .config import MAX_K, MAX_NEW_TOKENS, SpecConfig
from .drafters.base import Drafter, DraftPolicy, Proposal
from .drafters.model import ModelDrafter
from .drafters.ngram import NGramDrafter
from .decoding.baseline import baseline_generate, stream_baseline, warm_up
from .decoding.engine import speculative_generate, stream_speculative
from .drafters.feature import FeatureDraft, FeatureDrafter, load_feature_draft
from .models.pool import LoadedModel, ModelPool
from .models.loading import PRESETS, check_tokenizer_compat, encode_prompt, load_bundled_model, load_model
from .trace import BaselineResult, Trace
from .drafters.trained import DraftFilesError, load_bundled_draft
from .batch.engine import batch_generate, stream_batch
from .batch.baseline import attach_batch_baseline, batch_baseline, stream_batch_baseline

__all__ = ["SpecConfig", "speculative_generate", "baseline_generate", "stream_speculative", "stream_baseline",
           "NGramDrafter", "ModelDrafter", "Drafter", "DraftPolicy", "Proposal", "Trace", "BaselineResult",
           "load_bundled_model", "load_model", "check_tokenizer_compat", "encode_prompt", "PRESETS",
           "InjectedBugs", "warm_up", "MAX_K", "MAX_NEW_TOKENS", "ModelPool", "LoadedModel", "load_bundled_draft", "DraftFilesError",
           "load_feature_draft", "FeatureDraft", "FeatureDrafter", "batch_generate", "stream_batch", "batch_baseline",
           "stream_batch_baseline", "attach_batch_baseline"]
