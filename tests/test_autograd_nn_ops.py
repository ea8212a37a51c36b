"""The ops of today's small models (convolution, pooling, batched products, einsum, attention,
normalisation, and the elementwise ops they use): each one against

* central finite differences of its own fp64 forward (the gradient oracle, no torch needed);
* a live PyTorch 2.13 on the same inputs: the fp64 forward (to 1e-12), and the fp32 forward and
  every input gradient (to a few fp32 ulps of the output's scale: the summation orders of
  BLAS, oneDNN and PyTorch's fused kernels differ from numpy's);
* in bf16 / fp16, the semantics the engine promises: an elementwise or composite op's output
  is the float64 result rounded once (torch's float64 result, rounded by ml_dtypes); a
  product (conv, bmm, einsum, attention's matmuls) accumulates in fp32 and rounds once, exact on
  integer-valued operands; and PyTorch's own bf16 kernels agree within one bf16 ulp.
"""

import math

import ml_dtypes
import numpy as np
import pytest
from test_autograd import numeric_grad

import fpsim
from fpsim.autograd import tensor
from fpsim.formats import fp64
from fpsim.nn import functional as F

try:
    import torch

    tf = torch.nn.functional
except ImportError:  # the finite-difference tests run without torch
    torch = tf = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

T5 = [1, 2, -100, 0, 4]  # class targets with one ignored
T3D = [[1, 2, -100], [0, 1, 1]]
MASK = np.array([[True, False, True, True], [False, False, True, False], [True] * 4])
CAUSAL_BOOL = np.tril(np.ones((5, 5), bool))


def _t(lib, v, **kw):
    """An integer/bool constant for either library."""
    return tensor(np.array(v)) if lib == "fpsim" else torch.tensor(np.array(v), **kw)


# name, f(lib, *tensors) with lib "fpsim" or "torch", input specs (shape, lo, hi)
def conv2d(lib, x, w, b):
    kw = dict(stride=2, padding=1, groups=2)
    return F.conv2d(x, w, b, **kw) if lib == "fpsim" else tf.conv2d(x, w, b, **kw)


