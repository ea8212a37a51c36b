"""Simulated arithmetic: correctly rounded operations in any format, and sums, dot products and
matrix products with an accumulator precision of your choice.

>>> from fpsim import arith
>>> arith.add(1.0, 2.0**-11, "fp16")          # half an ulp above 1: a tie, rounds to even
1.0
>>> arith.add(1.0, 3 * 2.0**-12, "fp16")      # three quarters of an ulp: rounds up
1.0009765625
>>> ones = [1.0] * 4096
>>> arith.sum(ones, "fp16", acc="fp16"), arith.sum(ones, "fp16", acc="fp32")
(2048.0, 4096.0)

Elementwise operations
    :func:`add`, :func:`sub`, :func:`mul`, :func:`div`, :func:`sqrt`, :func:`fma`, :func:`neg`,
    :func:`abs` take values of a format ``fmt`` and return the exact mathematical result rounded
    *once* to ``fmt``, in any rounding mode (the arguments ``rounding``, ``subnormals``,
    ``saturate`` and ``seed`` mean what they mean for :func:`fpsim.round_to`). Operands
    broadcast like numpy; numpy results follow :mod:`fpsim.containers`' rule (the operands'
    dtype when every value of the format fits in it, else the smallest of float16, float32,
    float64 that holds it: float16 in, fp16 out gives float16); Python scalars in give a Python
    float out.

Inputs must be values of the format
    An operation "in fp16" takes fp16 operands; fpsim checks this (a vectorised pass, much
    cheaper than the operation) and raises ``ValueError`` naming the first offending value,
    rather than silently rounding the operand first -- which would be a second rounding the
    caller may not have meant. Pass ``round_inputs=True`` to round every operand to the format
    (nearest even, the usual cast) before the operation. NaN is accepted everywhere; ±inf
    wherever the format has infinities.

Why every result is exact
=========================
fpsim computes in float64 (53-bit significands) and must never round twice in a way that could
differ from rounding once. Let p be the format's precision (fp16: 11, bf16: 8, fp32: 24).

add, sub (p <= 51: every format but fp64)
    Knuth's TwoSum gives ``s = fl64(a + b)`` and the exact error ``e = (a + b) - s`` in six
    float64 operations, so ``a + b = s + e`` exactly. ``s`` is then *rounded to odd*: kept when
    ``e == 0``, else replaced by whichever of the two float64 neighbours of ``a + b`` has an odd
    last bit. Every value of a p-bit format, and every midpoint between two, has at most
    p + 1 <= 52 significant bits, so it is a float64 whose last bit is 0: rounding to odd never
    lands on such a point nor jumps over one, and its odd last bit remembers that the exact sum
    lies strictly between. Hence rounding the round-to-odd value once more to p <= 51 bits gives
    exactly the rounding of ``a + b`` itself, in every mode (Boldo & Melquiond, "Emulation of
    FMA and correctly rounded sums: proved algorithms using rounding to odd", IEEE Trans.
    Computers 57(4), 2008). TwoSum is exact for any two float64s, so the operands need not be
    format values for this to hold -- which is what makes accumulators work (below). In the
    default mode (nearest even) the elementwise kernel skips TwoSum when both operands are
    values of a format with p <= 25: rounding to nearest twice, first to float64, is then
    innocuous (53 >= 2p + 2; Figueroa, "When is double rounding innocuous?", 1995).
fma (``a * b + c``, p <= 25, exponent range below)
    The product of two p-bit significands has at most 2p <= 50 bits: ``a * b`` is exact in
    float64, and TwoSum + round-to-odd add ``c`` with one rounding, as for add. No hardware fma
    is needed.
mul (p <= 25, exponent range below)
    The float64 product is exact; rounding it once is the definition.
div, sqrt (p <= 25, i.e. 53 >= 2p + 2; div: exponent range below)
    The exact quotient or root ``q`` is rarely a float64, so fpsim rounds ``fl64(q)`` (round to
    nearest) instead. That is correct because ``q``, unless it *is* a format value or a
    midpoint (and then ``fl64(q) = q``), lies further than half a float64 ulp from every format
    value and midpoint ``g = G 2^k`` (G an integer below 2^(p+1)). For ``a/b`` with
    ``a = A 2^i``, ``b = B 2^j``, ``A, B < 2^p``: ``a/b - g = (A 2^(i-j) - G B 2^k) / B`` is a
    non-zero multiple of ``2^min(i-j, k)`` divided by ``B < 2^p``; if the minimum is k the
    distance exceeds ``2^(k-p)``, while half a float64 ulp near g is at most
    ``2^(k+p+1-54) <= 2^(k-p)`` once p <= 26 (the case ``i-j < k`` works the same way, with
    ``g < 2^(i-j+p+1)``). For the root, ``sqrt(a) - g = (a - g^2) / (sqrt(a) + g)``; the last
    bit of ``a`` lies above ``2^(2k)`` (the result has half a's exponent and p bits), so
    ``a - g^2`` is a non-zero multiple of ``2^(2k)``, divided by less than ``2^(k+p+2)``: more
    than ``2^(k-p-2)``, which beats half an ulp ``2^(k+p-53)`` when ``2p + 2 <= 53`` (where the
    result is a subnormal of the format its grid is coarser, and the bound only improves). Both
    bounds are relative: they need ``q`` in float64's normal range (below). ``fl64``
    is monotonic, so ``fl64(q)`` lies strictly on the same side of every format value and every
    midpoint as ``q``: round to nearest (either tie rule), toward zero, up and down all decide
    the same for both (Figueroa, "When is double rounding innocuous?", SIGNUM Newsletter 30(3),
    1995, proves the round-to-nearest case).
fp64 itself (add, sub and fp64 accumulators)
    ``fl64(a + b)`` is the round-to-nearest-even answer; TwoSum's exact error tells on which
    side of it the exact sum lies, so every other mode is ``s`` or its float64 neighbour on
    that side. mul/div/sqrt/fma in fp64 would need wider arithmetic: ``ValueError``.
Exponent range
    The arguments above need float64 to hold the intermediate: exactly (sums, products) or
    with all 53 bits (quotients, roots). Where some pair of values of a format breaks that,
    the operation refuses the format with a ``ValueError`` naming it, the operation and the
    reason -- never a silent wrong answer. With ``lo`` the exponent of the smallest subnormal
    (``emin - man_bits``) and ``emax`` that of the largest value, any bias:

    * add, sub, and accumulators: ``emax <= 1022``. A sum that overflows float64 then lies
      beyond max plus one quantum, so it overflows the format in every mode, as ``±F64_MAX``
      does, which is rounded in its place (see reductions below); with ``emax = 1023`` it
      could lie within a quantum of max (``max + y`` just below 2^1024), where stochastic
      rounding needs its exact distance from max. There is no lower limit, in any mode: a sum
      that falls in float64's subnormal range is exact (``e == 0``), so ``Format(11, 10,
      bias=1030)``, whose values reach down to 2^-1039, adds exactly, and stochastic rounding
      works with quanta down to 2^-1074 (``Format(5, 23, bias=1032)``, spacing 2^-1025 at max).
    * mul, fma, and the inputs of matmul/dot: ``lo >= -537`` and ``emax <= 511`` -- exactly
      the formats in which every product of two values is a float64 (from ``2^(2 lo) >=
      2^-1074`` to ``max^2 < 2^1024``). ``Format(11, 10)`` is refused: ``2^-1032 * 2^-1032`` is
      0 in float64, though rounded up it is 2^-1032. ``Format(10, 5)`` passes.
    * div: at most 9 exponent bits -- exactly the formats in which every quotient of two
      non-zero values (from min_sub/max to max/min_sub, a span that does not depend on the bias)
      lies in float64's normal range. ``Format(10, 5)`` is refused: ``max / min_sub = 63 *
      2^1021`` is inf in float64, where rounding toward zero must give max.
    * sqrt: any range (p <= 25): the root of any positive float64 lies in [2^-537, 2^512).
    * reductions: a partial sum plus a term (fp64 inputs to :func:`sum`, products near 2^1024)
      can overflow float64 though the exact sum is finite. It then lies beyond
      ``2^1024 - 2^970``, so it overflows every accumulator accepted above in every mode; the
      scalar addition (``scalar.add_rounded``) rounds ``±F64_MAX`` in its place (an inf would
      stay inf where rounding toward zero or ``saturate=True`` must give the accumulator's max).

    Every built-in format passes all of these except fp64 (add/sub and accumulation only).

Stochastic rounding
    rounds away from zero with probability ``ceil(f * 2^62) / 2^62``, f being the exact fraction
    of a quantum by which the exact result exceeds its lower neighbour (62 random bits per
    rounding, as :func:`fpsim.round_to`). For mul (exact product) and add/sub/fma (TwoSum gives
    the exact value as ``s + e`` and fpsim computes f from both with integer arithmetic) this is
    exact. For div and sqrt f is taken from ``fl64(q)``, which is within half a float64 ulp of
    ``q``: the probability may be off by at most ``2^(p-54)`` (fp32: 2^-30, fp16: 2^-43), and
    the expected result differs from the exact ``q`` by at most half a float64 ulp (relative
    2^-53). Element i of an elementwise operation uses ``random62(seed, i)``; reductions number
    their rounding events as documented in :func:`matmul`.

Reductions with an accumulator format
=====================================
:func:`sum`, :func:`dot` and :func:`matmul` take inputs in ``fmt``, round *every partial sum* to
the accumulator format ``acc`` and round the result once to ``out_fmt`` (default: ``fmt``).

* ``order="sequential"`` -- ``s = acc(t_0)``, then ``s = acc(s + t_k)`` for k = 1, 2, ... left
  to right: deterministic and bit-reproducible on any machine and thread count.
* ``order="pairwise"`` -- ``P(t_0..t_{n-1}) = acc(P(t_0..t_{h-1}) + P(t_h..t_{n-1}))`` with h the
  largest power of two below n (recursive halving; for n a power of two, a complete binary tree
  of adjacent pairs). Error bound ``|error| <= ceil(log2 n) u sum|t_k|`` to first order (u =
  unit roundoff of acc), against ``(n - 1) u sum|t_k|`` for sequential.
* ``order="blas"`` (:func:`matmul` only) -- numpy's float32 (``acc="fp32"``) or float64
  (``acc="fp64"``) BLAS: "fp32 accumulate, BLAS order". The BLAS rounds every partial sum to
  fp32 (round to nearest even) but chooses its own order (blocking, SIMD lanes, threads), so
  the result can differ from sequential in the last bits and between machines; it equals the
  sequential result whenever every partial sum is exact, and obeys the usual bound
  ``|error| <= gamma_K sum|a||b|`` (``gamma_K = K u / (1 - K u)``, u = 2^-24). Products are
  exact in float32 when 2p <= 24 (fp16, bf16, tf32, fp8 inputs; for bf16/tf32, products
  below 2^-149 or beyond the fp32 range are exact only where the BLAS fuses multiply and add,
  as OpenBLAS and MKL do on AVX2 machines); for fp32 inputs they are whatever the BLAS kernel
  does -- fused (exact) in OpenBLAS's matrix kernels, rounded to fp32 in its matrix-vector
  ones -- i.e. exactly numpy's float32 matmul (the bound then holds with ``gamma_{K+1}``).
  Needs the default rounding mode, subnormals and no saturation.
Products (``dot``, ``matmul``): ``products="exact"`` (default) adds the exact product a*b into
the accumulator with one rounding, as an fma or a tensor core does; ``products="rounded"``
rounds each product to ``acc`` first (a separate multiply and add in the accumulator's
precision).

Where a term first meets the accumulator follows the order. Sequentially the first term is
rounded to the accumulator alone, ``s = acc(t_0)`` -- what an fma chain started from zero
computes (``s = fma(a_0, b_0, 0)``), or loading the first input into an accumulator register
-- and every later term enters its addition unrounded, ``s = acc(s + t_k)``. Pairwise, the
leaves of the tree are the unrounded terms (``acc(t_0 + t_1)``), and a reduction over a single
term rounds that term to ``acc``. The two differ already for two terms: ``1 + 2^-11`` and
``2^-11`` in an fp16 accumulator (spacing 2^-10 at 1) give ``fp16(fp16(1 + 2^-11) + 2^-11) =
fp16(1 + 2^-11) = 1`` (two ties to even) sequentially, but ``fp16(1 + 2^-10) = 1 + 2^-10``
pairwise:

>>> x, ones = [1 + 2.0**-11, 2.0**-11], [1.0, 1.0]
>>> arith.dot(x, ones, "fp32", acc="fp16", out_fmt="fp32")
1.0
>>> arith.dot(x, ones, "fp32", acc="fp16", order="pairwise", out_fmt="fp32")
1.0009765625

An empty reduction (no terms) is +0.0 in every rounding mode, as in numpy and PyTorch (IEEE 754
defines no sign for it); a matmul with no rows or columns is an empty array of numpy's shape.

Defaults: ``acc="fp32"``; ``order="sequential"`` for :func:`sum` and :func:`dot`; for
:func:`matmul` ``order=None`` means "blas" when it is allowed -- acc fp32 or fp64, default
rounding, host arrays: fast, within a small factor of numpy's float32 matmul, which is what an
autodiff engine calling ``matmul(a, b, fmt, acc="fp32")`` for every product needs -- and
"sequential" otherwise (the exact-order numba kernels, about 1 GFLOP/s per core).

Back ends: numba CPU kernels (:mod:`fpsim.kernels.arith_cpu`) for host data, numba CUDA kernels
(:mod:`fpsim.kernels.arith_cuda`) for arrays with ``__cuda_array_interface__``; both run the
scalar code of :mod:`fpsim.kernels.scalar`, which also runs as plain Python in the teaching
helpers :func:`explain_op` and :func:`trace_sum`.
"""

