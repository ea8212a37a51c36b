"""Edges of the autodiff engine where a wrong answer could pass silently (issue 11):
out-of-range and repeated dims, NaN and tied maxima in reduction gradients, out-of-range
indices and class targets, and the rounding of gradients that reach one tensor from several
uses.

Every expectation comes from outside fpsim.autograd: a live PyTorch (tests that need it skip
without it), PyTorch's messages written out by hand, or values derived by hand (numpy float16
step by step, exact Fractions).
"""

from fractions import Fraction
from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest

import fpsim.autograd
from fpsim import nn
from fpsim.autograd import functional as F
from fpsim.autograd import tensor
from fpsim.autograd.dims import reduction_axes, wrap_dim, wrap_dims

NAN, INF = float("nan"), float("inf")


def _fp_lib():
    return SimpleNamespace(
        sum=F.sum, mean=F.mean, var=F.var, max=F.max, logsumexp=F.logsumexp,
        softmax=F.softmax, log_softmax=F.log_softmax, transpose=F.transpose,
        cat=F.cat, stack=F.stack, Flatten=nn.Flatten, tensor=lambda a: tensor(a, "fp32"),
    )  # fmt: skip


def _torch_lib(torch):
    return SimpleNamespace(
        sum=torch.sum, mean=torch.mean, var=torch.var, max=torch.max,
        logsumexp=torch.logsumexp, softmax=torch.softmax, log_softmax=torch.log_softmax,
        transpose=torch.transpose, cat=torch.cat, stack=torch.stack,
        Flatten=torch.nn.Flatten, tensor=lambda a: torch.tensor(a, dtype=torch.float32),
    )  # fmt: skip


# Every op, method, function and module of the engine that takes a dim: (id, call(L, x, d)),
# with L the library (fpsim or torch) and the same call spelled identically in both.
DIM_CASES = [
    ("sum", lambda L, x, d: x.sum(d)),
    ("sum_keepdim", lambda L, x, d: x.sum(d, keepdim=True)),
    ("F.sum", lambda L, x, d: L.sum(x, d)),
    ("mean", lambda L, x, d: x.mean(d)),
    ("F.mean", lambda L, x, d: L.mean(x, d)),
    ("var", lambda L, x, d: x.var(d)),
    ("F.var", lambda L, x, d: L.var(x, d)),
    ("logsumexp", lambda L, x, d: x.logsumexp(d)),
    ("F.logsumexp", lambda L, x, d: L.logsumexp(x, d, keepdim=True)),
    ("max", lambda L, x, d: x.max(d)),
    ("max_keepdim", lambda L, x, d: x.max(d, keepdim=True)),
    ("F.max", lambda L, x, d: L.max(x, d)),
    ("min", lambda L, x, d: x.min(d)),
    ("argmax", lambda L, x, d: x.argmax(d)),
    ("argmin", lambda L, x, d: x.argmin(d, keepdim=True)),
    ("softmax", lambda L, x, d: x.softmax(d)),
    ("F.softmax", lambda L, x, d: L.softmax(x, d)),
    ("log_softmax", lambda L, x, d: x.log_softmax(d)),
    ("F.log_softmax", lambda L, x, d: L.log_softmax(x, d)),
    ("unsqueeze", lambda L, x, d: x.unsqueeze(d)),
    ("squeeze", lambda L, x, d: x.squeeze(d)),
    ("flatten_start", lambda L, x, d: x.flatten(d)),
    ("flatten_end", lambda L, x, d: x.flatten(0, d)),
    ("nn.Flatten_start", lambda L, x, d: L.Flatten(d, -1)(x)),
    ("nn.Flatten_end", lambda L, x, d: L.Flatten(0, d)(x)),
    ("transpose_dim0", lambda L, x, d: x.transpose(d, 0)),
    ("transpose_dim1", lambda L, x, d: x.transpose(-1, d)),
    ("F.transpose", lambda L, x, d: L.transpose(x, 0, d)),
    ("permute", lambda L, x, d: x.permute(d, *range(1, x.ndim))),
    ("cat", lambda L, x, d: L.cat([x, x], d)),
    ("stack", lambda L, x, d: L.stack([x, x], d)),
    ("size", lambda L, x, d: x.size(d)),
]
SHAPES = [(), (2, 3), (2, 1, 3)]


