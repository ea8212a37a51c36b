"""Range histograms: where values fall on a format's number line, and what a loss scale does.

One concept per module:

======================  ==========================================================================
``range_histogram``     :class:`RangeHistogram`: |x| counted by binade, exact zone counts (zero,
                        underflow, subnormal, normal, overflow) per format under any power-of-two
                        scale; :data:`ZONES`
``loss_scale``          :func:`suggest_scale`: the window of power-of-two loss scales
``gradient_recorder``   :class:`GradientRecorder`: a model's gradients in a low-precision run next
                        to the true ones
``scaling_outcomes``    :func:`scaling_report`: what block / per-tensor scaling keeps, element by
                        element
======================  ==========================================================================

>>> import numpy as np
>>> h = RangeHistogram(); h.add(np.array([0.0, 1e-9, 3e-8, 1e-6, 0.5, 7e4]))
>>> h.zones("fp16")
{'zero': 1, 'underflow': 1, 'subnormal': 2, 'normal': 1, 'overflow': 1, 'nonfinite': 0}
"""

from __future__ import annotations

from .gradient_recorder import KINDS, GradientRecord, GradientRecorder
from .loss_scale import ScaleSuggestion, suggest_scale
from .range_histogram import DEFAULT_FORMATS, ZONES, BinadeCounts, RangeHistogram  # noqa: F401
from .scaling_outcomes import DEFAULT_SCALING_SCHEMES, OUTCOMES, ScalingRow, scaling_report

__all__ = [
    "RangeHistogram",
    "ScaleSuggestion",
    "suggest_scale",
    "ZONES",
    "GradientRecorder",
    "GradientRecord",
    "KINDS",
    "scaling_report",
    "ScalingRow",
    "DEFAULT_SCALING_SCHEMES",
    "OUTCOMES",
]
