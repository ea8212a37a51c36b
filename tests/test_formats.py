"""Format limits against numpy.finfo / ml_dtypes.finfo, and the textbook 8-bit format."""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim import Format, get_format

FINFO = {
    "fp32": np.finfo(np.float32),
    "fp16": np.finfo(np.float16),
    "fp64": np.finfo(np.float64),
    "bf16": ml_dtypes.finfo(ml_dtypes.bfloat16),
    "fp8_e4m3": ml_dtypes.finfo(ml_dtypes.float8_e4m3fn),
    "fp8_e5m2": ml_dtypes.finfo(ml_dtypes.float8_e5m2),
}


@pytest.mark.parametrize("name", list(FINFO))
def test_limits_match_finfo(name):
    f, fi = get_format(name), FINFO[name]
    assert f.max == float(fi.max)
    assert f.min_normal == float(fi.smallest_normal)
    assert f.smallest_subnormal == float(fi.smallest_subnormal)
    assert f.eps == float(fi.eps)
    assert f.bits == fi.bits
    assert f.emax == fi.maxexp - 1
    assert f.emin == fi.minexp
    assert f.precision == fi.nmant + 1
    assert f.dtype == np.dtype(fi.dtype)


def test_textbook_8bit_format():
    f = Format(4, 3)  # bias 7, IEEE style
    assert f.bias == 7
    assert f.max == 240.0
    assert f.smallest_subnormal == 1 / 512
    assert f.min_normal == 1 / 64
    # ml_dtypes.float8_e4m3 is exactly this format (IEEE-style E4M3)
    fi = ml_dtypes.finfo(ml_dtypes.float8_e4m3)
    assert (f.max, f.smallest_subnormal) == (float(fi.max), float(fi.smallest_subnormal))
    assert f.dtype == np.dtype(ml_dtypes.float8_e4m3)


def test_fp8_e4m3_is_ocp_fn():
    f = fpsim.fp8_e4m3
    assert f.style == "fn" and f.max == 448.0 and not f.has_inf
    assert f.nan_code == 0x7F
    # the value just below the NaN code 0x7F is 0x7E == 448
    assert float(np.uint8(0x7E).view(ml_dtypes.float8_e4m3fn)) == 448.0


def test_tf32():
    f = fpsim.tf32
    assert (f.bits, f.precision, f.emin, f.emax) == (19, 11, -126, 127)
    assert Fraction(f.max) == (2 - Fraction(1, 1024)) * 2**127


@pytest.mark.parametrize(
    "alias,name",
    [("half", "fp16"), ("float16", "fp16"), ("FP16", "fp16"), ("bfloat16", "bf16"),
     ("e4m3", "fp8_e4m3"), ("float8_e4m3fn", "fp8_e4m3"), ("e5m2", "fp8_e5m2"),
     ("float32", "fp32"), ("single", "fp32"), ("torch.float16", "fp16")],
)  # fmt: skip
def test_aliases(alias, name):
    assert get_format(alias) is get_format(name)


def test_lookup_by_dtype():
    assert get_format(np.float16) is fpsim.fp16
    assert get_format(ml_dtypes.bfloat16) is fpsim.bf16
    assert get_format(np.dtype(ml_dtypes.float8_e5m2)) is fpsim.fp8_e5m2


def test_unknown_names_are_clear_errors():
    with pytest.raises(ValueError, match="unknown format 'fp17'.*known: fp32, fp16"):
        get_format("fp17")
    with pytest.raises(ValueError, match="no matching fpsim format"):
        get_format(np.int32)
    with pytest.raises(TypeError):
        get_format(3.5)


@pytest.mark.parametrize(
    "args,kwargs,msg",
    [((0, 3), {}, "exp_bits"), ((12, 3), {}, "exp_bits"), ((5, -1), {}, "man_bits"),
     ((5, 53), {}, "man_bits"), ((5, 2), {"style": "x"}, "style"),
     ((5, 0), {}, "nan='ieee' needs man_bits >= 1"),
     ((4, 3), {"style": "fnuz", "signed": False}, "needs a sign bit"),
     ((4, 3), {"has_subnormals": False}, "only defined for man_bits=0"),
     ((1, 3), {}, "no normal binade"),  # IEEE style: the one exponent code is inf/NaN
     ((4, 3), {"style": "fn", "nan": "ieee"}, "give a style or the properties"),
     ((4, 3), {"nan": "payload"}, "nan must be one of")],
)  # fmt: skip
def test_invalid_formats(args, kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        Format(*args, **kwargs)


def test_format_is_frozen_and_hashable():
    f = Format(5, 2)
    assert f == fpsim.fp8_e5m2  # equal by fields; the name is not part of equality
    assert hash(f) == hash(fpsim.fp8_e5m2)
    with pytest.raises(AttributeError):
        f.exp_bits = 3  # type: ignore[misc]


def test_container_dtype():
    assert fpsim.fp16.container_dtype == np.float32
    assert fpsim.tf32.container_dtype == np.float32
    assert Format(11, 10).container_dtype == np.float64
    assert fpsim.fp64.container_dtype == np.float64


# ---- every name fpsim prints, get_format reads back -------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 11), st.integers(1, 52), st.integers(-60, 1075), st.sampled_from(["ieee", "fn"]))
def test_generated_names_and_format_text_parse_back(e, m, bias, style):
    try:
        f = fpsim.Format(e, m, bias=bias, style=style)
    except ValueError:
        return  # does not fit in float64
    g = fpsim.get_format(f.name)
    assert (g.exp_bits, g.man_bits, g.bias, g.style) == (e, m, bias, style)
    text = f"Format({e}, {m}, bias={bias}, style={style!r})"
    assert fpsim.get_format(text) == f
    assert fpsim.get_format(f"fpsim.Format(exp_bits={e}, man_bits={m}, bias={bias})").style == "ieee"


def test_format_text_spellings():
    assert fpsim.get_format("e4m3_ieee") == fpsim.Format(4, 3) and fpsim.get_format("e4m3_ieee").max == 240
    assert fpsim.get_format("Format(4,3)").max == 240  # IEEE style: 1.875 * 2^7, by hand
    assert fpsim.get_format("e5m10") is fpsim.fp16 and fpsim.get_format("E5M2") is fpsim.fp8_e5m2
    for bad in ("e4m3fn_ieee", "Format(4)", "Format(4, 3, style='x')", "e99m3", "Format(4.5, 3)"):
        with pytest.raises((ValueError, TypeError)):
            fpsim.get_format(bad)
