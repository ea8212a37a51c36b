"""Independent oracle for block-scaled (MX, NVFP4) and per-tensor (FP8 recipe) quantization.

Written from the specs and the reference notes (/work/shared/reference/scaled_formats.md) with
exact ``fractions.Fraction`` arithmetic.  It imports nothing from fpsim: only the standard library,
plus numpy, which is used (a) for array input/output and (b) for the few steps where the
*reference implementation being modelled* (torchao's NVFP4, TransformerEngine's recipes) rounds in
IEEE float32 -- those steps are done with ``np.float32`` scalars and are marked ``# fp32 step``.
Everything else is exact rational arithmetic: a value is rounded by finding its binade with exact
comparisons, dividing by the quantum and looking at the remainder.

Conventions
-----------
* **Quantized values** are pairs ``(value, sign)``:
  ``value`` is a ``Fraction`` (already carrying its sign) for finite results, or a Python float
  ``math.inf`` / ``-math.inf`` / ``math.nan`` for non-finite ones; ``sign`` is the sign bit (0/1).
  This is how -0 is represented: ``(Fraction(0), 1)``.  ``q_to_float(q)`` turns a pair into a
  Python float (-0.0 included); every element value fits a float64 exactly.
* **MX scale** is returned as the unbiased E8M0 exponent ``e`` (X = 2**e, ``e`` in [-127, 127]) or
  ``None`` for the NaN scale (byte 0xFF).  ``e8m0_byte(e)`` gives the byte.
* Inputs may be floats (NaN/Inf allowed), ints or Fractions.

Source facts confirmed for this file (commits in the notes; torchao 0.18.0 = tag v0.18.0):
* torchao ``torchao/prototype/mx_formats/mx_tensor.py::to_mx`` / ``_to_mx_rceil``,
  ``config.py::ScaleCalculationMode``, ``nvfp4_tensor.py::nvfp4_quantize`` /
  ``per_tensor_amax_to_scale`` / ``NVFP4Tensor.get_hp_scales``.
* TransformerEngine ``transformer_engine/pytorch/quantization.py::_update_amax_history``,
  ``_default_get_amax_and_update_history``, ``_default_sf_compute`` (lines ~1067-1116 at d0067d0);
  ``common/recipe/delayed_scaling.cu`` kernel (lines ~97-152); ``common/recipe/recipe_common.cuh::
  compute_scale_from_amax`` (line 14); ``common/recipe/__init__.py`` (E4M3 max 448, E5M2 57344,
  DelayedScaling margin=0, amax_history_len=1024, amax_compute_algo='max').
* Zero amax in MX: torchao (fp32 exponent field 0 -> -127-emax, clamped) -> -127; gfloat
  ``block.compute_scale_amax`` -> 2^-127 explicitly; microxcaling ``mx_ops._shared_exponents``
  replaces 0 by 2^-126, then -126-emax is clamped to -127 (same -127 for every FP element
  format).  This oracle returns -127 (torchao).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

Number = Fraction | int | float
Q = tuple  # (Fraction | float, int): a quantized value and its sign bit, see module docstring

TWO = Fraction(2)
FLT_MAX = float(np.finfo(np.float32).max)


# --------------------------------------------------------------------------------------------
# Element formats (plain data)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ElemFormat:
    name: str
    ebits: int
    mbits: int
    bias: int
    emax: int  # exponent of the largest normal (the "emax" the MX scale rule subtracts)
    max: Fraction  # largest finite value
    has_inf: bool  # Inf is S.1..1.0..0 (IEEE style)
    nan: str | None  # "ieee" (exp all ones, mantissa != 0), "ones" (S.1111.111 only), None

    @property
    def emin(self) -> int:  # exponent of the smallest normal
        return 1 - self.bias

    @property
    def min_normal(self) -> Fraction:
        return TWO**self.emin

    @property
    def min_subnormal(self) -> Fraction:
        return TWO ** (self.emin - self.mbits)

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits


# Every MX/NVFP4 element format has subnormals.
E4M3 = ElemFormat("e4m3", 4, 3, 7, 8, Fraction(448), False, "ones")  # OCP E4M3 ("fn")
E5M2 = ElemFormat("e5m2", 5, 2, 15, 15, Fraction(57344), True, "ieee")
E3M2 = ElemFormat("e3m2", 3, 2, 3, 4, Fraction(28), False, None)
E2M3 = ElemFormat("e2m3", 2, 3, 1, 2, Fraction(15, 2), False, None)
E2M1 = ElemFormat("e2m1", 2, 1, 1, 2, Fraction(6), False, None)
ELEM_FORMATS = {f.name: f for f in (E4M3, E5M2, E3M2, E2M3, E2M1)}

E8M0_BIAS = 127
E8M0_NAN = 0xFF
MX_BLOCK = 32
NVFP4_BLOCK = 16
E4M3_EPS = Fraction(1, 64)  # torch.finfo(float8_e4m3fn).tiny = 2^-6: smallest NORMAL e4m3


def _fmt(elem) -> ElemFormat:
    return ELEM_FORMATS[elem] if isinstance(elem, str) else elem


def binade(a: Fraction) -> int:
    """floor(log2(a)) for a > 0, exactly."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if TWO**e > a:
        e -= 1
    assert TWO**e <= a < TWO ** (e + 1)
    return e


