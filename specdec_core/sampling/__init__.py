"""The sampling math, one pure function each (no models, no caches): warping, inverse-CDF draws, the acceptance
rule and its residual (``standard``), and coupled sampling's keyed noise with the samplers that draw with it
(``coupled``). Notation, used throughout the project: **p = target**, **q = draft**."""
from .standard import (Warping, acceptance_probs, first_rejection, inverse_cdf, point_mass, residual_distribution,
                       sample, warp_logits)

__all__ = ["Warping", "acceptance_probs", "first_rejection", "inverse_cdf", "point_mass", "residual_distribution",
           "sample", "warp_logits"]
