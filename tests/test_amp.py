"""fpsim.amp: autocast against PyTorch's measured policy tables, GradScaler against hand-computed
trajectories and PyTorch's error messages, and the two loss-scaling kernels against numpy.

The reference table below is copied from the measured PyTorch 2.13 behaviour (the project's
``shared/reference/amp.md``) as test data, independently of the implementation's own table.
"""

import re
import threading
import warnings

import numpy as np
import pytest

import fpsim
from fpsim import amp, nn, optim
from fpsim.amp import GradScaler, StaticGradScaler, autocast
from fpsim.amp.functional import amp_foreach_non_finite_check_and_unscale_, amp_update_scale_
from fpsim.autograd import register_op_observer, registry
from fpsim.formats import bf16, fp8_e4m3, fp8_e5m2, fp16, fp32, fp64
from fpsim.nn import functional as F

# ---- the reference table (PyTorch 2.13, measured) --------------------------------------------
# | op | cpu (bf16 or fp16) | cuda (fp16 or bf16) |   -- rows copied from amp.md
REFERENCE_TABLE = """
| matmul | LOW | LOW |
| __matmul__ | LOW | LOW |
| mm | LOW | LOW |
| bmm | LOW | LOW |
| mv | untouched | LOW |
| dot | untouched | PROMOTE |
| addmm | LOW | LOW |
| baddbmm | LOW | LOW |
| addbmm | LOW | LOW |
| einsum | LOW | LOW |
| tensordot | LOW | PROMOTE |
| linear | LOW | LOW |
| conv1d | LOW | LOW |
| conv2d | LOW | LOW |
| conv_transpose2d | LOW | LOW |
| prelu | LOW | LOW |
| scaled_dot_product_attention | LOW | LOW |
| relu | untouched | untouched |
| gelu | untouched | untouched |
| silu | untouched | untouched |
| tanh | untouched | untouched |
| sigmoid | untouched | untouched |
| softplus | untouched | FP32 |
| softmax | untouched | FP32 |
| log_softmax | untouched | FP32 |
| exp | untouched | FP32 |
| expm1 | untouched | FP32 |
| log | untouched | FP32 |
| log1p | untouched | FP32 |
| sqrt | untouched | untouched |
| rsqrt | untouched | FP32 |
| reciprocal | untouched | FP32 |
| abs | untouched | untouched |
| clamp | untouched | untouched |
| pow_tensor_scalar | untouched | FP32 |
| __pow__ | untouched | FP32 |
| __rtruediv__ | untouched | FP32 |
| sum | untouched | FP32 |
| mean | untouched | untouched |
| prod | FP32 | FP32 |
| cumsum | untouched | FP32 |
| logsumexp | untouched | FP32 |
| std | untouched | untouched |
| var | untouched | untouched |
| norm | untouched | FP32 |
| layer_norm | untouched | FP32 |
| rms_norm | untouched | FP32 |
| batch_norm_eval | untouched | untouched |
| group_norm | untouched | FP32 |
| cosine_similarity | native-widest | FP32 |
| mse_loss | FP32 | FP32 |
| l1_loss | FP32 | FP32 |
| smooth_l1_loss | FP32 | FP32 |
| huber_loss | FP32 | FP32 |
| kl_div | FP32 | FP32 |
| cross_entropy | FP32 | FP32 |
| nll_loss | FP32 | FP32 |
| binary_cross_entropy_with_logits | FP32 | FP32 |
| binary_cross_entropy | FP32 | other: fp32->None lowp->None |
| cat | PROMOTE | native-widest |
| stack | PROMOTE | native-widest |
| add | native-widest | native-widest |
| sub | native-widest | native-widest |
| mul | native-widest | native-widest |
| div | native-widest | native-widest |
| maximum | native-widest | native-widest |
| addcmul | native-widest | PROMOTE |
| addcdiv | native-widest | PROMOTE |
| where | native-widest | native-widest |
| max_reduce | untouched | untouched |
| dropout_train | untouched | untouched |
| embedding | untouched | untouched |
| avg_pool2d | untouched | untouched |
| max_pool2d | untouched | untouched |
"""
REF = {}
for _line in REFERENCE_TABLE.strip().splitlines():
    _op, _cpu, _cuda = (c.strip() for c in _line.strip("|").split("|"))
    REF[_op] = {"cpu": _cpu, "cuda": "error" if _cuda.startswith("other") else _cuda}

# fpsim engine op -> the reference row it is (ops on no list are untouched)
ENGINE_TO_REF = {"pow": "__pow__", "max": "max_reduce", "dropout": "dropout_train",
                 "batch_norm": "batch_norm_eval", "minimum": "maximum"}  # fmt: skip
NOT_LISTED = {"neg", "reshape", "view", "transpose", "permute", "clone", "index", "masked_fill",
              "adaptive_avg_pool2d"}  # fmt: skip


def ref_policy(op, device):
    if op in NOT_LISTED:
        return "untouched"
    return REF[ENGINE_TO_REF.get(op, op)][device]


def test_reference_rows_are_pytorch_consistent():
    assert REF["pow_tensor_scalar"] == REF["__pow__"]
    assert REF["matmul"] == REF["__matmul__"]


# ---- building each engine op from inputs of given formats -----------------------------------
def T(shape, fmt, seed=0, positive=False, lo=None):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(shape)
    if positive:
        v = np.abs(v) + 0.5
    if lo is not None:
        v = rng.uniform(lo, 1 - lo, shape)
    return fpsim.tensor(v, format=fmt)


IDX = fpsim.tensor([0, 2, 1])  # integer tensor: never cast

