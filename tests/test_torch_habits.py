"""PyTorch habits fpsim keeps (issue 12): ``nn.utils.clip_grad_norm_`` under torch's path and
with torch's semantics (checked against a live PyTorch: total norm, its format, the clipped
gradients, the non-finite error, the empty-generator warning), and ``GradientRecorder``
refusing a model that is not an fpsim model -- a PyTorch one above all -- when it is built.
The lr schedulers and save/load have their own files."""

import warnings

import numpy as np
import pytest

import fpsim
from fpsim import nn
from fpsim.stats import GradientRecorder

# ---- nn.utils.clip_grad_norm_ ----------------------------------------------------------------


def test_nn_utils_paths():
    import fpsim.nn.utils
    from fpsim.nn.utils import clip_grad_norm_

    assert fpsim.nn.utils.clip_grad_norm_ is clip_grad_norm_ is nn.utils.clip_grad_norm_
    w = nn.Parameter(np.zeros(2))
    w.grad = fpsim.tensor([3.0, 4.0])
    for foreach in (None, True, False):  # accepted, ignored
        assert clip_grad_norm_([w], 100.0, foreach=foreach).item() == 5.0


def test_empty_generator_warns_and_returns_zero():
    with pytest.warns(UserWarning, match="empty generator"):
        total = nn.utils.clip_grad_norm_((p for p in []), 1.0)
    assert total.item() == 0.0 and total.format is fpsim.fp32 and total.shape == ()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nn.utils.clip_grad_norm_([], 1.0)  # a list: no warning (as PyTorch)


TORCH_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64"}


def _pairs(torch, fmts, grads):
    """fpsim Parameters and torch tensors with the same gradients (values of the formats)."""
    ps, tps = [], []
    for f, g in zip(fmts, grads, strict=True):
        p = nn.Parameter(np.zeros(np.shape(g)), format=f)
        p.grad = fpsim.tensor(np.asarray(g), format=f)
        dt = getattr(torch, TORCH_DTYPE[f])
        tp = torch.zeros(np.shape(g), dtype=dt, requires_grad=True)
        tp.grad = torch.tensor(np.array(p.grad.data, dtype=np.float64)).to(dt)
        ps.append(p)
        tps.append(tp)
    return ps, tps


def _as64(t) -> np.ndarray:
    return t.detach().double().numpy() if hasattr(t, "detach") else np.asarray(t.data, np.float64)


def _clip_both(torch, fmts, grads, max_norm, norm_type, **kw):
    ps, tps = _pairs(torch, fmts, grads)
    got = nn.utils.clip_grad_norm_(ps, max_norm, norm_type, **kw)
    want = torch.nn.utils.clip_grad_norm_(tps, max_norm, norm_type, **kw)
    assert got.shape == tuple(want.shape) == ()
    assert TORCH_DTYPE[got.format.name] == str(want.dtype).removeprefix("torch.")
    return got, want, ps, tps


# Gradients whose norms fpsim and torch compute exactly (small integers times powers of two):
# then any summation order gives the same sums, and everything must agree bit for bit.
EXACT = [
    (["fp32"], [[3.0, -4.0, 12.0]]),
    (["fp32", "fp32"], [np.arange(-8, 9) * 0.25, [[1.0, 2.0], [-2.0, 4.0]]]),
    (["fp16", "fp16"], [[3.0, 4.0, 0.5], [-1.0, 8.0]]),
    (["bf16"], [[-6.0, 8.0, 0.0, 2.0**-10]]),
    (["fp16", "fp32"], [[3.0, 4.0], [12.0, 0.5]]),  # fp16 norm, fp32 norm: an fp32 total
    (["bf16", "fp16"], [[1.0, 2.0], [2.0, 4.0]]),
    (["fp64"], [[1e-200, 3.0, -4.0]]),
]


@pytest.mark.parametrize("norm_type", [2.0, 1, float("inf"), "inf"])
@pytest.mark.parametrize("max_norm", [0.5, 1.0, 4.0, 1e6])
@pytest.mark.parametrize("fmts,grads", EXACT, ids=[" ".join(f) for f, _ in EXACT])
def test_clip_grad_norm_matches_torch_bit_for_bit(fmts, grads, max_norm, norm_type):
    torch = pytest.importorskip("torch")
    got, want, ps, tps = _clip_both(torch, fmts, grads, max_norm, norm_type)
    assert got.item() == want.item()
    for p, tp in zip(ps, tps, strict=True):
        assert p.grad.format == p.format
        assert np.array_equal(_as64(p.grad), _as64(tp.grad))


@pytest.mark.parametrize("max_norm,norm_type", [(5.0, 2.0), (7.0, 1.0)])
def test_clip_coefficient_is_torchs_reciprocal_times_max_norm(max_norm, norm_type):
    # total 10: 5 / fp32(10 + 1e-6) rounds to 0.49999994, 5 * fp32(1 / ...) to 0.49999997;
    # L1 total 11: 7 / ... gives 0.63636357, 7 * fp32(1 / ...) 0.6363636
    torch = pytest.importorskip("torch")
    grads = [[6.0, 8.0]] if norm_type == 2.0 else [[2.0, -4.0, 5.0]]
    got, want, ps, tps = _clip_both(torch, ["fp32"], grads, max_norm, norm_type)
    assert got.item() == want.item()
    assert np.array_equal(_as64(ps[0].grad), _as64(tps[0].grad))