def _outcome(fn):
    """("ok", numpy result) or ("raise", exception type, first line of its message)."""
    try:
        r = fn()
    except Exception as e:  # the exception itself is the result compared
        return ("raise", type(e), str(e).split("\n")[0])
    return ("ok", _np(r))


def _np(r):
    if isinstance(r, tuple):  # torch.return_types.max, fpsim's MaxResult, torch.Size
        return tuple(_np(v) for v in r)
    if hasattr(r, "detach"):
        return r.detach().numpy()
    return np.asarray(r.data if hasattr(r, "data") else r)


def _assert_same_outcome(got, want, types_only=False):
    assert got[0] == want[0], (got, want)
    if got[0] == "raise":
        assert got[1] is want[1], (got, want)
        if not types_only:
            assert got[2] == want[2]
        return
    a, b = got[1], want[1]
    if isinstance(b, tuple):
        assert isinstance(a, tuple) and len(a) == len(b)
        for u, v in zip(a, b, strict=True):
            _assert_same_outcome(("ok", u), ("ok", v))
        return
    assert np.shape(a) == np.shape(b)
    np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=1e-6, equal_nan=True)


def _dims(ndim):
    return sorted(set(range(-ndim - 2, ndim + 2)) | {5, -7})


# permute of a 0-d tensor takes no dims: that pair is not a case
DIM_GRID = [(c, s) for c in DIM_CASES for s in SHAPES if not (c[0] == "permute" and s == ())]


@pytest.mark.filterwarnings("ignore:var\\(\\). degrees of freedom")  # torch, on 1 element
@pytest.mark.parametrize(
    "name,call,shape", [(c[0], c[1], s) for c, s in DIM_GRID],
    ids=[f"{c[0]}-{s}" for c, s in DIM_GRID],
)  # fmt: skip
def test_dim_range_matches_torch(name, call, shape):
    """Each dim in and around the valid range: the same error (type and message) as
    PyTorch, or the same result."""
    torch = pytest.importorskip("torch")
    data = np.arange(1.0, 1.0 + np.prod(shape, dtype=int)).reshape(shape) / 4
    fl, tl = _fp_lib(), _torch_lib(torch)
    for d in _dims(len(shape)):
        got = _outcome(partial(call, fl, fl.tensor(data), d))
        want = _outcome(partial(call, tl, tl.tensor(data), d))
        _assert_same_outcome(got, want)


# dims lists: (id, call(x, dims)) on the ops that take several dims at once
DIMS_CASES = [
    ("sum", lambda x, d: x.sum(d)),
    ("mean", lambda x, d: x.mean(d, keepdim=True)),
    ("var", lambda x, d: x.var(d)),
    ("logsumexp", lambda x, d: x.logsumexp(d)),
    ("squeeze", lambda x, d: x.squeeze(d)),
]
DIMS = [(1, 1), (1, -1), (-1, 0, -1), (0, 5), (0, -1), (0,), [0, 1], (), []]


@pytest.mark.filterwarnings("ignore:var\\(\\). degrees of freedom")  # torch, on 1 element
@pytest.mark.parametrize("shape", [(), (2, 1, 3)], ids=str)
@pytest.mark.parametrize("name,call", DIMS_CASES, ids=[c[0] for c in DIMS_CASES])
def test_dim_lists_match_torch(name, call, shape):
    """Repeated dims raise PyTorch's RuntimeError; an empty list reduces every dim (squeezes
    none)."""
    torch = pytest.importorskip("torch")
    data = np.arange(1.0, 1.0 + np.prod(shape, dtype=int)).reshape(shape) / 4
    for dims in DIMS:
        got = _outcome(partial(call, tensor(data, "fp32"), dims))
        want = _outcome(partial(call, torch.tensor(data, dtype=torch.float32), dims))
        if name == "logsumexp" and not list(dims) and shape:
            # PyTorch's logsumexp(dim=()) means every dim (its output shape is 0-d) but its
            # kernel then fails ("output with shape [] doesn't match the broadcast shape")
            assert want[0] == "raise" and "broadcast shape" in want[2]
            every = tuple(range(len(shape)))
            want = _outcome(partial(call, torch.tensor(data, dtype=torch.float32), every))
        _assert_same_outcome(got, want)


