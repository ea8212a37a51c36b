"""In-place operations (PyTorch's version counter and its "modified by an inplace operation"
check, in-place writes recorded in the graph, the leaf errors) and PyTorch's type promotion with
0-dim tensors (dimensioned > 0-dim > Python number), including ``GradScaler.scale`` of a 0-dim
low-precision loss.

The oracle is a live PyTorch (CPU build) where it is installed -- its error messages, ``_version``
counters, result dtypes, values and gradients -- and hand-derived values otherwise.
"""

import itertools
import re

import numpy as np
import pytest

import fpsim
from fpsim.amp import GradScaler
from fpsim.autograd import functional as F
from fpsim.autograd import no_grad, tensor
from fpsim.formats import bf16, fp16, fp32

FORMATS = ("fp32", "fp16", "bf16", "fp64")
HEAD = (
    "one of the variables needed for gradient computation has been modified by an inplace "
    "operation: "
)


def _torch():
    return pytest.importorskip("torch")


def _dtype(torch, fmt):
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
            "fp64": torch.float64, "int64": torch.int64, "bool": torch.bool}[fmt]  # fmt: skip


def _tt(torch, values, fmt="fp32", requires_grad=False):
    """The torch twin of ``tensor(values, format=fmt)``."""
    return torch.tensor(values, dtype=_dtype(torch, fmt), requires_grad=requires_grad)


def _name(t) -> str:
    """An fpsim or torch tensor's type as one of FORMATS (or int64/bool)."""
    if isinstance(t, fpsim.Tensor):
        return t.format.name if t.format is not None else str(t.data.dtype)
    return {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}.get(
        str(t.dtype).replace("torch.", ""), str(t.dtype).replace("torch.", "")
    )


def _message(fn) -> str:
    with pytest.raises(RuntimeError) as info:
        fn()
    return str(info.value)


_VERSION_MSG = re.compile(
    r"^(\[[^\]]*\[[^\]]*\]\])(, which is output (\d+) of ([^,]+),)? "
    r"(is at version \d+; expected version \d+ instead\.)"
)


def _assert_same_version_error(got: str, want: str) -> None:
    """fpsim's message equals PyTorch's through the version numbers: the tensor's type and shape,
    whether and which output of which node it is, and both versions. (Node names are compared
    where PyTorch's is a plain op name -- ``Mul``, ``Exp``, ``Fill2`` -- without its overload
    number; the hint after the versions is each library's own.)"""
    assert want.startswith(HEAD), want
    assert got.startswith(HEAD), got
    g, w = _VERSION_MSG.match(got[len(HEAD) :]), _VERSION_MSG.match(want[len(HEAD) :])
    assert g is not None and w is not None, (got, want)
    assert g.group(1) == w.group(1), (got, want)
    assert (g.group(2) is None) == (w.group(2) is None), (got, want)
    assert g.group(3) == w.group(3) and g.group(5) == w.group(5), (got, want)
    if w.group(4) and re.fullmatch(r"[A-Za-z]+\d*", w.group(4)):
        assert g.group(4) == re.sub(r"\d+$", "", w.group(4)), (got, want)


# ---- the version counter: a saved tensor modified in place ------------------------------------


def _inplace(t, how, lib):
    """The in-place operation ``how`` on a length-2 tensor ``t`` of either library."""
    if how == "fill_":
        t.fill_(5.0)
    elif how == "zero_":
        t.zero_()
    elif how == "copy_":
        t.copy_(tensor([1.0, 3.0]) if lib == "fpsim" else lib.tensor([1.0, 3.0]))
    elif how == "setitem":
        t[0] = 7.0
    elif how == "twice":
        t.fill_(5.0)
        t.fill_(6.0)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("how", ["fill_", "zero_", "copy_", "setitem", "twice"])
def test_modified_saved_tensor_raises_like_torch(fmt, how):
    """The issue's case: ``y = x*2; z = (y*y).sum(); y.fill_(5); z.backward()``. The product
    saved y; its backward would read the new values (a wrong gradient, silently, before the
    version counter). PyTorch raises; so does fpsim, with the same message."""
    torch = _torch()

    def run(lib, x):
        y = x * 2
        z = (y * y).sum()
        _inplace(y, how, lib)
        z.backward()

    got = _message(lambda: run("fpsim", tensor([1.0, 2.0], format=fmt, requires_grad=True)))
    want = _message(lambda: run(torch, _tt(torch, [1.0, 2.0], fmt, requires_grad=True)))
    _assert_same_version_error(got, want)


