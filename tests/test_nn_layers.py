"""The layers of today's small models against their torch.nn twins with the same weights:
parameter and buffer names and shapes, default initialisation, forward outputs and gradients
(fp32, to a few ulps), BatchNorm's running statistics over training steps (bit for bit), and
MultiheadAttention's supported subset."""

import math

import numpy as np
import pytest

import fpsim
from fpsim import nn
from fpsim.autograd import tensor

torch = pytest.importorskip("torch")


def _load_from_torch(ours, theirs):
    """Copy the torch module's state into ours (names must match, which is part of the test)."""
    sd = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    missing, unexpected = ours.load_state_dict(sd)
    assert not missing and not unexpected


def _close(a, b, ulps=16):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(np.max(np.abs(b)), 1e-30)
    np.testing.assert_allclose(a, b, rtol=ulps * 2.0**-23, atol=ulps * 2.0**-23 * scale)


def _compare(ours, theirs, x, train=True):
    ours.train(train)
    theirs.train(train)
    fx = tensor(x, requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    fy, ty = ours(fx), theirs(tx)
    _close(fy.numpy(force=True), ty.detach().numpy())
    w = np.random.default_rng(1).uniform(0.5, 1.5, ty.shape).astype(np.float32)
    (fy * tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    _close(fx.grad.numpy(), tx.grad.numpy())
    tp = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        _close(p.grad.numpy(), tp[name].grad.numpy())


@pytest.mark.filterwarnings("ignore:Using padding='same'")  # torch, even kernel
@pytest.mark.parametrize(
    "make",
    [
        lambda t: (nn.Conv2d(3, 6, 3, stride=2, padding=1, seed=0), t.nn.Conv2d(3, 6, 3, 2, 1)),
        lambda t: (nn.Conv2d(4, 6, (3, 2), padding="same", groups=2, bias=False, seed=0),
                   t.nn.Conv2d(4, 6, (3, 2), padding="same", groups=2, bias=False)),
        lambda t: (nn.Conv1d(3, 5, 3, dilation=2, seed=0), t.nn.Conv1d(3, 5, 3, dilation=2)),
        lambda t: (nn.RMSNorm(5), t.nn.RMSNorm(5)),
        lambda t: (nn.GroupNorm(2, 4), t.nn.GroupNorm(2, 4)),
        lambda t: (nn.LayerNorm(5), t.nn.LayerNorm(5)),
        lambda t: (nn.MaxPool2d(2), t.nn.MaxPool2d(2)),
        lambda t: (nn.AvgPool2d(3, 2, 1), t.nn.AvgPool2d(3, 2, 1)),
        lambda t: (nn.AdaptiveAvgPool2d((2, 3)), t.nn.AdaptiveAvgPool2d((2, 3))),
        lambda t: (nn.Softplus(2.0), t.nn.Softplus(2.0)),
    ],
    ids=["conv2d", "conv2d_same_groups", "conv1d", "rmsnorm", "groupnorm", "layernorm",
         "maxpool", "avgpool", "adaptive", "softplus"],  # fmt: skip
)
def test_layer_matches_its_torch_twin(make):
    ours, theirs = make(torch)
    assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == [
        (k, tuple(v.shape)) for k, v in theirs.state_dict().items()
    ]
    _load_from_torch(ours, theirs)
    if isinstance(ours, nn.Conv1d):
        shape = (2, 3, 9)
    elif isinstance(ours, nn.Conv2d):
        shape = (2, ours.in_channels, 7, 6)
    elif isinstance(ours, (nn.RMSNorm, nn.LayerNorm)):
        shape = (3, 4, 5)
    else:
        shape = (2, 4, 6, 5)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    _compare(ours, theirs, x)


def test_conv_default_initialisation_is_torchs_distribution():
    conv = nn.Conv2d(8, 16, 3, seed=0)
    bound = 1 / math.sqrt(8 * 9)  # kaiming_uniform(a=sqrt 5) on fan_in = 72: U(+-1/sqrt(72))
    w, b = conv.weight.numpy(force=True), conv.bias.numpy(force=True)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert np.abs(w).max() > 0.95 * bound  # uniform over the whole interval
    assert abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound


@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm2d_training_steps_and_running_stats_match_torch(momentum):
    ours, theirs = nn.BatchNorm2d(3, momentum=momentum), torch.nn.BatchNorm2d(3, momentum=momentum)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    rng = np.random.default_rng(0)
    for step in range(4):
        x = (rng.standard_normal((4, 3, 5, 5)) * (step + 1) + step).astype(np.float32)
        _compare(ours, theirs, x, train=True)
        for name in ("running_mean", "running_var"):
            got = getattr(ours, name).numpy()
            want = getattr(theirs, name).numpy()
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (step, name)
        assert ours.num_batches_tracked.item() == theirs.num_batches_tracked.item() == step + 1
        assert ours.running_mean._version == step + 1  # an in-place update each step
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    _compare(ours, theirs, x, train=False)  # evaluation: the running statistics


def test_batchnorm_eval_without_running_stats_and_1d():
    ours, theirs = nn.BatchNorm1d(4, track_running_stats=False), torch.nn.BatchNorm1d(
        4, track_running_stats=False
    )
    x = np.random.default_rng(0).standard_normal((5, 4, 3)).astype(np.float32)
    _compare(ours, theirs, x, train=False)  # batch statistics even in eval mode
    with pytest.raises(ValueError, match="expected 2D or 3D input"):
        ours(fpsim.randn(2, 4, 3, 3, generator=0))


def test_embedding_padding_idx_row_is_zero_and_gets_no_gradient():
    emb = nn.Embedding(5, 3, seed=0, padding_idx=-1)
    assert emb.padding_idx == 4 and np.all(emb.weight.numpy(force=True)[4] == 0)
    emb(tensor([[4, 1], [4, 4]])).sum().backward()
    assert np.all(emb.weight.grad.numpy()[4] == 0) and np.all(emb.weight.grad.numpy()[1] == 1)


MHA_CASES = [
    dict(batch_first=True),
    dict(batch_first=False),
    dict(batch_first=True, need_weights=False),
    dict(batch_first=True, average_attn_weights=False),
    dict(batch_first=True, attn_mask="causal_bool"),
    dict(batch_first=True, attn_mask="float", need_weights=False),
    dict(batch_first=True, key_padding_mask=True),
    dict(batch_first=True, attn_mask="causal_bool", is_causal=True, need_weights=False),
    dict(batch_first=True, cross=True),
]


@pytest.mark.parametrize("case", MHA_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_multihead_attention_matches_torch(case):
    case = dict(case)
    bf, cross = case.pop("batch_first"), case.pop("cross", False)
    E, H, N, L = 8, 2, 3, 5
    ours = nn.MultiheadAttention(E, H, batch_first=bf, seed=0)
    theirs = torch.nn.MultiheadAttention(E, H, batch_first=bf)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    _load_from_torch(ours, theirs)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, L, E) if bf else (L, N, E)).astype(np.float32)
    kv = rng.standard_normal(x.shape).astype(np.float32) if cross else x
    kw_f, kw_t = {}, {}
    mask = case.pop("attn_mask", None)
    if mask == "causal_bool":  # True blocks, in nn.MultiheadAttention
        m = ~np.tril(np.ones((L, L), bool))
        kw_f["attn_mask"], kw_t["attn_mask"] = tensor(m), torch.tensor(m)
    elif mask == "float":
        m = rng.standard_normal((L, L)).astype(np.float32)
        kw_f["attn_mask"], kw_t["attn_mask"] = tensor(m), torch.tensor(m)
    if case.pop("key_padding_mask", False):
        m = np.zeros((N, L), bool)
        m[0, -2:] = True
        kw_f["key_padding_mask"], kw_t["key_padding_mask"] = tensor(m), torch.tensor(m)
    kw_f.update(case)
    kw_t.update(case)
    fx, tx = tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    fkv = fx if not cross else tensor(kv)
    tkv = tx if not cross else torch.tensor(kv)
    fo, fw = ours(fx, fkv, fkv, **kw_f)
    to, tw = theirs(tx, tkv, tkv, **kw_t)
    _close(fo.numpy(force=True), to.detach().numpy())
    assert (fw is None) == (tw is None)
    if fw is not None:
        _close(fw.numpy(force=True), tw.detach().numpy())
    fo.sum().backward()
    to.sum().backward()
    _close(fx.grad.numpy(), tx.grad.numpy())
    _close(ours.in_proj_weight.grad.numpy(), theirs.in_proj_weight.grad.numpy())


def test_multihead_attention_refuses_what_it_does_not_model():
    with pytest.raises(NotImplementedError, match="kdim"):
        nn.MultiheadAttention(8, 2, kdim=4)
    with pytest.raises(NotImplementedError, match="add_bias_kv"):
        nn.MultiheadAttention(8, 2, add_bias_kv=True)