@pytest.mark.parametrize("bad", [1.0, "1", True, None, np.float64(1.0)], ids=repr)
@pytest.mark.parametrize("name,call", DIM_CASES, ids=[c[0] for c in DIM_CASES])
def test_non_integer_dim_is_a_type_error(name, call, bad):
    """A float, string or bool dim is refused with a TypeError, never rounded or wrapped.
    (``None`` is fpsim's "every dim" for the reductions, argmax, squeeze and size.)"""
    x = tensor(np.ones((2, 3)))
    if bad is None and name in ("sum", "sum_keepdim", "F.sum", "mean", "F.mean", "var",
                                "F.var", "logsumexp", "F.logsumexp", "max", "max_keepdim",
                                "F.max", "min", "argmax", "argmin", "size",
                                "squeeze"):  # fmt: skip
        return
    with pytest.raises(TypeError, match="must be int"):
        call(_fp_lib(), x, bad)
    torch = pytest.importorskip("torch")
    if name in ("var", "F.var") and bad is True:
        return  # torch reads var(True) as var(unbiased=True)
    with pytest.raises(TypeError):
        call(_torch_lib(torch), torch.ones(2, 3), bad)


def test_dim_errors_hand_written():
    """PyTorch's messages, written out (no torch needed)."""
    x = tensor(np.arange(6.0).reshape(2, 3))
    z = tensor(2.0)
    msg = "Dimension out of range (expected to be in range of [{}, {}], but got {})"
    cases = [
        (lambda: x.sum(5), IndexError, msg.format(-2, 1, 5)),
        (lambda: x.mean(-3), IndexError, msg.format(-2, 1, -3)),
        (lambda: x.var(2), IndexError, msg.format(-2, 1, 2)),
        (lambda: x.logsumexp(5), IndexError, msg.format(-2, 1, 5)),
        (lambda: x.max(2), IndexError, msg.format(-2, 1, 2)),
        (lambda: x.argmin(2), IndexError, msg.format(-2, 1, 2)),
        (lambda: x.softmax(2), IndexError, msg.format(-2, 1, 2)),
        (lambda: x.unsqueeze(3), IndexError, msg.format(-3, 2, 3)),
        (lambda: x.unsqueeze(-4), IndexError, msg.format(-3, 2, -4)),
        (lambda: x.squeeze(2), IndexError, msg.format(-2, 1, 2)),
        (lambda: x.flatten(0, 5), IndexError, msg.format(-2, 1, 5)),
        (lambda: x.transpose(0, 2), IndexError, msg.format(-2, 1, 2)),
        (lambda: x.permute(-3, 0), IndexError, msg.format(-2, 1, -3)),
        (lambda: F.cat([x, x], 2), IndexError, msg.format(-2, 1, 2)),
        (lambda: F.stack([x, x], 3), IndexError, msg.format(-3, 2, 3)),
        (lambda: x.size(2), IndexError, msg.format(-2, 1, 2)),
        (lambda: z.sum(1), IndexError, msg.format(-1, 0, 1)),
        (lambda: z.unsqueeze(1), IndexError, msg.format(-1, 0, 1)),
        (lambda: z.size(0), IndexError, "Dimension specified as 0 but tensor has no dimensions"),
        (lambda: x.sum((1, -1)), RuntimeError, "dim 1 appears multiple times in the list of dims"),
        (lambda: z.mean((0, -1)), RuntimeError, "dim 0 appears multiple times in the list of dims"),
        (lambda: x.permute(1, 1), RuntimeError, "permute(): duplicate dims are not allowed."),
        (lambda: x.flatten(1, 0), RuntimeError,
         "flatten() has invalid args: start_dim cannot come after end_dim"),
        (lambda: F.cat([z, z]), RuntimeError,
         "zero-dimensional tensor (at position 0) cannot be concatenated"),
        (lambda: tensor(np.ones((2, 3, 4))).t(), RuntimeError,
         "t() expects a tensor with <= 2 dimensions, but self is 3D"),
    ]  # fmt: skip
    for fn, exc, text in cases:
        with pytest.raises(exc) as info:
            fn()
        assert str(info.value) == text