# op -> (arity, builder(*formats) -> output tensor). Binary ops get (fmt_a, fmt_b).
OPS = {
    "add": (2, lambda a, b: T((3, 4), a) + T((3, 4), b, 1)),
    "sub": (2, lambda a, b: T((3, 4), a) - T((3, 4), b, 1)),
    "mul": (2, lambda a, b: T((3, 4), a) * T((3, 4), b, 1)),
    "div": (2, lambda a, b: T((3, 4), a) / T((3, 4), b, 1, positive=True)),
    "matmul": (2, lambda a, b: T((3, 4), a) @ T((4, 2), b, 1)),
    "mm": (2, lambda a, b: T((3, 4), a).mm(T((4, 2), b, 1))),
    "linear": (2, lambda a, b: F.linear(T((3, 4), a), T((2, 4), b, 1), T((2,), b, 2))),
    "cat": (2, lambda a, b: fpsim.cat([T((3, 4), a), T((2, 4), b, 1)])),
    "stack": (2, lambda a, b: fpsim.stack([T((3, 4), a), T((3, 4), b, 1)])),
    "where": (2, lambda a, b: fpsim.where(T((3, 4), fp32) > 0, T((3, 4), a), T((3, 4), b, 1))),
    "mse_loss": (2, lambda a, b: F.mse_loss(T((3, 4), a), T((3, 4), b, 1))),
    "binary_cross_entropy_with_logits": (
        2,
        lambda a, b: F.binary_cross_entropy_with_logits(T((3, 4), a), T((3, 4), b, 1, lo=0.1)),
    ),
    "binary_cross_entropy": (
        2,
        lambda a, b: F.binary_cross_entropy(T((3, 4), a, lo=0.1), T((3, 4), b, 1, lo=0.1)),
    ),
    "layer_norm": (
        2,
        lambda a, b: F.layer_norm(T((3, 4), a), 4, T((4,), b, 1), T((4,), b, 2)),
    ),
    "embedding": (1, lambda a: F.embedding(IDX, T((5, 4), a))),
    "cross_entropy": (1, lambda a: F.cross_entropy(T((3, 5), a), IDX)),
    "nll_loss": (1, lambda a: F.nll_loss(T((3, 5), a), IDX)),
    "exp": (1, lambda a: T((3, 4), a).exp()),
    "log": (1, lambda a: T((3, 4), a, positive=True).log()),
    "sqrt": (1, lambda a: T((3, 4), a, positive=True).sqrt()),
    "rsqrt": (1, lambda a: T((3, 4), a, positive=True).rsqrt()),
    "abs": (1, lambda a: T((3, 4), a).abs()),
    "neg": (1, lambda a: -T((3, 4), a)),
    "clamp": (1, lambda a: T((3, 4), a).clamp(-0.5, 0.5)),
    "relu": (1, lambda a: T((3, 4), a).relu()),
    "gelu": (1, lambda a: T((3, 4), a).gelu()),
    "silu": (1, lambda a: T((3, 4), a).silu()),
    "tanh": (1, lambda a: T((3, 4), a).tanh()),
    "sigmoid": (1, lambda a: T((3, 4), a).sigmoid()),
    "softmax": (1, lambda a: T((3, 4), a).softmax(-1)),
    "log_softmax": (1, lambda a: T((3, 4), a).log_softmax(-1)),
    "logsumexp": (1, lambda a: T((3, 4), a).logsumexp(-1)),
    "sum": (1, lambda a: T((3, 4), a).sum()),
    "mean": (1, lambda a: T((3, 4), a).mean()),
    "max": (1, lambda a: T((3, 4), a).max()),
    "var": (1, lambda a: T((3, 4), a).var()),
    "pow": (1, lambda a: T((3, 4), a) ** 2.0),
    "__rtruediv__": (1, lambda a: 1.0 / T((3, 4), a, positive=True)),
    "dropout": (1, lambda a: F.dropout(T((3, 4), a), 0.5, generator=0)),
    "reshape": (1, lambda a: T((3, 4), a).reshape(4, 3)),
    "view": (1, lambda a: T((3, 4), a).view(12)),
    "transpose": (1, lambda a: T((3, 4), a).transpose(0, 1)),
    "permute": (1, lambda a: T((3, 4), a).permute(1, 0)),
    "clone": (1, lambda a: T((3, 4), a).clone()),
    "index": (1, lambda a: T((3, 4), a)[1:]),
    "bmm": (2, lambda a, b: F.bmm(T((2, 3, 4), a), T((2, 4, 2), b, 1))),
    "baddbmm": (2, lambda a, b: F.baddbmm(T((2, 3, 2), a), T((2, 3, 4), b, 1), T((2, 4, 2), a, 2))),
    "einsum": (2, lambda a, b: F.einsum("ij,jk->ik", T((3, 4), a), T((4, 2), b, 1))),
    "conv1d": (2, lambda a, b: F.conv1d(T((1, 2, 5), a), T((3, 2, 3), b, 1), T((3,), b, 2))),
    "conv2d": (2, lambda a, b: F.conv2d(T((1, 2, 4, 4), a), T((3, 2, 3, 3), b, 1))),
    "scaled_dot_product_attention": (
        2, lambda a, b: F.scaled_dot_product_attention(T((2, 3, 4), a), T((2, 5, 4), b, 1),
                                                       T((2, 5, 4), b, 2))),
    "softplus": (1, lambda a: F.softplus(T((3, 4), a))),
    "expm1": (1, lambda a: T((3, 4), a).expm1()),
    "log1p": (1, lambda a: T((3, 4), a, positive=True).log1p()),
    "reciprocal": (1, lambda a: T((3, 4), a, positive=True).reciprocal()),
    "cumsum": (1, lambda a: T((3, 4), a).cumsum(1)),
    "maximum": (2, lambda a, b: F.maximum(T((3, 4), a), T((3, 4), b, 1))),
    "minimum": (2, lambda a, b: F.minimum(T((3, 4), a), T((3, 4), b, 1))),
    "masked_fill": (1, lambda a: T((3, 4), a).masked_fill(T((3, 4), fp32) > 0, 0.5)),
    "rms_norm": (2, lambda a, b: F.rms_norm(T((3, 4), a), 4, T((4,), b, 1))),
    "group_norm": (2, lambda a, b: F.group_norm(T((2, 4, 3), a), 2, T((4,), b, 1), T((4,), b, 2))),
    "batch_norm": (2, lambda a, b: F.batch_norm(T((3, 4), a), None, None, T((4,), b, 1),
                                                T((4,), b, 2), training=True)),
    "max_pool2d": (1, lambda a: F.max_pool2d(T((1, 2, 4, 4), a), 2)),
    "avg_pool2d": (1, lambda a: F.avg_pool2d(T((1, 2, 4, 4), a), 2)),
    "adaptive_avg_pool2d": (1, lambda a: F.adaptive_avg_pool2d(T((1, 2, 5, 5), a), 2)),
}  # fmt: skip


