"""The scale-update rule of dynamic loss scaling, written once for the CPU and the GPU.

:func:`next_scale` is PyTorch's ``_amp_update_scale_`` for one step, as plain Python in numba's
subset: :mod:`fpsim.kernels.amp_cpu` compiles it into a numba CPU kernel and
:mod:`fpsim.kernels.amp_cuda` into a CUDA device function (in the CUDA simulator it runs as the
Python below), so both back ends apply the very same lines.
"""

import math

import numpy as np
from numba.extending import register_jitable


@register_jitable
def next_scale(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """One step of the rule on a float32 ``scale`` and an integer growth ``tracker``; returns
    ``(scale, tracker)``::

        found_inf:  scale = float32(float64(scale) * backoff_factor); tracker = 0
        else:       tracker + 1 == growth_interval ?
                        new = float32(float64(scale) * growth_factor)
                        scale = new if new is finite (else unchanged); tracker = 0
                    : tracker = tracker + 1

    The factors multiply in float64 and the product is rounded once to float32, as PyTorch
    does; growth stops short of float32's overflow instead of reaching inf.
    """
    if found_inf != 0:
        return np.float32(np.float64(scale) * np.float64(backoff_factor)), 0
    successful = tracker + 1
    if successful == growth_interval:
        grown = np.float32(np.float64(scale) * np.float64(growth_factor))
        return (grown if math.isfinite(grown) else np.float32(scale)), 0
    return np.float32(scale), successful