from __future__ import annotations

import builtins
import decimal
import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from .containers import result_dtype
from .core import _as_container, _is_device_array, _mode_code, _seed_value, round_to
from .formats import Format, FormatLike, fp32, fp64, get_format
from .inspect import exact_decimal
from .kernels import scalar

__all__ = [
    "add",
    "sub",
    "mul",
    "div",
    "sqrt",
    "fma",
    "neg",
    "abs",
    "sum",
    "dot",
    "matmul",
    "explain_op",
    "trace_sum",
    "SumStep",
    "SumTrace",
    "ORDERS",
]

ORDERS = ("sequential", "pairwise", "blas")
_OP_NAMES = {
    scalar.OP_ADD: "add",
    scalar.OP_SUB: "sub",
    scalar.OP_MUL: "mul",
    scalar.OP_DIV: "div",
    scalar.OP_SQRT: "sqrt",
    scalar.OP_FMA: "fma",
}


# ---- formats and their preconditions -------------------------------------------------------------
def _params(f: Format) -> scalar.FormatRecord:
    return f.record


def _is_binary64(f: Format) -> bool:
    return f == fp64


def _require_add(f: Format, what: str = "add/sub in") -> None:
    """Formats in which fpsim adds exactly, in every rounding mode: p <= 51 (round-to-odd in
    float64) and a largest exponent <= 1022, or binary64."""
    if _is_binary64(f):
        return
    if f.man_bits > 50:
        raise ValueError(
            f"{what} {f.name} is not supported: exact addition through float64 needs a precision "
            f"of at most 51 bits (round-to-odd needs two spare bits), {f.name} has {f.precision}"
        )
    if f.emax > 1022:
        raise ValueError(
            f"{what} {f.name} is not supported: its values reach 2^{f.emax}, and sums of two "
            "could overflow float64 (the largest exponent must be <= 1022)"
        )


