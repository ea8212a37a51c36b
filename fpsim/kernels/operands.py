"""The checks every simulated operation makes before it computes, shared by the host code of
:mod:`fpsim.arith` and the CUDA launchers of :mod:`fpsim.kernels.arith_cuda` (both import them
from here, so neither imports the other):

* :func:`is_device` -- does an operand live on a CUDA device (numba, CuPy, PyTorch CUDA, the
  simulator's arrays)?
* :func:`require_add` / :func:`require_mul` -- can fpsim compute this operation in this format
  exactly through float64 (precision and exponent range; see "Exponent range" in
  :mod:`fpsim.arith`)? A ``ValueError`` names the format, the operation and the reason.
* :func:`check_values` -- does a host array hold values of the format only (NaN allowed)? A
  ``ValueError`` names the first value that is not one, and what the format would round it to.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from ..formats import Format, fp64


def is_device(x: Any) -> bool:
    """True for an array that lives on a CUDA device: anything with
    ``__cuda_array_interface__``, numba's device arrays (``__cuda_ndarray__``, the simulator's
    included) and objects of the numba.cuda modules."""
    if hasattr(x, "__cuda_array_interface__") or getattr(x, "__cuda_ndarray__", False):
        return True
    mod = type(x).__module__ or ""
    return mod.startswith("numba.cuda") or mod.startswith("numba_cuda")


def is_binary64(f: Format) -> bool:
    """binary64 itself: every float64 is one of its values, so nothing needs checking."""
    return f == fp64


def binade(q: Fraction) -> int:
    """floor(log2 q) for q > 0, exactly."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    return e if Fraction(2) ** e <= q else e - 1


def require_add(f: Format, what: str = "add/sub in") -> None:
    """Formats in which fpsim adds exactly, in every rounding mode: p <= 51 (round-to-odd in
    float64) and a largest exponent <= 1022, or binary64."""
    if is_binary64(f):
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


def require_mul(f: Format, op: str) -> None:
    """Formats in which fpsim computes ``op`` exactly through float64 (see "Exponent range" in
    :mod:`fpsim.arith`): p <= 25 for all; products (mul, fma, matmul, dot) need every product
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
                f"2^{binade(q_min)} to 2^{-binade(q_min)}, beyond float64's normal range "
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


def check_values(arr: np.ndarray, f: Format, name: str) -> None:
    """Raise ValueError unless every non-NaN element of the host array ``arr`` (float32 or
    float64) is a value of ``f``."""
    if is_binary64(f) or arr.size == 0:
        return
    from . import arith_cpu

    flat = np.ascontiguousarray(arr).reshape(-1)
    if not flat.flags.writeable:
        flat = flat.copy()  # numba compiles one kernel per array type: keep it to one
    if arith_cpu.count_not_in_format(flat, f.record) == 0:
        return
    rounded = np.empty(flat.size, np.float64)
    arith_cpu.round_nearest(flat, rounded, f.record)  # the rounding the check itself uses
    # compared as bits, as the count does: -0 is not a value of a format without -0 (fnuz)
    moved = rounded.view(np.int64) != flat.astype(np.float64).view(np.int64)
    bad = np.flatnonzero(moved & ~np.isnan(flat))
    i = int(bad[0])
    where = "" if arr.ndim == 0 else f" at index {tuple(map(int, np.unravel_index(i, arr.shape)))}"
    v = float(flat[i])
    raise ValueError(
        f"{name} holds {len(bad)} value(s) that are not {f.name} values, e.g. {v!r}{where} "
        f"({f.name} rounds it to {float(rounded[i])!r}); operations in {f.name} take {f.name} "
        f"values: round them first with fpsim.round_to(x, {f.name!r}), or pass round_inputs=True"
    )
