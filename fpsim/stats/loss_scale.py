"""The power-of-two loss scales a :class:`~fpsim.stats.RangeHistogram` allows: no overflow and
the least underflow, exactly (a power-of-two scale only shifts the histogram's binades)."""

from __future__ import annotations

from dataclasses import dataclass

from ..formats import FormatLike, get_format
from .range_histogram import RangeHistogram

__all__ = ["ScaleSuggestion", "suggest_scale"]


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
