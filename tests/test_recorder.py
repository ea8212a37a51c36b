"""GradientRecorder: what it records is checked against gradients computed here another way.

* The reference (fp32) histograms equal histograms of gradients computed directly: a model
  rebuilt by its constructor, the weights copied in, the activation gradients taken with
  ``retain_grad`` on each Linear output (the recorder uses a deep copy and tensor hooks).
* The produced histograms and the element-by-element counts equal those of the run's own
  gradients, read here with ``retain_grad`` and from ``.grad``, divided by the loss scale.
* On a model built so that the fp16 forward pass is exact, each fp16 gradient is *exactly* the
  true gradient rounded once to fp16 (times the scale); there the zero count must equal the
  number of true gradients that numpy's float16 rounds to zero -- exactly. (In a deep model the
  fp16 backward rounds again at every layer and works from rounded forward values, so such an
  equality holds only approximately; the demo's table reports the measured counts.)
"""

import numpy as np
import pytest
from gradient_oracle import LINEARS, RunGradients, hist_of, same_hist, true_gradients

import fpsim
from fpsim import amp, nn
from fpsim.nn import functional as F
from fpsim.stats import GradientRecorder


@pytest.fixture(scope="module")
def recorded():
    """3 steps of fp16 without scaling and with dynamic scaling; per step the true gradients
    (computed here) and the run's own gradients as stored (scaled)."""
    X, Y = amp.underflow_task(256, seed=0)
    out = {}
    for name in ("fp16", "fp16_dynamic", "fp32"):
        model = amp.underflow_model(seed=0)
        run = RunGradients(model)
        rec = GradientRecorder(model)
        steps = []

        def on_backward(state, rec=rec, steps=steps, run=run):
            steps.append((true_gradients(state), run.stored(), state.scale))
            rec.on_backward(state)

        amp.train(model, (X, Y), name, steps=3, lr=3e-3, on_backward=on_backward)
        run.remove()
        out[name] = (rec, steps)
    return out


@pytest.mark.parametrize("recipe", ["fp16", "fp16_dynamic", "fp32"])
def test_reference_histograms_equal_direct_fp32_gradients(recorded, recipe):
    rec, steps = recorded[recipe]
    assert rec.steps == [0, 1, 2] and rec.layers == list(LINEARS)
    for key in rec.records:
        direct = hist_of(truth[key] for truth, _, _ in steps)
        assert same_hist(rec.records[key].reference, direct), key


@pytest.mark.parametrize("recipe", ["fp16", "fp16_dynamic", "fp32"])
def test_produced_histograms_and_counts_equal_the_runs_gradients(recorded, recipe):
    rec, steps = recorded[recipe]
    for key, r in rec.records.items():
        direct = hist_of(stored[key] / scale for _, stored, scale in steps)
        assert same_hist(r.produced, direct), key
        true = np.concatenate([t[key] for t, _, _ in steps])
        got = np.concatenate([s[key] for _, s, _ in steps])
        nz = true != 0
        assert r.values == true.size and r.reference_nonzero == int(nz.sum())
        assert r.lost == int(np.sum(nz & (got == 0)))
        tiny = 2.0**-126 if recipe == "fp32" else 2.0**-14  # smallest normal of fp32 / fp16
        assert r.subnormal == int(np.sum(nz & (got != 0) & (np.abs(got) < tiny))), key
        assert r.appeared == int(np.sum(~nz & (got != 0))) and r.nonfinite == 0


def test_what_the_counts_show(recorded):
    """fp32 reproduces itself exactly; fp16 without scaling loses most activation gradients,
    with dynamic scaling almost none."""
    fp32 = recorded["fp32"][0].total()
    assert fp32.lost == 0 and fp32.subnormal == 0
    assert fp32.error.zero == fp32.error.count  # every relative error is exactly 0
    assert fp32.median_error() == 0.0
    assert recorded["fp16"][0].total("activation").lost_fraction > 0.9
    assert recorded["fp16_dynamic"][0].total("activation").lost_fraction < 0.01
    dyn = recorded["fp16_dynamic"][0]
    assert [s for _, _, s in recorded["fp16_dynamic"][1]] == [2.0**16] * 3
    assert dyn.scales == [2.0**16] * 3 and dyn.fmt == fpsim.fp16


# ---- exact: one rounding ------------------------------------------------------------------------
def exact_model():
    """Linear(64 -> 256) whose fp16 forward pass is exact: weights and bias are multiples of
    1/8 below 1, inputs are +-1, so every product and sum has few bits."""
    rng = np.random.default_rng(5)
    m = nn.Sequential(nn.Linear(64, 256, seed=0))
    with fpsim.no_grad():
        m[0].weight.data[...] = rng.integers(-7, 8, (256, 64)) / 8
        m[0].bias.data[...] = rng.integers(-7, 8, 256) / 8
    return m


def tiny_coefficients() -> np.ndarray:
    """256 fp32 values around fp16's underflow threshold: random magnitudes 2^-34 .. 2^-12,
    exact ties at half the smallest subnormal (which round to 0), values just above them
    (which round up to 2^-24) and exact zeros."""
    rng = np.random.default_rng(7)
    c = rng.choice([-1.0, 1.0], 256) * np.exp2(rng.uniform(-34, -12, 256))
    c[:8] = 2.0**-25  # ties: to the even neighbour, 0
    c[8:16] = -(2.0**-25)
    c[16:24] = 2.0**-25 + 2.0**-40  # just above the tie: 2^-24
    c[24:32] = 0.0
    return c.astype(np.float32).reshape(1, 256)


