"""fpsim.optim.lr_scheduler against PyTorch 2.13 itself: the same schedules, step by step, give
the same learning rates bit for bit (Python floats compared with ==), with one or two param
groups; the closed forms of step(epoch), state_dict()/load_state_dict() and resuming, the
step-order warning and the error messages too. Skipped without torch, except the checks that
need no oracle."""

import math
import warnings

import numpy as np
import pytest

import fpsim
from fpsim import nn, optim
from fpsim.optim import lr_scheduler

# ---- without torch -------------------------------------------------------------------------


def _sgd(lrs=(0.1,)):
    groups = [{"params": [nn.Parameter(np.zeros(2))], "lr": lr} for lr in lrs]
    return optim.SGD(groups, lr=lrs[0])


def test_import_paths_as_torch():
    import fpsim.optim.lr_scheduler as m
    from fpsim.optim.lr_scheduler import CosineAnnealingLR

    assert m is lr_scheduler and CosineAnnealingLR is fpsim.optim.lr_scheduler.CosineAnnealingLR
    for name in ("LRScheduler", "StepLR", "CosineAnnealingLR", "LambdaLR", "LinearLR",
                 "SequentialLR"):  # fmt: skip
        assert hasattr(lr_scheduler, name)


def test_step_lr_by_hand():
    opt = _sgd((1.0, 0.5))
    sched = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    assert [g["initial_lr"] for g in opt.param_groups] == [1.0, 0.5]
    seen = []
    for _ in range(5):
        opt.step()
        seen.append(sched.get_last_lr())
        sched.step()
    assert seen == [[1.0, 0.5], [1.0, 0.5], [0.5, 0.25], [0.5, 0.25], [0.25, 0.125]]
    assert sched.last_epoch == 5 and opt.param_groups[1]["lr"] == 0.125


def test_scheduled_lr_drives_the_update():
    # The scheduler only writes group["lr"]; the optimizer reads it at its next step.
    w = nn.Parameter([1.0], format="fp16")
    opt = optim.SGD([w], lr=2.0**-4)
    sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(3):
        w.grad = nn.Parameter([1.0], format="fp16")
        opt.step()
        sched.step()
    assert w.item() == 1.0 - 2.0**-4 - 2.0**-5 - 2.0**-6


def test_no_warning_in_the_right_order_and_a_warning_in_the_wrong_one():
    opt = _sgd()
    sched = lr_scheduler.LinearLR(opt)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.step()
        sched.step()
        sched.get_last_lr()
    opt = _sgd()
    sched = lr_scheduler.LinearLR(opt)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        sched.step()
    with pytest.warns(UserWarning, match="use `get_last_lr\\(\\)`"):
        sched.get_lr()


def test_scheduler_state_saves_with_fpsim_save(tmp_path):
    opt = _sgd((0.1, 0.2))
    warm = lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=4)
    cos = lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    sched = lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[4])
    for _ in range(7):
        opt.step()
        sched.step()
    fpsim.save({"opt": opt.state_dict(), "sched": sched.state_dict()}, tmp_path / "s.fpsim")
    ck = fpsim.load(tmp_path / "s.fpsim")
    assert ck["sched"] == sched.state_dict()

    opt2 = _sgd((0.1, 0.2))
    warm2 = lr_scheduler.LinearLR(opt2, start_factor=0.1, total_iters=4)
    cos2 = lr_scheduler.CosineAnnealingLR(opt2, T_max=10)
    sched2 = lr_scheduler.SequentialLR(opt2, [warm2, cos2], milestones=[4])
    opt2.load_state_dict(ck["opt"])
    sched2.load_state_dict(ck["sched"])
    for _ in range(10):
        opt.step()
        opt2.step()
        sched.step()
        sched2.step()
        assert sched2.get_last_lr() == sched.get_last_lr()
        assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups]


def test_errors():
    with pytest.raises(TypeError, match="list is not an Optimizer"):
        lr_scheduler.StepLR([], step_size=1)
    with pytest.raises(KeyError, match="initial_lr"):
        lr_scheduler.StepLR(_sgd(), step_size=1, last_epoch=3)
    with pytest.raises(ValueError, match="Starting multiplicative factor"):
        lr_scheduler.LinearLR(_sgd(), start_factor=0.0)
    with pytest.raises(ValueError, match="Ending multiplicative factor"):
        lr_scheduler.LinearLR(_sgd(), end_factor=1.5)
    with pytest.raises(ValueError, match="Expected 2 lr_lambdas, but got 1"):
        lr_scheduler.LambdaLR(_sgd((0.1, 0.2)), [lambda e: 1.0])
    opt = _sgd()
    a, b = lr_scheduler.StepLR(opt, 2), lr_scheduler.StepLR(opt, 3)
    with pytest.raises(ValueError, match="one more than the number of milestone points"):
        lr_scheduler.SequentialLR(opt, [a, b], milestones=[])
    with pytest.raises(ValueError, match="same optimizer"):
        lr_scheduler.SequentialLR(opt, [a, lr_scheduler.StepLR(_sgd(), 2)], milestones=[3])


