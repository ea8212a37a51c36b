"""fpsim.memory against hand arithmetic (bytes per value typed in here, not read from Format)."""

import pytest

from fpsim import nn, optim, tensor
from fpsim.memory import (
    GB,
    RECIPES,
    GiB,
    Recipe,
    bytes_per_parameter,
    get_recipe,
    memory_budget,
    optimizer_budget,
)

# The oracle: bytes per value of each storage format, by hand.
SIZE = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8_e4m3": 1}

# (recipe, [(part, format), ...]) written out by hand
EXPECTED = {
    "fp32_weights": [("weights", "fp32")],
    "fp16_weights": [("weights", "fp16")],
    "bf16_weights": [("weights", "bf16")],
    "fp8_weights": [("weights", "fp8_e4m3")],
    "fp32_sgd": [("weights", "fp32"), ("gradients", "fp32")],
    "fp32_adam": [
        ("weights", "fp32"),
        ("gradients", "fp32"),
        ("exp_avg", "fp32"),
        ("exp_avg_sq", "fp32"),
    ],
    "fp16_adam": [
        ("weights", "fp16"),
        ("gradients", "fp16"),
        ("exp_avg", "fp16"),
        ("exp_avg_sq", "fp16"),
    ],
    "bf16_adam": [
        ("weights", "bf16"),
        ("gradients", "bf16"),
        ("exp_avg", "bf16"),
        ("exp_avg_sq", "bf16"),
    ],
    "mixed_sgd": [("weights", "fp16"), ("gradients", "fp16"), ("master", "fp32")],
    "mixed_adam": [
        ("weights", "fp16"),
        ("gradients", "fp16"),
        ("master", "fp32"),
        ("exp_avg", "fp32"),
        ("exp_avg_sq", "fp32"),
    ],
    "mixed_bf16_adam": [
        ("weights", "bf16"),
        ("gradients", "bf16"),
        ("master", "fp32"),
        ("exp_avg", "fp32"),
        ("exp_avg_sq", "fp32"),
    ],
}


def test_every_recipe_is_checked():
    assert set(RECIPES) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_breakdown_matches_hand_arithmetic(name):
    n = 123_457
    b = memory_budget(n, name)
    assert list(b.parts) == [part for part, _ in EXPECTED[name]]
    assert b.parts == {part: n * SIZE[fmt] for part, fmt in EXPECTED[name]}
    assert b.formats == dict(EXPECTED[name])
    per_param = sum(SIZE[fmt] for _, fmt in EXPECTED[name])
    assert b.total == n * per_param
    assert bytes_per_parameter(name) == per_param
    assert b.bytes_per_parameter == per_param


def test_half_billion_parameter_example():
    # 0.5e9 fp32 weights: 2.0e9 bytes = 2.0 GB (10^9) = 1.8626... GiB (2^30): "about 1.9 GB"
    # only holds with GB read as GiB.
    b = memory_budget(0.5e9, "fp32_weights")
    assert b.total == 2_000_000_000
    assert b.total / GB == 2.0
    assert round(b.total / GiB, 4) == 1.8626
    assert GB == 1_000_000_000 and GiB == 1_073_741_824
    half = memory_budget(500_000_000, "fp16_weights")
    assert half.total == 1_000_000_000 == b.total // 2
    assert round(half.total / GiB, 4) == 0.9313
    mixed = memory_budget(5e8, "mixed_adam")
    assert mixed.parts == {
        "weights": 1_000_000_000,
        "gradients": 1_000_000_000,
        "master": 2_000_000_000,
        "exp_avg": 2_000_000_000,
        "exp_avg_sq": 2_000_000_000,
    }
    assert mixed.total == 8_000_000_000
    assert mixed.in_units(GB)["total"] == 8.0
    assert mixed.in_units(GiB)["master"] == pytest.approx(2e9 / 1073741824)


