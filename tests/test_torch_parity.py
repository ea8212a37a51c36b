"""fpsim.amp against PyTorch itself (CPU build), when it is installed: autocast("cpu") output
formats, GradScaler trajectories and weights bit for bit, bf16 linear numerics.

Skipped cleanly without torch (`pip install torch` to run them). amp.md records what PyTorch
2.13 does; these tests ask a live PyTorch the same questions.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fpsim  # noqa: E402
from fpsim import nn, optim  # noqa: E402
from fpsim.nn import functional as F  # noqa: E402

TORCH_NAME = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16",
              torch.float64: "fp64"}  # fmt: skip


def _pair(shape, seed, fmt="fp32"):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    t = fpsim.tensor(x, format=fmt)
    tt = torch.from_numpy(np.asarray(t.numpy(), dtype=np.float32))
    if fmt == "bf16":
        tt = tt.to(torch.bfloat16)
    return t, tt


# (name, fpsim op, torch op, input formats)
CASES = [
    ("linear", lambda a, b: F.linear(a, b), lambda a, b: torch.nn.functional.linear(a, b),
     ("fp32", "fp32")),
    ("matmul", lambda a, b: a @ b.transpose(0, 1), lambda a, b: a @ b.T, ("fp32", "fp32")),
    ("matmul mixed", lambda a, b: a @ b.transpose(0, 1), lambda a, b: a @ b.T, ("bf16", "fp32")),
    ("softmax", lambda a, b: a.softmax(-1), lambda a, b: a.softmax(-1), ("fp32", "fp32")),
    ("softmax bf16", lambda a, b: a.softmax(-1), lambda a, b: a.softmax(-1), ("bf16", "fp32")),
    ("log_softmax", lambda a, b: a.log_softmax(-1), lambda a, b: a.log_softmax(-1),
     ("bf16", "fp32")),
    ("sum", lambda a, b: a.sum(), lambda a, b: a.sum(), ("bf16", "fp32")),
    ("mean", lambda a, b: a.mean(), lambda a, b: a.mean(), ("bf16", "fp32")),
    ("exp", lambda a, b: a.exp(), lambda a, b: a.exp(), ("bf16", "fp32")),
    ("relu", lambda a, b: a.relu(), lambda a, b: a.relu(), ("bf16", "fp32")),
    ("add mixed", lambda a, b: a + b, lambda a, b: a + b, ("bf16", "fp32")),
    ("mul mixed", lambda a, b: a * b, lambda a, b: a * b, ("bf16", "fp32")),
    ("cat mixed", lambda a, b: fpsim.cat([a, b]), lambda a, b: torch.cat([a, b]),
     ("bf16", "fp32")),
    ("stack mixed", lambda a, b: fpsim.stack([a, b]), lambda a, b: torch.stack([a, b]),
     ("bf16", "fp32")),
    ("mse_loss", lambda a, b: F.mse_loss(a, b), lambda a, b: torch.nn.functional.mse_loss(a, b),
     ("bf16", "bf16")),
    ("gelu bf16", lambda a, b: F.gelu(a), lambda a, b: torch.nn.functional.gelu(a),
     ("bf16", "fp32")),
    ("tanh bf16", lambda a, b: a.tanh(), lambda a, b: a.tanh(), ("bf16", "fp32")),
    ("sqrt", lambda a, b: (a * a).sqrt(), lambda a, b: (a * a).sqrt(), ("bf16", "fp32")),
    ("var", lambda a, b: a.var(), lambda a, b: a.var(), ("bf16", "fp32")),
    ("max", lambda a, b: a.max(), lambda a, b: a.max(), ("bf16", "fp32")),
    ("where mixed", lambda a, b: fpsim.where(a > 0, a, b), lambda a, b: torch.where(a > 0, a, b),
     ("bf16", "fp32")),
    ("nll_loss", lambda a, b: F.nll_loss(a.log_softmax(-1), fpsim.tensor(np.array([1, 2, 3, 0]))),
     lambda a, b: torch.nn.functional.nll_loss(a.log_softmax(-1), torch.tensor([1, 2, 3, 0])),
     ("bf16", "fp32")),
    ("bce_with_logits", lambda a, b: F.binary_cross_entropy_with_logits(a, (b > 0).float()),
     lambda a, b: torch.nn.functional.binary_cross_entropy_with_logits(a, (b > 0).float()),
     ("bf16", "fp32")),
    ("layer_norm mixed", lambda a, b: F.layer_norm(a, (8,), b[0], b[1]),
     lambda a, b: torch.nn.functional.layer_norm(a, (8,), b[0], b[1]), ("bf16", "fp32")),
    ("layer_norm fp32", lambda a, b: F.layer_norm(a, (8,), b[0], b[1]),
     lambda a, b: torch.nn.functional.layer_norm(a, (8,), b[0], b[1]), ("fp32", "fp32")),
]  # fmt: skip


@pytest.mark.parametrize("lowp", ["bf16", "fp16"])
@pytest.mark.parametrize("name,op,top,fmts", CASES, ids=[c[0] for c in CASES])
def test_cpu_autocast_output_format_matches_torch(name, op, top, fmts, lowp):
    a, ta = _pair((4, 8), 0, fmts[0])
    b, tb = _pair((4, 8), 1, fmts[1])
    with fpsim.autocast("cpu", dtype=lowp):
        got = op(a, b).format.name
    with torch.autocast("cpu", dtype=torch.bfloat16 if lowp == "bf16" else torch.float16):
        if name in ("cat mixed", "stack mixed") and lowp == "fp16":
            # PyTorch's PROMOTE ops reject a low-precision input that is not the autocast dtype
            # (bf16 under fp16 autocast); fpsim promotes it like any other (to fp32 here).
            with pytest.raises(RuntimeError, match="Unexpected floating ScalarType"):
                top(ta, tb)
            assert got == "fp32"
            return
        want = TORCH_NAME[top(ta, tb).dtype]
    assert got == want


def test_mixed_layer_norm_outside_autocast_matches_torch():
    x, tx = _pair((4, 8), 4, "bf16")
    w, tw = _pair((8,), 5)
    b, tb = _pair((8,), 6)
    got = F.layer_norm(x, (8,), w, b)
    want = torch.nn.functional.layer_norm(tx, (8,), tw, tb)
    assert got.format.name == TORCH_NAME[want.dtype] == "bf16"
    # both normalise in fp32 and round once to bf16
    diff = np.abs(got.numpy() - want.float().numpy())
    assert np.all(diff <= fpsim.ulp(want.float().numpy(), "bf16"))


def test_cpu_autocast_cross_entropy_matches_torch():
    a, ta = _pair((4, 8), 0, "bf16")
    y = np.array([1, 2, 3, 0])
    with fpsim.autocast("cpu"):
        got = F.cross_entropy(a, fpsim.tensor(y)).format.name
    with torch.autocast("cpu"):
        want = TORCH_NAME[torch.nn.functional.cross_entropy(ta, torch.from_numpy(y)).dtype]
    assert got == want


def test_cpu_autocast_linear_numerics_within_one_bf16_ulp():
    # both accumulate in fp32 and round once to bf16; only the summation order differs
    a, ta = _pair((64, 256), 2)
    b, tb = _pair((32, 256), 3)
    with fpsim.autocast("cpu"):
        got = F.linear(a, b).numpy().astype(np.float64)
    with torch.autocast("cpu"):
        want = torch.nn.functional.linear(ta, tb).float().numpy().astype(np.float64)
    ulp = fpsim.ulp(want, "bf16")
    assert np.all(np.abs(got - want) <= ulp)
    assert np.mean(got == want) > 0.95


def _train_steps(make_scaler, patterns, torch_side):
    """Run one parameter through scale/backward/step/update for each gradient pattern; return
    the scales, growth trackers and weights after every step."""
    scales, trackers, weights = [], [], []
    if torch_side:
        w = torch.nn.Parameter(torch.ones(3))
        opt = torch.optim.SGD([w], lr=0.125)
    else:
        w = nn.Parameter([1.0, 1.0, 1.0])
        opt = optim.SGD([w], lr=0.125)
    scaler = make_scaler()
    for g in patterns:
        opt.zero_grad()
        if torch_side:
            loss = (w * torch.tensor(g, dtype=torch.float32)).sum()
        else:
            loss = (w * fpsim.tensor(np.array(g, dtype=np.float32))).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(float(scaler.get_scale()))
        trackers.append(int(scaler.state_dict()["_growth_tracker"]))
        weights.append(np.array(w.detach().numpy(), np.float32))
    return scales, trackers, weights


INF, NAN = float("inf"), float("nan")
PATTERNS = [[1.0, 2.0, 3.0]] * 4 + [[1.0, INF, 0.0], [0.5, 0.5, NAN]] + [[1e-3, -2.0, 0.25]] * 7


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(init_scale=1024.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=3),
     dict(init_scale=0.1, growth_interval=2), dict(init_scale=2.0**126, growth_interval=1,
                                                    growth_factor=4.0)],
)  # fmt: skip
def test_grad_scaler_matches_torch_bit_for_bit(kwargs):
    ours = _train_steps(lambda: fpsim.GradScaler("cpu", **kwargs), PATTERNS, False)
    theirs = _train_steps(lambda: torch.amp.GradScaler("cpu", **kwargs), PATTERNS, True)
    assert ours[0] == theirs[0]  # scales
    assert ours[1] == theirs[1]  # growth trackers
    for a, b in zip(ours[2], theirs[2], strict=True):  # weights, bit for bit
        assert (a.view(np.uint32) == b.view(np.uint32)).all()


def _misuse_errors(scaler, w, opt):
    """The (type, message) of each misuse PyTorch documents, in one run."""
    out = []

    def attempt(fn):
        try:
            fn()
        except (RuntimeError, AssertionError, ValueError) as e:
            out.append((type(e).__name__, str(e)))
        else:
            out.append(None)

    attempt(lambda: scaler.step(opt))  # before any scale()
    attempt(lambda: scaler.update())
    scaler.scale((w * 2).sum()).backward()
    attempt(lambda: scaler.update())  # no inf checks recorded yet
    scaler.unscale_(opt)
    attempt(lambda: scaler.unscale_(opt))  # twice
    scaler.step(opt)
    attempt(lambda: scaler.step(opt))  # twice
    attempt(lambda: scaler.unscale_(opt))  # after step
    scaler.update()
    attempt(lambda: scaler.load_state_dict({}))
    return out


def test_grad_scaler_errors_match_torch():
    tw = torch.nn.Parameter(torch.ones(2))
    theirs = _misuse_errors(torch.amp.GradScaler("cpu"), tw, torch.optim.SGD([tw], lr=0.1))
    w = nn.Parameter([1.0, 1.0])
    ours = _misuse_errors(fpsim.GradScaler("cpu"), w, optim.SGD([w], lr=0.1))
    assert all(e is not None for e in theirs)
    assert ours == theirs


# ---- the ops of today's models under autocast("cpu"): output and gradient formats ------------
def _lib(lib):
    return (F, fpsim) if lib == "fpsim" else (torch.nn.functional, torch)


# name, f(lib, *tensors), input (shape, format) specs
NN_CASES = [
    ("conv2d", lambda lib, x, w, b: _lib(lib)[0].conv2d(x, w, b, padding=1),
     [((2, 3, 5, 5), "fp32"), ((4, 3, 3, 3), "fp32"), ((4,), "fp32")]),
    ("conv2d bf16 input", lambda lib, x, w: _lib(lib)[0].conv2d(x, w, stride=2),
     [((2, 3, 5, 5), "bf16"), ((4, 3, 3, 3), "fp32")]),
    ("conv1d", lambda lib, x, w: _lib(lib)[0].conv1d(x, w, padding=1),
     [((2, 3, 7), "fp32"), ((4, 3, 3), "fp32")]),
    ("max_pool2d", lambda lib, x: _lib(lib)[0].max_pool2d(x, 2), [((2, 3, 4, 4), "bf16")]),
    ("avg_pool2d", lambda lib, x: _lib(lib)[0].avg_pool2d(x, 2), [((2, 3, 4, 4), "bf16")]),
    ("avg_pool2d fp32", lambda lib, x: _lib(lib)[0].avg_pool2d(x, 2), [((2, 3, 4, 4), "fp32")]),
    ("adaptive_avg_pool2d", lambda lib, x: _lib(lib)[0].adaptive_avg_pool2d(x, 1),
     [((2, 3, 5, 5), "bf16")]),
    ("bmm", lambda lib, a, b: _lib(lib)[1].bmm(a, b), [((2, 3, 4), "fp32"), ((2, 4, 5), "fp32")]),
    ("baddbmm", lambda lib, i, a, b: _lib(lib)[1].baddbmm(i, a, b),
     [((2, 3, 5), "fp32"), ((2, 3, 4), "bf16"), ((2, 4, 5), "fp32")]),
    ("einsum", lambda lib, a, b: _lib(lib)[1].einsum("bhqd,bhkd->bhqk", a, b),
     [((2, 2, 3, 4), "fp32"), ((2, 2, 5, 4), "fp32")]),
    ("sdpa causal", lambda lib, q, k, v: _lib(lib)[0].scaled_dot_product_attention(
        q, k, v, is_causal=True), [((2, 2, 5, 4), "fp32")] * 3),
    ("sdpa float mask", lambda lib, q, k, v, m: _lib(lib)[0].scaled_dot_product_attention(
        q, k, v, m), [((2, 3, 4), "fp32")] * 3 + [((3, 3), "fp32")]),
    ("rms_norm", lambda lib, x, w: _lib(lib)[0].rms_norm(x, (4,), w),
     [((3, 4), "bf16"), ((4,), "fp32")]),
    ("rms_norm fp32", lambda lib, x, w: _lib(lib)[0].rms_norm(x, (4,), w),
     [((3, 4), "fp32"), ((4,), "fp32")]),
    ("group_norm", lambda lib, x, w, b: _lib(lib)[0].group_norm(x, 2, w, b),
     [((2, 4, 3), "bf16"), ((4,), "fp32"), ((4,), "fp32")]),
    ("batch_norm train", lambda lib, x, w, b: _lib(lib)[0].batch_norm(
        x, None, None, w, b, training=True), [((3, 4, 2), "bf16"), ((4,), "fp32"), ((4,), "fp32")]),
    ("batch_norm fp32", lambda lib, x, w, b: _lib(lib)[0].batch_norm(
        x, None, None, w, b, training=True), [((3, 4, 2), "fp32"), ((4,), "fp32"), ((4,), "fp32")]),
    ("softplus", lambda lib, x: _lib(lib)[0].softplus(x), [((3, 4), "bf16")]),
    ("log1p", lambda lib, x: x.abs().log1p(), [((3, 4), "bf16")]),
    ("expm1", lambda lib, x: x.expm1(), [((3, 4), "bf16")]),
    ("reciprocal", lambda lib, x: x.abs().reciprocal(), [((3, 4), "bf16")]),
    ("gelu tanh", lambda lib, x: _lib(lib)[0].gelu(x, approximate="tanh"), [((3, 4), "bf16")]),
    ("silu", lambda lib, x: _lib(lib)[0].silu(x), [((3, 4), "bf16")]),
    ("maximum mixed", lambda lib, a, b: _lib(lib)[1].maximum(a, b),
     [((3, 4), "bf16"), ((3, 4), "fp32")]),
    ("minimum mixed", lambda lib, a, b: _lib(lib)[1].minimum(a, b),
     [((3, 4), "bf16"), ((3, 4), "fp32")]),
    ("cumsum", lambda lib, x: x.cumsum(1), [((3, 4), "bf16")]),
    ("masked_fill", lambda lib, x: x.masked_fill(x > 0, 0.5), [((3, 4), "bf16")]),
    ("where mixed", lambda lib, x, y: _lib(lib)[1].where(x > 0, x, y),
     [((3, 4), "bf16"), ((3, 4), "fp32")]),
    ("embedding", lambda lib, w: _lib(lib)[0].embedding(
        (fpsim.tensor if lib == "fpsim" else torch.tensor)(np.array([0, 2, 1])), w),
     [((4, 3), "fp32")]),
    ("dropout", lambda lib, x: _lib(lib)[0].dropout(x, 0.5), [((3, 4), "bf16")]),
    ("cross_entropy smoothing", lambda lib, x: _lib(lib)[0].cross_entropy(
        x, (fpsim.tensor if lib == "fpsim" else torch.tensor)(np.array([1, -100, 3])),
        label_smoothing=0.1), [((3, 5), "bf16")]),
]  # fmt: skip


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # torch, rms_norm
@pytest.mark.parametrize("lowp", ["bf16", "fp16"])
@pytest.mark.parametrize("name,f,specs", NN_CASES, ids=[c[0] for c in NN_CASES])
def test_cpu_autocast_formats_of_the_model_ops_match_torch(name, f, specs, lowp):
    """Under autocast("cpu"), the output format and the format of every input's gradient."""
    tdt = torch.bfloat16 if lowp == "bf16" else torch.float16
    ours, theirs = [], []
    for i, (shape, fmt) in enumerate(specs):
        a, ta = _pair(shape, 20 + i, fmt)
        ours.append(a.requires_grad_())
        theirs.append(ta.requires_grad_())
    with fpsim.autocast("cpu", dtype=lowp):
        out = f("fpsim", *ours)
    with torch.autocast("cpu", dtype=tdt):
        tout = f("torch", *theirs)
    assert out.format.name == TORCH_NAME[tout.dtype], (out.format.name, tout.dtype)
    out.sum().backward()
    tout.float().sum().backward()
    for a, ta in zip(ours, theirs, strict=True):
        assert a.grad.format.name == TORCH_NAME[ta.grad.dtype], name


def test_bf16_conv2d_under_autocast_within_one_ulp_of_torch():
    # both accumulate in fp32 and round once to bf16; only the summation order differs
    x, tx = _pair((4, 8, 10, 10), 30)
    w, tw = _pair((16, 8, 3, 3), 31)
    with fpsim.autocast("cpu"):
        got = F.conv2d(x, w, padding=1).numpy().astype(np.float64)
    with torch.autocast("cpu"):
        want = torch.nn.functional.conv2d(tx, tw, padding=1).float().numpy().astype(np.float64)
    assert np.all(np.abs(got - want) <= fpsim.ulp(want, "bf16"))
    assert np.mean(got == want) > 0.95
