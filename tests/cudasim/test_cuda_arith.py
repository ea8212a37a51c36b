"""fpsim.arith on the CUDA back end (fpsim.kernels.arith_cuda), in numba's CUDA simulator.

Run in its own process (``python -m pytest tests/cudasim``; conftest.py turns the simulator on).
The simulator runs every GPU thread as a Python thread, so sizes are small. Oracles: exact
rational rounding (tests/arith_oracle.py) and the CPU kernels, which must agree bit for bit --
stochastic rounding included, for the same seed (same documented random-number indices).
"""

import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import fpsim
from fpsim import arith

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/ for the shared oracles
from arith_oracle import op_oracle  # noqa: E402

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