def test_modified_leaf_output_and_parameter_messages():
    """A plain tensor saved as the other factor (no grad_fn in the message), a saved *output*
    (exp keeps its result: the message names the node that made it), and a weight updated in
    place under no_grad between two backward passes through one graph."""
    torch = _torch()

    def saved_other(lib, x, w):
        z = (x * w).sum()
        with no_grad() if lib == "fpsim" else torch.no_grad():
            w.fill_(3.0)
        z.backward()

    def saved_output(lib, x, _):
        y = x.exp()
        s = y.sum()
        y.copy_(y * 0 + 1)  # recorded (y requires grad): exp's saved output is now version 1
        s.backward()

    def parameter_update(lib, w, _):
        loss = (w * w).sum()
        if lib == "fpsim":
            loss.backward()
        else:
            loss.backward(retain_graph=True)  # fpsim keeps every graph
        with no_grad() if lib == "fpsim" else torch.no_grad():
            w.copy_(w - 0.5 * w.grad)  # what an optimizer step does
        loss.backward()

    for case in (saved_other, saved_output, parameter_update):
        got = _message(lambda c=case: c("fpsim", tensor([1.0, 2.0], requires_grad=True),
                                        tensor([0.5, 0.25])))  # fmt: skip
        want = _message(lambda c=case: c(torch, _tt(torch, [1.0, 2.0], requires_grad=True),
                                         _tt(torch, [0.5, 0.25])))  # fmt: skip
        _assert_same_version_error(got, want)


def test_unmodified_or_unsaved_tensors_do_not_raise():
    """Hand-derived: add saves nothing, so changing its input after the op is harmless (the
    gradient 2 flows through the old history); a modification *before* the op is just data."""
    x = tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    z = (y + 1).sum()
    with no_grad():
        y.fill_(5.0)
    z.backward()
    assert x.grad.tolist() == [2.0, 2.0]
    w = tensor([1.0, 1.0])
    w.fill_(3.0)
    x.grad = None
    (x * w).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