# ---- against PyTorch -------------------------------------------------------------------------

# Each case: schedulers built from a module (fpsim's lr_scheduler or torch's) and an optimizer.
CASES = {
    "step": lambda m, o: m.StepLR(o, step_size=7, gamma=0.1),
    "step gamma 0.7": lambda m, o: m.StepLR(o, step_size=3, gamma=0.7),
    "cosine through the minimum": lambda m, o: m.CosineAnnealingLR(o, T_max=20, eta_min=1e-4),
    "cosine short": lambda m, o: m.CosineAnnealingLR(o, T_max=7),
    "lambda": lambda m, o: m.LambdaLR(o, lambda e: 0.95**e),
    "lambda warmup": lambda m, o: m.LambdaLR(o, lambda e: min(1.0, (e + 1) / 10)),
    "linear warmup": lambda m, o: m.LinearLR(o, start_factor=0.1, total_iters=10),
    "linear decay": lambda m, o: m.LinearLR(o, start_factor=1.0, end_factor=0.0, total_iters=30),
    "linear default": lambda m, o: m.LinearLR(o),
    "warmup + cosine": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.01, total_iters=5), m.CosineAnnealingLR(o, T_max=45)],
        milestones=[5]),
    "three phases": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.25, total_iters=4), m.StepLR(o, 5, gamma=0.5),
            m.CosineAnnealingLR(o, T_max=13, eta_min=1e-5)], milestones=[4, 20]),
    "step then lambda": lambda m, o: m.SequentialLR(
        o, [m.StepLR(o, 2, gamma=0.9), m.LambdaLR(o, lambda e: 1 / (e + 1))], milestones=[11]),
}  # fmt: skip
GROUP_LRS = [(0.1,), (1.0,), (0.0123,), (3e-3, 0.1)]


def _run(module, opt, make, steps, per_group_lambda=False):
    sched = make(module, opt)
    out = []
    for _ in range(steps):
        opt.step()
        out.append((list(sched.get_last_lr()), [g["lr"] for g in opt.param_groups]))
        sched.step()
    return out, sched


def _pair(lrs):
    torch = pytest.importorskip("torch")
    tgroups = [{"params": [torch.zeros(2, requires_grad=True)], "lr": lr} for lr in lrs]
    return _sgd(lrs), torch.optim.SGD(tgroups, lr=lrs[0]), torch


def _same(a, b):
    """Equal as floats and in type (all Python floats), bit for bit."""
    assert a == b
    flat = [(x, y) for (la, ga), (lb, gb) in zip(a, b, strict=True)
            for x, y in zip(la + ga, lb + gb, strict=True)]  # fmt: skip
    assert all(type(x) is type(y) and math.copysign(1, x) == math.copysign(1, y)
               for x, y in flat)  # fmt: skip


@pytest.mark.parametrize("lrs", GROUP_LRS, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_schedule_matches_torch_bit_for_bit(case, lrs):
    ours, theirs, torch = _pair(lrs)
    got, s1 = _run(lr_scheduler, ours, CASES[case], 50)
    want, s2 = _run(torch.optim.lr_scheduler, theirs, CASES[case], 50)
    _same(got, want)
    assert len({tuple(g[0]) for g in got}) > 1 or case == "step"  # the schedule does move
    assert s1.last_epoch == s2.last_epoch


@pytest.mark.parametrize("case", list(CASES))
def test_state_dict_matches_torch(case):
    ours, theirs, torch = _pair((3e-3, 0.1))
    _, s1 = _run(lr_scheduler, ours, CASES[case], 13)
    _, s2 = _run(torch.optim.lr_scheduler, theirs, CASES[case], 13)
    assert s1.state_dict() == s2.state_dict()
    assert list(s1.state_dict()) == list(s2.state_dict())  # the same keys in the same order
    keys = ("lr", "initial_lr")
    assert [[g[k] for k in keys] for g in ours.param_groups] == [
        [g[k] for k in keys] for g in theirs.param_groups
    ]


def test_per_group_lambdas_match_torch():
    ours, theirs, torch = _pair((0.5, 0.02))

    def make(m, o):
        return m.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: 0.9**e])

    _same(_run(lr_scheduler, ours, make, 30)[0], _run(torch.optim.lr_scheduler, theirs, make,
                                                         30)[0])  # fmt: skip


