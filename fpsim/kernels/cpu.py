"""numba CPU array kernels built from :mod:`fpsim.kernels.scalar`.

One kernel, :func:`convert_array`, does every array conversion (round, encode, decode): it maps
``scalar.convert`` over a 1-D integer view of the data. Specialisations are kept few on purpose
(numba compiles each distinct argument-type combination once, and ``cache=True`` keeps it on disk):
the source and destination are always C-contiguous 1-D ``int32`` or ``int64`` arrays and every
format is a record of plain ``int64`` (:class:`~fpsim.kernels.record.FormatRecord`, passed flat
through the parallel loops), so one compiled kernel serves every format and mode.

Nothing is compiled at import time; the first call compiles (or loads the cache).

Speed: rounding to nearest-even within a float32/float64 container (the default, and what every
simulated operation does) uses :func:`fpsim.kernels.nearest_float.round_nearest_even_float`
(float instructions, ~1 ns per element) where it is exact, else
``scalar.round_nearest_even_bits``, the branch-free integer form of the same rounding; both
vectorise. Other modes and conversions run ``scalar.convert``.
Both are tested against the oracles on the same inputs, and against each other.
"""

import numpy as np
from numba import njit, prange

from . import nearest_float, scalar, scalar_ops
from .record import flatten, unflatten

BLOCK = 4096  # elements per parallel task
# Arrays smaller than this run on the calling thread: waking numba's pool for them costs more
# than it saves, and in a training loop the pool would fight BLAS's threads for the cores.
PARALLEL_MIN = 1 << 18


def _body(src, dst, start, stop, params):
    """Convert src[start:stop] into dst[start:stop]; ``params`` as in :func:`convert_array`."""
    src_f, fmt, dst_f, mode, subnormals, saturate, seed = params
    # Work on slices indexed from 0: numba then knows every index is non-negative, drops the
    # negative-index wrap-around check, and can vectorise the loops (about 6x faster).
    s = src[start:stop]
    o = dst[start:stop]
    ieee_src = scalar.is_ieee_style(src_f)
    fast = mode == scalar.NEAREST_EVEN and ieee_src and scalar.nearest_even_fast_ok(src_f, fmt)
    float_form = (
        fast
        and nearest_float.nearest_even_float_ok(src_f, fmt)
        and nearest_float.float_container(s.itemsize, src_f)
    )
    # bf16, tf32 in a float32: the container's exponent range, so "add and mask" rounds
    same_range = (
        fmt.exp_bits == src_f.exp_bits
        and fmt.bias == src_f.bias
        and scalar.is_ieee_style(fmt)
        and subnormals == 1
        and saturate == 0
    )
    if fast and src_f == dst_f:
        if same_range:
            for i in range(s.size):
                o[i] = scalar.round_nearest_even_same_range(
                    s[i], src_f.exp_bits, src_f.man_bits, fmt.man_bits
                )
            return
        if float_form:  # float instructions: vectorised, ~1 ns per element
            kf = nearest_float.nearest_even_float_constants(fmt, subnormals, saturate)
            for i in range(s.size):
                y = nearest_float.round_nearest_even_float(nearest_float.container_value(s[i]), kf)
                o[i] = nearest_float.container_bits(y, s[i])
            return
        k = scalar.nearest_even_constants(src_f, fmt, subnormals, saturate)
        for i in range(s.size):  # branch-free: vectorised
            o[i] = scalar.round_nearest_even_bits(s[i], src_f, fmt.man_bits, fmt.bias, k)
        return
    if fast and fmt == dst_f:
        # to_bits: the branch-free rounding, then the branch-free move to the format's layout
        if same_range:
            for i in range(s.size):  # bf16, tf32 from float32: add and mask, then drop the zeros
                r = scalar.round_nearest_even_same_range(
                    s[i], src_f.exp_bits, src_f.man_bits, fmt.man_bits
                )
                o[i] = r >> (src_f.man_bits - fmt.man_bits)  # the arithmetic shift keeps the sign
            return
        if float_form:
            kf = nearest_float.nearest_even_float_constants(fmt, subnormals, saturate)
            for i in range(s.size):
                y = nearest_float.round_nearest_even_float(nearest_float.container_value(s[i]), kf)
                r = np.int64(nearest_float.container_bits(y, s[i]))  # sign-extended, as below
                o[i] = scalar.container_to_code(r, src_f, fmt)
            return
        k = scalar.nearest_even_constants(src_f, fmt, subnormals, saturate)
        for i in range(s.size):
            r = scalar.round_nearest_even_bits(s[i], src_f, fmt.man_bits, fmt.bias, k)
            o[i] = scalar.container_to_code(r, src_f, fmt)
        return
    # from_bits reads codes (src) through the container (fmt = dst): exact, so mode is moot
    decode = (
        fmt == dst_f
        and scalar.is_ieee_style(src_f)
        and scalar.is_ieee_style(dst_f)
        and src_f.exp_bits == dst_f.exp_bits
        and src_f.bias == dst_f.bias
        and dst_f.man_bits >= src_f.man_bits
    )
    if decode and subnormals == 1 and saturate == 0:
        for i in range(s.size):  # bf16/tf32 into float32: append zero fraction bits
            o[i] = scalar.code_to_container_same_range(
                s[i], src_f.exp_bits, src_f.man_bits, dst_f.man_bits
            )
        return
    for i in range(s.size):
        rand = scalar.random62(seed, start + i) if mode == scalar.STOCHASTIC else 0
        # int(): a signed int8/16/32 code is sign-extended, which is the two's-complement
        # reading convert takes; storing into a narrower dst keeps the low bits, the code.
        o[i] = scalar.convert(int(s[i]), src_f, fmt, dst_f, mode, subnormals, saturate, rand)


