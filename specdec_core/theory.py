"""The closed-form theory and the calibrated cost model, under the name users' scripts know
(``from specdec_core.theory import predict_speedup, expected_tokens``). The code lives in
``specdec_core.policy.closed_form`` and ``specdec_core.policy.costmodel``."""
from .policy.closed_form import (expected_tokens, speedup, optimal_k, break_even_alpha, approximate_speedup,
    estimate_alpha, estimate_c)
from .policy.costmodel import (Costs, AcceptanceProfile, proposal_lengths, tokens_given_length,
    expected_tokens_profile, iteration_ms, tokens_distribution, finish_plan, predicted_tokens_per_s,
    baseline_tokens_per_s, predicted_speedup, best_k, TimeSplit, acceptance_profile, iterations_profile,
    run_verify_ms, merge_verify_curve, costs_from_traces, time_split, baseline_split, predicted_split,
    predict_speedup, predicted_speedup_curve)

__all__ = [
    "expected_tokens", "speedup", "optimal_k", "break_even_alpha", "approximate_speedup", "estimate_alpha",
    "estimate_c", "Costs", "AcceptanceProfile", "proposal_lengths", "tokens_given_length",
    "expected_tokens_profile", "iteration_ms", "tokens_distribution", "finish_plan", "predicted_tokens_per_s",
    "baseline_tokens_per_s", "predicted_speedup", "best_k", "TimeSplit", "acceptance_profile",
    "iterations_profile", "run_verify_ms", "merge_verify_curve", "costs_from_traces", "time_split",
    "baseline_split", "predicted_split", "predict_speedup", "predicted_speedup_curve"
]
