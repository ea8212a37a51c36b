"""fpsim.arith on the CUDA back end (fpsim.kernels.arith_cuda), in numba's CUDA simulator.

Run in its own process (``python -m pytest tests/cudasim``; conftest.py turns the simulator on).
The simulator runs every GPU thread as a Python thread, so sizes are small. Oracles: exact
rational rounding (tests/arith_oracle.py) and the CPU kernels, which must agree bit for bit --
stochastic rounding included, for the same seed (same documented random-number indices).
"""

import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import fpsim
from fpsim import arith

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/ for the shared oracles
from arith_oracle import op_oracle, reduce_reference  # noqa: E402

pytestmark = pytest.mark.cudasim

SEED = 4242
MODES = ["nearest_even", "toward_zero", "down", "stochastic"]


def fmt_values(fmt, n, seed, lo=-6, hi=6):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp2(rng.integers(lo, hi, n))
    return np.asarray(fpsim.round_to(x, fmt))


def host(d):
    return d.copy_to_host() if hasattr(d, "copy_to_host") else np.asarray(d)


def same_bits(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return bool(((a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))).all())


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "sqrt", "fma"])
def test_elementwise_on_device_equals_cpu_and_oracle(fmt, op):
    n = 48
    nargs = {"sqrt": 1, "fma": 3}.get(op, 2)
    xs = [fmt_values(fmt, n, seed) for seed in range(nargs)]
    if op == "sqrt":
        xs[0] = np.abs(xs[0])
    xs[0][:3] = [0.0, -0.0, np.nan]
    fn = getattr(arith, op)
    for dtype in (np.float32, np.float64):
        host_args = [x.astype(dtype) for x in xs]
        for mode in MODES:
            dev = fn(*[cuda.to_device(x) for x in host_args], fmt, rounding=mode, seed=SEED)
            assert hasattr(dev, "copy_to_host"), "did not run on the (simulated) device"
            got = host(dev)
            assert got.dtype == dtype and got.shape == (n,)
            want = fn(*host_args, fmt, rounding=mode, seed=SEED)
            assert same_bits(got, want), (op, fmt, mode, dtype)
            if mode != "stochastic":
                exact = [op_oracle(op, [x[i] for x in xs], fmt, mode) for i in range(n)]
                assert same_bits(got, exact), (op, fmt, mode, "oracle")


def test_scalar_operands_broadcast_and_the_weight_update():
    w = cuda.to_device(np.ones(3, np.float32))
    upd = cuda.to_device(np.array([2.0**-12, 2.0**-11, 3 * 2.0**-12], np.float32))
    assert host(arith.add(w, upd, "fp16")).tolist() == [1.0, 1.0, 1 + 2.0**-10]
    assert host(arith.add(w, 2.0**-10, "fp16")).tolist() == [1 + 2.0**-10] * 3
    assert host(arith.mul(0.5, w, "bf16")).tolist() == [0.5] * 3


def test_device_input_checks_and_errors():
    bad = cuda.to_device(np.array([1.0, 0.1]))
    with pytest.raises(ValueError, match="not fp16 values"):
        arith.add(bad, bad, "fp16")
    assert host(arith.add(bad, bad, "fp16", round_inputs=True))[1] == fpsim.round_to(0.2, "fp16")
    with pytest.raises(ValueError, match="one shape"):
        arith.add(cuda.to_device(np.ones(3)), cuda.to_device(np.ones(4)), "fp16")
    with pytest.raises(ValueError, match="host"):
        arith.matmul(cuda.to_device(np.ones((2, 2))), cuda.to_device(np.ones((2, 2))), "fp16",
                     order="blas")  # fmt: skip


def test_neg_abs_on_device():
    x = cuda.to_device(np.array([1.5, -0.0, -2.0], np.float32))
    assert host(arith.neg(x, "fp8_e4m3")).tolist() == [-1.5, 0.0, 2.0]
    assert np.signbit(host(arith.neg(x, "fp8_e4m3"))[1]) == False  # noqa: E712
    assert host(arith.abs(x, "fp8_e4m3")).tolist() == [1.5, 0.0, 2.0]
    sub = cuda.to_device(np.array([2.0**-20, -1.0], np.float32))
    r = host(arith.neg(sub, "fp16", subnormals=False))
    assert r.tolist() == [0.0, 1.0] and np.signbit(r[0])