def test_valid_dims_hand_checked():
    """The in-range dims still work, 0-d tensors included (dims -1 and 0, as PyTorch)."""
    x = tensor(np.arange(6.0).reshape(2, 3))
    z = tensor(2.0)
    assert x.sum(-1).tolist() == [3.0, 12.0] and x.sum(()).item() == 15.0
    assert x.sum([]).item() == 15.0 and x.mean(()).item() == 2.5
    assert x.unsqueeze(-1).shape == (2, 3, 1) and x.unsqueeze(2).shape == (2, 3, 1)
    assert x.flatten(-1, -1).shape == (2, 3) and x.flatten().shape == (6,)
    assert tensor(np.ones((1, 2, 1))).squeeze((0, -1)).shape == (2,)
    assert x.t().shape == (3, 2) and tensor([1.0, 2.0]).t().shape == (2,) and z.t().shape == ()
    for d in (0, -1):
        assert z.sum(d).item() == 2.0 and z.unsqueeze(d).shape == (1,)
        assert z.softmax(d).item() == 1.0 and z.log_softmax(d).item() == 0.0
        assert z.logsumexp(d).item() == 2.0 and z.squeeze(d).shape == ()
        assert z.max(d).values.item() == 2.0 and z.max(d).indices.item() == 0
        assert z.argmin(d).item() == 0 and z.flatten(d).shape == (1,)
        assert z.transpose(d, 0).shape == () and F.stack([z, z], d).shape == (2,)


def test_wrap_dim_helpers():
    """The ports of maybe_wrap_dim and of the duplicate check, on their own."""
    assert [wrap_dim(d, 3) for d in (-3, -1, 0, 2)] == [0, 2, 0, 2]
    assert wrap_dim(np.int64(-1), 2) == 1
    assert wrap_dim(0, 0) == 0 and wrap_dim(-1, 0) == 0
    with pytest.raises(IndexError, match=r"\[-1, 0\], but got 1"):
        wrap_dim(1, 0)
    with pytest.raises(IndexError, match="no dimensions"):
        wrap_dim(0, 0, wrap_scalar=False)
    with pytest.raises(TypeError, match="argument 'start_dim' must be int, not float"):
        wrap_dim(1.0, 2, arg="start_dim")
    assert wrap_dims([2, 0, -2], 3) == (2, 0, 1)
    with pytest.raises(RuntimeError, match="dim 2 appears multiple times"):
        wrap_dims([2, -1], 3)
    assert reduction_axes(None, 2) == (0, 1) and reduction_axes((-1, 0), 2) == (0, 1)
    assert reduction_axes((), 2) == (0, 1) and reduction_axes((), 2, empty_means_all=False) == ()
    assert reduction_axes(-1, 0) == () and reduction_axes(0, 0) == ()


# ---- reductions: where the gradient of a NaN or a tie lands ----------------------------------

