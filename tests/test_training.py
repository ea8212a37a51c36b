"""fpsim.amp.train, the recipes, MasterWeights, and the end-to-end underflow experiment.

End to end (fixed seeds): on ``underflow_task`` / ``underflow_model`` (regression targets in
units of 2^-8, so every gradient is 2^-16 times that of the standardised problem), fp16 autocast
without loss scaling loses almost every non-zero activation gradient and most weight gradients
and ends with a loss several times fp32's, while dynamic loss scaling (GradScaler's default
initial scale 2^16) loses well under 1% and follows fp32's loss curve within 1% at every step.
Measured on the development machine: at the initial weights, batch of 256, 33593 of 33792
non-zero activation gradients and 5268 of 5508 weight gradients become zero in fp16 (12 and 0
with dynamic scaling); after 600 Adam steps the final loss is 2.75x fp32's without scaling and
within 0.01% of it with dynamic scaling (largest per-step deviation 0.07%).
"""

import numpy as np
import pytest

import fpsim
from fpsim import amp, nn, optim
from fpsim.amp import GradScaler, MasterWeights
from fpsim.formats import fp16, fp32
from fpsim.nn import functional as F

STEPS, LR = 600, 3e-3


@pytest.fixture(scope="module")
def task():
    return amp.underflow_task(seed=0)


@pytest.fixture(scope="module")
def runs(task):
    return {
        r: amp.train(amp.underflow_model(seed=0), task, r, steps=STEPS, lr=LR)
        for r in ("fp32", "fp16", "fp16_dynamic", "fp16_master")
    }


def gradients(model, xb, yb, recipe):
    """Activation gradients (at every Linear's output) and weight gradients of one backward,
    as produced by ``recipe`` (scaled by its loss scale)."""
    acts, handles = [], []

    def hook(module, inputs, out):
        out.register_hook(lambda g: acts.append(g.data.astype(np.float64).ravel()))

    for m in model.modules():
        if isinstance(m, nn.Linear):
            handles.append(m.register_forward_hook(hook))
    rec = amp.recipe(recipe)
    scaler = rec.make_scaler()
    model.zero_grad()
    with amp.autocast("cuda", rec.autocast, enabled=rec.autocast is not None):
        loss = F.mse_loss(model(xb), yb)
    scaler.scale(loss).backward()
    for h in handles:
        h.remove()
    weights = np.concatenate([p.grad.data.astype(np.float64).ravel() for p in model.parameters()])
    return np.concatenate(acts), weights


def test_fp16_gradients_underflow_and_dynamic_scaling_keeps_them(task):
    X, Y = task
    model = amp.underflow_model(seed=0)
    xb, yb = fpsim.tensor(X[:256]), fpsim.tensor(Y[:256])
    a32, w32 = gradients(model, xb, yb, "fp32")
    nz_a, nz_w = int((a32 != 0).sum()), int((w32 != 0).sum())
    assert nz_a == 33792 and nz_w == 5508  # every fp32 gradient is non-zero
    assert np.median(np.abs(a32)) < 2.0**-25  # below half fp16's smallest subnormal
    lost = {}
    for r in ("fp16", "fp16_static", "fp16_dynamic", "bf16"):
        a, w = gradients(model, xb, yb, r)
        lost[r] = (int(((a32 != 0) & (a == 0)).sum()), int(((w32 != 0) & (w == 0)).sum()))
    # fp16 without scaling: ~99% of activation and ~96% of weight gradients become zero
    assert lost["fp16"][0] > 0.97 * nz_a and lost["fp16"][1] > 0.9 * nz_w
    # a static scale of 1024 saves most; GradScaler's 2^16 loses well under 1%; bf16 none
    assert lost["fp16_static"][0] < 0.03 * nz_a and lost["fp16_static"][1] == 0
    assert lost["fp16_dynamic"][0] < 0.001 * nz_a and lost["fp16_dynamic"][1] == 0
    assert lost["bf16"] == (0, 0)


