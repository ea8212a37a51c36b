"""Independent oracles for the tests: exact rational rounding with ``fractions.Fraction``.

Nothing here uses fpsim's kernels or bit tricks: a value is rounded by finding its binade with
exact comparisons, dividing by the quantum and looking at the remainder — the definition of
rounding, written as plainly as possible.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np

import fpsim

# The dtypes whose float32 -> format conversion is a correct, independent oracle.
NATIVE = {
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
}
TEXTBOOK = fpsim.Format(4, 3)  # 4 exponent bits, 3 fraction bits, bias 7, IEEE style: e4m3
NATIVE_FORMATS = {**{k: fpsim.get_format(k) for k in NATIVE}, "e4m3_ieee": TEXTBOOK}
NATIVE_DTYPES = {**NATIVE, "e4m3_ieee": ml_dtypes.float8_e4m3}


def binade(a: Fraction) -> int:
    """floor(log2(a)) for a > 0, exactly."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    assert Fraction(2) ** e <= a < Fraction(2) ** (e + 1)
    return e


def ref_round(x: float, fmt, mode: str = "nearest_even", subnormals: bool = True,
              saturate: bool = False) -> float:  # fmt: skip
    """Round the float ``x`` to ``fmt`` by the definition, with exact rational arithmetic."""
    f = fpsim.get_format(fmt)
    if math.isnan(x):
        return math.nan
    neg = math.copysign(1.0, x) < 0
    if math.isinf(x):
        if f.has_inf:
            return x
        return -f.max if (saturate and neg) else (f.max if saturate else math.nan)
    a = abs(Fraction(x))
    if a == 0:
        return x
    e = binade(a)
    q = max(e, f.emin) - f.man_bits
    quantum = Fraction(2) ** q
    n = a / quantum
    lo = math.floor(n)
    rem = n - lo
    if rem == 0:
        k = lo
    elif mode == "nearest_even":
        k = lo + 1 if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and lo % 2 == 1) else lo
    elif mode == "nearest_away":
        k = lo + 1 if rem >= Fraction(1, 2) else lo
    elif mode == "toward_zero":
        k = lo
    elif mode == "up":
        k = lo if neg else lo + 1
    elif mode == "down":
        k = lo + 1 if neg else lo
    else:
        raise ValueError(mode)
    r = k * quantum
    if r > Fraction(f.max):
        to_max = (
            saturate
            or mode == "toward_zero"
            or (mode == "up" and neg)
            or (mode == "down" and not neg)
        )
        if to_max:
            r = Fraction(f.max)
        else:
            return (-math.inf if neg else math.inf) if f.has_inf else math.nan
    if not subnormals and 0 < r < Fraction(f.min_normal):
        r = Fraction(0)
    v = float(r)  # exact: r is representable in the format, which fits in float64
    return -v if neg else v


def same_bits(a, b) -> np.ndarray:
    """Elementwise: equal bit patterns, or both NaN (NaN payloads are not compared)."""
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    it = {4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return (a.view(it) == b.view(it)) | (np.isnan(a) & np.isnan(b))


def oracle_round_f32(x32: np.ndarray, name: str) -> np.ndarray:
    """float32 -> format -> float32 through numpy/ml_dtypes (correct for float32 input)."""
    with np.errstate(all="ignore"):
        return x32.astype(NATIVE_DTYPES[name]).astype(np.float32)