GRAD_CASES = [
    ("max_all_nan", lambda x: x.max(), [1.0, NAN, 3.0, NAN]),
    ("max_all_neg_nan", lambda x: x.max(), [-1.0, NAN, -3.0]),
    ("max_all_tie3", lambda x: x.max(), [3.0, 1.0, 3.0, 3.0]),
    ("max_all_inf_tie", lambda x: x.max(), [INF, INF, 1.0]),
    ("max_all_2d_nan", lambda x: x.max(), [[1.0, NAN], [NAN, NAN]]),
    ("min_all_nan", lambda x: x.min(), [1.0, NAN, 3.0]),
    ("min_all_tie", lambda x: x.min(), [1.0, 1.0, 3.0]),
    ("min_all_ninf_tie", lambda x: x.min(), [-INF, 2.0, -INF]),
    ("max_dim_nan", lambda x: x.max(0).values, [1.0, NAN, 3.0, NAN]),
    ("max_dim_tie", lambda x: x.max(0).values, [3.0, 1.0, 3.0]),
    ("max_dim1_2d", lambda x: x.max(1).values, [[1.0, NAN, 3.0], [2.0, 2.0, 1.0]]),
    ("max_dim0_2d_keep", lambda x: x.max(0, keepdim=True).values,
     [[1.0, NAN, 3.0], [2.0, 2.0, 3.0]]),
    ("min_dim_nan", lambda x: x.min(0).values, [3.0, NAN, 1.0, NAN]),
    ("min_dim_tie", lambda x: x.min(-1).values, [[3.0, 1.0, 1.0], [0.0, 0.0, 0.0]]),
    ("logsumexp_nan", lambda x: x.logsumexp(0), [1.0, NAN, 3.0]),
    ("logsumexp_inf", lambda x: x.logsumexp(0), [1.0, INF, 3.0]),
    ("logsumexp_inf_tie", lambda x: x.logsumexp(0), [INF, INF, 1.0]),
    ("logsumexp_all_ninf", lambda x: x.logsumexp(0), [-INF, -INF]),
    ("logsumexp_tie", lambda x: x.logsumexp(1), [[2.0, 2.0, 2.0], [0.0, 0.0, 1.0]]),
    ("var_nan", lambda x: x.var(0), [1.0, NAN, 3.0]),
    ("var_tie", lambda x: x.var(), [2.0, 2.0, 2.0]),
    ("mean_nan", lambda x: x.mean(), [1.0, NAN, 3.0]),
    ("sum_nan", lambda x: x.sum(0), [1.0, NAN, 3.0]),
    ("softmax_nan", lambda x: x.softmax(0), [1.0, NAN, 3.0]),
    ("log_softmax_inf", lambda x: x.log_softmax(0), [1.0, INF, 3.0]),
]  # fmt: skip


