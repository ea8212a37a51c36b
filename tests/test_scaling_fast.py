"""The fast block-quantization kernel (fpsim.kernels.block._fast_blocks: nearest-even elements by
the shifter rounding, stochastic ones by float instructions with the general kernel's random
bits) against the general kernel, compiled and run uncompiled
(``backend="python"``), and against exact rounding with ``fractions.Fraction`` (tests/oracle.py,
tests/scaling_oracle.py), over every element format it claims: MX/NVFP4's and random custom
formats of every style, any block size (ragged last blocks), every scale rule, float32 and
float64 inputs, one- and two-level float scales, and the edges (zeros, -0, subnormals,
saturation, ties, inf/NaN blocks, all-zero blocks, huge and tiny amax)."""

import math
from fractions import Fraction

import numpy as np
import pytest
import scaling_oracle as ref
from arith_oracle import round_rational
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from oracle import ref_round

import fpsim
from fpsim.kernels import block as kblock
from fpsim.kernels import scalar
from fpsim.kernels.scalar import random62
from fpsim.scaling import BlockScheme, quantize


def same(a, b):
    """Bit-for-bit equal float arrays (NaN == NaN, -0 != +0)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return bool(((a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))).all())


NAMED_ELEMENTS = [fpsim.fp4_e2m1, fpsim.fp6_e2m3, fpsim.fp6_e3m2, fpsim.fp8_e4m3, fpsim.fp8_e5m2,
                  fpsim.fp8_e4m3fnuz, fpsim.fp8_e5m2fnuz, fpsim.fp16, fpsim.bf16]  # fmt: skip
NAMED_SCALES = [fpsim.e8m0, fpsim.fp8_e4m3, fpsim.fp8_e5m2, fpsim.fp16, fpsim.bf16]


@st.composite
def custom_formats(draw, min_man=0):
    """A signed format of any style that fits in a float32 (what a block element must be)."""
    e = draw(st.integers(1, 8))
    m = draw(st.integers(min_man, 23))
    default = (1 << (e - 1)) - 1
    bias = draw(st.one_of(st.just(default), st.integers(default - 8, default + 24)))
    props = draw(st.sampled_from([{"style": s} for s in ("ieee", "fn", "fnuz", "finite")]
                                 + [{"has_inf": True, "nan": "none"},
                                    {"has_inf": True, "nan": "negzero"}]))  # fmt: skip
    try:
        f = fpsim.Format(e, m, bias, **props)
    except ValueError:
        assume(False)
    assume(f.container_dtype == np.float32)
    return f


def fast_claimed(f):
    """The element formats the fast kernel claims: signed, with fraction bits (every signed
    format with fraction bits has subnormals), inside float32 (so inside float64's range)."""
    return f.signed and f.man_bits >= 1


def exact_elements(x, scales, g, bs, elem):
    """Each element by the definition: x / (scale · g) taken exactly, rounded to nearest even,
    saturating; a zero quotient keeps x's sign (+0 in a format without -0); NaN blocks NaN."""
    out = []
    for i, v in enumerate(x.tolist()):
        s = scales[i // bs]
        if math.isnan(s):
            out.append(math.nan)
            continue
        q = Fraction(v) / (Fraction(s) * g)
        if q == 0:
            out.append(ref_round(math.copysign(0.0, v), elem, saturate=True))
        else:
            out.append(ref_round(q, elem, "nearest_even", saturate=True))
    return out


def exact_scales(x, scheme, rule, g, bs):
    """Each block's scale by the definition (scaling_oracle for MX with E8M0; for a float
    scale: amax / (max · g) taken exactly, rounded by the rule in the scale format, saturating,
    at least the scale format's smallest normal); NaN for a block holding inf or NaN."""
    el = scheme.element
    mx_elem = ref.ElemFormat(el.name, el.exp_bits, el.man_bits, el.bias, el.emax,
                             Fraction(el.max), el.has_inf, None)  # fmt: skip
    out = []
    for b in range(0, x.size, bs):
        blk = x[b : b + bs].astype(np.float64)
        if not np.isfinite(blk).all():
            out.append(math.nan)
            continue
        amax = Fraction(float(np.max(np.abs(blk))))
        if scheme.pow2:
            out.append(2.0 ** ref.ref_mx_scale_exponent(amax, mx_elem, rule))
        else:
            mode = "nearest_even" if rule == "nearest_even" else "up"
            s = ref_round(amax / (Fraction(el.max) * g), scheme.scale, mode, saturate=True)
            out.append(max(s, scheme.scale.min_normal))
    return out


def edge_data(rng, n, dtype, elem):
    """n values mixing random magnitudes around a random block exponent with the edges."""
    e0 = int(rng.integers(-150, 130)) if dtype == np.float32 else int(rng.integers(-1080, 1020))
    with np.errstate(over="ignore", under="ignore"):
        x = rng.standard_normal(n) * 2.0 ** rng.integers(e0 - 30, e0 + 2, n).astype(np.float64)
    kind = rng.random(n)
    tiny = float(np.finfo(dtype).smallest_subnormal)
    big = float(np.finfo(dtype).max)
    # ties of the element grid under a power-of-two scale: (k + 1/2) quanta
    k = rng.integers(0, 2 ** (elem.man_bits + 1), n)
    tie = (k + 0.5) * 2.0 ** (elem.emin - elem.man_bits + rng.integers(0, 6, n)) * 2.0 ** (
        rng.integers(-20, 20, n))  # fmt: skip
    x = np.where(kind < 0.10, 0.0, x)
    x = np.where((kind >= 0.10) & (kind < 0.14), -0.0, x)
    x = np.where((kind >= 0.14) & (kind < 0.20), tiny * rng.integers(1, 9, n), x)
    x = np.where((kind >= 0.20) & (kind < 0.24), big * rng.random(n), x)
    x = np.where((kind >= 0.24) & (kind < 0.40), tie * np.sign(rng.standard_normal(n)), x)
    with np.errstate(over="ignore", under="ignore"):
        return x.astype(dtype)


def add_specials(rng, x, bs):
    """Sometimes an inf or NaN element, sometimes an all-zero block."""
    r = rng.random()
    if r < 0.25 and x.size:
        x.flat[rng.integers(0, x.size)] = rng.choice([np.nan, np.inf, -np.inf])
    elif r < 0.4 and x.shape[1] >= bs:
        x[:, :bs] = 0.0
    return x


def same_on_every_kernel(x, scheme, **kw):
    """quantize(x, scheme, **kw) by the fast kernel (where it claims the format and mode) ==
    the general kernel compiled == uncompiled; returns the first."""
    q = quantize(x, scheme, **kw)
    py = quantize(x, scheme, backend="python", **kw)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kblock, "FAST_PATH", False)
        gen = quantize(x, scheme, **kw)
    for other in (py, gen):
        assert same(q.elements, other.elements)
        assert same(q.scales, other.scales)
        assert q.tensor_scale == other.tensor_scale
    return q


def check_all_paths(x, scheme, rule, tensor_scale):
    """quantize by the fast kernel == the general kernel compiled == uncompiled == exact."""
    q = same_on_every_kernel(x, scheme, scale_rounding=rule, tensor_scale=tensor_scale)
    bs = scheme.block_size
    g = Fraction(q.tensor_scale) if q.tensor_scale is not None else Fraction(1)
    for r in range(x.shape[0]):
        row, el, sc = x[r], q.elements[r], q.scales[r]
        if scheme.pow2 and scheme.scale != fpsim.e8m0:
            want_sc = sc.tolist()  # custom power-of-two scales: see the kernel (E8M0's range)
        else:
            want_sc = exact_scales(row, scheme, rule, g, bs)
        assert same(sc, want_sc), (r, sc, want_sc)
        assert same(el, exact_elements(row, sc.tolist(), g, bs, scheme.element)), r
    return q


# what the kernel tests draw besides the element format and the tensor-scale kind
BLOCK_DRAWS = {
    "scale": st.one_of(st.sampled_from(NAMED_SCALES), custom_formats()),
    "bs": st.one_of(st.sampled_from([16, 32]), st.integers(1, 40)),
    "shape": st.tuples(st.integers(1, 3), st.integers(1, 90)),
    "dtype": st.sampled_from([np.float32, np.float64]),
    "seed": st.integers(0, 2**32 - 1),
}


def block_case(elem, scale, bs, shape, dtype, ts, seed):
    """A drawn kernel test case: the scheme, a scale rule, the data (edges and specials) and
    the tensor scale: None (the scheme's default), False (none), or a given float32 value
    within 2^±40 (``ts="given"``) or anywhere in float32's range (``"extreme"``)."""
    try:
        scheme = BlockScheme(elem, bs, scale, tensor_scale=scale.man_bits > 0 and ts == "default")
    except ValueError:
        assume(False)
    rng = np.random.default_rng(seed)
    rule = scheme.scale_roundings[int(rng.integers(0, len(scheme.scale_roundings)))]
    x = add_specials(rng, edge_data(rng, shape[0] * shape[1], dtype, elem).reshape(shape), bs)
    tensor_scale = None
    if not scheme.pow2:
        k = int(rng.integers(-149, 128)) if ts == "extreme" else int(rng.integers(-40, 40))
        given_g = float(np.float32(2.0**k * rng.uniform(1, 2)))
        given_g = given_g if 0 < given_g < math.inf else 2.0**-149
        tensor_scale = {"default": None, "none": False, "given": given_g, "extreme": given_g}[ts]
    return scheme, rule, x, tensor_scale


@settings(max_examples=60, deadline=None)
@given(
    elem=st.one_of(st.sampled_from(NAMED_ELEMENTS), custom_formats(min_man=1)),
    ts=st.sampled_from(["default", "none", "given"]),
    **BLOCK_DRAWS,
)
def test_fast_kernel_equals_general_and_exact(elem, scale, bs, shape, dtype, ts, seed):
    assert fast_claimed(elem)
    assert kblock.fast_path_ok(elem.record, scalar.NEAREST_EVEN)
    scheme, rule, x, tensor_scale = block_case(elem, scale, bs, shape, dtype, ts, seed)
    if scheme.tensor_scale and not np.isinf(x).any() and not np.isnan(x).all():
        amax = Fraction(float(np.nanmax(np.abs(x))))  # NaN ignored, as fmaxf does
        g = amax / (Fraction(scheme.element.max) * Fraction(scheme.scale.max))
        if math.isinf(ref_round(g, fpsim.fp32)):  # float64 x only: a clear error, no inf scale
            with pytest.raises(ValueError, match="too large for a float32 tensor scale"):
                quantize(x, scheme, scale_rounding=rule)
            return
    check_all_paths(x, scheme, rule, tensor_scale)


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4",
                                  "nvfp4"])  # fmt: skip
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_named_schemes_every_rule_ragged(name, dtype):
    """Every named scheme and scale rule on a 2-D array whose rows end in a short block."""
    scheme = fpsim.scaling.get_scheme(name)
    assert kblock.fast_path_ok(scheme.element.record, scalar.NEAREST_EVEN)
    rng = np.random.default_rng(len(name))
    for rule in scheme.scale_roundings:
        x = edge_data(rng, 3 * 75, dtype, scheme.element).reshape(3, 75)
        x[1, 40] = np.nan
        # float64 data reach 1e308: beyond NVFP4's float32 tensor scale (a ValueError, tested
        # above), so single level there
        two_level = scheme.tensor_scale and dtype == np.float32
        check_all_paths(x, scheme, rule, None if two_level or scheme.pow2 else False)