def test_fp16_trains_worse_and_dynamic_scaling_recovers_fp32(runs):
    f32, f16, dyn = runs["fp32"], runs["fp16"], runs["fp16_dynamic"]
    assert f32.losses[-1] < 0.1 * f32.losses[0]  # it does learn
    assert f16.final_loss() > 2.0 * f32.final_loss()  # measured 2.75x
    rel = np.abs(dyn.losses - f32.losses) / f32.losses
    assert rel.max() < 0.01  # measured 0.0007
    assert abs(dyn.final_loss() / f32.final_loss() - 1) < 0.002  # measured 5e-5
    assert not dyn.skipped.any() and np.all(dyn.scales == 2.0**16)
    assert np.all(f16.scales == 1.0) and np.all(f32.scales == 1.0)


def test_master_weights_recipe_equals_autocast_recipe_bit_for_bit(runs):
    """With fp32 parameters autocast computes what the paper's scheme computes: the same fp16
    weights, fp16 products with fp32 accumulation, fp32 loss, fp32 updates."""
    assert np.array_equal(runs["fp16_master"].losses, runs["fp16_dynamic"].losses)
    model = runs["fp16_master"].model
    assert all(p.format == fp16 for p in model.parameters())
    mw = runs["fp16_master"].master
    for p, m in zip(mw.model_params, mw.masters, strict=True):
        assert np.array_equal(p.data, fpsim.round_to(m.data, "fp16"))


@pytest.mark.parametrize("name", list(amp.RECIPES))
def test_every_recipe_runs(name, task):
    X, Y = task
    res = amp.train(amp.underflow_model(seed=1), (X[:512], Y[:512]), name, steps=4, lr=1e-3)
    assert res.recipe is amp.RECIPES[name]
    assert res.losses.shape == res.scales.shape == res.skipped.shape == (4,)
    assert np.isfinite(res.losses).all() and res.grads is None
    assert res.recipe.beyond_pytorch == name.startswith("fp8")
    assert name in res.summary()
    params = list(res.model.parameters())
    assert all(p.format == (fp16 if name == "fp16_master" else fp32) for p in params)


def test_recipe_helper():
    r = amp.recipe("fp16_static", scale=2.0**7)
    assert (r.init_scale, r.scaling, r.autocast) == (128.0, "static", fp16)
    assert isinstance(r.make_scaler(), amp.StaticGradScaler)
    assert not amp.recipe("bf16").make_scaler().is_enabled()
    assert amp.recipe("fp16", autocast="bf16").autocast.name == "bf16"
    with pytest.raises(ValueError, match="unknown recipe"):
        amp.recipe("fp17")
    with pytest.raises(ValueError, match="scaling must be"):
        amp.Recipe("x", scaling="sometimes")
    with pytest.raises(ValueError, match="master_weights replaces autocast"):
        amp.Recipe("x", autocast=fp16, master_weights=True)


def test_static_scale_argument_and_skipped_steps(task):
    X, Y = task
    res = amp.train(amp.underflow_model(seed=0), (X, Y), "fp16_static", steps=3, scale=64.0)
    assert np.all(res.scales == 64.0) and res.recipe.init_scale == 64.0
    # a dynamic scale far too large: the fp16 backward overflows, steps are skipped (the
    # weights do not move) and the scale halves until the gradients fit
    model = amp.underflow_model(seed=0)
    snapshots = [[p.data.copy() for p in model.parameters()]]

    def on_step(state):
        snapshots.append([p.data.copy() for p in model.parameters()])

    res = amp.train(model, (X, Y), "fp16_dynamic", steps=40, scale=2.0**40, on_step=on_step)
    k = int(np.argmin(res.skipped))  # first step taken
    assert k > 5 and res.skipped[:k].all() and not res.skipped[k:].any()
    assert list(res.scales[: k + 1]) == [2.0 ** (40 - i) for i in range(k + 1)]
    pairs = zip(snapshots[:-1], snapshots[1:], strict=True)
    same = [all(np.array_equal(a, b) for a, b in zip(s0, s1, strict=True)) for s0, s1 in pairs]
    assert same == list(res.skipped)


