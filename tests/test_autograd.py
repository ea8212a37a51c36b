"""The autodiff engine: every op against numpy float64 references and central finite differences,
the low-precision semantics (fp16 forward and backward are exactly round_to of the float64
computation), casts, promotion, matmul accumulation, hooks, grad mode and the dispatch policy.

References are written here, independently of fpsim.autograd: numpy float64 formulas for the
forward values and for the derivatives; finite differences evaluate the forward in float64.
"""

import math

import numpy as np
import pytest

import fpsim
from fpsim.autograd import (
    Tensor,
    matmul_accumulation,
    no_grad,
    register_op_observer,
    registry,
    set_dispatch_policy,
    tensor,
)
from fpsim.autograd import functional as F
from fpsim.formats import bf16, fp16, fp32, fp64

ERF = np.vectorize(math.erf)


def r64(*shape, seed, lo=-2.0, hi=2.0, away=0.0):
    """float64 samples in [lo, hi], at least ``away`` from 0 (for kinks and poles)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(lo, hi, shape)
    if away:
        x = np.where(np.abs(x) < away, np.sign(x + 1e-300) * away + x, x)
    return x


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def log_softmax(x, axis=-1):
    z = x - x.max(axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis, keepdims=True))


def gelu(x):
    return 0.5 * x * (1 + ERF(x / math.sqrt(2)))


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * w + b


def cross_entropy(x, t):
    return np.mean(np.log(np.exp(x).sum(1)) - x[np.arange(len(t)), t])


T = np.array([2, 0, 3, 3, 1])  # class targets for 5 x 4 logits
IDX = np.array([[0, 2], [2, 2], [4, 1]])  # embedding indices (repeats)

# name, fpsim function, float64 reference, input specs (shape, lo, hi, away)
CASES = [
    ("add", lambda a, b: a + b, np.add, [((3, 4),), ((3, 4),)]),
    ("add_bcast", lambda a, b: a + b, np.add, [((3, 1),), ((1, 4),)]),
    ("add_bcast_rank", lambda a, b: a + b, np.add, [((4,),), ((2, 3, 4),)]),
    ("sub_bcast", lambda a, b: a - b, np.subtract, [((2, 3),), ((3,),)]),
    ("mul_bcast", lambda a, b: a * b, np.multiply, [((3, 4),), ((3, 1),)]),
    ("div_bcast", lambda a, b: a / b, np.divide, [((3, 4),), ((4,), 0.5, 2.0)]),
    ("scalar_ops", lambda a: (2.5 - a) * 3 / 1.5 + 1, lambda a: (2.5 - a) * 3 / 1.5 + 1, [((5,),)]),
    ("rdiv", lambda a: 2.0 / a, lambda a: 2.0 / a, [((5,), 0.5, 2.0)]),
    ("neg", lambda a: -a, np.negative, [((4,),)]),
    ("pow_scalar", lambda a: a**3, lambda a: a**3, [((5,),)]),
    ("pow_sqrt", lambda a: a**0.5, np.sqrt, [((5,), 0.2, 3.0)]),
    ("pow_tensor", lambda a, b: a**b, np.power, [((2, 3), 0.3, 2.0), ((2, 3),)]),
    ("exp", lambda a: a.exp(), np.exp, [((2, 3),)]),
    ("log", lambda a: a.log(), np.log, [((2, 3), 0.1, 3.0)]),
    ("sqrt", lambda a: a.sqrt(), np.sqrt, [((2, 3), 0.1, 3.0)]),
    ("rsqrt", lambda a: a.rsqrt(), lambda a: 1 / np.sqrt(a), [((2, 3), 0.1, 3.0)]),
    ("abs", lambda a: a.abs(), np.abs, [((2, 3), -2, 2, 0.1)]),
    ("clamp", lambda a: a.clamp(-0.5, 0.7), lambda a: np.clip(a, -0.5, 0.7),
     [((12,), -2, 2)]),
    ("clamp_min", lambda a: F.clamp(a, min=0.25), lambda a: np.maximum(a, 0.25), [((6,),)]),
    ("relu", F.relu, lambda a: np.maximum(a, 0), [((3, 4), -2, 2, 0.1)]),
    ("gelu", F.gelu, gelu, [((3, 4), -3, 3)]),
    ("gelu_tanh", lambda a: F.gelu(a, "tanh"), gelu_tanh, [((3, 4), -3, 3)]),
    ("silu", F.silu, lambda a: a * sigmoid(a), [((3, 4), -4, 4)]),
    ("tanh", F.tanh, np.tanh, [((3, 4),)]),
    ("sigmoid", F.sigmoid, sigmoid, [((3, 4), -6, 6)]),
    ("matmul", lambda a, b: a @ b, np.matmul, [((3, 4),), ((4, 5),)]),
    ("matmul_vec_mat", lambda a, b: a @ b, np.matmul, [((4,),), ((4, 3),)]),
    ("matmul_mat_vec", lambda a, b: a @ b, np.matmul, [((3, 4),), ((4,),)]),
    ("matmul_dot", lambda a, b: a @ b, np.matmul, [((4,),), ((4,),)]),
    ("matmul_batched", lambda a, b: a @ b, np.matmul, [((2, 3, 4),), ((4, 2),)]),
    ("matmul_bcast", lambda a, b: F.matmul(a, b), np.matmul, [((2, 1, 3, 4),), ((3, 4, 2),)]),
    ("mm", F.mm, np.matmul, [((3, 4),), ((4, 2),)]),
    ("linear", F.linear, lambda x, w, b: x @ w.T + b, [((5, 4),), ((3, 4),), ((3,),)]),
    ("linear_nobias_3d", lambda x, w: F.linear(x, w), lambda x, w: x @ w.T,
     [((2, 5, 4),), ((3, 4),)]),
    ("sum_all", lambda a: a.sum(), np.sum, [((3, 4),)]),
    ("sum_dim", lambda a: a.sum(1), lambda a: a.sum(1), [((3, 4),)]),
    ("sum_dims_keep", lambda a: a.sum((0, 2), keepdim=True),
     lambda a: a.sum((0, 2), keepdims=True), [((2, 3, 4),)]),
    ("mean_all", lambda a: a.mean(), np.mean, [((3, 4),)]),
    ("mean_dim", lambda a: a.mean(-1), lambda a: a.mean(-1), [((3, 4),)]),
    ("max_all", lambda a: a.max(), np.max, [((3, 4),)]),
    ("max_dim", lambda a: a.max(1).values, lambda a: a.max(1), [((3, 4),)]),
    ("max_dim_keep", lambda a: a.max(0, keepdim=True).values,
     lambda a: a.max(0, keepdims=True), [((3, 4),)]),
    ("min_dim", lambda a: a.min(1).values, lambda a: a.min(1), [((3, 4),)]),
    ("var_all", lambda a: a.var(), lambda a: a.var(ddof=1), [((3, 4),)]),
    ("var_dim_biased", lambda a: a.var(1, correction=0), lambda a: a.var(1), [((3, 4),)]),
    ("softmax", lambda a: F.softmax(a, -1), softmax, [((3, 4),)]),
    ("softmax_dim0", lambda a: F.softmax(a, 0), lambda a: softmax(a, 0), [((3, 4),)]),
    ("log_softmax", lambda a: F.log_softmax(a, 1), log_softmax, [((3, 4),)]),
    ("logsumexp", lambda a: F.logsumexp(a, 1), lambda a: np.log(np.exp(a).sum(1)), [((3, 4),)]),
    ("logsumexp_keep", lambda a: a.logsumexp((0, 1), keepdim=True),
     lambda a: np.log(np.exp(a).sum((0, 1), keepdims=True)), [((3, 4),)]),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, 4, w, b), layer_norm,
     [((3, 4),), ((4,),), ((4,),)]),
    ("layer_norm_plain", lambda x: F.layer_norm(x, (3, 4)),
     lambda x: layer_norm(x.reshape(2, 12), 1.0, 0.0).reshape(2, 3, 4), [((2, 3, 4),)]),
    ("embedding", lambda w: F.embedding(tensor(IDX), w), lambda w: w[IDX], [((5, 3),)]),
    ("reshape", lambda a: a.reshape(4, 3), lambda a: a.reshape(4, 3), [((3, 4),)]),
    ("view_flatten", lambda a: a.view(-1).unsqueeze(0), lambda a: a.reshape(1, -1), [((3, 4),)]),
    ("transpose", lambda a: a.transpose(0, 2), lambda a: a.swapaxes(0, 2), [((2, 3, 4),)]),
    ("permute_T", lambda a: a.permute(2, 0, 1).T, lambda a: a.transpose(2, 0, 1).T,
     [((2, 3, 4),)]),
    ("index_slice", lambda a: a[1:, ::2], lambda a: a[1:, ::2], [((3, 4),)]),
    ("index_int_array", lambda a: a[np.array([0, 2, 2, 0])], lambda a: a[[0, 2, 2, 0]],
     [((3, 4),)]),
    ("index_mixed", lambda a: a[tensor([1, 1]), 2:], lambda a: a[[1, 1], 2:], [((3, 4),)]),
    ("index_bool", lambda a: a[a.detach() > 0], lambda a: a[a > 0], [((3, 4), -2, 2, 0.1)]),
    ("cat", lambda a, b: F.cat([a, b], 1), lambda a, b: np.concatenate([a, b], 1),
     [((2, 3),), ((2, 2),)]),
    ("stack", lambda a, b: F.stack([a, b], 1), lambda a, b: np.stack([a, b], 1),
     [((2, 3),), ((2, 3),)]),
    ("where", lambda a, b: F.where(a.detach() > b.detach(), a, b), np.maximum,
     [((3, 4),), ((4,),)]),
    ("where_scalar", lambda a: F.where(a.detach() > 0, a, 0.5),
     lambda a: np.where(a > 0, a, 0.5), [((3, 4), -2, 2, 0.1)]),
    ("mse_loss", F.mse_loss, lambda a, b: np.mean((a - b) ** 2), [((3, 4),), ((3, 4),)]),
    ("mse_loss_sum", lambda a, b: F.mse_loss(a, b, "sum"),
     lambda a, b: np.sum((a - b) ** 2), [((3, 4),), ((3, 4),)]),
    ("cross_entropy", lambda x: F.cross_entropy(x, tensor(T)), lambda x: cross_entropy(x, T),
     [((5, 4),)]),
    ("cross_entropy_none", lambda x: F.cross_entropy(x, tensor(T), "none"),
     lambda x: np.log(np.exp(x).sum(1)) - x[np.arange(5), T], [((5, 4),)]),
    ("cross_entropy_ignore", lambda x: F.cross_entropy(x, tensor([2, -100, 3, -100, 1])),
     lambda x: np.mean((np.log(np.exp(x).sum(1)) - x[np.arange(5), [2, 0, 3, 0, 1]])[[0, 2, 4]]),
     [((5, 4),)]),
    ("nll_loss", lambda x: F.nll_loss(x, tensor(T), "sum"),
     lambda x: -np.sum(x[np.arange(5), T]), [((5, 4),)]),
    ("bce_with_logits", F.binary_cross_entropy_with_logits,
     lambda x, y: np.mean(-(y * np.log(sigmoid(x)) + (1 - y) * np.log(1 - sigmoid(x)))),
     [((3, 4), -4, 4), ((3, 4), 0, 1)]),
    ("bce", F.binary_cross_entropy,
     lambda p, y: np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p))),
     [((3, 4), 0.05, 0.95), ((3, 4), 0, 1)]),
]  # fmt: skip


def make_inputs(specs, seed):
    out = []
    for k, spec in enumerate(specs):
        shape, lo, hi, away = (tuple(spec) + (-2.0, 2.0, 0.0)[len(spec) - 1 :])[:4]
        out.append(r64(*shape, seed=seed * 10 + k, lo=lo, hi=hi, away=away))
    return out


@pytest.mark.parametrize("name,fn,ref,specs", CASES, ids=[c[0] for c in CASES])
def test_forward_matches_numpy_float64(name, fn, ref, specs):
    xs = make_inputs(specs, seed=1)
    out = fn(*[tensor(x, "fp64") for x in xs])
    assert out.format is fp64
    np.testing.assert_allclose(out.data, ref(*xs), rtol=1e-12, atol=1e-14)
    # fp32: computed in float32 from the fp32 inputs, close to the float64 reference
    x32 = [x.astype(np.float32).astype(np.float64) for x in xs]
    out32 = fn(*[tensor(x, "fp32") for x in xs])
    assert out32.format is fp32 and out32.data.dtype == np.float32
    np.testing.assert_allclose(out32.data, ref(*x32), rtol=2e-5, atol=2e-6)


def numeric_grad(fn, xs, weights, i, h=1e-6):
    """Central differences of sum(fn(xs) * weights) with respect to xs[i], all in float64."""
    g = np.zeros_like(xs[i])
    for idx in np.ndindex(*xs[i].shape):
        vals = []
        for step in (h, -h):
            ys = [x.copy() for x in xs]
            ys[i][idx] += step
            with no_grad():
                vals.append(float(np.sum(fn(*[tensor(y, "fp64") for y in ys]).data * weights)))
        g[idx] = (vals[0] - vals[1]) / (2 * h)
    return g


@pytest.mark.parametrize("name,fn,ref,specs", CASES, ids=[c[0] for c in CASES])
def test_gradient_matches_central_differences(name, fn, ref, specs):
    xs = make_inputs(specs, seed=2)
    ts = [tensor(x, "fp64", requires_grad=True) for x in xs]
    out = fn(*ts)
    w = np.random.default_rng(3).uniform(0.5, 1.5, out.shape)
    (out * tensor(w, "fp64")).sum().backward()
    for i, t in enumerate(ts):
        assert t.grad is not None and t.grad.format is fp64
        want = numeric_grad(fn, xs, w, i)
        np.testing.assert_allclose(t.grad.data, want, rtol=1e-6, atol=1e-7, err_msg=name)


def test_dropout_mask_scale_and_gradient():
    x = tensor(r64(4, 50, seed=0), "fp64", requires_grad=True)
    y = F.dropout(x, 0.3, training=True, generator=np.random.default_rng(7))
    keep = np.random.default_rng(7).random((4, 50)) >= 0.3  # the same draws
    np.testing.assert_array_equal(y.data, x.data * (keep / 0.7))  # as PyTorch: x * noise
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.data, keep / 0.7)
    assert F.dropout(x, 0.3, training=False) is x
    assert np.all(F.dropout(x, 1.0, generator=0).data == 0)


# ---- low-precision semantics -----------------------------------------------------------------


def fp16_values(*shape, seed, lo=-3.0, hi=3.0):
    return fpsim.round_to(r64(*shape, seed=seed, lo=lo, hi=hi), "fp16")


def same(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def r16(x):
    return fpsim.round_to(np.asarray(x, np.float64), "fp16")


# name, fn, forward reference, backward reference (inputs, stored output, grad) -> grads, specs
LOWP = [
    ("add", lambda a, b: a + b, lambda a, b: a + b,
     lambda a, b, y, g: (g, g.sum(0)), [(4, 5), (5,)]),
    ("mul", lambda a, b: a * b, lambda a, b: a * b,
     lambda a, b, y, g: (g * b, (g * a).sum(0)), [(4, 5), (5,)]),
    ("div", lambda a, b: a / b, lambda a, b: a / b,
     lambda a, b, y, g: (g / b, -g * a / (b * b)), [(4, 5), (4, 5)]),
    ("scalar_mul", lambda a: a * 0.1, lambda a: a * float(np.float32(0.1)),
     lambda a, y, g: (g * float(np.float32(0.1)),), [(4, 5)]),
    ("exp", lambda a: a.exp(), np.exp, lambda a, y, g: (g * y,), [(4, 5)]),
    ("log", lambda a: a.abs().log(), lambda a: np.log(np.abs(a)), None, [(4, 5)]),
    ("sqrt", lambda a: a.abs().sqrt(), lambda a: np.sqrt(np.abs(a)), None, [(4, 5)]),
    ("tanh", lambda a: a.tanh(), np.tanh, lambda a, y, g: (g * (1 - y * y),), [(4, 5)]),
    ("sigmoid", lambda a: a.sigmoid(), sigmoid, lambda a, y, g: (g * y * (1 - y),), [(4, 5)]),
    ("silu", F.silu, lambda a: a * sigmoid(a),
     lambda a, y, g: (g * sigmoid(a) * (1 + a * (1 - sigmoid(a))),), [(4, 5)]),
    ("gelu", F.gelu, gelu, None, [(4, 5)]),
    ("pow", lambda a: a**3, lambda a: a**3, lambda a, y, g: (g * 3 * a**2,), [(4, 5)]),
    ("softmax", lambda a: a.softmax(-1), softmax,
     lambda a, y, g: (y * (g - (g * y).sum(-1, keepdims=True)),), [(4, 5)]),
    ("log_softmax", lambda a: a.log_softmax(-1), log_softmax,
     lambda a, y, g: (g - np.exp(y) * g.sum(-1, keepdims=True),), [(4, 5)]),
    ("layer_norm", lambda a: F.layer_norm(a, 5), lambda a: layer_norm(a, 1.0, 0.0), None,
     [(4, 5)]),
    ("mse_loss", F.mse_loss, lambda a, b: np.mean((a - b) ** 2),
     lambda a, b, y, g: (2 * (a - b) * (g / a.size), -(2 * (a - b) * (g / a.size))),
     [(4, 5), (4, 5)]),
    ("cross_entropy", lambda a: F.cross_entropy(a, tensor([0, 4, 2, 2])),
     lambda a: cross_entropy(a, np.array([0, 4, 2, 2])),
     lambda a, y, g: ((softmax(a) - np.eye(5)[[0, 4, 2, 2]]) * (g / 4),), [(4, 5)]),
]  # fmt: skip


@pytest.mark.parametrize("name,fn,fwd,bwd,shapes", LOWP, ids=[c[0] for c in LOWP])
def test_fp16_op_is_round_to_of_float64_forward_and_backward(name, fn, fwd, bwd, shapes):
    xs = [fp16_values(*s, seed=20 + k) for k, s in enumerate(shapes)]
    ts = [tensor(x, "fp16", requires_grad=True) for x in xs]
    y = fn(*ts)
    assert y.format is fp16 and y.data.dtype == np.float32
    assert same(y.data, r16(fwd(*xs)))  # forward: one rounding of the float64 value
    if bwd is None:
        return
    g = fp16_values(*y.shape, seed=30, lo=-2, hi=2)
    y.backward(tensor(g, "fp16"))
    want = bwd(*xs, y.data.astype(np.float64), g)
    for t, w in zip(ts, want, strict=True):
        assert t.grad.format is fp16
        assert same(t.grad.data, r16(w)), name


def test_every_fp16_output_and_gradient_is_representable():
    x = tensor(fp16_values(6, 7, seed=1), "fp16", requires_grad=True)
    w = tensor(fp16_values(3, 7, seed=2), "fp16", requires_grad=True)
    y = F.layer_norm(F.gelu(F.linear(x, w)), 3).softmax(-1).log().mean()
    y.backward()
    for arr in (y.data, x.grad.data, w.grad.data):
        assert same(arr, fpsim.round_to(arr, "fp16"))


def test_fp16_linear_accumulates_in_fp32_and_rounds_once():
    x = fp16_values(8, 64, seed=3)
    w = fp16_values(16, 64, seed=4)
    b = fp16_values(16, seed=5)
    y = F.linear(tensor(x, "fp16"), tensor(w, "fp16"), tensor(b, "fp16"))
    acc = x.astype(np.float32) @ w.astype(np.float32).T + b.astype(np.float32)
    assert same(y.data, fpsim.round_to(acc, "fp16"))
    # integer-valued operands: fp32 accumulation is exact, so this is round_to(float64 result)
    xi = np.round(x * 4)
    wi = np.round(w * 4)
    yi = F.linear(tensor(xi, "fp16"), tensor(wi, "fp16"))
    assert same(yi.data, r16(xi @ wi.T))


def test_sum_and_matmul_accumulators():
    ones = fpsim.autograd.ones(4096, format="fp16")
    assert ones.sum().item() == 4096.0  # fp32 accumulator (an fp16 one stops at 2048)
    assert ones.mean().item() == 1.0
    assert (ones @ ones).item() == 4096.0
    with matmul_accumulation("input"):
        assert (ones @ ones).item() == 2048.0
    assert F.matmul(ones, ones, acc="fp16").item() == 2048.0
    b = ones.bfloat16()
    assert F.matmul(b, b, acc="bf16").item() == 256.0
    assert F.matmul(b, b).item() == 4096.0


def test_gradient_below_half_the_smallest_fp16_subnormal_becomes_zero():
    w = tensor([1.0, 1.0, 1.0, 1.0], "fp16", requires_grad=True)
    scale = tensor([2.0**-26, 2.0**-25, 2.0**-25 * 1.5, 2.0**-24], "fp32")
    loss = (F.relu(w * 1.0).float() * scale).sum()  # the fp32 gradients reach an fp16 op
    loss.backward()
    assert w.grad.format is fp16
    assert w.grad.data.tolist() == [0.0, 0.0, 2.0**-24, 2.0**-24]  # 2^-25 ties to even: 0


def test_cast_node_returns_gradients_to_the_source_format():
    x = tensor([1.0, 2.0, 3.0], "fp32", requires_grad=True)
    h = x.half()
    assert h.format is fp16 and h.grad_fn is not None
    g16 = fp16_values(3, seed=9)
    h.backward(tensor(g16, "fp16"))
    assert x.grad.format is fp32 and same(x.grad.data, g16)
    # the other way: an fp16 leaf used in an fp32 op receives its gradient rounded to fp16
    a = tensor([1.0, 2.0], "fp16", requires_grad=True)
    (a.float() * tensor([0.1, 1e-7], "fp32")).sum().backward()
    assert a.grad.format is fp16
    assert same(a.grad.data, r16(np.float32([0.1, 1e-7])))
    # an implicit promotion behaves like a cast
    a.grad = None
    b = tensor([0.1, 0.2], "fp32", requires_grad=True)
    (a + b).backward(tensor([1 / 3, 1e-9]))
    assert a.grad.format is fp16 and same(a.grad.data, r16(np.float32([1 / 3, 1e-9])))
    assert b.grad.format is fp32 and same(b.grad.data, np.float32([1 / 3, 1e-9]))


def test_cast_rounding_modes_and_fp8():
    x = tensor([0.3, 500.0, -1e-4])
    assert x.to("fp8_e4m3").data.tolist()[0] == 0.3125
    assert np.isnan(x.to("fp8_e4m3").data[1])  # out of range: NaN in an fn format
    s = [x.to("bf16", rounding="stochastic", seed=k).data[0] for k in range(40)]
    assert set(s) == {np.float32(0.298828125), np.float32(0.30078125)}
    assert x.to("fp32") is x
    d = tensor([1 + 2**-8 + 2**-35], "fp64")
    assert d.to("bf16").item() == 1.0078125  # fp64 -> bf16 directly, no double rounding


# ---- promotion and dtype errors --------------------------------------------------------------


def test_promotion_rules():
    h = tensor([1.0], "fp16")
    b = tensor([1.0], "bf16")
    f = tensor([1.0], "fp32")
    d = tensor([1.0], "fp64")
    i = tensor([1])
    assert (h + b).format is fp32  # as PyTorch: neither holds the other
    assert (h * f).format is fp32 and (f * h).format is fp32
    assert (h + d).format is fp64 and (b * d).format is fp64
    assert (h * 2.5).format is fp16 and (2.5 - b).format is bf16  # scalars are weak
    assert (h + i).format is fp16
    assert (i * 0.5).format is fp32 and (i + 1).format is None and (i + 1).item() == 2
    assert (tensor([1.0], "fp8_e4m3") + h).format is fp16
    assert (b + tensor([1.0], "tf32")).format.name == "tf32"
    assert F.cat([h, f]).format is fp32 and F.where(tensor([True]), h, b).format is fp32


def test_matmul_like_ops_refuse_mixed_formats():
    a32 = tensor(np.ones((2, 3)), "fp32")
    a16 = tensor(np.ones((3, 2)), "fp16")
    with pytest.raises(RuntimeError, match="same format, got fp32 and fp16"):
        a32 @ a16
    with pytest.raises(RuntimeError, match="same format"):
        F.mm(a32, a16)
    with pytest.raises(RuntimeError, match="linear: expected both operands"):
        F.linear(a32, tensor(np.ones((4, 3)), "bf16"))
    with pytest.raises(RuntimeError, match="same format"):
        F.linear(a32, tensor(np.ones((4, 3)), "fp32"), tensor(np.ones(4), "fp16"))


def test_scalar_in_fp16_op_is_held_in_fp32():
    x = tensor([1.0, 3.0, 1000.0], "fp16")
    y = x * 0.1
    assert same(y.data, r16(x.data.astype(np.float64) * np.float64(np.float32(0.1))))


# ---- tensors, indexing, grad mode, hooks -----------------------------------------------------


def test_tensor_basics_and_repr():
    x = tensor([1.0, 2.0], format="fp16", requires_grad=True)
    assert repr(x) == "tensor([1., 2.], format=fp16, requires_grad=True)"
    assert repr(x * 2).endswith("format=fp16, grad_fn=<MulBackward>)")
    assert x.dtype is fp16 and x.data.dtype == np.float32 and x.shape == (2,)
    assert x.bfloat16().dtype is bf16 and x.double().data.dtype == np.float64
    assert x.float().dtype is fp32 and x.half() is x
    assert tensor([0.1]).item() == float(np.float32(0.1))
    assert tensor([[3, 1]]).dtype == np.int64 and tensor([True]).dtype == np.bool_
    assert tensor(5e-8, "fp16").item() == 2.0**-24  # rounded once on creation
    assert tensor(np.float64(0.1), "fp64").item() == 0.1
    with pytest.raises(RuntimeError, match="floating point"):
        tensor([1, 2], requires_grad=True)
    z = fpsim.autograd.zeros(2, 3, format="bf16")
    assert z.shape == (2, 3) and z.format is bf16
    r1 = fpsim.autograd.randn(3, generator=5).numpy()
    assert np.array_equal(r1, np.random.default_rng(5).standard_normal(3).astype(np.float32))


def test_comparisons_and_argmax_are_not_differentiable():
    x = tensor([1.0, -2.0, 3.0], requires_grad=True)
    m = x > 0
    assert m.format is None and not m.requires_grad and m.data.tolist() == [True, False, True]
    assert (x == tensor([1.0, 0.0, 3.0])).data.tolist() == [True, False, True]
    assert x.argmax().item() == 2
    assert (x * m.float()).sum().item() == 4.0


def test_integer_index_gradients_accumulate_repeats():
    x = tensor([1.0, 2.0, 3.0], "fp16", requires_grad=True)
    y = x[tensor([0, 0, 2, 0])]
    y.backward(tensor([1.0, 2.0, 3.0, 2.0**-11], "fp16"))
    # 1 + 2 + 2^-11 = 3.00048828125 rounds (once) to 3.0 in fp16
    assert x.grad.data.tolist() == [3.0, 0.0, 3.0]


def test_no_grad_detach_and_grad_mode():
    x = tensor([1.0], requires_grad=True)
    with no_grad():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None
    assert fpsim.autograd.is_grad_enabled()

    @no_grad()
    def f(t):
        return t * 2

    assert not f(x).requires_grad
    d = x.detach()
    assert not d.requires_grad and d.data is x.data
    with fpsim.autograd.set_grad_enabled(False):
        assert not (x + 1).requires_grad
    assert (x + 1).requires_grad


def test_backward_errors():
    x = tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="scalar outputs"):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match="does not require grad"):
        tensor([1.0]).sum().backward()
    with pytest.raises(RuntimeError, match="in-place"):
        x.zero_()


def test_gradients_accumulate_over_uses_and_calls():
    x = tensor([2.0], requires_grad=True)
    y = x * x + x  # x used three times
    y.backward()
    assert x.grad.item() == 5.0
    (x * 3).backward()
    assert x.grad.item() == 8.0  # accumulates into .grad, as PyTorch


def test_hooks_see_and_replace_gradients():
    x = tensor([1.0, 2.0], requires_grad=True)
    seen = []
    h1 = x.register_hook(lambda g: seen.append(g.data.copy()))
    h2 = x.register_hook(lambda g: g * 10)
    mid = x * 3
    mid.retain_grad()
    hm = mid.register_hook(lambda g: g + 1)
    (mid * mid).sum().backward()  # d/dmid = 2 mid = [6, 12] -> hook +1 -> [7, 13]
    assert mid.grad.data.tolist() == [7.0, 13.0]
    assert len(seen) == 1 and seen[0].tolist() == [21.0, 39.0]  # leaf hook: summed gradient
    assert x.grad.data.tolist() == [210.0, 390.0]
    for h in (h1, h2, hm):
        h.remove()
    x.grad = None
    (x * 3).sum().backward()
    assert x.grad.data.tolist() == [3.0, 3.0] and len(seen) == 1


def test_leaf_used_twice_runs_its_hook_once_with_the_sum():
    x = tensor([1.0], "fp16", requires_grad=True)
    calls = []
    x.register_hook(lambda g: calls.append(g.format.name))
    (x * 2 + x * 3).backward()
    assert calls == ["fp16"] and x.grad.item() == 5.0


# ---- registry, dispatch policy, observers ----------------------------------------------------

ISSUE_OPS = """add sub mul div neg pow exp log sqrt rsqrt abs clamp relu gelu silu tanh sigmoid
matmul mm linear sum mean max var softmax log_softmax logsumexp layer_norm embedding dropout
reshape view transpose index cat stack where mse_loss cross_entropy nll_loss
binary_cross_entropy_with_logits binary_cross_entropy cast""".split()


def test_registry_has_every_op():
    missing = [n for n in ISSUE_OPS if n not in registry]
    assert not missing
    assert registry["linear"].name == "linear"


def test_dispatch_policy_casts_inputs_before_the_op():
    calls = []

    def policy(op, args):
        calls.append(op)
        if op == "linear":
            return tuple(a.to("fp16") if isinstance(a, Tensor) else a for a in args)
        if op == "binary_cross_entropy":
            raise RuntimeError("unsafe to autocast")
        return args

    x = tensor(r64(4, 3, seed=0), "fp32", requires_grad=True)  # (float64 data: fp64 otherwise)
    w = tensor(r64(2, 3, seed=1), "fp32", requires_grad=True)
    b = tensor(r64(2, seed=2), "fp32", requires_grad=True)
    prev = set_dispatch_policy(policy)
    try:
        y = F.linear(x, w, b)
        loss = y.float().sum()
        with pytest.raises(RuntimeError, match="unsafe"):
            F.binary_cross_entropy(tensor([0.5]), tensor([1.0]))
    finally:
        set_dispatch_policy(prev)
    assert calls[0] == "linear" and "cast" not in calls
    assert y.format is fp16
    ref = F.linear(x.half(), w.half(), b.half())  # bit for bit: the same op on cast inputs
    assert same(y.data, ref.data)
    loss.backward()
    assert x.grad.format is fp32 and w.grad.format is fp32 and b.grad.format is fp32
    g16 = np.ones((4, 2))
    assert same(x.grad.data, r16(g16 @ w.half().data.astype(np.float64)))


def test_op_observer_traces_formats_forward_and_backward():
    events = []
    handle = register_op_observer(
        lambda phase, op, ins, outs: events.append(
            (phase, op, [t.format.name for t in outs if t is not None and t.format])
        )
    )
    try:
        x = tensor([1.0, 2.0], requires_grad=True)
        (x.half() * 2).float().sum().backward()
    finally:
        handle.remove()
    assert ("forward", "mul", ["fp16"]) in events
    assert ("backward", "mul", ["fp16"]) in events
    assert ("backward", "cast", ["fp32"]) in events
    n = len(events)
    (tensor([1.0], requires_grad=True) * 2).sum().backward()
    assert len(events) == n  # removed


def test_custom_function():
    class Cube(fpsim.autograd.Function):
        name = "test_cube"

        @staticmethod
        def forward(ctx, x):
            ctx.x = x
            return x**3

        @staticmethod
        def backward(ctx, g):
            return (3 * ctx.x**2 * g,)

    try:
        x = tensor([0.1, 2.0], "bf16", requires_grad=True)
        y = Cube.apply(x)
        assert same(y.data, fpsim.round_to(x.data.astype(np.float64) ** 3, "bf16"))
        y.sum().backward()
        assert same(x.grad.data, fpsim.round_to(3 * x.data.astype(np.float64) ** 2, "bf16"))
    finally:
        registry.pop("test_cube")


def test_leaf_gradients_never_alias_each_other_or_the_upstream_gradient():
    a = tensor([1.0, 2.0], requires_grad=True)
    b = tensor([3.0, 4.0], requires_grad=True)
    g = np.array([1.0, 1.0], np.float32)
    (a + b).reshape(2).backward(g)  # add passes the same array to both inputs
    a.grad.data[...] = 7.0  # e.g. an in-place unscale by a GradScaler
    assert b.grad.data.tolist() == [1.0, 1.0] and g.tolist() == [1.0, 1.0]