def _require_mul(f: Format, op: str) -> None:
    """Formats in which fpsim computes ``op`` exactly through float64 (see "Exponent range" in
    the module docstring): p <= 25 for all; products (mul, fma, matmul, dot) need every product
    of two values exact in float64, quotients (div) every quotient in float64's normal range;
    roots (sqrt) always are."""
    if f.precision > 25:
        raise ValueError(
            f"{op} in {f.name} is not supported: an exact {op} through float64 needs a precision "
            f"p <= 25 bits (53 >= 2p + 2), {f.name} has {f.precision}"
        )
    if op == "sqrt":
        return  # the root of any float64 lies in [2^-537, 2^512): float64's normal range
    lo = f.emin - f.man_bits  # f's values are multiples of 2^lo, and below 2^(emax + 1)
    if op == "div":
        q_min = Fraction(f.smallest_subnormal) / Fraction(f.max)
        if q_min < Fraction(1, 1 << 1022):  # then also max / min_sub > 2^1022
            raise ValueError(
                f"div in {f.name} is not supported: quotients of its values reach from "
                f"2^{_binade(q_min)} to 2^{-_binade(q_min)}, beyond float64's normal range "
                "(2^-1022 to 2^1024), where the float64 quotient is not a correct stand-in for "
                "the exact one (it loses bits, or overflows to inf); div takes formats with at "
                "most 9 exponent bits (any bias)"
            )
        return
    if 2 * lo < -1074 or f.emax > 511:
        raise ValueError(
            f"{op} in {f.name} is not supported: products of its values reach from 2^{2 * lo} to "
            f"2^{2 * f.emax + 1}, and float64 holds a product exactly only from 2^-1074 to below "
            "2^1024 (it needs a smallest subnormal >= 2^-537 and a largest exponent <= 511)"
        )


# ---- operands ----------------------------------------------------------------------------------
def _is_python_scalar(x: Any) -> bool:
    """Python numbers (bool, int, float, Fraction, Decimal): a Python float comes out, and they
    do not decide the container (as in numpy)."""
    return isinstance(x, (int, float, Fraction, decimal.Decimal))


def _is_device(x: Any) -> bool:
    mod = type(x).__module__ or ""
    return _is_device_array(x) or mod.startswith("numba.cuda") or mod.startswith("numba_cuda")


def _as_array(x: Any, name: str) -> tuple[np.ndarray, bool]:
    try:
        return _as_container(x)
    except TypeError as exc:
        raise TypeError(f"{name}: {exc}") from None
    except ValueError:
        # an integer or fraction float64 cannot hold: no format value is such a number
        raise ValueError(
            f"{name} holds a number that is not a value of any format (no float64 holds it "
            "exactly, e.g. an integer beyond 2^53 or 1/3); round it first with "
            "fpsim.round_to(x, fmt), or pass round_inputs=True"
        ) from None


def _check_values(arr: np.ndarray, f: Format, name: str) -> None:
    """Raise ValueError unless every non-NaN element of ``arr`` is a value of ``f``."""
    if _is_binary64(f) or arr.size == 0:
        return
    from .kernels import arith_cpu

    flat = _kernel_array(arr).reshape(-1)
    if arith_cpu.count_not_in_format(flat, _params(f)) == 0:
        return
    rounded = np.empty(flat.size, np.float64)
    arith_cpu.round_nearest(flat, rounded, _params(f))  # the rounding the check itself uses
    bad = np.flatnonzero((rounded != flat) & ~np.isnan(flat))
    i = int(bad[0])
    where = "" if arr.ndim == 0 else f" at index {np.unravel_index(i, arr.shape)}"
    v = float(flat[i])
    raise ValueError(
        f"{name} holds {len(bad)} value(s) that are not {f.name} values, e.g. {v!r}{where} "
        f"({f.name} rounds it to {float(rounded[i])!r}); operations in {f.name} take {f.name} "
        f"values: round them first with fpsim.round_to(x, {f.name!r}), or pass round_inputs=True"
    )


def _is_exact_input(x: Any) -> bool:
    """Input whose exact value float64 may not hold: Python/numpy integers, Fraction, Decimal,
    integer arrays."""
    if isinstance(x, (bool, np.bool_)):
        return False
    if isinstance(x, (numbers.Integral, Fraction, decimal.Decimal)):
        return True
    if isinstance(x, (list, tuple)):  # a list of Python ints: read as an integer array
        return np.asarray(x).dtype.kind in "iu"
    return isinstance(x, np.ndarray) and x.dtype.kind in "iu"


def _operand(
    x: Any, name: str, f: Format, round_inputs: bool, check: bool = True
) -> tuple[np.ndarray, bool]:
    """One operand as a float32/float64 array, checked to hold values of ``f`` (or rounded to
    ``f`` when ``round_inputs``); also whether it was a scalar."""
    if round_inputs and _is_exact_input(x):
        # integers beyond 2^53, Fraction, Decimal: rounded once from their exact value (through
        # float64 they would be rounded twice)
        src = np.asarray(x) if isinstance(x, (list, tuple)) else x
        return np.asarray(round_to(src, f), dtype=np.float64), np.ndim(x) == 0
    arr, is_scalar = _as_array(x, name)
    if round_inputs:
        src = arr if f.fits_in(arr.dtype) else arr.astype(np.float64)
        arr = np.asarray(round_to(src, f))
    elif check:
        _check_values(arr, f, name)
    return arr, is_scalar


def _container(arrs: list[np.ndarray], xs: tuple, f: Format) -> np.dtype:
    """float32 when every operand that is not a Python scalar is float32 and ``f`` fits in it
    (Python scalars do not vote, as in numpy); float64 otherwise."""
    f32 = np.dtype(np.float32)
    votes = [a.dtype for a, x in zip(arrs, xs, strict=True) if not _is_python_scalar(x)]
    if votes and all(v == f32 for v in votes) and f.fits_in(f32):
        return f32
    return np.dtype(np.float64)


def _out_dtype(xs: tuple, f: Format) -> np.dtype:
    """The result's dtype by the rule of :mod:`fpsim.containers` (as for ``round_to``): the numpy
    operands' common dtype when every value of ``f`` fits in it, else the smallest of float16,
    float32, float64 that holds ``f``. Python numbers and lists count as float64."""
    dts = []
    for x in xs:
        if isinstance(x, (np.ndarray, np.generic)):
            dt = np.asarray(x).dtype
            dts.append(dt.newbyteorder("=") if not dt.isnative else dt)
        elif not _is_python_scalar(x):
            dts.append(np.dtype(np.float64))  # lists, tuples: as round_to reads them
    if not dts:
        return np.dtype(np.float64)
    try:
        common = np.result_type(*dts)
    except TypeError:  # mixed ml_dtypes and numpy floats: no numpy promotion
        common = np.dtype(np.float64)
    return result_dtype(common, f)


def _operands(
    xs: tuple, names: tuple, f: Format, round_inputs: bool, defer_check: bool = False
) -> tuple[list[np.ndarray], tuple, np.dtype, str]:
    """Check (or round) the operands, pick the container, broadcast.

    Returns the flat contiguous operands (one dtype), the broadcast shape, the container dtype
    and how to return a scalar result ("python", "numpy" or "" for arrays). With
    ``defer_check`` the operands that reach the kernel unchanged (already in the container
    dtype and full size) are left for the kernel to check in its own pass; the others are
    checked here, before a cast could hide a value that is not in the format.
    """
    arrs, scalars = [], []
    for x, name in zip(xs, names, strict=True):
        arr, is_scalar = _operand(x, name, f, round_inputs=round_inputs, check=not defer_check)
        arrs.append(arr)
        scalars.append(is_scalar)
    container = _container(arrs, xs, f)
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrs))
    except ValueError:
        shapes = " ".join(str(a.shape) for a in arrs)
        raise ValueError(f"operands could not be broadcast together with shapes {shapes}") from None
    if defer_check and not round_inputs:
        for a, name in zip(arrs, names, strict=True):
            if a.dtype != container or a.shape != shape:
                _check_values(a, f, name)
    flat = [_kernel_array(a.astype(container, copy=False), shape).reshape(-1) for a in arrs]
    if all(scalars):
        kind = "python" if all(_is_python_scalar(x) for x in xs) else "numpy"
    else:
        kind = ""
    return flat, shape, container, kind


