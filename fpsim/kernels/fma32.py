"""``a * b + c`` rounded once to fp32 (nearest even), elementwise over float32 arrays: the
fused multiply-add of ``_mm256_fmadd_ps``, which :mod:`fpsim.aten_cpu` needs on every
optimizer step (:func:`fpsim.arith.fma` computes the same for any format and mode, with more
work per element).

The product of two fp32 values is exact in float64 (48 bits; exponents far inside float64's
range), so ``s = fl64(a * b + c)`` carries one rounding, and rounding ``s`` to fp32 is the
correct rounding of ``a * b + c`` -- unless ``s`` landed on a midpoint between two fp32 values
(or on the overflow threshold), where float64's rounding may have decided the tie. Such points
are not fp32 values and have at most 25 significant bits, so their low 28 float64 fraction bits
are zero: only there does the kernel compute TwoSum's exact error ``e`` and, where ``e != 0``,
move ``s`` one float64 ulp towards ``s + e`` (rounding to odd) before the final rounding (Boldo &
Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to
odd", IEEE Trans. Computers 57(4), 2008). Infinities and NaN follow from the float64 operations
as IEEE fma's do (NaN payloads are not modelled).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import scalar

LOW28 = (1 << 28) - 1


@njit(cache=True, nogil=True, inline="always")
def fma32_one(a, b, c):
    """One element: float32 ``a, b, c`` -> float32 ``fl32(a * b + c)``."""
    p = np.float64(a) * np.float64(b)  # exact
    cc = np.float64(c)
    s = p + cc
    r = np.float32(s)
    if np.float64(r) != s and np.isfinite(s):
        bits = scalar.float64_to_bits(s)
        if (bits & LOW28) == 0:  # a breakpoint of the rounding to fp32
            pp = s - cc
            e = (p - pp) + (cc - (s - pp))  # TwoSum: a * b + c == s + e exactly
            if e != 0.0:
                bits += 1 if (e < 0.0) == (s < 0.0) else -1  # magnitude up or down: odd
                r = np.float32(scalar.bits_to_float64(bits))
    return r


@njit(cache=True, nogil=True)
def fma32_into(a, b, c, out):
    """``out[i] = fl32(a[i] * b[i] + c[i])`` over 1-D float32 arrays; an operand of size 1 is
    used for every element (a scalar)."""
    sa = 1 if a.size > 1 else 0
    sb = 1 if b.size > 1 else 0
    sc = 1 if c.size > 1 else 0
    for i in range(out.size):
        out[i] = fma32_one(a[i * sa], b[i * sb], c[i * sc])
