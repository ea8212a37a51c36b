"""Look inside one number: its bit fields, exact value, neighbours and rounding error.

Everything here is for people: :func:`fields` splits a value rounded to a format into its sign,
exponent and mantissa bits (those the format has) and computes exact facts about it;
:func:`explain` prints them as a small table; :func:`compare` shows one value in several formats
side by side; :func:`all_values` lists every code of a small (<= 16-bit) format.

The bit code comes from :func:`fpsim.core.to_bits` (so the rounding is the simulator's own);
everything else is exact integer and :class:`fractions.Fraction` arithmetic on that code. A
binary floating-point value is a *dyadic* rational ``n / 2^k``, so its decimal expansion is
finite and can be printed in full: ``n / 2^k = n × 5^k / 10^k``.

Input: ``x`` is rounded from its exact value. A Python float *is* a float64, so the float ``0.1``
is the float64 nearest to one tenth, and the rounding error reported is measured from it. Text
is read exactly: ``"0.1"`` is one tenth itself, ``"1/3"`` a third, ``"2**-25"`` a power of two
(see :func:`parse_number`); so are integers of any size, ``Fraction`` and ``Decimal``. Rounding
text through float64 first would round twice: ``"1.00048828125000000001"`` lies just above the
fp16 midpoint ``1 + 2^-11`` and rounds up, but its float64 is the midpoint itself, a tie that
rounds down.

>>> f = fields(0.1, "fp16")
>>> f.bits, f.hex, f.decimal
('0 01011 1001100110', '0x2e66', '0.0999755859375')
>>> f.error == Fraction(0.0999755859375) - Fraction(0.1)
True
"""

from __future__ import annotations

from fractions import Fraction  # noqa: F401  (the docstring's example uses it)

from .exact import (
    DEFAULT_COMPARE_FORMATS,
    Fields,
    all_values,
    describe_specials,
    exact_decimal,
    fields,
    parse_number,
)
from .tables import compare, explain

__all__ = [
    "exact_decimal",
    "Fields",
    "fields",
    "explain",
    "all_values",
    "compare",
    "describe_specials",
    "parse_number",
    "DEFAULT_COMPARE_FORMATS",
]