def _kernel_array(a: np.ndarray, shape: tuple | None = None) -> np.ndarray:
    """``a`` (broadcast to ``shape``) as a C-contiguous, writeable array: numba compiles one
    kernel per array type, and read-only views (``np.broadcast_to``) would be a second type."""
    if shape is not None and a.shape != shape:
        a = np.broadcast_to(a, shape)
    a = np.ascontiguousarray(a)
    return a if a.flags.writeable else a.copy()


def _finish(res: np.ndarray, shape: tuple, kind: str, out_dtype: np.dtype | None = None) -> Any:
    res = res.reshape(shape)
    if out_dtype is not None:
        res = res.astype(out_dtype, copy=False)  # exact: every value of the format fits
    if kind == "python":
        return float(res[()])
    if kind == "numpy":
        return res[()]
    return res


def _elementwise(op, xs, names, fmt, rounding, subnormals, saturate, seed, round_inputs):
    f = get_format(fmt)
    name = _OP_NAMES[op]
    mode = _mode_code(rounding)
    if op in (scalar.OP_ADD, scalar.OP_SUB):
        _require_add(f)
    else:
        _require_mul(f, name)
    seed_v = _seed_value(seed, mode)
    if any(_is_device(x) for x in xs):
        from .kernels import arith_cuda

        return arith_cuda.elementwise(
            op, xs, names, f, mode, int(subnormals), int(saturate), seed_v, round_inputs
        )
    flat, shape, container, kind = _operands(xs, names, f, round_inputs, defer_check=True)
    a = flat[0]
    b = flat[1] if len(flat) > 1 else a
    c = flat[2] if len(flat) > 2 else a
    out = np.empty(a.size, container)
    if a.size:
        from .kernels import arith_cpu

        # the input check runs inside the kernel's pass over the data
        check = 0 if (round_inputs or _is_binary64(f)) else len(flat)
        bad = arith_cpu.elementwise(
            op, a, b, c, out, _params(f), mode, int(subnormals), int(saturate), seed_v, check
        )
        if bad:
            for x, name in zip(xs, names, strict=True):
                _check_values(_as_array(x, name)[0], f, name)  # raises, naming the value
    return _finish(out, shape, kind, _out_dtype(xs, f))


_COMMON = """
    ``rounding``, ``subnormals``, ``saturate``, ``seed``: as for :func:`fpsim.round_to` (element
    i of a stochastic rounding uses random bits derived from ``(seed, i)``). Operands must be
    values of ``fmt`` (``ValueError`` otherwise) unless ``round_inputs=True``, which rounds them
    to ``fmt`` (nearest even) first. Operands broadcast like numpy; device arrays
    (``__cuda_array_interface__``) run on the GPU and return a device array."""


def add(
    a,
    b,
    fmt: FormatLike,
    rounding="nearest_even",
    subnormals=True,
    saturate=False,
    seed=None,
    *,
    round_inputs=False,
):
    """``a + b`` rounded once to ``fmt``.

    >>> add(1.0, 2.0**-12, "fp16"), add(1.0, 2.0**-11, "fp16"), add(1.0, 3 * 2.0**-12, "fp16")
    (1.0, 1.0, 1.0009765625)
    >>> add(1.0, 0.0001, "fp16", round_inputs=True)   # 0.0001 -> fp16, then below half an ulp
    1.0
    >>> add(1.0, 0.0001, "fp32", round_inputs=True)   # fp32 keeps it
    1.000100016593933
    >>> add(add(1e20, -1e20, "fp64"), 3.14, "fp64"), add(1e20, add(-1e20, 3.14, "fp64"), "fp64")
    (3.14, 0.0)
    """
    return _elementwise(
        scalar.OP_ADD, (a, b), ("a", "b"), fmt, rounding, subnormals, saturate, seed, round_inputs
    )


add.__doc__ += _COMMON


def sub(
    a,
    b,
    fmt: FormatLike,
    rounding="nearest_even",
    subnormals=True,
    saturate=False,
    seed=None,
    *,
    round_inputs=False,
):
    """``a - b`` rounded once to ``fmt``.

    >>> sub(1.0, 2.0**-12, "fp16"), sub(1.0, 2.0**-12, "fp16", rounding="down")
    (1.0, 0.99951171875)
    """
    return _elementwise(
        scalar.OP_SUB, (a, b), ("a", "b"), fmt, rounding, subnormals, saturate, seed, round_inputs
    )


sub.__doc__ += _COMMON


def mul(
    a,
    b,
    fmt: FormatLike,
    rounding="nearest_even",
    subnormals=True,
    saturate=False,
    seed=None,
    *,
    round_inputs=False,
):
    """``a * b`` rounded once to ``fmt``.

    >>> mul(1.0009765625, 1.0009765625, "fp16")   # exact 1 + 2^-9 + 2^-20: the 2^-20 is lost
    1.001953125
    >>> mul(256.0, 256.0, "fp16"), mul(256.0, 256.0, "fp16", saturate=True)
    (inf, 65504.0)
    """
    return _elementwise(
        scalar.OP_MUL, (a, b), ("a", "b"), fmt, rounding, subnormals, saturate, seed, round_inputs
    )


mul.__doc__ += _COMMON


def div(
    a,
    b,
    fmt: FormatLike,
    rounding="nearest_even",
    subnormals=True,
    saturate=False,
    seed=None,
    *,
    round_inputs=False,
):
    """``a / b`` rounded once to ``fmt``.

    >>> div(1.0, 3.0, "fp16"), div(1.0, 3.0, "fp16", rounding="up"), div(1.0, 0.0, "bf16")
    (0.333251953125, 0.33349609375, inf)
    """
    return _elementwise(
        scalar.OP_DIV, (a, b), ("a", "b"), fmt, rounding, subnormals, saturate, seed, round_inputs
    )


div.__doc__ += _COMMON


def sqrt(
    a,
    fmt: FormatLike,
    rounding="nearest_even",
    subnormals=True,
    saturate=False,
    seed=None,
    *,
    round_inputs=False,
):
    """``sqrt(a)`` rounded once to ``fmt`` (NaN for a < 0, ``sqrt(-0) = -0``).

    >>> sqrt(2.0, "fp16"), sqrt(2.0, "bf16"), sqrt(-1.0, "fp16")
    (1.4140625, 1.4140625, nan)
    """
    return _elementwise(
        scalar.OP_SQRT, (a,), ("a",), fmt, rounding, subnormals, saturate, seed, round_inputs
    )


sqrt.__doc__ += _COMMON


def fma(
    a,
    b,
    c,
    fmt: FormatLike,
    rounding="nearest_even",
    subnormals=True,
    saturate=False,
    seed=None,
    *,
    round_inputs=False,
):
    """``a * b + c`` with a single rounding to ``fmt`` (fused multiply-add).

    With ``x = 1 + 2^-10`` the exact ``x * x - (1 + 2^-9)`` is ``2^-20``; rounding the product
    first loses it:

    >>> x = 1 + 2.0**-10
    >>> fma(x, x, -(1 + 2.0**-9), "fp16"), add(mul(x, x, "fp16"), -(1 + 2.0**-9), "fp16")
    (9.5367431640625e-07, 0.0)
    """
    return _elementwise(
        scalar.OP_FMA,
        (a, b, c),
        ("a", "b", "c"),
        fmt,
        rounding,
        subnormals,
        saturate,
        seed,
        round_inputs,
    )


fma.__doc__ += _COMMON


def _unary_exact(x, fmt, rounding, subnormals, seed, round_inputs, which):
    f = get_format(fmt)
    _seed_value(seed, _mode_code(rounding))  # validated; the result is exact in every mode
    if _is_device(x):
        from .kernels import arith_cuda

        return arith_cuda.unary_exact(x, f, which, round_inputs, int(subnormals))
    (flat,), shape, container, kind = _operands((x,), ("x",), f, round_inputs)
    out = np.negative(flat) if which == "neg" else np.abs(flat)
    if not subnormals:  # flush-to-zero applies to the (subnormal) result, as everywhere
        out = np.where(np.abs(out) < f.min_normal, np.copysign(0.0, out), out).astype(container)
    return _finish(out, shape, kind, _out_dtype((x,), f))