def test_nvfp4_ties_of_the_quotient_float32():
    """NVFP4 elements exactly at E2M1 midpoints after a two-level scale s · g, where the
    float64 product x · fl(1 / (s · g)) misses the midpoint by an ulp (found here with numpy
    alone; the float32 fast path multiplies by that reciprocal and must still break every tie
    to even), and their float32 neighbours."""
    e4m3 = fpsim.inspect.all_values(fpsim.fp8_e4m3)["value"]
    svals = [float(v) for v in e4m3 if np.isfinite(v) and v >= 2**-6][::7]
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    rng = np.random.default_rng(1)
    gs = [float(np.float32(rng.uniform(1, 2) * 2.0 ** rng.integers(-20, 20))) for _ in range(40)]
    hazards = 0
    for g in gs:
        blocks = []
        for s in svals:
            d = s * g
            ties = [M * d for M in mids if float(np.float32(M * d)) == M * d]
            hazards += sum(t * (1.0 / d) != t / d for t in ties)
            amax = np.float32(6 * d)
            near = [np.nextafter(np.float32(t), np.float32(np.inf)) for t in ties]
            blk = np.resize(np.array([amax, *ties, *[-t for t in ties], *near], np.float32), 16)
            blk[0] = amax  # the block scale: amax / (6 g) rounds to s
            blocks.append(blk)
        x = np.concatenate(blocks).reshape(1, -1)
        check_all_paths(x, fpsim.scaling.get_scheme("nvfp4"), "nearest_even", g)
    assert hazards > 20  # the reciprocal alone breaks these ties the wrong way


