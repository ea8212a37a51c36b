"""Hardware accumulation models (fpsim.arith.accumulation, the block FMA of fpsim.kernels.reduce).

Oracles:
* GPU outputs: the presets reproduce, bit for bit, dot products computed on V100, A100, H100 and
  B200 tensor cores (tests/data/tensorcore_vectors.npz, extracted from Khattak & Mikaitis's
  model_validation data; see tests/data/extract_tensorcore_vectors.py);
* the papers' probes: the inputs Fasi, Higham, Mikaitis & Pranesh used to reveal truncation,
  missing guard bits, normalisation, carry-out bits and non-monotonicity give the results
  their programs expect on V100 and A100 (tensor-cores-numerical-behavior, *.cu);
* the definition: an exact rational implementation (tests/arith_oracle.py,
  block_fma_reference) agrees bit for bit on random models and inputs (hypothesis), every
  rounding mode (stochastic: with the same random bits), signed zeros, inf and NaN included;
  and the CPU's fast and general forms of the step and the uncompiled Python agree.
"""

import math
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import fpsim
from fpsim import arith
from fpsim.arith import BlockFMA
from fpsim.arith.reductions import _params
from fpsim.kernels import arith_cpu, reduce, scalar

sys.path.insert(0, str(Path(__file__).parent))
from arith_cases import same_bits, small_values, values  # noqa: E402
from arith_oracle import ALL_MODES, block_fma_reference  # noqa: E402

DATA = Path(__file__).parent / "data" / "tensorcore_vectors.npz"


# ---- 1. GPU outputs ----------------------------------------------------------------------------
GPU_SETS = [
    ("V100_fp16_fp32", "v100_fp16"), ("V100_fp16_fp16", "v100_fp16_acc16"),
    ("A100_fp16_fp32", "a100_fp16"), ("A100_fp16_fp16", "a100_fp16_acc16"),
    ("A100_bf16_fp32", "a100_bf16"), ("A100_tf32_fp32", "a100_tf32"),
    ("H100_fp16_fp32", "h100_fp16"), ("H100_fp16_fp16", "h100_fp16_acc16"),
    ("H100_bf16_fp32", "h100_bf16"), ("H100_tf32_fp32", "h100_tf32"),
    ("H100_E4M3_fp32", "h100_fp8"), ("H100_E5M2_fp32", "h100_fp8"),
    ("B200_fp16_fp32", "b200_fp16"), ("B200_fp16_fp16", "b200_fp16_acc16"),
    ("B200_bf16_fp32", "b200_bf16"), ("B200_tf32_fp32", "b200_tf32"),
    ("B200_E4M3_fp32", "b200_fp8_mma_sync"), ("B200_E5M2_fp32", "b200_fp8_mma_sync"),
]  # fmt: skip
_DECODE = {  # the input codes' own dtypes (ml_dtypes / numpy), and fpsim's format names
    "fp16": (np.float16, "fp16"), "bf16": (ml_dtypes.bfloat16, "bf16"),
    "tf32": (np.float32, "tf32"), "E4M3": (ml_dtypes.float8_e4m3fn, "fp8_e4m3"),
    "E5M2": (ml_dtypes.float8_e5m2, "fp8_e5m2"),
}  # fmt: skip


def gpu_vectors(key: str):
    """A (n, K), B (n, K), C (n,), D (n,) as float64, the input format and the output's."""
    z = np.load(DATA)
    fin, fout = key.split("_")[1:]
    dtype, name = _DECODE[fin]
    a = z[key + "_a"].view(dtype).astype(np.float64)
    b = z[key + "_b"].view(dtype).astype(np.float64)
    c = z[key + "_c"].view(np.float32).astype(np.float64)
    d = z[key + "_d"].view(np.float32).astype(np.float64)
    return a, b, c, d, name, fout