@pytest.mark.parametrize("fmt", ["fp32", "fp16"])
@pytest.mark.parametrize("name,fn,data", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_reduction_gradients_with_nan_and_ties_match_torch(name, fn, data, fmt):
    """The forward value and the gradient of every element: NaN, zero and nonzero in the same
    places, and the same values -- bit for bit, except for exp/log (libm and PyTorch's vector
    math may differ in the last bit)."""
    torch = pytest.importorskip("torch")
    tdt = {"fp32": torch.float32, "fp16": torch.float16}[fmt]
    x = tensor(data, fmt, requires_grad=True)
    tx = torch.tensor(data, dtype=tdt, requires_grad=True)
    y, ty = fn(x), fn(tx)
    g = np.linspace(0.5, 1.5, max(ty.numel(), 1)).reshape(tuple(ty.shape))
    y.backward(tensor(g, fmt))
    ty.backward(torch.tensor(g, dtype=tdt))
    pairs = [(y.data, ty.detach().float().numpy()), (x.grad.data, tx.grad.float().numpy())]
    for got, want in pairs:
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(got == 0, want == 0)
        if name.startswith(("logsumexp", "softmax", "log_softmax")):
            ulp = 2.0 ** (-23 if fmt == "fp32" else -10)
            np.testing.assert_allclose(got, want, rtol=2 * ulp, atol=0, equal_nan=True)
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fn", [lambda x: x.max(), lambda x: x.min()], ids=["max", "min"])
def test_full_max_min_gradient_with_inf_upstream_matches_torch(fn):
    """An infinite upstream gradient goes to the extremes only, the others get exactly 0."""
    torch = pytest.importorskip("torch")
    data = [2.0, -1.0, 2.0, -1.0]
    x = tensor(data, requires_grad=True)
    tx = torch.tensor(data, requires_grad=True)
    fn(x).backward(tensor(INF))
    fn(tx).backward(torch.tensor(INF))
    np.testing.assert_array_equal(x.grad.data, tx.grad.numpy())


def test_nan_maximum_gradient_hand_derived():
    """max() over all elements with NaNs: the result is NaN and the gradient is shared evenly
    by the NaNs (PyTorch's evenly_distribute_backward), zero elsewhere -- not NaN everywhere."""
    x = tensor([1.0, NAN, 3.0, NAN], requires_grad=True)
    y = x.max()
    assert np.isnan(y.item())
    y.backward()
    assert x.grad.tolist() == [0.0, 0.5, 0.0, 0.5]
    x = tensor([[1.0, 5.0], [5.0, NAN]], "fp16", requires_grad=True)
    x.min().backward()
    assert x.grad.tolist() == [[0.0, 0.0], [0.0, 1.0]]
    x = tensor([3.0, 1.0, 3.0, 3.0], "fp16", requires_grad=True)
    x.max().backward()
    third = float(np.float16(1 / 3))  # 1/3 rounded once to fp16
    assert x.grad.tolist() == [third, 0.0, third, third]
    x = tensor([1.0, NAN, 3.0, NAN], requires_grad=True)
    x.max(0).values.backward()  # along a dim: on the index returned, the first NaN
    assert x.grad.tolist() == [0.0, 1.0, 0.0, 0.0] and x.max(0).indices.item() == 1


# ---- indices and class targets ---------------------------------------------------------------


def test_embedding_index_out_of_range_hand_written():
    w = tensor(np.arange(8.0).reshape(4, 2), requires_grad=True)
    for idx in ([0, -1], [4], [[1, 2], [3, 9]], np.array([-5])):
        with pytest.raises(IndexError) as info:
            F.embedding(tensor(idx) if isinstance(idx, list) else idx, w)
        assert str(info.value) == "index out of range in self"
    emb = nn.Embedding(3, 2)
    with pytest.raises(IndexError, match="index out of range in self"):
        emb(tensor([3]))
    assert F.embedding(tensor([3, 0]), w).tolist() == [[6.0, 7.0], [0.0, 1.0]]
    assert F.embedding(tensor(np.zeros((2, 0), np.int64)), w).shape == (2, 0, 2)


@pytest.mark.parametrize("idx", [[0.0, 1.0], [True, False], [1.5]], ids=str)
def test_embedding_refuses_non_integer_indices(idx):
    """Float and bool index tensors are refused with PyTorch's wording (RuntimeError)."""
    w = tensor(np.arange(8.0).reshape(4, 2), requires_grad=True)
    prefix = (
        "Expected tensor for argument #1 'indices' to have one of the following scalar "
        "types: Long, Int; but got"
    )
    for arg in (tensor(idx), np.asarray(idx)):
        with pytest.raises(RuntimeError) as info:
            F.embedding(arg, w)
        assert str(info.value).startswith(prefix)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError) as info:
        torch.nn.functional.embedding(torch.tensor(idx), torch.zeros(4, 2))
    assert str(info.value).startswith(prefix)


@pytest.mark.parametrize("idx", [[0, -1], [4], [-5, 0], [1, 3]], ids=str)
def test_embedding_indices_match_torch(idx):
    torch = pytest.importorskip("torch")
    w = np.arange(8.0).reshape(4, 2)
    got = _outcome(lambda: F.embedding(tensor(idx), tensor(w)))
    want = _outcome(lambda: torch.nn.functional.embedding(torch.tensor(idx), torch.tensor(w)))
    _assert_same_outcome(got, want)


TARGET_CASES = [
    ((3, 5), [0, 5, 1], {}),
    ((3, 5), [0, -1, 1], {}),
    ((3, 5), [0, -7, 9], {}),
    ((3, 5), [0, 9, -7], {"reduction": "sum"}),
    ((3, 5), [0, -100, 1], {}),
    ((3, 5), [0, 7, 1], {"ignore_index": 7}),
    ((3, 5), [0, -3, 1], {"ignore_index": 2}),
    ((3, 5), [0, 5, 1], {"reduction": "none"}),
    ((3, 5), [-100, -100, -100], {"reduction": "none"}),
    ((5,), 5, {}),
    ((5,), -1, {}),
    ((5,), 4, {}),
]


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("shape,target,kw", TARGET_CASES, ids=lambda v: str(v).replace(" ", ""))
def test_class_targets_out_of_range_match_torch(loss, shape, target, kw):
    """A target outside [0, C) that is not ignore_index raises PyTorch's IndexError, naming the
    first such target; valid ones give PyTorch's loss."""
    torch = pytest.importorskip("torch")
    x = np.linspace(-1.0, 1.0, int(np.prod(shape))).reshape(shape)
    got = _outcome(lambda: getattr(F, loss)(tensor(x), tensor(target), **kw))
    want = _outcome(
        lambda: getattr(torch.nn.functional, loss)(
            torch.tensor(x, dtype=torch.float32), torch.tensor(target), **kw
        )
    )
    _assert_same_outcome(got, want)


