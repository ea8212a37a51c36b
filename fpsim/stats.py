"""Range histograms: where values fall on a format's number line, and what a loss scale does.

A :class:`RangeHistogram` counts |x| by binary exponent — one bin per power of two
``[2^e, 2^(e+1))``, a bin for exact zeros and one for inf/NaN — in fixed memory, however many
arrays are added. Against a :class:`~fpsim.formats.Format` it reports the *zones*: what
:func:`fpsim.round_to` (round to nearest, ties to even) makes of each value. With ``q`` the
smallest subnormal and ``ulp`` the spacing at the max:

==============  ===========================================================================
``zero``        x == 0 exactly
``underflow``   x != 0 rounds to ±0: 0 < |x| <= q/2 (the tie q/2 goes to the even 0); with
                ``subnormals=False`` every 0 < |x| < min_normal - q/2
``subnormal``   x rounds to a subnormal: q/2 < |x| < min_normal - q/2 (none when
                ``subnormals=False``)
``normal``      x rounds to a normal value: min_normal - q/2 <= |x| < the overflow threshold
``overflow``    x rounds to inf (NaN in a finite-only format): |x| >= max + ulp/2 (the tie
                goes to the "even" inf); for ``fn`` formats |x| > max + ulp/2 (max is even)
``nonfinite``   inf or NaN already
==============  ===========================================================================

Note the values just below the smallest normal: those from ``min_normal - q/2`` up round *up*
to min_normal (the tie too: min_normal is the even neighbour), so they are ``normal``. This
holds with ``subnormals=False`` too: ``round_to`` flushes to zero *after* rounding, so only
what rounding left below min_normal becomes 0.

Every boundary is a threshold ``T = c × 2^b`` inside one binade (``1 <= c < 2``): a value is
past it when its binade is above ``b``, or is ``b`` and its significand ``1.f`` is past ``c``
(``>= c`` when the tie at T rounds up, ``> c`` when it rounds down). So for each format
registered at construction the histogram also counts, per binade, the values whose significand
lies past each such cut. A scale ``S = 2^k`` multiplies every value exactly and leaves its
significand alone, so it just shifts the bins by ``k``: :meth:`RangeHistogram.zones` answers
"what if the gradients had been scaled by S" exactly, without re-reading any data.

>>> import numpy as np
>>> h = RangeHistogram()
>>> h.add(np.array([0.0, 1e-9, 3e-8, 1e-6, 0.5, 7e4]))
>>> h.zones("fp16")
{'zero': 1, 'underflow': 1, 'subnormal': 2, 'normal': 1, 'overflow': 1, 'nonfinite': 0}
>>> h.zones("fp16", scale=2**10)["underflow"], h.zones("fp16", scale=2**10)["overflow"]
(0, 1)
>>> h = RangeHistogram(formats=("fp16",))
>>> h.add([2.0**-14 - 2.0**-25, 2.0**-14 - 2.0**-24])  # a tie up to 2^-14; the top subnormal
>>> h.zones("fp16", subnormals=False)
{'zero': 0, 'underflow': 1, 'subnormal': 0, 'normal': 1, 'overflow': 0, 'nonfinite': 0}

A :class:`GradientRecorder` fills such histograms from a model during training: per layer, its
activation and weight gradients as a low-precision run produced them, next to the true (fp32)
gradients for the same weights and batch, with element-by-element counts of what was lost.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from dataclasses import field as dataclasses_field
from fractions import Fraction
from typing import Any

import numpy as np

from .containers import is_torch_tensor, torch_to_numpy
from .formats import Format, FormatLike, get_format
from .kernels import histogram as _khist

__all__ = [
    "RangeHistogram",
    "ScaleSuggestion",
    "suggest_scale",
    "ZONES",
    "GradientRecorder",
    "GradientRecord",
    "KINDS",
    "scaling_report",
    "ScalingRow",
    "DEFAULT_SCALING_SCHEMES",
    "OUTCOMES",
]

ZONES = ("zero", "underflow", "subnormal", "normal", "overflow", "nonfinite")

# float64 covers binades 2^-1074 .. 2^1023, and 64-bit integers binades 0 .. 63. Floats are
# converted to float64 (exactly); integers from 2^53 up, which float64 would round, are
# classified with integer arithmetic instead.
_EMIN = -1074
_EMAX = 1023
_NBINS = _EMAX - _EMIN + 1
_INT_EXACT = 1 << 53

DEFAULT_FORMATS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp32", "tf32")


# ---- where round-to-nearest-even puts the zone boundaries ---------------------------------------
@dataclass(frozen=True, order=True)
class _Cut:
    """A significand cut ``c`` in [1, 2): a significand is past it when ``> c`` (``strict``) or
    ``>= c``. The order (c, then strict) is that of the cuts themselves: a significand past one
    is past every cut before it."""

    c: Fraction
    strict: bool

    def float_cut(self) -> float:
        """The ``g`` such that a float64 significand ``s`` (a multiple of 2^-52 in [1, 2)) is
        past the cut iff ``s >= g``: the first multiple of 2^-52 past ``c`` (2.0: none is).
        ``c`` itself need not be one (fp64's overflow cut, 2 - 2^-53, is not)."""
        n = self.c * 2**52
        return float(Fraction(math.floor(n) + 1 if self.strict else math.ceil(n), 2**52))

    def int_cut(self, b: int) -> int:
        """The smallest integer past ``c × 2^b``."""
        t = self.c * 2**b
        return math.floor(t) + 1 if self.strict else math.ceil(t)


def _halfway(n_below: int, q_exp: int) -> tuple[int, _Cut]:
    """The threshold halfway between ``n_below × 2^q_exp`` and ``(n_below + 1) × 2^q_exp`` as
    (binade, cut): values past it round to the upper neighbour. The tie goes to the even
    multiple: up (past means ``>=``) when ``n_below`` is odd, down (``>``) when it is even."""
    t = 2 * n_below + 1  # the threshold is t × 2^(q_exp - 1)
    top = t.bit_length() - 1
    return q_exp - 1 + top, _Cut(Fraction(t, 1 << top), strict=n_below % 2 == 0)


def _boundaries(f: Format) -> dict[str, tuple[int, _Cut]]:
    """The thresholds on |x| of round-to-nearest-even in ``f``, as (binade, cut): past ``zero``
    a value no longer rounds to 0, past ``normal`` it rounds to min_normal or above, past
    ``overflow`` it rounds beyond max."""
    e_q = f.emin - f.man_bits  # q = 2^e_q, the smallest subnormal, is the spacing below 2^emin
    return {
        "zero": _halfway(0, e_q),  # q/2: the tie goes to 0
        "normal": _halfway((1 << f.man_bits) - 1, e_q),  # min_normal - q/2: to min_normal
        "overflow": _halfway(f.max_significand, f.emax - f.man_bits),  # max + ulp/2
    }


# ---- input ------------------------------------------------------------------------------------
def _real_values(x: Any) -> np.ndarray:
    """``x`` as a flat array of its real values, every one exact: floats as float64 (native
    byte order), integers as int64 / uint64. Masked arrays give their unmasked values."""
    if isinstance(x, np.ma.MaskedArray):
        x = x.compressed()  # masked entries are not data (often a fill value, or garbage)
    elif is_torch_tensor(x):
        x = torch_to_numpy(x)  # CPU memory as numpy, bf16 through its int16 bits (no copy)
    elif hasattr(x, "numpy") and callable(x.numpy):  # fpsim tensors
        x = (x.detach() if hasattr(x, "detach") else x).numpy()  # numpy() refuses grad
    a = np.asarray(x)  # np.matrix becomes a plain ndarray here
    dt = a.dtype
    if dt.kind == "V" and dt.names is None and getattr(dt.type, "__module__", "") == "ml_dtypes":
        import ml_dtypes  # bfloat16, fp8, int4, ...: numpy calls them void ('V')

        # every ml_dtypes float (at most 16 bits) and integer (at most 4) fits float64 exactly
        for info in (ml_dtypes.finfo, ml_dtypes.iinfo):
            try:
                info(dt)
            except ValueError:
                continue
            return a.ravel().astype(np.float64)
    if dt.kind == "b" or (dt.kind == "f" and dt.itemsize <= 8):
        return a.ravel().astype(np.float64)  # exact, from either byte order
    if dt.kind in "iu":
        return a.ravel().astype(np.uint64 if dt.kind == "u" else np.int64)
    hint = {
        "c": ": complex values have no place on a real number line; pass .real or abs(x)",
        "f": ": it holds values float64 cannot; convert to float64 (rounding) first",
        "O": ": convert to a numeric dtype first (too large an int, a None, ...?)",
    }.get("c" if "complex" in dt.name else dt.kind, "")
    raise TypeError(f"RangeHistogram expects real numbers; got an array of dtype {dt}{hint}")


def _float_bits(a: np.ndarray) -> tuple[np.ndarray, str] | None:
    """``(integer view, format name)`` of a float16/32/64 or bfloat16 array in native byte
    order (no copy), for :meth:`RangeHistogram.add_bits`; None for any other array."""
    import ml_dtypes

    dt = a.dtype
    if not dt.isnative:
        return None
    name = {np.dtype(np.float16): "fp16", np.dtype(np.float32): "fp32",
            np.dtype(np.float64): "fp64", np.dtype(ml_dtypes.bfloat16): "bf16"}.get(dt)  # fmt: skip
    if name is None:
        return None
    return a.view(np.dtype(f"i{dt.itemsize}")), name


def _int_binades(u: np.ndarray, cuts: list[_Cut]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For magnitudes ``u`` >= 2^53 (uint64): binade index, whether a power of two, and how
    many of ``cuts`` each is past -- with integer arithmetic, as float64 would round them."""
    _, e = np.frexp(u.astype(np.float64))  # rounding may carry u up to the next power of two
    b = np.minimum(e - 1, 63).astype(np.uint64)
    b -= (np.right_shift(u, b) == 0).astype(np.uint64)  # ... then b is one too high
    pow2 = u == np.left_shift(np.uint64(1), b)
    n_past = np.zeros(u.size, np.int64)
    for cut in cuts:  # per binade 53..63, the smallest integer past the cut (< 2^64: c < 2)
        table = np.array([cut.int_cut(k) for k in range(53, 64)], np.uint64)
        n_past += u >= table[b - np.uint64(53)]
    return b.astype(np.int64) - _EMIN, pow2, n_past


_NO_SLOTS = np.zeros(0, np.int64)


def _magnitude_value(mag: int, f: Format) -> float:
    """The value of a magnitude code of an IEEE-style format (exact in float64)."""
    e, m = mag >> f.man_bits, mag & ((1 << f.man_bits) - 1)
    return math.ldexp((m + (1 << f.man_bits)) if e else m, max(e, 1) - f.bias - f.man_bits)


@dataclass(eq=False)
class BinadeCounts:
    """One array's values counted by :meth:`RangeHistogram.count_bits`, not yet added: a flat
    table of slots (:mod:`fpsim.kernels.histogram`: row ``r`` is binade ``first + r``, column
    ``j`` the values past exactly ``j`` of the histogram's cuts, the last column the exact
    powers of two, which pass ``k0`` cuts), ``zero`` and ``nonfinite`` values, and ``amax``, the
    largest finite magnitude (0.0 without one)."""

    first: int
    table: np.ndarray
    ncols: int
    k0: int
    zero: int
    nonfinite: int
    amax: float
    cuts: dict  # the histogram's cut -> its index

    @functools.cached_property
    def by(self) -> np.ndarray:
        """``by[r, j]``: values in binade ``first + r`` past exactly ``j`` cuts."""
        t = self.table[:-2].reshape(-1, self.ncols)
        out = t[:, :-1].copy()
        out[:, self.k0] += t[:, -1]
        return out

    @property
    def pow2(self) -> np.ndarray:
        """Exact powers of two per binade."""
        return self.table[:-2].reshape(-1, self.ncols)[:, -1]

    @property
    def nonzero(self) -> int:
        return int(self.table[:-2].sum())


class RangeHistogram:
    """Streaming histogram of |x| by binary exponent, with exact zone counts per format.

    ``formats``: the formats whose zones it can tell (for each, the three binades that a zone
    boundary cuts through are split at it). Memory is fixed: arrays of 2098 counters, two plus
    one per distinct boundary (at most three per format). Zones are those of round to nearest,
    ties to even (:func:`fpsim.round_to`'s default), with or without subnormals.
    """

    def __init__(self, formats: tuple[FormatLike, ...] = DEFAULT_FORMATS) -> None:
        fmts: dict[str, Format] = {}
        for fmt in formats:
            f = get_format(fmt)
            if fmts.setdefault(f.name, f) != f:
                raise ValueError(
                    f"two different formats are named {f.name!r}: {fmts[f.name]!r} and {f!r}"
                )
        self._formats = fmts
        self._bounds = {name: _boundaries(f) for name, f in fmts.items()}
        # the cuts in increasing order: a value past cut i is past every cut before it, so one
        # number per value (how many cuts it is past) says where it stands against all of them
        self._cuts = sorted({cut for bounds in self._bounds.values() for _, cut in bounds.values()})
        self._cut_index = {cut: i for i, cut in enumerate(self._cuts)}
        # per format, its boundaries as (binade, index of the cut): what zones() looks up
        self._bound_idx = {name: tuple((z, b, self._cut_index[cut]) for z, (b, cut) in
                                       bounds.items()) for name, bounds in self._bounds.items()}
        self._float_cuts = np.array([cut.float_cut() for cut in self._cuts], np.float64)
        self._bits_plan: dict[str, tuple] = {}  # count_bits' tables, per format read
        self._tensor_plans: dict[tuple, tuple] = {}  # add_bits' per-tensor zone tables
        self._adders: dict[tuple, Any] = {}  # bits_adder's functions
        self.reset()

    def reset(self) -> None:
        """Forget everything added."""
        self.counts = np.zeros(_NBINS, np.int64)  # values with |x| in [2^e, 2^(e+1))
        self.exact_powers = np.zeros(_NBINS, np.int64)  # values with |x| == 2^e exactly
        # _past[i, e]: values in binade e whose significand is past cut i
        self._past = np.zeros((len(self._cuts), _NBINS), np.int64)
        self.zero = 0
        self.nonfinite = 0

    @property
    def formats(self) -> tuple[str, ...]:
        return tuple(self._formats)

    def add(self, x: Any) -> None:
        """Count the values of an array (numpy, fpsim.Tensor, anything array-like).

        Each value is counted as it is, with no rounding on the way in: floats of any width
        and byte order (float16/32/64, ml_dtypes bfloat16 and fp8) become float64 exactly, and
        integers are classified exactly even past 2^53. A masked array counts only its
        unmasked values; an np.matrix is a plain array. Complex, object, string, structured,
        datetime and long double input raises TypeError (naming the dtype).

        >>> h = RangeHistogram(formats=("fp16",))
        >>> h.add(np.ma.masked_array([1.0, np.inf, 2.0**-30], mask=[False, True, False]))
        >>> h.count, h.nonfinite
        (2, 0)
        """
        if not isinstance(x, np.ma.MaskedArray):
            raw = torch_to_numpy(x) if is_torch_tensor(x) else x
            bits = _float_bits(np.asarray(raw)) if isinstance(raw, np.ndarray) else None
            if bits is not None:  # fp16, bf16, fp32, fp64 arrays: straight from the bits
                self.add_bits(*bits)
                return
        a = _real_values(x)
        big = None
        if a.dtype.kind in "iu":
            u = a.view(np.uint64)  # two's complement: -u (mod 2^64) is |a|, -2^63 included
            mag = u if a.dtype.kind == "u" else np.where(a < 0, -u, u)
            small = mag < np.uint64(_INT_EXACT)
            big, a = mag[~small], mag[small].astype(np.float64)  # the small ones: exact
        a = np.abs(a)
        finite = np.isfinite(a)
        self.nonfinite += int(a.size - np.count_nonzero(finite))
        a = a[finite]
        self.zero += int(a.size - np.count_nonzero(a))
        a = a[a != 0]
        # |x| = m × 2^e with m in [0.5, 1): the binade is e - 1, the significand 2m in [1, 2)
        # (frexp normalises float64 subnormals too, so 2m is exact for every value)
        m, e = np.frexp(a)
        self._count(e - 1 - _EMIN, m == 0.5, np.searchsorted(self._float_cuts, 2.0 * m, "right"))
        if big is not None and big.size:
            self._count(*_int_binades(big, self._cuts))

    def add_bits(
        self, bits: Any, fmt: FormatLike, scale: float = 1.0, *, tensor_formats: tuple = (),
        tensor_zones: np.ndarray | None = None,
    ) -> float:  # fmt: skip
        """Count values given by their bit patterns: ``bits`` holds codes of ``fmt``, an
        IEEE-style binary format with subnormals and inf/NaN at the top exponent (fp16, bf16,
        fp32, fp64, fp8_e5m2), as integers of any width (bf16 as int16 or uint16, fp32 as
        int32, ...), in a numpy array or in GPU memory (anything with
        ``__cuda_array_interface__``, or a numba device array: the count runs there, in one
        pass, and only the counters come back). ``scale`` (a power of two) multiplies the
        values, exactly. Returns the largest finite magnitude among them as given (before
        ``scale``; 0.0 when there is none), exactly.

        ``tensor_formats`` (formats of this histogram) with ``tensor_zones`` (an int64 array of
        shape ``(len(tensor_formats), 6)``): also add to ``tensor_zones[i]`` the zone counts
        (:data:`ZONES` order) of this array alone, as given, in ``tensor_formats[i]`` after the
        array's own power-of-two current scale (TransformerEngine's current scaling with
        power-of-two scales, from its largest finite magnitude: it lands in the format's top
        binade).

        >>> h = RangeHistogram(formats=("fp16",))
        >>> h.add_bits(np.array([0x3C00, 0x0001, 0xFC00, 0x8000], np.uint16), "fp16")
        1.0
        >>> h.zones("fp16")
        {'zero': 1, 'underflow': 0, 'subnormal': 1, 'normal': 1, 'overflow': 0, 'nonfinite': 1}
        """
        if not tensor_formats:
            c = self.count_bits(bits, fmt)
            self.add_counts(c, scale)
            return c.amax
        key = tensor_formats if type(tensor_formats) is tuple else tuple(tensor_formats)
        z = tensor_zones
        if not (isinstance(z, np.ndarray) and z.shape == (len(key), len(ZONES))
                and z.dtype == np.int64):  # fmt: skip
            raise ValueError(f"tensor_zones must be an int64 array of shape ({len(key)}, 6)")
        k = _log2_exact(scale)
        host = self._host_bits(bits, fmt)
        if host is not None:  # one compiled call: count, add, and the per-tensor zones
            return self.bits_adder(fmt, key)(host[0], k, z)
        # on a GPU: count there, then add the counts here
        b, i, fmax = self._zone_plan(key)
        c = self.count_bits(bits, fmt)
        if not _khist.add_table(c.table, c.ncols, c.k0, c.first, c.first + k - _EMIN,
                                self.counts, self.exact_powers, self._past, c.amax, b, i, fmax,
                                z):  # fmt: skip
            raise ValueError(f"scaling by 2^{k} moves values out of float64's range")
        self.zero += c.zero
        self.nonfinite += c.nonfinite
        return c.amax

    def bits_adder(self, fmt: FormatLike, tensor_formats: tuple) -> Any:
        """``add(bits, k, zones) -> amax``: what ``add_bits(bits, fmt, 2.0**k,
        tensor_formats=tensor_formats, tensor_zones=zones)`` does for a host array, without its
        checks and look-ups, for a caller adding many arrays (:func:`fpsim.torch.watch` adds
        ~90 tensors per training step of a small model, where each microsecond per tensor
        shows). ``bits``: a 1-D C-contiguous numpy array of native integers at least as wide
        as ``fmt``; ``zones``: an int64 array of shape ``(len(tensor_formats), 6)``. Made once
        per (fmt, tensor_formats) and kept.

        >>> h = RangeHistogram(formats=("fp16",)); z = np.zeros((1, 6), np.int64)
        >>> add = h.bits_adder("fp16", ("fp16",))
        >>> add(np.array([0x3C00, 0x0001, 0x8000], np.uint16), 0, z)  # 1, 2^-24, -0
        1.0
        >>> z.tolist(), h.zones("fp16")["subnormal"]  # scaled by 2^15, both are normal
        ([[1, 0, 0, 2, 0, 0]], 1)
        """
        key = (fmt, tensor_formats)
        add = self._adders.get(key)
        if add is not None:
            return add
        f, thr, lut, shift, first, _, _, slots, k0, prefix, pshift = self._plan(fmt)
        b, i, fmax = self._zone_plan(tuple(tensor_formats))
        eb, mb, bias, count = f.exp_bits, f.man_bits, f.bias, _khist.count_and_add

        def add(bits: np.ndarray, k: int, zones: np.ndarray) -> float:
            ok, amax, zero, nonfinite = count(
                bits, eb, mb, bias, first, thr, lut, shift, prefix, pshift, slots, k0, k, _EMIN,
                self.counts, self.exact_powers, self._past, b, i, fmax, zones,
            )  # fmt: skip
            if not ok:
                raise ValueError(f"scaling by 2^{k} moves values out of float64's range")
            self.zero += zero
            self.nonfinite += nonfinite
            return amax

        self._adders[key] = add
        return add

    def _zone_plan(self, key: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For the per-tensor zones of the formats ``key``: each one's zero, normal and
        overflow boundaries as (binade, cut index) rows, and its max as a float32 value."""
        plan = self._tensor_plans.get(key)
        if plan is None:
            fs = [self._format(f) for f in key]
            b = np.array([[b for _, b, _ in self._bound_idx[f.name]] for f in fs], np.int64)
            i = np.array([[i for _, _, i in self._bound_idx[f.name]] for f in fs], np.int64)
            fmax = np.array([float(np.float32(f.max)) for f in fs], np.float64)
            plan = self._tensor_plans[key] = (b.reshape(-1, 3), i.reshape(-1, 3), fmax)
        return plan

    def _plan(self, fmt: FormatLike) -> tuple:
        """count_bits' tables for reading ``fmt``'s bits (made once per format): ``(f, thr,
        lut, shift, first, rows, nslots, slots, k0, prefix, prefix_shift)``; ``slots`` is
        empty for formats wider than 16 bits, ``prefix`` for the others."""
        plan = self._bits_plan.get(fmt) if isinstance(fmt, str) else None
        if plan is not None:
            return plan
        f = get_format(fmt)
        if not (f.has_inf and f.nan == "ieee" and f.has_subnormals and f.signed):
            raise ValueError(
                f"add_bits reads IEEE-style formats (fp16, bf16, fp32, fp64, fp8_e5m2), not "
                f"{f.name}; pass its values to add() instead"
            )
        thr = _khist.thresholds_for(self._cuts, f.man_bits)
        lut, shift = _khist.lookup(tuple(thr.tolist()), f.man_bits)
        first = f.emin - f.man_bits  # the binade of the smallest subnormal
        rows = f.emax - first + 1
        nslots = rows * (len(thr) + 2) + 2
        slots, prefix, pshift = _NO_SLOTS, _NO_SLOTS, 0
        if f.bits <= _khist.SMALL_FORMAT_BITS:
            slots = _khist.slot_table(f.exp_bits, f.man_bits, f.bias, first,
                                      tuple(thr.tolist()), nslots)  # fmt: skip
        else:
            prefix, pshift = _khist.prefix_table(f.exp_bits, f.man_bits, f.bias, first,
                                                 tuple(thr.tolist()))  # fmt: skip
        k0 = int(np.count_nonzero(thr <= 0))  # the cuts an exact power of two passes
        plan = (f, thr, lut, shift, first, rows, nslots, slots, k0, prefix, pshift)
        self._bits_plan[f.name] = plan
        if isinstance(fmt, str):
            self._bits_plan[fmt] = plan
        return plan

    def _host_bits(self, bits: Any, fmt: FormatLike) -> tuple[np.ndarray, tuple] | None:
        """(a flat native integer array of the bits, the plan), or None for a GPU array."""
        plan = self._plan(fmt)
        if hasattr(bits, "__cuda_array_interface__") or getattr(bits, "__cuda_ndarray__", False):
            return None
        b = bits if isinstance(bits, np.ndarray) else np.asarray(bits)
        if b.dtype.kind not in "iu":
            raise TypeError(f"bits must be integers, got an array of {b.dtype}")
        if b.ndim != 1 or not b.flags.c_contiguous:
            b = np.ascontiguousarray(b).reshape(-1)
        if b.dtype.itemsize * 8 < plan[0].bits or not b.dtype.isnative:
            b = b.astype(np.int64)
        return b, plan

    def count_bits(self, bits: Any, fmt: FormatLike) -> BinadeCounts:
        """The counts of one array of bit patterns (as :meth:`add_bits` takes them), not yet
        added: a :class:`BinadeCounts` for :meth:`add_counts` and :meth:`zones_of`."""
        host = self._host_bits(bits, fmt)
        f, thr, lut, shift, first, rows, nslots, slots, k0, prefix, pshift = self._plan(fmt)
        table = np.zeros(nslots, np.int64)
        if host is None:
            from .kernels import histogram_cuda

            top = histogram_cuda.histogram_bits_device(bits, f, f.exp_bits, f.man_bits, f.bias,
                                                       first, thr, lut, shift, table)  # fmt: skip
        elif slots.size:
            top = _khist.histogram_bits_small(host[0], (1 << (f.bits - 1)) - 1, slots, table)
        else:
            top = _khist.histogram_bits(host[0], f.exp_bits, f.man_bits, f.bias, first, thr, lut,
                                        shift, prefix, pshift, table)  # fmt: skip
        return BinadeCounts(first, table, len(thr) + 2, k0, int(table[-2]), int(table[-1]),
                            _magnitude_value(max(top, 0), f), self._cut_index)  # fmt: skip

    def add_counts(self, c: BinadeCounts, scale: float = 1.0,
                   zones_at: dict | None = None) -> dict | None:  # fmt: skip
        """Add the counts of one array (:meth:`count_bits`), its values multiplied by
        ``scale``, a power of two (exactly: the binades shift by log2(scale)). With
        ``zones_at`` (fmt -> power-of-two scale), also return ``{fmt: zones}`` of that array
        alone, unscaled, each format under its own scale: what :meth:`zones_of` gives, in the
        same pass (one compiled call)."""
        if c.cuts is not self._cut_index and c.cuts != self._cut_index:
            raise ValueError("these counts were made by a histogram with other formats")
        k = _log2_exact(scale)
        fs = {fmt: (self._format(fmt), _log2_exact(s)) for fmt, s in (zones_at or {}).items()}
        # a value x is past a threshold T after a scale 2^kf iff x is past T / 2^kf
        bounds = [(b - kf - c.first, i) for f, kf in fs.values()
                  for _, b, i in self._bound_idx[f.name]]  # fmt: skip
        rows = np.array([b for b, _ in bounds], np.int64)
        cuts = np.array([i for _, i in bounds], np.int64)
        out = np.zeros(len(bounds), np.int64)
        if not _khist.fold(c.table, c.ncols, c.k0, c.first + k - _EMIN, self.counts,
                          self.exact_powers, self._past, rows, cuts, out):  # fmt: skip
            raise ValueError(f"scaling by 2^{k} moves values out of float64's range")
        self.zero += c.zero
        self.nonfinite += c.nonfinite
        if zones_at is None:
            return None
        vals = iter(out.tolist())
        nonzero = c.nonzero
        res = {}
        for fmt, (f, _) in fs.items():
            past = {z: next(vals) for z, _, _ in self._bound_idx[f.name]}
            res[fmt] = self._zones(past, True, nonzero, c.zero, c.nonfinite)
        return res

    def zones_of(self, c: BinadeCounts, fmt: FormatLike, scale: float = 1.0) -> dict:
        """:meth:`zones` of one array's counts alone (as if it were the only one added)."""
        scratch = RangeHistogram(tuple(self._formats.values()))
        return scratch.add_counts(c, 1.0, {fmt: scale})[fmt]

    def _count(self, idx: np.ndarray, pow2: np.ndarray, n_past: np.ndarray) -> None:
        """Add values given by binade index, whether |x| is a power of two, and the number of
        cuts their significand is past."""
        self.counts += np.bincount(idx, minlength=_NBINS)
        self.exact_powers += np.bincount(idx[pow2], minlength=_NBINS)
        n = len(self._cuts)
        if n:
            by = np.bincount(idx * (n + 1) + n_past, minlength=_NBINS * (n + 1))
            at_least = np.cumsum(by.reshape(_NBINS, n + 1)[:, ::-1], axis=1)[:, ::-1]
            self._past += at_least[:, 1:].T  # past cut i: past at least i + 1 cuts

    def merge(self, other: RangeHistogram, scale: float = 1.0) -> None:
        """Add another histogram's counts (same formats); with ``scale``, a power of two, as if
        its values had been multiplied by it (exactly: the binades shift by log2(scale)), e.g.
        ``1 / S`` to take a loss scale S back out of recorded gradients.

        >>> a, b = RangeHistogram(formats=("fp16",)), RangeHistogram(formats=("fp16",))
        >>> b.add([3.0 * 2.0**16, 0.0]); a.merge(b, scale=2.0**-16); a.bins()
        (array([1]), array([1]))
        """
        if other._formats != self._formats:
            raise ValueError("can only merge histograms built for the same formats")
        k = _log2_exact(scale)
        arrays = ((self.counts, other.counts), (self.exact_powers, other.exact_powers),
                  (self._past.T, other._past.T))  # fmt: skip
        if k:
            nz = np.flatnonzero(other.counts)
            if nz.size and not (0 <= nz[0] + k and nz[-1] + k < _NBINS):
                raise ValueError(f"scaling by 2^{k} moves values out of float64's range")
        for mine, theirs in arrays:
            if k >= 0:
                mine[k:] += theirs[: _NBINS - k]
            else:
                mine[:k] += theirs[-k:]
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

    def _format(self, fmt: FormatLike) -> Format:
        if isinstance(fmt, str) and fmt in self._formats:  # a registered name: the fast path
            return self._formats[fmt]
        f = get_format(fmt)
        known = self._formats.get(f.name)
        if known is None:
            raise ValueError(
                f"this RangeHistogram keeps exact zone counts for {', '.join(self._formats)};"
                f" build it with formats=(..., {f.name!r}) to ask about {f.name}"
            )
        if known != f:
            raise ValueError(
                f"this RangeHistogram's {f.name!r} is {known!r}, not {f!r}; give different "
                "formats different names"
            )
        return f

    def _past_count(self, b: int, i: int) -> int:
        """Values past the threshold ``c × 2^b`` (``c`` the cut of index i): those of the
        binades above b, and those of binade b whose significand is past the cut c."""
        j = b - _EMIN
        above = int(self.counts[max(j + 1, 0) :].sum())
        return above + (int(self._past[i, j]) if 0 <= j < _NBINS else 0)

    def zones(self, fmt: FormatLike, scale: float = 1.0, subnormals: bool = True) -> dict:
        """Counts per zone (see the module docstring) after multiplying by ``scale``: for each
        value, the zone of ``round_to(x * scale, fmt, subnormals=subnormals)`` (round to
        nearest even), with ``x * scale`` taken exactly.

        ``scale`` must be a power of two (as GradScaler's are): multiplying by it is exact and
        shifts every binade by log2(scale), so the answer is exact. Values pushed past
        float64's range by the shift count as overflow / underflow like any other.
        """
        f = self._format(fmt)
        k = _log2_exact(scale)
        # a value x is past a threshold T after the scale iff x is past T / 2^k: binade b - k
        past = {z: self._past_count(b - k, i) for z, b, i in self._bound_idx[f.name]}
        return self._zones(past, subnormals, int(self.counts.sum()), self.zero, self.nonfinite)

    @staticmethod
    def _zones(past: dict, subnormals: bool, nonzero: int, zero: int, nonfinite: int) -> dict:
        """The zone counts from the values past each boundary (``past``: zone -> count)."""
        kept = past["zero"] if subnormals else past["normal"]  # what does not round to 0
        return {
            "zero": zero,
            "underflow": nonzero - kept,
            "subnormal": kept - past["normal"],
            "normal": past["normal"] - past["overflow"],
            "overflow": past["overflow"],
            "nonfinite": nonfinite,
        }

    def fractions(self, fmt: FormatLike, scale: float = 1.0, subnormals: bool = True) -> dict:
        """:meth:`zones` divided by the number of values added."""
        z = self.zones(fmt, scale, subnormals)
        n = max(self.count, 1)
        return {k: v / n for k, v in z.items()}

    def lost_fraction(self, fmt: FormatLike, scale: float = 1.0, subnormals: bool = True) -> float:
        """Fraction of the *non-zero* finite values that would become zero (underflow)."""
        z = self.zones(fmt, scale, subnormals)
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


# ---- gradients of a model, true and as produced ------------------------------------------------
KINDS = ("activation", "weight")


@dataclass
class GradientRecord:
    """What a :class:`GradientRecorder` keeps for one layer and one kind of gradient.

    ``reference``: a :class:`RangeHistogram` of the *true* gradients (fp32, no loss scale).
    ``produced``: one of the gradients the simulated run produced, divided by the loss scale of
    that backward pass (float64; exact for a power-of-two scale). ``error``: one of the relative
    errors ``|produced - reference| / |reference|`` of the elements non-zero and finite in both.
    The counters compare the two element by element: ``values`` compared; ``reference_nonzero``;
    ``lost`` (reference non-zero, produced exactly zero); ``subnormal`` (reference non-zero,
    produced value *as stored*, i.e. still scaled, in the format's subnormal range);
    ``appeared`` (reference zero, produced non-zero); ``nonfinite`` (produced inf or NaN).
    """

    reference: RangeHistogram
    produced: RangeHistogram
    error: RangeHistogram
    values: int = 0
    reference_nonzero: int = 0
    lost: int = 0
    subnormal: int = 0
    appeared: int = 0
    nonfinite: int = 0

    @property
    def lost_fraction(self) -> float:
        """``lost / reference_nonzero``: the share of the non-zero true gradients that became 0."""
        return self.lost / self.reference_nonzero if self.reference_nonzero else 0.0

    @property
    def subnormal_fraction(self) -> float:
        """``subnormal / reference_nonzero``: the share kept only as subnormals (fewer bits)."""
        return self.subnormal / self.reference_nonzero if self.reference_nonzero else 0.0

    def median_error(self) -> float:
        """The binade ``2^k`` holding the median relative error of the elements kept (0.0 when
        all were exact, NaN when none were compared)."""
        h = self.error
        n = h.count - h.nonfinite
        if n == 0:
            return math.nan
        if h.zero * 2 >= n:
            return 0.0
        exps, counts = h.bins()
        i = int(np.searchsorted(np.cumsum(counts) + h.zero, n / 2))
        return 2.0 ** int(exps[min(i, exps.size - 1)])

    def merge(self, other: GradientRecord) -> None:
        self.reference.merge(other.reference)
        self.produced.merge(other.produced)
        self.error.merge(other.error)
        for name in ("values", "reference_nonzero", "lost", "subnormal", "appeared", "nonfinite"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


class GradientRecorder:
    """Record a model's gradients during low-precision training next to the true ones.

    ``GradientRecorder(model)`` puts forward hooks on the layers (default: every module that
    owns parameters, e.g. each ``Linear``; modules without parameters, such as a final fixed
    scaling, are recorded only when named in ``layers=`` -- and the gradient of the loss with
    respect to the model's output, often the largest and so the first to overflow under a loss
    scale, is seen only when the module producing it is listed). A layer's forward hook
    registers a tensor hook on its output, so the backward pass hands over the *activation
    gradient* (the gradient of the loss with respect to the layer's output, summed over its
    uses, in the output's format). After backward, :meth:`record` (or :meth:`on_backward`, the
    callback for :func:`fpsim.amp.train`) reads the *weight gradients* (``.grad`` of the layer's
    own parameters: weight and bias), then computes the **reference**: the same batch and loss
    through a private copy of the model in fp32 (autocast off, no loss scale), with the weights
    the optimizer holds (the fp32 masters for master-weight recipes, else the model's
    parameters) -- so the run's ``.grad`` is left untouched. Per layer and kind
    (``"activation"``, ``"weight"``) it keeps a :class:`GradientRecord`: histograms of the
    reference and of the produced gradients divided by the loss scale, and element-by-element
    counts of what was lost to zero or kept as a subnormal.

    Precisely: ``produced = stored / S`` in float64, where ``stored`` is the gradient as the run
    holds it after backward (fp16 values, scaled by the loss scale ``S`` of that backward pass;
    for an autocast run the weight gradient is the fp16 gradient of the weight's fp16 copy,
    passed exactly to the fp32 parameter). "Lost" and "subnormal" are judged on ``stored``, the
    value the format actually held, subnormal meaning ``0 < |stored| < fmt.min_normal`` for the
    run's low-precision format ``fmt`` (the recipe's autocast dtype or model format; fp32 for
    the fp32 recipe). Note the trap this avoids: in :func:`~fpsim.amp.train`'s ``on_backward``
    the gradients are still scaled, and a reference backward on the model itself would add
    into its ``.grad``.

    ``every``: record every k-th step (:meth:`on_backward` reads the step number; the reference
    costs about one fp32 training step). ``formats``: the formats the histograms answer zone
    questions for. The model must compute the same thing twice (no dropout); one forward and
    one backward per step.

    >>> from fpsim import amp
    >>> X, Y = amp.underflow_task(256, seed=0)
    >>> model = amp.underflow_model(seed=0)
    >>> rec = GradientRecorder(model)
    >>> res = amp.train(model, (X, Y), "fp16", steps=4, on_backward=rec.on_backward)
    >>> rec.layers, rec.steps
    (['0.0', '0.2', '0.4'], [0, 1, 2, 3])
    >>> f"{rec.total('activation').lost_fraction:.0%} of the non-zero activation gradients lost"
    '96% of the non-zero activation gradients lost'
    """

    def __init__(
        self,
        model,
        fmt: FormatLike | None = None,
        layers=None,
        every: int = 1,
        formats: tuple[FormatLike, ...] = DEFAULT_FORMATS,
    ) -> None:
        import copy

        from . import nn

        if not isinstance(model, nn.Module):
            # Refused here: a torch module has named_modules() too and would fail much later.
            # Recognised by its classes' modules, without importing torch.
            kind = f"{type(model).__module__}.{type(model).__qualname__}"
            msg = f"GradientRecorder records fpsim models (fpsim.nn.Module), got {kind}"
            if any(c.__module__.split(".")[0] == "torch" for c in type(model).__mro__):
                msg += (
                    ", a PyTorch model: watch it with fpsim.torch.watch(model) (range "
                    "histograms of its activations and gradients, loss-scale windows), or build "
                    "the model with fpsim.nn"
                )
            raise TypeError(msg)
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every!r}")
        self.model = model
        self.fmt: Format | None = None if fmt is None else get_format(fmt)
        self._fmt_given = fmt is not None
        self.every = int(every)
        self._formats = tuple(formats)
        named = dict(model.named_modules())
        if layers is None:
            chosen = [n for n, m in named.items() if any(p is not None for p in
                      m._parameters.values())]  # fmt: skip
        elif isinstance(layers, type) or (
            isinstance(layers, tuple) and all(isinstance(t, type) for t in layers)
        ):
            chosen = [n for n, m in named.items() if isinstance(m, layers)]
        else:
            chosen = list(layers)
            unknown = [n for n in chosen if n not in named]
            if unknown:
                raise ValueError(f"no such layers: {unknown}; the model has {list(named)}")
        if not chosen:
            raise ValueError("no layers to record (no module owns parameters?)")
        self.layers: list[str] = chosen
        # the reference: an fp32 copy, made before any hook of ours is on the model
        self._ref = copy.deepcopy(model)
        if isinstance(self._ref, nn.Module):
            self._ref.float()
        ref_named = dict(self._ref.named_modules())
        self._captured: dict[str, dict[str, list[np.ndarray]]] = {"run": {}, "ref": {}}
        self._handles = []
        for side, mods in (("run", named), ("ref", ref_named)):
            for name in chosen:
                hook = self._forward_hook(side, name)
                self._handles.append(mods[name].register_forward_hook(hook))
            root = model if side == "run" else self._ref
            self._handles.append(root.register_forward_pre_hook(self._clear_hook(side)))
        self.records: dict[tuple[str, str], GradientRecord] = {
            (name, kind): self._new_record() for name in chosen for kind in KINDS
        }
        self.steps: list[int] = []
        self.scales: list[float] = []
        self._calls = 0

    # ---- hooks ---------------------------------------------------------------------------------
    def _new_record(self) -> GradientRecord:
        fmts = self._formats + ((self.fmt.name,) if self.fmt is not None else ())
        fmts = tuple(dict.fromkeys(get_format(f).name for f in fmts))
        return GradientRecord(RangeHistogram(fmts), RangeHistogram(fmts), RangeHistogram(fmts))

    def _forward_hook(self, side: str, name: str):
        from .autograd.tensor import Tensor

        store = self._captured[side]

        def capture(grad) -> None:
            store.setdefault(name, []).append(np.array(grad.data, dtype=np.float32))

        def hook(module, inputs, output) -> None:
            if isinstance(output, Tensor) and output.requires_grad:
                output.register_hook(capture)

        return hook

    def _clear_hook(self, side: str):
        def hook(module, inputs) -> None:  # a new forward pass of the whole model
            self._captured[side].clear()

        return hook

    def remove(self) -> None:
        """Take the hooks off the model (the records stay)."""
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> GradientRecorder:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    # ---- recording -----------------------------------------------------------------------------
    def on_backward(self, state) -> None:
        """The ``on_backward`` callback of :func:`fpsim.amp.train`: record every ``every``-th
        step, dividing by ``state.scale``; the run's format is taken from ``state.recipe`` when
        the recorder was made without one."""
        r = state.recipe
        run_fmt = get_format(r.autocast or (r.model_format if r.master_weights else "fp32"))
        if self.fmt is None:
            self._set_format(run_fmt)
        elif run_fmt != self.fmt and not self._fmt_given:
            raise ValueError(
                f"this recorder holds a {self.fmt.name} run; make one GradientRecorder per run "
                f"(this one is {run_fmt.name})"
            )
        if state.step % self.every:
            self._captured["run"].clear()
            return
        self.record(state.batch, state.loss_fn, state.scale, master=state.master,
                    step=state.step)  # fmt: skip

    def _set_format(self, fmt: FormatLike) -> None:
        """Set the run's format; the (still empty) records are remade to answer for it."""
        f = get_format(fmt)
        if any(rec.values for rec in self.records.values()):
            raise ValueError("the recorder already holds gradients of another run")
        self.fmt = f
        self.records = {key: self._new_record() for key in self.records}

    def record(self, batch, loss_fn, scale: float = 1.0, master=None, step: int | None = None):
        """Record one step, after the run's backward of ``loss_fn(model(x), y) * scale``.

        ``batch``: the ``(x, y)`` the model was called with; ``master``: the
        :class:`~fpsim.amp.MasterWeights` whose fp32 parameters are the weights (if any).
        """
        from .amp.autocast_mode import autocast
        from .autograd.grad_mode import enable_grad
        from .autograd.tensor import Tensor, tensor
        from .formats import fp32

        if self.fmt is None:
            raise ValueError("give the run's format: GradientRecorder(model, fmt='fp16')")
        run = self._captured["run"]
        missing = [n for n in self.layers if n not in run]
        if missing:
            raise RuntimeError(
                f"no activation gradient was seen for layers {missing}: call record() after "
                "the backward pass of a forward pass made with the hooks on"
            )
        named = dict(self.model.named_modules())
        stored = {
            (name, "activation"): np.concatenate([g.ravel() for g in run[name]])
            for name in self.layers
        }
        for name in self.layers:
            grads = [p.grad.data.ravel() for p in named[name]._parameters.values()
                     if p is not None and p.grad is not None]  # fmt: skip
            stored[(name, "weight")] = np.concatenate(grads) if grads else np.zeros(0, np.float32)
        run.clear()

        # the reference: same weights (the optimizer's), same batch, fp32, no scale
        source = (
            dict(master.named_parameters())
            if master is not None
            else dict(self.model.named_parameters())
        )
        for pname, p in self._ref.named_parameters():
            p.data[...] = source[pname].data
            p._bump_version()  # PyTorch's p.copy_(...): a graph that kept the old ones refuses
            p.grad = None
        x, y = batch
        x = x if isinstance(x, Tensor) else tensor(x)
        y = y if isinstance(y, Tensor) else tensor(y)
        if x.format is not None and x.format != fp32:
            x = x.to(fp32)
        with autocast("cuda", enabled=False), autocast("cpu", enabled=False), enable_grad():
            out = self._ref(x)
            loss_fn(out, y).backward()
        ref_run = self._captured["ref"]
        ref_named = dict(self._ref.named_modules())
        for name in self.layers:
            ref = np.concatenate([g.ravel() for g in ref_run[name]])
            grads = [p.grad.data.ravel() for p in ref_named[name]._parameters.values()
                     if p is not None and p.grad is not None]  # fmt: skip
            refw = np.concatenate(grads) if grads else np.zeros(0, np.float32)
            self._add((name, "activation"), ref, stored[(name, "activation")], scale)
            self._add((name, "weight"), refw, stored[(name, "weight")], scale)
        ref_run.clear()
        for p in self._ref.parameters():
            p.grad = None
        self.steps.append(self._calls if step is None else int(step))
        self.scales.append(float(scale))
        self._calls += 1

    def _add(self, key: tuple[str, str], ref: np.ndarray, stored: np.ndarray, scale: float):
        if ref.shape != stored.shape:
            raise RuntimeError(
                f"{key}: the run's gradient has {stored.size} values, the reference's "
                f"{ref.size}: did the model compute something different the second time?"
            )
        rec = self.records[key]
        produced = stored.astype(np.float64) / float(scale)
        rec.reference.add(ref)
        rec.produced.add(produced)
        r = ref.astype(np.float64)
        rnz = r != 0
        s = np.abs(stored.astype(np.float64))
        finite = np.isfinite(s)
        rec.values += ref.size
        rec.reference_nonzero += int(np.count_nonzero(rnz))
        rec.lost += int(np.count_nonzero(rnz & (s == 0)))
        rec.subnormal += int(np.count_nonzero(rnz & (s > 0) & (s < self.fmt.min_normal)))
        rec.appeared += int(np.count_nonzero(~rnz & (s != 0)))
        rec.nonfinite += int(np.count_nonzero(~finite))
        both = rnz & finite & (s != 0) & np.isfinite(r)
        rec.error.add(np.abs(produced[both] - r[both]) / np.abs(r[both]))

    # ---- reading ---------------------------------------------------------------------------
    def total(self, kind: str | None = None, layer: str | None = None) -> GradientRecord:
        """The records of one kind and/or layer (None: all) merged into one."""
        if kind is not None and kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if layer is not None and layer not in self.layers:
            raise ValueError(f"unknown layer {layer!r}; recorded: {self.layers}")
        out = self._new_record()
        for (name, k), rec in self.records.items():
            if (kind is None or k == kind) and (layer is None or name == layer):
                out.merge(rec)
        return out

    def histograms(self, kind: str = "activation", which: str = "reference") -> dict:
        """``{layer: RangeHistogram}`` of one kind, ``which`` = "reference" or "produced" (for
        :func:`fpsim.plot.plot_layer_histograms`)."""
        if which not in ("reference", "produced"):
            raise ValueError(f"which must be 'reference' or 'produced', got {which!r}")
        return {name: getattr(self.records[(name, kind)], which) for name in self.layers}

    def table(self) -> str:
        """One line per layer and kind: values, % lost to zero, % subnormal, median error."""
        fmt = self.fmt.name if self.fmt is not None else "?"
        rows = [
            f"{'layer':8} {'kind':10} {'values':>10} {'lost to 0':>9} {'subnormal':>9} "
            f"{'median rel. error':>17}   ({fmt}, {len(self.steps)} recorded steps)"
        ]
        keys = list(self.records) + [("all", k) for k in KINDS]
        for name, kind in keys:
            rec = self.records[(name, kind)] if name != "all" else self.total(kind)
            err = rec.median_error()
            e = "-" if math.isnan(err) else ("0" if err == 0 else f"2^{int(math.log2(err))}")
            rows.append(f"{name:8} {kind:10} {rec.values:>10,} {100 * rec.lost_fraction:>8.2f}% "
                        f"{100 * rec.subnormal_fraction:>8.2f}% {e:>17}")  # fmt: skip
        return "\n".join(rows)

    def __repr__(self) -> str:
        fmt = self.fmt.name if self.fmt is not None else None
        n = len(self.steps)
        return f"GradientRecorder(layers={self.layers}, fmt={fmt}, recorded_steps={n})"


# ---- scaled formats: what each scaling keeps, element by element -------------------------------
#: What :func:`scaling_report` compares by default: fp16 without a scale, fp8 E4M3 with one
#: per-tensor scale (TransformerEngine's current scaling), and the block formats MXFP8 (E4M3),
#: MXFP4 and NVFP4.
DEFAULT_SCALING_SCHEMES = ("fp16", "fp8_e4m3/current", "mxfp8_e4m3", "mxfp4", "nvfp4")

#: The outcomes :class:`ScalingRow` counts; every non-zero finite element has exactly one.
OUTCOMES = ("zero", "subnormal", "saturated", "kept")


@dataclass(frozen=True)
class ScalingRow:
    """What quantizing one tensor with one scheme did to it (a row of :func:`scaling_report`).

    ``label``: the scheme as given (``"mxfp4"``, ``"fp8_e4m3, current scaling"``, ...);
    ``kind``: ``"none"`` (rounded as is), ``"per-tensor"`` or ``"per-block"``; ``element``: the
    format the values are stored in; ``bits_per_element``: its bits plus the scales' bits
    spread over the elements (one float32 per tensor, one scale per block).

    Counts, each from the scheme's ``classify`` (exact, element by element): ``values`` (all
    elements), ``nonzero`` (the finite non-zero ones), ``zero`` (non-zero, stored as 0:
    flushed), ``subnormal`` (stored as a subnormal of the element format: fewer significant
    bits), ``saturated`` (beyond the element's max after scaling: clipped to it, or, unscaled,
    overflowed to inf/NaN), ``nonfinite`` (inf/NaN in x, or in a block holding one). ``kept``
    is what is left: stored as a normal number (or an exact zero that was zero).

    Errors, over the finite elements of x, with ``q`` the dequantized tensor: ``norm_error`` =
    ||x - q|| / ||x|| (Euclidean: set by the largest values) and ``mean_error`` = the mean of
    |x - q| / |x| over the non-zero elements (every flushed element counts 1: set by the
    many small ones). ``scale_exponents``: log2 of every scale the dequantization multiplies
    by (one per block, times the tensor scale for NVFP4; one for a per-tensor scale, its
    ``scale_inv``; none without scaling). ``result``: what the scheme's quantize returned
    (a :class:`~fpsim.scaling.ScaledTensor`, a :class:`~fpsim.scaling.PerTensorScaled`, or the
    rounded array).
    """

    label: str
    kind: str
    element: Format
    bits_per_element: float
    values: int
    nonzero: int
    zero: int
    subnormal: int
    saturated: int
    nonfinite: int
    norm_error: float
    mean_error: float
    scale_exponents: np.ndarray = dataclasses_field(repr=False, compare=False)
    result: Any = dataclasses_field(repr=False, compare=False)

    @property
    def kept(self) -> int:
        """Elements stored as normal numbers (or zeros that were zero)."""
        return self.values - self.zero - self.subnormal - self.saturated - self.nonfinite

    def fractions(self) -> dict[str, float]:
        """``zero``, ``subnormal``, ``saturated``, ``kept`` (and ``nonfinite``) as shares of all
        the elements; they add up to 1."""
        n = max(self.values, 1)
        return {k: getattr(self, k) / n for k in OUTCOMES + ("nonfinite",)}


def _outcome_masks(x: np.ndarray, q: np.ndarray, f: Format) -> dict[str, np.ndarray]:
    """classify() for a tensor rounded without a scale: as the scaled ones' (``q`` the stored
    values, ``f`` their format), an overflow to inf/NaN counting as saturated."""
    fin_x = np.isfinite(x)
    fin_q = np.isfinite(q)
    mag = np.abs(q)
    with np.errstate(invalid="ignore"):
        return {
            "zero": fin_x & fin_q & (q == 0) & (x != 0),
            "subnormal": fin_x & fin_q & (mag > 0) & (mag < f.min_normal),
            "saturated": fin_x & ((np.abs(x) > f.max) | ~fin_q),
            "nonfinite": ~fin_x,
        }


def _scaling_spec(spec: Any) -> tuple[str | None, Any, dict]:
    """``spec`` -> (label or None, the scheme / format / recipe, options)."""
    if isinstance(spec, tuple):
        if len(spec) == 2 and isinstance(spec[0], str):
            return spec[0], spec[1], {}
        if len(spec) == 3 and isinstance(spec[0], str) and isinstance(spec[2], dict):
            return spec[0], spec[1], dict(spec[2])
        raise TypeError(
            "a scheme given as a tuple is (label, scheme) or (label, scheme, options); "
            f"got {spec!r}"
        )
    return None, spec, {}


def _quantize_one(x: np.ndarray, spec: Any, axis: int):
    """Quantize x with one spec: -> (label, kind, element format, bits/element, a function
    giving the dequantized values, masks, log2 scales, result)."""
    from . import scaling

    label, what, opts = _scaling_spec(spec)
    if isinstance(what, str) and what.strip().lower().endswith(("/current", "/delayed")):
        name, how = what.strip().rsplit("/", 1)
        what = (scaling.CurrentScaling if how.lower() == "current" else scaling.DelayedScaling)(
            name, **opts
        )
        opts = {}
    if isinstance(what, (scaling.CurrentScaling, scaling.DelayedScaling)):
        if opts:
            raise TypeError(f"a per-tensor recipe takes no options here, got {opts!r}")
        how = "current" if isinstance(what, scaling.CurrentScaling) else "delayed"
        p = what.quantize(x)
        masks = p.classify(x)
        bits = what.fmt.bits + 32 / max(x.size, 1)
        logs = np.array([math.log2(p.scale_inv)])
        return (label or f"{what.fmt.name}, {how} scaling", "per-tensor", what.fmt, bits,
                p.dequantize, masks, logs, p)  # fmt: skip
    scheme = None
    if isinstance(what, scaling.BlockScheme):
        scheme = what
    elif isinstance(what, str):
        try:
            scheme = scaling.get_scheme(what)
        except ValueError:
            scheme = None
    if scheme is not None:
        q = scaling.quantize(x, scheme, axis=axis, **opts)
        masks = q.classify(x)
        nblocks = q.scales.size
        extra = 32 if q.tensor_scale is not None else 0
        bits = scheme.element.bits + (nblocks * scheme.scale.bits + extra) / max(x.size, 1)
        eff = q.scales * (q.tensor_scale if q.tensor_scale is not None else 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.log2(eff[np.isfinite(eff) & (eff > 0)]).ravel()
        name = scheme.name
        if opts.get("scale_rounding") not in (None, scheme.scale_roundings[0]):
            name += f", {opts['scale_rounding']}"
        return label or name, "per-block", scheme.element, bits, q.dequantize, masks, logs, q
    from .core import round_to

    f = get_format(what)  # raises ValueError naming the known formats
    r = np.asarray(round_to(x, f, **opts))
    q64 = r.astype(np.float64)
    return (label or f.name, "none", f, float(f.bits), lambda: q64, _outcome_masks(x, q64, f),
            np.zeros(0), r)  # fmt: skip


def _errors(x: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """(||x - q|| / ||x||, mean |x - q| / |x| over non-zero x), over the finite x."""
    fin = np.isfinite(x)
    xf, qf = x[fin], q[fin]
    if xf.size == 0:
        return 0.0, 0.0
    m = float(np.max(np.abs(xf)))
    with np.errstate(over="ignore", invalid="ignore"):
        if m == 0:
            norm = 0.0 if np.all(qf == 0) else math.inf
        else:  # divided by the amax first: no overflow in the squares
            d, xs = (xf - qf) / m, xf / m
            norm = float(np.sqrt(np.sum(d * d)) / np.sqrt(np.sum(xs * xs)))
        nz = xf != 0
        rel = np.abs(xf[nz] - qf[nz]) / np.abs(xf[nz])
    mean = float(np.mean(rel)) if rel.size else 0.0
    return (math.inf if math.isnan(norm) else norm), (math.inf if math.isnan(mean) else mean)


def scaling_report(x: Any, schemes: Any = DEFAULT_SCALING_SCHEMES, *, axis: int = -1,
                   errors: bool = True) -> list[ScalingRow]:  # fmt: skip
    """Quantize ``x`` with each scheme and count, element by element, what was flushed to zero,
    kept only as a subnormal, saturated, or kept: one :class:`ScalingRow` per scheme.

    A scheme is a block scheme (a name of :data:`fpsim.scaling.SCHEMES` or a
    :class:`~fpsim.scaling.BlockScheme`; blocks run along ``axis``), a per-tensor recipe
    (:class:`~fpsim.scaling.CurrentScaling` / :class:`~fpsim.scaling.DelayedScaling`, or
    ``"fp8_e4m3/current"``, ``"fp8_e5m2/delayed"``: a fresh recipe, whose delayed scale is
    then 1), or a format (``"fp16"``: :func:`fpsim.round_to` without any scale). ``(label,
    scheme)`` names the row; ``(label, scheme, options)`` passes options on: to
    :func:`fpsim.scaling.quantize` (``{"scale_rounding": "rceil"}``), the recipe's constructor
    or :func:`fpsim.round_to` (``{"saturate": True}``).

    The counts come from ``classify`` of the quantized tensor, so they are exact.
    ``errors=False`` leaves the two errors out (NaN), for speed. ``x`` is read
    as float64 (float32 input exactly); the per-tensor recipes see its float32 values, as
    TransformerEngine casts them.

    >>> import numpy as np
    >>> x = np.array([6.0, 0.1, 0.01, 1e-5] * 8)  # one block of 32
    >>> for r in scaling_report(x, ["mxfp4", "fp8_e4m3/current", "fp16"]):
    ...     print(f"{r.label:26} {r.bits_per_element:5.2f} bits  zero {r.zero:2}  "
    ...           f"subnormal {r.subnormal:2}  saturated {r.saturated}")
    mxfp4                       4.25 bits  zero 24  subnormal  0  saturated 0
    fp8_e4m3, current scaling   9.00 bits  zero  8  subnormal  0  saturated 0
    fp16                       16.00 bits  zero  0  subnormal  8  saturated 0
    """
    if isinstance(schemes, str) or not isinstance(schemes, (list, tuple)):
        schemes = [schemes]
    a = np.asarray(x)
    if a.dtype.kind not in "fiub":
        raise TypeError(f"scaling_report expects real numbers, got an array of {a.dtype}")
    xd = a.astype(np.float64)
    rows = []
    for spec in schemes:
        label, kind, f, bits, deq, masks, logs, res = _quantize_one(a, spec, axis)
        norm, mean = _errors(xd, deq()) if errors else (math.nan, math.nan)
        fin = np.isfinite(xd)
        zero, sub, sat = (masks[k] & fin for k in ("zero", "subnormal", "saturated"))
        nonfinite = (masks["nonfinite"] | ~fin) & ~(zero | sub | sat)
        rows.append(ScalingRow(
            label=label, kind=kind, element=f, bits_per_element=float(bits), values=int(xd.size),
            nonzero=int(np.count_nonzero(fin & (xd != 0))),
            zero=int(np.count_nonzero(zero)), subnormal=int(np.count_nonzero(sub)),
            saturated=int(np.count_nonzero(sat)), nonfinite=int(np.count_nonzero(nonfinite)),
            norm_error=norm, mean_error=mean, scale_exponents=logs, result=res,
        ))  # fmt: skip
    return rows
