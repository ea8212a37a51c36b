"""Scalar operands (Python numbers, and wider 0-dim tensors outranked by a dimensioned one) enter
an op as PyTorch's CPU kernels read them: rounded to the result format first -- except the
second operand of mul and div, kept at opmath (float32) precision, the op then evaluated in
float32 and rounded once -- and ``number / x`` is ``reciprocal(x) * number``.

Oracles: hand-derived values (ml_dtypes / numpy rounding of the stated formula), and a live
PyTorch 2.13 on the same inputs, bit for bit, forward and backward.
"""

import itertools

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim.autograd import tensor

NP = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}


def rnd(x, fmt):
    """Round float64 values once to ``fmt`` (ml_dtypes / numpy casts: the rounding oracle)."""
    return np.asarray(x, np.float64).astype(NP[fmt]).astype(np.float64)


def f32(x):
    return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)


def test_the_issue_example_hand_derived():
    # bf16(1.1) = 1.1015625; 2.296875 + 1.1015625 = 3.3984375, a tie between 3.390625 and
    # 3.40625 in bf16: to even, 3.40625 (with 1.1 kept, 3.3968750... rounds down to 3.390625)
    x = tensor([2.296875], format="bf16")
    assert rnd(1.1, "bf16") == 1.1015625
    assert (x + 1.1).tolist() == [3.40625]
    assert (1.1 + x).tolist() == [3.40625]
    assert (x + tensor(1.1)).tolist() == [3.40625]  # a 0-dim fp32 tensor: the same
    assert (x - (-1.1)).tolist() == [3.40625]
    # mul keeps the second operand: 2.296875 * float32(1.1) = 2.526562... -> bf16 2.53125
    assert (x * 1.1).tolist() == [float(rnd(f32(2.296875 * f32(1.1)), "bf16"))]
    assert fpsim.nn.functional.mul(tensor(1.1), x).tolist() == [float(rnd(2.296875 * 1.1015625, "bf16"))]


def test_number_over_tensor_is_reciprocal_times_number_hand_derived():
    x = tensor([3.0, 7.0, 0.1], format="fp16")
    r = rnd(1 / x.numpy().astype(np.float64), "fp16")  # reciprocal, rounded to fp16
    want = rnd(f32(r * f32(1.1)), "fp16")  # times float32(1.1) in float32, rounded once
    assert (1.1 / x).tolist() == want.tolist()
    # fp32 too: two roundings, not one correctly rounded division
    y = tensor([3.0, 7.0, 0.1])
    yv = y.numpy().astype(np.float64)
    assert (0.1 / y).tolist() == f32(f32(1 / yv) * f32(0.1)).tolist()
    assert (7.0 / tensor([7.0, 3.0, 49.0])).tolist() == f32(f32(1 / np.array([7.0, 3.0, 49.0])) * 7).tolist()


def test_integer_tensors_under_a_number_divide_in_fp32():
    t = tensor([2, 3, 0])
    assert (1.5 / t).format.name == "fp32"
    assert (1.5 / t).tolist() == [0.75, float(f32(f32(1 / 3) * 1.5)), float("inf")]


torch = pytest.importorskip("torch")

TDT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}