@pytest.mark.parametrize("key, preset", GPU_SETS)
def test_presets_reproduce_gpu_outputs_bit_for_bit(key, preset):
    a, b, c, d, fin, fout = gpu_vectors(key)
    model = arith.get_accumulation(preset)
    # binary16-output modes take C rounded to fp16 on the GPU (the vectors store it in fp32)
    c_acc = np.asarray(fpsim.round_to(c, model.acc))
    got = arith.matmul(a[:, None, :], b[:, :, None], fin, accumulation=model,
                       c=c_acc[:, None, None], out_fmt=fout)  # fmt: skip
    got = np.asarray(got, np.float64).reshape(-1)
    assert same_bits(got, d), np.flatnonzero(got != d)[:5]
    # and the IEEE baseline does *not* reproduce them: the models matter
    exact = arith.matmul(a[:, None, :], b[:, :, None], fin, accumulation="exact_fp32",
                         c=np.asarray(fpsim.round_to(c, "fp32"))[:, None, None], out_fmt=fout)
    assert not same_bits(np.asarray(exact).reshape(-1), d)


def test_b200_fp8_outputs_are_not_the_b200tc_model():
    # Khattak & Mikaitis's B200TC.m models FP8 as 32 products, neab = 2 (25 bits), truncation;
    # the B200 FP8 outputs shipped beside it (mma.sync m16n8k32) are round-to-nearest of the
    # block sum instead (b200_fp8_mma_sync): the two presets differ on most of them.
    for key in ("B200_E4M3_fp32", "B200_E5M2_fp32"):
        a, b, c, d, fin, _ = gpu_vectors(key)
        got = arith.matmul(a[:, None, :], b[:, :, None], fin, accumulation="b200_fp8",
                           c=c[:, None, None], out_fmt="fp32")  # fmt: skip
        agree = np.mean(np.asarray(got).reshape(-1) == d)
        assert 0.4 < agree < 0.9, agree


# ---- 2. the papers' probes ---------------------------------------------------------------------
def probe(model, a, b, c, out="fp32"):
    """One tensor-core dot product D = a . b + c (inputs fp16, as the probe programs)."""
    m = arith.get_accumulation(model)
    c = float(fpsim.round_to(c, m.acc))
    return arith.dot(a, b, "fp16", accumulation=model, c=c, out_fmt=out)


TWO = 2.0
ONE_BELOW = 1 - 2.0**-24  # the largest fp32 below 1
B16_BELOW = 1 - 2.0**-11  # the largest fp16 below 1


