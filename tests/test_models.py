"""fpsim.models (the char-level GPT and the small CNN) against their PyTorch twins
(tests/torch_twins.py) started from the same weights: fp32 losses step by step to a few ulps
over the first training steps, gradients at the first step, and under autocast("cpu") the
format of every layer's output and of every parameter's gradient. Plus the shapes data set."""

import numpy as np
import pytest

import fpsim
from fpsim import data, models, optim
from fpsim.nn import functional as F


def _ulps(a: float, b: float) -> int:
    a32, b32 = np.float32(a), np.float32(b)
    return abs(int(a32.view(np.int32)) - int(b32.view(np.int32)))


def test_shapes_data_set_is_deterministic_balanced_and_scaled():
    X, y = data.shapes(64, size=16, seed=3)
    X2, y2 = data.shapes(64, size=16, seed=3)
    assert np.array_equal(X, X2) and np.array_equal(y, y2)
    assert X.shape == (64, 1, 16, 16) and X.dtype == np.float32 and y.dtype == np.int64
    assert np.bincount(y).tolist() == [16, 16, 16, 16]
    assert abs(float(X.mean())) < 0.3 and 0.7 < float(X.std()) < 1.3
    # noiseless: the background is exactly (0 - 0.2) / 0.4 and the ink (1 - 0.2) / 0.4
    Xc, _ = data.shapes(8, size=16, noise=0.0, seed=0)
    vals = np.unique(Xc)
    assert vals.min() == np.float32(-0.5) and vals.max() == np.float32(2.0)