CASES = [
    ("conv2d_stride_pad_groups", conv2d, [(2, 4, 5, 5), (6, 2, 3, 3), (6,)]),
    ("conv2d_same_dilation", lambda lib, x, w: (F if lib == "fpsim" else tf).conv2d(
        x, w, padding="same", dilation=2), [(1, 3, 6, 5), (2, 3, 2, 3)]),
    ("conv2d_unbatched_rect", lambda lib, x, w: (F if lib == "fpsim" else tf).conv2d(
        x, w, stride=(2, 1), padding=(0, 1)), [(2, 5, 4), (3, 2, 2, 3)]),
    ("conv1d", lambda lib, x, w, b: (F if lib == "fpsim" else tf).conv1d(
        x, w, b, stride=2, padding=1, dilation=2), [(2, 3, 9), (4, 3, 3), (4,)]),
    ("max_pool2d", lambda lib, x: (F if lib == "fpsim" else tf).max_pool2d(x, 3, 2, 1),
     [(2, 2, 5, 6)]),
    ("max_pool2d_ceil_dilation", lambda lib, x: (F if lib == "fpsim" else tf).max_pool2d(
        x, 2, (2, 1), 0, 2, ceil_mode=True), [(1, 2, 6, 5)]),
    ("avg_pool2d", lambda lib, x: (F if lib == "fpsim" else tf).avg_pool2d(x, 3, 2, 1),
     [(2, 2, 5, 6)]),
    ("avg_pool2d_ceil_nopad", lambda lib, x: (F if lib == "fpsim" else tf).avg_pool2d(
        x, (3, 2), 2, 1, ceil_mode=True, count_include_pad=False), [(1, 2, 6, 5)]),
    ("avg_pool2d_divisor", lambda lib, x: (F if lib == "fpsim" else tf).avg_pool2d(
        x, 2, divisor_override=3), [(1, 2, 4, 6)]),
    ("adaptive_avg_pool2d", lambda lib, x: (F if lib == "fpsim" else tf).adaptive_avg_pool2d(
        x, (3, 2)), [(2, 2, 7, 5)]),
    ("bmm", lambda lib, a, b: (F if lib == "fpsim" else torch).bmm(a, b),
     [(3, 2, 4), (3, 4, 5)]),
    ("baddbmm", lambda lib, i, a, b: (F if lib == "fpsim" else torch).baddbmm(
        i, a, b, beta=0.5, alpha=2.0), [(3, 1, 5), (3, 2, 4), (3, 4, 5)]),
    ("einsum_attention", lambda lib, q, k: (F if lib == "fpsim" else torch).einsum(
        "bhqd,bhkd->bhqk", q, k), [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("einsum_three_sum_out", lambda lib, a, b, c: (F if lib == "fpsim" else torch).einsum(
        "ij,jkm,kl->li", a, b, c), [(2, 3), (3, 4, 2), (4, 5)]),
    ("einsum_ellipsis_transpose", lambda lib, a: (F if lib == "fpsim" else torch).einsum(
        "...ij->...ji", a), [(2, 3, 4)]),
    ("sdpa_causal", lambda lib, q, k, v: (F if lib == "fpsim" else tf)
     .scaled_dot_product_attention(q, k, v, is_causal=True), [(2, 2, 5, 4)] * 2 + [(2, 2, 5, 3)]),
    ("sdpa_float_mask_scale", lambda lib, q, k, v, m: (F if lib == "fpsim" else tf)
     .scaled_dot_product_attention(q, k, v, m, scale=0.3), [(2, 3, 4), (2, 4, 4), (2, 4, 3),
                                                            (3, 4)]),
    ("sdpa_bool_mask", lambda lib, q, k, v: (F if lib == "fpsim" else tf)
     .scaled_dot_product_attention(q, k, v, _t(lib, MASK)), [(1, 3, 2), (1, 4, 2), (1, 4, 3)]),
    ("rms_norm", lambda lib, x, w: (F if lib == "fpsim" else tf).rms_norm(x, (4,), w),
     [(3, 2, 4), (4,)]),
    ("rms_norm_2d_eps", lambda lib, x: (F if lib == "fpsim" else tf).rms_norm(
        x, (2, 4), eps=1e-3), [(3, 2, 4)]),
    ("group_norm", lambda lib, x, w, b: (F if lib == "fpsim" else tf).group_norm(x, 2, w, b),
     [(2, 4, 3, 2), (4,), (4,)]),
    ("batch_norm_train", lambda lib, x, w, b: (F if lib == "fpsim" else tf).batch_norm(
        x, None, None, w, b, training=True), [(3, 4, 2, 2), (4,), (4,)]),
    ("batch_norm_eval", lambda lib, x, w, b: (F if lib == "fpsim" else tf).batch_norm(
        x, *([tensor(np.array([0.1, -0.2, 0.3]), "fp64"), tensor(np.array([0.5, 1.5, 2.0]),
                                                                  "fp64")]
             if lib == "fpsim" else
             [torch.tensor([0.1, -0.2, 0.3], dtype=x.dtype), torch.tensor([0.5, 1.5, 2.0],
                                                                          dtype=x.dtype)]),
        w, b, training=False), [(4, 3), (3,), (3,)]),
    ("softplus", lambda lib, x: (F if lib == "fpsim" else tf).softplus(x, 2.0, 3.0),
     [((20,), -3, 1.2)]),
    ("softplus_linear", lambda lib, x: (F if lib == "fpsim" else tf).softplus(x, 2.0, 3.0),
     [((20,), 2, 4)]),
    ("log1p", lambda lib, x: x.log1p(), [((20,), -0.9, 3)]),
    ("expm1", lambda lib, x: x.expm1(), [((20,), -3, 3)]),
    ("reciprocal", lambda lib, x: x.reciprocal(), [((20,), 0.5, 2)]),
    ("maximum_bcast", lambda lib, a, b: (F if lib == "fpsim" else torch).maximum(a, b),
     [(3, 4), (4,)]),
    ("minimum_bcast", lambda lib, a, b: (F if lib == "fpsim" else torch).minimum(a, b),
     [(3, 1), (3, 4)]),
    ("cumsum", lambda lib, x: x.cumsum(1), [(3, 6)]),
    ("masked_fill_tensor_value", lambda lib, x, v: x.masked_fill(
        _t(lib, MASK), v.reshape(())), [(3, 4), (1,)]),
    ("cross_entropy_smooth_mean", lambda lib, x: (F if lib == "fpsim" else tf).cross_entropy(
        x, _t(lib, T5), label_smoothing=0.2), [(5, 6)]),
    ("cross_entropy_smooth_sum", lambda lib, x: (F if lib == "fpsim" else tf).cross_entropy(
        x, _t(lib, T5), reduction="sum", label_smoothing=0.1), [(5, 6)]),
    ("cross_entropy_3d_none", lambda lib, x: (F if lib == "fpsim" else tf).cross_entropy(
        x, _t(lib, T3D), reduction="none", label_smoothing=0.3), [(2, 4, 3)]),
    ("embedding_padding_idx", lambda lib, w: (F if lib == "fpsim" else tf).embedding(
        _t(lib, [[0, 2], [3, 2]]), w, padding_idx=2), [(4, 3)]),
    ("gelu", lambda lib, x: (F if lib == "fpsim" else tf).gelu(x), [((30,), -4, 4)]),
    ("gelu_tanh", lambda lib, x: (F if lib == "fpsim" else tf).gelu(x, approximate="tanh"),
     [((30,), -4, 4)]),
    ("silu", lambda lib, x: (F if lib == "fpsim" else tf).silu(x), [((30,), -4, 4)]),
    ("tanh", lambda lib, x: x.tanh(), [((30,), -3, 3)]),
    ("sigmoid", lambda lib, x: x.sigmoid(), [((30,), -6, 6)]),
    ("where", lambda lib, a, b: (fpsim if lib == "fpsim" else torch).where(_t(lib, MASK), a, b),
     [(3, 4), (4,)]),
]  # fmt: skip


def make_inputs(specs, seed):
    rng = np.random.default_rng(seed)
    out = []
    for spec in specs:
        shape, lo, hi = spec if isinstance(spec[0], tuple) else (spec, -2.0, 2.0)
        out.append(rng.uniform(lo, hi, shape))
    return out


def fpsim_fn(f):
    return lambda *xs: f("fpsim", *xs)


@pytest.mark.parametrize("name,f,specs", CASES, ids=[c[0] for c in CASES])
def test_fp64_gradient_matches_central_differences(name, f, specs):
    xs = make_inputs(specs, seed=1)
    ts = [tensor(x, "fp64", requires_grad=True) for x in xs]
    out = f("fpsim", *ts)
    assert out.format is fp64
    w = np.random.default_rng(3).uniform(0.5, 1.5, out.shape)
    (out * tensor(w, "fp64")).sum().backward()
    for i, t in enumerate(ts):
        want = numeric_grad(fpsim_fn(f), xs, w, i)
        if name == "embedding_padding_idx":
            want[2] = 0  # the padding row gets no gradient (not the derivative)
        assert t.grad is not None and t.grad.format is fp64, (name, i)
        np.testing.assert_allclose(t.grad.data, want, rtol=1e-6, atol=1e-7, err_msg=f"{name} {i}")


def _torch_run(f, xs, dtype, w):
    ts = [torch.tensor(x, dtype=dtype, requires_grad=True) for x in xs]
    out = f("torch", *ts)
    (out * torch.tensor(w, dtype=dtype)).sum().backward()
    return out.detach().double().numpy(), [t.grad.double().numpy() for t in ts]


def _fpsim_run(f, xs, fmt, w):
    ts = [tensor(x, fmt, requires_grad=True) for x in xs]
    out = f("fpsim", *ts)
    (out * tensor(w, fmt)).sum().backward()
    return out, [t.grad for t in ts]


@needs_torch
@pytest.mark.parametrize("name,f,specs", CASES, ids=[c[0] for c in CASES])
def test_fp64_forward_and_gradients_match_torch(name, f, specs):
    xs = make_inputs(specs, seed=4)
    w = np.random.default_rng(5).uniform(0.5, 1.5, f("torch", *map(torch.tensor, xs)).shape)
    want, want_g = _torch_run(f, xs, torch.float64, w)
    got, got_g = _fpsim_run(f, xs, "fp64", w)
    np.testing.assert_allclose(got.data, want, rtol=1e-12, atol=1e-13)
    for g, wg in zip(got_g, want_g, strict=True):
        np.testing.assert_allclose(g.data, wg, rtol=1e-10, atol=1e-12)


@needs_torch
@pytest.mark.parametrize("name,f,specs", CASES, ids=[c[0] for c in CASES])
def test_fp32_forward_and_gradients_match_torch(name, f, specs):
    xs = [x.astype(np.float32) for x in make_inputs(specs, seed=6)]
    w = np.random.default_rng(7).uniform(0.5, 1.5, f("torch", *map(torch.tensor, xs)).shape)
    w = w.astype(np.float32)
    want, want_g = _torch_run(f, xs, torch.float32, w)
    got, got_g = _fpsim_run(f, xs, "fp32", w)
    assert got.format.name == "fp32" and got.data.dtype == np.float32

    def close(a, b):  # a few fp32 ulps of the array's scale
        scale = max(np.max(np.abs(b)), 1e-30)
        np.testing.assert_allclose(a, b, rtol=8 * 2.0**-23, atol=16 * 2.0**-23 * scale)

    close(got.data, want)
    for g, wg in zip(got_g, want_g, strict=True):
        assert g.format.name == "fp32"
        close(g.data, wg)


# ---- low precision ---------------------------------------------------------------------------

NP = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}

# ops whose output is one rounding of the float64 result (elementwise and composite ops)
ROUND_ONCE = [c for c in CASES if c[0].split("_")[0] in (
    "avg", "adaptive", "sdpa", "rms", "group", "batch", "softplus", "log1p", "expm1",
    "reciprocal", "maximum", "minimum", "masked", "max", "gelu", "silu", "tanh", "sigmoid",
    "where")]  # fmt: skip


@needs_torch
@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("name,f,specs", ROUND_ONCE, ids=[c[0] for c in ROUND_ONCE])
def test_low_precision_output_is_the_float64_result_rounded_once(name, f, specs, fmt):
    xs = [fpsim.round_to(x, fmt) for x in make_inputs(specs, seed=8)]  # values of the format
    out = f("fpsim", *[tensor(x, fmt) for x in xs])
    assert out.format.name == fmt
    want = f("torch", *[torch.tensor(x, dtype=torch.float64) for x in xs]).numpy()
    want = want.astype(NP[fmt]).astype(np.float64)
    np.testing.assert_array_equal(out.data.astype(np.float64), want)


PRODUCTS = [c for c in CASES if c[0].split("_")[0] in ("conv2d", "conv1d", "bmm", "baddbmm",
                                                       "einsum")]  # fmt: skip


@needs_torch
@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("name,f,specs", PRODUCTS, ids=[c[0] for c in PRODUCTS])
def test_low_precision_products_accumulate_in_fp32_and_round_once(name, f, specs, fmt):
    # integer-valued operands: the fp32 accumulation is exact, so one rounding of the exact
    # (float64) result is the only rounding; an fp16 accumulator would round on the way
    rng = np.random.default_rng(9)
    xs = [rng.integers(-8, 9, s if isinstance(s[0], int) else s[0]).astype(np.float64)
          for s in specs]  # fmt: skip
    ts = [tensor(x, fmt, requires_grad=True) for x in xs]
    out = f("fpsim", *ts)
    want = f("torch", *[torch.tensor(x, dtype=torch.float64) for x in xs]).numpy()
    np.testing.assert_array_equal(out.data, want.astype(NP[fmt]).astype(np.float64))
    g = rng.integers(-4, 5, out.shape).astype(np.float64)
    out.backward(tensor(g, fmt))
    tts = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs]
    f("torch", *tts).backward(torch.tensor(g))
    for t, tt in zip(ts, tts, strict=True):
        assert t.grad.format.name == fmt
        np.testing.assert_array_equal(t.grad.data, tt.grad.numpy().astype(NP[fmt]).astype(float))


