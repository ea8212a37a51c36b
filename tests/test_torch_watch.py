"""fpsim.torch.watch on real torch models: the recorded zone counts equal an independent count
made here from the torch tensors themselves (captured with hooks of this file, counted with
numpy / ml_dtypes casts, which are exact for float32 input), with autocast and GradScaler on
and off; the loss-scale window is checked by applying its edges (casting the captured
gradients times 2^k to fp16 with numpy); skip forensics against a constructed overflow; update
swamping against exact Fraction rounding."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import scaling_oracle as so  # noqa: E402
from oracle import ref_round, zones_by_cast  # noqa: E402
from torch import nn  # noqa: E402

import fpsim.torch as ft  # noqa: E402
from fpsim.kernels.histogram import current_scale_exponent  # noqa: E402

FORMATS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
DTYPES = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
          "fp8_e5m2": ml_dtypes.float8_e5m2}  # fmt: skip
FMAX = {f: float(ml_dtypes.finfo(d).max) for f, d in DTYPES.items()}


def f32(t) -> np.ndarray:
    return t.detach().float().numpy().astype(np.float32).ravel()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = nn.Embedding(20, 16)
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.GELU()
        self.norm = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, 20)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)

    def forward(self, idx):
        return self.fc2(self.norm(self.act(self.fc1(self.emb(idx)))))


class Capture:
    """This file's own record of the tensors: module outputs (forward hooks), their gradients
    (tensor hooks on the outputs), parameters at forward time, .grad after backward."""

    def __init__(self, model, names):
        self.model, self.names = model, names
        self.data: dict = {}
        mods = dict(model.named_modules())
        for n in names:
            mods[n].register_forward_hook(self._fwd(n, mods[n]))

    def add(self, key, x32):
        self.data.setdefault(key, []).append(x32)

    def _fwd(self, name, mod):
        def hook(m, args, out):
            self.add((name, "activation"), f32(out))
            for p in m.parameters(recurse=False):
                self.add((name, "weight"), f32(p))
            if out.requires_grad:
                out.register_hook(lambda g: self.add((name, "activation_grad"), f32(g)))
        return hook

    def grads(self):
        mods = dict(self.model.named_modules())
        for n in self.names:
            for p in mods[n].parameters(recurse=False):
                self.add((n, "weight_grad"), f32(p.grad))


def run(model, steps, autocast=None, scaler=None, watch_opts=None, seed=0, factor=1.0):
    """Train ``model`` a few steps under watch and under this file's capture; gradients are
    captured divided by the scaler's scale (exact: a power of two)."""
    names = ["emb", "fc1", "norm", "fc2"]
    cap = Capture(model, names)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    mods = dict(model.named_modules())

    def state_hook(o, args, kwargs):  # the optimizer's moments, after every step it takes
        for n in names:
            for p in mods[n].parameters(recurse=False):
                for v in o.state[p].values():
                    if v.shape == p.shape:
                        cap.add((n, "optimizer_state"), f32(v))

    opt.register_step_post_hook(state_hook)
    g = torch.Generator().manual_seed(seed)
    w = ft.watch(model, FORMATS, scaler=scaler, optimizer=opt, **(watch_opts or {}))
    for _ in range(steps):
        idx = torch.randint(0, 20, (8, 6), generator=g)
        with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
            loss = nn.functional.cross_entropy(model(idx).float().reshape(-1, 20), idx.reshape(-1))
            loss = loss * factor
        opt.zero_grad()
        n_before = {k: len(v) for k, v in cap.data.items()}
        (scaler.scale(loss) if scaler else loss).backward()
        cap.grads()
        s = np.float32(scaler.get_scale()) if scaler else np.float32(1)
        for k, v in cap.data.items():  # unscale what this backward pass added
            if k[1].endswith("_grad"):
                v[n_before.get(k, 0):] = [a * (np.float32(1) / s) for a in v[n_before.get(k, 0):]]
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
    w.stop()
    return w.report(), cap


@pytest.mark.parametrize("autocast, use_scaler", [(None, False), (torch.bfloat16, False),
                                                  (torch.float16, True)])  # fmt: skip