# which op saves which tensor: (argument shapes, integer arguments, fpsim op, torch op)
def _ops(torch):
    tf = torch.nn.functional
    return {
        "add": ([(3,), (3,)], [], lambda a, b: a + b, lambda a, b: a + b),
        "sub": ([(3,), (3,)], [], lambda a, b: a - b, lambda a, b: a - b),
        "mul": ([(3,), (3,)], [], lambda a, b: a * b, lambda a, b: a * b),
        "mul_scalar": ([(3,)], [], lambda a: a * 2.0, lambda a: a * 2.0),
        "div": ([(3,), (3,)], [], lambda a, b: a / b, lambda a, b: a / b),
        "rdiv": ([(3,)], [], lambda a: 2.0 / a, lambda a: 2.0 / a),
        "pow_scalar": ([(3,)], [], lambda a: a**2.0, lambda a: a**2.0),
        "rpow": ([(3,)], [], lambda a: 2.0**a, lambda a: 2.0**a),
        "pow": ([(3,), (3,)], [], lambda a, b: a**b, lambda a, b: a**b),
        "neg": ([(3,)], [], lambda a: -a, lambda a: -a),
        "exp": ([(3,)], [], lambda a: a.exp(), lambda a: a.exp()),
        "log": ([(3,)], [], lambda a: a.log(), lambda a: a.log()),
        "sqrt": ([(3,)], [], lambda a: a.sqrt(), lambda a: a.sqrt()),
        "rsqrt": ([(3,)], [], lambda a: a.rsqrt(), lambda a: a.rsqrt()),
        "abs": ([(3,)], [], lambda a: a.abs(), lambda a: a.abs()),
        "clamp": ([(3,)], [], lambda a: a.clamp(0.3, 0.7), lambda a: a.clamp(0.3, 0.7)),
        "relu": ([(3,)], [], lambda a: a.relu(), lambda a: a.relu()),
        "gelu": ([(3,)], [], lambda a: F.gelu(a), lambda a: tf.gelu(a)),
        "silu": ([(3,)], [], lambda a: F.silu(a), lambda a: tf.silu(a)),
        "tanh": ([(3,)], [], lambda a: a.tanh(), lambda a: a.tanh()),
        "sigmoid": ([(3,)], [], lambda a: a.sigmoid(), lambda a: a.sigmoid()),
        "matmul": ([(2, 3), (3, 4)], [], lambda a, b: a @ b, lambda a, b: a @ b),
        "mm": ([(2, 3), (3, 4)], [], lambda a, b: F.mm(a, b), lambda a, b: torch.mm(a, b)),
        "linear": ([(2, 3), (4, 3), (4,)], [], F.linear, tf.linear),
        "sum": ([(3,)], [], lambda a: a.sum(), lambda a: a.sum()),
        "mean": ([(3,)], [], lambda a: a.mean(), lambda a: a.mean()),
        "max": ([(3,)], [], lambda a: a.max(), lambda a: a.max()),
        "max_dim": ([(2, 3)], [], lambda a: a.max(1).values, lambda a: a.max(1).values),
        "var": ([(3,)], [], lambda a: a.var(), lambda a: a.var()),
        "softmax": ([(3,)], [], lambda a: a.softmax(-1), lambda a: a.softmax(-1)),
        "log_softmax": ([(3,)], [], lambda a: a.log_softmax(-1), lambda a: a.log_softmax(-1)),
        "logsumexp": ([(2, 3)], [], lambda a: a.logsumexp(-1), lambda a: a.logsumexp(-1)),
        "layer_norm": ([(2, 3), (3,), (3,)], [], lambda x, w, b: F.layer_norm(x, (3,), w, b),
                       lambda x, w, b: tf.layer_norm(x, (3,), w, b)),
        "reshape": ([(2, 3)], [], lambda a: a.reshape(3, 2), lambda a: a.reshape(3, 2)),
        "transpose": ([(2, 3)], [], lambda a: a.transpose(0, 1), lambda a: a.transpose(0, 1)),
        "permute": ([(2, 3)], [], lambda a: a.permute(1, 0), lambda a: a.permute(1, 0)),
        "clone": ([(3,)], [], lambda a: a.clone(), lambda a: a.clone()),
        "index_basic": ([(3,)], [], lambda a: a[1:], lambda a: a[1:]),
        "cat": ([(3,), (3,)], [], lambda a, b: fpsim.cat([a, b]), lambda a, b: torch.cat([a, b])),
        "stack": ([(3,), (3,)], [], lambda a, b: fpsim.stack([a, b]),
                  lambda a, b: torch.stack([a, b])),
        "mse_loss": ([(3,), (3,)], [], F.mse_loss, tf.mse_loss),
        "bce_with_logits": ([(3,), (3,)], [], F.binary_cross_entropy_with_logits,
                            tf.binary_cross_entropy_with_logits),
        "bce": ([(3,), (3,)], [], F.binary_cross_entropy, tf.binary_cross_entropy),
        "cast": ([(3,)], [], lambda a: a.half(), lambda a: a.half()),
        "embedding": ([(5, 3)], [[0, 2, 1, 2]], lambda w, i: F.embedding(i, w),
                      lambda w, i: tf.embedding(i, w)),
        "cross_entropy": ([(4, 3)], [[0, 2, 1, 2]], F.cross_entropy, tf.cross_entropy),
        "nll_loss": ([(4, 3)], [[0, 2, 1, 2]], F.nll_loss, tf.nll_loss),
        "index": ([(5,)], [[0, 2, 1, 2]], lambda x, i: x[i], lambda x, i: x[i]),
        "where": ([(3,), (3,)], [[True, False, True]], lambda a, b, c: fpsim.where(c, a, b),
                  lambda a, b, c: torch.where(c, a, b)),
        "log1p": ([(3,)], [], lambda a: a.log1p(), lambda a: a.log1p()),
        "expm1": ([(3,)], [], lambda a: a.expm1(), lambda a: a.expm1()),
        "reciprocal": ([(3,)], [], lambda a: a.reciprocal(), lambda a: a.reciprocal()),
        "maximum": ([(3,), (3,)], [], F.maximum, torch.maximum),
        "minimum": ([(3,), (3,)], [], F.minimum, torch.minimum),
        "softplus": ([(3,)], [], F.softplus, tf.softplus),
        "cumsum": ([(3,)], [], lambda a: a.cumsum(0), lambda a: a.cumsum(0)),
        "masked_fill": ([(3,)], [[True, False, True]], lambda a, m: a.masked_fill(m, 0.5),
                        lambda a, m: a.masked_fill(m, 0.5)),
        "bmm": ([(2, 2, 3), (2, 3, 2)], [], F.bmm, torch.bmm),
        "baddbmm": ([(2, 2, 2), (2, 2, 3), (2, 3, 2)], [], F.baddbmm, torch.baddbmm),
        "einsum": ([(2, 3), (3, 4)], [], lambda a, b: F.einsum("ij,jk->ik", a, b),
                   lambda a, b: torch.einsum("ij,jk->ik", a, b)),
        "conv2d": ([(1, 2, 4, 4), (3, 2, 3, 3), (3,)], [], F.conv2d, tf.conv2d),
        "conv1d": ([(1, 2, 5), (3, 2, 3), (3,)], [], F.conv1d, tf.conv1d),
        "max_pool2d": ([(1, 1, 4, 4)], [], lambda a: F.max_pool2d(a, 2),
                       lambda a: tf.max_pool2d(a, 2)),
        "avg_pool2d": ([(1, 1, 4, 4)], [], lambda a: F.avg_pool2d(a, 2),
                       lambda a: tf.avg_pool2d(a, 2)),
        "adaptive_avg_pool2d": ([(1, 1, 5, 5)], [], lambda a: F.adaptive_avg_pool2d(a, 2),
                                lambda a: tf.adaptive_avg_pool2d(a, 2)),
        "sdpa": ([(1, 2, 3, 4)] * 3, [], F.scaled_dot_product_attention,
                 tf.scaled_dot_product_attention),
        "rms_norm": ([(2, 3), (3,)], [], lambda x, w: F.rms_norm(x, (3,), w),
                     lambda x, w: tf.rms_norm(x, (3,), w)),
        "group_norm": ([(2, 4, 3), (4,), (4,)], [], lambda x, w, b: F.group_norm(x, 2, w, b),
                       lambda x, w, b: tf.group_norm(x, 2, w, b)),
        "batch_norm": ([(4, 3), (3,), (3,)], [],
                       lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                       lambda x, w, b: tf.batch_norm(x, None, None, w, b, training=True)),
    }  # fmt: skip