_body_jit = njit(cache=True, nogil=True)(_body)


@njit(cache=True, nogil=True)
def _body_flat(src, dst, start, stop, flat):
    """:func:`_body` with its records rebuilt from the flat tuple (see record.flatten)."""
    params = (unflatten(flat, 0), unflatten(flat, 10), unflatten(flat, 20),
              flat[30], flat[31], flat[32], flat[33])  # fmt: skip
    _body_jit(src, dst, start, stop, params)


@njit(parallel=True, cache=True, nogil=True)
def _convert_parallel(src, dst, flat):
    nblocks = (src.size + BLOCK - 1) // BLOCK
    for b in prange(nblocks):
        _body_flat(src, dst, b * BLOCK, min((b + 1) * BLOCK, src.size), flat)


def convert_array(src: np.ndarray, dst: np.ndarray, params: tuple) -> None:
    """Run ``scalar.convert`` on every element of ``src`` (bit patterns) into ``dst``.

    ``src`` and ``dst``: C-contiguous 1-D signed integer arrays (int8/16/32/64) of one size,
    each pattern read as a two's-complement integer of its width; a code written into a
    narrower ``dst`` keeps its low bits (the code). ``params`` is ``(src_layout, fmt,
    dst_layout, mode, subnormals, saturate, seed)``; each layout and the format a
    :class:`~fpsim.kernels.record.FormatRecord`. Small arrays skip the thread pool. numba
    compiles one specialisation per (src, dst) dtype pair that is used: (int32, int32) and
    (int64, int64) for rounding, the container and the code width for encoding and decoding.
    """
    flat = flatten(params)  # one int64 tuple type: one compilation for every format
    if src.size >= PARALLEL_MIN:
        _convert_parallel(src, dst, flat)
    else:
        _body_flat(src, dst, 0, src.size, flat)


# ---- integers beyond 2^53 ----------------------------------------------------------------------
def _int_body(hi, lo, dst, start, stop, flat):
    fmt = unflatten(flat, 0)
    mode, subnormals, saturate, seed = flat[10], flat[11], flat[12], flat[13]
    for i in range(start, stop):
        rand = scalar.random62(seed, i) if mode == scalar.STOCHASTIC else 0
        dst[i] = scalar_ops.add_rounded(hi[i], lo[i], fmt, mode, subnormals, saturate, rand)


_int_body_jit = njit(cache=True, nogil=True)(_int_body)


@njit(parallel=True, cache=True, nogil=True)
def _int_parallel(hi, lo, dst, flat):
    nblocks = (hi.size + BLOCK - 1) // BLOCK
    for b in prange(nblocks):
        _int_body_jit(hi, lo, dst, b * BLOCK, min((b + 1) * BLOCK, hi.size), flat)


def round_integers(src: np.ndarray, dst: np.ndarray, params: tuple) -> None:
    """Round each integer of ``src`` (1-D int64 or uint64) *from its exact value* into ``dst``
    (1-D float64, the value of the result): ``params`` is ``(fmt, mode, subnormals,
    saturate, seed)`` with ``fmt`` a FormatRecord; the format has at most 51 fraction bits, or
    is binary64.

    float64 holds only 53 bits, so ``float(n)`` would round an integer such as 2^60 + 2^36 + 1
    once before the format rounds it again. Instead each n is split into two float64s whose sum
    is exactly n -- ``lo``, its low 11 bits, and ``hi = n - lo``, at most 53 significant bits --
    and ``scalar_ops.add_rounded`` rounds that exact sum once (TwoSum + round to odd), in every
    mode.
    Element i of a stochastic rounding uses ``random62(seed, i)``, as :func:`convert_array` does.
    """
    low = src & src.dtype.type(2047)
    hi = (src - low).astype(np.float64)  # exact: a multiple of 2^11 below 2^64
    lo = low.astype(np.float64)
    flat = flatten(params)
    if src.size >= PARALLEL_MIN:
        _int_parallel(hi, lo, dst, flat)
    else:
        _int_body_jit(hi, lo, dst, 0, src.size, flat)


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