def test_cnn_learns_the_shapes():
    """The labels are the generator's: a trained CNN must find them (held-out accuracy)."""
    X, y = data.shapes(640, size=16, seed=0)
    cnn = models.SmallCNN(seed=0)
    opt = optim.Adam(cnn.parameters(), lr=0.01)
    for epoch in range(5):
        for xb, yb in data.batches(X[:512], y[:512], batch_size=32, seed=epoch):
            loss = F.cross_entropy(cnn(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    cnn.eval()
    with fpsim.no_grad():
        pred = cnn(fpsim.tensor(X[512:])).argmax(1).numpy()
    assert np.mean(pred == y[512:]) > 0.75  # chance: 0.25


def test_gpt_generate_and_block_size():
    X, Y, vocab = data.char_dataset(seq_len=8)
    gpt = models.CharGPT(len(vocab), block_size=8, n_layer=1, n_head=2, n_embd=16, seed=0)
    out = gpt.generate(fpsim.tensor(X[:2, :3]), steps=10, generator=0)
    assert out.shape == (2, 13) and np.array_equal(out.numpy()[:, :3], X[:2, :3])
    with pytest.raises(ValueError, match="block_size"):
        gpt(fpsim.tensor(X[:1, :8].repeat(2, axis=1)))


torch = pytest.importorskip("torch")
from torch_twins import twin_of  # noqa: E402

TF = torch.nn.functional
CHARS = data.char_dataset(seq_len=16)


def _gpt(norm):
    _, _, vocab = CHARS
    return models.CharGPT(len(vocab), block_size=16, n_layer=2, n_head=4, n_embd=32, norm=norm,
                          seed=0)  # fmt: skip


def _gpt_batches(steps):
    X, Y, _ = CHARS
    rng = np.random.default_rng(0)
    for _ in range(steps):
        i = rng.choice(len(X), 16, replace=False)
        yield X[i], Y[i]


def _gpt_loss(model, xb, yb, lib):
    v = CHARS[2]
    if lib == "fpsim":
        logits = model(fpsim.tensor(xb)).reshape(-1, len(v))
        return F.cross_entropy(logits, fpsim.tensor(yb.reshape(-1)))
    logits = model(torch.from_numpy(xb)).reshape(-1, len(v))
    return TF.cross_entropy(logits, torch.from_numpy(yb.reshape(-1)))


def _cnn_batches(steps):
    X, y = data.shapes(32 * steps, size=16, seed=1)
    for k in range(steps):
        yield X[32 * k : 32 * (k + 1)], y[32 * k : 32 * (k + 1)]


def _cnn_loss(model, xb, yb, lib):
    if lib == "fpsim":
        return F.cross_entropy(model(fpsim.tensor(xb)), fpsim.tensor(yb))
    return TF.cross_entropy(model(torch.from_numpy(xb)), torch.from_numpy(yb))


MODELS = {
    "gpt_layernorm": (lambda: _gpt("layer"), _gpt_batches, _gpt_loss, 0.125),
    "gpt_rmsnorm": (lambda: _gpt("rms"), _gpt_batches, _gpt_loss, 0.125),
    "cnn": (lambda: models.SmallCNN(seed=0), _cnn_batches, _cnn_loss, 2.0**-5),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_fp32_training_matches_torch_step_by_step(name):
    """Same weights, same batches, plain SGD with a power-of-two learning rate (so ``w - lr*g``
    rounds once in both libraries and the optimizers cannot differ): the losses of the first
    six steps agree to a few fp32 ulps; the first step's gradients to a few ulps of their
    scale. What remains is the summation order of BLAS / oneDNN / fused kernels."""
    make, batches, loss_fn, lr = MODELS[name]
    ours = make()
    theirs = twin_of(ours)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    opt, topt = optim.SGD(ours.parameters(), lr=lr), torch.optim.SGD(theirs.parameters(), lr=lr)
    diffs = []
    for step, (xb, yb) in enumerate(batches(6)):
        loss, tloss = loss_fn(ours, xb, yb, "fpsim"), loss_fn(theirs, xb, yb, "torch")
        assert loss.format.name == "fp32"
        diffs.append(_ulps(loss.item(), tloss.item()))
        opt.zero_grad()
        topt.zero_grad()
        loss.backward()
        tloss.backward()
        if step == 0:
            tp = dict(theirs.named_parameters())
            for pname, p in ours.named_parameters():
                g, tg = p.grad.numpy(), tp[pname].grad.numpy()
                scale = np.max(np.abs(tg))
                assert np.max(np.abs(g - tg)) <= 64 * 2.0**-23 * scale, pname
        opt.step()
        topt.step()
    assert max(diffs) <= 8, diffs


def _layer_formats(model, run, lib):
    """{module name: output format} from forward hooks, and {parameter: gradient format}."""
    seen = {}
    mods = list(model.named_modules())
    handles = []
    for mname, m in mods:
        if mname:
            def hook(mod, inputs, out, mname=mname):
                seen[mname] = out.format.name if lib == "fpsim" else str(out.dtype)
            handles.append(m.register_forward_hook(hook))
    loss = run()
    loss.backward()
    for h in handles:
        h.remove()
    names = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}
    seen = {k: names.get(v, v) for k, v in seen.items()}
    grads = {}
    for pname, p in model.named_parameters():
        grads[pname] = p.grad.format.name if lib == "fpsim" else names[str(p.grad.dtype)]
    out_fmt = loss.format.name if lib == "fpsim" else names[str(loss.dtype)]
    return seen, grads, out_fmt


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # torch, rms_norm
@pytest.mark.parametrize("lowp", ["bf16", "fp16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_layer_formats_under_autocast_match_torch(name, lowp):
    make, batches, loss_fn, _ = MODELS[name]
    ours = make()
    theirs = twin_of(ours)
    xb, yb = next(batches(1))
    tdt = torch.bfloat16 if lowp == "bf16" else torch.float16

    def run_ours():
        with fpsim.autocast("cpu", dtype=lowp):
            return loss_fn(ours, xb, yb, "fpsim")

    def run_theirs():
        with torch.autocast("cpu", dtype=tdt):
            return loss_fn(theirs, xb, yb, "torch")

    got = _layer_formats(ours, run_ours, "fpsim")
    want = _layer_formats(theirs, run_theirs, "torch")
    assert got[0] == want[0]  # every layer's output format
    assert got[1] == want[1]  # every parameter's gradient format (fp32: the cast nodes)
    assert got[2] == want[2] == "fp32"  # the loss
    assert lowp in got[0].values()  # the linear/conv layers did run in low precision
