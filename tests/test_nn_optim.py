"""nn modules, initialisation, optimizers (against PyTorch's documented update formulas written
out here in float64), master weights and the lost-update lesson, clip_grad_norm_, training on
two moons, and (when PyTorch is installed) loss and gradients against torch itself."""

import math

import numpy as np
import pytest

import fpsim
from fpsim import data, nn, optim
from fpsim.autograd import no_grad, tensor
from fpsim.formats import bf16, fp16, fp32, fp64
from fpsim.nn import functional as F

# ---- modules ---------------------------------------------------------------------------------


def test_module_registration_and_traversal():
    model = nn.MLP([3, 5, 4, 2], seed=0)
    names = [n for n, _ in model.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    assert [type(m).__name__ for m in model.children()] == ["Linear", "ReLU"] * 2 + ["Linear"]
    assert [n for n, _ in model.named_modules()][:3] == ["", "0", "1"]
    assert model[0].weight.shape == (5, 3) and model[0].bias.shape == (5,)
    assert len(model) == 5 and isinstance(model[1:3], nn.Sequential)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(7, 4, seed=1)
            self.norm = nn.LayerNorm(4)
            self.blocks = nn.ModuleList([nn.Linear(4, 4, seed=2), nn.Linear(4, 3, bias=False)])
            self.drop = nn.Dropout(0.5, seed=3)
            self.register_buffer("scale", tensor([2.0]))

        def forward(self, idx):
            h = self.drop(self.norm(self.emb(idx)))
            for b in self.blocks:
                h = F.gelu(b(h))
            return h * self.scale

    net = Net()
    assert [n for n, _ in net.named_parameters()] == [
        "emb.weight", "norm.weight", "norm.bias", "blocks.0.weight", "blocks.0.bias",
        "blocks.1.weight",
    ]  # fmt: skip
    assert "scale" in net.state_dict()
    out = net(tensor([[1, 2, 6]]))
    assert out.shape == (1, 3, 3) and out.format is fp32
    net.eval()
    assert not net.drop.training
    a, b = net(tensor([1, 2])), net(tensor([1, 2]))
    assert np.array_equal(a.data, b.data)  # no dropout in eval mode
    net.train()
    assert net.drop.training


def test_state_dict_round_trip_and_errors():
    a = nn.MLP([4, 8, 3], seed=0)
    b = nn.MLP([4, 8, 3], seed=1)
    x = fpsim.autograd.randn(5, 4, generator=0)
    assert not np.array_equal(a(x).data, b(x).data)
    sd = a.state_dict()
    sd["0.weight"].data[0, 0] = 123.0  # a copy: the model is unchanged
    assert a[0].weight.data[0, 0] != 123.0
    b.load_state_dict(a.state_dict())
    assert np.array_equal(a(x).data, b(x).data)
    with pytest.raises(RuntimeError, match="missing keys"):
        b.load_state_dict({"0.weight": sd["0.weight"]})
    res = b.load_state_dict({"0.weight": sd["0.weight"], "extra": 1}, strict=False)
    assert res.unexpected_keys == ["extra"] and "0.bias" in res.missing_keys
    with pytest.raises(RuntimeError, match="size mismatch"):
        b.load_state_dict({**a.state_dict(), "0.bias": np.zeros(2)})


def test_module_to_half_converts_in_place_and_rounds():
    m = nn.Linear(3, 2, seed=0)
    w = m.weight
    before = w.data.copy()
    m.half()
    assert m.weight is w and w.format is fp16 and m.bias.format is fp16
    assert np.array_equal(w.data, fpsim.round_to(before, "fp16"))
    assert "format=fp16" in repr(m)
    with pytest.raises(RuntimeError, match="same format"):
        m(tensor(np.ones((1, 3))))  # fp32 input into an fp16 layer, outside autocast
    y = m(tensor(np.ones((1, 3)), "fp16"))
    assert y.format is fp16
    m.to("bf16")
    assert w.format is bf16
    sd = m.state_dict()
    m2 = nn.Linear(3, 2, seed=5)  # fp32: the loaded bf16 values are exactly representable
    m2.load_state_dict(sd)
    assert np.array_equal(m2.weight.data, w.data)


def test_forward_hooks():
    m = nn.MLP([2, 3, 1], seed=0)
    seen = []
    h = m[1].register_forward_hook(lambda mod, inp, out: seen.append(out.format.name))
    m(tensor(np.ones((4, 2), np.float32)))
    h.remove()
    m(tensor(np.ones((4, 2), np.float32)))
    assert seen == ["fp32"]


def test_initialisations_are_seeded_and_have_the_right_scale():
    a = nn.Linear(400, 300, seed=7)
    b = nn.Linear(400, 300, seed=7)
    assert np.array_equal(a.weight.data, b.weight.data)
    assert not np.array_equal(a.weight.data, nn.Linear(400, 300, seed=8).weight.data)
    bound = 1 / math.sqrt(400)  # PyTorch's default: kaiming_uniform(a=sqrt 5) = U(+-1/sqrt(in))
    assert np.abs(a.weight.data).max() <= bound and np.abs(a.weight.data).max() > 0.99 * bound
    assert np.abs(a.bias.data).max() <= bound
    k = nn.Linear(400, 300, seed=0, init="kaiming")
    assert abs(k.weight.data.std() - math.sqrt(2 / 400)) < 0.02 * math.sqrt(2 / 400)
    assert np.all(k.bias.data == 0)
    x = nn.Linear(400, 300, seed=0, init="xavier")
    xb = math.sqrt(6 / 700)
    assert np.abs(x.weight.data).max() <= xb and np.abs(x.weight.data).max() > 0.99 * xb
    w = nn.Parameter(np.zeros((50, 60)), "fp16")
    nn.init.xavier_normal_(w, generator=np.random.default_rng(0))
    assert w.format is fp16 and np.array_equal(w.data, fpsim.round_to(w.data, "fp16"))
    assert abs(w.data.std() - math.sqrt(2 / 110)) < 0.05 * math.sqrt(2 / 110)


# ---- optimizers against PyTorch's formulas ---------------------------------------------------

GRADS = [np.array([0.5, -1.0, 2.0, 0.0]), np.array([-0.25, 0.75, 1.5, 2.0**-10]),
         np.array([1.0, 1.0, -2.0, -0.5]), np.array([0.125, -0.25, 0.375, -0.5])]  # fmt: skip
W0 = np.array([1.0, -2.0, 0.5, 3.0])


def run_opt(make, fmt="fp64", steps=4, master=False):
    p = nn.Parameter(W0, fmt)
    opt = make([p], master) if master else make([p])
    for g in GRADS[:steps]:
        p.grad = tensor(g, fmt)
        opt.step()
    return p, opt


def sgd_ref(lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False):
    """torch.optim.SGD, as documented."""
    w, buf = W0.copy(), None
    for g in GRADS:
        g = -g if maximize else g.copy()
        if weight_decay:
            g = g + weight_decay * w
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        w = w - lr * g
    return w


SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.1, momentum=0.9),
    dict(lr=0.05, momentum=0.8, dampening=0.3),
    dict(lr=0.1, momentum=0.9, weight_decay=0.01),
    dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1),
    dict(lr=0.1, maximize=True, momentum=0.5),
]