@pytest.mark.parametrize("gpu", ["v100", "a100"])
def test_fasi_et_al_probes(gpu):
    """tc_test_numerics-V100.cu / -T4-A100-binary16.cu: each probe's inputs and the result the
    program checks for (the "[PASS]" condition), on fp16 inputs, fp32 and fp16 modes."""
    m32, m16 = f"{gpu}_fp16", f"{gpu}_fp16_acc16"
    p = 2.0**-24  # the smallest fp16 subnormal
    # A. subnormals: fp16 subnormal inputs, fp32 subnormal accumulators, fp16 subnormal outputs
    assert probe(m16, [p], [4.0], 0.0, "fp16") == 2.0**-22
    assert probe(m32, [p], [4.0], 0.0) == 2.0**-22
    assert probe(m32, [0.0], [0.0], 2.0**-149) == 2.0**-149
    assert probe(m16, [2.0**-14], [0.5], 0.0, "fp16") != 0
    assert probe(m16, [2.0**-14], [1.0], -(2.0**-15), "fp16") != 0
    # B. products exact; accumulation in binary32
    assert probe(m32, [B16_BELOW], [B16_BELOW], 0.0) == 1 - 2.0**-10 + 2.0**-22
    assert probe(m32, [B16_BELOW] * 4, [B16_BELOW] * 4, 0.0) == 4 * (1 - 2.0**-10 + 2.0**-22)
    assert probe(m16, [B16_BELOW, B16_BELOW], [B16_BELOW, 2.0**-11], 0.0, "fp16") == (
        1 - 2.0**-10 + 2.0**-11
    )
    half = 1.0 if gpu == "v100" else 0.5  # the A100 program scales these by 0.5
    assert probe(m32, [half] * 4, [p] * 4, 1.0) == 1.0
    for j in range(4):  # "sum starts from the largest element": c = p, one product is 1
        a = [half] * 4
        b = [p] * 4
        a[j] = b[j] = 1.0
        assert probe(m32, a, b, p) == 1.0
    # C. rounding: truncation in binary32 mode (both signs), nearest in binary16 mode
    tail = 2.0**-23 + 2.0**-24  # 0.75 of fp32's spacing at 2
    assert probe(m32, [1.0] * 4, [TWO, tail, 0.0, 0.0], 0.0) == 2.0
    assert probe(m32, [1.0] * 4, [-TWO, -tail, 0.0, 0.0], 0.0) == -2.0
    assert probe(m16, [p, p], [0.5, 0.25], 0.0, "fp16") == p
    # D1. no guard bit (V100): 1 - (1 - 2^-24) loses c's last bit when c is aligned to 2^0;
    # the A100 keeps one extra bit
    assert probe(m32, [1.0], [1.0], -ONE_BELOW) == (2.0**-23 if gpu == "v100" else 2.0**-24)
    # D2. no normalisation in the sum: four 2^-24 products and c = 1 - 2^-24
    assert probe(m32, [1.0] * 4, [p] * 4, ONE_BELOW) == 1 + 2.0**-23
    # D3. subtraction: (V100) c's and the product's last bits are cut before they cancel
    d3 = probe(m32, [1.0, 1.0], [1.0, -p], -1 + 2.0**-24)
    assert d3 == (2.0**-23 if gpu == "v100" else 0.0)
    # D4. carry-out bits: four terms and c add up beyond 4 without losing a bit
    for j in range(4):
        b = [1.0] * 4
        b[j] = 2.0**-23
        assert probe(m32, [1.0] * 4, b, 1 + 2.0**-22 + 2.0**-23) == 4 + 2.0**-21
    assert probe(m32, [1.0] * 4, [1.0, 1.5, 1.75, 1.875], 1.875) == 8.0
    assert probe(m32, [1.0] * 4, [1.0] * 4, 1 + 2.0**-22 + 2.0**-23) == 5.0
    assert probe(m32, [1.0] * 4, [-1.0] * 4, -1 - 2.0**-22 - 2.0**-23) == -5.0
    # D5. the dot product is not monotonic: a larger c gives a smaller result
    if gpu == "v100":
        a, b = [1.0] * 4, [p] * 4
    else:
        a, b = [0.5] * 4, [p, p, p, 2.0**-23 + p]
    assert probe(m32, a, b, 1.0) < probe(m32, a, b, ONE_BELOW)


def test_the_probes_separate_the_models_from_ieee():
    # the same inputs with IEEE fp32 accumulation (one rounding to nearest per product): the
    # truncation probe rounds up, the guard-bit probe is exact, the sum is monotonic (each 2^-24
    # is half of fp32's spacing at 1: a tie, kept at 1 by ties-to-even, whatever c was)
    tail = 2.0**-23 + 2.0**-24
    assert probe("exact_fp32", [1.0] * 4, [TWO, tail, 0.0, 0.0], 0.0) == 2.0 + 2.0**-22
    assert probe("exact_fp32", [1.0], [1.0], -ONE_BELOW) == 2.0**-24
    p = 2.0**-24
    assert probe("exact_fp32", [1.0] * 4, [p] * 4, 1.0) == 1.0
    assert probe("exact_fp32", [1.0] * 4, [p] * 4, ONE_BELOW) == 1.0


def test_reference_notes_test_vectors():
    # scaled_formats.md section 5: the carry test (4 + 2^-21) and the guard-bit test (2^-23,
    # marked INFERENCE there: the V100 program above confirms it; the A100 gives 2^-24)
    assert probe("v100_fp16", [1.0] * 4, [1.0, 1.0, 1.0, 2.0**-23], 1 + 2.0**-22 + 2.0**-23) == (
        4 + 2.0**-21
    )
    assert probe("v100_fp16", [1.0], [1.0], -ONE_BELOW) == 2.0**-23