def test_class_targets_out_of_range_hand_written():
    x = tensor(np.zeros((3, 5)))
    for fn in (F.cross_entropy, F.nll_loss):
        for t, bad in (([0, 5, 1], 5), ([0, -1, 9], -1), ([2, 3, -100, -2], -2)):
            xs = x if len(t) == 3 else tensor(np.zeros((4, 5)))
            with pytest.raises(IndexError) as info:
                fn(xs, tensor(t))
            assert str(info.value) == f"Target {bad} is out of bounds."
        assert fn(x, tensor([4, 0, -100])).item() == pytest.approx(
            np.log(5) if fn is F.cross_entropy else 0.0
        )


def test_index_out_of_range_raises_like_torch():
    """Indexing already refuses out-of-range integers (numpy's IndexError, as PyTorch's);
    negative in-range ones count from the end in both."""
    torch = pytest.importorskip("torch")
    data = np.arange(6.0).reshape(2, 3)
    for idx in (5, -3, (slice(None), 3), [0, 5], [0, -3], [0, -1], -2):
        fi, ti = (tensor(idx), torch.tensor(idx)) if isinstance(idx, list) else (idx, idx)
        got = _outcome(partial(tensor(data).__getitem__, fi))
        want = _outcome(partial(torch.tensor(data).__getitem__, ti))
        _assert_same_outcome(got, want, types_only=True)


# ---- gradients from several uses: one rounding per addition ----------------------------------

# three fp16 gradient contributions whose sum rounds differently once than per addition, the
# same for every order of the additions (so the engine's order does not matter):
# exact sum 2 + 2^-10 + 2^-12 = 2 + 0.625 ulp -> 2 + 2^-9 when rounded once; per addition every
# order reaches a tie at 2 + 2^-10 (half an ulp above 2), which rounds to even: 2.
USES = (2.0**-12, 1.0, 1.0 + 2.0**-10)


def _per_add(values):
    acc = np.float16(values[0])
    for v in values[1:]:
        acc = np.float16(float(acc) + v)  # exact in float64, then one fp16 rounding
    return float(acc)


def test_gradient_of_several_uses_rounds_at_each_addition():
    """``x`` used three times in fp16: its gradient is the contributions added pairwise, each
    addition rounded to fp16 (as PyTorch accumulates), not the exact sum rounded once."""
    import itertools

    once = float(np.float16(float(sum(Fraction(v) for v in USES))))
    per_add = {_per_add(p) for p in itertools.permutations(USES)}
    assert per_add == {2.0} and once == 2.0 + 2.0**-9
    x = tensor(1.0, "fp16", requires_grad=True)
    y = x * USES[0] + x * USES[1] + x * USES[2]
    y.backward()
    assert x.grad.format.name == "fp16" and x.grad.item() == 2.0
    doc = " ".join(fpsim.autograd.__doc__.split())
    assert "summed and rounded once" not in doc
    assert "each addition rounded to its format" in doc


def test_gradient_of_several_uses_matches_torch_fp16():
    torch = pytest.importorskip("torch")
    tx = torch.tensor(1.0, dtype=torch.float16, requires_grad=True)
    (tx * USES[0] + tx * USES[1] + tx * USES[2]).backward()
    x = tensor(1.0, "fp16", requires_grad=True)
    (x * USES[0] + x * USES[1] + x * USES[2]).backward()
    assert x.grad.item() == tx.grad.item() == 2.0