def is_pow2(a: Fraction) -> bool:
    return a > 0 and a == TWO ** binade(a)


def _split(v: Number):
    """-> ('nan'|'inf'|'fin', sign bit, |v| as Fraction or None)."""
    if isinstance(v, (np.floating, np.integer)):
        v = v.item()
    if isinstance(v, float):
        sign = 1 if math.copysign(1.0, v) < 0 else 0
        if math.isnan(v):
            return "nan", sign, None
        if math.isinf(v):
            return "inf", sign, None
        return "fin", sign, abs(Fraction(v))
    v = Fraction(v)
    return "fin", (1 if v < 0 else 0), abs(v)


def q_to_float(q: Q) -> float:
    """(value, sign) -> Python float, -0.0 and non-finite values included."""
    value, sign = q
    if isinstance(value, float):
        return value
    if value == 0:
        return -0.0 if sign else 0.0
    return float(value)


def _nan_q(sign: int = 0) -> Q:
    return (math.nan, sign)


def _inf_q(sign: int) -> Q:
    return (-math.inf if sign else math.inf, sign)


# --------------------------------------------------------------------------------------------
# Element rounding / encoding
# --------------------------------------------------------------------------------------------
def ref_round_elem(v: Number, elem, saturate: bool = True) -> Q:
    """Round ``v`` to nearest-even in ``elem`` by the definition (binade, quantum, remainder).

    Rounding is done with unbounded exponent range; a result above ``elem.max`` then becomes
    +-max when ``saturate`` (what MX requires), else Inf (formats with Inf) or NaN.
    Input +-Inf saturates likewise; input NaN gives NaN (the sign bit is kept in the pair).
    Returns ``(value, sign)``; zero keeps the input's sign.
    """
    f = _fmt(elem)
    kind, sign, a = _split(v)
    if kind == "nan":
        return _nan_q(sign)
    if kind == "inf":
        if saturate:
            return (-f.max if sign else f.max, sign)
        return _inf_q(sign) if f.has_inf else _nan_q(sign)
    if a == 0:
        return (Fraction(0), sign)
    quantum = TWO ** (max(binade(a), f.emin) - f.mbits)
    n = a / quantum
    lo = math.floor(n)
    rem = n - lo
    k = lo + 1 if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and lo % 2 == 1) else lo
    r = k * quantum
    if r > f.max:
        if saturate:
            r = f.max
        else:
            return _inf_q(sign) if f.has_inf else _nan_q(sign)
    return (-r if sign else r, sign)