def test_recorded_zones_equal_an_independent_count(autocast, use_scaler):
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8) if use_scaler else None
    rep, cap = run(Net(), 3, autocast, scaler)
    assert set(cap.data) == set(rep.records)
    for key, arrays in cap.data.items():
        rec = rep[key]
        x = np.concatenate(arrays)
        assert rec.counted == rec.seen == x.size, key
        fin = np.abs(x[np.isfinite(x)])
        assert rec.amax == (float(fin.max()) if fin.size else 0.0), key
        for f in FORMATS:
            assert rec.zones(f) == zones_by_cast(x, f), (key, f)
            # per tensor: times 2^floor(log2(fl32(max / amax))), computed here in float32
            want = dict.fromkeys(zones_by_cast(x[:1], f), 0)
            for a in arrays:
                fa = np.abs(a[np.isfinite(a)])
                am = np.float32(fa.max()) if fa.size else np.float32(0)
                with np.errstate(over="ignore"):
                    q = np.float32(FMAX[f]) / am  # fl32(max / amax); TE: inf -> FLT_MAX
                q = min(q, np.finfo(np.float32).max)
                s = 1.0 if am == 0 else 2.0 ** math.floor(math.log2(q))
                for zone, n in zones_by_cast(a * np.float32(s), f).items():
                    want[zone] += n
            assert rec.zones(f, "per_tensor") == want, (key, f)
    dtypes = {d for r in rep.records.values() for d in r.dtypes}
    assert ("float16" in dtypes) == (autocast is torch.float16)
    assert ("bfloat16" in dtypes) == (autocast is torch.bfloat16)


def test_block_scheme_counts_equal_scaling_report():
    from fpsim.stats import scaling_report

    model = Net()
    cap = Capture(model, ["fc1"])
    w = ft.watch(model, ["fp16", "mxfp4", "nvfp4"], modules=["fc1"], kinds=["activation"])
    for seed in range(2):
        model(torch.randint(0, 20, (4, 5), generator=torch.Generator().manual_seed(seed)))
    w.stop()
    rec = w.report()["fc1", "activation"]
    for scheme in ("mxfp4", "nvfp4"):
        rows = [scaling_report(a.reshape(-1, 32), [scheme])[0] for a in cap.data[("fc1", "activation")]]
        for c in ("zero", "subnormal", "saturated", "nonzero", "values"):
            assert rec.blocks[scheme][c] == sum(getattr(r, c) for r in rows), (scheme, c)


def test_sampling_is_seeded_and_within_its_error():
    x_model = Net()
    opts = {"sample": 0.25, "kinds": ["activation"], "seed": 3}
    rep1, cap = run(x_model, 2, watch_opts=opts)
    rep2, _ = run(Net(), 2, watch_opts=opts)
    acts = {k: v for k, v in cap.data.items() if k[1] == "activation"}
    assert set(acts) == set(rep1.records)
    for key, arrays in acts.items():
        r1, r2 = rep1[key], rep2[key]
        assert r1.zones("fp8_e4m3") == r2.zones("fp8_e4m3")  # same seed, same sample
        n = sum(a.size for a in arrays)
        assert r1.seen == n and r1.counted == sum(math.ceil(0.25 * a.size) for a in arrays)
        x = np.concatenate(arrays)
        fin = np.abs(x[np.isfinite(x)])
        assert r1.amax == float(fin.max())  # amax over every element, not the sample
        full = zones_by_cast(x, "fp8_e4m3")
        p = full["underflow"] / n
        est = r1.zones("fp8_e4m3")["underflow"] / r1.counted
        assert abs(est - p) <= 5 * math.sqrt(max(p * (1 - p), 1e-4) / r1.counted) + 1e-12


