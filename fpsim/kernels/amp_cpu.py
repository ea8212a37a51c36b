"""numba CPU kernels for the two core steps of dynamic loss scaling.

They mirror PyTorch's CPU kernels line for line
(``aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp``):

* :func:`non_finite_check_and_unscale` -- ``_amp_foreach_non_finite_check_and_unscale_`` for one
  tensor: for every element ``v`` of the *scaled* gradient, if ``v`` is inf or NaN set
  ``found_inf[0] = 1``; then store ``v * inv_scale`` (in the gradient's own precision: float32
  for float32 arrays, float64 for float64 arrays), also when non-finite values were found. The
  check reads the value *before* the multiplication, so a finite gradient that overflows to inf
  through the multiplication (``inv_scale`` > 1, e.g. a scale below 1) is not reported.
* :func:`update_scale` -- ``_amp_update_scale_``: the scale-update rule
  (:func:`fpsim.kernels.amp_scalar.next_scale`, shared with the GPU), on a one-element float32
  ``scale`` and a one-element int32 ``growth_tracker``, with float64 factor arithmetic::

      if found_inf:  scale = float32(float64(scale) * backoff_factor); tracker = 0
      else:
          tracker + 1 == growth_interval ?
              new = float32(float64(scale) * growth_factor)
              scale = new if new is finite (else unchanged); tracker = 0
          : tracker = tracker + 1

Arrays are 1-D and C-contiguous (the host wrapper in :mod:`fpsim.amp.functional` reshapes).
Nothing is compiled at import; the first call compiles each signature (float32 / float64
gradients) and ``cache=True`` keeps it on disk. The CUDA twins are in
:mod:`fpsim.kernels.amp_cuda`.
"""

from __future__ import annotations

import math

from numba import njit

from . import amp_scalar


@njit(cache=True, nogil=True)
def non_finite_check_and_unscale(grad, found_inf, inv_scale):
    """Check ``grad`` (1-D, scaled) for inf/NaN into ``found_inf[0]`` and multiply it by
    ``inv_scale[0]`` in place. ``found_inf`` is only ever set to 1, never cleared."""
    inv = inv_scale[0]
    bad = False
    if inv == 1:  # PyTorch: ``inv_scale == 1 ? val : val * inv_scale``
        for i in range(grad.size):
            bad |= not math.isfinite(grad[i])
    else:
        for i in range(grad.size):
            v = grad[i]
            bad |= not math.isfinite(v)
            grad[i] = v * inv
    if bad:
        found_inf[0] = 1.0


@njit(cache=True, nogil=True)
def update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """PyTorch's ``_amp_update_scale_`` on ``scale[0]`` (float32) and ``growth_tracker[0]``
    (int32): back off on ``found_inf[0] != 0``, else count and grow every ``growth_interval``
    successful steps, never to a non-finite value (:func:`amp_scalar.next_scale`)."""
    scale[0], growth_tracker[0] = amp_scalar.next_scale(
        scale[0], growth_tracker[0], found_inf[0], growth_factor, backoff_factor, growth_interval
    )