def ref_encode_elem(q: Q, elem) -> int:
    """Code (unsigned int, sign in the top bit) of an already representable (value, sign)."""
    f = _fmt(elem)
    value, sign = q
    top = sign << (f.ebits + f.mbits)
    if isinstance(value, float):
        if math.isnan(value):
            if f.nan is None:
                raise ValueError(f"{f.name} has no NaN")
            return top | ((1 << (f.ebits + f.mbits)) - 1)  # S.1..1.1..1 (a NaN in both styles)
        if not f.has_inf:
            raise ValueError(f"{f.name} has no Inf")
        return top | (((1 << f.ebits) - 1) << f.mbits)
    a = abs(value)
    if a == 0:
        return top
    if a < f.min_normal:
        m = a / f.min_subnormal
        assert m.denominator == 1, (value, f.name)
        return top | int(m)
    e = binade(a)
    m = (a / TWO**e - 1) * 2**f.mbits
    assert m.denominator == 1 and a <= f.max, (value, f.name)
    return top | ((e + f.bias) << f.mbits) | int(m)


def ref_decode_elem(code: int, elem) -> Q:
    f = _fmt(elem)
    sign = (code >> (f.ebits + f.mbits)) & 1
    e = (code >> f.mbits) & ((1 << f.ebits) - 1)
    m = code & ((1 << f.mbits) - 1)
    if e == (1 << f.ebits) - 1:
        if f.nan == "ieee":
            return _nan_q(sign) if m else _inf_q(sign)
        if f.nan == "ones" and m == (1 << f.mbits) - 1:
            return _nan_q(sign)
    if e == 0:
        a = m * f.min_subnormal
    else:
        a = (1 + Fraction(m, 2**f.mbits)) * TWO ** (e - f.bias)
    return (-a if sign else a, sign)


# --------------------------------------------------------------------------------------------
# E8M0 and the MX scale
# --------------------------------------------------------------------------------------------
def e8m0_byte(exp: int | None) -> int:
    return E8M0_NAN if exp is None else exp + E8M0_BIAS


def e8m0_exponent(byte: int) -> int | None:
    return None if byte == E8M0_NAN else byte - E8M0_BIAS


def ref_e8m0_round_up(d: Number, satfinite: bool = False) -> int:
    """E8M0 byte of 2**ceil(log2 d) (PTX cvt.rp.ue8m0): d <= 2^-127 (and 0) -> 0; NaN/Inf -> 0xFF;
    above 2^127 -> 0xFF, or 0xFE with ``satfinite`` (TE's cvt.rp.satfinite).  d is taken exactly."""
    kind, sign, a = _split(d)
    if kind != "fin" or sign and a != 0:
        return E8M0_NAN
    if a == 0:
        return 0
    e = binade(a) + (0 if is_pow2(a) else 1)
    if e > 127:
        return 0xFE if satfinite else E8M0_NAN
    return max(e, -127) + E8M0_BIAS


MX_MODES = ("floor", "ceil", "even", "rceil")