# ---- the loss-scale window, checked by applying its edges ---------------------------------------
def fp16_counts(x32: np.ndarray, k: int) -> tuple[int, int, int]:
    """(overflowing, lost to zero, non-zero finite) of x · 2^k cast to fp16 by numpy."""
    y = x32.astype(np.float64) * 2.0**k
    with np.errstate(all="ignore"):
        r = y.astype(np.float16)  # numpy's float64 -> float16 is direct and correctly rounded
    fin = np.isfinite(x32)
    nz = fin & (x32 != 0)
    return int(np.count_nonzero(nz & np.isinf(r))), int(np.count_nonzero(nz & (r == 0))), \
        int(np.count_nonzero(nz))


def test_scale_window_edges_hold():
    rep, cap = run(Net(), 3, factor=2.0**-20)  # gradients too small for fp16 as they are
    eps = 0.01
    w = rep.scale_window("fp16", eps=eps)
    assert w.feasible and w.lo is not None and w.hi is not None and w.lo <= w.hi
    grads = {k: np.concatenate(v) for k, v in cap.data.items() if k[1].endswith("_grad")}
    assert {(t.module, t.kind) for t in w.tensors} == set(grads)
    for k, side in ((w.hi, "inside"), (w.hi + 1, "above")):
        over = [fp16_counts(x, k)[0] for x in grads.values()]
        assert (sum(over) == 0) == (side == "inside"), (k, over)
    for k, side in ((w.lo, "inside"), (w.lo - 1, "below")):
        worst = max(fp16_counts(x, k)[1] / fp16_counts(x, k)[2] for x in grads.values())
        assert (worst <= eps) == (side == "inside"), (k, worst)
    # bf16 holds fp32's range: scale 1 lies in its window
    b = rep.scale_window("bf16", eps=eps)
    assert b.no_scaling_needed and b.suggested == 1.0 and "no scaling needed" in b.verdict
    assert w.lo > 0 and not w.no_scaling_needed and w.suggested == 2.0 ** ((w.lo + w.hi) // 2)
    assert f"2^{w.lo} .. 2^{w.hi}" in w.verdict


class TwoHeads(nn.Module):
    """Two branches whose gradients sit 2^60 apart: no fp16 loss scale serves both."""

    def __init__(self):
        super().__init__()
        self.big = nn.Linear(8, 8)
        self.small = nn.Linear(8, 8)

    def forward(self, x):
        return self.big(x), self.small(x)


def test_no_feasible_scale_names_the_culprits():
    model = TwoHeads()
    w = ft.watch(model, ["fp16", "bf16"], kinds=["activation_grad", "weight_grad"])
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
    a, b = model(x)
    (2.0**30 * a.sum() + 2.0**-30 * b.sum()).backward()
    w.stop()
    rep = w.report()
    win = rep.scale_window("fp16", eps=0.0)
    assert not win.feasible and win.suggested is None
    assert {t.module for t in win.culprits} == {"big", "small"}
    assert win.verdict.startswith("fp16: no feasible scale:")
    assert "big" in win.verdict and "small" in win.verdict
    for t in win.tensors:  # each tensor's own edges, applied (weight_grad: weight and bias)
        if t.kind != "weight_grad":
            continue
        m = getattr(model, t.module)
        x32 = np.concatenate([f32(m.weight.grad), f32(m.bias.grad)])
        assert fp16_counts(x32, t.hi)[0] == 0 and fp16_counts(x32, t.hi + 1)[0] > 0
        assert fp16_counts(x32, t.lo)[1] == 0 and fp16_counts(x32, t.lo - 1)[1] > 0
    assert rep.scale_window("bf16", eps=0.0).no_scaling_needed


# ---- skip forensics ------------------------------------------------------------------------------
def test_skip_forensics_finds_the_constructed_overflow():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    with torch.no_grad():
        model[0].weight.mul_(0.01)
        model[0].bias.zero_()
        model[1].weight.fill_(2.0**6)  # the gradient at layer 0's output: 8 · 2^6 times dy
    scale = 2.0**16
    scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.full((8, 8), 0.01)
    w = ft.watch(model, ["fp16"], scaler=scaler, optimizer=opt)
    with torch.autocast("cpu", dtype=torch.float16):
        y = model(x)
    loss = y.float().mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    rep = w.skip_report()
    # independently: dy = scale / 64 in fp16 at layer 1's output (finite); the gradient at
    # layer 0's output is dy @ W1 = (scale / 64) · 8 · 2^6 = 2^19 per element: inf in fp16
    dy = scale / y.numel()
    assert dy <= 65504 and np.float16(dy * 8 * 2.0**6) == np.inf
    assert rep.skipped and rep.scale == scale and rep.new_scale == scale / 2
    first = rep.first
    assert (first.module, first.kind, first.param) == ("0", "activation_grad", None)
    assert first.nonfinite == first.numel == 64 and first.nan == 0 and first.dtype == "float16"
    assert rep.events[0] is first  # nothing overflowed before it
    assert str(rep).startswith("step 0 was skipped (loss scale 2^16 -> 2^15): the first gradient "
                               "to overflow in the backward pass was 0 activation_grad (float16)")
    w.stop()
    report = w.report()
    assert report.skips == [rep] and report.info["scaler_steps"] == 1
    assert "Skipped steps: 1 of 1" in str(report)


def test_a_step_that_fits_is_not_skipped():
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
    rep, _ = run(Net(), 2, torch.float16, scaler)
    assert rep.skips == [] and rep.info["scaler_steps"] == 2


# ---- update swamping -----------------------------------------------------------------------------
def test_update_swamping_equals_fraction_rounding():
    torch.manual_seed(0)
    lin = nn.Linear(16, 16)
    opt = torch.optim.SGD(lin.parameters(), lr=1e-4)
    w = ft.watch(lin, ["bf16", "fp16"], optimizer=opt)
    x = torch.randn(32, 16)
    before = lin.weight.detach().clone()
    lin(x).pow(2).mean().backward()
    g = lin.weight.grad.detach().clone()
    opt.step()
    w.stop()
    st_ = w.report().swamping["weight"]
    w0 = before.numpy().astype(np.float64).ravel()
    d = lin.weight.detach().numpy().astype(np.float64).ravel() - w0
    assert st_.updates == np.count_nonzero(d) and st_.grad_nonzero == np.count_nonzero(g.numpy())
    assert st_.lost_own == np.count_nonzero((g.numpy().ravel() != 0) & (d == 0))
    for f in ("bf16", "fp16"):
        vanished, expected = 0, Fraction(0)
        for a, u in zip(w0, d, strict=True):
            if u == 0:
                continue
            wf = Fraction(ref_round(a, f))
            v = wf + Fraction(u)
            vanished += ref_round(v, f) == wf
            lo, hi = Fraction(ref_round(v, f, "down")), Fraction(ref_round(v, f, "up"))
            if lo != hi:
                expected += (hi - v) / (hi - lo) if lo == wf else ((v - lo) / (hi - lo) if hi == wf else 0)
        assert st_.vanished[f] == vanished, f
        assert st_.vanished_sr[f] == pytest.approx(float(expected), rel=1e-9, abs=1e-9), f
    assert st_.vanished["bf16"] > st_.vanished["fp16"]  # bf16 keeps 8 bits, fp16 11


# ---- the outputs ---------------------------------------------------------------------------------
def test_report_outputs_agree():
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**30)
    rep, _ = run(Net(), 2, torch.float16, scaler)
    d = json.loads(rep.to_json())
    assert len(d["tensors"]) == len(rep.records) and set(d["windows"]) == set(FORMATS)
    one = d["tensors"][0]
    assert one["zones"]["fp16"] == rep[one["module"], one["kind"]].zones("fp16")
    text, md = str(rep), rep.to_markdown()
    for w in (rep.scale_window(f) for f in FORMATS):
        assert w.verdict in text and w.verdict in md and d["windows"][w.fmt]["verdict"] == w.verdict
    for s in rep.skips:
        assert str(s) in text and str(s) in md
    assert "| module | kind | values |" in md
    assert len(rep.table(by="tensor").splitlines()) > len(text.splitlines())
    import matplotlib

    matplotlib.use("Agg")
    fig = rep.plot_layers("activation_grad", "fp16")
    assert len([a for a in fig.axes if a.get_visible()]) == 4
    fig = rep.plot_windows("fp16")
    assert len(fig.axes[0].get_yticklabels()) == len(rep.scale_window("fp16").tensors)


