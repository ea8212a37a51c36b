"""numba CPU array kernels built from :mod:`fpsim.kernels.scalar`.

One kernel, :func:`convert_array`, does every array conversion (round, encode, decode): it maps
``scalar.convert`` over a 1-D integer view of the data. Specialisations are kept few on purpose
(numba compiles each distinct argument-type combination once, and ``cache=True`` keeps it on disk):
the source and destination are always C-contiguous 1-D ``int32`` or ``int64`` arrays and every
format parameter is a plain ``int64``, so one compiled kernel serves every format and mode.

Nothing is compiled at import time; the first call compiles (or loads the cache).

Speed: rounding to nearest-even within a container (the default, and what every simulated
operation does) uses ``scalar.round_nearest_even_bits``, the branch-free form of the same
rounding, which numba/LLVM vectorises; other modes and conversions run ``scalar.convert``.
Both are tested against the oracles on the same inputs, and against each other.
"""

import numpy as np
from numba import njit, prange

from . import scalar

BLOCK = 4096  # elements per parallel task
# Arrays smaller than this run on the calling thread: waking numba's pool for them costs more
# than it saves, and in a training loop the pool would fight BLAS's threads for the cores.
PARALLEL_MIN = 1 << 18


def _body(src, dst, start, stop, params):
    """Convert src[start:stop] into dst[start:stop]; ``params`` as in :func:`convert_array`."""
    # fmt: off
    (src_e, src_m, src_b, src_fn, fmt_e, fmt_m, fmt_b, fmt_fn,
     dst_e, dst_m, dst_b, dst_fn, mode, subnormals, saturate, seed) = params
    # fmt: on
    # Work on slices indexed from 0: numba then knows every index is non-negative, drops the
    # negative-index wrap-around check, and can vectorise the loops (about 6x faster).
    s = src[start:stop]
    o = dst[start:stop]
    same = src_fn == 0 and src_e == dst_e and src_m == dst_m and src_b == dst_b
    if mode == scalar.NEAREST_EVEN and same and src_m > fmt_m:
        if fmt_e == src_e and fmt_b == src_b and fmt_fn == 0 and subnormals == 1 and saturate == 0:
            for i in range(s.size):  # bf16, tf32 in float32: the container's exponent range
                o[i] = scalar.round_nearest_even_same_range(s[i], src_e, src_m, fmt_m)
            return
        max_pat, ovf_pat, inf_pat, nan_pat, low_pat = scalar.nearest_even_constants(
            src_e, src_m, src_b, fmt_e, fmt_m, fmt_b, fmt_fn, subnormals, saturate
        )
        for i in range(s.size):  # branch-free: vectorised
            o[i] = scalar.round_nearest_even_bits(
                s[i], src_e, src_m, src_b, fmt_m, fmt_b, max_pat, ovf_pat, inf_pat, nan_pat, low_pat
            )
        return
    for i in range(s.size):
        rand = scalar.random62(seed, start + i) if mode == scalar.STOCHASTIC else 0
        # fmt: off
        o[i] = scalar.convert(int(s[i]),
                              src_e, src_m, src_b, src_fn, fmt_e, fmt_m, fmt_b, fmt_fn,
                              dst_e, dst_m, dst_b, dst_fn, mode, subnormals, saturate, rand)
        # fmt: on


_body_jit = njit(cache=True, nogil=True)(_body)


@njit(parallel=True, cache=True, nogil=True)
def _convert_parallel(src, dst, params):
    nblocks = (src.size + BLOCK - 1) // BLOCK
    for b in prange(nblocks):
        _body_jit(src, dst, b * BLOCK, min((b + 1) * BLOCK, src.size), params)


def convert_array(src: np.ndarray, dst: np.ndarray, params: tuple) -> None:
    """Run ``scalar.convert`` on every element of ``src`` (int32/int64 bit patterns) into ``dst``.

    ``params`` is ``src_layout + fmt + dst_layout + (mode, subnormals, saturate, seed)``; each
    layout is ``(exp_bits, man_bits, bias, fn)``. Small arrays skip the thread pool.
    """
    params = tuple(int(p) for p in params)  # one int64 tuple type: one compilation
    if src.size >= PARALLEL_MIN:
        _convert_parallel(src, dst, params)
    else:
        _body_jit(src, dst, 0, src.size, params)