def test_fast_path_dispatch():
    """Which formats and modes take the fast kernel: the claim, and nothing beyond it."""
    ne = scalar.NEAREST_EVEN
    for name in ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "nvfp4"):
        el = fpsim.scaling.get_scheme(name).element.record
        assert kblock.fast_path_ok(el, ne)
        assert kblock.fast_path_ok(el, scalar.STOCHASTIC)  # (NVFP4's gradients)
        for mode in (scalar.NEAREST_AWAY, scalar.TOWARD_ZERO, scalar.UP, scalar.DOWN):
            assert not kblock.fast_path_ok(el, mode)
    # stochastic needs a smallest quantum <= 1 (nearest even does not)
    coarse = fpsim.Format(4, 2, bias=-3).record  # emin = 4, smallest quantum 2^2
    assert kblock.fast_path_ok(coarse, ne) and not kblock.fast_path_ok(coarse, scalar.STOCHASTIC)
    # no fraction bits: a tie goes to the even exponent, which the shifter does not know
    assert not kblock.fast_path_ok(fpsim.Format(3, 0, style="fnuz").record, ne)
    assert not kblock.fast_path_ok(fpsim.e8m0.record, ne)  # unsigned, no subnormals


@settings(max_examples=60, deadline=None)
@given(elem=st.one_of(st.sampled_from(NAMED_ELEMENTS), custom_formats(min_man=0)),
       mode=st.sampled_from(["nearest_even", "nearest_away", "toward_zero", "up", "down"]),
       seed=st.integers(0, 2**32 - 1))  # fmt: skip