def test_h100_fp8_keeps_13_bits_and_promotion_restores_fp32():
    # DeepSeek-V3 3.5.2: 32 products aligned to the largest exponent, ~14 bits kept. With 1 and
    # 31 products of 2^-14 (each below 2^-13 of the largest), the H100 model drops them all
    x = [1.0] + [2.0**-7] * 31
    y = [1.0] + [2.0**-7] * 31
    assert arith.dot(x, y, "fp8_e4m3", accumulation="h100_fp8", out_fmt="fp32") == 1.0
    assert arith.dot(x, y, "fp8_e4m3", accumulation="b200_fp8", out_fmt="fp32") == 1 + 31 * 2.0**-14
    # the accumulator itself has 13 fraction bits: 1 + 2^-13 survives, 1 + 2^-14 does not
    m = arith.get_accumulation("h100_fp8")
    assert m.acc.man_bits == 13 and m.acc.exp_bits == 8
    assert arith.dot([1.0, 2.0**-7], [1.0, 2.0**-6], "fp8_e4m3", accumulation=m, out_fmt="fp32") == (
        1 + 2.0**-13
    )
    # promotion every 128 products: after a leading 1, 255 products of 2^-14 are cut off block
    # after block in the 13-bit accumulator; with promotion the second group of 128 starts from
    # 0 in the tensor core, sums exactly to 2^-7 and enters the fp32 registers whole
    x = [1.0] + [2.0**-7] * 255
    got = [arith.dot(x, x, "fp8_e4m3", accumulation=name, out_fmt="fp32")
           for name in ("h100_fp8", "h100_fp8_promote128", "exact_fp32")]  # fmt: skip
    assert got == [1.0, 1 + 2.0**-7, 1 + 255 * 2.0**-14]


# ---- 3. the definition: exact rational reference ---------------------------------------------
IN_FORMATS = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "tf32"]
ACC_FORMATS = ["fp32", "fp16", "bf16", "e8m13", "tf32", "fp8_e5m2"]


def _acc(name):
    return arith.E8M13 if name == "e8m13" else fpsim.get_format(name)


@st.composite
def models(draw):
    block = draw(st.integers(1, 40))
    exact = block == 1 and draw(st.booleans()) and draw(st.booleans())
    align = None if exact else draw(st.integers(0, 40))
    return BlockFMA(
        block=block,
        align_bits=align,
        align_rounding=draw(st.sampled_from(["truncate", "nearest_even"])),
        rounding=draw(st.sampled_from(ALL_MODES)),
        acc=_acc(draw(st.sampled_from(ACC_FORMATS))),
        normalize_products=draw(st.booleans()),
        products=draw(st.sampled_from(["exact", "exact", "rounded"])),
        min_exponent=draw(st.one_of(st.none(), st.integers(-140, 6))),
        input_subnormals=draw(st.booleans()),
        acc_subnormals=draw(st.booleans()),
        promote_every=draw(st.one_of(st.none(), st.integers(1, 4).map(lambda k: k * block))),
    )


def general_path(P):
    """The same parameters with every fast form switched off."""
    P = list(P)
    P[reduce.I_FAST_ADD] = P[reduce.I_FAST_OUT] = P[reduce.I_BFAST] = 0
    return tuple(P)


def run_kernel(A, B, C, P, python=False):
    out = np.empty((A.shape[0], A.shape[1], B.shape[2]))
    if not python:
        arith_cpu.matmul(A, B, out, P, C)
        return out
    W = np.empty((reduce.NW, B.shape[2]))
    ST = np.empty((reduce.STACK, B.shape[2]))
    log = np.empty((1, reduce.NLOG))
    Cx = np.zeros((1, 1, 1)) if C is None else C
    for i in range(A.shape[1]):
        reduce.reduce_row(A, B, Cx, out, 0, i, 0, B.shape[2], W, ST, log, P)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models(), st.sampled_from(IN_FORMATS), st.integers(0, 70), st.integers(0, 2**32),
       st.sampled_from(ALL_MODES), st.sampled_from(["fp64", "fp32", "fp16"]), st.booleans(),
       st.booleans())  # fmt: skip