def test_callbacks_records_and_clipping(task):
    X, Y = task
    seen = []

    def on_backward(state):
        scaled = state.named_grads(unscaled=False)
        unscaled = state.named_grads()
        for k in scaled:
            assert np.array_equal(scaled[k] / state.scale, unscaled[k])
        seen.append(("backward", state.step, state.scale, state.loss))

    def on_step(state):
        seen.append(("step", state.step, state.skipped, state.new_scale))

    res = amp.train(amp.underflow_model(seed=0), (X, Y), "fp16_dynamic", steps=4,
                    on_backward=on_backward, on_step=on_step, record_grads=2,
                    max_grad_norm=1e-3)  # fmt: skip
    assert [s[:2] for s in seen] == [(p, i) for i in range(4) for p in ("backward", "step")]
    assert seen[0][2] == 2.0**16 and seen[0][3] == res.losses[0]
    assert len(res.grads) == 2  # steps 0 and 2
    g = res.grads[0]
    assert set(g) == {n for n, _ in res.model.named_parameters()}
    norm = np.sqrt(sum(float((v.astype(np.float64) ** 2).sum()) for v in g.values()))
    assert norm < 2.0**-12  # unscaled (the scaled ones are 2^16 larger), not yet clipped


def test_data_forms_and_default_steps(task):
    X, Y = task
    batches = list(fpsim.data.batches(X[:256], Y[:256], batch_size=64, seed=0))
    res = amp.train(amp.underflow_model(seed=0), batches, "fp32", optimizer="sgd",
                    optimizer_kwargs={"momentum": 0.9}, lr=0.1)  # fmt: skip
    assert len(res.losses) == 4  # one epoch by default
    res2 = amp.train(amp.underflow_model(seed=0), lambda: iter(batches), "fp32", steps=6,
                     optimizer=lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9))  # fmt: skip
    assert np.array_equal(res2.losses[:4], res.losses) and len(res2.losses) == 6
    Xc, yc = fpsim.data.two_moons(128, seed=0)
    res3 = amp.train(nn.MLP([2, 8, 2], seed=0), (Xc, yc), "bf16", steps=3, batch_size=32,
                     progress=True)  # fmt: skip
    assert np.isfinite(res3.losses).all()  # integer targets: cross entropy
    with pytest.raises(ValueError, match="optimizer must be"):
        amp.train(nn.MLP([2, 2]), (Xc, yc), "fp32", optimizer="lion")
    with pytest.raises(ValueError, match="no batches"):
        amp.train(nn.MLP([2, 2]), [], "fp32", steps=1)


def test_master_weights_class():
    model = nn.MLP([3, 4, 2], seed=0)
    orig = [p.data.copy() for p in model.parameters()]
    mw = MasterWeights(model)
    assert [n for n, _ in mw.named_parameters()] == [n for n, _ in model.named_parameters()]
    for p, m, o in zip(model.parameters(), mw.parameters(), orig, strict=True):
        assert m.format == fp32 and np.array_equal(m.data, o)  # exact fp32 copies
        assert p.format == fp16 and np.array_equal(p.data, fpsim.round_to(o, "fp16"))
    opt = optim.SGD(mw.parameters(), lr=2.0**-12)
    scaler = GradScaler(init_scale=2.0**10)
    x = fpsim.randn(5, 3, generator=0).half()
    loss = model(x).float().sum()
    mw.zero_grad()
    scaler.scale(loss).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients."):
        scaler.unscale_(optim.SGD(model.parameters(), lr=1.0))  # fp16 gradients: refused
    mw.copy_grads_()
    for p, m in zip(model.parameters(), mw.parameters(), strict=True):
        assert m.grad.format == fp32 and np.array_equal(m.grad.data, p.grad.data)
    scaler.step(opt)  # unscaled in fp32 on the masters
    scaler.update()
    mw.copy_weights_()
    for p, m, o in zip(model.parameters(), mw.parameters(), orig, strict=True):
        assert not np.array_equal(m.data, o)  # the masters moved ...
        assert np.array_equal(p.data, fpsim.round_to(m.data, "fp16"))  # ... the model follows
    mw.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    assert all(m.grad is None for m in mw.parameters())