def test_every_engine_op_is_covered():
    engine = {n for n, f in registry.items() if f.dispatch}
    assert engine == set(OPS), engine.symmetric_difference(OPS)
    for op in engine:  # and the implementation's table agrees with the reference for each
        for dev in ("cpu", "cuda"):
            assert amp.op_policy(op, dev) == ref_policy(op, dev), (op, dev)


def widest(fmts):
    """Independent promotion for the formats used here (no fp64)."""
    s = set(fmts)
    if len(s) == 1:
        return s.pop()
    if fp32 in s or s == {fp16, bf16}:
        return fp32  # as PyTorch: fp16 + bf16 -> fp32
    (sixteen,) = s & {fp16, bf16}  # beyond PyTorch: a 16-bit format holds every fp8 value
    return sixteen


def expected(policy, in_fmts, lowp):
    if policy == "LOW":
        return lowp
    if policy == "FP32":
        return fp32
    return widest(in_fmts)  # PROMOTE, native-widest, untouched: the widest input


def input_cases(arity, lowp):
    other = bf16 if lowp != bf16 else fp16  # another low-precision format
    if arity == 1:
        return [(fp32,), (lowp,), (other,)]
    return [(fp32, fp32), (fp32, lowp), (lowp, fp32), (lowp, lowp), (other, lowp)]


CASES = [
    ("cpu", bf16),
    ("cpu", fp16),
    ("cuda", fp16),
    ("cuda", bf16),
    ("cuda", fp8_e4m3),  # beyond PyTorch: any narrower format
    ("cpu", fp8_e5m2),
]


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("device,lowp", CASES, ids=[f"{d}-{f.name}" for d, f in CASES])
def test_autocast_output_format_of_every_op(op, device, lowp):
    arity, build = OPS[op]
    policy = ref_policy(op, device)
    for fmts in input_cases(arity, lowp):
        if policy == "error":
            with (
                autocast(device, dtype=lowp),
                pytest.raises(RuntimeError, match="unsafe to autocast"),
            ):
                build(*fmts)
            continue
        matmul_like = op in ("matmul", "mm", "linear", "bmm", "baddbmm", "einsum", "conv1d",
                             "conv2d", "scaled_dot_product_attention")  # fmt: skip
        with autocast(device, dtype=lowp):
            out = build(*fmts)
        want = expected(policy, fmts, lowp)
        if op == "embedding":  # the weight decides; indices are integers
            want = fmts[0]
        if (op in ("layer_norm", "group_norm", "batch_norm") and policy != "FP32"
                and fmts[0] in (fp16, bf16) and all(f == fp32 for f in fmts[1:])):  # fmt: skip
            # PyTorch's mixed-type norms: fp16/bf16 input, fp32 weight -> the input's dtype
            want = fmts[0]
        if op == "rms_norm" and policy != "FP32":  # type_as(input): always the input's format
            want = fmts[0]
        if op == "masked_fill":  # the value is cast to the input's format
            want = fmts[0]
        assert out.format == want, (op, device, lowp.name, [f.name for f in fmts], out.format)
        if matmul_like and len(set(fmts)) > 1:  # outside autocast, mixed formats are refused
            with pytest.raises(
                RuntimeError, match="expected both operands to have the same format"
            ):
                build(*fmts)


def test_outputs_keep_their_format_after_the_region_and_mixing_rules():
    x, w = T((3, 4), fp32), T((2, 4), fp32, 1)
    with autocast("cuda"):
        y = F.linear(x, w)
    assert y.format == fp16 and not amp.is_autocast_enabled("cuda")
    assert (y + x[:, :2]).format == fp32  # elementwise promotes
    with pytest.raises(
        RuntimeError, match="expected both operands to have the same format, got fp16 and fp32"
    ):
        y @ T((2, 2), fp32)


def test_backward_formats_fp32_leaf_gets_fp32_gradient():
    x = T((3, 4), fp32)
    w = nn.Parameter(T((2, 4), fp32, 1))
    seen = []
    h = register_op_observer(
        lambda phase, name, i, o: seen.append(
            (phase, name, [t.format.name for t in o if t is not None])
        )
    )
    with autocast("cuda"):
        y = F.linear(x, w)
    y.sum().backward()
    h.remove()
    assert w.grad.format == fp32
    assert ("backward", "linear", ["fp16"]) in seen  # the backward ran in fp16
    assert ("backward", "cast", ["fp32"]) in seen  # the cast node sent it back in fp32


def test_float64_and_integer_inputs_are_never_cast():
    x64, w64 = T((3, 4), fp64), T((2, 4), fp64, 1)
    with autocast("cuda"):
        assert F.linear(x64, w64).format == fp64  # LOW: fp64 untouched
        assert x64.exp().format == fp64  # FP32: fp64 untouched
        assert fpsim.cat([x64, T((1, 4), fp32)]).format == fp64  # native promotion
        i = fpsim.tensor([[1, 2], [3, 4]])
        assert i.sum().format is None and i.sum().item() == 10  # FP32 policy, int untouched
        assert (T((3, 4), fp16) * 0.1).format == fp16  # Python numbers are weak, never cast
        with pytest.raises(RuntimeError, match="same format, got fp64 and fp16"):
            F.linear(x64, T((2, 4), fp32))  # the fp32 weight is cast, fp64 is not: mismatch
    with autocast("cpu"):
        assert fpsim.cat([x64, T((1, 4), fp16)]).format == fp64  # PROMOTE ignores fp64


def test_autocast_linear_is_bitwise_linear_on_explicit_fp16_casts():
    x = T((16, 32), fp32, 3)
    w = nn.Parameter(T((8, 32), fp32, 4))
    b = nn.Parameter(T((8,), fp32, 5))
    g = T((16, 8), fp16, 6)
    with autocast("cuda"):
        y = F.linear(x, w, b)
    y.backward(g)
    gw, gb = w.grad.data.copy(), b.grad.data.copy()
    w.grad = b.grad = None
    y2 = F.linear(x.half(), w.half(), b.half())
    y2.backward(g)
    assert y.format == y2.format == fp16
    assert np.array_equal(y.data.view(np.uint32), y2.data.view(np.uint32))
    assert np.array_equal(gw.view(np.uint32), w.grad.data.view(np.uint32))
    assert np.array_equal(gb.view(np.uint32), b.grad.data.view(np.uint32))
    with autocast("cpu"):  # bf16 likewise
        y3 = F.linear(x, w, b)
    assert np.array_equal(y3.data, F.linear(x.bfloat16(), w.bfloat16(), b.bfloat16()).data)