@example(arith.get_accumulation("h100_fp8").replace(inputs=None), "fp8_e4m3", 64, 1,
         "nearest_even", "fp32", False, True)  # fmt: skip
@example(arith.get_accumulation("v100_fp16"), "fp16", 9, 2, "toward_zero", "fp32", True, True)
def test_block_fma_equals_the_exact_reference(model, fin, K, seed, mode, out, spread, with_c):
    rng = np.random.default_rng(seed)
    n, m = 2, 3
    make = values if spread else small_values
    A = make(fin, n * K, rng).reshape(1, n, K)
    B = make(fin, K * m, rng).reshape(1, K, m)
    C = None
    if with_c:
        C = np.asarray(fpsim.round_to(make(fin, n * m, rng), model.acc)).reshape(1, n, m)
    got = arith.matmul(A, B, fin, accumulation=model, c=C, out_fmt=out, rounding=mode, seed=seed)
    got = np.asarray(got, np.float64).reshape(1, n, m)
    for i in range(n):
        for j in range(m):
            o = i * m + j

            def rand(r, o=o):
                return scalar.random62(seed, o * (2 * K + 1) + r)

            c0 = 0.0 if C is None else C[0, i, j]
            want = block_fma_reference(A[0, i], B[0, :, j], fin, model, c0, out, mode, rand)
            assert same_bits(got[0, i, j], want), (i, j, got[0, i, j], want)
    # the CPU's general path, and the same lines uncompiled, agree bit for bit
    f, a_fmt, out_f = fpsim.get_format(fin), model.acc, fpsim.get_format(out)
    P = _params(f, a_fmt, out_f, fpsim.ROUNDING_MODES[mode], 1, 0, seed, 0, 0, False, model,
                False, C is not None)  # fmt: skip
    Cc = None if C is None else np.ascontiguousarray(C)
    assert same_bits(run_kernel(A, B, Cc, general_path(P)), got)
    if K <= 24:
        assert same_bits(run_kernel(A, B, Cc, P, python=True), got)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models(), st.sampled_from(IN_FORMATS), st.integers(0, 70), st.integers(0, 2**32),
       st.booleans())  # fmt: skip
def test_block_fma_sums_equal_the_exact_reference(model, fin, K, seed, spread):
    rng = np.random.default_rng(seed)
    x = (values if spread else small_values)(fin, K, rng)
    got = arith.sum(x, fin, accumulation=model, out_fmt="fp64", seed=seed)

    def rand(r):
        return scalar.random62(seed, r)

    want = block_fma_reference(x, None, fin, model, 0.0, "fp64", "nearest_even", rand)
    assert same_bits(got, want), (got, want)


def test_signed_zeros_and_specials():
    m = arith.get_accumulation("h100_fp16")
    dot = lambda a, b, **kw: arith.dot(a, b, "fp16", accumulation=m, out_fmt="fp32", **kw)  # noqa
    z = dot([-0.0, 1.0], [1.0, -0.0])  # products -0, -0 onto the accumulator's +0: +0
    assert z == 0 and not math.copysign(1, z) < 0
    assert math.copysign(1, dot([-0.0], [1.0], c=-0.0)) < 0  # every term -0
    assert math.copysign(1, dot([1.0], [-1.0], c=1.0)) > 0  # exact cancellation: +0
    down = m.replace(rounding="down")
    assert math.copysign(1, arith.dot([1.0], [-1.0], "fp16", accumulation=down, c=1.0,
                                      out_fmt="fp32")) < 0  # fmt: skip
    assert math.isnan(dot([np.inf, 1.0], [1.0, 0.0], c=-np.inf))
    assert math.isnan(dot([np.inf], [0.0]))
    assert dot([np.inf, 65504.0], [1.0, -65504.0]) == np.inf
    assert math.isnan(dot([1.0, np.nan], [1.0, 1.0]))
    # overflow of the accumulator is inf even when truncating (fp16 accumulator: 65504 max)
    m16 = arith.get_accumulation("h100_fp16_acc16").replace(rounding="toward_zero")
    assert arith.dot([256.0, 256.0], [256.0, 1.0], "fp16", accumulation=m16) == np.inf


