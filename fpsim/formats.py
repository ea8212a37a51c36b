"""Number formats: a binary floating-point format described by its bit fields and its specials.

A :class:`Format` is an optional sign bit, ``exp_bits`` exponent bits and ``man_bits`` stored
mantissa (fraction) bits. A finite value with biased exponent field ``E`` and fraction ``f`` is

* normal:    ``(-1)^s × 1.f × 2^(E - bias)``
* subnormal: ``(-1)^s × 0.f × 2^(1 - bias)``   for ``E == 0`` when the format has subnormals

Which codes are *not* finite numbers is told by named properties (in the spirit of gfloat's
``FormatInfo``), so one model describes every format in use:

``has_inf``
    The largest non-NaN magnitude code is ±infinity (IEEE: exponent all ones, fraction 0;
    P3109 "extended": the all-ones code ``0x7F``/``0xFF``).
``nan``
    How NaN is encoded: ``"ieee"`` (all-ones exponent, non-zero fraction: fp32, fp16, bf16,
    fp8 E5M2), ``"all_ones"`` (the single all-ones magnitude code of each sign: OCP FP8 E4M3's
    ``S.1111.111``; E8M0's ``0xFF``), ``"negzero"`` (the code a negative zero would have,
    ``0x80``, is the one NaN, so there is no -0: the ``fnuz`` formats and P3109) or ``"none"``
    (FP4 E2M1, FP6: every code is a number).
``has_subnormals``
    Exponent field 0 holds zero and the subnormals (gradual underflow). When False (E8M0,
    which has no mantissa bits) field 0 is an ordinary binade: the format has no zero at all.
``signed``
    Whether there is a sign bit (E8M0 and the unsigned P3109 formats have none).

``style`` names the usual combinations: ``"ieee"`` (inf + IEEE NaN), ``"fn"`` (no inf, all-ones
NaN), ``"fnuz"`` (no inf, NaN at 0x80, no -0) and ``"finite"`` (no inf, no NaN).

Example — the textbook 8-bit format (4 exponent, 3 fraction bits, bias 7) and OCP FP4:

>>> f = Format(4, 3, name="e4m3_ieee")
>>> f.max, f.min_normal, f.smallest_subnormal
(240.0, 0.015625, 0.001953125)
>>> fp4_e2m1.max, fp4_e2m1.has_inf, fp4_e2m1.has_nan, e8m0.signed, e8m0.has_zero
(6.0, False, False, False, False)
>>> get_format("half").max, get_format("float8_e4m3fnuz").has_negzero
(65504.0, False)
"""

from __future__ import annotations

import ast
import numbers
import re
from typing import Any

import numpy as np

from .kernels.record import FormatRecord

__all__ = [
    "Format",
    "get_format",
    "list_formats",
    "p3109",
    "fp32",
    "fp16",
    "bf16",
    "tf32",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_e4m3_ieee",
    "fp8_e4m3fnuz",
    "fp8_e5m2fnuz",
    "fp8_e4m3b11fnuz",
    "fp8_e3m4",
    "fp6_e2m3",
    "fp6_e3m2",
    "fp4_e2m1",
    "e8m0",
    "FormatLike",
]

NAN_ENCODINGS = ("ieee", "all_ones", "negzero", "none")

# The named combinations of (has_inf, nan) that ``style=`` accepts.
STYLES: dict[str, tuple[bool, str]] = {
    "ieee": (True, "ieee"),
    "fn": (False, "all_ones"),
    "fnuz": (False, "negzero"),
    "finite": (False, "none"),
}

_FLAGS = ("has_inf", "has_subnormals", "signed")


def _as_int(name: str, v: Any) -> int:
    # Python or numpy integers (stored as int); a float such as 15.5 would give limits that are
    # not values of the format, and "15" is a typo, not a number.
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {v!r} ({type(v).__name__})")
    return int(v)


def _as_bool(name: str, v: Any) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise TypeError(f"{name} must be True or False, got {v!r}")


