"""The pure-Python reference: ``scalar.convert`` run uncompiled, element by element.

Slow (about a microsecond per element) but it is literally the textbook code with no compiler
in between, so tests can check that the compiled kernels and the source agree.
"""

import numpy as np

from . import scalar


def convert_array(src: np.ndarray, dst: np.ndarray, params: tuple) -> None:
    """Same contract as :func:`fpsim.kernels.cpu.convert_array`."""
    *layouts, mode, subnormals, saturate, seed = params
    for i in range(src.size):
        rand = scalar.random62(seed, i) if mode == scalar.STOCHASTIC else 0
        dst[i] = scalar.convert(int(src[i]), *layouts, mode, subnormals, saturate, rand)
