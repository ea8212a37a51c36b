"""Number formats: a binary floating-point format described by its bit fields.

A :class:`Format` is ``1`` sign bit, ``exp_bits`` exponent bits and ``man_bits`` stored mantissa
(fraction) bits. A finite non-zero value is

* normal:    ``(-1)^s × 1.f × 2^(E - bias)``   for a biased exponent ``1 <= E <= top``
* subnormal: ``(-1)^s × 0.f × 2^(1 - bias)``   for ``E == 0`` (gradual underflow)

where ``f`` is the stored fraction. Two *special-value styles* decide what the top exponent means:

``"ieee"``
    IEEE 754: the all-ones exponent holds ±inf (fraction 0) and NaN (fraction != 0), so the largest
    finite value has exponent ``2^e - 2 - bias`` and fraction all ones. fp32, fp16, bf16, tf32 and
    fp8 E5M2 are of this style.
``"fn"``
    "finite, NaN": no infinities; the all-ones exponent holds ordinary values except the single
    all-ones code ``S.1111.111`` which is NaN. This is the OCP FP8 E4M3 format (``float8_e4m3fn``
    in ml_dtypes and PyTorch), whose largest value is ``1.75 × 2^8 = 448``.

Example — the textbook 8-bit format (4 exponent, 3 fraction bits, bias 7):

>>> f = Format(4, 3, name="e4m3_ieee")
>>> f.max, f.min_normal, f.smallest_subnormal
(240.0, 0.015625, 0.001953125)
>>> get_format("half").max
65504.0
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "Format",
    "get_format",
    "list_formats",
    "fp32",
    "fp16",
    "bf16",
    "tf32",
    "fp8_e4m3",
    "fp8_e5m2",
    "FormatLike",
]

STYLES = ("ieee", "fn")


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: ``Format(exp_bits, man_bits, bias=None, style="ieee")``.

    ``bias`` defaults to ``2^(exp_bits-1) - 1``. ``style`` is ``"ieee"`` (inf and NaN in the top
    exponent) or ``"fn"`` (finite only; the all-ones code is NaN). Every format fpsim simulates
    must fit inside float64 (``exp_bits <= 11``, ``man_bits <= 52``) so values can be stored
    exactly in ordinary numpy arrays.

    >>> fp16.bits, fp16.precision, fp16.emax, fp16.emin, fp16.eps
    (16, 11, 15, -14, 0.0009765625)
    """

    exp_bits: int
    man_bits: int
    bias: int | None = None
    style: str = "ieee"
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        # Integer fields: Python or numpy integers (stored as int); a float such as 15.5 would
        # give limits that are not values of the format, and "15" is a typo, not a number.
        for fname in ("exp_bits", "man_bits", "bias"):
            v = getattr(self, fname)
            if v is None and fname == "bias":
                continue
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
                raise TypeError(f"{fname} must be an integer, got {v!r} ({type(v).__name__})")
            object.__setattr__(self, fname, int(v))
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a string, got {self.name!r}")
        if not isinstance(self.style, str):
            raise TypeError(f"style must be one of {STYLES}, got {self.style!r}")
        e, m = self.exp_bits, self.man_bits
        if not 2 <= e <= 11:
            raise ValueError(f"exp_bits must be in 2..11 (to fit in float64), got {e}")
        if not 1 <= m <= 52:
            raise ValueError(f"man_bits must be in 1..52 (to fit in float64), got {m}")
        if self.style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}, got {self.style!r}")
        if self.bias is None:
            object.__setattr__(self, "bias", (1 << (e - 1)) - 1)
        # The whole range, subnormals included, must be exactly representable in float64.
        if self.emax > 1023 or self.emin - m < -1074:
            raise ValueError(
                f"Format(exp_bits={e}, man_bits={m}, bias={self.bias}) does not fit in float64"
            )
        if not self.name:
            suffix = "" if self.style == "ieee" else "fn"
            default_bias = (1 << (e - 1)) - 1
            b = "" if self.bias == default_bias else f"_b{self.bias}"
            name = f"e{e}m{m}{suffix}{b}"
            # "e4m3" is the common alias of OCP fp8_e4m3 (fn style): an IEEE-style E4M3 must
            # not share that name.
            alias_of = _ALIASES.get(name) if "_ALIASES" in globals() else None
            if alias_of is not None and _BUILTIN[alias_of] != self:
                name += "_ieee"
            object.__setattr__(self, "name", name)

    # ---- sizes -------------------------------------------------------------------------------
    @property
    def bits(self) -> int:
        """Total width in bits: 1 + exp_bits + man_bits."""
        return 1 + self.exp_bits + self.man_bits

    @property
    def precision(self) -> int:
        """Significand precision p in bits, the implicit leading bit included (fp16: 11)."""
        return self.man_bits + 1

    # ---- exponent range ----------------------------------------------------------------------
    @property
    def max_exp_field(self) -> int:
        """The all-ones biased exponent, ``2^exp_bits - 1``."""
        return (1 << self.exp_bits) - 1

    @property
    def emax(self) -> int:
        """Unbiased exponent of the largest finite value (fp16: 15, fp8_e4m3: 8)."""
        top = self.max_exp_field if self.style == "fn" else self.max_exp_field - 1
        return top - self.bias

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal value, ``1 - bias`` (fp16: -14)."""
        return 1 - self.bias

    @property
    def max_significand(self) -> int:
        """Largest integer significand (implicit bit included) at exponent emax.

        ieee: all fraction bits ones, ``2^p - 1``; fn: one less, since ``S.1111.111`` is NaN.
        """
        full = (1 << self.precision) - 1
        return full - 1 if self.style == "fn" else full

    # ---- np.finfo-like limits (exact powers of two / sums of them, so float is exact) --------
    @property
    def max(self) -> float:
        """Largest finite value (fp16: 65504.0, bf16: 3.3895e38, fp8_e4m3: 448.0)."""
        return float(self.max_significand) * 2.0 ** (self.emax - self.man_bits)

    @property
    def min_normal(self) -> float:
        """Smallest positive normal value, ``2^emin`` (fp16: 2^-14)."""
        return 2.0**self.emin

    smallest_normal = min_normal

    @property
    def smallest_subnormal(self) -> float:
        """Smallest positive subnormal, ``2^(emin - man_bits)`` (fp16: 2^-24)."""
        return 2.0 ** (self.emin - self.man_bits)

    @property
    def eps(self) -> float:
        """Machine epsilon: the gap from 1.0 to the next value, ``2^-man_bits``."""
        return 2.0**-self.man_bits

    @property
    def has_inf(self) -> bool:
        return self.style == "ieee"

    # ---- codes -------------------------------------------------------------------------------
    @property
    def num_codes(self) -> int:
        return 1 << self.bits

    @property
    def nan_code(self) -> int:
        """The canonical (positive, quiet) NaN code fpsim produces."""
        e, m = self.exp_bits, self.man_bits
        if self.style == "fn":
            return (1 << (e + m)) - 1  # S.1111.111 with S = 0
        return (self.max_exp_field << m) | (1 << (m - 1))  # quiet NaN: top fraction bit

    # ---- dtypes ------------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype | None:
        """The numpy / ml_dtypes dtype with exactly these semantics, or None."""
        return _native_dtype(self)

    @property
    def container_dtype(self) -> np.dtype:
        """The smallest numpy float dtype that holds every value of this format exactly."""
        fits32 = self.man_bits <= 23 and self.emax <= 127 and self.emin - self.man_bits >= -149
        return np.dtype(np.float32) if fits32 else np.dtype(np.float64)

    def fits_in(self, dtype: np.dtype) -> bool:
        """True when every value of this format (±inf included, if it has them) is exactly
        representable in the float dtype ``dtype`` (numpy's or ml_dtypes'); False for other dtypes.

        Every binade's quantum of this format must be a multiple of the dtype's, which holds when
        it keeps no more fraction bits, its smallest subnormal is no smaller, and its largest
        value is no larger.

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
        return (
            self.man_bits <= g.man_bits
            and self.emin - self.man_bits >= g.emin - g.man_bits
            and self.max <= g.max
            and (g.has_inf or not self.has_inf)
        )

    # ---- kernel parameters -------------------------------------------------------------------
    @property
    def kernel_params(self) -> tuple[int, int, int, int, int, int]:
        """The integers the scalar kernels take: (exp_bits, man_bits, bias, emin, emax, fn).

        Passing the format as plain integers (never as a compile-time constant) means numba
        compiles each kernel once, for every format.
        """
        return (
            self.exp_bits,
            self.man_bits,
            int(self.bias),
            self.emin,
            self.emax,
            1 if self.style == "fn" else 0,
        )

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        extra = "" if self.style == "ieee" else f", style={self.style!r}"
        default_bias = (1 << (self.exp_bits - 1)) - 1
        bias = "" if self.bias == default_bias else f", bias={self.bias}"
        return (
            f"Format({self.name}: exp_bits={self.exp_bits}, man_bits={self.man_bits}{bias}{extra})"
        )