class Format:
    """A binary floating-point format.

    ``Format(exp_bits, man_bits, bias=None, style=None, *, has_inf=None, nan=None,
    has_subnormals=True, signed=True, name="")``

    ``bias`` defaults to ``2^(exp_bits-1) - 1``. Give either a ``style`` (``"ieee"``, the
    default, ``"fn"``, ``"fnuz"``, ``"finite"``) or the properties ``has_inf`` and ``nan``
    themselves (see the module docstring). Every value of the format must be exactly a float64
    (``exp_bits <= 11``, ``man_bits <= 52``, the whole range inside float64's), so values can be
    stored in ordinary numpy arrays. A Format is immutable and hashable; two formats are equal
    when they have the same values and codes (the name is not compared).

    >>> fp16.bits, fp16.precision, fp16.emax, fp16.emin, fp16.eps
    (16, 11, 15, -14, 0.0009765625)
    >>> Format(4, 3, bias=8, style="fnuz") == fp8_e4m3fnuz, fp8_e4m3fnuz.max
    (True, 240.0)
    """

    __slots__ = ("exp_bits", "man_bits", "bias", "has_inf", "nan", "has_subnormals", "signed",
                 "name", "_record")  # fmt: skip

    exp_bits: int
    man_bits: int
    bias: int
    has_inf: bool
    nan: str
    has_subnormals: bool
    signed: bool
    name: str

    def __init__(
        self,
        exp_bits: int,
        man_bits: int,
        bias: int | None = None,
        style: str | None = None,
        *,
        has_inf: bool | None = None,
        nan: str | None = None,
        has_subnormals: bool = True,
        signed: bool = True,
        name: str = "",
    ) -> None:
        e = _as_int("exp_bits", exp_bits)
        m = _as_int("man_bits", man_bits)
        b = (1 << (e - 1)) - 1 if bias is None and e >= 1 else bias
        b = _as_int("bias", b) if b is not None else 0
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, got {name!r}")
        if style is not None and not isinstance(style, str):
            raise TypeError(f"style must be one of {tuple(STYLES)}, got {style!r}")
        if style is not None and style not in STYLES:
            raise ValueError(f"style must be one of {tuple(STYLES)}, got {style!r}")
        if style is not None and (has_inf is not None or nan is not None):
            s_inf, s_nan = STYLES[style]
            if (has_inf is not None and has_inf != s_inf) or (nan is not None and nan != s_nan):
                raise ValueError(
                    f"style={style!r} means has_inf={s_inf}, nan={s_nan!r}; got has_inf={has_inf}, "
                    f"nan={nan!r} (give a style or the properties, not both)"
                )
        if style is None and has_inf is None and nan is None:
            style = "ieee"
        if style is not None:
            has_inf, nan = STYLES[style]
        if has_inf is None:
            has_inf = False
        if nan is None:
            nan = "none"
        has_inf = _as_bool("has_inf", has_inf)
        has_subnormals = _as_bool("has_subnormals", has_subnormals)
        signed = _as_bool("signed", signed)
        if not isinstance(nan, str) or nan not in NAN_ENCODINGS:
            raise ValueError(f"nan must be one of {NAN_ENCODINGS}, got {nan!r}")
        for attr, v in (("exp_bits", e), ("man_bits", m), ("bias", b), ("has_inf", has_inf),
                        ("nan", nan), ("has_subnormals", has_subnormals), ("signed", signed),
                        ("name", name)):  # fmt: skip
            object.__setattr__(self, attr, v)
        self._validate()
        object.__setattr__(self, "_record", self._make_record())
        if not name:
            object.__setattr__(self, "name", self._generated_name())

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"Format is immutable: cannot set {key!r}")

    def _validate(self) -> None:
        e, m = self.exp_bits, self.man_bits
        if not 1 <= e <= 11:
            raise ValueError(f"exp_bits must be in 1..11 (to fit in float64), got {e}")
        if not 0 <= m <= 52:
            raise ValueError(f"man_bits must be in 0..52 (to fit in float64), got {m}")
        if self.nan == "ieee" and m == 0:
            raise ValueError(
                "nan='ieee' needs man_bits >= 1 (NaN is an all-ones exponent with a non-zero "
                "fraction); use nan='all_ones' for a format like E8M0"
            )
        if self.nan == "negzero" and not self.signed:
            raise ValueError("nan='negzero' (NaN where -0 would be) needs a sign bit")
        if not self.has_subnormals and m != 0:
            raise ValueError(
                "has_subnormals=False (exponent field 0 is an ordinary binade, so the format has "
                "no zero) is only defined for man_bits=0, as in E8M0; to flush a format's "
                "subnormals to zero, round with subnormals=False instead"
            )
        if self.has_subnormals and (self._max_mag() >> m) < 1:
            raise ValueError(f"{self._call_text()} has no normal binade below its specials")
        if self._max_mag() < 0 or (self.has_subnormals and self._max_mag() < 1):
            raise ValueError(f"{self._call_text()} has no positive finite value")
        if self.emax > 1023 or self.emin - m < -1074:
            raise ValueError(f"{self._call_text()} does not fit in float64")

    # ---- codes: where the specials sit -----------------------------------------------------
    @property
    def _width(self) -> int:
        return self.exp_bits + self.man_bits  # the magnitude bits, below the sign bit

    def _nan_mag(self) -> int:
        """Magnitude codes at or above this are NaN."""
        e, m = self.exp_bits, self.man_bits
        if self.nan == "ieee":
            return (((1 << e) - 1) << m) + 1
        if self.nan == "all_ones":
            return (1 << self._width) - 1
        return 1 << self._width

    def _max_mag(self) -> int:
        """The largest finite magnitude code: just below inf, or below the NaN codes."""
        return self._nan_mag() - 1 - (1 if self.has_inf else 0)

    def _make_record(self) -> FormatRecord:
        nan_mag = self._nan_mag()
        inf_mag = nan_mag - 1 if self.has_inf else -1
        if self.nan == "ieee":
            qnan = (((1 << self.exp_bits) - 1) << self.man_bits) | (1 << (self.man_bits - 1))
        elif self.nan == "all_ones":
            qnan = (1 << self._width) - 1
        else:
            qnan = -1
        return FormatRecord(
            self.exp_bits, self.man_bits, self.bias, int(self.signed), int(self.has_subnormals),
            self._max_mag(), inf_mag, nan_mag, qnan, int(self.nan == "negzero"),
        )  # fmt: skip

    @property
    def record(self) -> FormatRecord:
        """The format as the scalar kernels take it: one small record of integers (see
        :class:`fpsim.kernels.record.FormatRecord`). Passing the format as plain integers
        (never as a compile-time constant) means numba compiles each kernel once, for every
        format."""
        return self._record

    # ---- derived properties ------------------------------------------------------------------
    @property
    def has_nan(self) -> bool:
        return self.nan != "none"

    @property
    def has_negzero(self) -> bool:
        """Whether -0 exists (not in unsigned formats, nor where its code is the NaN)."""
        return self.signed and self.nan != "negzero"

    @property
    def has_zero(self) -> bool:
        """Whether 0 is a value (not in E8M0, whose exponent field 0 is ``2^-127``)."""
        return self.has_subnormals

    @property
    def style(self) -> str:
        """The name of this (has_inf, nan) combination, or ``"custom"``."""
        for s, props in STYLES.items():
            if props == (self.has_inf, self.nan):
                return s
        return "custom"

    @property
    def bits(self) -> int:
        """Total width in bits: sign (if any) + exp_bits + man_bits."""
        return int(self.signed) + self._width

    @property
    def precision(self) -> int:
        """Significand precision p in bits, the implicit leading bit included (fp16: 11)."""
        return self.man_bits + 1

    @property
    def max_exp_field(self) -> int:
        """The all-ones biased exponent, ``2^exp_bits - 1``."""
        return (1 << self.exp_bits) - 1

    @property
    def emax(self) -> int:
        """Unbiased exponent of the largest finite value (fp16: 15, fp8_e4m3: 8)."""
        return (self._max_mag() >> self.man_bits) - self.bias

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal value: ``1 - bias`` (fp16: -14); ``-bias``
        in a format without subnormals (E8M0: -127, its code 0)."""
        return 1 - self.bias if self.has_subnormals else -self.bias

    @property
    def max_significand(self) -> int:
        """Largest integer significand (implicit bit included) at exponent emax (fp16:
        ``2^11 - 1``; fp8_e4m3: 14, since ``S.1111.111`` is NaN)."""
        mask = (1 << self.man_bits) - 1
        return (self._max_mag() & mask) | (1 << self.man_bits)

    # ---- np.finfo-like limits (exact powers of two / sums of them, so float is exact) --------
    @property
    def max(self) -> float:
        """Largest finite value (fp16: 65504.0, bf16: 3.3895e38, fp8_e4m3: 448.0)."""
        return float(self.max_significand) * 2.0 ** (self.emax - self.man_bits)

    @property
    def min_normal(self) -> float:
        """Smallest positive normal value, ``2^emin`` (fp16: 2^-14; E8M0: 2^-127)."""
        return 2.0**self.emin

    smallest_normal = min_normal

    @property
    def smallest_subnormal(self) -> float:
        """Smallest positive value: the subnormal ``2^(emin - man_bits)`` (fp16: 2^-24); the
        smallest normal in a format without subnormals (as ``np.finfo`` reports it)."""
        return 2.0 ** (self.emin - self.man_bits)

    @property
    def eps(self) -> float:
        """Machine epsilon: the gap from 1.0 to the next value, ``2^-man_bits``."""
        return 2.0**-self.man_bits

    # ---- codes -------------------------------------------------------------------------------
    @property
    def num_codes(self) -> int:
        return 1 << self.bits

    @property
    def nan_code(self) -> int | None:
        """The canonical NaN code fpsim writes (positive, quiet for IEEE), or None if none."""
        r = self._record
        if r.qnan_mag >= 0:
            return r.qnan_mag
        if r.negzero_nan:
            return 1 << self._width
        return None

    @property
    def inf_code(self) -> int | None:
        """The code of +inf, or None."""
        return self._record.inf_mag if self.has_inf else None

    # ---- dtypes ------------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype | None:
        """The numpy / ml_dtypes dtype with exactly these semantics, or None."""
        return _native_table().get(self)

    @property
    def container_dtype(self) -> np.dtype:
        """The smallest numpy float dtype that holds every value of this format exactly."""
        m = self.man_bits
        fits32 = m <= 23 and self.emax <= 127 and self.emin - m >= -149
        return np.dtype(np.float32) if fits32 else np.dtype(np.float64)

    def fits_in(self, dtype: np.dtype) -> bool:
        """True when every value of this format (±inf included, if it has them) is exactly
        representable in the float dtype ``dtype`` (numpy's or ml_dtypes'); False for other dtypes.

        Every binade's quantum of this format must be a multiple of the dtype's, which holds when
        it keeps no more fraction bits, its smallest quantum is no smaller, and its largest
        value is no larger (NaN need not fit: a container without NaN still holds every value).

        >>> fp8_e4m3.fits_in(np.float16), bf16.fits_in(np.float16), fp16.fits_in(np.float32)
        (True, False, True)
        """
        dtype = np.dtype(dtype)
        if dtype == np.float64:
            return True
        if dtype == np.float32:
            return self.container_dtype == np.float32
        try:
            g = get_format(dtype)
        except (TypeError, ValueError):
            return False
        return g.contains(self)

    def contains(self, other: Format) -> bool:
        """True when every value of ``other`` (±inf, ±0 included) is a value of this format, so
        converting other -> self is exact (NaN need not be: it is not a value).

        Every binade's quantum of ``other`` must be a multiple of this format's, which holds
        when it keeps no more fraction bits and its smallest quantum is no smaller; its largest
        value must be no larger.

        >>> fp32.contains(bf16), bf16.contains(fp16), fp32.contains(e8m0), fp16.contains(fp4_e2m1)
        (True, False, True, True)
        """
        if self == other:
            return True
        o = other
        return (
            o.man_bits <= self.man_bits
            and o.emin - o.man_bits >= self.emin - self.man_bits
            and o.max <= self.max
            and (self.has_inf or not o.has_inf)
            and (self.signed or not o.signed)
            and (self.has_zero or not o.has_zero)
            and (self.has_negzero or not o.has_negzero)
        )

    # ---- identity and text -------------------------------------------------------------------
    def _key(self) -> tuple:
        return (self.exp_bits, self.man_bits, self.bias, self.has_inf, self.nan,
                self.has_subnormals, self.signed)  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Format) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self):
        return (_rebuild, (self._kwargs(), self.name))

    def _kwargs(self) -> dict:
        return dict(exp_bits=self.exp_bits, man_bits=self.man_bits, bias=self.bias,
                    has_inf=self.has_inf, nan=self.nan, has_subnormals=self.has_subnormals,
                    signed=self.signed)  # fmt: skip

    def _call_text(self) -> str:
        """``Format(...)`` as written in Python; :func:`get_format` reads it back."""
        args = [str(self.exp_bits), str(self.man_bits)]
        if self.exp_bits >= 1 and self.bias != (1 << (self.exp_bits - 1)) - 1:
            args.append(f"bias={self.bias}")
        style = self.style
        if style == "custom":
            args += [f"has_inf={self.has_inf}", f"nan={self.nan!r}"]
        elif style != "ieee":
            args.append(f"style={style!r}")
        if not self.has_subnormals:
            args.append("has_subnormals=False")
        if not self.signed:
            args.append("signed=False")
        return f"Format({', '.join(args)})"

    call_text = property(_call_text, doc="``Format(...)`` text that :func:`get_format` reads.")

    def _generated_name(self) -> str:
        """``e4m3_ieee``, ``e5m10``, ``e3m4fn_b5``, ``e2m1_finite``; ``Format(...)`` text for
        the rarer combinations (unsigned, no subnormals, custom specials)."""
        suffix = {"ieee": "", "fn": "fn", "fnuz": "fnuz", "finite": "_finite"}.get(self.style)
        if suffix is None or not self.signed or not self.has_subnormals:
            return self._call_text()
        e, m = self.exp_bits, self.man_bits
        b = "" if self.bias == (1 << (e - 1)) - 1 else f"_b{self.bias}"
        name = f"e{e}m{m}{suffix}{b}"
        # "e4m3" is the common alias of OCP fp8_e4m3 (fn style), "e2m1" of FP4 (finite): an
        # IEEE-style format must not share such a name.
        alias_of = _ALIASES.get(name) if "_ALIASES" in globals() else None
        if alias_of is not None and _BUILTIN[alias_of] != self:
            name += "_ieee"
        return name

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        parts = [f"exp_bits={self.exp_bits}", f"man_bits={self.man_bits}"]
        if self.exp_bits >= 1 and self.bias != (1 << (self.exp_bits - 1)) - 1:
            parts.append(f"bias={self.bias}")
        style = self.style
        if style == "custom":
            parts += [f"has_inf={self.has_inf}", f"nan={self.nan!r}"]
        elif style != "ieee":
            parts.append(f"style={style!r}")
        if not self.has_subnormals:
            parts.append("has_subnormals=False")
        if not self.signed:
            parts.append("signed=False")
        return f"Format({self.name}: {', '.join(parts)})"


def _rebuild(kwargs: dict, name: str) -> Format:
    return Format(**kwargs, name=name)


def p3109(k: int, p: int, signed: bool = True, domain: str = "extended") -> Format:
    """The IEEE P3109 format ``binaryKpP`` as gfloat's ``format_info_p3109`` defines it.

    ``k`` bits, precision ``p`` (implicit bit included), ``signed`` or not, ``domain``
    ``"extended"`` (±inf at the top codes) or ``"finite"``. Signed formats: bias
    ``floor(2^(k-p-1))``, the one NaN at ``0x80`` (no -0); unsigned: bias ``2^(k-p)``, NaN at
    the all-ones code. Subnormals always.

    >>> f = p3109(8, 3)
    >>> f.name, f.bias, f.max, f.smallest_subnormal == 2.0**-17
    ('p3109_k8p3se', 16, 49152.0, True)
    >>> p3109(8, 4, domain="finite").max
    240.0
    """
    k, p = _as_int("k", k), _as_int("p", p)
    if domain not in ("extended", "finite"):
        raise ValueError(f"domain must be 'extended' or 'finite', got {domain!r}")
    signed = _as_bool("signed", signed)
    exp_bits = k - p if signed else k - p + 1
    if p < 1 or exp_bits < 1:
        raise ValueError(
            f"P3109 k={k}, p={p} ({'signed' if signed else 'unsigned'}) has {exp_bits} exponent "
            "bits; fpsim models formats with at least one (p <= k - 1 signed, p <= k unsigned)"
        )
    bias = (1 << (k - p - 1)) if signed else (1 << (k - p))
    name = f"p3109_k{k}p{p}{'s' if signed else 'u'}{'e' if domain == 'extended' else 'f'}"
    return Format(exp_bits, p - 1, bias, has_inf=domain == "extended",
                  nan="negzero" if signed else "all_ones", signed=signed, name=name)  # fmt: skip


# ---- the built-in formats ------------------------------------------------------------------------
fp32 = Format(8, 23, name="fp32")
fp16 = Format(5, 10, name="fp16")
bf16 = Format(8, 7, name="bf16")
tf32 = Format(8, 10, name="tf32")
fp8_e4m3 = Format(4, 3, style="fn", name="fp8_e4m3")  # OCP E4M3 (FN): max 448, what PyTorch means
fp8_e5m2 = Format(5, 2, name="fp8_e5m2")
fp64 = Format(11, 52, name="fp64")
fp8_e4m3_ieee = Format(4, 3, name="fp8_e4m3_ieee")  # IEEE-style E4M3 with inf: max 240
fp8_e4m3fnuz = Format(4, 3, 8, style="fnuz", name="fp8_e4m3fnuz")  # AMD/Graphcore: max 240
fp8_e5m2fnuz = Format(5, 2, 16, style="fnuz", name="fp8_e5m2fnuz")
fp8_e4m3b11fnuz = Format(4, 3, 11, style="fnuz", name="fp8_e4m3b11fnuz")  # max 30
fp8_e3m4 = Format(3, 4, name="fp8_e3m4")  # IEEE-style, max 15.5
fp6_e2m3 = Format(2, 3, style="finite", name="fp6_e2m3")  # OCP MX FP6: max 7.5
fp6_e3m2 = Format(3, 2, style="finite", name="fp6_e3m2")  # OCP MX FP6: max 28
fp4_e2m1 = Format(2, 1, style="finite", name="fp4_e2m1")  # OCP MX FP4 / NVFP4: max 6
e8m0 = Format(8, 0, 127, style="fn", has_subnormals=False, signed=False, name="e8m0")  # MX scale

# PyTorch's names for the same formats (fpsim.float16 is fp16, like torch.float16).
float16 = half = fp16
bfloat16 = bf16
float32 = fp32
float64 = double = fp64
float8_e4m3fn = fp8_e4m3
float8_e5m2 = fp8_e5m2
float8_e4m3fnuz = fp8_e4m3fnuz
float8_e5m2fnuz = fp8_e5m2fnuz
float8_e8m0fnu = e8m0

_BUILTIN: dict[str, Format] = {
    f.name: f
    for f in (fp32, fp16, bf16, tf32, fp8_e4m3, fp8_e5m2, fp64, fp8_e4m3_ieee, fp8_e4m3fnuz,
              fp8_e5m2fnuz, fp8_e4m3b11fnuz, fp8_e3m4, fp6_e2m3, fp6_e3m2, fp4_e2m1, e8m0)
}  # fmt: skip

_ALIASES: dict[str, str] = {
    "float32": "fp32",
    "float": "fp32",
    "single": "fp32",
    "f32": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "binary16": "fp16",
    "bfloat16": "bf16",
    "bfloat": "bf16",
    "tensorfloat32": "tf32",
    "tensorfloat-32": "tf32",
    "e4m3": "fp8_e4m3",
    "e4m3fn": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "fp8e4m3": "fp8_e4m3",
    "e5m2": "fp8_e5m2",
    "float8_e5m2": "fp8_e5m2",
    "fp8e5m2": "fp8_e5m2",
    "float64": "fp64",
    "double": "fp64",
    "f64": "fp64",
    # every float dtype ml_dtypes exports, under its exact name
    "float8_e4m3": "fp8_e4m3_ieee",
    "e4m3_ieee": "fp8_e4m3_ieee",
    "float8_e4m3fnuz": "fp8_e4m3fnuz",
    "e4m3fnuz": "fp8_e4m3fnuz",
    "float8_e5m2fnuz": "fp8_e5m2fnuz",
    "e5m2fnuz": "fp8_e5m2fnuz",
    "float8_e4m3b11fnuz": "fp8_e4m3b11fnuz",
    "e4m3b11fnuz": "fp8_e4m3b11fnuz",
    "float8_e3m4": "fp8_e3m4",
    "e3m4": "fp8_e3m4",
    "float6_e2m3fn": "fp6_e2m3",
    "e2m3": "fp6_e2m3",
    "float6_e3m2fn": "fp6_e3m2",
    "e3m2": "fp6_e3m2",
    "float4_e2m1fn": "fp4_e2m1",
    "e2m1": "fp4_e2m1",
    "float8_e8m0fnu": "e8m0",
    "e8m0fnu": "e8m0",
}

FormatLike = Format | str | np.dtype | type  # anything get_format accepts


def list_formats() -> list[str]:
    """Names of the built-in formats, e.g. ``['fp32', 'fp16', 'bf16', ...]``."""
    return list(_BUILTIN)


def get_format(fmt: Format | str | np.dtype | type) -> Format:
    """Look a format up by object, name, alias or numpy/ml_dtypes dtype.

    >>> get_format("half") is fp16, get_format("bfloat16") is bf16, get_format("e4m3").max
    (True, True, 448.0)
    >>> get_format(np.float16) is fp16, get_format("torch.bfloat16") is bf16
    (True, True)
    >>> get_format("e4m3_ieee").max, get_format("Format(4, 3, bias=5)").max, get_format("e5m10")
    (240.0, 960.0, Format(fp16: exp_bits=5, man_bits=10))
    >>> get_format("float6_e3m2fn").max, get_format("p3109_k8p4sf").max
    (28.0, 240.0)
    >>> get_format("fp17")
    Traceback (most recent call last):
    ...
    ValueError: unknown format 'fp17'; known: fp32, fp16, bf16, tf32, fp8_e4m3, fp8_e5m2, fp64, \
