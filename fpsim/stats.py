"""Range histograms: where values fall on a format's number line, and what a loss scale does.

A :class:`RangeHistogram` counts |x| by binary exponent — one bin per power of two
``[2^e, 2^(e+1))``, a bin for exact zeros and one for inf/NaN — in fixed memory, however many
arrays are added. Against a :class:`~fpsim.formats.Format` it reports the *zones*:

==============  ===========================================================================
``zero``        x == 0 exactly
``underflow``   0 < |x| <= half the smallest subnormal: round-to-nearest gives ±0
                (with ``subnormals=False``: every 0 < |x| < smallest normal)
``subnormal``   half the smallest subnormal < |x| < smallest normal: kept, with fewer bits
``normal``      smallest normal <= |x| < the overflow threshold
``overflow``    |x| >= max + ulp(max)/2 (the tie goes to "even" = inf); for ``fn`` formats
                |x| > max + ulp(max)/2 (there the tie goes to max)
``nonfinite``   inf or NaN already
==============  ===========================================================================

The boundaries are exactly those of round-to-nearest-even (:func:`fpsim.round_to`): the
lower ones are powers of two, so the exponent bins resolve them (values exactly at half the
smallest subnormal — ties to zero — are counted separately); the overflow threshold lies inside
the top binade, so for each format registered at construction the histogram also counts, per
binade, the values whose fraction lies beyond it. A scale ``S = 2^k`` multiplies every value
exactly, so it just shifts the bins by ``k``: :meth:`RangeHistogram.zones` answers "what if the
gradients had been scaled by S" without re-reading any data.

>>> import numpy as np
>>> h = RangeHistogram()
>>> h.add(np.array([0.0, 1e-9, 3e-8, 1e-6, 0.5, 7e4]))
>>> h.zones("fp16")
{'zero': 1, 'underflow': 1, 'subnormal': 2, 'normal': 1, 'overflow': 1, 'nonfinite': 0}
>>> h.zones("fp16", scale=2**10)["underflow"], h.zones("fp16", scale=2**10)["overflow"]
(0, 1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .formats import Format, FormatLike, get_format

__all__ = ["RangeHistogram", "ScaleSuggestion", "suggest_scale", "ZONES"]

ZONES = ("zero", "underflow", "subnormal", "normal", "overflow", "nonfinite")

# float64 covers binades 2^-1074 .. 2^1023; every input is converted to float64 (exactly).
_EMIN = -1074
_EMAX = 1023
_NBINS = _EMAX - _EMIN + 1

DEFAULT_FORMATS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp32", "tf32")


def _overflow_fraction(f: Format) -> tuple[float, bool]:
    """The significand 1.f in [1, 2) of the overflow threshold in the top binade, and whether
    the threshold itself overflows (ties to even: for IEEE style the next value up is the
    'even' one, inf; for fn style max itself is even)."""
    max_sig = f.max / 2.0**f.emax  # 1.11..1 (ieee) or 1.11..10 (fn), exact
    return max_sig + 2.0**-f.man_bits / 2, f.style == "ieee"


def _as_float64(x: Any) -> np.ndarray:
    if hasattr(x, "numpy") and callable(x.numpy):  # fpsim / torch tensors
        x = x.numpy()
    a = np.asarray(x)
    if a.dtype.kind not in "fiub" and a.dtype.kind != "V":
        raise TypeError(f"expected numbers, got an array of {a.dtype}")
    return a.astype(np.float64, copy=False).ravel()


class RangeHistogram:
    """Streaming histogram of |x| by binary exponent, with exact zone counts per format.

    ``formats``: the formats whose overflow zone must be exact (the top-binade split is kept
    for these; the other zones are exact for every format). Memory is fixed: a few arrays of
    2098 counters.
    """

    def __init__(self, formats: tuple[FormatLike, ...] = DEFAULT_FORMATS) -> None:
        self._formats = {get_format(f).name: get_format(f) for f in formats}
        self.reset()

    def reset(self) -> None:
        """Forget everything added."""
        self.counts = np.zeros(_NBINS, np.int64)  # values with |x| in [2^e, 2^(e+1))
        self.exact_powers = np.zeros(_NBINS, np.int64)  # values with |x| == 2^e exactly
        self._top = {name: np.zeros(_NBINS, np.int64) for name in self._formats}
        self.zero = 0
        self.nonfinite = 0

    @property
    def formats(self) -> tuple[str, ...]:
        return tuple(self._formats)

    def add(self, x: Any) -> None:
        """Count the values of an array (numpy, fpsim.Tensor, anything array-like)."""
        a = np.abs(_as_float64(x))
        finite = np.isfinite(a)
        self.nonfinite += int(a.size - np.count_nonzero(finite))
        a = a[finite]
        self.zero += int(a.size - np.count_nonzero(a))
        a = a[a != 0]
        # |x| = m × 2^e with m in [0.5, 1): the binade is e - 1, the significand 2m in [1, 2).
        m, e = np.frexp(a)
        idx = e - 1 - _EMIN
        self.counts += np.bincount(idx, minlength=_NBINS)
        self.exact_powers += np.bincount(idx[m == 0.5], minlength=_NBINS)
        sig = 2.0 * m
        for name, f in self._formats.items():
            threshold, inclusive = _overflow_fraction(f)
            top = sig >= threshold if inclusive else sig > threshold
            self._top[name] += np.bincount(idx[top], minlength=_NBINS)

    def merge(self, other: RangeHistogram) -> None:
        """Add another histogram's counts (same formats)."""
        if set(other._formats) != set(self._formats):
            raise ValueError("can only merge histograms built for the same formats")
        self.counts += other.counts
        self.exact_powers += other.exact_powers
        for name in self._top:
            self._top[name] += other._top[name]
        self.zero += other.zero
        self.nonfinite += other.nonfinite

    # ---- reading it ------------------------------------------------------------------------
    @property
    def count(self) -> int:
        """Number of values added (zeros and non-finite included)."""
        return int(self.counts.sum()) + self.zero + self.nonfinite

    def bins(self) -> tuple[np.ndarray, np.ndarray]:
        """``(exponents, counts)`` of the non-empty range of binades: count[i] values have
        |x| in [2^exponents[i], 2^(exponents[i]+1))."""
        nz = np.flatnonzero(self.counts)
        if nz.size == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        lo, hi = nz[0], nz[-1] + 1
        return np.arange(lo, hi) + _EMIN, self.counts[lo:hi].copy()

    def zones(self, fmt: FormatLike, scale: float = 1.0, subnormals: bool = True) -> dict:
        """Counts per zone (see the module docstring) after multiplying by ``scale``.

        ``scale`` must be a power of two (as GradScaler's are): multiplying by it is exact and
        shifts every binade by log2(scale), so the answer is exact. Values pushed past float64's
        range by the shift count as overflow / underflow like any other.
        """
        f = get_format(fmt)
        if f.name not in self._formats:
            raise ValueError(
                f"this RangeHistogram keeps exact overflow counts for {', '.join(self._formats)};"
                f" build it with formats=(..., {f.name!r}) to ask about {f.name}"
            )
        k = _log2_exact(scale)
        e_under = f.emin - f.man_bits - 1  # binade of half the smallest subnormal
        lo_idx = (e_under if subnormals else f.emin) - k - _EMIN  # first binade kept
        norm_idx = f.emin - k - _EMIN  # first normal binade
        top_idx = f.emax - k - _EMIN  # the top binade
        c = self.counts

        def total(a: int, b: int) -> int:  # sum of counts over bin indices [a, b)
            a, b = max(a, 0), min(b, _NBINS)
            return int(c[a:b].sum()) if b > a else 0

        def at(arr: np.ndarray, i: int) -> int:
            return int(arr[i]) if 0 <= i < _NBINS else 0

        underflow = total(0, lo_idx)
        if subnormals:  # exactly half the smallest subnormal: a tie, to even = zero
            underflow += at(self.exact_powers, lo_idx)
        subnormal = total(lo_idx, norm_idx) - (at(self.exact_powers, lo_idx) if subnormals else 0)
        over_top = at(self._top[f.name], top_idx)
        overflow = total(top_idx + 1, _NBINS) + over_top
        normal = total(norm_idx, top_idx + 1) - over_top
        return {
            "zero": self.zero,
            "underflow": underflow,
            "subnormal": subnormal,
            "normal": normal,
            "overflow": overflow,
            "nonfinite": self.nonfinite,
        }

    def fractions(self, fmt: FormatLike, scale: float = 1.0, subnormals: bool = True) -> dict:
        """:meth:`zones` divided by the number of values added."""
        z = self.zones(fmt, scale, subnormals)
        n = max(self.count, 1)
        return {k: v / n for k, v in z.items()}

    def lost_fraction(self, fmt: FormatLike, scale: float = 1.0) -> float:
        """Fraction of the *non-zero* finite values that would become zero (underflow)."""
        z = self.zones(fmt, scale)
        nonzero = self.count - self.zero - self.nonfinite
        return z["underflow"] / nonzero if nonzero else 0.0

    def __repr__(self) -> str:
        return (
            f"RangeHistogram(count={self.count}, zero={self.zero}, nonfinite={self.nonfinite}, "
            f"formats={self.formats})"
        )