@pytest.mark.parametrize("name", ["StepLR", "CosineAnnealingLR", "LinearLR", "LambdaLR"])
def test_step_with_epoch_uses_torchs_closed_form(name):
    kwargs = {"StepLR": dict(step_size=4, gamma=0.3), "CosineAnnealingLR": dict(T_max=9),
              "LinearLR": dict(start_factor=0.2, total_iters=6),
              "LambdaLR": dict(lr_lambda=lambda e: 0.9**e)}[name]  # fmt: skip
    ours, theirs, torch = _pair((0.1, 0.7))
    s1 = getattr(lr_scheduler, name)(ours, **kwargs)
    s2 = getattr(torch.optim.lr_scheduler, name)(theirs, **kwargs)
    for epoch in (3, 8, 1, 12, 5, 30):
        ours.step()
        theirs.step()
        with pytest.warns(UserWarning, match="epoch parameter"):
            s1.step(epoch)
        with pytest.warns(UserWarning, match="epoch parameter"):
            s2.step(epoch)
        assert s1.get_last_lr() == s2.get_last_lr() and s1.last_epoch == s2.last_epoch == epoch


@pytest.mark.parametrize("name", ["StepLR", "CosineAnnealingLR", "LinearLR"])
def test_resume_with_last_epoch_matches_torch(name):
    # last_epoch=k: the groups hold initial_lr (from a checkpoint); CosineAnnealingLR's first
    # step then takes its closed form.
    kwargs = {"StepLR": dict(step_size=4, gamma=0.3), "CosineAnnealingLR": dict(T_max=9),
              "LinearLR": dict(start_factor=0.2, total_iters=16)}[name]  # fmt: skip
    ours, theirs, torch = _pair((0.1, 0.7))
    for o in (ours, theirs):
        for g in o.param_groups:
            g["initial_lr"] = g["lr"]
            g["lr"] = g["lr"] * 0.5
    s1 = getattr(lr_scheduler, name)(ours, last_epoch=5, **kwargs)
    s2 = getattr(torch.optim.lr_scheduler, name)(theirs, last_epoch=5, **kwargs)
    got, want = [], []
    for _ in range(20):
        ours.step()
        theirs.step()
        s1.step()
        s2.step()
        got.append(s1.get_last_lr())
        want.append(s2.get_last_lr())
    assert got == want


def test_load_state_dict_then_continue_matches_uninterrupted_torch():
    ours, theirs, torch = _pair((3e-3, 0.1))
    make = CASES["three phases"]
    ref, _ = _run(torch.optim.lr_scheduler, theirs, make, 40)
    first, s1 = _run(lr_scheduler, ours, make, 17)
    state, opt_state = s1.state_dict(), ours.state_dict()
    ours2 = _sgd((3e-3, 0.1))
    s2 = make(lr_scheduler, ours2)
    ours2.load_state_dict(opt_state)
    s2.load_state_dict(state)
    rest = []
    for _ in range(23):
        rest.append((list(s2.get_last_lr()), [g["lr"] for g in ours2.param_groups]))
        ours2.step()
        s2.step()
    _same(first[:17] + rest, ref)


def test_warnings_and_errors_match_torch():
    ours, theirs, torch = _pair((0.1,))
    msgs = []
    for m, o in ((lr_scheduler, ours), (torch.optim.lr_scheduler, theirs)):
        s = m.CosineAnnealingLR(o, T_max=5)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            s.step()  # before optimizer.step()
            s.get_lr()
        msgs.append([str(x.message) for x in w])
    assert msgs[0] == msgs[1] and len(msgs[0]) == 2

    def errors(m, o):
        got = []
        for make in (lambda: m.StepLR(o, 1, last_epoch=2),
                     lambda: m.LinearLR(o, start_factor=2.0),
                     lambda: m.LinearLR(o, end_factor=-1.0),
                     lambda: m.LambdaLR(o, [lambda e: 1, lambda e: 2]),
                     lambda: m.SequentialLR(o, [m.StepLR(o, 1)], milestones=[3])):  # fmt: skip
            with pytest.raises((KeyError, ValueError)) as e:
                make()
            got.append((e.type, str(e.value)))
        return got

    assert errors(lr_scheduler, _sgd()) == errors(torch.optim.lr_scheduler, _pair((0.1,))[1])