AMAXES = [0.0, 5e-324, 7e-46, 1e-45, 2.0**-149, 3.5, 448.0, 449.0, 1e30, 3.4028235e38, 3.5e38, 1e300,
          math.inf, math.nan, 7.000001e-3, 2.0**-126 * 1.75, 65504.0, 57344.0 * (1 + 2.0**-23)]


@pytest.mark.parametrize("amax", AMAXES)
def test_current_scale_exponent_is_te_power_of_two_scaling(amax):
    """The compiled kernel's per-tensor scale, in Python and in numba, against
    fpsim.scaling.CurrentScaling(power_of_2=True) and the scaling oracle (TE's fp32 steps)."""
    from numba import njit

    from fpsim.scaling import CurrentScaling

    jit = njit(lambda fm, a: current_scale_exponent(fm, a))
    for f in ("fp8_e4m3", "fp8_e5m2", "fp16", "bf16"):
        fm = float(np.float32(FMAX[f]))
        with np.errstate(over="ignore"):
            want = CurrentScaling(f, power_of_2=True).compute_scale(amax)
            assert want == so.ref_current_scale(amax, FMAX[f], power_of_2=True)
            assert 2.0 ** current_scale_exponent(fm, amax) == want
        assert 2.0 ** jit(fm, amax) == want