def test_sum_accumulates_in_fp32():
    ones = fpsim.ones(4096, format="fp16")
    with autocast("cuda"):
        s = ones.sum()  # FP32 on cuda: cast first
    assert s.format == fp32 and s.item() == 4096.0
    with autocast("cpu", dtype=fp16):
        s = ones.sum()  # untouched on cpu: fp16 out, fp32 accumulator
    assert s.format == fp16 and s.item() == 4096.0


# ---- state: nesting, decorator, threads -------------------------------------------------------
def state():
    return (
        amp.is_autocast_enabled("cpu"),
        amp.is_autocast_enabled("cuda"),
        amp.get_autocast_dtype("cpu"),
        amp.get_autocast_dtype("cuda"),
        amp.is_autocast_cache_enabled(),
    )


def test_defaults_and_nesting_restore_the_outer_state_exactly():
    assert state() == (False, False, bf16, fp16, True)
    x, w = T((3, 4), fp32), T((2, 4), fp32, 1)
    with autocast("cuda", cache_enabled=False):
        outer = state()
        assert outer == (False, True, bf16, fp16, False)
        assert F.linear(x, w).format == fp16
        with autocast("cuda", enabled=False):
            assert state() == (False, False, bf16, fp16, False)
            assert F.linear(x, w).format == fp32  # ops run in their input formats
            assert x.exp().format == fp32
        assert state() == outer
        with autocast("cuda", dtype=bf16, cache_enabled=True):
            assert state() == (False, True, bf16, bf16, True)
            assert F.linear(x, w).format == bf16
            with autocast("cuda", dtype="fp8_e5m2"):
                assert F.linear(x, w).format == fp8_e5m2
            assert F.linear(x, w).format == bf16
        assert state() == outer
        assert F.linear(x, w).format == fp16
    assert state() == (False, False, bf16, fp16, True)


def test_state_is_restored_after_an_exception():
    with pytest.raises(ZeroDivisionError), autocast("cuda"):
        raise ZeroDivisionError
    assert state() == (False, False, bf16, fp16, True)


def test_innermost_enabled_device_type_wins():
    x, w = T((3, 4), fp32), T((2, 4), fp32, 1)
    with autocast("cuda"):
        assert x.softmax(-1).format == fp32 and F.linear(x, w).format == fp16
        with autocast("cpu"):  # cpu table and dtype now
            assert F.linear(x, w).format == bf16
            assert T((3, 4), fp16).softmax(-1).format == fp16  # untouched on cpu
            with autocast("cuda", dtype=fp16):
                assert F.linear(x, w).format == fp16
            assert F.linear(x, w).format == bf16
        with autocast("cpu", enabled=False):  # disabling the other device changes nothing
            assert F.linear(x, w).format == fp16
        assert F.linear(x, w).format == fp16


def test_decorator():
    x, w = T((3, 4), fp32), T((2, 4), fp32, 1)

    @autocast("cuda")
    def f(depth=0):
        assert amp.is_autocast_enabled("cuda")
        if depth < 2:  # the same instance entered recursively
            f(depth + 1)
        return F.linear(x, w)

    assert f.__name__ == "f"
    assert f().format == fp16
    assert not amp.is_autocast_enabled("cuda")

    @autocast("cpu", dtype=fp16)
    def g():
        return F.linear(x, w)

    assert g().format == fp16 and f().format == fp16
    with pytest.raises(TypeError):
        autocast("cuda")(42)


def test_thread_local_state():
    results = {}

    def worker(name):
        results[name] = state()
        with autocast("cpu", dtype=fp16):
            results[name + "-inside"] = F.linear(T((2, 3), fp32), T((2, 3), fp32, 1)).format

    with autocast("cuda", dtype=bf16):
        t = threading.Thread(target=worker, args=("t",))
        t.start()
        t.join()
        assert state() == (False, True, bf16, bf16, True)  # the thread changed nothing here
        assert F.linear(T((2, 3), fp32), T((2, 3), fp32, 1)).format == bf16
    assert results["t"] == (False, False, bf16, fp16, True)  # a new thread starts off
    assert results["t-inside"] == fp16


def test_set_and_get_functions():
    try:
        amp.set_autocast_dtype("cuda", "bf16")
        assert amp.get_autocast_dtype("cuda") == bf16
        assert autocast("cuda").fast_dtype == bf16  # dtype=None reads the current setting
        amp.set_autocast_enabled("cuda", True)
        assert F.linear(T((2, 3), fp32), T((2, 3), fp32, 1)).format == bf16
    finally:
        amp.set_autocast_enabled("cuda", False)
        amp.set_autocast_dtype("cuda", fp16)
    assert amp.is_autocast_enabled() is False  # no argument: "cuda"


# ---- the weight cache -------------------------------------------------------------------------
class CastCounter:
    def __init__(self):
        self.n = 0

    def __enter__(self):
        self.h = register_op_observer(self)
        return self

    def __call__(self, phase, name, inputs, outputs):
        self.n += phase == "forward" and name == "cast"

    def __exit__(self, *exc):
        self.h.remove()


def test_weight_cache_counts_casts():
    w = nn.Parameter(T((4, 4), fp32, 1))  # fp32 leaf that requires grad: cached
    c = T((4, 4), fp32, 2)  # a constant: cast at every use
    x = T((2, 4), fp32)
    with CastCounter() as k, autocast("cuda"):
        h = x
        for _ in range(3):
            h = F.linear(h, w)  # x cast once, w cast once (then cached), h already fp16
    assert k.n == 2
    with CastCounter() as k, autocast("cuda"):
        for _ in range(3):
            F.linear(x, c)
    assert k.n == 6  # x and c at every use
    with CastCounter() as k, autocast("cuda", cache_enabled=False):
        for _ in range(3):
            F.linear(x, w)
    assert k.n == 6
    with CastCounter() as k:
        for _ in range(2):  # two regions: one cast of w each (the cache is cleared on exit)
            with autocast("cuda"):
                F.linear(x.half(), w)
                F.linear(x.half(), w)
    assert k.n == 2 + 4  # 2 for w, 4 explicit x.half()
    wt = w * 1.0  # not a leaf: never cached
    with CastCounter() as k, autocast("cuda"):
        F.linear(x.half(), wt)
        F.linear(x.half(), wt)
    assert k.n == 2 + 2