def ref_mx_scale_exponent(amax: Number, elem, mode: str = "floor") -> int | None:
    """Unbiased E8M0 exponent of the MX block scale for block amax ``amax`` (taken exactly).

    floor : floor(log2 amax) - emax                      (OCP MX v1.0; torchao FLOOR)
    ceil  : ceil(log2 amax) - emax                       (torchao CEIL: +1 unless amax is 2^k)
    even  : floor(log2 round_half_up(amax, mbits)) - emax (torchao EVEN)
    rceil : ceil(log2(amax / elem.max)), the smallest X = 2^e with amax/X <= max (NVIDIA/cuBLAS;
            torchao RCEIL; TE MXFP8)
    The result is clamped to [-127, 127].  amax == 0 -> -127.  NaN/Inf amax -> None (NaN scale).

    How torchao computes them (mx_tensor.py::to_mx, fp32 amax):
    * FLOOR/CEIL: amax's fp32 exponent field - 127 (+1 for CEIL if mantissa bits != 0), - emax,
      clamp [-127, 128].  Equal to this definition for every finite fp32 amax (fp32 subnormal
      amax gives <= -127 - emax either way, clamped to -127).
    * EVEN: int32 bits + (1 << (22 - mbits)), & 0xFF800000, then FLOOR: exactly
      round-half-up at mbits; equal to this definition for every finite fp32 amax (subnormal
      amax only differs before the clamp).
    * RCEIL, torchao 0.18.0 (_to_mx_rceil): ceil(torch.log2(fl32(amax / max))) in fp32 -- log2
      rounded to fp32 loses the fraction for d = 2^k(1+2^-23), |k| >= 4, and in the fp32
      subnormal range, so the byte is 1 too small near every power-of-two boundary
      (e.g. amax = 7168 + 2^-11 -> 131, exact 132).  torchao main (after 0.18, commit 5d73a0c):
      fl32(amax * fl32(1/max)) then bits-based round-up (== PTX cvt.rp.ue8m0); differs from this
      exact definition only for amax = nextafter(max * 2^-127) (byte 0 vs exact 1).
    """
    f = _fmt(elem)
    kind, _, a = _split(amax)
    if kind != "fin":
        return None
    if a == 0:
        return -127
    if mode == "floor":
        e = binade(a) - f.emax
    elif mode == "ceil":
        e = binade(a) + (0 if is_pow2(a) else 1) - f.emax
    elif mode == "even":
        b = binade(a)
        quantum = TWO ** (b - f.mbits)
        rounded = math.floor(a / quantum + Fraction(1, 2)) * quantum  # round half up
        e = binade(rounded) - f.emax
    elif mode == "rceil":
        r = a / f.max
        e = binade(r) + (0 if is_pow2(r) else 1)
    else:
        raise ValueError(mode)
    return max(-127, min(127, e))


def ref_mx_quantize_block(values: Iterable[Number], elem, mode: str = "floor"):
    """Quantize one MX block (any length; MX uses 32).

    Returns ``(scale_exp, elems)``: ``scale_exp`` as in ``ref_mx_scale_exponent`` and ``elems`` a
    list of ``(value, sign)`` element values (not yet multiplied by the scale): RNE of v / 2^e,
    saturated to +-max.  If any value is NaN or +-Inf the scale is None and every element is
    reported as NaN (the spec leaves them undefined; torchao dequantizes the whole block to NaN).
    """
    f = _fmt(elem)
    vals = list(values)
    parts = [_split(v) for v in vals]
    if any(k != "fin" for k, _, _ in parts):
        return None, [_nan_q() for _ in vals]
    amax = max((a for _, _, a in parts), default=Fraction(0))
    e = ref_mx_scale_exponent(amax, f, mode)
    scale = TWO**e
    elems = []
    for _, s, a in parts:
        value, _ = ref_round_elem(a / scale, f, saturate=True)
        elems.append((-value if s else value, s))
    return e, elems


def ref_mx_dequantize(scale_exp: int | None, elems: Sequence[Q]) -> list:
    """Element * 2^scale_exp as Python floats (exact); a None (NaN) scale gives all NaN."""
    if scale_exp is None:
        return [math.nan] * len(elems)
    out = []
    for value, sign in elems:
        if isinstance(value, float):
            out.append(value)
        else:
            out.append(q_to_float((value * TWO**scale_exp, sign)))
    return out


def ref_mx_quantize(x, elem, mode: str = "floor", block_size: int = MX_BLOCK):
    """Quantize a flat array (length a multiple of block_size): -> (list of scale exponents,
    list of element (value, sign) pairs, all blocks concatenated)."""
    x = np.asarray(x).reshape(-1)
    assert x.size % block_size == 0
    scales, elems = [], []
    for i in range(0, x.size, block_size):
        e, q = ref_mx_quantize_block([float(v) for v in x[i : i + block_size]], elem, mode)
        scales.append(e)
        elems.extend(q)
    return scales, elems


# --------------------------------------------------------------------------------------------
# NVFP4 (E2M1 elements, blocks of 16, E4M3 block scale, optional FP32 per-tensor scale)
# --------------------------------------------------------------------------------------------
def _f32(v) -> np.float32:
    return np.float32(v)


