"""numba CPU kernels for :mod:`fpsim.arith`, built from the scalar operations in
:mod:`fpsim.kernels.scalar` (``arith_op``, ``add_rounded``, ``round_value``, ...) and the
reduction of :mod:`fpsim.kernels.reduce`.

Each kernel is compiled once for every format and mode (format parameters are plain int64
arguments; ``cache=True`` keeps them on disk):

* :func:`count_not_in_format` -- how many values of an array are not values of a format (the
  input check of every operation), one kernel for the branch-free form and one for the rest;
* :func:`elementwise` -- one operation per element, parallel over blocks of elements;
* :func:`matmul` -- ``out[b, i, j] = sum_k A[b, i, k] * B[b, k, j]`` reduced in the order and
  with the steps of :mod:`fpsim.kernels.reduce` (sequential, pairwise, a tensor core's block
  FMA), one row ``(b, i)`` at a time with its columns as lanes; ``sum`` and ``dot`` are this
  kernel with a sum's parameters or a single row. Each output element is reduced in its own
  fixed order, so the result does not depend on the thread count. Four kernels run it (the
  fast sequential form in nearest even, the other deterministic modes, stochastic rounding;
  the block FMA; everything else), so that a call compiles only what it runs.

Parallelism. Reductions and the large input checks run on a pool of Python threads
(:func:`_thread_pool`, one per core) calling kernels that release the GIL, each on a chunk of
rows; the elementwise kernels use numba's ``prange``. Below ``PARALLEL_MIN`` elements of work
everything runs on the calling thread.

Speed. In the default mode (round to nearest even) the elementwise kernels and the input check
use the branch-free forms: the float64 stand-in of the exact result
(``scalar_ops.stand_in_nearest``: two_sum + round-to-odd, the product, the quotient, the root) and
``scalar.round_nearest_even_bits``, which LLVM vectorises; they are exact only where
``scalar.nearest_even_fast_ok`` holds. The reductions' fast forms are
:mod:`fpsim.kernels.fastround` (rounding with float instructions, every deterministic mode and
stochastic rounding) and, where innocuous, the plain float64 sum (see
:func:`fpsim.kernels.reduce.plain_add_innocuous`). Every other format and mode runs the general
``scalar_ops.arith_op`` / ``scalar_ops.add_rounded`` / ``scalar.round_value`` per element, which go
through ``scalar.convert``. Both paths are tested against exact rational arithmetic and against
each other.

Accumulators. A partial sum and a term are float64s whose exact sum can lie beyond float64
(terms of fp64 inputs, products near 2^1024) while still being finite: ``scalar_ops.add_rounded``
then rounds ``±F64_MAX`` in place of the float64 sum's inf, a correct stand-in because every
accumulator fpsim accepts (other than binary64, which ``add_rounded`` handles through
``scalar_ops.add_float64``) has values below 2^1023: both overflow it in every mode. The fast forms
are used only where no partial sum can overflow float64 (products below 2^1021).

Stochastic rounding draws ``scalar.random62(seed, index)`` with a documented index per rounding
(see :func:`fpsim.kernels.reduce`), identical on the CPU, the GPU and the pure-Python reference.

numba keys its on-disk cache on this file: after editing ``scalar.py``, ``fastround.py`` or
``reduce.py`` alone, clear it (``make clean-cache``).

All kernels take float32 or float64 arrays (one dtype per call); they compute in float64.
"""

import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from . import block_fast, nearest_float, reduce, reduce_fast, scalar, scalar_ops
from .record import FLOAT64, FormatRecord, unflatten