def test_weight_cache_nested_regions_and_inplace_update():
    w = nn.Parameter(T((3, 3), fp32, 1))
    x = T((2, 3), fp16)
    with CastCounter() as k, autocast("cuda"):
        y1 = F.linear(x, w)
        with autocast("cuda"):  # leaving a nested region does not clear the cache
            F.linear(x, w)
        F.linear(x, w)
        with fpsim.no_grad():
            w.data[...] = 0.0  # an in-place update inside the region ...
        y2 = F.linear(x, w)  # ... is not seen: the cached fp16 copy is used
        with autocast("cuda", dtype=bf16):  # another dtype: its own copy (of the new values)
            y3 = F.linear(x.bfloat16(), w)
    assert k.n == 1 + 2  # w once in fp16; x.bfloat16() and w in bf16
    assert np.array_equal(y1.data, y2.data) and not np.all(y1.data == 0)
    assert np.all(y3.data == 0)
    with autocast("cuda"):
        assert np.all(F.linear(x, w).data == 0)  # a new region sees the update


def test_weight_cache_gradients_accumulate_through_the_shared_cast():
    w = nn.Parameter(T((3, 3), fp32, 1))
    x = T((2, 3), fp32)
    with autocast("cuda"):
        loss = (F.linear(x, w) + F.linear(x, w)).float().sum()
    loss.backward()
    w2 = nn.Parameter(T((3, 3), fp32, 1))
    with autocast("cuda"):
        loss2 = (2.0 * F.linear(x, w2)).float().sum()
    loss2.backward()
    assert np.array_equal(w.grad.data, w2.grad.data)


# ---- errors -----------------------------------------------------------------------------------
def test_autocast_errors_and_warnings():
    with pytest.raises(RuntimeError, match="unsupported autocast device_type 'tpu'"):
        autocast("tpu")
    with pytest.raises(ValueError, match="Expected `device_type` of type `str`"):
        autocast(0)
    with pytest.raises(RuntimeError, match="unsupported autocast device_type"):
        amp.is_autocast_enabled("xla")
    for dev, dt in [("cpu", fp32), ("cpu", fp64), ("cuda", fp32)]:
        with pytest.warns(
            UserWarning, match="the target dtype is not supported. Disabling autocast"
        ):
            ac = autocast(dev, dtype=dt)
        with ac:
            assert not amp.is_autocast_enabled(dev)
            assert F.linear(T((2, 3), fp32), T((2, 3), fp32, 1)).format == fp32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        autocast("cpu", dtype=fp32, enabled=False)  # no warning when not enabling
    p, t = T((3, 4), fp32, lo=0.1), T((3, 4), fp32, 1, lo=0.1)
    with autocast("cuda"), pytest.raises(RuntimeError) as info:
        F.binary_cross_entropy(p, t)
    assert "unsafe to autocast" in str(info.value)
    assert "binary_cross_entropy_with_logits" in str(info.value)
    with autocast("cuda", dtype=bf16), pytest.raises(RuntimeError, match="unsafe to autocast"):
        F.binary_cross_entropy(p, t)
    with autocast("cpu"):
        assert F.binary_cross_entropy(p.bfloat16(), t).format == fp32


def test_policy_table_text():
    text = amp.policy_table()
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["op", "PyTorch"]
    body = {ln.split()[0]: ln.split()[-2:] for ln in lines[1:]}
    assert set(body) == {n for n, f in registry.items() if f.dispatch}
    assert body["softmax"] == ["untouched", "FP32"] and body["cat"] == ["PROMOTE", "native-widest"]
    assert "addmm" in amp.policy_table("all") and "addmm" not in text  # an op the engine lacks


def test_autocast_demo_runs(capsys):
    from fpsim.demo.__main__ import main

    assert main(["autocast"]) == 0
    out = capsys.readouterr().out
    assert "cross_entropy" in out and "backward  linear" in out
    assert (
        "weight cache: in one region the first forward pass makes 7 casts, a second pass 3" in out
    )
    assert main(["autocast", "--device", "cpu", "--dtype", "fp8_e4m3", "--no-table"]) == 0
    assert "fp8_e4m3" in capsys.readouterr().out


# ---- the kernels ------------------------------------------------------------------------------
def ref_unscale(g, inv):
    """numpy reference of one gradient's check-and-unscale: (found, result)."""
    found = bool((~np.isfinite(g)).any())
    with np.errstate(all="ignore"):
        out = g if inv == 1 else (g * g.dtype.type(inv)).astype(g.dtype)
    return found, out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unscale_kernel_against_numpy(dtype):
    rng = np.random.default_rng(0)
    inv = np.array([np.float32(1 / np.float64(np.float32(3.0e4)))], np.float32)
    for trial in range(6):
        g = (rng.standard_normal(1000) * 2.0 ** rng.integers(-20, 20, 1000)).astype(dtype)
        if trial % 2:
            g[rng.integers(0, 1000, 3)] = [np.inf, -np.inf, np.nan]
        found_ref, want = ref_unscale(
            g.copy(), np.float64(inv[0]) if dtype == np.float64 else inv[0]
        )
        fi = np.zeros(1, np.float32)
        amp_foreach_non_finite_check_and_unscale_([g], fi, inv)
        assert fi[0] == float(found_ref)
        assert np.array_equal(g, want, equal_nan=True)
    # inv == 1: checked, untouched (also -0.0 and NaN payloads)
    g = np.array([-0.0, 1.5, np.nan], np.float32)
    fi = np.zeros(1, np.float32)
    amp_foreach_non_finite_check_and_unscale_([g], fi, np.ones(1, np.float32))
    assert fi[0] == 1 and np.signbit(g[0]) and g[1] == 1.5
    # found_inf is only ever set, never cleared
    amp_foreach_non_finite_check_and_unscale_([np.ones(3, np.float32)], fi, inv)
    assert fi[0] == 1