def _clamp_scale(v):
    """torch.clamp(v, min=E4M3_EPS, max=448) on an fp32 scalar; NaN passes through."""
    if math.isnan(v):
        return v
    return min(max(v, _f32(2.0**-6)), _f32(448.0))


def ref_nvfp4_per_tensor_scale(amax_tensor: float) -> float:
    """torchao ``per_tensor_amax_to_scale``: fl32(amax / (448*6)).  # fp32 step"""
    with np.errstate(all="ignore"):
        return float(_f32(amax_tensor) / _f32(448.0 * 6.0))


def ref_nvfp4_quantize_block(values: Sequence[float], per_tensor_scale: float | None = None,
                             arith: str = "torchao"):  # fmt: skip
    """One NVFP4 block (16 values) following torchao ``nvfp4_quantize``.

    Returns ``(s8, elems)``: the E4M3 block scale as ``(value, sign)`` (NaN possible) and the
    E2M1 elements as ``(value, sign)`` pairs.

    arith="torchao" reproduces torchao 0.18.0's float32 roundings (``np.float32``):
      single level : bs = fl32(amax/6); s8 = e4m3_RNE(clamp(bs, 2^-6, 448));
                     r = fl32(1/s8); y = fl32(x*r)
      two level    : bs = fl32(amax/6); s8 = e4m3_RNE(clamp(fl32(bs/pts), 2^-6, 448));
                     r = fl32(fl32(1/pts)/s8); y = fl32(x*r)
      then y is clamped to +-6 (NaN passes) and rounded RNE to E2M1 exactly.
    arith="exact" does the same with exact rationals: s8 = e4m3(clamp(amax/6[/pts])),
      element = e2m1_sat(x/(s8[*pts])); a degenerate pts (0, Inf, NaN) falls back to "torchao".
    A NaN anywhere in the block gives a NaN s8 (torch.amax and clamp propagate NaN).
    """
    assert len(values) == NVFP4_BLOCK
    x = np.asarray(values, dtype=np.float32)
    with np.errstate(all="ignore"):
        amax = np.max(np.abs(x))  # NaN propagates like torch.amax
        if arith == "torchao":
            bs = amax / _f32(6.0)  # fp32 step
            if per_tensor_scale is None:
                s8 = ref_round_elem(float(_clamp_scale(bs)), E4M3)
                r = _f32(1.0) / _f32(q_to_float(s8))  # fp32 step
            else:
                pts = _f32(per_tensor_scale)
                s8 = ref_round_elem(float(_clamp_scale(bs / pts)), E4M3)  # fp32 step
                r = (_f32(1.0) / pts) / _f32(q_to_float(s8))  # fp32 steps
            ys = [x_i * r for x_i in x]  # fp32 step
        elif arith == "exact":
            if per_tensor_scale is not None and not (0 < per_tensor_scale < math.inf):
                # degenerate per-tensor scale (0, Inf, NaN): no exact meaning; IEEE as torchao
                return ref_nvfp4_quantize_block(values, per_tensor_scale, "torchao")
            if math.isnan(amax):
                s8 = _nan_q()
            else:  # an Inf amax: Inf/6 clamps to 448, as in torchao
                s = Fraction(448) if math.isinf(amax) else Fraction(float(amax)) / 6
                if per_tensor_scale is not None:
                    s = s / Fraction(per_tensor_scale)
                s8 = ref_round_elem(min(max(s, E4M3_EPS), Fraction(448)), E4M3)
            ys = []
            for x_i in x:
                kind, sign, a = _split(float(x_i))
                if isinstance(s8[0], float) or kind == "nan":
                    ys.append(math.nan)
                elif kind == "inf" or a == 0:
                    ys.append(float(x_i))  # +-Inf saturates below; zero keeps its sign
                else:
                    d = s8[0] * (Fraction(per_tensor_scale) if per_tensor_scale is not None else 1)
                    ys.append(-(a / d) if sign else a / d)
        else:
            raise ValueError(arith)
    elems = []
    for y in ys:
        if isinstance(y, np.floating):
            y = float(y)
        if isinstance(y, float) and math.isnan(y):
            elems.append(_nan_q())
            continue
        elems.append(ref_round_elem(y, E2M1, saturate=True))  # clamp to +-6 then RNE
    return s8, elems