@pytest.mark.parametrize("order", ["sequential", "pairwise"])
def test_sum_on_device(order):
    ones = cuda.to_device(np.ones(256, np.float32))
    assert arith.sum(ones, "fp16", acc="bf16", order=order) == (256.0)
    x = fmt_values("fp16", 4 * 19, 3, -2, 4).reshape(4, 19)
    for mode in MODES:
        for acc in ("fp16", "fp8_e5m2"):
            got = arith.sum(cuda.to_device(x), "fp16", acc=acc, order=order, axis=-1,
                            rounding=mode, seed=SEED)  # fmt: skip
            want = arith.sum(x, "fp16", acc=acc, order=order, axis=-1, rounding=mode, seed=SEED)
            assert same_bits(host(got), want), (mode, acc)
            tot = arith.sum(cuda.to_device(x), "fp16", acc=acc, order=order, rounding=mode,
                            seed=SEED)  # fmt: skip
            assert tot == arith.sum(x, "fp16", acc=acc, order=order, rounding=mode, seed=SEED)
    with pytest.raises(NotImplementedError):
        arith.sum(cuda.to_device(x), "fp16", axis=0)


@pytest.mark.parametrize("products", ["exact", "rounded"])
def test_matmul_and_dot_on_device(products):
    a = fmt_values("bf16", 5 * 11, 5, -3, 3).reshape(5, 11)
    b = fmt_values("bf16", 11 * 3, 6, -3, 3).reshape(11, 3)
    for order in ("sequential", "pairwise"):
        for mode in MODES:
            kw = dict(acc="fp8_e5m2", order=order, products=products, rounding=mode, seed=SEED,
                      out_fmt="fp32")  # fmt: skip
            got = host(arith.matmul(cuda.to_device(a), cuda.to_device(b), "bf16", **kw))
            assert same_bits(got, arith.matmul(a, b, "bf16", **kw)), (order, mode)
    a3 = np.stack([a, a[::-1]])
    b3 = np.stack([b, b * 2])
    got = host(arith.matmul(cuda.to_device(a3), cuda.to_device(b3), "bf16", acc="bf16",
                            order="pairwise", products=products))  # fmt: skip
    want = arith.matmul(a3, b3, "bf16", acc="bf16", order="pairwise", products=products)
    assert got.shape == (2, 5, 3) and same_bits(got, want)
    v = np.ones(300, np.float32)
    d = arith.dot(cuda.to_device(v), cuda.to_device(v), "fp16", acc="bf16", products=products)
    assert d == 256.0
    mv = host(arith.matmul(cuda.to_device(a), cuda.to_device(b[:, 0].copy()), "bf16",
                           order="sequential"))  # fmt: skip
    assert same_bits(mv, arith.matmul(a, b[:, 0], "bf16", order="sequential"))


# ---- issue 11: edges of float64 (the same oracles as tests/test_arith_edges.py) ------------------
F64_MAX = 1.7976931348623157e308


@pytest.mark.parametrize("order", ["sequential", "pairwise"])
def test_device_sum_whose_float64_partial_sum_overflows(order):
    # exact sums beyond float64 overflow the accumulator in every mode: toward zero gives max
    acc = fpsim.Format(11, 20, bias=1024)  # max = (2 - 2^-20) 2^1022
    x = np.array([F64_MAX, F64_MAX, -(2.0**1023)])
    for mode in ("nearest_even", "toward_zero", "down", "up"):
        got = arith.sum(cuda.to_device(x), "fp64", acc=acc, order=order, rounding=mode,
                        out_fmt=acc)  # fmt: skip
        want = reduce_reference(list(x), acc, acc, order, mode)
        assert same_bits(got, want), (mode, got, want)
    pos = cuda.to_device(np.array([F64_MAX, F64_MAX, 2.0**1023]))
    for mode in ("nearest_even", "up"):  # saturating: every partial sum is beyond max
        assert arith.sum(pos, "fp64", acc=acc, order=order, rounding=mode, saturate=True,
                         out_fmt=acc) == acc.max  # fmt: skip