fp8_e4m3_ieee, fp8_e4m3fnuz, fp8_e5m2fnuz, fp8_e4m3b11fnuz, fp8_e3m4, fp6_e2m3, fp6_e3m2, \
fp4_e2m1, e8m0 (aliases: half, float16, bfloat16, every ml_dtypes name such as float4_e2m1fn, \
...), P3109 names such as p3109_k8p3se, a generated name such as e4m3_ieee or e5m10_b20, or \
Format(exp_bits, man_bits[, bias][, style])
    """
    if isinstance(fmt, Format):
        return fmt
    if fmt is None:
        # np.dtype(None) is float64: a forgotten argument must not silently mean fp64.
        raise TypeError("a format is required: a Format, a name such as 'fp16', or a dtype")
    if type(fmt).__module__ == "torch" and type(fmt).__name__ == "dtype":
        fmt = str(fmt)  # torch.float16 -> "torch.float16" (read below without importing torch)
    if isinstance(fmt, str):
        key = fmt.strip().lower().replace("torch.", "").replace("np.", "").replace("numpy.", "")
        key = _ALIASES.get(key, key)
        if key in _BUILTIN:
            return _BUILTIN[key]
        parsed = _parse_format_text(fmt.strip())
        if parsed is not None:
            # the built-in of the same semantics keeps its name (e5m10 is fp16)
            return next((b for b in _BUILTIN.values() if b == parsed), parsed)
        raise ValueError(
            f"unknown format {fmt!r}; known: {', '.join(_BUILTIN)} "
            "(aliases: half, float16, bfloat16, every ml_dtypes name such as float4_e2m1fn, ...), "
            "P3109 names such as p3109_k8p3se, a generated name such as e4m3_ieee or e5m10_b20, "
            "or Format(exp_bits, man_bits[, bias][, style])"
        )
    try:
        dt = np.dtype(fmt)
    except TypeError:
        raise TypeError(f"cannot interpret {fmt!r} as a number format") from None
    for f, native in _native_table().items():
        if native == dt:
            return next((b for b in _BUILTIN.values() if b == f), f)
    raise ValueError(f"dtype {dt} has no matching fpsim format")


# The names Format generates ("e4m3_ieee", "e5m10", "e3m4fn_b5", "e2m1_finite"), P3109 names
# ("p3109_k8p3se", "binary8p3se") and Format(...) as written in Python ("Format(4, 3)",
# "Format(4, 3, bias=5, style='fn')", "Format(8, 0, signed=False, ...)"): whatever fpsim prints,
# it reads.
_GENERATED_NAME = re.compile(r"^e(\d+)m(\d+)(fnuz|fn|_finite)?(?:_b(-?\d+))?(_ieee)?$")
_P3109_NAME = re.compile(r"^(?:p3109_k|binary)(\d+)p(\d+)(s|u)?(e|f)?$")
_FORMAT_KEYWORDS = {"exp_bits", "man_bits", "bias", "style", "has_inf", "nan", "has_subnormals",
                    "signed"}  # fmt: skip


def _parse_format_text(text: str) -> Format | None:
    """A Format from its generated name, a P3109 name or ``Format(...)`` text; None if none."""
    m = _GENERATED_NAME.match(text.lower())
    if m:
        e, mb, suffix, bias, ieee = m.groups()
        if suffix and ieee:
            return None
        style = {"fn": "fn", "fnuz": "fnuz", "_finite": "finite"}.get(suffix or "", "ieee")
        return Format(int(e), int(mb), None if bias is None else int(bias), style)
    m = _P3109_NAME.match(text.lower())
    if m:
        k, p, s, d = m.groups()
        return p3109(int(k), int(p), signed=s != "u", domain="finite" if d == "f" else "extended")
    return _parse_format_call(text)


def _parse_format_call(text: str) -> Format | None:
    """``Format(...)``/``fpsim.Format(...)`` text with literal arguments, read with ``ast`` (no
    evaluation of anything but literals)."""
    t = text.strip()
    if not re.match(r"^(fpsim\.)?Format\s*\(", t):
        return None
    try:
        node = ast.parse(t, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call):
        return None
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except (ValueError, TypeError):
        return None
    if None in kwargs or not set(kwargs) <= _FORMAT_KEYWORDS or not 2 <= len(args) + len(
        {"exp_bits", "man_bits"} & set(kwargs)
    ):
        return None
    try:
        return Format(*args, **kwargs)
    except TypeError as exc:
        raise ValueError(f"cannot read {text!r} as a format: {exc}") from None


_NATIVE: dict[Format, np.dtype] | None = None


def _native_table() -> dict[Format, np.dtype]:
    """Format -> the numpy / ml_dtypes dtype of exactly those semantics (every float dtype
    ml_dtypes exports)."""
    global _NATIVE
    if _NATIVE is None:
        import ml_dtypes

        table = {
            fp32: np.float32, fp16: np.float16, fp64: np.float64, bf16: ml_dtypes.bfloat16,
            fp8_e4m3: ml_dtypes.float8_e4m3fn, fp8_e5m2: ml_dtypes.float8_e5m2,
            fp8_e4m3_ieee: ml_dtypes.float8_e4m3, fp8_e3m4: ml_dtypes.float8_e3m4,
            fp8_e4m3fnuz: ml_dtypes.float8_e4m3fnuz, fp8_e5m2fnuz: ml_dtypes.float8_e5m2fnuz,
            fp8_e4m3b11fnuz: ml_dtypes.float8_e4m3b11fnuz, fp6_e2m3: ml_dtypes.float6_e2m3fn,
            fp6_e3m2: ml_dtypes.float6_e3m2fn, fp4_e2m1: ml_dtypes.float4_e2m1fn,
            e8m0: ml_dtypes.float8_e8m0fnu,
        }  # fmt: skip
        _NATIVE = {f: np.dtype(d) for f, d in table.items()}
    return _NATIVE