def ref_nvfp4_dequantize(s8: Q, elems: Sequence[Q], per_tensor_scale: float | None = None,
                         arith: str = "torchao") -> list:  # fmt: skip
    """Dequantize an NVFP4 block.  torchao: fl32(e2m1 * fl32(pts * s8)) (``get_hp_scales`` then a
    float32 product; single level: e2m1 * s8, exact).  exact: e2m1 * s8 * pts."""
    out = []
    s = q_to_float(s8)
    with np.errstate(all="ignore"):
        for q in elems:
            e = q_to_float(q)
            if arith == "torchao":
                hs = _f32(s) if per_tensor_scale is None else _f32(per_tensor_scale) * _f32(s)
                out.append(float(_f32(e) * hs))
            else:
                if math.isnan(s) or math.isnan(e):
                    out.append(math.nan)
                    continue
                pts = Fraction(per_tensor_scale) if per_tensor_scale is not None else 1
                out.append(q_to_float((Fraction(e) * Fraction(s) * pts, q[1])))
    return out


# --------------------------------------------------------------------------------------------
# Per-tensor FP8 recipes (TransformerEngine)
# --------------------------------------------------------------------------------------------
def ref_current_scale(amax: float, fmt_max: float, margin: int = 0, power_of_2: bool = False,
                      eps: float = 0.0) -> float:  # fmt: skip
    """TE ``compute_scale_from_amax`` (recipe_common.cuh), values as float32:

    amax < eps -> eps; amax Inf / 0 / NaN -> 1.0; scale = fl32(fmt_max / amax) (__fdiv_rn);
    then (extension, TE's current scaling has no margin) scale = fl32(scale / 2^margin);
    Inf -> FLT_MAX; power_of_2 masks the fp32 bits with 0xFF800000 (rounds down to 2^k).
    Returns the float32 scale as a Python float.
    """
    a = _f32(amax)
    if a < _f32(eps):
        a = _f32(eps)
    if math.isinf(a) or a == 0 or math.isnan(a):
        return 1.0
    with np.errstate(all="ignore"):
        s = _f32(fmt_max) / a  # fp32 step
        if margin:
            s = s / _f32(2.0**margin)  # fp32 step
    if math.isinf(s):
        s = _f32(FLT_MAX)
    if power_of_2:
        s = np.array([s], dtype=np.float32).view(np.uint32) & np.uint32(0xFF800000)
        s = s.view(np.float32)[0]
    return float(s)


def ref_delayed_scaling_update(amax_history: Sequence[float], scale: float, fmt_max: float,
                               margin: int = 0, algo: str = "max"):  # fmt: skip
    """One TE DelayedScaling update (quantization.py ``_amax_and_scale_update``, unfused path).

    amax = max(history) ('max', NaN propagates like torch.max) or history[0] ('most_recent');
    new history = roll(history, -1) with slot 0 zeroed (new[i] = old[i+1], new[-1] = old[0]);
    sf = fl32(fl32(fmt_max / amax) / 2^margin); keep ``scale`` when amax <= 0 or non-finite;
    sf Inf -> FLT_MAX.  Returns (new_history, amax, new_scale) as Python floats.
    (The fused CUDA kernel computes fl32(fmt_max*2^-margin)/amax and uses fmaxf, which ignores
    NaN -- identical except for overflow and NaN entries in the history.)
    """
    h = [float(_f32(v)) for v in amax_history]
    if algo == "max":
        amax = math.nan if any(math.isnan(v) for v in h) else max(h)
    elif algo == "most_recent":
        amax = h[0]
    else:
        raise ValueError(algo)
    new_h = h[1:] + h[:1] if len(h) > 1 else list(h)
    new_h[0] = 0.0
    a = _f32(amax)
    with np.errstate(all="ignore"):
        sf = (_f32(fmt_max) / a) / _f32(2.0**margin)  # fp32 steps
    if not (a > 0) or not math.isfinite(a):
        sf = _f32(scale)
    if math.isinf(sf):
        sf = _f32(FLT_MAX)
    return new_h, float(amax), float(sf)