def test_unscale_kernel_inputs_tensors_and_views():
    inv = np.array([0.25], np.float32)
    fi = np.zeros(1, np.float32)
    base = np.arange(12, dtype=np.float32).reshape(3, 4) * 4
    view = base[:, ::2]  # not contiguous: written back in place
    t_bf16 = fpsim.tensor([3.0, 5.0, 7.0], format="bf16")
    t_bf16.data[...] *= 1.0  # values of bf16
    amp_foreach_non_finite_check_and_unscale_([view, t_bf16], fi, inv)
    assert np.array_equal(base[:, ::2], np.arange(12).reshape(3, 4)[:, ::2])
    assert np.array_equal(base[:, 1::2], 4 * np.arange(12).reshape(3, 4)[:, 1::2])
    assert t_bf16.data.tolist() == [0.75, 1.25, 1.75] and fi[0] == 0
    # bf16 gradient: product in float32, then one rounding to bf16
    t = fpsim.tensor([1.0 + 2.0**-7], format="bf16")
    amp_foreach_non_finite_check_and_unscale_([t], fi, np.array([1 + 2.0**-8], np.float32))
    assert t.data[0] == fpsim.round_to(np.float32((1 + 2.0**-7) * (1 + 2.0**-8)), "bf16")
    with pytest.raises(TypeError, match="found_inf must be a 1-element float32 array"):
        amp_foreach_non_finite_check_and_unscale_([view], np.zeros(1), inv)
    with pytest.raises(TypeError, match="float32 or float64"):
        amp_foreach_non_finite_check_and_unscale_([np.ones(2, np.int32)], fi, inv)


def ref_update(scale, tracker, found, growth, backoff, interval):
    """Independent Python version of the update rule (float64 math, float32 storage)."""
    if found:
        return float(np.float32(float(scale) * backoff)), 0
    if tracker + 1 == interval:
        new = np.float32(float(scale) * growth)
        return (float(new) if np.isfinite(new) else scale), 0
    return scale, tracker + 1


def test_update_kernel_against_python():
    rng = np.random.default_rng(1)
    for _ in range(200):
        scale = float(np.float32(2.0 ** rng.uniform(-140, 127)))
        tracker = int(rng.integers(0, 4))
        found = bool(rng.integers(0, 2))
        growth = float(rng.choice([2.0, 3.0, 1.5, 4.0]))
        backoff = float(rng.choice([0.5, 0.25, 0.3]))
        interval = int(rng.integers(1, 5))
        s = np.array([scale], np.float32)
        t = np.array([tracker], np.int32)
        fi = np.array([float(found)], np.float32)
        out = amp_update_scale_(s, t, fi, growth, backoff, interval)
        assert out is s
        assert (float(s[0]), int(t[0])) == ref_update(
            scale, tracker, found, growth, backoff, interval
        )
    s, t = np.array([0.1], np.float32), np.zeros(1, np.int32)
    amp_update_scale_(s, t, np.array([2.0], np.float32), 2.0, 0.1, 10)  # found_inf summed: 2
    assert s[0] == np.float32(float(np.float32(0.1)) * 0.1) and t[0] == 0


# ---- GradScaler -------------------------------------------------------------------------------
def one_param(value=1.0, fmt=fp32):
    p = nn.Parameter(fpsim.tensor([value], format=fmt))
    return p, optim.SGD([p], lr=1.0)


def iterate(scaler, opt, p, grad):
    """One iteration with a hand-written (already scaled) gradient; returns whether skipped."""
    scaler.scale(fpsim.tensor(1.0))
    p.grad = fpsim.tensor([grad], format=p.format)
    before = p.data.copy()
    scaler.step(opt)
    scaler.update()
    return bool(np.array_equal(p.data, before)) and grad != 0


def test_scaler_trajectory_non_default_settings():
    # init 1024, growth 3, backoff 0.25, interval 3 -- the expected values by hand
    scaler = GradScaler(
        init_scale=1024.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=3
    )
    p, opt = one_param()
    pattern = "FFFFTFFFTTFFFNF"  # F finite, T inf, N nan
    want_scale = [1024, 1024, 3072, 3072, 768, 768, 768, 2304, 576, 144, 144, 144, 432, 108, 108]
    want_tracker = [1, 2, 0, 1, 0, 1, 2, 0, 0, 0, 1, 2, 0, 0, 1]
    scales, trackers, skipped = [], [], []
    for c in pattern:
        g = {"F": 2.0, "T": np.inf, "N": np.nan}[c]
        skipped.append(iterate(scaler, opt, p, g))
        scales.append(scaler.get_scale())
        trackers.append(scaler._get_growth_tracker())
    assert scales == want_scale
    assert trackers == want_tracker
    assert skipped == [c != "F" for c in pattern]


def test_scaler_trajectory_default_settings():
    scaler = GradScaler()
    assert (scaler.get_scale(), scaler.get_growth_factor(), scaler.get_backoff_factor()) == (
        65536.0,
        2.0,
        0.5,
    )
    assert scaler.get_growth_interval() == 2000 and scaler.is_enabled()
    p, opt = one_param()
    assert iterate(scaler, opt, p, np.inf) and scaler.get_scale() == 32768.0
    assert iterate(scaler, opt, p, -np.inf) and scaler.get_scale() == 16384.0
    for i in range(1999):
        assert not iterate(scaler, opt, p, 16384.0)
        assert scaler._get_growth_tracker() == i + 1
    assert scaler.get_scale() == 16384.0
    iterate(scaler, opt, p, 16384.0)  # the 2000th clean step: grow
    assert scaler.get_scale() == 32768.0 and scaler._get_growth_tracker() == 0
    # the weight moved by lr * unscaled gradient (1.0) on each of the 2000 clean steps
    assert p.item() == 1.0 - 2000.0


def test_growth_is_blocked_at_float32_overflow():
    scaler = GradScaler(init_scale=2.0**126, growth_factor=4.0, growth_interval=1)
    p, opt = one_param()
    iterate(scaler, opt, p, 1.0)
    assert scaler.get_scale() == 2.0**126 and scaler._get_growth_tracker() == 0  # 2^128: inf
    scaler.set_growth_factor(2.0)
    iterate(scaler, opt, p, 1.0)
    assert scaler.get_scale() == 2.0**127  # finite: grows