def test_model_arguments_are_checked():
    with pytest.raises(ValueError, match="either accumulation"):
        arith.matmul([[1.0]], [[1.0]], "fp16", acc="fp32", accumulation="v100_fp16")
    with pytest.raises(ValueError, match="describes fp16 inputs"):
        arith.dot([1.0], [1.0], "bf16", accumulation="v100_fp16")
    with pytest.raises(ValueError, match="unknown accumulation model"):
        arith.dot([1.0], [1.0], "fp16", accumulation="v200")
    with pytest.raises(ValueError, match="needs block=1"):
        BlockFMA(block=4, align_bits=None)
    with pytest.raises(ValueError, match="multiple of block"):
        BlockFMA(block=4, align_bits=20, promote_every=6)
    with pytest.raises(ValueError, match="53 bits"):
        BlockFMA(block=64, align_bits=48)
    with pytest.raises(ValueError, match="c= .* accumulation"):
        arith.dot([1.0], [1.0], "fp16", c=1.0)
    with pytest.raises(ValueError, match="not fp32 values"):
        arith.dot([1.0], [1.0], "fp16", accumulation="v100_fp16", c=0.1)
    with pytest.raises(ValueError, match="either accumulation"):
        arith.matmul([[1.0]], [[1.0]], "fp16", accumulation="v100_fp16", order="blas")


def test_matmul_shapes_with_a_model():
    rng = np.random.default_rng(3)
    a = small_values("fp16", 2 * 3 * 20, rng).reshape(2, 3, 20)
    b = small_values("fp16", 20 * 4, rng).reshape(20, 4)
    got = arith.matmul(a, b, "fp16", accumulation="h100_fp16", out_fmt="fp32")
    assert got.shape == (2, 3, 4) and got.dtype == np.float64
    for bi in range(2):
        for i in range(3):
            for j in range(4):
                d = arith.dot(a[bi, i], b[:, j], "fp16", accumulation="h100_fp16", out_fmt="fp32")
                assert got[bi, i, j] == d
    empty = arith.matmul(np.zeros((2, 0)), np.zeros((0, 3)), "fp16", accumulation="h100_fp16")
    assert empty.shape == (2, 3) and (empty == 0).all() and not np.signbit(empty).any()
    assert arith.sum([], "fp16", accumulation="v100_fp16") == 0.0