def test_misuse_is_refused():
    model = Net()
    with pytest.raises(ValueError, match="unknown format"):
        ft.watch(model, ["fp17"])
    with pytest.raises(ValueError, match="tensor kinds"):
        ft.watch(model, kinds=["gradient"])
    with pytest.raises(ValueError, match="optimizer"):
        ft.watch(model, kinds=["optimizer_state"])
    with pytest.raises(ValueError, match="sample"):
        ft.watch(model, sample=1.5)
    with pytest.raises(ValueError, match="no such modules"):
        ft.watch(model, modules=["fc9"])
    with pytest.raises(TypeError, match="torch.nn.Module"):
        ft.watch(object())
    w = ft.watch(model)
    with pytest.raises(RuntimeError, match="already started"):
        w.start()
    with pytest.raises(RuntimeError, match="scaler"):
        w.skip_report()
    w.stop()
    w.stop()  # twice is harmless
    with ft.watch(model, ["fp16"]) as w2:
        with torch.no_grad():
            model(torch.zeros(1, 2, dtype=torch.long))  # no gradients: not a step
    assert w2.steps_seen == 0 and not w2.report().records


def test_without_torch_fpsim_imports_and_fpsim_torch_says_what_to_install():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import fpsim, fpsim.stats, fpsim.amp.recipes\n"
        "try:\n    import fpsim.torch\nexcept ImportError as e:\n    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "ERR fpsim.torch needs PyTorch" in out.stdout and "pip install 'fpsim-bits[torch]'" in out.stdout
    out = subprocess.run([sys.executable, "-c", "import fpsim, sys; print('torch' in sys.modules)"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "False"


def test_the_readme_recipe_runs_and_is_ten_lines():
    """The README's "run my own training loop under watch" block, run as written (on "cpu")."""
    from pathlib import Path

    text = (Path(__file__).parent.parent / "README.md").read_text()
    i = text.index("## Your own PyTorch model")
    block = text[text.index("```python\n", i) + 10 : text.index("```", text.index("```python\n", i) + 10)]
    lines = [ln for ln in block.splitlines() if ln.strip()]
    assert len(lines) == 10 and "fpsim.torch.watch(model" in block
    model = Net()
    g = torch.Generator().manual_seed(0)
    loader = [(torch.randint(0, 20, (4, 5), generator=g), torch.randint(0, 20, (4, 5), generator=g))
              for _ in range(3)]  # fmt: skip

    def loss_fn(out, y):
        return nn.functional.cross_entropy(out.float().reshape(-1, 20), y.reshape(-1))

    env = {"model": model, "loader": loader, "loss_fn": loss_fn,
           "opt": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)}  # fmt: skip
    printed = []
    env["print"] = printed.append
    exec(block.replace('"cuda"', '"cpu"'), env)  # noqa: S102
    rep = printed[0]
    assert isinstance(rep, ft.Report) and rep.info["steps_seen"] == 3 and rep.info["scaler"]
    assert {k for _, k in rep.records} == {"activation", "activation_grad", "weight",
                                           "weight_grad", "optimizer_state"}  # fmt: skip


def test_backward_hook_kinds_agree_and_inplace_ops_work():
    """Tensor hooks (the default) and module backward pre-hooks record the same gradients; only
    tensor hooks work when a module's output is modified in place afterwards."""
    reps = []
    for kind in ("tensor", "module"):
        model = Net()
        w = ft.watch(model, ["fp16", "fp8_e5m2"], backward_hooks=kind)
        model(torch.randint(0, 20, (4, 6), generator=torch.Generator().manual_seed(2))).sum().backward()
        w.stop()
        reps.append(w.report())
    for key, rec in reps[0].records.items():
        assert rec.hist.zones("fp8_e5m2") == reps[1][key].hist.zones("fp8_e5m2"), key
        assert rec.amax == reps[1][key].amax
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 1))
    x = torch.randn(16, 4)
    with ft.watch(m, ["fp16"]) as w:
        m(x).sum().backward()
    h = m[0](x).detach().requires_grad_()  # the gradient at layer 0's output, before the ReLU
    m[2](torch.relu(h)).sum().backward()
    rec = w.report()["0", "activation_grad"]
    assert rec.zones("fp16") == zones_by_cast(f32(h.grad), "fp16")
    assert rec.amax == float(h.grad.abs().max())
    with pytest.raises(ValueError, match="backward_hooks"):
        ft.watch(m, backward_hooks="graph")