def neg(x, fmt: FormatLike, rounding="nearest_even", subnormals=True, saturate=False, seed=None,
        *, round_inputs=False):  # fmt: skip
    """``-x``: exact in every format and mode (only the sign bit changes; ``neg(0.0) = -0.0``);
    ``subnormals=False`` flushes a subnormal result to zero; ``saturate`` has nothing to do.

    >>> neg(1.5, "fp8_e4m3"), neg(0.0, "fp16")
    (-1.5, -0.0)
    """
    return _unary_exact(x, fmt, rounding, subnormals, seed, round_inputs, "neg")


def abs(x, fmt: FormatLike, rounding="nearest_even", subnormals=True, saturate=False, seed=None,
        *, round_inputs=False):  # fmt: skip
    """``|x|``: exact in every format and mode (the sign bit cleared); ``subnormals=False``
    flushes a subnormal result to zero.

    >>> abs(-2.5, "bf16")
    2.5
    """
    return _unary_exact(x, fmt, rounding, subnormals, seed, round_inputs, "abs")


# ---- reductions --------------------------------------------------------------------------------
def _order_code(order: str, allowed: tuple) -> int:
    if order not in allowed:
        raise ValueError(f"unknown order {order!r}; choose one of {', '.join(allowed)}")
    return 1 if order == "pairwise" else 0


def _products_code(products: str) -> int:
    if products not in ("exact", "rounded"):
        raise ValueError(f"products must be 'exact' or 'rounded', got {products!r}")
    return 1 if products == "rounded" else 0


def _reduce(A, B, f, a_fmt, out_f, mode, subnormals, saturate, seed_v, pairwise, rounded):
    """The host reduction kernel on (nb, n, K) @ (nb, K, m) (B None: row sums of A); float64
    result (nb, n, m)."""
    from .kernels import arith_cpu

    # One specialisation: the kernel computes in float64 anyway (float32 -> float64 is exact).
    A = _kernel_array(A.astype(np.float64, copy=False))
    if B is not None:
        B = _kernel_array(B.astype(np.float64, copy=False))
    out = np.empty((A.shape[0], A.shape[1], 1 if B is None else B.shape[2]), np.float64)
    if out.size:
        arith_cpu.matmul(
            A,
            B,
            out,
            _params(a_fmt),
            _params(out_f),
            mode,
            int(subnormals),
            int(saturate),
            seed_v,
            pairwise,
            rounded,
        )
    return out


def sum(
    x,
    fmt: FormatLike,
    acc: FormatLike = "fp32",
    order: str = "sequential",
    axis=None,
    *,
    out_fmt: FormatLike | None = None,
    rounding="nearest_even",
    subnormals=True,
    saturate=False,
    seed=None,
    round_inputs=False,
):
    """The sum of the ``fmt`` values ``x`` with every partial sum rounded to ``acc``, the result
    rounded once to ``out_fmt`` (default ``fmt``).

    ``order``: ``"sequential"`` (left to right: ``s = acc(x_0)``, then ``s = acc(s + x_k)``)
    or ``"pairwise"`` (recursive halving at the largest power of two below the length; see the
    module docstring). ``axis``: None (all elements) or one axis. A 0-d result is a Python
    float; an empty sum is +0.0 (``sum([], "fp16") == 0.0``, positive in every mode).

    4096 ones in fp16: an fp16 accumulator stops at 2048, where the spacing of fp16 values is 2
    and ``2048 + 1`` is a tie that rounds back to 2048 (even); fp32 counts to 4096; bf16 (8 bits
    of precision) already stalls at 256. Pairwise summation only ever adds equal partial sums
    here, so it is exact even in fp16:

    >>> ones = [1.0] * 4096
    >>> sum(ones, "fp16", acc="fp16"), sum(ones, "fp16", acc="fp32"), sum(ones, "fp16", acc="bf16")
    (2048.0, 4096.0, 256.0)
    >>> sum(ones, "fp16", acc="fp16", order="pairwise")
    4096.0
    """
    f = get_format(fmt)
    a_fmt = get_format(acc)
    out_f = get_format(out_fmt) if out_fmt is not None else f
    mode = _mode_code(rounding)
    _require_add(a_fmt, "accumulation in")
    pairwise = _order_code(order, ("sequential", "pairwise"))
    seed_v = _seed_value(seed, mode)
    if _is_device(x):
        from .kernels import arith_cuda

        return arith_cuda.sum_device(
            x,
            f,
            a_fmt,
            out_f,
            axis,
            mode,
            int(subnormals),
            int(saturate),
            seed_v,
            pairwise,
            round_inputs,
        )
    (flat,), shape, container, _ = _operands((x,), ("x",), f, round_inputs)
    arr = flat.reshape(shape)
    out_dt = _out_dtype((x,), out_f)
    if axis is None:
        X = arr.reshape(1, -1)
        rest: tuple = ()
    else:
        if isinstance(axis, (tuple, list)) or not isinstance(axis, numbers.Integral):
            raise TypeError(f"axis must be None or an int, got {axis!r}")
        if not -arr.ndim <= axis < arr.ndim:
            raise ValueError(f"axis {axis} is out of bounds for an array of dimension {arr.ndim}")
        moved = np.moveaxis(arr, axis, -1)
        rest = moved.shape[:-1]
        # explicit sizes: reshape(-1, 0) is ambiguous for an empty axis
        X = np.ascontiguousarray(moved).reshape(math.prod(rest), moved.shape[-1])
    A = X.reshape(1, X.shape[0], X.shape[1])
    res = _reduce(A, None, f, a_fmt, out_f, mode, subnormals, saturate, seed_v, pairwise, 0)
    res = res.reshape(rest).astype(out_dt)
    return float(res) if res.ndim == 0 else res


def _blas_reason(f, a_fmt, mode, subnormals, saturate, device) -> str | None:
    """Why order="blas" cannot be used here (None when it can)."""
    if device:
        return "order='blas' is for host (numpy) arrays"
    if a_fmt not in (fp32, fp64):
        return f"order='blas' needs acc='fp32' or acc='fp64', got {a_fmt.name}"
    if mode != scalar.NEAREST_EVEN or not subnormals or saturate:
        return "order='blas' rounds to nearest even, with subnormals and without saturation"
    if a_fmt.man_bits == 23 and not f.fits_in(np.float32):
        return f"order='blas' with acc='fp32' needs inputs that fit in float32, not {f.name}"
    return None


def _matmul_layout(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple]:
    """numpy matmul shapes: (..., n, K) @ (..., K, m), 1-D operands promoted then squeezed.
    Returns A (nb, n, K), B (nb, K, m) (contiguous) and the result's shape."""
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: operands must be arrays of at least one dimension (use mul)")
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(
            f"matmul: shapes {a.shape} and {b.shape} do not align: {a2.shape[-1]} (last axis of "
            f"a) != {b2.shape[-2]} ({'first' if b.ndim == 1 else 'second-to-last'} axis of b)"
        )
    try:
        batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        raise ValueError(
            f"matmul: batch shapes {a2.shape[:-2]} and {b2.shape[:-2]} do not broadcast"
        ) from None
    n, K, m = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    nb = math.prod(batch)  # explicit: reshape(-1, n, K) is ambiguous when n * K == 0
    A = np.ascontiguousarray(np.broadcast_to(a2, batch + (n, K))).reshape(nb, n, K)
    B = np.ascontiguousarray(np.broadcast_to(b2, batch + (K, m))).reshape(nb, K, m)
    shape = batch + ((n,) if a.ndim > 1 else ()) + ((m,) if b.ndim > 1 else ())
    return A, B, shape