def test_float32_rounding_of_a_non_power_of_two_scale():
    scaler = GradScaler(init_scale=0.1, growth_interval=1)
    assert scaler.get_scale() == 0.1  # before scale(): init_scale as given
    p, opt = one_param()
    loss = fpsim.tensor(3.0)
    scaled = scaler.scale(loss)
    s32 = np.float32(0.1)
    assert scaler.get_scale() == float(s32) == 0.10000000149011612
    assert scaled.item() == float(np.float32(3.0 * float(s32)))
    p.grad = fpsim.tensor([0.7])
    scaler.unscale_(opt)
    inv = np.float32(1.0 / np.float64(s32))
    assert p.grad.item() == float(np.float32(np.float32(0.7) * inv))
    scaler.step(opt)
    scaler.update()  # clean, interval 1: grow by 2 in float64, round to float32
    assert scaler.get_scale() == float(np.float32(float(s32) * 2.0))
    scaler.set_backoff_factor(0.3)
    scaler.scale(loss)
    p.grad = fpsim.tensor([np.nan])
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == float(np.float32(float(np.float32(float(s32) * 2.0)) * 0.3))


def test_two_optimizers():
    scaler = GradScaler(init_scale=8.0, growth_interval=1)
    a, opt_a = one_param(1.0)
    b, opt_b = one_param(2.0)
    scaler.scale(fpsim.tensor(1.0))
    a.grad, b.grad = fpsim.tensor([np.inf]), fpsim.tensor([8.0])
    assert scaler.step(opt_a) is None
    scaler.step(opt_b)
    assert a.item() == 1.0 and b.item() == 1.0  # A skipped, B stepped (grad 8 / 8 = 1)
    scaler.update()
    assert scaler.get_scale() == 4.0  # backed off: A found an inf
    scaler.scale(fpsim.tensor(1.0))
    a.grad, b.grad = fpsim.tensor([4.0]), fpsim.tensor([4.0])
    scaler.step(opt_a)
    scaler.step(opt_b)
    scaler.update()
    assert (a.item(), b.item(), scaler.get_scale()) == (0.0, 0.0, 8.0)


def test_unscale_clip_step():
    scaler = GradScaler(init_scale=1024.0)
    w = nn.Parameter(fpsim.tensor([1.0, 1.0]))
    opt = optim.SGD([w], lr=0.5)
    loss = (w * fpsim.tensor([3.0, 4.0])).sum()
    scaler.scale(loss).backward()
    assert w.grad.data.tolist() == [3072.0, 4096.0]
    scaler.unscale_(opt)
    assert w.grad.data.tolist() == [3.0, 4.0]
    total = optim.clip_grad_norm_([w], max_norm=1.0)
    assert total.item() == 5.0
    clipped = w.grad.data.copy()
    scaler.step(opt)  # does not unscale again
    assert np.array_equal(w.grad.data, clipped)
    assert np.allclose(w.data, 1.0 - 0.5 * clipped)
    scaler.update()
    assert scaler.get_scale() == 1024.0


M_SCALE_NONE = (
    "Attempted {} but _scale is None.  This may indicate your script did not use "
    "scaler.scale(loss or outputs) earlier in the iteration."
)


def test_every_misuse_error_word_for_word():
    p, opt = one_param()
    s = GradScaler()
    for name, call in [("step", lambda: s.step(opt)), ("unscale_", lambda: s.unscale_(opt)),
                       ("update", lambda: s.update())]:  # fmt: skip
        with pytest.raises(AssertionError, match=re.escape(M_SCALE_NONE.format(name))):
            call()
    s.scale(fpsim.tensor(1.0))
    p.grad = fpsim.tensor([1.0])
    with pytest.raises(AssertionError, match="^No inf checks were recorded prior to update.$"):
        s.update()
    s.unscale_(opt)
    with pytest.raises(RuntimeError, match=re.escape(
        "unscale_() has already been called on this optimizer since the last update().")):  # fmt: skip
        s.unscale_(opt)
    s.step(opt)
    with pytest.raises(RuntimeError, match=re.escape("unscale_() is being called after step().")):
        s.unscale_(opt)
    with pytest.raises(
        RuntimeError, match=re.escape("step() has already been called since the last update().")
    ):
        s.step(opt)
    s.update()
    p.grad = None
    with pytest.raises(AssertionError, match="^No inf checks were recorded for this optimizer.$"):
        s.step(opt)
    with pytest.raises(
        RuntimeError, match="^Closure use is not currently supported if GradScaler is enabled.$"
    ):
        s.step(opt, closure=lambda: None)
    h, opt_h = one_param(1.0, fp16)
    s2 = GradScaler()
    s2.scale(fpsim.tensor(1.0))
    h.grad = fpsim.tensor([1.0], format="fp16")
    with pytest.raises(ValueError, match=re.escape("Attempting to unscale FP16 gradients.")):
        s2.step(opt_h)
    bf, opt_bf = one_param(1.0, bf16)  # bf16 gradients are accepted
    bf.grad = fpsim.tensor([65536.0], format="bf16")
    s2.step(opt_bf)
    assert bf.grad.item() == 1.0 and bf.item() == 0.0
    with pytest.raises(ValueError, match="^outputs must be a Tensor or an iterable of Tensors$"):
        s2.scale(3.0)
    with pytest.raises(AssertionError, match=re.escape("The growth factor must be > 1.0.")):
        GradScaler(growth_factor=1.0)
    with pytest.raises(AssertionError, match=re.escape("The backoff factor must be < 1.0.")):
        GradScaler(backoff_factor=1.0)
    with pytest.raises(RuntimeError, match=re.escape(
            "The source state dict is empty, possibly because it was saved from a disabled "
            "instance of GradScaler.")):  # fmt: skip
        GradScaler().load_state_dict({})


def test_scale_nested_outputs_and_weak_scale():
    s = GradScaler(init_scale=4.0)
    a, b = fpsim.tensor(1.0), fpsim.tensor([2.0], format="fp16")
    out = s.scale([a, (b, [a])])
    assert isinstance(out, list) and isinstance(out[1], tuple) and isinstance(out[1][1], list)
    assert out[0].item() == 4.0 and out[1][0].data.tolist() == [8.0]
    assert out[1][0].format == fp16  # a 0-dim fp32 scale: a dimensioned fp16 stays fp16
    assert list(s.scale(iter([a])))[0].item() == 4.0  # other iterables: a lazy map
    big = fpsim.tensor([2.0**14], format="fp16")
    assert not np.isfinite(GradScaler().scale(big).item())  # fp16 overflow, as in PyTorch