# ---- the one-call counting path against a plain count, over every dtype a watch reads ----------
class Through(nn.Module):
    """Returns its input: the watch records it as this module's activation, in its dtype."""

    def __init__(self):
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))  # (watched by default: it owns a parameter)

    def forward(self, x):
        return x


def edge_values(np_dtype) -> np.ndarray:
    """Zeros, the smallest and largest subnormals, the smallest normal, 1 and its successor,
    ±max, inf (where the format has it) and NaN, as float64."""
    fi = ml_dtypes.finfo(np_dtype)
    tiny, sub, big = float(fi.smallest_normal), float(fi.smallest_subnormal), float(fi.max)
    v = [0.0, -0.0, sub, -sub, tiny - sub, -(tiny - sub), tiny, -tiny, 1.0, 1.0 + float(fi.eps),
         big, -big, math.nan]  # fmt: skip
    if np_dtype != ml_dtypes.float8_e4m3fn:
        v += [math.inf, -math.inf]
    return np.array(v, np.float64)


def zones_by_ref_round(x: np.ndarray, fmt: str) -> dict:
    """The zones by exact Fraction rounding (tests/oracle.py), value by value: for float64
    values, which a float32 cast would round."""
    from fpsim import get_format

    tiny = get_format(fmt).min_normal
    z = dict.fromkeys(("zero", "underflow", "subnormal", "normal", "overflow", "nonfinite"), 0)
    for v in x.tolist():
        r = ref_round(v, fmt) if math.isfinite(v) and v != 0 else None
        zone = ("nonfinite" if not math.isfinite(v) else "zero" if v == 0 else "underflow"
                if r == 0 else "overflow" if not math.isfinite(r) else "subnormal"
                if abs(r) < tiny else "normal")  # fmt: skip
        z[zone] += 1
    return z


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "float8_e5m2",
                                   "float8_e4m3fn"])  # fmt: skip