def _values(fmt, n=2000, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.uniform(0.05, 4, n) * rng.choice([-1, 1], n)
    return rnd(v, fmt)


def _same(a, b) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("kind", ["python", "0-dim fp32", "0-dim fp64"])
@pytest.mark.parametrize("first", [False, True], ids=["scalar second", "scalar first"])
@pytest.mark.parametrize("op", list(OPS))
def test_scalar_operand_values_match_torch(op, first, kind, fmt):
    x = _values(fmt)
    fx, tx = tensor(x, format=fmt), torch.tensor(x, dtype=TDT[fmt])
    f = OPS[op]
    for s in (1.1, 0.3, 3.7, -1.7, 1e-3):
        if kind == "python":
            fs, ts = s, s
        else:
            dt = "fp32" if kind == "0-dim fp32" else "fp64"
            fs, ts = tensor(s, format=dt), torch.tensor(s, dtype=TDT.get(dt, torch.float64))
        got = f(fs, fx) if first else f(fx, fs)
        want = f(ts, tx) if first else f(tx, ts)
        assert got.format.name == fmt and want.dtype == TDT[fmt]
        assert _same(got.numpy(), want.float().numpy()), (op, first, kind, fmt, s)


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("op", ["mul", "div", "rdiv", "rmul", "rsub", "radd"])
def test_scalar_operand_gradients_match_torch(op, fmt):
    x = _values(fmt, 500, seed=1)
    g = _values(fmt, 500, seed=2)
    fx = tensor(x, format=fmt, requires_grad=True)
    tx = torch.tensor(x, dtype=TDT[fmt], requires_grad=True)
    f = {"mul": lambda a: a * 1.1, "div": lambda a: a / 0.3, "rdiv": lambda a: 1.1 / a,
         "rmul": lambda a: 0.3 * a, "rsub": lambda a: 0.3 - a, "radd": lambda a: 0.3 + a}[op]  # fmt: skip
    fy, ty = f(fx), f(tx)
    assert _same(fy.numpy(force=True), ty.detach().float().numpy())
    fy.backward(tensor(g, format=fmt))
    ty.backward(torch.tensor(g, dtype=TDT[fmt]))
    assert fx.grad.format.name == fmt
    assert _same(fx.grad.numpy(), tx.grad.float().numpy()), op


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_zero_dim_scalar_tensor_gets_its_gradient_like_torch(fmt):
    """mul with a 0-dim fp32 tensor second (kept in float32): both gradients as PyTorch's."""
    x = _values(fmt, 64, seed=3)
    fx, fs = tensor(x, format=fmt, requires_grad=True), tensor(1.1, requires_grad=True)
    tx = torch.tensor(x, dtype=TDT[fmt], requires_grad=True)
    ts = torch.tensor(1.1, requires_grad=True)
    (fx * fs).sum().backward()
    (tx * ts).sum().backward()
    assert _same(fx.grad.numpy(), tx.grad.float().numpy())
    assert fs.grad.format.name == "fp32" and ts.grad.dtype == torch.float32
    # PyTorch rounds each product g*x to the format before summing them; fpsim sums the
    # products in float32 and rounds once: equal here (g = 1: the products are exact)
    assert fs.grad.item() == ts.grad.item()


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_other_ops_round_their_scalar_first_like_torch(fmt):
    x = np.abs(_values(fmt, 1000, seed=4))
    fx, tx = tensor(x, format=fmt), torch.tensor(x, dtype=TDT[fmt])
    F = fpsim.nn.functional
    for s in (1.1, 0.3, 2.7):
        cases = [
            (fx**s, tx**s),
            (F.maximum(fx, tensor(s)), torch.maximum(tx, torch.tensor(s))),
            (F.minimum(tensor(s), fx), torch.minimum(torch.tensor(s), tx)),
            (fx.masked_fill(fx > 1, s), tx.masked_fill(tx > 1, s)),
            (fpsim.where(fx > 1, fx, s), torch.where(tx > 1, tx, s)),
            (fx.clamp(0.2, s), tx.clamp(0.2, s)),
        ]
        for i, (got, want) in enumerate(cases):
            assert got.format.name == fmt and want.dtype == TDT[fmt], i
            assert _same(got.numpy(), want.float().numpy()), (i, s)


def test_functional_mul_and_div_with_the_number_first_match_torch():
    """``F.mul(2.0, x)``: the number is the first operand (rounded), unlike ``2.0 * x``."""
    F = fpsim.nn.functional
    for fmt, s in itertools.product(["bf16", "fp16"], [1.1, 0.3]):
        x = _values(fmt, 1000, seed=5)
        fx, tx = tensor(x, format=fmt), torch.tensor(x, dtype=TDT[fmt])
        assert _same(F.mul(s, fx).numpy(), torch.mul(s, tx).float().numpy())
        assert _same(F.div(s, fx).numpy(), torch.div(s, tx).float().numpy())