def _log2_exact(scale: float) -> int:
    s = float(scale)
    if not (s > 0 and math.isfinite(s)):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    m, e = math.frexp(s)
    if m != 0.5:
        raise ValueError(
            f"scale must be a power of two for an exact answer (got {scale!r}); "
            "GradScaler's scales are powers of two"
        )
    return e - 1


@dataclass(frozen=True)
class ScaleSuggestion:
    """The power-of-two scales ``2^lo .. 2^hi`` (inclusive) that keep overflow at zero and
    leave the fewest values underflowing (``underflow`` of them; ``underflow_fraction`` of the
    non-zero finite values)."""

    lo: int
    hi: int
    underflow: int
    underflow_fraction: float

    @property
    def scales(self) -> tuple[float, float]:
        return 2.0**self.lo, 2.0**self.hi


def suggest_scale(
    hist: RangeHistogram,
    fmt: FormatLike,
    subnormals: bool = True,
    search: tuple[int, int] = (-64, 128),
) -> ScaleSuggestion:
    """The range of power-of-two loss scales that keep every value below the overflow threshold
    and minimise underflow.

    Underflow can only fall and overflow only rise as the scale grows, so the answer is the
    interval of exponents ``k`` with no overflow whose underflow equals that of the largest such
    ``k``. Raises ``ValueError`` when even ``2^search[0]`` overflows (there are inf/NaN values?
    those are not counted as overflow: they are ``nonfinite``).

    >>> import numpy as np
    >>> h = RangeHistogram(); h.add(np.array([2.0**-30, 2.0**-20, 1.0]))
    >>> s = suggest_scale(h, "fp16"); (s.lo, s.hi, s.underflow)
    (6, 15, 0)
    """
    k0, k1 = search
    best: list[int] = []
    best_under = None
    for k in range(k0, k1 + 1):
        z = hist.zones(fmt, 2.0**k, subnormals)
        if z["overflow"]:
            break
        if best_under is None or z["underflow"] < best_under:
            best_under, best = z["underflow"], [k]
        elif z["underflow"] == best_under:
            best.append(k)
    if not best:
        raise ValueError(f"every scale from 2^{k0} up overflows {get_format(fmt).name}")
    nonzero = hist.count - hist.zero - hist.nonfinite
    frac = best_under / nonzero if nonzero else 0.0
    return ScaleSuggestion(best[0], best[-1], int(best_under), frac)