BLOCK = 16384  # elements per parallel task (elementwise kernels)
# Below this many elements one thread is faster than waking the pool: on a small or busy machine
# every parallel region also waits for its slowest thread's time slice.
PARALLEL_MIN = 1 << 20

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _thread_pool(nthreads: int) -> ThreadPoolExecutor:
    """The process's pool of worker threads for the GIL-free kernels (made on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=nthreads, thread_name_prefix="fpsim")
    return _pool


@register_jitable
def _constants(fmt, subnormals, saturate):
    """``scalar.nearest_even_constants`` in float64 behind an ordinary call (inlining that
    function twice into one kernel trips a numba IR check); computed once per block, so the
    call is free."""
    return scalar.nearest_even_constants(FLOAT64, fmt, subnormals, saturate)


@register_jitable
def _rne(t, fmt, k):
    """Round the float64 ``t`` to the format, nearest even, branch-free (float64 result); ``k``
    is :func:`_constants`."""
    bits = scalar.round_nearest_even_bits(
        scalar.float64_to_bits(t), FLOAT64, fmt.man_bits, fmt.bias, k
    )
    return scalar.bits_to_float64(bits)


@register_jitable
def _fast_ok(fmt):
    """Whether the branch-free nearest-even rounding is exact for this format in float64."""
    return scalar.nearest_even_fast_ok(FLOAT64, fmt)


def _record(p) -> FormatRecord:
    """A format record of Python ints (one numba type for every format)."""
    if type(p) is FormatRecord:
        return p  # Format.record: already one (the common case, on every operation)
    return FormatRecord(*(int(v) for v in p))


@functools.lru_cache(maxsize=256)
def _check_forms(fmt: FormatRecord) -> tuple[bool, bool]:
    """Whether the float form, and the integer form, of nearest even are exact for the format
    in a float64 (decided once per format: the checks run on every operation)."""
    return (bool(nearest_float.nearest_even_float_ok(FLOAT64, fmt)),
            bool(scalar.nearest_even_fast_ok(FLOAT64, fmt)))  # fmt: skip


@functools.lru_cache(maxsize=256)
def _float_constants(fmt: FormatRecord) -> tuple:
    """``nearest_float.nearest_even_float_constants(fmt, 1, 0)``, computed in Python."""
    return tuple(float(v) for v in nearest_float.nearest_even_float_constants(fmt, 1, 0))


# ---- input check -------------------------------------------------------------------------------
@register_jitable
def _count_bad_float(s, kf):
    """How many non-NaN elements of ``s`` are not values of the format: rounding to nearest
    changes exactly those (NaN is a value of every format). Float-instruction form (~1 ns per
    value), ``kf`` the format's ``nearest_float.nearest_even_float_constants(fmt, 1, 0)``;
    needs ``nearest_float.nearest_even_float_ok(FLOAT64, fmt)``."""
    bad = 0
    for i in range(s.size):
        bad += nearest_float.not_in_format_float(np.float64(s[i]), kf)
    return bad


@register_jitable
def _count_bad_fast(s, fmt):
    """:func:`_count_bad_float` in the branch-free integer form; needs ``_fast_ok(fmt)``."""
    bad = 0
    kc = _constants(fmt, 1, 0)
    for i in range(s.size):
        v = np.float64(s[i])
        b = scalar.float64_to_bits(v)
        r = scalar.round_nearest_even_bits(b, FLOAT64, fmt.man_bits, fmt.bias, kc)
        bad += (r != b) & (v == v)
    return bad


@register_jitable
def _count_bad_general(s, fmt):
    """:func:`_count_bad_float` for every format, through ``scalar.convert``."""
    bad = 0
    for i in range(s.size):
        v = np.float64(s[i])
        r = scalar.round_value(v, fmt, scalar.NEAREST_EVEN, 1, 0, 0)
        bad += (scalar.float64_to_bits(r) != scalar.float64_to_bits(v)) & (v == v)
    return bad


@register_jitable
def _count_bad(s, fmt):
    """The input check, in the fastest form that is exact for the format."""
    if nearest_float.nearest_even_float_ok(FLOAT64, fmt):
        return _count_bad_float(s, nearest_float.nearest_even_float_constants(fmt, 1, 0))
    if _fast_ok(fmt):
        return _count_bad_fast(s, fmt)
    return _count_bad_general(s, fmt)


# One kernel per form, so that checking fp16/bf16/fp8 inputs compiles only the float form.
@njit(cache=True, nogil=True, error_model="numpy")
def _count_float(x, start, stop, kf):
    return _count_bad_float(x[start:stop], kf)


@njit(cache=True, nogil=True, error_model="numpy")
def _count_fast(x, start, stop, fmt):
    return _count_bad_fast(x[start:stop], fmt)


@njit(cache=True, nogil=True, error_model="numpy")
def _count_general(x, start, stop, fmt):
    return _count_bad_general(x[start:stop], fmt)


def count_not_in_format(x: np.ndarray, fmt_params: tuple) -> int:
    """Number of non-NaN elements of the contiguous 1-D float32/float64 array ``x`` that are not
    exactly values of the format (a FormatRecord) (any format; every float64
    is a binary64 value, so callers skip binary64)."""
    fmt = _record(fmt_params)
    float_ok, fast_ok = _check_forms(fmt)
    kernel = _count_float if float_ok else _count_fast if fast_ok else _count_general
    if float_ok:  # its constants made here: the kernel then compiles no format-record code
        fmt = _float_constants(fmt)
    if x.size < PARALLEL_MIN:
        return int(kernel(x, 0, x.size, fmt))
    nthreads = _threads() or 1
    if nthreads == 1:
        return int(kernel(x, 0, x.size, fmt))
    pool = _thread_pool(nthreads)
    bounds = [x.size * c // (4 * nthreads) for c in range(4 * nthreads + 1)]
    futures = [pool.submit(kernel, x, bounds[c], bounds[c + 1], fmt) for c in range(4 * nthreads)]
    return int(sum(f.result() for f in futures))


# ---- round to nearest even, one thread (small arrays) ------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def _round_nearest_float(x, out, fmt):
    kf = nearest_float.nearest_even_float_constants(fmt, 1, 0)
    for i in range(x.size):
        out[i] = nearest_float.round_nearest_even_float(np.float64(x[i]), kf)


@njit(cache=True, nogil=True, error_model="numpy")
def _round_nearest_body(x, out, fmt):
    if _fast_ok(fmt):
        kc = _constants(fmt, 1, 0)
        for i in range(x.size):
            out[i] = _rne(np.float64(x[i]), fmt, kc)
    else:
        ne = scalar.NEAREST_EVEN
        for i in range(x.size):
            out[i] = scalar.round_value(np.float64(x[i]), fmt, ne, 1, 0, 0)


def round_nearest(x: np.ndarray, out: np.ndarray, fmt_params: tuple) -> None:
    """``out[i] = x[i]`` rounded to nearest even in the format, on one thread: for the arrays
    too small for the thread pool of :func:`fpsim.round_to`. ``x`` and ``out``: C-contiguous
    1-D float32/float64 arrays of one size (``out`` float64 where the format does not fit in
    float32)."""
    fmt = _record(fmt_params)
    if _check_forms(fmt)[0]:
        _round_nearest_float(x, out, fmt)
    else:
        _round_nearest_body(x, out, fmt)


# ---- elementwise -------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def _ew_body(op, a, b, c, out, start, stop, fmt_t, mode, subn, sat, seed, nchk):
    """out[i] = op(a[i], b[i], c[i]) rounded to the format, for start <= i < stop.

    Returns how many of the first ``nchk`` operands' elements are not values of the format (the
    input check, fused into the same pass; 0 when ``nchk == 0``).
    """
    fmt = unflatten(fmt_t, 0)  # the record travels flat through the parallel loop
    x = a[start:stop]
    y = b[start:stop]
    z = c[start:stop]
    o = out[start:stop]
    n = x.size
    bad = 0
    if nchk >= 1:
        bad += _count_bad(x, fmt)
    if nchk >= 2:
        bad += _count_bad(y, fmt)
    if nchk >= 3:
        bad += _count_bad(z, fmt)
    if mode == scalar.NEAREST_EVEN and _fast_ok(fmt):
        kc = _constants(fmt, subn, sat)
        # One loop per operation (the operation is loop-invariant): each is branch-free and
        # vectorises.
        if (op == scalar_ops.OP_ADD or op == scalar_ops.OP_SUB) and fmt.man_bits <= 24:
            # Nearest-even only: when both operands are p-bit values and 53 >= 2p + 2, rounding
            # to nearest in float64 and then again to p bits equals rounding the exact sum once
            # (Figueroa, "When is double rounding innocuous?", SIGNUM 1995): the float64 sum is
            # a correct stand-in, with no TwoSum needed. (Directed and stochastic modes, and
            # sums of operands of other formats -- accumulators -- still need round-to-odd.)
            sgn = 1.0 if op == scalar_ops.OP_ADD else -1.0
            for i in range(n):
                t = np.float64(x[i]) + sgn * np.float64(y[i])
                o[i] = _rne(t, fmt, kc)
        elif op == scalar_ops.OP_ADD:
            for i in range(n):
                t = scalar.add_odd(np.float64(x[i]), np.float64(y[i]))
                o[i] = _rne(t, fmt, kc)
        elif op == scalar_ops.OP_SUB:
            for i in range(n):
                t = scalar.add_odd(np.float64(x[i]), -np.float64(y[i]))
                o[i] = _rne(t, fmt, kc)
        elif op == scalar_ops.OP_MUL:
            for i in range(n):
                t = np.float64(x[i]) * np.float64(y[i])
                o[i] = _rne(t, fmt, kc)
        elif op == scalar_ops.OP_FMA:
            for i in range(n):
                t = scalar.add_odd(np.float64(x[i]) * np.float64(y[i]), np.float64(z[i]))
                o[i] = _rne(t, fmt, kc)
        elif op == scalar_ops.OP_DIV:
            for i in range(n):
                t = scalar_ops.div_float64(np.float64(x[i]), np.float64(y[i]))
                o[i] = _rne(t, fmt, kc)
        else:
            for i in range(n):
                t = scalar_ops.sqrt_float64(np.float64(x[i]))
                o[i] = _rne(t, fmt, kc)
        return bad
    for i in range(n):
        rand = scalar.random62(seed, start + i) if mode == scalar.STOCHASTIC else 0
        o[i] = scalar_ops.arith_op(
            op,
            np.float64(x[i]),
            np.float64(y[i]),
            np.float64(z[i]),
            fmt,
            mode,
            subn,
            sat,
            rand,
        )
    return bad


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def _ew_parallel(op, a, b, c, out, fmt_t, mode, subn, sat, seed, nchk):
    nblocks = (a.size + BLOCK - 1) // BLOCK
    bad = np.zeros(nblocks, np.int64)
    for blk in prange(nblocks):
        bad[blk] = _ew_body(
            op,
            a,
            b,
            c,
            out,
            blk * BLOCK,
            min((blk + 1) * BLOCK, a.size),
            fmt_t,
            mode,
            subn,
            sat,
            seed,
            nchk,
        )
    return bad.sum()


def elementwise(op: int, a, b, c, out, fmt_params: tuple, mode, subnormals, saturate, seed,
                check: int = 0) -> int:  # fmt: skip
    """``out[i] = op(a[i], b[i], c[i])`` correctly rounded to the format.

    ``a, b, c, out``: C-contiguous 1-D arrays of one dtype (float32 or float64) and one size
    (pass ``a`` for operands an operation does not use). ``op``: ``scalar.OP_*``.
    ``fmt_params``: the format's FormatRecord. Element ``i`` of a stochastic rounding
    uses ``random62(seed, i)``, as :func:`fpsim.round_to` does. ``check``: how many of the
    operands ``a, b, c`` to check, in the same pass, for values that are not values of the
    format (not for binary64, whose values every float64 is); returns the number found (the
    results are then meaningless).
    """
    args = (int(op), a, b, c, out, tuple(_record(fmt_params)))
    args += (int(mode), int(subnormals), int(saturate), int(seed), int(check))
    if a.size >= PARALLEL_MIN:
        return int(_ew_parallel(*args))
    return int(_ew_body(*args[:5], 0, a.size, *args[5:]))


# ---- reductions: matmul, dot, sum ----------------------------------------------------------------
from . import lanes32, lanes32_stochastic  # noqa: E402  (the float32-lane kernels)
from .fastround import fast_round_constants  # noqa: E402

# One kernel per kind of reduction, so that a call compiles only what it runs: the fast
# sequential form with float32 lanes (fp32/fp16/bf16 accumulators of inputs float32 holds
# exactly, in nearest even and, for fp16/bf16, the directed modes and stochastic rounding: the
# common case, see lanes32 and lanes32_stochastic), in nearest even with float64 lanes (no
# scalar.convert, no other mode), in the other deterministic modes, stochastic rounding, the
# block FMA, and every other order and mode. Each reduces rows r0 <= r < r1 of the result (row r is
# out[r // n, r % n, :]) with all the row's columns as lanes, and releases the GIL: rows run in
# parallel on a pool of Python threads (no second thread pool beside the BLAS's, and no
# parallel-loop compilation).
# One float32-lane kernel per kind (accumulator and mode): each compiles only its own loops.
# (numba calls module-level functions, not a dict's entries: one global per kind)
_L32_FP32, _L32_FP16, _L32_BF16 = (lanes32.ROWS[k] for k in (lanes32.FP32, lanes32.FP16,
                                                              lanes32.BF16))  # fmt: skip
_L32_FP16_TZ, _L32_FP16_UP, _L32_FP16_DOWN = (
    lanes32.ROWS[k] for k in (lanes32.FP16_TOWARD_ZERO, lanes32.FP16_UP, lanes32.FP16_DOWN))
_L32_BF16_TZ, _L32_BF16_UP, _L32_BF16_DOWN = (
    lanes32.ROWS[k] for k in (lanes32.BF16_TOWARD_ZERO, lanes32.BF16_UP, lanes32.BF16_DOWN))


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_lanes32_fp32(A, B, out, KO, unit, r0, r1):
    _L32_FP32(A, B, out, KO, unit, r0, r1)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_lanes32_fp16(A, B, out, KO, unit, r0, r1):
    _L32_FP16(A, B, out, KO, unit, r0, r1)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_lanes32_bf16(A, B, out, KO, unit, r0, r1):
    _L32_BF16(A, B, out, KO, unit, r0, r1)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_lanes32_fp16_toward_zero(A, B, out, KO, unit, r0, r1):
    _L32_FP16_TZ(A, B, out, KO, unit, r0, r1)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_lanes32_fp16_up(A, B, out, KO, unit, r0, r1):
    _L32_FP16_UP(A, B, out, KO, unit, r0, r1)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_lanes32_fp16_down(A, B, out, KO, unit, r0, r1):
    _L32_FP16_DOWN(A, B, out, KO, unit, r0, r1)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_lanes32_bf16_toward_zero(A, B, out, KO, unit, r0, r1):
    _L32_BF16_TZ(A, B, out, KO, unit, r0, r1)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_lanes32_bf16_up(A, B, out, KO, unit, r0, r1):
    _L32_BF16_UP(A, B, out, KO, unit, r0, r1)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_lanes32_bf16_down(A, B, out, KO, unit, r0, r1):
    _L32_BF16_DOWN(A, B, out, KO, unit, r0, r1)


_LANES32_KERNELS = {
    lanes32.FP32: _rows_lanes32_fp32, lanes32.FP16: _rows_lanes32_fp16,
    lanes32.BF16: _rows_lanes32_bf16,
    lanes32.FP16_TOWARD_ZERO: _rows_lanes32_fp16_toward_zero,
    lanes32.FP16_UP: _rows_lanes32_fp16_up, lanes32.FP16_DOWN: _rows_lanes32_fp16_down,
    lanes32.BF16_TOWARD_ZERO: _rows_lanes32_bf16_toward_zero,
    lanes32.BF16_UP: _rows_lanes32_bf16_up, lanes32.BF16_DOWN: _rows_lanes32_bf16_down,
}  # fmt: skip


# The float32-lane kernels of stochastic rounding (fp16 and bf16 accumulators).
_L32_FP16_SR, _L32_BF16_SR = (lanes32_stochastic.ROWS[k] for k in (lanes32.FP16_STOCHASTIC,
                                                                    lanes32.BF16_STOCHASTIC))


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_lanes32_fp16_stochastic(A, B, out, P, r0, r1):
    _L32_FP16_SR(A, B, out, P, r0, r1)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_lanes32_bf16_stochastic(A, B, out, P, r0, r1):
    _L32_BF16_SR(A, B, out, P, r0, r1)


_LANES32_STOCHASTIC_KERNELS = {lanes32.FP16_STOCHASTIC: _rows_lanes32_fp16_stochastic,
                               lanes32.BF16_STOCHASTIC: _rows_lanes32_bf16_stochastic}


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_nearest(A, B, out, P, r0, r1):
    m = out.shape[2]
    W = np.empty((3, max(min(m, reduce_fast.LANES), 1)))  # nearest_row goes in tiles of LANES
    n = out.shape[1]
    for r in range(r0, r1):
        reduce_fast.nearest_row(A, B, out, r // n, r % n, 0, m, W, P)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_directed(A, B, out, P, r0, r1):
    m = out.shape[2]
    W = np.empty((3, max(min(m, reduce_fast.LANES), 1)))  # directed_row goes in tiles of LANES
    n = out.shape[1]
    for r in range(r0, r1):
        reduce_fast.directed_row(A, B, out, r // n, r % n, 0, m, W, P)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_stochastic(A, B, out, P, r0, r1):
    m = out.shape[2]
    lanes = max(min(m, reduce_fast.LANES), 1)  # stochastic_row goes in tiles of LANES
    W = np.empty((5, lanes))
    U = np.empty((4, lanes), np.uint32)
    n = out.shape[1]
    for r in range(r0, r1):
        reduce_fast.stochastic_row(A, B, out, r // n, r % n, 0, m, W, U, P)


@njit(cache=True, nogil=True, error_model="numpy")
def _block_operand(B, BF, PB, P):
    reduce.block_operand(B, BF, PB, P)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_block(A, BF, PB, C, out, P, r0, r1):
    m = out.shape[2]
    W = np.empty((reduce.NW, max(m, 1)))
    n = out.shape[1]
    for r in range(r0, r1):
        reduce.block_row_pre(A, BF, PB, C, out, r // n, r % n, 0, m, W, P, True)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_block_fused(A, BF, PB, C, out, P, r0, r1):
    W = np.empty((reduce.NW, max(min(out.shape[2], block_fast.TILE), 1)))
    n = out.shape[1]
    for r in range(r0, r1):
        block_fast.fused_row(A, BF, PB, C, out, r // n, r % n, W, P)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_general(A, B, out, P, r0, r1):
    m = out.shape[2]
    K = A.shape[2]
    lanes = max(m, 1)
    W = np.empty((reduce.NW, lanes))
    levels = 1
    while (K >> levels) > 0:
        levels += 1
    ST = np.empty((levels, lanes) if P[reduce.I_ORDER] == reduce.PAIRWISE else (1, 1))
    LOG = np.empty((1, reduce.NLOG))
    n = out.shape[1]
    for r in range(r0, r1):
        reduce.general_row(A, B, out, r // n, r % n, 0, m, W, ST, LOG, P)


def _run_rows(kernel, args: tuple, nrows: int, work: int) -> None:
    """``kernel(*args, r0, r1)`` over all rows: on this thread for small work, else in chunks
    on a pool of threads (the kernels release the GIL)."""
    nthreads = _threads() or 1
    if nrows < 2 or work < PARALLEL_MIN or nthreads == 1:
        kernel(*args, 0, nrows)
        return
    pool = _thread_pool(nthreads)
    nchunks = min(nrows, 4 * nthreads)
    bounds = [nrows * c // nchunks for c in range(nchunks + 1)]
    futures = [pool.submit(kernel, *args, bounds[c], bounds[c + 1]) for c in range(nchunks)]
    for fut in futures:
        fut.result()


def matmul(A, B, out, params: tuple, C=None) -> None:
    """``out[b, i, j] = round_out(reduce_k A[b, i, k] * B[b, k, j])`` in the order and with the
    steps of ``params`` (``reduce.pack_params``; see :mod:`fpsim.kernels.reduce`).

    ``A``: (nb, n, K), ``B``: (nb, K, m) or None (a sum: the terms are A's values), both
    C-contiguous float64 (float32 where the parameters choose the float32-lane kernel, and B
    float32 or float64 for a block FMA, whose kernels read it once into float64); ``out``:
    (nb, n, m) float64; ``C``: None or the (nb, n, m) float64 starting accumulators of a
    block FMA model (``D = A B + C``). Every output element is reduced in its own fixed
    order, so the result does not depend on the thread count.
    """
    if B is None:
        B = np.ones((1, 1, 1))
    if C is None:
        C = np.zeros((1, 1, 1))
    P = np.asarray(params, dtype=np.int64)
    nrows = out.shape[0] * out.shape[1]
    work = nrows * A.shape[2] * max(out.shape[2], 1)
    fast = reduce.fast_kind(P)
    if P[reduce.I_ORDER] == reduce.BLOCK:
        BF, PB = np.empty(B.shape), np.empty(B.shape)  # (B: float32 or float64)
        _block_operand(B, BF, PB, P)  # B's part of the alignment, once for all rows
        kernel = _rows_block_fused if block_fast.fused_ok(P) else _rows_block
        _run_rows(kernel, (A, BF, PB, C, out, P), nrows, work)
    elif fast == 4 or (fast == 5 and 2 * A.shape[2] < 1 << 32):  # (5: as 3, random_lanes)
        # float32 lanes: the parameters guarantee that float32 holds the inputs exactly.
        A32 = np.ascontiguousarray(A, dtype=np.float32)
        B32 = np.ascontiguousarray(B, dtype=np.float32)
        kind = int(P[reduce.I_LANES32])
        if fast == 5:
            _run_rows(_LANES32_STOCHASTIC_KERNELS[kind], (A32, B32, out, P), nrows, work)
        else:
            outf = unflatten(P, reduce.I_OUT)
            KO = np.array(fast_round_constants(outf, P[reduce.I_SUBN], P[reduce.I_SAT]))
            _run_rows(_LANES32_KERNELS[kind], (A32, B32, out, KO, P[reduce.I_UNIT_B] == 1),
                      nrows, work)  # fmt: skip
    elif fast == 1:
        _run_rows(_rows_nearest, (A, B, out, P), nrows, work)
    elif fast == 2:
        _run_rows(_rows_directed, (A, B, out, P), nrows, work)
    elif fast == 3 and 2 * A.shape[2] < 1 << 32:  # random_lanes: the events' offsets in 32 bits
        _run_rows(_rows_stochastic, (A, B, out, P), nrows, work)
    else:
        _run_rows(_rows_general, (A, B, out, P), nrows, work)
