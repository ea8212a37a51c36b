"""Elementwise operations in any format: add, sub, mul, div, sqrt, fma (each correctly rounded
once, in every rounding mode), neg and abs.

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
      scalar addition (``scalar_ops.add_rounded``) rounds ``±F64_MAX`` in its place (an inf would
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
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import _mode_code, _seed_value
from ..formats import FormatLike, get_format
from ..kernels import scalar_ops
from ..kernels.operands import require_add, require_mul
from .operands import (
    as_array,
    check_values,
    finish,
    is_binary64,
    is_device,
    operand,
    operands,
    out_dtype,
)

__all__ = ["add", "sub", "mul", "div", "sqrt", "fma", "neg", "abs", "OP_NAMES"]

OP_NAMES = {
    scalar_ops.OP_ADD: "add",
    scalar_ops.OP_SUB: "sub",
    scalar_ops.OP_MUL: "mul",
    scalar_ops.OP_DIV: "div",
    scalar_ops.OP_SQRT: "sqrt",
    scalar_ops.OP_FMA: "fma",
}


def _host_scalar(x: Any, name: str, f, round_inputs: bool) -> np.ndarray:
    """A non-device operand of a device operation: a scalar, checked (or rounded) here, as a
    one-element float64 array the GPU kernel broadcasts."""
    arr, _ = operand(x, name, f, round_inputs)
    if arr.size != 1:
        raise ValueError(
            f"{name}: with device arrays, the other operands must be device arrays of the same "
            "shape or scalars"
        )
    return arr.astype(np.float64).reshape(1)


def _elementwise(op, xs, names, fmt, rounding, subnormals, saturate, seed, round_inputs):
    f = get_format(fmt)
    name = OP_NAMES[op]
    mode = _mode_code(rounding)
    if op in (scalar_ops.OP_ADD, scalar_ops.OP_SUB):
        require_add(f)
    else:
        require_mul(f, name)
    seed_v = _seed_value(seed, mode)
    if any(is_device(x) for x in xs):
        from ..kernels import arith_cuda

        ops = [
            x if is_device(x) else _host_scalar(x, n, f, round_inputs)
            for x, n in zip(xs, names, strict=True)
        ]
        return arith_cuda.elementwise(
            op, ops, names, f, mode, int(subnormals), int(saturate), seed_v, round_inputs
        )
    flat, shape, container, kind = operands(xs, names, f, round_inputs, defer_check=True)
    a = flat[0]
    b = flat[1] if len(flat) > 1 else a
    c = flat[2] if len(flat) > 2 else a
    out = np.empty(a.size, container)
    if a.size:
        from ..kernels import arith_cpu

        # the input check runs inside the kernel's pass over the data
        check = 0 if (round_inputs or is_binary64(f)) else len(flat)
        bad = arith_cpu.elementwise(
            op, a, b, c, out, f.record, mode, int(subnormals), int(saturate), seed_v, check
        )
        if bad:
            for x, name in zip(xs, names, strict=True):
                check_values(as_array(x, name)[0], f, name)  # raises, naming the value
    return finish(out, shape, kind, out_dtype(xs, f))


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
        scalar_ops.OP_ADD, (a, b), ("a", "b"), fmt, rounding, subnormals, saturate, seed,
        round_inputs,
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
        scalar_ops.OP_SUB, (a, b), ("a", "b"), fmt, rounding, subnormals, saturate, seed,
        round_inputs,
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
        scalar_ops.OP_MUL, (a, b), ("a", "b"), fmt, rounding, subnormals, saturate, seed,
        round_inputs,
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
        scalar_ops.OP_DIV, (a, b), ("a", "b"), fmt, rounding, subnormals, saturate, seed,
        round_inputs,
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
        scalar_ops.OP_SQRT, (a,), ("a",), fmt, rounding, subnormals, saturate, seed, round_inputs
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
        scalar_ops.OP_FMA,
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
    if is_device(x):
        from ..kernels import arith_cuda

        return arith_cuda.unary_exact(x, f, which, round_inputs, int(subnormals))
    (flat,), shape, container, kind = operands((x,), ("x",), f, round_inputs)
    out = np.negative(flat) if which == "neg" else np.abs(flat)
    if not subnormals:  # flush-to-zero applies to the (subnormal) result, as everywhere
        out = np.where(np.abs(out) < f.min_normal, np.copysign(0.0, out), out).astype(container)
    return finish(out, shape, kind, out_dtype((x,), f))


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