fp32 = Format(8, 23, name="fp32")
fp16 = Format(5, 10, name="fp16")
bf16 = Format(8, 7, name="bf16")
tf32 = Format(8, 10, name="tf32")
fp8_e4m3 = Format(4, 3, style="fn", name="fp8_e4m3")
fp8_e5m2 = Format(5, 2, name="fp8_e5m2")
fp64 = Format(11, 52, name="fp64")

# PyTorch's names for the same formats (fpsim.float16 is fp16, like torch.float16).
float16 = half = fp16
bfloat16 = bf16
float32 = fp32
float64 = double = fp64
float8_e4m3fn = fp8_e4m3
float8_e5m2 = fp8_e5m2

_BUILTIN: dict[str, Format] = {
    f.name: f for f in (fp32, fp16, bf16, tf32, fp8_e4m3, fp8_e5m2, fp64)
}

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
    >>> get_format("fp17")
    Traceback (most recent call last):
    ...
    ValueError: unknown format 'fp17'; known: fp32, fp16, bf16, tf32, fp8_e4m3, fp8_e5m2, fp64 \
(aliases: half, float16, bfloat16, e4m3, e5m2, ...), a generated name such as e4m3_ieee or \
e5m10_b20, or Format(exp_bits, man_bits[, bias][, style])
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
            "(aliases: half, float16, bfloat16, e4m3, e5m2, ...), a generated name such as "
            "e4m3_ieee or e5m10_b20, or Format(exp_bits, man_bits[, bias][, style])"
        )
    try:
        dt = np.dtype(fmt)
    except TypeError:
        raise TypeError(f"cannot interpret {fmt!r} as a number format") from None
    for f in _BUILTIN.values():
        if f.dtype is not None and f.dtype == dt:
            return f
    for (e, m, bias, style), native in _native_table().items():
        if native == dt:  # an ml_dtypes float without a built-in name (float8_e4m3, e3m4)
            return Format(e, m, bias, style)
    raise ValueError(f"dtype {dt} has no matching fpsim format")