# Where fpsim raises and PyTorch does not (none: ``2 / x`` is reciprocal(x) * 2 in both, which
# keeps 1/x, not x).
FPSIM_ONLY: set = set()


def _raises(lib, torch, spec, req, target) -> bool:
    shapes, ints, f_op, t_op = spec
    rng = np.random.default_rng(0)
    values = [rng.uniform(0.1, 0.9, s) for s in shapes]
    if lib == "fpsim":
        args = [tensor(v, requires_grad=i in req) for i, v in enumerate(values)]
        args += [tensor(np.array(v)) for v in ints]
        op, grad_off, clone = f_op, no_grad, lambda t: t.clone()
    else:
        args = [torch.tensor(v, dtype=torch.float32, requires_grad=i in req)
                for i, v in enumerate(values)]  # fmt: skip
        args += [torch.tensor(v) for v in ints]
        op, grad_off, clone = t_op, torch.no_grad, lambda t: t.clone()
    out = op(*args)
    with grad_off():
        t = out if target == "out" else args[target]
        t.copy_(clone(t))  # same values, one version more
    try:
        out.sum().backward()
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e), e
        return True
    return False


def test_which_tensors_each_op_saves_matches_torch():
    """For every op, every set of inputs requiring grad and every tensor (each argument, the
    output) modified in place after the op: backward raises in fpsim exactly when it raises in
    PyTorch (which tensors an op keeps for its backward, and under which condition)."""
    torch = _torch()
    diffs = []
    for name, spec in _ops(torch).items():
        n, n_int = len(spec[0]), len(spec[1])
        for r in range(1, n + 1):
            for req in itertools.combinations(range(n), r):
                for target in [*range(n + n_int), "out"]:
                    got = _raises("fpsim", torch, spec, req, target)
                    want = _raises(torch, torch, spec, req, target)
                    if (name, req, target) in FPSIM_ONLY:
                        want = True
                    if got != want:
                        diffs.append((name, req, target, got, want))
    assert not diffs, diffs


