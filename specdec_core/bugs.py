"""The one place where classic speculative-decoding bugs can be switched on, for teaching.

Every switch is off by default and none is part of ``SpecConfig``: a caller must build an
``InjectedBugs`` and pass it to the engine explicitly (the exactness lab and the tests' power
controls do). The bugs run through the real engine code path, so what they break is what a real
implementation with that mistake would break.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InjectedBugs:
    # On rejection, sample the replacement from p instead of the residual norm(max(0, p - q)).
    resample_from_p: bool = False
    # Draft with argmax(q) but still accept with min(1, p/q) as if x had been sampled from q.
    greedy_draft_ratio_rule: bool = False
    # Sample drafts from q warped at this temperature while the acceptance test uses q warped at the
    # run's temperature (the q in the ratio is not the q the token came from). None = off.
    draft_temperature: float | None = None
    # When every draft is accepted, throw the bonus token away. Costs one token per clean sweep;
    # the distribution stays exact (the lab shows this as the control that is *not* a bias).
    drop_bonus: bool = False
    # Token trees: verify distinct top-k siblings (chosen deterministically, not drawn from q) with the p/q
    # ratio and recursive rejection, as if they had been drawn from q (llama.cpp's tree example did).
    topk_ratio_rule: bool = False
    # Coupled sampling: key the noise by (seed, iteration index, offset within the iteration) instead of the
    # absolute position. Every position still gets fresh noise, so the output stays exact, but the text now
    # depends on where iterations were cut (the drafter, K, the K policy): drafter invariance is lost.
    coupled_noise_by_iteration: bool = False
    # A batch: cut every row's target cache with one length, the first row's (what a single ``cache.crop`` over
    # the batch does), while each row goes on as if it kept its own. The longer rows then read a shortened,
    # shifted context: their distributions change.
    batch_one_crop: bool = False
    # A batch: every row verifies with the first row's random stream (the same uniforms, the same draws). Each
    # row alone stays exact; rows with the same context become correlated (their joint law is not the product).
    batch_shared_uniforms: bool = False

    @property
    def any(self) -> bool:
        return (self.resample_from_p or self.greedy_draft_ratio_rule or self.drop_bonus or self.topk_ratio_rule
                or self.coupled_noise_by_iteration or self.batch_one_crop or self.batch_shared_uniforms
                or self.draft_temperature is not None)

    def names(self) -> list[str]:
        on = [n for n in ("resample_from_p", "greedy_draft_ratio_rule", "drop_bonus", "topk_ratio_rule",
                          "coupled_noise_by_iteration", "batch_one_crop", "batch_shared_uniforms") if getattr(self, n)]
        if self.draft_temperature is not None:
            on.append(f"draft_temperature={self.draft_temperature:g}")
        return on


NO_BUGS = InjectedBugs()