def matmul(
    a,
    b,
    fmt: FormatLike,
    acc: FormatLike = "fp32",
    *,
    products: str = "exact",
    order: str | None = None,
    out_fmt: FormatLike | None = None,
    rounding="nearest_even",
    subnormals=True,
    saturate=False,
    seed=None,
    round_inputs=False,
):
    """``a @ b`` of ``fmt`` values, every partial sum rounded to ``acc``, the result rounded once
    to ``out_fmt`` (default ``fmt``). Shapes follow ``numpy.matmul`` (1-D operands, batches).

    ``order``: None (default: ``"blas"`` when allowed -- acc fp32/fp64, default rounding, host
    arrays -- else ``"sequential"``), ``"sequential"``, ``"pairwise"`` or ``"blas"`` (see the
    module docstring: fp32 accumulation in the BLAS's order). ``products``: ``"exact"`` (fused,
    default) or ``"rounded"`` (each product rounded to ``acc`` first); the BLAS order has its
    own product handling (exact for inputs with 2p <= 24). Sequentially the first product is
    rounded to ``acc`` alone, pairwise the first additions take two unrounded products (see
    the module docstring). No terms (K = 0) give +0.0 in every mode; no rows or columns an
    empty array, as ``numpy.matmul``.

    Stochastic rounding: output element o (flat index) with K terms numbers its rounding
    events ``r`` and uses ``random62(seed, o * (2K + 1) + r)``: ``r = 2k`` rounds product k,
    ``r = 2c + 1`` is the c-th accumulator rounding, ``r = 2K`` the final rounding.

    >>> a = [[1.0, 2.0**-11]] * 2
    >>> b = [[1.0, 0.0], [1.0, 1.0]]
    >>> matmul(a, b, "fp16", acc="fp16").tolist()       # 1 + 2^-11 ties to even in fp16
    [[1.0, 0.00048828125], [1.0, 0.00048828125]]
    >>> matmul(a, b, "fp16", acc="fp32", out_fmt="fp32").tolist()
    [[1.00048828125, 0.00048828125], [1.00048828125, 0.00048828125]]
    """
    f = get_format(fmt)
    a_fmt = get_format(acc)
    out_f = get_format(out_fmt) if out_fmt is not None else f
    mode = _mode_code(rounding)
    _require_add(a_fmt, "accumulation in")
    _require_mul(f, "matmul")
    rounded = _products_code(products)
    seed_v = _seed_value(seed, mode)
    device = _is_device(a) or _is_device(b)
    reason = _blas_reason(f, a_fmt, mode, subnormals, saturate, device)
    if order is None:
        order = "blas" if reason is None else "sequential"
    pairwise = _order_code(order, ORDERS)
    if order == "blas" and reason is not None:
        raise ValueError(reason)
    if device:
        from .kernels import arith_cuda

        return arith_cuda.matmul_device(
            a,
            b,
            f,
            a_fmt,
            out_f,
            mode,
            int(subnormals),
            int(saturate),
            seed_v,
            pairwise,
            rounded,
            round_inputs,
        )
    arr_a, _ = _operand(a, "a", f, round_inputs)
    arr_b, _ = _operand(b, "b", f, round_inputs)
    if arr_a.dtype != arr_b.dtype:
        arr_a, arr_b = arr_a.astype(np.float64), arr_b.astype(np.float64)
    out_dt = _out_dtype((a, b), out_f)
    if order == "blas":
        return _matmul_blas(arr_a, arr_b, a_fmt, out_f, out_dt)
    A, B, shape = _matmul_layout(arr_a, arr_b)
    res = _reduce(A, B, f, a_fmt, out_f, mode, subnormals, saturate, seed_v, pairwise, rounded)
    res = res.reshape(shape).astype(out_dt)
    return float(res) if res.ndim == 0 else res


def _matmul_blas(a: np.ndarray, b: np.ndarray, a_fmt: Format, out_f: Format, out_dt) -> Any:
    """fp32 (or fp64) accumulate in the BLAS's order, then one rounding to ``out_f``."""
    from .kernels import arith_cpu

    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: operands must be arrays of at least one dimension (use mul)")
    dt = np.float32 if a_fmt.man_bits == 23 else np.float64
    try:
        c = np.matmul(a.astype(dt, copy=False), b.astype(dt, copy=False))
    except ValueError:
        _matmul_layout(a, b)  # raises the descriptive error
        raise
    if not out_f.fits_in(c.dtype):
        c = c.astype(np.float64)
    if _is_binary64(out_f):
        res = c
    elif c.size < arith_cpu.PARALLEL_MIN:
        flat = np.ascontiguousarray(c).reshape(-1)
        res = np.empty_like(flat)
        arith_cpu.round_nearest(flat, res, _params(out_f))  # one thread: no pool wake-up
        res = res.reshape(c.shape)
    else:
        res = np.asarray(round_to(c, out_f))
    res = res.astype(out_dt, copy=False)
    return float(res) if res.ndim == 0 else res


def dot(
    a,
    b,
    fmt: FormatLike,
    acc: FormatLike = "fp32",
    *,
    products: str = "exact",
    order: str = "sequential",
    out_fmt: FormatLike | None = None,
    rounding="nearest_even",
    subnormals=True,
    saturate=False,
    seed=None,
    round_inputs=False,
):
    """The dot product of two 1-D vectors of ``fmt`` values, every partial sum rounded to
    ``acc``, the result rounded once to ``out_fmt`` (default ``fmt``); a Python float.

    ``order``: ``"sequential"`` (default) or ``"pairwise"``; ``products``: ``"exact"`` (default,
    fused) or ``"rounded"``. Same rules as :func:`matmul`, whose 1-D case this is.

    >>> x = [1.0] * 3000
    >>> dot(x, x, "fp16", acc="fp16"), dot(x, x, "fp16", acc="fp32")
    (2048.0, 3000.0)
    """
    if order not in ("sequential", "pairwise"):
        raise ValueError(f"unknown order {order!r}; choose one of sequential, pairwise")
    if not _is_device(a) and not _is_device(b):
        na, nb = np.ndim(a), np.ndim(b)
        if na != 1 or nb != 1:
            raise ValueError(
                f"dot takes two 1-D vectors (got {na}-D and {nb}-D); use matmul for matrices"
            )
        if np.shape(a) != np.shape(b):
            raise ValueError(f"dot: vectors of different lengths {np.shape(a)} and {np.shape(b)}")
    return matmul(
        a,
        b,
        fmt,
        acc,
        products=products,
        order=order,
        out_fmt=out_fmt,
        rounding=rounding,
        subnormals=subnormals,
        saturate=saturate,
        seed=seed,
        round_inputs=round_inputs,
    )