def test_update_with_new_scale():
    s = GradScaler(init_scale=8.0, growth_interval=3)
    p, opt = one_param()
    iterate(s, opt, p, 1.0)
    s.scale(fpsim.tensor(1.0))
    p.grad = fpsim.tensor([1.0])
    s.step(opt)
    s.update(new_scale=0.1)
    assert s.get_scale() == float(np.float32(0.1)) and s._get_growth_tracker() == 1
    iterate(s, opt, p, 1.0)
    s.scale(fpsim.tensor(1.0))
    p.grad = fpsim.tensor([1.0])
    s.step(opt)
    s.update(fpsim.tensor(32.0))
    assert s.get_scale() == 32.0 and s._get_growth_tracker() == 2
    s.scale(fpsim.tensor(1.0))
    p.grad = fpsim.tensor([1.0])
    s.step(opt)
    with pytest.raises(AssertionError, match="new_scale should be a float or a 1-element"):
        s.update(fpsim.tensor([1.0, 2.0]))


def test_disabled_scaler_passes_through():
    s = GradScaler(enabled=False)
    p, opt = one_param()
    loss = fpsim.tensor(3.0)
    assert s.scale(loss) is loss and s.get_scale() == 1.0 and not s.is_enabled()
    p.grad = fpsim.tensor([np.inf])
    s.unscale_(opt)
    assert p.grad.item() == np.inf
    s.step(opt)  # always steps
    assert p.item() == -np.inf
    s.update()
    assert s.state_dict() == {} and s._get_growth_tracker() == 0
    s.load_state_dict({})  # nothing happens


def test_state_dict_round_trip_continues_the_identical_trajectory():
    kw = dict(init_scale=256.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)
    a = GradScaler(**kw)
    pa, oa = one_param()
    pattern = [1.0, np.inf, 1.0, 1.0, 1.0, np.nan, 1.0, 1.0, 1.0]
    for g in pattern[:3]:
        iterate(a, oa, pa, g)
    sd = a.state_dict()
    assert sd == {"scale": 128.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                  "growth_interval": 2, "_growth_tracker": 1}  # fmt: skip
    b = GradScaler(init_scale=1.0, growth_interval=7)
    b.load_state_dict(sd)
    assert b.get_scale() == 128.0 and b._get_growth_tracker() == 1
    pb, ob = one_param()
    pb.data[...] = pa.data
    c = GradScaler(init_scale=1.0)  # a scaler that already has a live scale also takes it
    c.scale(fpsim.tensor(1.0))
    c.load_state_dict(sd)
    pc, oc = one_param()
    pc.data[...] = pa.data
    for g in pattern[3:]:
        iterate(a, oa, pa, g)
        iterate(b, ob, pb, g)
        iterate(c, oc, pc, g)
        assert a.state_dict() == b.state_dict() == c.state_dict()
    assert pa.item() == pb.item() == pc.item()


def test_scale_collapse_to_zero_pitfall():
    """Repeated backoff drives the scale to 0; then inv = inf, the gradients become NaN *after*
    the finite check, and the step runs (PyTorch's behaviour)."""
    s = GradScaler(init_scale=2.0**-148, backoff_factor=0.5)
    p, opt = one_param()
    iterate(s, opt, p, np.inf)
    assert s.get_scale() == 2.0**-149  # the smallest float32 subnormal
    iterate(s, opt, p, np.inf)
    assert s.get_scale() == 0.0  # 2^-150 rounds to 0 (ties to even)
    loss = (p * 3.0).sum()
    scaled = s.scale(loss)
    assert scaled.item() == 0.0
    opt.zero_grad()
    scaled.backward()
    assert p.grad.item() == 0.0  # finite: the check passes
    s.step(opt)
    assert np.isnan(p.grad.item()) and np.isnan(p.item())  # 0 * inf: NaN written into the weight
    s.update()  # not a found inf: the tracker counts a "successful" step
    assert s.get_scale() == 0.0 and s._get_growth_tracker() == 1


def test_unscaling_itself_can_overflow():
    s = GradScaler(init_scale=2.0**-10)
    p, opt = one_param()
    s.scale(fpsim.tensor(1.0))
    p.grad = fpsim.tensor([2.0**120])  # finite before unscaling
    s.step(opt)
    assert p.grad.item() == np.inf and p.item() == -np.inf  # overflowed by x 2^10, not caught
    s.update()
    assert s.get_scale() == 2.0**-10


def test_static_grad_scaler():
    s = StaticGradScaler(512.0)
    p, opt = one_param()
    for g in [512.0, np.inf, 512.0]:
        skipped = iterate(s, opt, p, g)
        assert s.get_scale() == 512.0 and skipped == (g == np.inf)
    assert p.item() == -1.0
    plain = StaticGradScaler(512.0, skip_non_finite=False)
    q, oq = one_param()
    iterate(plain, oq, q, np.inf)
    assert q.item() == -np.inf  # the overflow reaches the weight
    with pytest.raises(AssertionError, match="No inf checks were recorded prior to update."):
        plain.scale(fpsim.tensor(1.0))
        plain.update()
    plain.update(new_scale=64.0)
    assert plain.get_scale() == 64.0
    assert "StaticGradScaler(scale=64.0" in repr(plain)


def test_a_policy_installed_by_someone_else_keeps_running():
    from fpsim.amp import autocast_mode as ac_module
    from fpsim.autograd import get_dispatch_policy, set_dispatch_policy

    calls = []

    def other(op, args):
        calls.append(op)
        return args

    old, old_prev = set_dispatch_policy(other), ac_module._previous
    try:
        with autocast("cuda"):
            y = F.linear(T((2, 3), fp32), T((2, 3), fp32, 1))
        assert y.format == fp16 and calls == ["linear"]
        assert get_dispatch_policy() is ac_module._chain
        (T((2, 3), fp32) + 1.0).sum()
        assert calls == ["linear", "add", "sum"]  # autocast off: the other policy still runs
    finally:
        set_dispatch_policy(old)
        ac_module._previous = old_prev