def test_zero_paper_example():
    # Rajbhandari et al. (ZeRO): 16 bytes per parameter in mixed-precision Adam, so a
    # 1.5B-parameter GPT-2 needs 24 GB of model state; its fp16 weights alone 3 GB.
    assert memory_budget(1.5e9, "mixed_adam").total == 24 * 10**9
    assert memory_budget(1.5e9, "fp16_weights").total == 3 * 10**9


def test_custom_recipe_and_packed_widths():
    # tf32 is 19 bits: 3 values are 57 bits, i.e. 8 whole bytes (rounded up)
    r = Recipe("tf32_only", weights="tf32")
    assert memory_budget(3, r).parts == {"weights": 8}
    assert memory_budget(8, r).parts == {"weights": 19}
    assert bytes_per_parameter(r) == 19 / 8
    r2 = Recipe("fp8_mixed", "fp8_e4m3", "fp8_e5m2", "fp32", (("exp_avg", "bf16"),))
    assert memory_budget(10, r2).parts == {
        "weights": 10,
        "gradients": 10,
        "master": 40,
        "exp_avg": 20,
    }
    assert get_recipe(r2) is r2


def test_table_text():
    text = str(memory_budget(0.5e9, "mixed_adam"))
    assert (
        text.splitlines()[0] == "500,000,000 parameters, recipe mixed_adam: 16 bytes per parameter"
    )
    assert "8,000,000,000" in text and "7.451" in text and "8.000" in text


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown recipe 'fp17'"):
        memory_budget(10, "fp17")
    with pytest.raises(ValueError, match="whole number"):
        memory_budget(2.5, "fp32_weights")
    with pytest.raises(ValueError, match="whole number"):
        memory_budget(-1, "fp32_weights")
    with pytest.raises(TypeError):
        memory_budget("10", "fp32_weights")
    assert memory_budget(0, "mixed_adam").total == 0


def _mlp_step(fmt, opt_cls, **kw):
    model = nn.MLP([5, 7, 3], format=fmt, seed=0)
    opt = opt_cls(model.parameters(), **kw)
    x = tensor([[0.5, -1.0, 2.0, 0.25, 1.0]], format=fmt)
    model(x).sum().backward()
    opt.step()
    return model, opt


N_MLP = (5 * 7 + 7) + (7 * 3 + 3)  # Linear(in, out) has in*out weights and out biases


@pytest.mark.parametrize(
    "fmt, opt_cls, kw, recipe",
    [
        ("fp16", optim.Adam, {"master_weights": True}, "mixed_adam"),
        ("bf16", optim.Adam, {"master_weights": True}, "mixed_bf16_adam"),
        ("fp16", optim.Adam, {}, "fp16_adam"),
        ("bf16", optim.AdamW, {}, "bf16_adam"),
        ("fp32", optim.Adam, {}, "fp32_adam"),
        ("fp32", optim.SGD, {"lr": 0.1}, "fp32_sgd"),
        ("fp16", optim.SGD, {"lr": 0.1, "master_weights": True}, "mixed_sgd"),
    ],
)
def test_measured_optimizer_matches_recipe(fmt, opt_cls, kw, recipe):
    model, opt = _mlp_step(fmt, opt_cls, **kw)
    assert sum(p.numel() for p in model.parameters()) == N_MLP == 66
    measured = optimizer_budget(opt)
    assert measured.n_params == N_MLP
    assert measured.parts == memory_budget(N_MLP, recipe).parts
    assert measured.formats == memory_budget(N_MLP, recipe).formats


def test_measured_momentum_and_missing_grads():
    model = nn.MLP([4, 2], format="fp16", seed=0)  # 10 parameters
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = optimizer_budget(opt)
    assert before.parts == {"weights": 20}  # no gradients yet, no state
    model(tensor([[1.0, 2.0, 3.0, 4.0]], format="fp16")).sum().backward()
    opt.step()
    # fp16 weights, fp16 gradients, an fp16 momentum buffer (no master copy)
    assert optimizer_budget(opt).parts == {"weights": 20, "gradients": 20, "momentum_buffer": 20}