@pytest.mark.parametrize("kw", SGD_CASES)
def test_sgd_matches_pytorch_formula(kw):
    p, _ = run_opt(lambda ps: optim.SGD(ps, **kw))
    np.testing.assert_allclose(p.data, sgd_ref(**kw), rtol=1e-14, atol=1e-15)
    p32, _ = run_opt(lambda ps: optim.SGD(ps, **kw), fmt="fp32")
    assert p32.data.dtype == np.float32
    np.testing.assert_allclose(p32.data, sgd_ref(**kw), rtol=1e-6, atol=1e-7)


def adam_ref(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
             decoupled=False):  # fmt: skip
    """torch.optim.Adam / AdamW, as documented."""
    b1, b2 = betas
    w, m, v, vmax = W0.copy(), np.zeros(4), np.zeros(4), np.zeros(4)
    for t, g in enumerate(GRADS, start=1):
        if weight_decay and decoupled:
            w = w * (1 - lr * weight_decay)
        elif weight_decay:
            g = g + weight_decay * w
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mhat = m / (1 - b1**t)
        if amsgrad:
            vmax = np.maximum(vmax, v)
            vhat = vmax / (1 - b2**t)
        else:
            vhat = v / (1 - b2**t)
        w = w - lr * mhat / (np.sqrt(vhat) + eps)
    return w


ADAM_CASES = [
    ("Adam", dict(lr=0.1)),
    ("Adam", dict(lr=0.1, betas=(0.8, 0.9), eps=1e-2)),  # eps large: its placement matters
    ("Adam", dict(lr=0.1, weight_decay=0.1)),
    ("Adam", dict(lr=0.1, amsgrad=True)),
    ("AdamW", dict(lr=0.1)),  # default weight_decay 1e-2, decoupled
    ("AdamW", dict(lr=0.1, weight_decay=0.5, eps=1e-3)),
]