def test_one_call_path_equals_a_plain_count_on_every_dtype_and_edge(dtype):
    """Each dtype a watch reads: every bit pattern of the 8- and 16-bit formats, edge values
    and random bit patterns of fp32 / fp64, in a contiguous tensor and a transposed view (the
    copy path). Zones per format, per-tensor-scaled zones and amax against numpy / ml_dtypes
    casts of float32 (exact) or, for float64, exact Fraction rounding."""
    tdt = getattr(torch, dtype)
    npdt = {"bfloat16": ml_dtypes.bfloat16, "float8_e5m2": ml_dtypes.float8_e5m2,
            "float8_e4m3fn": ml_dtypes.float8_e4m3fn}.get(dtype, np.dtype(dtype))  # fmt: skip
    width = np.dtype(npdt).itemsize
    ints = np.dtype(f"u{width}")
    rng = np.random.default_rng(7)
    if width <= 2:  # every code
        codes = np.arange(1 << (8 * width), dtype=np.uint64).astype(ints)
    else:
        codes = rng.integers(0, 1 << (8 * width - 1), 3000 if width == 4 else 400,
                             dtype=np.uint64).astype(ints)  # fmt: skip
        codes[::2] |= ints.type(1 << (8 * width - 1))  # negatives too
    x = np.concatenate([edge_values(npdt), codes.view(npdt).astype(np.float64)])
    x = x[: x.size - x.size % 8]
    base = torch.from_numpy(x).to(tdt) if width >= 2 else \
        torch.from_numpy(x.astype(np.float32)).to(tdt)  # fmt: skip
    assert np.array_equal(base.double().numpy(), x, equal_nan=True)  # exact: all values of tdt
    tensors = [base, base.reshape(8, -1).t()]  # contiguous, and a non-contiguous view
    model = Through()
    with ft.watch(model, formats=FORMATS, kinds="activation") as w:
        for t in tensors:
            model(t)
    rec = w.report()["", "activation"]
    assert rec.counted == rec.seen == 2 * x.size
    fin = np.abs(x[np.isfinite(x)])
    assert rec.amax == float(fin.max())
    am32 = np.float32(fin.max()) if fin.max() < 2.0**128 else np.float32(np.inf)
    for f in FORMATS:
        if width == 8:  # float64 values: exact rounding, value by value
            want = zones_by_ref_round(x, f)
        else:
            want = zones_by_cast(x.astype(np.float32), f)  # exact: tdt's values are float32s
        assert rec.zones(f) == {k: 2 * v for k, v in want.items()}, f
        # per tensor: times 2^floor(log2(fl32(max / fl32(amax)))), 1 for an amax past float32
        s = 1.0
        if np.isfinite(am32):
            q = min(np.float32(FMAX[f]) / am32, np.finfo(np.float32).max)
            s = 2.0 ** math.floor(math.log2(q))
        y = x * s  # exact in float64
        if width <= 2:  # <= 11 significant bits: exact in float32 but where it flushes to 0,
            y32 = y.astype(np.float32)  # far below every format's smallest subnormal
            want = zones_by_cast(y32, f)
            flushed = int(np.count_nonzero((y32 == 0) & (x != 0)))
            want["zero"] -= flushed
            want["underflow"] += flushed
        else:  # float32 could round these twice: exact rounding instead
            want = zones_by_ref_round(y, f)
        assert rec.zones(f, "per_tensor") == {k: 2 * v for k, v in want.items()}, f


class _Tagged(torch.Tensor):
    """A tensor subclass (its memory need not hold its values in general: the watch reads such
    tensors through numpy, not straight from data_ptr())."""


def test_subclass_and_offset_views_are_counted_by_their_values():
    """A tensor subclass, a contiguous view starting inside its storage (data_ptr() past the
    first element) and a plain tensor: zones against ml_dtypes casts of the float32 values."""
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32)
    x = codes.view(np.float32)
    base = torch.from_numpy(x.copy())
    tensors = [base[3:], base[3:].as_subclass(_Tagged), base[:4096].reshape(64, 64)[1:]]
    model = Through()
    with ft.watch(model, formats=FORMATS, kinds="activation") as w:
        for t in tensors:
            model(t)
    rec = w.report()["", "activation"]
    values = np.concatenate([t.numpy() if type(t) is torch.Tensor else t.as_subclass(
        torch.Tensor).numpy() for t in tensors], axis=None)  # fmt: skip
    assert rec.counted == values.size
    for f in FORMATS:
        assert rec.zones(f) == zones_by_cast(values, f), f
