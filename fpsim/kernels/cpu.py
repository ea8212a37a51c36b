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
    fast = (
        same
        and scalar.nearest_even_fast_ok(src_m, src_b, fmt_m, fmt_b)
        and scalar.fits_container_range(src_e, src_b, fmt_e, fmt_b, fmt_fn)
    )
    if mode == scalar.NEAREST_EVEN and fast:
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
    encode = src_fn == 0 and dst_e == fmt_e and dst_m == fmt_m and dst_b == fmt_b
    encode_fast = (
        encode
        and scalar.nearest_even_fast_ok(src_m, src_b, fmt_m, fmt_b)
        and scalar.fits_container_range(src_e, src_b, fmt_e, fmt_b, fmt_fn)
    )
    if mode == scalar.NEAREST_EVEN and encode_fast:
        # to_bits: the branch-free rounding, then the branch-free move to the format's layout
        if fmt_e == src_e and fmt_b == src_b and fmt_fn == 0 and subnormals == 1 and saturate == 0:
            for i in range(s.size):  # bf16, tf32 from float32: add and mask, then drop the zeros
                r = scalar.round_nearest_even_same_range(s[i], src_e, src_m, fmt_m)
                o[i] = r >> (src_m - fmt_m)  # the arithmetic shift keeps the sign bit in place
            return
        max_pat, ovf_pat, inf_pat, nan_pat, low_pat = scalar.nearest_even_constants(
            src_e, src_m, src_b, fmt_e, fmt_m, fmt_b, fmt_fn, subnormals, saturate
        )
        for i in range(s.size):
            r = scalar.round_nearest_even_bits(
                s[i], src_e, src_m, src_b, fmt_m, fmt_b, max_pat, ovf_pat, inf_pat, nan_pat, low_pat
            )
            o[i] = scalar.container_to_code(r, src_e, src_m, src_b, fmt_e, fmt_m, fmt_b, fmt_fn)
        return
    # from_bits reads codes (src) through the container (fmt = dst): exact, so mode is moot
    decode = fmt_e == dst_e and fmt_m == dst_m and fmt_b == dst_b and fmt_fn == dst_fn
    decode = decode and src_fn == 0 and dst_fn == 0 and src_e == dst_e and src_b == dst_b
    if decode and dst_m >= src_m and subnormals == 1 and saturate == 0:
        for i in range(s.size):  # bf16/tf32 into float32: append zero fraction bits
            o[i] = scalar.code_to_container_same_range(s[i], src_e, src_m, dst_m)
        return
    for i in range(s.size):
        rand = scalar.random62(seed, start + i) if mode == scalar.STOCHASTIC else 0
        # int(): a signed int8/16/32 code is sign-extended, which is the two's-complement
        # reading convert takes; storing into a narrower dst keeps the low bits, the code.
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
    """Run ``scalar.convert`` on every element of ``src`` (bit patterns) into ``dst``.

    ``src`` and ``dst``: C-contiguous 1-D signed integer arrays (int8/16/32/64) of one size,
    each pattern read as a two's-complement integer of its width; a code written into a
    narrower ``dst`` keeps its low bits (the code). ``params`` is ``src_layout + fmt +
    dst_layout + (mode, subnormals, saturate, seed)``; each layout is ``(exp_bits, man_bits,
    bias, fn)``. Small arrays skip the thread pool. numba compiles one specialisation per
    (src, dst) dtype pair that is used: (int32, int32) and (int64, int64) for rounding, the
    container and the code width for encoding and decoding.
    """
    params = tuple(int(p) for p in params)  # one int64 tuple type: one compilation
    if src.size >= PARALLEL_MIN:
        _convert_parallel(src, dst, params)
    else:
        _body_jit(src, dst, 0, src.size, params)


# ---- integers beyond 2^53 ----------------------------------------------------------------------
def _int_body(hi, lo, dst, start, stop, params):
    fmt_e, fmt_m, fmt_b, fmt_fn, mode, subnormals, saturate, seed = params
    for i in range(start, stop):
        rand = scalar.random62(seed, i) if mode == scalar.STOCHASTIC else 0
        # fmt: off
        dst[i] = scalar.add_rounded(hi[i], lo[i], fmt_e, fmt_m, fmt_b, fmt_fn,
                                    mode, subnormals, saturate, rand)
        # fmt: on


_int_body_jit = njit(cache=True, nogil=True)(_int_body)


@njit(parallel=True, cache=True, nogil=True)
def _int_parallel(hi, lo, dst, params):
    nblocks = (hi.size + BLOCK - 1) // BLOCK
    for b in prange(nblocks):
        _int_body_jit(hi, lo, dst, b * BLOCK, min((b + 1) * BLOCK, hi.size), params)


def round_integers(src: np.ndarray, dst: np.ndarray, params: tuple) -> None:
    """Round each integer of ``src`` (1-D int64 or uint64) *from its exact value* into ``dst``
    (1-D float64, the value of the result): ``params`` is ``fmt + (mode, subnormals,
    saturate, seed)``; the format has at most 51 fraction bits, or is binary64.

    float64 holds only 53 bits, so ``float(n)`` would round an integer such as 2^60 + 2^36 + 1
    once before the format rounds it again. Instead each n is split into two float64s whose sum
    is exactly n -- ``lo``, its low 11 bits, and ``hi = n - lo``, at most 53 significant bits --
    and ``scalar.add_rounded`` rounds that exact sum once (TwoSum + round to odd), in every mode.
    Element i of a stochastic rounding uses ``random62(seed, i)``, as :func:`convert_array` does.
    """
    low = src & src.dtype.type(2047)
    hi = (src - low).astype(np.float64)  # exact: a multiple of 2^11 below 2^64
    lo = low.astype(np.float64)
    params = tuple(int(p) for p in params)
    if src.size >= PARALLEL_MIN:
        _int_parallel(hi, lo, dst, params)
    else:
        _int_body_jit(hi, lo, dst, 0, src.size, params)


# ---- decoding by table -------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _gather(codes, table, dst, mask):
    for i in range(codes.size):
        dst[i] = table[codes[i] & mask]


def decode_table(codes: np.ndarray, table: np.ndarray, dst: np.ndarray) -> None:
    """``dst[i] = table[code i]``: decoding a format of at most 16 bits by looking each code up in
    the table of all its values (made once by :func:`convert_array`, so it is the same decoding).
    ``codes`` is a signed view of the codes (the mask undoes its sign extension)."""
    _gather(codes, table, dst, np.int64(table.size - 1))