def test_device_matmul_products_whose_float64_sum_overflows():
    f = fpsim.Format(10, 5)  # products up to 63^2 2^1012 ~ 2^1023.96: two overflow float64
    mx = f.max
    a = np.array([[mx, mx, mx], [mx, -mx, mx]])
    b = np.array([[mx], [mx], [-mx]])
    for order in ("sequential", "pairwise"):
        for mode in ("toward_zero", "nearest_even", "down"):
            got = host(arith.matmul(cuda.to_device(a), cuda.to_device(b), f, acc="fp32",
                                    order=order, rounding=mode, out_fmt="fp32"))  # fmt: skip
            for i in range(2):
                terms = [Fraction(a[i, k]) * Fraction(b[k, 0]) for k in range(3)]
                want = reduce_reference(terms, "fp32", "fp32", order, mode)
                assert same_bits(got[i, 0], want), (order, mode, i)


def test_device_operands_below_float64_normal_range():
    f = fpsim.Format(11, 10, bias=1030)  # smallest subnormal 2^-1039, a float64 subnormal
    ms = 2.0**-1039
    x = np.array([ms, 3 * ms, 1023 * ms, 2.0**-1029, 1.0, -ms, f.max])
    y = np.array([ms, ms, ms, -(2.0**-1030), 1.0, 5 * ms, -f.max])
    for mode in MODES:
        got = host(arith.add(cuda.to_device(x), cuda.to_device(y), f, rounding=mode, seed=SEED))
        want = arith.add(x, y, f, rounding=mode, seed=SEED)
        assert same_bits(got, want), mode
        if mode != "stochastic":
            want = [op_oracle("add", (u, v), f, mode) for u, v in zip(x, y, strict=True)]
            assert same_bits(got, want), mode
    with pytest.raises(ValueError, match="not e11m10_b1030 values"):
        arith.add(cuda.to_device(np.array([ms / 2])), 0.0, f)


def test_device_empty_reductions_are_numpy_shaped_and_positive_zero():
    shapes = [((2, 0), (0, 3)), ((0, 4), (4, 3)), ((2, 4), (4, 0)), ((0,), (0, 3)),
              ((2, 0), (0,)), ((2, 3, 0), (2, 0, 4))]  # fmt: skip
    for sa, sb in shapes:
        a, b = np.zeros(sa, np.float32), np.zeros(sb, np.float32)
        want = np.matmul(a, b)
        for order in ("sequential", "pairwise"):
            for mode in ("nearest_even", "down"):
                got = host(arith.matmul(cuda.to_device(a), cuda.to_device(b), "fp16", acc="fp16",
                                        order=order, rounding=mode))  # fmt: skip
                assert got.shape == want.shape and got.dtype == np.float32, (sa, sb)
                assert (got == 0).all() and not np.signbit(got).any()
    for order in ("sequential", "pairwise"):
        e = cuda.to_device(np.zeros(0, np.float32))
        d = arith.dot(e, e, "fp16", order=order, rounding="down")
        s = arith.sum(e, "fp16", order=order, rounding="down")
        assert d == 0.0 and s == 0.0 and math.copysign(1, d) == math.copysign(1, s) == 1
        rows = host(arith.sum(cuda.to_device(np.zeros((3, 0))), "fp16", axis=-1, order=order,
                              rounding="down"))  # fmt: skip
        assert rows.shape == (3,) and (rows == 0).all() and not np.signbit(rows).any()
        none = host(arith.sum(cuda.to_device(np.zeros((0, 3))), "fp16", axis=-1, order=order))
        assert none.shape == (0,)