@pytest.mark.parametrize("cls,kw", ADAM_CASES)
def test_adam_matches_pytorch_formula(cls, kw):
    opt_cls = getattr(optim, cls)
    p, opt = run_opt(lambda ps: opt_cls(ps, **kw))
    ref_kw = dict(kw, decoupled=cls == "AdamW")
    if cls == "AdamW":
        ref_kw.setdefault("weight_decay", 1e-2)
    np.testing.assert_allclose(p.data, adam_ref(**ref_kw), rtol=1e-13, atol=1e-14)
    assert opt.state[p]["step"] == 4
    p32, _ = run_opt(lambda ps: opt_cls(ps, **kw), fmt="fp32")
    np.testing.assert_allclose(p32.data, adam_ref(**ref_kw), rtol=1e-6, atol=1e-6)


def test_optimizer_options_and_errors():
    p = nn.Parameter([1.0])
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    q = nn.Parameter([2.0])
    opt = optim.SGD([{"params": [p]}, {"params": [q], "lr": 0.5}], lr=0.1)
    p.grad, q.grad = tensor([1.0]), tensor([1.0])
    opt.step()
    assert p.item() == pytest.approx(0.9) and q.item() == 1.5
    assert opt.param_groups[1]["params"][0] is q
    opt.zero_grad(set_to_none=False)
    assert p.grad.item() == 0.0
    opt.zero_grad()
    assert p.grad is None
    opt.step()  # no gradients: nothing moves
    assert q.item() == 1.5


@pytest.mark.parametrize("make", [
    lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: optim.AdamW(ps, lr=0.1, amsgrad=True),
])  # fmt: skip
def test_optimizer_state_dict_continues_the_same_trajectory(make):
    p_full, _ = run_opt(make, fmt="fp32")  # 4 uninterrupted steps
    p, opt = run_opt(make, fmt="fp32", steps=2)
    sd = opt.state_dict()
    p2 = nn.Parameter(p.data, "fp32")
    opt2 = make([p2])
    opt2.load_state_dict(sd)
    for g in GRADS[2:]:
        p2.grad = tensor(g)
        opt2.step()
    assert np.array_equal(p2.data, p_full.data)
    assert sd["param_groups"][0]["params"] == [0]


# ---- master weights and the lost update ------------------------------------------------------


def test_lost_update_in_fp16_and_the_fp32_master_fix():
    lr, n = 2.0**-12, 16
    for sign in (1.0, -1.0):  # 1 - 2^-12 ties back to 1.0; 1 + 2^-12 is below half a spacing
        w16 = nn.Parameter([1.0], "fp16")
        w32 = nn.Parameter([1.0], "fp32")
        wm = nn.Parameter([1.0], "fp16")
        plain = optim.SGD([w16, w32], lr=lr)
        master = optim.SGD([wm], lr=lr, master_weights=True)
        for _ in range(n):
            w16.grad, w32.grad, wm.grad = (tensor([sign], f) for f in ("fp16", "fp32", "fp16"))
            plain.step()
            master.step()
        assert w16.item() == 1.0  # the fp16 weight never moved
        assert w32.item() == 1.0 - sign * n * lr  # fp32 takes every update
        m = master.state[wm]["master"]
        assert m.dtype == np.float32 and m[0] == 1.0 - sign * n * lr  # the master moved
        assert wm.item() == fpsim.round_to(1.0 - sign * n * lr, "fp16")  # and its fp16 copy
        assert wm.item() != 1.0 and wm.format is fp16


def test_master_weights_adam_keeps_fp32_state_and_rounds_the_param_once():
    p16, opt = run_opt(lambda ps, m: optim.Adam(ps, lr=0.1, master_weights=m), "fp16", master=True)
    st = opt.state[p16]
    assert st["exp_avg"].dtype == np.float32 and st["master"].dtype == np.float32
    assert np.array_equal(p16.data, fpsim.round_to(st["master"], "fp16"))
    # the fp32 master follows the fp32 run given the same (fp16-representable) gradients
    p32, _ = run_opt(lambda ps: optim.Adam(ps, lr=0.1), "fp32")
    np.testing.assert_array_equal(st["master"], p32.data)
    # without master weights the state itself is held in fp16
    p, opt = run_opt(lambda ps: optim.Adam(ps, lr=0.1), "fp16")
    assert np.array_equal(
        opt.state[p]["exp_avg_sq"], fpsim.round_to(opt.state[p]["exp_avg_sq"], "fp16")
    )


# ---- clip_grad_norm_ -------------------------------------------------------------------------