@needs_torch
@pytest.mark.parametrize("name,f,specs", PRODUCTS, ids=[c[0] for c in PRODUCTS])
def test_bf16_products_within_one_ulp_of_torch_bf16(name, f, specs):
    xs = [fpsim.round_to(x, "bf16") for x in make_inputs(specs, seed=10)]
    got = f("fpsim", *[tensor(x, "bf16") for x in xs]).data.astype(np.float64)
    want = f("torch", *[torch.tensor(x, dtype=torch.bfloat16) for x in xs]).double().numpy()
    assert np.all(np.abs(got - want) <= fpsim.ulp(want, "bf16"))


# ---- errors ----------------------------------------------------------------------------------


def test_bad_arguments_raise_clear_errors():
    x = fpsim.randn(1, 2, 4, 4, generator=0)
    with pytest.raises(RuntimeError, match="expected input"):
        F.conv2d(x, fpsim.randn(3, 3, 3, 3, generator=1))  # 3 input channels wanted, 2 given
    with pytest.raises(RuntimeError, match="same format"):
        F.conv2d(x, fpsim.randn(3, 2, 3, 3, generator=1, format="bf16"))
    with pytest.raises(ValueError, match="strided"):
        F.conv2d(x, fpsim.randn(3, 2, 3, 3, generator=1), stride=2, padding="same")
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(RuntimeError, match="Expected 3D .unbatched. or 4D"):
        F.max_pool2d(x.reshape(2, 16), 2)
    with pytest.raises(NotImplementedError, match="diagonal"):
        F.einsum("ii->i", fpsim.randn(3, 3, generator=0))
    with pytest.raises(ValueError, match="operand"):
        F.einsum("ij,jk->ik", fpsim.randn(3, 3, generator=0))
    q = fpsim.randn(2, 3, 4, generator=0)
    with pytest.raises(RuntimeError, match="is_causal"):
        F.scaled_dot_product_attention(q, q, q, fpsim.ones(3, 3), is_causal=True)
    with pytest.raises(RuntimeError, match="boolean masks"):
        q.masked_fill(fpsim.ones(2, 3, 4), 0.0)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(fpsim.randn(2, 4, 3, generator=0), 3)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(fpsim.randn(1, 4, generator=0), None, None, training=True)
    with pytest.raises(RuntimeError, match="label_smoothing"):
        F.cross_entropy(fpsim.randn(2, 3, generator=0), tensor([0, 1]), label_smoothing=1.5)