def ref_fp8_quantize(x: float, scale: float, elem) -> Q:
    """TE per-tensor cast: q = fp8(fl32(x*scale)), SATFINITE (saturate, NaN stays NaN)."""
    with np.errstate(all="ignore"):
        y = float(_f32(x) * _f32(scale))  # fp32 step
    return ref_round_elem(y, elem, saturate=True)


# --------------------------------------------------------------------------------------------
# Self-check: the notes' test vectors
# --------------------------------------------------------------------------------------------
def _self_check() -> None:
    blk = [1000.0, 300.0, -2.5, 0.01] + [0.0] * 28

    # Notes §3: MXFP8-E4M3 FLOOR
    e, q = ref_mx_quantize_block(blk, E4M3, "floor")
    assert e == 1 and e8m0_byte(e) == 128, e
    assert [ref_encode_elem(v, E4M3) for v in q[:4]] == [0x7E, 0x71, 0xBA, 0x03]
    assert ref_mx_dequantize(e, q)[:4] == [896.0, 288.0, -2.5, 0.01171875]
    # MXFP8-E4M3 RCEIL
    e, q = ref_mx_quantize_block(blk, E4M3, "rceil")
    assert e8m0_byte(e) == 129
    assert [ref_encode_elem(v, E4M3) for v in q[:4]] == [0x78, 0x69, 0xB2, 0x01]
    assert ref_mx_dequantize(e, q)[:4] == [1024.0, 288.0, -2.5, 0.0078125]
    # MXFP4 FLOOR: X = 128 -> 768 (saturated), 256, -0, 0
    e, q = ref_mx_quantize_block(blk, E2M1, "floor")
    assert e == 7
    d = ref_mx_dequantize(e, q)[:4]
    assert d == [768.0, 256.0, 0.0, 0.0] and math.copysign(1, d[2]) < 0 < math.copysign(1, d[3])

    # Notes §4: the same values as one NVFP4 block
    b16 = blk[:16]
    s8, q = ref_nvfp4_quantize_block(b16)
    assert s8 == (160, 0) and ref_encode_elem(s8, E4M3) == 0x72
    assert [ref_encode_elem(v, E2M1) for v in q[:4]] == [0x7, 0x4, 0x8, 0x0]
    d = ref_nvfp4_dequantize(s8, q)[:4]
    assert d == [960.0, 320.0, 0.0, 0.0] and math.copysign(1, d[2]) < 0
    assert ref_nvfp4_quantize_block(b16, arith="exact") == (s8, q)
    pts = ref_nvfp4_per_tensor_scale(1000.0)
    s8, q = ref_nvfp4_quantize_block(b16, pts)
    assert s8 == (448, 0)

    # Notes §1: RCEIL boundaries (fp32 bits -> byte), on d itself
    bits = {0x0: 0, 0x00400000: 0, 0x00400001: 1, 0x3F800000: 127, 0x3F800001: 128,
            0x7F000000: 254, 0x7F000001: 255, 0x7F800000: 255, 0x7FC00000: 255}  # fmt: skip
    for b, want in bits.items():
        dv = float(np.array([b], dtype=np.uint32).view(np.float32)[0])
        assert ref_e8m0_round_up(dv) == want, (hex(b), ref_e8m0_round_up(dv), want)

    # Notes §2 / torchao main test_to_mx_rceil: an fp32-subnormal block: scale byte 0 and
    # (torchao main ground truth, the spec's answer) non-zero elements.
    den = [6142315, 5096174, 3345704, 6178415, 5728750, 419002, 1716691, 4335089,
           5785800, 6234845, 1697524, 33075, 3975816, 3714822, 5411407, 3040844,
           7400945, 4474166, 7257182, 1273750, 5872176, 4694081, 2096530, 6273621,
           67028, 7585260, 4532315, 4599275, 6133942, 4542483, 5992199, 6862780]  # fmt: skip
    want = [60, 58, 53, 60, 59, 29, 45, 56, 59, 60, 45, 4, 55, 54, 58, 52,
            62, 57, 62, 42, 59, 57, 48, 60, 8, 62, 57, 57, 60, 57, 59, 61]  # fmt: skip
    vals = np.array(den, dtype=np.uint32).view(np.float32).tolist()
    e, q = ref_mx_quantize_block(vals, E4M3, "rceil")
    assert e8m0_byte(e) == 0 and [ref_encode_elem(v, E4M3) for v in q] == want
    # NaN in a block: NaN scale, all NaN
    e, q = ref_mx_quantize_block([math.nan] + [1.0] * 31, E4M3, "rceil")
    assert e is None and all(math.isnan(v) for v in ref_mx_dequantize(e, q))

    # Element formats: extremes and round trips
    for f in ELEM_FORMATS.values():
        assert ref_round_elem(f.max * 2, f) == (f.max, 0)
        assert ref_round_elem(-f.min_subnormal / 2, f) == (0, 1)  # tie to even (zero), -0
        assert ref_round_elem(f.min_subnormal * Fraction(3, 4), f) == (f.min_subnormal, 0)
        for c in range(1 << f.bits):
            v = ref_decode_elem(c, f)
            if isinstance(v[0], float):
                continue
            assert ref_round_elem(q_to_float(v), f) == v and ref_encode_elem(v, f) == c
        assert TWO**f.emax * (2 - TWO**-f.mbits) >= f.max >= TWO**f.emax
    assert ref_round_elem(464, E4M3, saturate=False) == (448, 0)  # tie to even, not NaN
    assert math.isnan(ref_round_elem(465, E4M3, saturate=False)[0])
    assert ref_round_elem(61440, E5M2, saturate=False)[0] == math.inf

    # Scale modes
    assert ref_mx_scale_exponent(0.0, E4M3, "floor") == -127
    assert ref_mx_scale_exponent(math.inf, E4M3, "floor") is None
    assert ref_mx_scale_exponent(256, E4M3, "ceil") == 0
    assert ref_mx_scale_exponent(257, E4M3, "ceil") == 1
    assert ref_mx_scale_exponent(Fraction(15, 8) * 256, E4M3, "even") == 0  # 1.111b: no carry
    assert ref_mx_scale_exponent(Fraction(31, 16) * 256, E4M3, "even") == 1  # half up
    assert ref_mx_scale_exponent(448, E4M3, "rceil") == 0
    assert ref_mx_scale_exponent(Fraction(448) + Fraction(1, 2**20), E4M3, "rceil") == 1

    # Recipes
    assert ref_current_scale(2.0, 448.0) == 224.0
    assert ref_current_scale(0.0, 448.0) == 1.0
    assert ref_current_scale(3.0, 448.0, power_of_2=True) == 128.0
    assert ref_current_scale(1e-45, 448.0) == FLT_MAX
    h, a, s = ref_delayed_scaling_update([4.0, 1.0, 8.0], 1.0, 448.0, margin=1)
    assert h == [0.0, 8.0, 4.0] and a == 8.0 and s == 28.0
    h, a, s = ref_delayed_scaling_update([4.0, 1.0, 8.0], 1.0, 448.0, algo="most_recent")
    assert a == 4.0 and s == 112.0
    assert ref_delayed_scaling_update([0.0, 0.0], 3.0, 448.0)[2] == 3.0
    assert ref_delayed_scaling_update([math.inf], 3.0, 448.0)[2] == 3.0


if __name__ == "__main__":
    _self_check()
    print("scaling_oracle self-check passed")