def test_clip_grad_norm_pytorch_semantics():
    a, b = nn.Parameter(np.zeros(3), "fp64"), nn.Parameter(np.zeros(2), "fp64")
    a.grad, b.grad = tensor([3.0, 0.0, 4.0], "fp64"), tensor([12.0, 0.0], "fp64")
    total = optim.clip_grad_norm_([a, b], max_norm=6.5)
    assert total.item() == 13.0 and total.format is fp64
    coef = 6.5 / (13.0 + 1e-6)
    np.testing.assert_allclose(a.grad.data, np.array([3.0, 0.0, 4.0]) * coef, rtol=1e-15)
    before = b.grad.data.copy()
    total2 = optim.clip_grad_norm_([a, b], max_norm=100.0)  # below the limit: unchanged
    assert total2.item() == pytest.approx(6.5, rel=1e-6) and np.array_equal(b.grad.data, before)
    b.grad = tensor([-7.0, 2.0], "fp64")
    assert optim.clip_grad_norm_([a, b], 1e9, norm_type=math.inf).item() == 7.0
    h = nn.Parameter(np.zeros(2), "fp16")
    h.grad = tensor([3.0, 4.0], "fp16")
    t = optim.clip_grad_norm_(h, 1.0)
    assert t.format is fp16 and t.item() == 5.0
    coef16 = fpsim.round_to(1.0 / 5.0, "fp16")  # 1 / (5 + 1e-6) in fp16 arithmetic
    assert h.grad.format is fp16
    assert np.array_equal(h.grad.data, fpsim.round_to(np.array([3.0, 4.0]) * coef16, "fp16"))
    h.grad = tensor([np.inf, 1.0], "fp16")
    with pytest.raises(RuntimeError, match="non-finite"):
        optim.clip_grad_norm_([h], 1.0, error_if_nonfinite=True)


# ---- training --------------------------------------------------------------------------------


def test_mlp_learns_two_moons_in_fp32():
    X, y = data.two_moons(300, noise=0.1, seed=0)
    model = nn.MLP([2, 32, 32, 2], seed=0)  # 3 Linear layers
    opt = optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for epoch in range(40):
        for xb, yb in data.batches(X, y, batch_size=64, seed=epoch):
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    with no_grad():
        acc = (model(tensor(X)).argmax(1) == tensor(y)).float().mean().item()
    assert acc >= 0.97
    assert np.mean(losses[-10:]) < 0.1 * np.mean(losses[:5])


def test_teacher_regression_with_sgd_momentum_and_clipping():
    X, Y = data.teacher_regression(256, in_features=4, hidden=16, seed=1)
    model = nn.MLP([4, 32, 1], activation="tanh", seed=2)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    xt, yt = tensor(X), tensor(Y)
    first = None
    for _ in range(200):
        loss = F.mse_loss(model(xt), yt)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        optim.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    assert loss.item() < 0.05 * first


# ---- against PyTorch -------------------------------------------------------------------------


def test_same_network_same_gradients_as_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = rng.integers(0, 4, 8)
    t_reg = rng.standard_normal((8, 4)).astype(np.float32)

    fm = nn.Sequential(
        nn.Linear(6, 16, seed=1), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 16, seed=2),
        nn.Tanh(), nn.Linear(16, 16, seed=3), nn.SiLU(), nn.Linear(16, 4, seed=4),
    )  # fmt: skip
    tm = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.Linear(16, 16),
        torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.SiLU(), torch.nn.Linear(16, 4),
    )  # fmt: skip
    with torch.no_grad():
        for p, tp in zip(fm.parameters(), tm.parameters(), strict=True):
            tp.copy_(torch.from_numpy(p.data.copy()))

    def f_loss(model):
        out = model(tensor(x))
        return (F.cross_entropy(out, tensor(y)) + F.mse_loss(F.softmax(out, 1), tensor(t_reg))
                + F.log_softmax(out, 1).logsumexp(1).var())  # fmt: skip

    def t_loss(model):
        out = model(torch.from_numpy(x))
        tf = torch.nn.functional
        return (tf.cross_entropy(out, torch.from_numpy(y)) + tf.mse_loss(tf.softmax(out, 1), torch.from_numpy(t_reg))
                + tf.log_softmax(out, 1).logsumexp(1).var())  # fmt: skip

    lf, lt = f_loss(fm), t_loss(tm)
    lf.backward()
    lt.backward()
    np.testing.assert_allclose(lf.item(), lt.item(), rtol=1e-5)
    for (name, p), tp in zip(fm.named_parameters(), tm.parameters(), strict=True):
        g, tg = p.grad.data, tp.grad.numpy()
        np.testing.assert_allclose(g, tg, rtol=1e-5, atol=1e-5 * np.abs(tg).max(), err_msg=name)

    # one optimizer step each: the same formulas give the same weights
    for make_f, make_t in [
        (lambda ps: optim.AdamW(ps, lr=0.01), lambda ps: torch.optim.AdamW(ps, lr=0.01)),
        (lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
         lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ]:  # fmt: skip
        of, ot = make_f(list(fm.parameters())), make_t(list(tm.parameters()))
        for _ in range(2):
            of.step()
            ot.step()
        for p, tp in zip(fm.parameters(), tm.parameters(), strict=True):
            np.testing.assert_allclose(p.data, tp.detach().numpy(), rtol=1e-5, atol=1e-6)