@pytest.mark.parametrize("scale", [None, 2.0**6, 2.0**10])
def test_fp16_zero_count_equals_true_gradients_rounding_to_zero(scale):
    """loss = sum(model(x) * c): the true activation gradient is c, the weight gradient
    c_i * x_j and the bias gradient c. The fp16 run's gradients are fp16(S * true) exactly (the
    forward pass is exact in fp16 and every gradient is one product, rounded once), so its zero
    count is the number of S * true gradients that numpy's float16 rounds to zero."""
    x = np.random.default_rng(3).choice([-1.0, 1.0], (1, 64)).astype(np.float32)
    c = tiny_coefficients()
    model = exact_model()
    rec = GradientRecorder(model)
    recipe = "fp16" if scale is None else amp.recipe("fp16_static", scale=scale)
    amp.train(model, [(x, c)], recipe, steps=1, loss_fn=lambda out, c: (out * c).sum(),
              on_backward=rec.on_backward)  # fmt: skip
    S = 1.0 if scale is None else scale
    true = {
        "activation": c.ravel().astype(np.float64),
        "weight": np.concatenate([(c.T * x).ravel(), c.ravel()]).astype(np.float64),
    }
    for kind, t in true.items():
        r = rec.records[("0", kind)]
        as_fp16 = (t * S).astype(np.float16)  # numpy: float64 -> float16, rounded once
        assert r.reference.zero == int(np.sum(t == 0))
        assert r.produced.zero == int(np.sum(as_fp16 == 0)), kind
        assert r.lost == int(np.sum((t != 0) & (as_fp16 == 0))), kind
        assert r.subnormal == int(np.sum((t != 0) & (as_fp16 != 0) & (np.abs(as_fp16) < 2.0**-14)))
        assert same_hist(r.produced, hist_of([as_fp16.astype(np.float64) / S]))
        assert same_hist(r.reference, hist_of([t]))
        # and the histogram of the true gradients predicts it: one rounding, same boundary
        assert r.reference.zones("fp16", scale=S)["underflow"] == r.lost
    if scale is None:  # the ties went to zero, the values just above them did not
        assert rec.records[("0", "activation")].lost >= 16


# ---- the API ------------------------------------------------------------------------------------
def test_every_k_th_step_and_remove():
    X, Y = amp.underflow_task(256, seed=0)
    model = amp.underflow_model(seed=0)
    rec = GradientRecorder(model, every=2)
    amp.train(model, (X, Y), "fp16_dynamic", steps=5, on_backward=rec.on_backward)
    assert rec.steps == [0, 2, 4]
    assert rec.total("activation").values == 3 * 64 * (64 + 64 + 4)
    rec.remove()
    amp.train(model, (X, Y), "fp16", steps=2)  # no hooks: nothing captured
    assert rec._captured["run"] == {} and rec.steps == [0, 2, 4]


def test_layers_by_type_and_by_name_and_errors():
    model = amp.underflow_model(seed=0)
    assert GradientRecorder(model, layers=nn.Linear).layers == list(LINEARS)
    both = GradientRecorder(model, layers=(nn.Linear, amp.Scale))
    assert both.layers == [*LINEARS, "1"]
    assert GradientRecorder(model, layers=["0.4"]).layers == ["0.4"]
    with pytest.raises(ValueError, match="no such layers"):
        GradientRecorder(model, layers=["fc9"])
    with pytest.raises(ValueError, match="every"):
        GradientRecorder(model, every=0)
    X, Y = amp.underflow_task(64, seed=0)
    rec = GradientRecorder(model)
    amp.train(model, (X, Y), "fp16", steps=1, on_backward=rec.on_backward)
    with pytest.raises(ValueError, match="one GradientRecorder per run"):
        amp.train(model, (X, Y), "bf16", steps=1, on_backward=rec.on_backward)
    rec = GradientRecorder(model)
    with pytest.raises(ValueError, match="kind"):
        rec.total("bias")
    with pytest.raises(ValueError, match="give the run's format"):
        rec.record((None, None), F.mse_loss)


def test_manual_record_and_a_layer_without_parameters():
    """Without amp.train: forward under autocast, backward of loss * S, then record()."""
    X, Y = amp.underflow_task(64, seed=1)
    model = amp.underflow_model(seed=0)
    rec = GradientRecorder(model, fmt="fp16", layers=(nn.Linear, amp.Scale))
    x, y = fpsim.tensor(X), fpsim.tensor(Y)
    with fpsim.autocast("cuda"):
        loss = F.mse_loss(model(x), y)
    (loss * 2.0**16).backward()
    rec.record((x, y), F.mse_loss, scale=2.0**16)
    assert rec.records[("1", "weight")].values == 0  # Scale owns no parameters
    assert rec.records[("1", "activation")].values == Y.size
    assert rec.total().lost_fraction < 0.01
    assert "all" in rec.table() and "GradientRecorder(" in repr(rec)


def test_master_weight_recipe_uses_the_masters():
    X, Y = amp.underflow_task(256, seed=0)
    model = amp.underflow_model(seed=0)
    rec = GradientRecorder(model)
    seen = []

    def on_backward(state):
        seen.append(true_gradients(state))  # from the fp32 masters
        rec.on_backward(state)

    amp.train(model, (X, Y), "fp16_master", steps=2, on_backward=on_backward)
    assert rec.fmt == fpsim.fp16
    for key, r in rec.records.items():
        assert same_hist(r.reference, hist_of(s[key] for s in seen)), key
    assert rec.total().lost_fraction < 0.01