@pytest.mark.parametrize("fmts", [["fp16", "fp16"], ["bf16"], ["fp32", "fp32", "fp32"],
                                  ["fp16", "fp32"]])  # fmt: skip
@pytest.mark.parametrize("seed", range(5))
def test_clip_grad_norm_matches_torch_on_random_gradients(fmts, seed):
    # fp32 sums: numpy's pairwise order and PyTorch's vectorised one can differ in the last bit.
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    grads = [rng.standard_normal(n) for n in (100, 37, 9)[: len(fmts)]]
    got, want, ps, tps = _clip_both(torch, fmts, grads, 1.0, 2.0)
    if "fp32" in fmts:
        assert got.item() == pytest.approx(want.item(), rel=1e-6)
        for p, tp in zip(ps, tps, strict=True):
            np.testing.assert_allclose(_as64(p.grad), _as64(tp.grad), rtol=1e-6, atol=1e-30)
    else:  # a few hundred low-precision values summed in fp32: exact in both
        assert got.item() == want.item()
        for p, tp in zip(ps, tps, strict=True):
            assert np.array_equal(_as64(p.grad), _as64(tp.grad))


def test_clip_grad_norm_nonfinite_as_torch():
    torch = pytest.importorskip("torch")
    grads = [[np.inf, 1.0], [2.0, 3.0]]
    ps, tps = _pairs(torch, ["fp32", "fp32"], grads)
    with pytest.raises(RuntimeError) as ours:
        nn.utils.clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)
    with pytest.raises(RuntimeError) as theirs:
        torch.nn.utils.clip_grad_norm_(tps, 1.0, error_if_nonfinite=True)
    assert str(ours.value) == str(theirs.value)
    assert np.array_equal(_as64(ps[0].grad), [np.inf, 1.0])  # refused: untouched
    for nonfinite in ([np.inf, 1.0], [np.nan, 1.0]):  # default: scale anyway (by 0 or NaN)
        got, want, ps, tps = _clip_both(torch, ["fp16", "fp16"], [nonfinite, [2.0, 3.0]], 1.0, 2.0)
        assert np.array_equal(got.item(), want.item(), equal_nan=True)
        for p, tp in zip(ps, tps, strict=True):
            assert np.array_equal(_as64(p.grad), _as64(tp.grad), equal_nan=True)


def test_clip_grad_norm_of_a_single_tensor_and_a_model_generator():
    torch = pytest.importorskip("torch")
    ps, tps = _pairs(torch, ["fp32"], [[6.0, 8.0]])
    assert nn.utils.clip_grad_norm_(ps[0], 4.0).item() == torch.nn.utils.clip_grad_norm_(
        tps[0], 4.0).item() == 10.0  # fmt: skip
    assert np.array_equal(_as64(ps[0].grad), _as64(tps[0].grad))
    model = nn.Linear(3, 2, seed=0)
    tmodel = torch.nn.Linear(3, 2)
    with torch.no_grad():
        tmodel.weight.copy_(torch.from_numpy(model.weight.data.copy()))
        tmodel.bias.copy_(torch.from_numpy(model.bias.data.copy()))
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 4
    (model(fpsim.tensor(x)) ** 2).sum().backward()
    (tmodel(torch.from_numpy(x)) ** 2).sum().backward()
    got = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    want = torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 1.0)
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    np.testing.assert_allclose(_as64(model.weight.grad), _as64(tmodel.weight.grad), rtol=1e-5)


# ---- GradientRecorder refuses foreign models -------------------------------------------------


def test_recorder_refuses_a_torch_model():
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):  # a user's model: its class lives in this test module
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

    for model in (torch.nn.Linear(2, 2), Net(), torch.nn.Sequential(torch.nn.Linear(2, 2))):
        with pytest.raises(TypeError, match="records fpsim models") as e:
            GradientRecorder(model)
        msg = str(e.value)
        assert "PyTorch" in msg and "fpsim.torch.watch(model)" in msg
        assert type(model).__qualname__ in msg


def test_recorder_refuses_other_objects_without_importing_torch():
    class Mod:  # a stand-in for a torch class, recognised by its module's name alone
        pass

    Mod.__module__ = "torch.nn.modules.linear"
    with pytest.raises(TypeError, match="fpsim.torch"):
        GradientRecorder(Mod())
    for obj in (object(), [nn.Linear(2, 2)], "model"):
        with pytest.raises(TypeError, match="records fpsim models \\(fpsim.nn.Module\\), got") as e:
            GradientRecorder(obj)
        assert "PyTorch" not in str(e.value)
    assert GradientRecorder(nn.Sequential(nn.Linear(2, 2))).layers == ["0"]  # fpsim: accepted