@needs_torch
def test_fully_masked_attention_row_and_max_pool_nan_like_torch():
    # a query row with every key masked: zeros in both (PyTorch's safe softmax), no gradient
    q = np.random.default_rng(0).standard_normal((1, 2, 3))
    m = np.array([[True, False], [False, False]])
    fq = tensor(q, requires_grad=True)
    got = F.scaled_dot_product_attention(fq, fq, fq, tensor(m))
    tq = torch.tensor(q, dtype=torch.float32, requires_grad=True)
    want = tf.scaled_dot_product_attention(tq, tq, tq, torch.tensor(m))
    assert np.all(got.numpy(force=True)[0, 1] == 0) and np.all(want.detach().numpy()[0, 1] == 0)
    np.testing.assert_allclose(got.numpy(force=True), want.detach().numpy(), rtol=1e-6)
    got.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(fq.grad.numpy(), tq.grad.numpy(), rtol=1e-5, atol=1e-6)
    # max pooling: a NaN in the window wins; the gradient goes where PyTorch sends it
    x = np.array([[[[1.0, np.nan, 3.0, 3.0], [np.nan, 0.0, 3.0, 2.0]]]])
    fx, tx = tensor(x, requires_grad=True), torch.tensor(x, dtype=torch.float32, requires_grad=True)
    fy, ty = F.max_pool2d(fx, 2), tf.max_pool2d(tx, 2)
    assert np.array_equal(fy.numpy(force=True), ty.detach().numpy(), equal_nan=True)
    fy.sum().backward()
    ty.sum().backward()
    assert np.array_equal(fx.grad.numpy(), tx.grad.numpy())