# ---- teaching helpers --------------------------------------------------------------------------
def _pow2(k: int) -> Fraction:
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def _binade(q: Fraction) -> int:
    """floor(log2 q) for q > 0, exactly."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    return e if _pow2(e) <= q else e - 1


def _quantum(q: Fraction, f: Format) -> Fraction:
    """The spacing of ``f`` at |q| (the subnormal spacing below the normal range)."""
    e = _binade(builtins.abs(q)) if q != 0 else f.emin
    return _pow2(max(e, f.emin) - f.man_bits)


def _decimal(q: Fraction, digits: int = 40) -> str:
    """Every digit of a dyadic rational when there are at most ``digits``; else ~30 digits."""
    d = q.denominator
    if d & (d - 1) == 0:  # a power of two: the expansion is finite
        text = exact_decimal(q)
        if len(text.lstrip("-0.")) <= digits:
            return text
    with decimal.localcontext() as ctx:
        ctx.prec = 30
        return f"{decimal.Decimal(q.numerator) / decimal.Decimal(d)}..."


def _sqrt_approx(a: Fraction, bits: int = 200) -> tuple[Fraction, bool]:
    """(sqrt(a) or a 200-bit-accurate stand-in that is never a dyadic midpoint, exact?)."""
    scale = 4**bits
    n = a.numerator * scale // a.denominator
    r = math.isqrt(n)
    lo = Fraction(r, 2**bits)
    if lo * lo == a:
        return lo, True
    return lo + Fraction(1, 2 ** (bits + 1)), False


_OP_ALIASES = {
    "add": "add", "+": "add", "sub": "sub", "-": "sub", "mul": "mul", "*": "mul",
    "div": "div", "/": "div", "sqrt": "sqrt", "fma": "fma",
}  # fmt: skip
_MODE_TEXT = {
    "nearest_even": "round to nearest, ties to even",
    "nearest_away": "round to nearest, ties away from zero",
    "toward_zero": "round toward zero (truncate)",
    "up": "round up (toward +inf)",
    "down": "round down (toward -inf)",
    "stochastic": "stochastic rounding",
}


def _num(v: float) -> str:
    return repr(float(v))


def explain_op(
    a,
    op: str,
    b,
    fmt: FormatLike,
    rounding: str = "nearest_even",
    *,
    subnormals: bool = True,
    saturate: bool = False,
    seed: int | None = None,
) -> str:
    """Explain one operation step by step: the exact result, its two neighbours in ``fmt``, the
    rounding decision and the error in ulps. ``op``: ``add``/``+``, ``sub``/``-``,
    ``mul``/``*``, ``div``/``/``, ``sqrt`` (``b`` is None) or ``fma`` (``b = (b, c)``, computing
    ``a * b + c``). The result shown is the one :mod:`fpsim.arith` computes.

    >>> print(explain_op(1.0, "+", 2.0**-11, "fp16"))
    fp16: 1.0 + 0.00048828125  (round to nearest, ties to even)
      exact result   1.00048828125
      neighbours     1.0 < exact < 1.0009765625   (spacing 1 ulp = 2^-10 = 0.0009765625)
      position       0.5 ulp above 1.0: exactly halfway (a tie)
      decision       tie -> the neighbour with an even last bit: 1.0
      result         1.0   (error -0.00048828125 = -0.5 ulp)
    """
    f = get_format(fmt)
    name = _OP_ALIASES.get(op) if isinstance(op, str) else None
    if name is None:
        raise ValueError(f"unknown op {op!r}; choose one of {', '.join(_OP_ALIASES)}")
    if name == "sqrt":
        operands = (a,)
    elif name == "fma":
        if not (isinstance(b, (tuple, list)) and len(b) == 2):
            raise ValueError("for op='fma' pass b=(b, c): explain_op(a, 'fma', (b, c), fmt)")
        operands = (a, b[0], b[1])
    else:
        operands = (a, b)
    vals = [float(v) for v in operands]
    fn = {"add": add, "sub": sub, "mul": mul, "div": div, "sqrt": sqrt, "fma": fma}[name]
    result = fn(*vals, f, rounding, subnormals, saturate, seed)
    shown = {
        "add": lambda v: f"{_num(v[0])} + {_num(v[1])}",
        "sub": lambda v: f"{_num(v[0])} - {_num(v[1])}",
        "mul": lambda v: f"{_num(v[0])} * {_num(v[1])}",
        "div": lambda v: f"{_num(v[0])} / {_num(v[1])}",
        "sqrt": lambda v: f"sqrt({_num(v[0])})",
        "fma": lambda v: f"{_num(v[0])} * {_num(v[1])} + {_num(v[2])}  (fused: one rounding)",
    }[name](vals)
    lines = [f"{f.name}: {shown}  ({_MODE_TEXT[rounding]})"]
    if (
        not all(math.isfinite(v) for v in vals)
        or (name == "div" and vals[1] == 0)
        or (name == "sqrt" and vals[0] < 0)
    ):
        lines.append(f"  special case   no rounding: IEEE 754 defines the result, {_num(result)}")
        return "\n".join(lines)
    x = [Fraction(v) for v in vals]
    exact_known = True
    if name == "add":
        q = x[0] + x[1]
    elif name == "sub":
        q = x[0] - x[1]
    elif name == "mul":
        q = x[0] * x[1]
    elif name == "div":
        q = x[0] / x[1]
    elif name == "fma":
        q = x[0] * x[1] + x[2]
    else:
        q, exact_known = _sqrt_approx(x[0])
    if exact_known:
        lines.append(f"  exact result   {_decimal(q)}")
    else:
        lines.append(f"  exact result   {_decimal(q)}  (irrational)")
    fmax = Fraction(f.max)
    if builtins.abs(q) > fmax:
        # Beyond the largest finite value: the rounding mode decides between +-max and overflow.
        top = _quantum(fmax, f)
        sgn = "-" if q < 0 else ""
        lines.append(
            f"  out of range   |exact| > max = {_num(f.max)} (the next step would be "
            f"{_num(float(fmax + top))}, which {f.name} cannot hold)"
        )
        if math.isinf(result) or math.isnan(result):
            what = f"{sgn}inf" if f.has_inf else "NaN (a finite-only format has no infinity)"
            why = f"overflow -> {what}"
        else:
            why = f"stays at {sgn}max"
            if saturate:
                why += " (saturate=True)"
            elif rounding.startswith("nearest"):
                why += f" (less than half an ulp, {_decimal(top / 2)}, beyond it)"
            else:
                why += " (the rounding direction points back toward zero)"
        lines.append(f"  decision       {why}")
        lines.append(f"  result         {_num(result)}")
        return "\n".join(lines)
    quantum = _quantum(q, f)
    lo_mag = (builtins.abs(q) // quantum) * quantum
    if lo_mag == builtins.abs(q):
        lines.append(f"  representable  the exact result is a value of {f.name}: no rounding")
        note = ""
        if result == 0 and q != 0:
            note = "  (flushed to zero: subnormals=False)"
        lines.append(f"  result         {_num(result)}{note}")
        return "\n".join(lines)
    sign = -1 if q < 0 else 1
    lo, hi = sorted((sign * lo_mag, sign * (lo_mag + quantum)))
    k = _binade(quantum)
    lines.append(
        f"  neighbours     {_num(float(lo))} < exact < {_num(float(hi))}   "
        f"(spacing 1 ulp = 2^{k} = {_decimal(quantum)})"
    )
    pos = (q - lo) / quantum  # in (0, 1)
    half = Fraction(1, 2)
    if pos == half:
        where = "exactly halfway (a tie)"
    elif pos < half:
        where = "below the midpoint"
    else:
        where = "above the midpoint"
    lines.append(f"  position       {float(pos):.6g} ulp above {_num(float(lo))}: {where}")
    toward = {True: _num(float(hi)), False: _num(float(lo))}
    if rounding == "nearest_even":
        if pos == half:
            even_hi = ((hi / quantum) % 2) == 0
            why = f"tie -> the neighbour with an even last bit: {toward[even_hi]}"
        else:
            why = f"nearest neighbour: {toward[pos > half]}"
    elif rounding == "nearest_away":
        if pos == half:
            why = f"tie -> away from zero: {toward[sign > 0]}"
        else:
            why = f"nearest neighbour: {toward[pos > half]}"
    elif rounding == "toward_zero":
        why = f"toward zero: {toward[sign < 0]}"
    elif rounding == "up":
        why = f"toward +inf: {toward[True]}"
    elif rounding == "down":
        why = f"toward -inf: {toward[False]}"
    else:
        p_away = pos if sign > 0 else 1 - pos
        away = toward[sign > 0]
        why = f"away from zero ({away}) with probability {float(p_away):.6g}"
    lines.append(f"  decision       {why}")
    extra = ""
    if math.isinf(result) or math.isnan(result):
        extra = "  (overflow)"
    elif result == 0 and not subnormals and lo_mag != 0:
        extra = "  (flushed to zero: subnormals=False)"
    if math.isfinite(result):
        err = Fraction(result) - q
        lines.append(
            f"  result         {_num(result)}   (error {_decimal(err, 20)} = "
            f"{float(err / quantum):.6g} ulp){extra}"
        )
    else:
        lines.append(f"  result         {_num(result)}{extra}")
    return "\n".join(lines)


@dataclass(frozen=True)
class SumStep:
    """One addition of a traced sum: ``rounded = acc(partial + addend)``.

    ``partial`` is None for the first term (the sum starts as that term, rounded to acc).
    ``lost_bits``: when the sum had to be rounded, how many of the addend's significant bits lie
    below the accumulator's last place at the exact sum -- bits that could not be kept
    (``addend_bits`` of them: the addend was swamped when the sum did not change at all); 0 when
    the sum is exact. Where ``partial`` or ``addend`` is inf or NaN (an input, or a partial sum
    that overflowed) ``exact`` is their IEEE float sum, and ``error``, ``ulp`` and the bit
    counts are 0.
    """

    step: int
    partial: float | None
    addend: float
    exact: Fraction | float
    rounded: float
    error: Fraction
    ulp: Fraction
    lost_bits: int
    addend_bits: int

    @property
    def error_ulps(self) -> float:
        return float(self.error / self.ulp) if self.ulp else 0.0

    @property
    def note(self) -> str:
        if not isinstance(self.exact, Fraction):
            return "inf/nan"  # an infinite or NaN operand: IEEE arithmetic, no rounding
        if not math.isfinite(self.rounded):
            return "overflow"  # a finite sum beyond the accumulator's range
        if self.error == 0:
            return "exact"
        if self.partial is not None and self.rounded == self.partial and self.addend != 0:
            return "swamped"
        return "rounded"


class SumTrace(list):
    """The steps of :func:`trace_sum` (a list of :class:`SumStep`), with ``result`` (the sum
    rounded to the output format), ``acc``, ``order``, and ``table()`` / ``str()``."""

    def __init__(self, steps, result: float, acc: Format, out: Format, order: str):
        super().__init__(steps)
        self.result = result
        self.acc = acc
        self.out = out
        self.order = order

    def table(self, max_rows: int | None = 40) -> str:
        """The steps as a text table (the middle elided past ``max_rows`` rows)."""
        steps = list(self)
        cut = max_rows is not None and len(steps) > max_rows
        shown = steps[: max_rows - 5] + [None] + steps[-5:] if cut else steps
        head = [
            "step",
            "partial",
            "+ addend",
            "= exact",
            f"-> {self.acc.name}",
            "lost bits",
            "note",
        ]
        body = []
        for s in shown:
            if s is None:
                body.append(["...", "", "", "", "", "", f"({len(steps) - max_rows + 1} steps)"])
                continue
            body.append(
                [
                    str(s.step),
                    "" if s.partial is None else _num(s.partial),
                    _num(s.addend),
                    _decimal(s.exact, 20) if isinstance(s.exact, Fraction) else _num(s.exact),
                    _num(s.rounded),
                    f"{s.lost_bits} of {s.addend_bits}" if s.addend_bits else "-",
                    s.note,
                ]
            )
        widths = [max(len(r[c]) for r in [head] + body) for c in range(len(head))]
        rows = [f"{self.order} sum, accumulator {self.acc.name}"]
        for r in [head] + body:
            cells = [r[c].rjust(widths[c]) for c in range(len(head) - 1)] + [r[-1]]
            rows.append("  ".join(cells).rstrip())
        rows.append(f"result ({self.out.name}): {_num(self.result)}")
        return "\n".join(rows)

    def __str__(self) -> str:
        return self.table()

    __repr__ = list.__repr__


def _significant_bits(v: float) -> tuple[int, int]:
    """(lowest, highest) exponent of the set bits of |v| (v finite, non-zero)."""
    q = Fraction(builtins.abs(v))
    hi = _binade(q)
    low = hi
    while q / _pow2(low) != int(q / _pow2(low)):
        low -= 1
    while (q / _pow2(low + 1)).denominator == 1:
        low += 1
    return low, hi


def trace_sum(
    x,
    acc: FormatLike = "fp16",
    fmt: FormatLike | None = None,
    *,
    order: str = "sequential",
    out_fmt: FormatLike | None = None,
    rounding: str = "nearest_even",
    subnormals: bool = True,
    saturate: bool = False,
    seed: int | None = None,
) -> SumTrace:
    """Run a sum step by step with accumulator ``acc`` and record every addition.

    ``x``: a short 1-D sequence (the trace is computed in pure Python with the same scalar code
    the kernels compile). ``fmt``: the inputs' format, checked when given (default: none, any
    float64 values). The result is rounded to ``out_fmt`` (default ``fmt``, else ``acc``) and
    equals :func:`sum` with the same arguments. Returns a :class:`SumTrace`; print it for a
    table.

    >>> t = trace_sum([2048.0, 1.0, 1.0, 2.0], acc="fp16")
    >>> [s.rounded for s in t], [s.note for s in t]
    ([2048.0, 2048.0, 2048.0, 2050.0], ['exact', 'swamped', 'swamped', 'exact'])
    >>> print(t)
    sequential sum, accumulator fp16
    step  partial  + addend  = exact  -> fp16  lost bits  note
       0             2048.0     2048   2048.0     0 of 1  exact
       1   2048.0       1.0     2049   2048.0     1 of 1  swamped
       2   2048.0       1.0     2049   2048.0     1 of 1  swamped
       3   2048.0       2.0     2050   2050.0     0 of 1  exact
    result (fp16): 2050.0
    """
    a_fmt = get_format(acc)
    mode = _mode_code(rounding)
    _require_add(a_fmt, "accumulation in")
    in_f = get_format(fmt) if fmt is not None else None
    out_f = get_format(out_fmt) if out_fmt is not None else (in_f or a_fmt)
    pairwise = _order_code(order, ("sequential", "pairwise"))
    seed_v = _seed_value(seed, mode)
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"trace_sum takes a 1-D sequence, got shape {arr.shape}")
    if in_f is not None:
        _check_values(arr, in_f, "x")
    vals = [float(v) for v in arr]
    n = len(vals)
    pa = _params(a_fmt)
    sub_i, sat_i = int(subnormals), int(saturate)

    def rand(r):
        return scalar.random62(seed_v, r) if mode == scalar.STOCHASTIC else 0

    steps: list[SumStep] = []
    counter = [0]

    def record(partial, addend, rounded):
        if not (math.isfinite(addend) and (partial is None or math.isfinite(partial))):
            # inf or NaN (an input, or a partial sum that overflowed): IEEE arithmetic
            exact = addend + (partial if partial is not None else 0.0)
            zero = Fraction(0)
            steps.append(SumStep(len(steps), partial, addend, exact, rounded, zero, zero, 0, 0))
            return
        exact = Fraction(addend) + (Fraction(partial) if partial is not None else 0)
        ex_finite = math.isfinite(rounded)
        quantum = _quantum(exact, a_fmt) if ex_finite else Fraction(0)
        if addend != 0 and math.isfinite(addend):
            low, high = _significant_bits(addend)
            nbits = high - low + 1
            lost = min(max(_binade(quantum) - low, 0), nbits) if quantum else 0
        else:
            nbits, lost = 0, 0
        err = Fraction(rounded) - exact if ex_finite else Fraction(0)
        if ex_finite and err == 0:
            lost = 0  # the sum is exact: the low bits combined with the partial sum's (2047 + 1)
        steps.append(
            SumStep(len(steps), partial, addend, exact, rounded, err, quantum, lost, nbits)
        )

    def add_acc(p, t):  # the kernels' accumulator addition, as plain Python
        r = scalar.add_rounded(p, t, pa, mode, sub_i, sat_i, rand(2 * counter[0] + 1))
        counter[0] += 1
        record(p, t, r)
        return r

    if n == 0:
        s = 0.0
    elif not pairwise:
        s = scalar.round_value(vals[0], pa, mode, sub_i, sat_i, rand(1))
        counter[0] = 1
        record(None, vals[0], s)
        for t in vals[1:]:
            s = add_acc(s, t)
    else:

        def rec(lo: int, hi: int) -> float:
            if hi - lo == 1:
                return vals[lo]
            h = 1 << ((hi - lo - 1).bit_length() - 1)  # largest power of two below the length
            left = rec(lo, lo + h)
            right = rec(lo + h, hi)
            return add_acc(left, right)

        if n == 1:
            s = scalar.round_value(vals[0], pa, mode, sub_i, sat_i, rand(1))
            record(None, vals[0], s)
        else:
            s = rec(0, n)
    result = scalar.round_value(s, _params(out_f), mode, sub_i, sat_i, rand(2 * n))
    return SumTrace(steps, result, a_fmt, out_f, order)