def test_device_stochastic_sums_with_spacing_below_float64_normal_range():
    # Format(5, 23, bias=1032, fn): spacing 2^-1024 at max, a float64 subnormal; max + min_sub
    # and max + min_normal + min_sub lie 2^-30 and 2^-7 + 2^-30 of a quantum past max, sums that
    # float64 cannot hold: stochastic rounding must overflow (NaN) with that probability
    f = fpsim.Format(5, 23, bias=1032, style="fn")
    mx, ms, mn = f.max, f.smallest_subnormal, f.min_normal
    x = np.array([mx, mx, -mx, mx, mx / 2, 3 * ms, mx, -mx] * 4)
    y = np.array([ms, mn + ms, -(mn + ms), -ms, mn + ms, mx, 3 * ms, mx] * 4)
    from fpsim.kernels import scalar

    for mode in MODES:
        got = host(arith.add(cuda.to_device(x), cuda.to_device(y), f, rounding=mode, seed=SEED))
        assert same_bits(got, arith.add(x, y, f, rounding=mode, seed=SEED)), mode
        r = [scalar.random62(SEED, i) if mode == "stochastic" else 0 for i in range(x.size)]
        want = [op_oracle("add", (u, v), f, mode, rand62=r[i])
                for i, (u, v) in enumerate(zip(x, y, strict=True))]  # fmt: skip
        assert same_bits(got, want), mode
    # accumulation of fp64 terms in that format, rows reduced on the device
    rows = np.array([[mx, 2.0**-1031 + 2.0**-1074], [mx, 1.0], [-mx, -(2.0**-1074)],
                     [2.0**-1074, mx], [1.0, mx / 3], [mx / 3, mx]] * 3)  # fmt: skip
    for order in ("sequential", "pairwise"):
        for mode in MODES:
            got = arith.sum(cuda.to_device(rows), "fp64", acc=f, order=order, axis=-1,
                            rounding=mode, seed=SEED, out_fmt=f)  # fmt: skip
            want = arith.sum(rows, "fp64", acc=f, order=order, axis=-1, rounding=mode, seed=SEED,
                             out_fmt=f)  # fmt: skip
            assert same_bits(host(got), want), (order, mode)
            for o, row in enumerate(rows):
                rand = lambda r, o=o: scalar.random62(SEED, o * 5 + r)  # noqa: E731
                assert same_bits(want[o], reduce_reference(list(row), f, f, order, mode,
                                                           rand=rand)), (order, mode, o)  # fmt: skip


# ---- hardware accumulation models (block FMA), on the device ------------------------------------
def test_block_fma_models_on_device_equal_cpu_and_gpu_data():
    """The CUDA kernel runs fpsim.kernels.reduce's block FMA (device twins): equal to the CPU
    bit for bit, and to the V100/H100 outputs of tests/data/tensorcore_vectors.npz."""
    import ml_dtypes

    z = np.load(Path(__file__).parent.parent / "data" / "tensorcore_vectors.npz")
    for key, preset, fmt, dtype in [("V100_fp16_fp32", "v100_fp16", "fp16", np.float16),
                                    ("H100_E4M3_fp32", "h100_fp8", "fp8_e4m3",
                                     ml_dtypes.float8_e4m3fn)]:  # fmt: skip
        a = z[key + "_a"][:6].view(dtype).astype(np.float64)
        b = z[key + "_b"][:6].view(dtype).astype(np.float64)
        d = z[key + "_d"][:6].view(np.float32).astype(np.float64)
        c = z[key + "_c"][:6].view(np.float32).astype(np.float64)
        # the device takes no C: compare the kernels on D = A B, and the data where C = 0
        got = host(arith.matmul(cuda.to_device(a[:, None, :]), cuda.to_device(b[:, :, None]),
                                fmt, accumulation=preset, out_fmt="fp32"))  # fmt: skip
        cpu = arith.matmul(a[:, None, :], b[:, :, None], fmt, accumulation=preset, out_fmt="fp32")
        assert same_bits(got, cpu), key
        if not c.any():
            assert same_bits(got.reshape(-1), d), key


@pytest.mark.parametrize("rounding", ["toward_zero", "nearest_even", "stochastic"])
def test_block_fma_custom_models_on_device(rounding):
    from fpsim.arith import BlockFMA

    a = fmt_values("fp16", 3 * 37, 7, -8, 6).reshape(3, 37)
    b = fmt_values("fp16", 37 * 4, 8, -8, 6).reshape(37, 4)
    a[0, :2] = [0.0, -0.0]
    b[3, 1] = np.inf
    for model in [
        BlockFMA(block=5, align_bits=9, rounding=rounding, acc="bf16", promote_every=10),
        BlockFMA(block=1, align_bits=None, rounding=rounding, acc="fp16"),
        BlockFMA(block=8, align_bits=14, align_rounding="nearest_even", rounding=rounding,
                 acc=arith.E8M13, normalize_products=True, input_subnormals=False),
    ]:  # fmt: skip
        got = host(arith.matmul(cuda.to_device(a), cuda.to_device(b), "fp16", accumulation=model,
                                out_fmt="fp32", seed=SEED))  # fmt: skip
        want = arith.matmul(a, b, "fp16", accumulation=model, out_fmt="fp32", seed=SEED)
        assert same_bits(got, want), model
    s = arith.sum(cuda.to_device(a[0]), "fp16", accumulation="v100_fp16", out_fmt="fp32")
    assert s == arith.sum(a[0], "fp16", accumulation="v100_fp16", out_fmt="fp32")