def test_einsum_and_conv_hand_computed():
    a = tensor([[1.0, 2.0], [3.0, 4.0]])
    assert F.einsum("ij,jk->ik", a, a).tolist() == [[7.0, 10.0], [15.0, 22.0]]
    assert F.einsum("ij->j", a).tolist() == [4.0, 6.0]
    assert F.einsum("ij,ij->", a, a).item() == 30.0
    x = tensor(np.arange(9.0).reshape(1, 1, 3, 3))
    k = tensor(np.array([[[[1.0, 0.0], [0.0, -1.0]]]]))  # x[i, j] - x[i+1, j+1]
    assert F.conv2d(x, k).tolist() == [[[[-4.0, -4.0], [-4.0, -4.0]]]]
    assert F.conv2d(x, k, padding=1).numpy()[0, 0, 0, 0] == -0.0  # 0 - x[0, 0]
    # one window over rows/cols -1..1: 0 + 1 + 3 + 4 = 8, over 4 real elements or all 9
    assert F.avg_pool2d(x, 3, padding=1, count_include_pad=False).item() == 2.0
    assert math.isclose(F.avg_pool2d(x, 3, padding=1).item(), 8 / 9, rel_tol=1e-15)


BIT_EXACT = [
    ("maximum", lambda lib, a, b: (F if lib == "fpsim" else torch).maximum(a, b), [(3, 4), (4,)]),
    ("minimum", lambda lib, a, b: (F if lib == "fpsim" else torch).minimum(a, b), [(3, 4), (3, 4)]),
    ("masked_fill", lambda lib, x: x.masked_fill(_t(lib, MASK), 0.3), [(3, 4)]),
    ("cumsum", lambda lib, x: x.cumsum(1), [(4, 300)]),
    ("max_pool2d", lambda lib, x: (F if lib == "fpsim" else tf).max_pool2d(x, 2),
     [(2, 3, 6, 8)]),
    ("max_pool2d_overlapping", lambda lib, x: (F if lib == "fpsim" else tf).max_pool2d(
        x, 3, 2, 1), [(2, 3, 7, 7)]),
    ("embedding", lambda lib, w: (F if lib == "fpsim" else tf).embedding(
        _t(lib, [[0, 2], [3, 2]]), w), [(4, 3)]),
    ("relu", lambda lib, x: x.relu(), [(5, 6)]),
    ("clamp", lambda lib, x: x.clamp(-0.3, 0.7), [(5, 6)]),
    ("where", lambda lib, a, b: (fpsim if lib == "fpsim" else torch).where(a > b, a, b),
     [(3, 4), (3, 4)]),
    ("scalar arithmetic", lambda lib, x: (0.3 - x) * 1.7 / 0.3 + 2.1, [(50,)]),
    ("number / x", lambda lib, x: 1.3 / x, [((50,), 0.5, 2)]),
]  # fmt: skip