def test_views_share_the_version_counter_like_torch():
    """Views (basic indexing, reshape without a copy, transpose, detach) share one counter with
    their base; copies (clone, a reshape that must copy, advanced indexing) have their own."""
    torch = _torch()

    def versions(lib, x):
        named = {
            "x": x, "row": x[0], "flat": x.reshape(6), "T": x.transpose(0, 1),
            "detached": x.detach(), "clone": x.clone(), "copied": x.transpose(0, 1).reshape(6),
            "picked": x[[0, 1]],
        }  # fmt: skip
        seen = [{k: t._version for k, t in named.items()}]
        named["row"].fill_(2.0)
        seen.append({k: t._version for k, t in named.items()})
        named["copied"].zero_()
        named["picked"].fill_(1.0)
        seen.append({k: t._version for k, t in named.items()})
        named["detached"].copy_(named["clone"])
        named["T"][0] = 3.0
        seen.append({k: t._version for k, t in named.items()})
        return seen

    assert versions("fpsim", fpsim.ones(2, 3)) == versions(torch, torch.ones(2, 3))


def test_a_write_through_a_view_is_caught_by_the_base_graph():
    """A graph saved y; writing into a view of y (under no_grad) bumps the shared counter."""
    torch = _torch()

    def run(lib, x):
        y = x * 2
        z = (y * y).sum()
        with no_grad() if lib == "fpsim" else torch.no_grad():
            y[1:].fill_(0.0)
        z.backward()

    got = _message(lambda: run("fpsim", tensor([1.0, 2.0, 3.0], requires_grad=True)))
    want = _message(lambda: run(torch, _tt(torch, [1.0, 2.0, 3.0], requires_grad=True)))
    _assert_same_version_error(got, want)


# ---- in-place writes on tensors that require grad are recorded ----------------------------------


def _recorded_cases(lib, torch):
    T = (lambda v, fmt="fp32", rg=False: tensor(v, format=fmt, requires_grad=rg)) if lib == "fpsim" \
        else (lambda v, fmt="fp32", rg=False: _tt(torch, v, fmt, rg))  # fmt: skip
    zeros = (lambda n: fpsim.zeros(n)) if lib == "fpsim" else (lambda n: torch.zeros(n))

    def fill_then_use(x):  # the filled values do not depend on x: gradient 0 through y
        y = x * 2
        y.fill_(5.0)
        return (y * y).sum() + (y * x).sum()

    def old_history_kept(x):  # z was built before the write: it still flows through x * 2
        y = x * 2
        z = y + 1
        y.zero_()
        return z.sum() + (y + x).sum()

    def copy_into_buffer(x):  # a plain buffer becomes part of the graph
        b = zeros(3)
        b.copy_(x * 3)
        return (b * x).sum()

    def setitem_from_graph(x):
        b = zeros(3)
        b[1:] = x[:2] * 3
        y = x * 1
        y[0] = x[2] * 10
        return (b * x).sum() + (y * y).sum()

    def copy_across_formats(x):
        y = x.half() * 2
        y.copy_(x * 0.1)  # rounded to fp16; the gradient of x*0.1 comes back in fp32
        return (y * y).sum().float()

    def fill_with_a_tensor(x):
        y = x * 1
        y.fill_(x[1] * 4)
        return (y * x).sum()

    return [fill_then_use, old_history_kept, copy_into_buffer, setitem_from_graph,
            copy_across_formats, fill_with_a_tensor], T  # fmt: skip


def test_inplace_writes_on_graph_tensors_are_recorded_like_torch():
    """``fill_``/``zero_``/``copy_``/``t[i] = v`` on a tensor that requires grad (or from one
    that does) become nodes of the graph: gradients equal PyTorch's, in value and format."""
    torch = _torch()
    f_cases, fT = _recorded_cases("fpsim", torch)
    t_cases, tT = _recorded_cases(torch, torch)
    for fc, tc in zip(f_cases, t_cases, strict=True):
        fx, tx = fT([0.5, -1.25, 2.0], rg=True), tT([0.5, -1.25, 2.0], rg=True)
        fl, tl = fc(fx), tc(tx)
        fl.backward()
        tl.backward()
        assert fl.item() == tl.item(), fc.__name__
        assert fx.grad.tolist() == tx.grad.tolist(), (fc.__name__, fx.grad, tx.grad)
        assert _name(fx.grad) == _name(tx.grad)


