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
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ..containers import is_torch_tensor, torch_to_numpy
from ..formats import Format, FormatLike, get_format
from ..kernels import histogram as _khist

__all__ = ["RangeHistogram", "BinadeCounts", "ZONES", "DEFAULT_FORMATS"]

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

    def bits_adder(self, fmt: FormatLike, tensor_formats: tuple, *,
                   at_address: bool = False) -> Any:  # fmt: skip
        """``add(bits, k, zones) -> amax``: what ``add_bits(bits, fmt, 2.0**k,
        tensor_formats=tensor_formats, tensor_zones=zones)`` does for a host array, without its
        checks and look-ups, for a caller adding many arrays (:func:`fpsim.torch.watch` adds
        ~90 tensors per training step of a small model, where each microsecond per tensor
        shows). ``bits``: a 1-D C-contiguous numpy array of native integers at least as wide
        as ``fmt``; ``zones``: an int64 array of shape ``(len(tensor_formats), 6)``. Made once
        per (fmt, tensor_formats) and kept.

        ``at_address=True``: ``add(address, n, k, zones) -> amax`` instead, reading the ``n``
        codes stored contiguously, in native byte order, from the memory address ``address``
        on (fmt 16, 32 or 64 bits wide): for :func:`fpsim.torch.watch`, which hands over a CPU
        tensor's ``data_ptr()`` (making a numpy view of each tensor costs more than counting a
        small one). The caller keeps that memory alive during the call; a wrong address or
        ``n`` reads memory it should not (nothing can check them).

        >>> h = RangeHistogram(formats=("fp16",)); z = np.zeros((1, 6), np.int64)
        >>> add = h.bits_adder("fp16", ("fp16",))
        >>> add(np.array([0x3C00, 0x0001, 0x8000], np.uint16), 0, z)  # 1, 2^-24, -0
        1.0
        >>> z.tolist(), h.zones("fp16")["subnormal"]  # scaled by 2^15, both are normal
        ([[1, 0, 0, 2, 0, 0]], 1)
        >>> a = np.array([0x4000, 0x7C00], np.uint16)  # 2, inf
        >>> h.bits_adder("fp16", ("fp16",), at_address=True)(a.ctypes.data, a.size, 0, z)
        2.0
        """
        key = (fmt, tensor_formats, at_address)
        add = self._adders.get(key)
        if add is not None:
            return add
        f, thr, lut, shift, first, _, _, slots, k0, prefix, pshift = self._plan(fmt)
        b, i, fmax = self._zone_plan(tuple(tensor_formats))
        eb, mb, bias = f.exp_bits, f.man_bits, f.bias

        def added(result: tuple, k: int) -> float:
            ok, amax, zero, nonfinite = result
            if not ok:
                raise ValueError(f"scaling by 2^{k} moves values out of float64's range")
            self.zero += zero
            self.nonfinite += nonfinite
            return amax

        if at_address:
            count_at = {16: _khist.count_and_add_at16, 32: _khist.count_and_add_at32,
                        64: _khist.count_and_add_at64}.get(f.bits)  # fmt: skip
            if count_at is None:
                raise ValueError(f"at_address reads 16-, 32- or 64-bit codes, not {f.name}'s")

            def add(address: int, n: int, k: int, zones: np.ndarray) -> float:
                return added(count_at(
                    address, n, eb, mb, bias, first, thr, lut, shift, prefix, pshift, slots, k0,
                    k, _EMIN, self.counts, self.exact_powers, self._past, b, i, fmax, zones,
                ), k)  # fmt: skip

        else:
            count = _khist.count_and_add

            def add(bits: np.ndarray, k: int, zones: np.ndarray) -> float:
                return added(count(
                    bits, eb, mb, bias, first, thr, lut, shift, prefix, pshift, slots, k0, k,
                    _EMIN, self.counts, self.exact_powers, self._past, b, i, fmax, zones,
                ), k)  # fmt: skip

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
            from ..kernels import histogram_cuda

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
