"""Writes that stand for PyTorch's in-place ops count versions as PyTorch's do.

An optimizer step, ``zero_grad(set_to_none=False)``, the ``nn.init`` functions,
``load_state_dict`` and ``clip_grad_norm_`` write parameters (or gradients) in place in PyTorch,
so a graph that kept the old values refuses a later backward. Each test runs the same sequence
in fpsim and in a live PyTorch (CPU) and asks for the same versions and the same error; the
writes PyTorch has no counterpart of (MasterWeights, GradientRecorder's reference model) are
checked against the copy PyTorch code would use (``param.copy_(...)``, one version).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpsim import amp, nn, optim  # noqa: E402
from fpsim.nn import functional as F  # noqa: E402
from fpsim.stats import GradientRecorder  # noqa: E402


def _head(err: BaseException) -> str:
    """PyTorch's message up to its hint (fpsim's hint names the node instead)."""
    text = str(err)
    return text[: text.index("instead.") + len("instead.")]


def _same_refusal(loss, tloss) -> None:
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as want:
        tloss.backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as got:
        loss.backward()
    assert _head(got.value) == _head(want.value)


OPTIMIZERS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)),
    ("Adam", dict(lr=0.1)),
    ("Adam", dict(lr=0.1, amsgrad=True, weight_decay=0.1)),
    ("AdamW", dict(lr=0.1)),  # weight decay 1e-2: mul_ then addcdiv_, two versions
    ("AdamW", dict(lr=0.1, weight_decay=0.0)),
]


@pytest.mark.parametrize("name,kw", OPTIMIZERS)
def test_optimizer_step_counts_versions_and_refuses_a_stale_backward(name, kw):
    tw = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    w = nn.Parameter([1.0, 2.0])
    topt, opt = getattr(torch.optim, name)([tw], **kw), getattr(optim, name)([w], **kw)
    tloss, loss = (tw * tw).sum(), (w * w).sum()
    tloss.backward(retain_graph=True)
    loss.backward()
    for _ in range(2):
        topt.step()
        opt.step()
        assert w._version == tw._version
    _same_refusal(loss, tloss)


def test_master_weights_step_counts_one_version_of_the_low_precision_parameter():
    """No PyTorch counterpart: the fp16 parameter is written once per step (the master rounded
    into it), as a ``param.copy_(master)`` would be."""
    w = nn.Parameter([1.0, 2.0], format="fp16")
    opt = optim.SGD([w], lr=0.1, master_weights=True)
    loss = (w * w).sum()
    loss.backward()
    opt.step()
    assert w._version == 1
    with pytest.raises(RuntimeError, match=r"\[torch.HalfTensor \[2\]\] is at version 1; expected"):
        loss.backward()


def test_grad_scaler_unscale_keeps_versions_and_step_counts_one():
    tw = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    w = nn.Parameter([1.0, 2.0])
    topt, opt = torch.optim.SGD([tw], lr=0.1), optim.SGD([w], lr=0.1)
    tsc, sc = torch.amp.GradScaler("cpu", init_scale=4.0), amp.GradScaler(init_scale=4.0)
    tsc.scale((tw * tw).sum()).backward()
    sc.scale((w * w).sum()).backward()
    # (PyTorch's backward may already have written its gradient buffer in place: deltas)
    tv, v = tw.grad._version, w.grad._version
    tsc.unscale_(topt)
    sc.unscale_(opt)
    assert (w.grad._version - v, w._version) == (tw.grad._version - tv, tw._version) == (0, 0)
    tsc.step(topt)
    sc.step(opt)
    assert w._version == tw._version == 1


@pytest.mark.parametrize("owner", ["optimizer", "module"])
def test_zero_grad_in_place_counts_a_version_of_the_gradient(owner):
    tm, m = torch.nn.Linear(2, 1), nn.Linear(2, 1)
    tm(torch.ones(1, 2)).sum().backward()
    m(np.ones((1, 2), np.float32)).sum().backward()
    tg, g = tm.weight.grad, m.weight.grad
    tv, v = tg._version, g._version
    if owner == "optimizer":
        torch.optim.SGD(tm.parameters(), lr=0.1).zero_grad(set_to_none=False)
        optim.SGD(m.parameters(), lr=0.1).zero_grad(set_to_none=False)
    else:
        tm.zero_grad(set_to_none=False)
        m.zero_grad(set_to_none=False)
    assert m.weight.grad is g and tm.weight.grad is tg
    assert g._version - v == tg._version - tv == 1
    assert g.data.tolist() == tg.tolist() == [[0.0, 0.0]]


INITS = [
    ("uniform_", {}),
    ("normal_", {}),
    ("zeros_", {}),
    ("ones_", {}),
    ("kaiming_uniform_", {}),
    ("kaiming_normal_", {}),
    ("xavier_uniform_", {}),
    ("xavier_normal_", {}),
]


@pytest.mark.parametrize("name,kw", INITS)
def test_init_functions_count_a_version(name, kw):
    tw = torch.nn.Parameter(torch.ones(3, 4))
    w = nn.Parameter(np.ones((3, 4), np.float32))
    tloss, loss = (tw * tw).sum(), (w * w).sum()
    getattr(torch.nn.init, name)(tw, **kw)
    getattr(nn.init, name)(w, **kw)
    assert w._version == tw._version == 1
    _same_refusal(loss, tloss)


def test_load_state_dict_counts_a_version_of_each_parameter():
    tm, m = torch.nn.Linear(2, 1), nn.Linear(2, 1)
    tloss, loss = (tm.weight * tm.weight).sum(), (m.weight * m.weight).sum()
    # both constructors initialise in place (one version each); loading adds one more
    assert [p._version for p in m.parameters()] == [p._version for p in tm.parameters()]
    tm.load_state_dict(torch.nn.Linear(2, 1).state_dict())
    m.load_state_dict(nn.Linear(2, 1, seed=1).state_dict())
    assert [p._version for p in m.parameters()] == [p._version for p in tm.parameters()]
    assert [p._version for p in m.parameters()] == [2, 2]
    _same_refusal(loss, tloss)


@pytest.mark.parametrize("max_norm", [0.1, 100.0])  # clipped, and not (coef 1: still a write)
def test_clip_grad_norm_counts_a_version_of_each_gradient(max_norm):
    tw = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    w = nn.Parameter([3.0, 4.0])
    (tw * tw).sum().backward()
    (w * w).sum().backward()
    tv, v = tw.grad._version, w.grad._version
    torch.nn.utils.clip_grad_norm_([tw], max_norm)
    optim.clip_grad_norm_([w], max_norm)
    assert w.grad._version - v == tw.grad._version - tv == 1


def test_master_weights_copy_counts_a_version_like_copy_():
    """MasterWeights.copy_weights_ stands for ``model_param.copy_(master)`` under no_grad."""
    tw = torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float16))
    tmaster = torch.tensor([0.5, 0.25])
    tloss = (tw * tw).sum()
    with torch.no_grad():
        tw.copy_(tmaster)
    model = nn.Linear(2, 1, bias=False, seed=0)
    mw = amp.MasterWeights(model)
    w = model.weight
    v = w._version  # (its initialisation counted one)
    loss = (w * w).sum()
    mw.masters[0].data[...] = [[0.5, 0.25]]
    mw.copy_weights_()
    assert w.data.tolist() == [[0.5, 0.25]]
    assert w._version - v == tw._version == 1
    with pytest.raises(RuntimeError) as want:
        tloss.backward()
    with pytest.raises(RuntimeError) as got:
        loss.backward()
    # the same error, for a [1, 2] fp16 tensor here and a [2] one there
    assert _head(got.value) == _head(want.value).replace("[2]]", "[1, 2]]").replace(
        f"version {tw._version}; expected version 0", f"version {w._version}; expected version {v}"
    )


def test_gradient_recorder_counts_its_reference_weight_copies():
    """Each record copies the optimizer's weights into the fp32 reference model: one
    ``copy_`` per parameter per record, so the reference parameters are 2 versions further after
    two recorded steps (a graph of the first would refuse a backward)."""
    X, Y = amp.underflow_task(64, seed=0)
    model = amp.underflow_model(seed=0)
    rec = GradientRecorder(model)
    before = [p._version for p in rec._ref.parameters()]  # the copied model's, initialised
    amp.train(model, (X, Y), "fp32", steps=2, lr=1e-3, on_backward=rec.on_backward)
    assert rec.steps == [0, 1]
    assert [p._version - v for p, v in zip(rec._ref.parameters(), before, strict=True)] == [
        2
    ] * len(before)


def test_clamp_without_bounds_is_refused_as_in_torch():
    with pytest.raises(RuntimeError) as want:
        torch.tensor([1.0]).clamp()
    from fpsim import tensor

    for call in (lambda t: t.clamp(), lambda t: t.clip(), lambda t: F.clamp(t)):
        with pytest.raises(RuntimeError) as got:
            call(tensor([1.0], requires_grad=True))
        assert str(got.value) == str(want.value).replace("torch.clamp", "clamp")
    assert tensor([1.0, 5.0]).clamp(max=2.0).data.tolist() == [1.0, 2.0]  # one bound: fine