def test_recorded_write_keeps_grad_fn_and_requires_grad():
    torch = _torch()
    x, tx = tensor([1.0, 2.0], requires_grad=True), _tt(torch, [1.0, 2.0], requires_grad=True)
    b, tb = fpsim.zeros(2), torch.zeros(2)
    b.copy_(x)
    tb.copy_(tx)
    assert (b.requires_grad, b.is_leaf) == (tb.requires_grad, tb.is_leaf) == (True, False)
    assert b._version == tb._version == 1


# ---- leaves --------------------------------------------------------------------------------------


def test_inplace_on_a_leaf_that_requires_grad_raises_like_torch():
    torch = _torch()
    cases = [
        lambda x: x.fill_(1.0),
        lambda x: x.zero_(),
        lambda x: x.copy_(x.detach() * 2),
        lambda x: x.__setitem__(0, 1.0),
        lambda x: x.__setitem__([0], 1.0),
        lambda x: x[1:].fill_(1.0),
        lambda x: x.reshape(3).zero_(),
    ]
    for case in cases:
        got = _message(lambda c=case: c(tensor([1.0, 2.0, 3.0], requires_grad=True)))
        want = _message(lambda c=case: c(_tt(torch, [1.0, 2.0, 3.0], requires_grad=True)))
        assert got == want
    # allowed under no_grad (initialisation, optimizer steps), and counted
    x, tx = (
        tensor([1.0, 2.0, 3.0], requires_grad=True),
        _tt(torch, [1.0, 2.0, 3.0], requires_grad=True),
    )
    with no_grad():
        for case in cases:
            case(x)
    with torch.no_grad():
        for case in cases:
            case(tx)
    assert x._version == tx._version and x.tolist() == tx.tolist()


def test_what_fpsim_does_not_model_raises_instead_of_guessing():
    """PyTorch rewrites a base's history when one of its views is written in place (CopySlices)
    and regenerates a view's history when its base was. fpsim does neither: it raises, so no
    gradient is silently computed through a stale history (hand-checked cases)."""
    x = tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="view"):
        y[1:].fill_(0.0)
    assert y._version == 0 and y.tolist() == [2.0, 4.0, 6.0]  # nothing was written
    v = y[1:]
    y.zero_()  # recorded on y; v's history still points at x * 2
    with pytest.raises(RuntimeError, match="view"):
        (v * 1).sum()
    w = x * 2
    u = w[1:]
    with no_grad():  # not recorded: w keeps its history, and so does the view
        w.zero_()
    (u * 1).sum().backward()
    assert u.tolist() == [0.0, 0.0] and x.grad.tolist() == [0.0, 2.0, 2.0]


# ---- type promotion: dimensioned > 0-dim > Python number ---------------------------------------


def _operands():
    """(label, maker) for each operand kind of the grid; ``maker(torch)`` gives the fpsim
    operand and its torch twin."""
    out = []
    for fmt in FORMATS:
        out.append(
            (
                f"{fmt}[2]",
                lambda torch, f=fmt: (tensor([1.5, -2.25], format=f), _tt(torch, [1.5, -2.25], f)),
            )
        )
        out.append((f"{fmt}[]", lambda torch, f=fmt: (tensor(0.5, format=f), _tt(torch, 0.5, f))))
    out += [
        ("int64[2]", lambda torch: (tensor([3, -2]), torch.tensor([3, -2]))),
        ("int64[]", lambda torch: (tensor(3), torch.tensor(3))),
        ("bool[2]", lambda torch: (tensor([True, False]), torch.tensor([True, False]))),
        ("bool[]", lambda torch: (tensor(True), torch.tensor(True))),
        ("float", lambda torch: (2.5, 2.5)),
        ("int", lambda torch: (3, 3)),
        ("bool", lambda torch: (True, True)),
    ]  # fmt: skip
    return out


BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}


def _values(t):
    return np.asarray(t.tolist() if not isinstance(t, fpsim.Tensor) else t.data, dtype=np.float64)


def test_result_format_follows_torch_promotion_grid():
    """Every pair of operand kinds (dimensioned / 0-dim tensors of fp32, fp16, bf16, fp64,
    int64, bool; Python float, int, bool) under +, -, *, / and where: the result's format and
    shape equal PyTorch's result dtype and shape, and the values are equal."""
    torch = _torch()
    diffs = []
    ops = dict(BINARY)
    ops["where"] = None
    for (la, ma), (lb, mb) in itertools.product(_operands(), repeat=2):
        if la in ("float", "int", "bool") and lb in ("float", "int", "bool"):
            continue
        fa, ta = ma(torch)
        fb, tb = mb(torch)
        for name, op in ops.items():
            try:
                if op is None:
                    want = torch.where(torch.tensor([True, False]), ta, tb)
                else:
                    want = op(ta, tb)
            except (RuntimeError, TypeError):
                continue  # PyTorch refuses (bool - bool)
            if op is None:
                got = fpsim.where(tensor([True, False]), fa, fb)
            else:
                got = op(fa, fb)
            # number / tensor: reciprocal(tensor) * number (two roundings) in both
            same = (_name(got) == _name(want) and tuple(got.shape) == tuple(want.shape)
                    and np.array_equal(_values(got), _values(want), equal_nan=True))  # fmt: skip
            if not same:
                diffs.append((la, lb, name, _name(got), _name(want), got.tolist(), want.tolist()))
    assert not diffs, "\n".join(map(str, diffs))


def test_result_type_of_each_group_against_torch_result_type():
    """torch.result_type over pairs and triples of 0-dim / dimensioned tensors of the four float
    formats: fpsim's ``a * b * c`` format equals it (the rule applied per op, pairwise, as
    PyTorch does)."""
    torch = _torch()
    kinds = [(f, s) for f in FORMATS for s in ((), (2,))]
    for (fa, sa), (fb, sb) in itertools.product(kinds, repeat=2):
        a, b = fpsim.ones(*sa, format=fa), fpsim.ones(*sb, format=fb)
        ta, tb = torch.ones(sa, dtype=_dtype(torch, fa)), torch.ones(sb, dtype=_dtype(torch, fb))
        assert _name(a * b) == _name(torch.empty(0, dtype=torch.result_type(ta, tb))), (
            fa, sa, fb, sb)  # fmt: skip


def test_zero_dim_wider_operand_is_held_like_a_scalar():
    """fp16 [3] * fp32 0-dim 1.00048828125 (1 + 2^-11, a tie in fp16): PyTorch's CPU kernel reads
    the 0-dim operand at full (float32 opmath) precision, like a Python number, so the product
    3.00146484375 rounds up to 3.001953125 in fp16 (casting the operand to fp16 first would
    give 3.0). where() casts (1.00048828125 -> 1.0 in fp16). Hand-derived, and against torch."""
    a = tensor([3.0], format="fp16", requires_grad=True)
    b = tensor(1.00048828125, requires_grad=True)
    c = a * b
    assert c.format == fp16 and c.tolist() == [3.001953125]
    c.sum().backward()
    assert (a.grad.format, a.grad.tolist()) == (fp16, [1.0])  # 1.00048828125 rounded to fp16
    assert (b.grad.format, b.grad.item()) == (fp32, 3.0)
    w = fpsim.where(tensor([True, False]), tensor([2.0, 2.0], format="fp16"), b)
    assert w.format == fp16 and w.tolist() == [2.0, 1.0]
    torch = _torch()
    ta = _tt(torch, [3.0], "fp16", True)
    tb = _tt(torch, 1.00048828125, "fp32", True)
    tc = ta * tb
    tc.sum().backward()
    assert tc.tolist() == c.tolist() and ta.grad.tolist() == a.grad.tolist()
    assert tb.grad.item() == b.grad.item()