def test_formats_and_modes_outside_the_claim_still_exact(elem, mode, seed):
    """Formats without fraction bits and the other modes take the general kernel: still the
    exact rounding of the scaled values."""
    assume(not (fast_claimed(elem) and mode == "nearest_even"))
    assert not kblock.fast_path_ok(elem.record, fpsim.core.ROUNDING_MODES[mode])
    scheme = BlockScheme(elem, 8, fpsim.e8m0)
    rng = np.random.default_rng(seed)
    x = edge_data(rng, 37, np.float32, elem)
    q = quantize(x, scheme, rounding=mode)
    py = quantize(x, scheme, rounding=mode, backend="python")
    assert same(q.elements, py.elements) and same(q.scales, py.scales)
    for i, v in enumerate(x.tolist()):
        s = q.scales[i // 8]
        if math.isnan(s):
            assert math.isnan(q.elements[i])
            continue
        qv = Fraction(v) / Fraction(s)
        want = ref_round(qv if qv != 0 else math.copysign(0.0, v), elem, mode, saturate=True)
        assert same([q.elements[i]], [want]), (i, v, s)


def _grid_and_midpoints(f, rng):
    """float64 values on and around every kind of point of f's grid: its values, the midpoints
    between them (ties), their float64 neighbours, beyond max, below the smallest subnormal,
    float64 subnormals, zeros and float64's largest values."""
    m = f.man_bits
    e = rng.integers(f.emin - 3, f.emax + 3, 120)
    k = rng.integers(0, 2 ** (m + 1), 120)
    pts = k * 2.0 ** (e - m).astype(np.float64)
    mids = (k + 0.5) * 2.0 ** (e - m).astype(np.float64)
    base = np.concatenate([pts, mids, [f.max, f.max + 2.0 ** (f.emax - m - 1), 2 * f.max,
                                       f.smallest_subnormal / 2, f.smallest_subnormal,
                                       f.min_normal, 1e300, 5e-324, 0.0]])  # fmt: skip
    t = np.concatenate([base, np.nextafter(base, np.inf), np.nextafter(base, 0.0)])
    return np.concatenate([t, -t, [1.7976931348623157e308, -1.7976931348623157e308, -0.0]])


@settings(max_examples=40, deadline=None)
@given(elem=st.one_of(st.sampled_from(NAMED_ELEMENTS), custom_formats(min_man=1)),
       seed=st.integers(0, 2**32 - 1))  # fmt: skip
def test_round_saturating_is_exact_for_every_finite_float64(elem, seed):
    """The element rounding itself, run as plain Python, against exact rounding (nearest even,
    saturating) on grid points, ties and their neighbours, and against the general scalar
    rounding it replaces."""
    rng = np.random.default_rng(seed)
    k = kblock.saturating_constants(elem.record)
    for t in _grid_and_midpoints(elem, rng).tolist():
        got = kblock.round_saturating(t, k)
        assert same([got], [ref_round(t, elem, "nearest_even", saturate=True)]), t
        gen = scalar.round_value(t, elem.record, scalar.NEAREST_EVEN, 1, 1, 0)
        assert same([got], [gen]), t


@pytest.mark.parametrize("mode", ["nearest_even", "nearest_away", "toward_zero", "up", "down"])
def test_float64_quotients_that_underflow_are_not_nan(mode):
    """A float64 x near float64's subnormals divided by a float scale underflows to ±0 in
    float64: the odd stand-in of that quotient is ±2^-1074 (it was NaN, from stepping the
    pattern of 0 toward zero), so the element is the exact rounding, as is a block scale
    whose amax is such a value."""
    g = float(np.float32(2.0**100))
    blocks = [[1e30, -1e-320, 1e-320, 5e-324], [1.6324e-320, -5e-324, 0.0, -0.0]]
    x = np.array([v for b in blocks for v in b + [0.0] * 12], np.float64).reshape(1, -1)
    scheme = fpsim.scaling.get_scheme("nvfp4")
    for rule in ("nearest_even", "up"):
        q = quantize(x, scheme, scale_rounding=rule, rounding=mode, tensor_scale=g)
        py = quantize(x, scheme, scale_rounding=rule, rounding=mode, tensor_scale=g,
                      backend="python")  # fmt: skip
        assert same(q.elements, py.elements) and same(q.scales, py.scales)
        assert not np.isnan(q.scales).any() and not np.isnan(q.elements).any()
        assert same(q.scales[0], exact_scales(x[0], scheme, rule, Fraction(g), 16))
        for i, v in enumerate(x[0].tolist()):
            qv = Fraction(v) / (Fraction(q.scales[0, i // 16]) * Fraction(g))
            want = ref_round(qv if qv != 0 else math.copysign(0.0, v), scheme.element, mode,
                             saturate=True)  # fmt: skip
            assert same([q.elements[0, i]], [want]), (i, v)


@pytest.mark.parametrize("mode", ["nearest_even", "nearest_away", "toward_zero", "up", "down"])
@pytest.mark.parametrize("rule", ["nearest_even", "up"])
def test_float64_quotients_that_overflow_saturate(mode, rule):
    """A float64 x divided by a small float scale overflows float64: the exact quotient is
    finite all the same, so scales and elements of formats with inf saturate to max (they
    were inf)."""
    e5m2 = fpsim.fp8_e5m2
    scheme = BlockScheme(e5m2, 4, e5m2)
    g = 2.0**-100
    x = np.array([[1e300, 1.0, -1e300, 0.0, 3.0, -1e308, 1e-300, 2.0]])
    kw = {"scale_rounding": rule, "rounding": mode, "tensor_scale": g}
    q = quantize(x, scheme, **kw)
    py = quantize(x, scheme, backend="python", **kw)
    assert same(q.elements, py.elements) and same(q.scales, py.scales)
    assert same(q.scales[0], exact_scales(x[0], scheme, rule, Fraction(g), 4))
    assert (q.scales == e5m2.max).all()
    for i, v in enumerate(x[0].tolist()):
        qv = Fraction(v) / (Fraction(q.scales[0, i // 4]) * Fraction(g))
        want = ref_round(qv if qv != 0 else math.copysign(0.0, v), e5m2, mode, saturate=True)
        assert same([q.elements[0, i]], [want]), (i, v)
    assert np.isfinite(q.elements).all()


# ---- stochastic rounding on the fast path ------------------------------------------------------
# The fast kernel rounds stochastically with round_stochastic_saturating and draws element i's
# bits from random62(seed, i), i its flat index, as the general kernel does. Oracle: the
# element's quotient taken exactly (Fraction), made the float64 stand-in the kernels document
# (x · 2^-e is the IEEE product; x / (s · g) is the exact quotient rounded to odd in float64),
# then rounded stochastically with exact rationals (arith_oracle.round_rational: up when
# rand62 < ceil(f · 2^62)).


def stochastic_claimed(f):
    """The element formats the fast kernel claims for stochastic rounding: those of nearest
    even whose smallest quantum 2^(emin - m) is at most 1."""
    return fast_claimed(f) and f.emin - f.man_bits <= 0


def odd_float64(v):
    """The exact value v (a Fraction) rounded to odd in float64: toward zero, then to the odd
    neighbour on v's side when that was inexact and gave an even significand (exact rounding:
    tests/oracle.py). Beyond float64's range toward zero gives its largest value, itself odd."""
    t = ref_round(v, fpsim.fp64, "toward_zero")
    if Fraction(t) == v or int(np.float64(t).view(np.int64)) & 1:
        return t
    return float(np.nextafter(t, math.copysign(math.inf, v)))


def exact_stochastic_elements(x, scales, g, bs, elem, seed, pow2, first):
    """Each element of the row x (its flat indices from ``first``) by the definition above."""
    out = []
    for i, v in enumerate(x.tolist()):
        s = scales[i // bs]
        if math.isnan(s):
            out.append(math.nan)
            continue
        q = Fraction(v) / (Fraction(s) * g)
        t = ref_round(q, fpsim.fp64) if pow2 else odd_float64(q)  # the IEEE product x · 2^-e
        if math.isinf(t):  # beyond float64 (a scale format that stops short of amax): the exact
            t = q  # quotient, finite, which saturates
        r = round_rational(Fraction(t), elem, "stochastic", saturate=True,
                           rand62=random62(seed, first + i), zero_sign=math.copysign(1.0, v))  # fmt: skip
        out.append(0.0 if r == 0 and not elem.has_negzero else r)
    return out


@settings(max_examples=60, deadline=None)
@given(
    elem=st.one_of(st.sampled_from(NAMED_ELEMENTS), custom_formats(min_man=0)),
    ts=st.sampled_from(["default", "none", "given", "extreme"]),
    rseed=st.one_of(st.integers(0, 2**63 - 1), st.integers(0, 3)),
    **BLOCK_DRAWS,
)
# found by CI: float64 values near its max over a scale format that stops at 2^-5, so x · 2^-e
# overflowed float64 (the general kernel gave inf in e5m2, the exact quotient saturates)
@example(elem=fpsim.fp8_e5m2, ts="default", rseed=0, scale=fpsim.Format(1, 0, bias=6, style="fnuz"),
         bs=16, shape=(1, 7), dtype=np.float64, seed=1)  # fmt: skip
@example(elem=fpsim.get_format("fp4_e2m1"), ts="default", rseed=0,
         scale=fpsim.Format(1, 0, bias=6, style="fnuz"), bs=16, shape=(1, 7), dtype=np.float64,
         seed=1)  # fmt: skip
def test_fast_stochastic_equals_general_and_exact(elem, scale, bs, shape, dtype, ts, seed, rseed):
    """Stochastic elements by the fast kernel (where it claims the format; the general kernel
    elsewhere) == the general kernel compiled == uncompiled == the exact definition, bit for
    bit, with the same random bits per element; scales as in nearest even."""
    claimed = stochastic_claimed(elem)
    assert kblock.fast_path_ok(elem.record, scalar.STOCHASTIC) == claimed
    scheme, rule, x, tensor_scale = block_case(elem, scale, bs, shape, dtype, ts, seed)
    kw = {"scale_rounding": rule, "tensor_scale": tensor_scale, "rounding": "stochastic",
          "seed": rseed}  # fmt: skip
    try:
        q = same_on_every_kernel(x, scheme, **kw)
    except ValueError as e:  # float64 x beyond a float32 tensor scale: tested above
        assert "too large for a float32 tensor scale" in str(e)
        return
    g = Fraction(q.tensor_scale) if q.tensor_scale is not None else Fraction(1)
    n = x.shape[1]
    for r in range(x.shape[0]):
        sc = q.scales[r]
        if not (scheme.pow2 and scheme.scale != fpsim.e8m0):
            assert same(sc, exact_scales(x[r], scheme, rule, g, bs)), r
        want = exact_stochastic_elements(x[r], sc.tolist(), g, bs, elem, rseed, scheme.pow2,
                                         r * n)  # fmt: skip
        assert same(q.elements[r], want), r


def _thresholds_and_neighbours(t, f):
    """ceil(f · 2^62) for t (the fraction of a quantum by which |t| exceeds its lower
    neighbour, exactly), and random bits at and next to it and at the ends of [0, 2^62)."""
    a = abs(Fraction(t))
    if a == 0:
        return [0, 1, 2**62 - 1]
    e = a.numerator.bit_length() - a.denominator.bit_length()
    e = e if Fraction(2) ** e <= a else e - 1
    quantum = Fraction(2) ** (max(e, f.emin) - f.man_bits)
    u = a / quantum
    c = math.ceil((u - math.floor(u)) * 2**62)
    return [v for v in (0, 1, c - 1, c, c + 1, 2**62 - 1) if 0 <= v < 2**62]


@settings(max_examples=60, deadline=None)
@given(elem=st.one_of(st.sampled_from(NAMED_ELEMENTS), custom_formats(min_man=1)),
       seed=st.integers(0, 2**32 - 1))  # fmt: skip
def test_round_stochastic_saturating_at_every_threshold(elem, seed):
    """The element rounding itself, run as plain Python, for random bits exactly at, just
    below and just above each value's threshold ceil(f · 2^62) (where up turns into down),
    against exact rounding and against the general scalar rounding it replaces, on grid
    points, midpoints, their neighbours, subnormals, beyond max, zeros and float64's ends."""
    assume(stochastic_claimed(elem))
    rng = np.random.default_rng(seed)
    kst = kblock.stochastic_constants(elem.record)
    ts = _grid_and_midpoints(elem, rng)
    ts = np.concatenate([ts, rng.standard_normal(40) * 2.0 ** rng.integers(elem.emin - 4,
                                                                           elem.emax + 2, 40)])  # fmt: skip
    for t in ts.tolist():
        for rand in _thresholds_and_neighbours(t, elem) + [int(rng.integers(0, 2**62))]:
            got = kblock.round_stochastic_saturating(t, rand, kst)
            want = round_rational(Fraction(t), elem, "stochastic", saturate=True, rand62=rand,
                                  zero_sign=math.copysign(1.0, t))  # fmt: skip
            want = 0.0 if want == 0 and not elem.has_negzero else want
            assert same([got], [want]), (t, rand, got, want)
            gen = scalar.round_value(t, elem.record, scalar.STOCHASTIC, 1, 1, rand)
            assert same([got], [gen]), (t, rand)


def test_stochastic_nan_blocks_and_seeds():
    """A NaN block is NaN on the fast stochastic path and its neighbours are not (MX blocks of
    32: a row of 40 is a block of 32 and a short one); the general kernel agrees; another seed
    draws other bits."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((4, 40)) * 3).astype(np.float32)
    x[2, 5] = np.nan
    x[3, 39] = -np.inf
    q = quantize(x, "mxfp4", rounding="stochastic", seed=77)
    assert np.isnan(q.elements[2, :32]).all() and not np.isnan(q.elements[2, 32:]).any()
    assert np.isnan(q.elements[3, 32:]).all() and not np.isnan(q.elements[3, :32]).any()
    assert np.isnan(q.scales[[2, 3], [0, 1]]).all()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kblock, "FAST_PATH", False)
        assert same(quantize(x, "mxfp4", rounding="stochastic", seed=77).elements, q.elements)
    other = quantize(x, "mxfp4", rounding="stochastic", seed=78)
    assert not same(other.elements, q.elements)  # 160 elements, other bits


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["nvfp4", "mxfp4", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3"]),
       shape=st.sampled_from([(3, 37), (37, 3), (2, 5, 40), (7,), (2, 64)]),
       axis=st.integers(0, 2), seed=st.integers(0, 2**32 - 1))  # fmt: skip
def test_dequantize_kernel_is_the_exact_product_rounded_once(name, shape, axis, seed):
    """ScaledTensor.dequantize by the one-pass kernel (the layout quantize writes) == by the
    numpy route (the same elements in another memory layout) == element · scale · tensor scale
    taken exactly with Fractions and rounded once to the dtype (float32 overflow: inf), NaN
    blocks NaN; any axis, ragged last blocks, float32 subnormal results."""
    assume(axis < len(shape))
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-140, 120, shape)).astype(np.float32)
    if rng.random() < 0.5:
        x.flat[int(rng.integers(0, x.size))] = np.nan
    q = quantize(x, name, axis=axis, tensor_scale=None if name != "nvfp4" else
                 float(np.float32(2.0 ** rng.integers(-30, 60))))  # fmt: skip
    other = fpsim.scaling.ScaledTensor(q.scheme, q.axis, np.asfortranarray(q.elements)[...],
                                       q.scales, q.tensor_scale, q.scale_rounding, q.rounding)  # fmt: skip
    per = q.block_scales()
    g = 1 if q.tensor_scale is None else Fraction(q.tensor_scale)
    for dt, fmt in ((np.float32, fpsim.fp32), (np.float64, fpsim.fp64)):
        got = q.dequantize(dt)
        assert got.dtype == dt and got.shape == x.shape
        assert same(got, other.dequantize(dt))
        s_only = per / (1.0 if q.tensor_scale is None else q.tensor_scale)  # exact: powers/E4M3
        want = [math.nan if math.isnan(s) else
                ref_round(Fraction(e) * Fraction(s) * g, fmt) if e != 0 else e * s
                for e, s in zip(q.elements.ravel().tolist(), s_only.ravel().tolist(), strict=True)]  # fmt: skip
        assert same(got.ravel(), want)