# The names Format generates ("e4m3_ieee", "e5m10", "e3m4fn_b5") and Format(...) as written in
# Python ("Format(4, 3)", "Format(4, 3, bias=5, style='fn')"): whatever fpsim prints, it reads.
_GENERATED_NAME = re.compile(r"^e(\d+)m(\d+)(fn)?(?:_b(-?\d+))?(_ieee)?$")
_FORMAT_CALL = re.compile(
    r"^(?:fpsim\.)?Format\(\s*(?:exp_bits\s*=\s*)?(\d+)\s*,\s*(?:man_bits\s*=\s*)?(\d+)"
    r"(?:\s*,\s*(?:bias\s*=\s*)?(-?\d+))?"
    r"(?:\s*,\s*style\s*=\s*['\"](ieee|fn)['\"])?\s*\)$"
)


def _parse_format_text(text: str) -> Format | None:
    """A Format from its generated name or from ``Format(...)`` text; None if neither."""
    m = _GENERATED_NAME.match(text.lower())
    if m:
        e, mb, fn, bias, ieee = m.groups()
        if fn and ieee:
            return None
        style = "fn" if fn else "ieee"
    else:
        m = _FORMAT_CALL.match(text)
        if not m:
            return None
        e, mb, bias, style = m.groups()
        style = style or "ieee"
    return Format(int(e), int(mb), None if bias is None else int(bias), style)


def _native_dtype(f: Format) -> np.dtype | None:
    """numpy / ml_dtypes dtype with the same bit layout and specials as ``f`` (or None)."""
    return _native_table().get((f.exp_bits, f.man_bits, f.bias, f.style))


def _native_table() -> dict[tuple[int, int, int, str], np.dtype]:
    """(exp_bits, man_bits, bias, style) -> the numpy / ml_dtypes dtype of those semantics."""
    import ml_dtypes

    return {
        (8, 23, 127, "ieee"): np.dtype(np.float32),
        (5, 10, 15, "ieee"): np.dtype(np.float16),
        (11, 52, 1023, "ieee"): np.dtype(np.float64),
        (8, 7, 127, "ieee"): np.dtype(ml_dtypes.bfloat16),
        (4, 3, 7, "fn"): np.dtype(ml_dtypes.float8_e4m3fn),
        (5, 2, 15, "ieee"): np.dtype(ml_dtypes.float8_e5m2),
        (4, 3, 7, "ieee"): np.dtype(ml_dtypes.float8_e4m3),  # IEEE-style E4M3 (max 240)
        (3, 4, 3, "ieee"): np.dtype(ml_dtypes.float8_e3m4),
    }