# where max-pooling windows overlap, PyTorch rounds the input gradient to fp16/bf16 at each
# addition; fpsim adds in float64 and rounds once (its rule for scatter-adds): fp32 only
EXACT_PARAMS = [(fmt, *case) for case in BIT_EXACT for fmt in ("fp32", "bf16", "fp16")
                if fmt == "fp32" or case[0] != "max_pool2d_overlapping"]  # fmt: skip


@needs_torch
@pytest.mark.parametrize("fmt,name,f,specs", EXACT_PARAMS,
                         ids=[f"{p[1]}-{p[0]}" for p in EXACT_PARAMS])  # fmt: skip
def test_ops_that_are_bit_identical_to_torch(fmt, name, f, specs):
    """What the README claims bit for bit: values and gradients equal torch's exactly."""
    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[fmt]
    xs = [fpsim.round_to(x, fmt) for x in make_inputs(specs, seed=11)]
    ts = [tensor(x, fmt, requires_grad=True) for x in xs]
    tts = [torch.tensor(x, dtype=tdt, requires_grad=True) for x in xs]
    out, tout = f("fpsim", *ts), f("torch", *tts)
    assert np.array_equal(out.numpy(force=True), tout.detach().float().numpy())
    g = fpsim.round_to(np.random.default_rng(12).uniform(-1, 1, tout.shape), fmt)
    out.backward(tensor(g, fmt))
    tout.backward(torch.tensor(g, dtype=tdt))
    for t, tt in zip(ts, tts, strict=True):
        assert np.array_equal(t.grad.numpy(), tt.grad.float().numpy()), name