def test_mse_loss_promotes_after_broadcasting_like_torch():
    """torch's mse_loss broadcasts its operands before the op, so a 0-dim target counts as
    dimensioned: fp16 input with an fp32 0-dim target is fp32 (unlike fp16 * fp32 0-dim)."""
    torch = _torch()
    for fi, ft in [("fp16", "fp32"), ("fp32", "fp16"), ("bf16", "fp16")]:
        got = F.mse_loss(tensor([1.0, 2.0], format=fi), tensor(0.5, format=ft))
        with pytest.warns(UserWarning):
            want = torch.nn.functional.mse_loss(_tt(torch, [1.0, 2.0], fi), _tt(torch, 0.5, ft))
        assert _name(got) == _name(want) and got.item() == want.item()


# ---- GradScaler.scale of a 0-dim low-precision loss ------------------------------------------


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", [(), (1,), (3,)])
def test_grad_scaler_scale_matches_torch(fmt, shape):
    """PyTorch's scale is a 0-dim float32 tensor: a 0-dim fp16/bf16 loss * scale is a 0-dim fp32
    tensor (2.0 * 2^16 = 131072.0, not fp16 inf); a dimensioned loss keeps its format (the scale
    is the 0-dim operand)."""
    torch = _torch()
    values = np.full(shape, 2.0)
    got = GradScaler().scale(tensor(values, format=fmt, requires_grad=True))
    want = torch.amp.GradScaler("cpu").scale(_tt(torch, values.tolist(), fmt, True))
    assert (_name(got), tuple(got.shape)) == (_name(want), tuple(want.shape))
    assert np.array_equal(_values(got), _values(want))
    outs = GradScaler().scale([tensor(values, format=fmt)])
    touts = torch.amp.GradScaler("cpu").scale([_tt(torch, values.tolist(), fmt)])
    assert (_name(outs[0]), tuple(outs[0].shape)) == (_name(touts[0]), tuple(touts[0].shape))
    if shape == ():
        assert got.format == fp32 and got.item() == 131072.0  # hand-derived


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
@pytest.mark.parametrize("init_scale", [2.0**16, 1024.0])
def test_grad_scaler_step_with_a_0dim_low_precision_loss_matches_torch(fmt, init_scale):
    """A whole iteration: fp32 weights, a 0-dim fp16/bf16 loss, scale -> backward -> step ->
    update. Gradients, weights and the next scale equal PyTorch's (with 2^16, the fp16 loss's
    own gradient 65536 overflows fp16 in both: the step is skipped and the scale backs off)."""
    torch = _torch()
    w = tensor([1.0, 2.0], requires_grad=True)
    tw = _tt(torch, [1.0, 2.0], requires_grad=True)
    c, tc = tensor([3.0, 0.5], format=fmt), _tt(torch, [3.0, 0.5], fmt)
    s, ts = GradScaler(init_scale=init_scale), torch.amp.GradScaler("cpu", init_scale=init_scale)
    opt, topt = fpsim.optim.SGD([w], lr=0.1), torch.optim.SGD([tw], lr=0.1)
    loss, tloss = (w.to(fmt) * c).sum(), (tw.to(_dtype(torch, fmt)) * tc).sum()
    assert loss.shape == () and loss.format.name == fmt
    scaled, tscaled = s.scale(loss), ts.scale(tloss)
    assert scaled.format == fp32 and scaled.item() == tscaled.item()
    scaled.backward()
    tscaled.backward()
    assert w.grad.tolist() == tw.grad.tolist()
    s.step(opt)
    ts.step(topt)
    s.update()
    ts.update()
    assert w.tolist() == tw.tolist() and s.get_scale() == ts.get_scale()
    if fmt == "bf16" or init_scale == 1024.0:
        assert np.isfinite(w.grad.data).all() and w.tolist() != [1.0, 2.0]  # a real step


def test_bf16_gradient_of_scaled_loss_is_finite_hand_derived():
    """Without torch: a 0-dim bf16 loss 2*w (w=1.5) scaled by 2^16 is 196608.0 in fp32 and the
    gradient of w is 2 * 2^16 = 131072.0 (bf16 holds it: it overflowed to inf before)."""
    w = tensor(1.5, format="bf16", requires_grad=True)
    scaled = GradScaler().scale(w * 2)
    assert scaled.format == fp32 and scaled.shape == () and scaled.item() == 196608.0
    scaled.backward()
    assert w.grad.format == bf16 and w.grad.item() == 131072.0