# ---- 4. the engine: a whole training step under a hardware model --------------------------------
def test_autocast_training_step_uses_the_model_forward_and_backward():
    """Under fpsim.autocast (bf16) and matmul_accumulation("h100_bf16"), linear's forward and
    both backward products are the model's (oracle: fpsim.arith.matmul with the model, itself
    checked against the exact reference and the GPU data above)."""
    rng = np.random.default_rng(11)
    xs = rng.standard_normal((8, 64)).astype(np.float32)
    ws = rng.standard_normal((16, 64)).astype(np.float32) * 0.1
    bs = rng.standard_normal(16).astype(np.float32)

    x = fpsim.tensor(xs)
    lin = fpsim.nn.Linear(64, 16)
    lin.weight.data = fpsim.tensor(ws).data
    lin.bias.data = fpsim.tensor(bs).data
    with fpsim.matmul_accumulation("h100_bf16"), fpsim.autocast("cpu", dtype="bf16"):
        y = lin(x)
        loss = (y.float() * y.float()).sum()
    loss.backward()
    assert y.format.name == "bf16"
    xb = np.asarray(fpsim.round_to(xs, "bf16"))
    wb = np.asarray(fpsim.round_to(ws, "bf16"))
    acc = arith.matmul(xb, wb.T, "bf16", accumulation="h100_bf16", out_fmt="fp32")
    # autocast casts the bias to bf16 too; it is added to the fp32 accumulator (one fp32
    # rounding), and the sum rounded once to bf16
    bb = np.asarray(fpsim.round_to(bs, "bf16"), np.float32)
    want = np.asarray(fpsim.round_to(acc.astype(np.float32) + bb, "bf16"))
    assert same_bits(y.detach().numpy(), want)
    # backward: grad_W = g.T @ x with g = dloss/dy in bf16, through the same model
    g = np.asarray(fpsim.round_to(2 * y.detach().numpy().astype(np.float64), "bf16"))
    gw = arith.matmul(g.T, xb, "bf16", accumulation="h100_bf16")
    got_gw = lin.weight.grad.numpy()
    assert same_bits(got_gw, np.asarray(fpsim.round_to(gw, "fp32")))


def test_a_model_changes_what_the_engine_computes():
    # exactly 1 + 2^-8 + 3 * 2^-25: fp32 rounds the last term up to 2^-23, so the sum lies above
    # bf16's midpoint 1 + 2^-8 and rounds to 1 + 2^-7; the H100 truncates it away, leaving the
    # midpoint itself, which ties to even: 1
    x = fpsim.tensor([[1.0, 2.0**-8, 3 * 2.0**-13]], format="bf16")
    w = fpsim.tensor([[1.0], [1.0], [2.0**-12]], format="bf16")
    assert (x @ w).item() == 1 + 2.0**-7
    with fpsim.matmul_accumulation("h100_bf16"):
        assert (x @ w).item() == 1.0


def test_model_applies_only_to_its_input_formats():
    from fpsim.autograd.precision import resolve_accumulator

    m = arith.get_accumulation("h100_fp8")
    r = resolve_accumulator(m, fpsim.get_format("fp8_e4m3"))
    assert r.model is m and r.input_format.name == "fp8_e4m3" and r == arith.E8M13
    plain = resolve_accumulator(m, fpsim.get_format("fp32"))
    assert plain == fpsim.fp32 and not hasattr(plain, "model")
    assert resolve_accumulator("h100_fp8_promote128", fpsim.get_format("fp8_e5m2")) == fpsim.fp32
    with fpsim.matmul_accumulation("h100_fp16"):
        a = fpsim.tensor(np.ones((2, 3), np.float32))
        assert (a @ fpsim.tensor(np.ones((3, 2), np.float32))).numpy().tolist() == [[3.0] * 2] * 2
    with pytest.raises(ValueError, match="unknown format|not a format|unknown"):
        with fpsim.matmul_accumulation("h900_fp4"):
            pass


def test_linear_with_bias_adds_it_to_the_models_accumulator():
    # h100_fp8 keeps its sums in e8m13: linear adds the bias there (one rounding into e8m13),
    # then rounds once to the layer's format; oracle: arith.matmul with the model
    rng = np.random.default_rng(0)
    lin = fpsim.nn.Linear(64, 4, format="fp8_e4m3", seed=0)
    x = fpsim.tensor(rng.uniform(0, 1, (2, 64)), format="fp8_e4m3")
    with fpsim.matmul_accumulation("h100_fp8"):
        y = lin(x)
    w = lin.weight.detach().numpy().astype(np.float64)
    b = lin.bias.detach().numpy().astype(np.float64)
    acc = arith.matmul(x.numpy().astype(np.float64), w.T, "fp8_e4m3", accumulation="h100_fp8",
                       out_fmt="e8m13")  # fmt: skip
    want = fpsim.round_to(fpsim.round_to(acc + b, "e8m13"), "fp8_e4m3")
    assert same_bits(y.detach().numpy(), want)
