"""What a numpy or PyTorch user expects of tensors, asked of a live PyTorch (CPU build).

* ``fpsim.tensor(data)`` infers the format as ``torch.tensor(data)`` infers the dtype: from the
  dtype of numpy arrays, numpy scalars and torch tensors (float16 stays fp16, float64 is fp64),
  fp32 for Python floats, the promotion over a list's elements;
* torch and numpy dtypes are formats wherever a format is taken (``tensor``, ``.to``, autocast,
  ``Module.to``);
* ``Tensor.numpy()`` shares memory and refuses a tensor that requires grad; ``from_numpy``
  shares memory with its array, with PyTorch's errors;
* integers become floats from their exact values (the expected values are derived by hand).
"""

import warnings

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fpsim  # noqa: E402
from fpsim import nn  # noqa: E402
from fpsim.autograd import from_numpy, tensor  # noqa: E402
from fpsim.nn import functional as F  # noqa: E402
from fpsim.stats import RangeHistogram  # noqa: E402

# torch dtype -> fpsim format name (None: an integer or bool tensor)
NAME = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32",
        torch.float64: "fp64", torch.int64: None, torch.int32: None, torch.int16: None,
        torch.int8: None, torch.uint8: None, torch.bool: None}  # fmt: skip

INPUTS = {
    "python floats": [1.0, 2.5],
    "python ints": [1, 2],
    "python bools": [True, False],
    "ints and floats": [1, 2.5],
    "python float": 1.5,
    "python int": 3,
    "empty list": [],
    "float16 array": np.array([1.0, 0.1], np.float16),
    "float32 array": np.array([1.0, 0.1], np.float32),
    "float64 array": np.array([1.0, 0.1]),
    "float64 0-d array": np.array(0.1),
    "int32 array": np.array([1, 2], np.int32),
    "uint8 array": np.array([1, 2], np.uint8),
    "bool array": np.array([True, False]),
    "float16 scalar": np.float16(0.1),
    "float64 scalar": np.float64(0.1),
    "float16 scalars": [np.float16(1.0), np.float16(0.1)],
    "float16 scalar and a float": [np.float16(1.0), 2.0],
    "an int and a float16 scalar": [1, np.float16(2.0)],
    "float16 and float64 scalars": [np.float16(1.0), np.float64(2.0)],
    "nested": [[np.float16(1.0)], [2.0]],
    "tuple of float16": (np.float16(1.0),),
    "list of float16 arrays": [np.array([1.0], np.float16), np.array([2.0], np.float16)],
    "a bool and a float16 scalar": [True, np.float16(2.0)],
    "int8 and uint8 scalars": [np.int8(1), np.uint8(1)],
}


@pytest.mark.parametrize("data", list(INPUTS.values()), ids=list(INPUTS))
def test_tensor_infers_the_format_torch_tensor_infers(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: "a list of numpy.ndarrays is extremely slow"
        want = torch.tensor(data)
    got = tensor(data)
    name = NAME[want.dtype]
    assert (None if got.format is None else got.format.name) == name
    if want.dtype == torch.bool:
        assert got.data.dtype == bool
    assert got.data.tolist() == want.to(torch.float64 if name else torch.int64).tolist()


TORCH_TENSORS = {
    "float16": torch.tensor([1.0, 0.1, 65504.0], dtype=torch.float16),
    "bfloat16": torch.tensor([1.0, 0.1, 3e38], dtype=torch.bfloat16),
    "float32": torch.tensor([1.0, 0.1, 1e-40]),
    "float64": torch.tensor([1.0, 0.1, 1e-300], dtype=torch.float64),
    "int32": torch.tensor([1, -2], dtype=torch.int32),
    "bool": torch.tensor([True, False]),
    "0-d bfloat16": torch.tensor(0.1, dtype=torch.bfloat16),
    "requires grad": torch.tensor([0.1, 0.2], requires_grad=True),
    "non-contiguous": torch.arange(12, dtype=torch.float16).reshape(3, 4).T,
}


@pytest.mark.parametrize("t", list(TORCH_TENSORS.values()), ids=list(TORCH_TENSORS))
def test_tensor_of_a_torch_tensor_keeps_its_dtype_and_values(t):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: "To copy construct from a tensor, ..."
        want = torch.tensor(t)
    got = tensor(t)
    name = NAME[want.dtype]
    assert (None if got.format is None else got.format.name) == name
    assert got.shape == tuple(want.shape) and not got.requires_grad
    assert got.data.tolist() == want.to(torch.float64 if name else torch.int64).tolist()
    if name is not None:
        got.data[...] = 0  # a copy: torch's memory is untouched
        assert t.detach().abs().sum().item() > 0


def test_fp8_arrays_and_tensors_have_their_formats():
    """torch.tensor refuses ml_dtypes arrays; fpsim names their formats as get_format does."""
    for dt, name, tdt in [
        (ml_dtypes.bfloat16, "bf16", torch.bfloat16),
        (ml_dtypes.float8_e4m3fn, "fp8_e4m3", torch.float8_e4m3fn),
        (ml_dtypes.float8_e5m2, "fp8_e5m2", torch.float8_e5m2),
    ]:
        a = np.array([0.1, -3.0, 240.0], dt)
        assert tensor(a).format.name == name
        ta = torch.tensor(a.astype(np.float32)).to(tdt)  # the same values in torch
        assert tensor(ta).format.name == name
        assert tensor(a).data.tolist() == tensor(ta).data.tolist() == ta.float().tolist()


FORMAT_ARGS = [
    (torch.float16, torch.float16),
    (torch.bfloat16, torch.bfloat16),
    (torch.float64, torch.float64),
    (np.float16, torch.float16),
    (np.dtype("float16"), torch.float16),
    (ml_dtypes.bfloat16, torch.bfloat16),
    ("torch.bfloat16", torch.bfloat16),
    (torch.float8_e4m3fn, torch.float8_e4m3fn),
]


@pytest.mark.parametrize("fmt,tdt", FORMAT_ARGS, ids=[str(f) for f, _ in FORMAT_ARGS])
def test_torch_and_numpy_dtypes_are_formats_for_tensor_and_to(fmt, tdt):
    vals = [0.1, -1.7, 300.0, 1e-6]
    want = torch.tensor(vals, dtype=torch.float64).to(tdt).to(torch.float64).tolist()
    assert tensor(vals, format=fmt).data.astype(np.float64).tolist() == want
    assert tensor(vals, format="fp64").to(fmt).data.astype(np.float64).tolist() == want
    p = nn.Parameter(vals, format=fmt)
    assert p.data.astype(np.float64).tolist() == want and p.requires_grad


@pytest.mark.parametrize("tdt", [torch.int64, torch.int32, torch.bool, np.int64, np.bool_])
def test_integer_dtypes_convert_as_torch_to(tdt):
    vals = [2.5, -2.5, 0.0, 1e5]
    want = torch.tensor(vals).to(tdt if isinstance(tdt, torch.dtype) else
                                 {np.int64: torch.int64, np.bool_: torch.bool}[tdt])  # fmt: skip
    got = tensor(vals).to(tdt)
    assert got.format is None and got.data.tolist() == want.tolist()
    ints = [3, 0, -1]  # (float data with an integer format is refused: truncation is .to's)
    assert tensor(ints, format=tdt).data.tolist() == torch.tensor(ints, dtype=want.dtype).tolist()


def test_autocast_and_module_to_take_torch_dtypes():
    x, w = np.ones((2, 3), np.float32) / 3, np.ones((4, 3), np.float32) / 7
    for dev, dt in [("cpu", torch.bfloat16), ("cuda", torch.float16), ("cpu", np.float16)]:
        tdt = dt if isinstance(dt, torch.dtype) else torch.float16
        with torch.autocast("cpu", dtype=tdt):  # torch's CPU autocast computes in the dtype
            want = torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(w))
        with fpsim.autocast(dev, dtype=dt):
            got = F.linear(tensor(x), tensor(w))
        assert got.format.name == NAME[want.dtype]
    m = nn.Linear(3, 2).to(torch.float16)
    assert m.weight.format.name == "fp16" and m.bias.format.name == "fp16"


def test_numpy_refuses_a_tensor_that_requires_grad_with_torchs_message():
    with pytest.raises(RuntimeError) as want:
        torch.tensor([1.0], requires_grad=True).numpy()
    for t in (tensor([1.0], requires_grad=True), tensor([1.0], requires_grad=True) * 2):
        with pytest.raises(RuntimeError) as got:
            t.numpy()
        assert str(got.value) == str(want.value)
        assert t.numpy(force=True).tolist() == [t.detach().numpy().tolist()[0]]


def test_numpy_shares_memory_as_in_torch():
    tt, t = torch.tensor([1.0, 2.0]), tensor([1.0, 2.0])
    for x in (tt, t):
        a = x.numpy()
        a[0] = 5.0
        assert np.shares_memory(a, x.numpy())
    assert t.data.tolist() == tt.tolist() == [5.0, 2.0]
    p = nn.Parameter([1.0])
    p.detach().numpy()[0] = 3.0  # detach() shares storage, as in torch
    assert p.item() == 3.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
def test_from_numpy_shares_memory_both_ways(dtype):
    a, ta = np.arange(4).astype(dtype), np.arange(4).astype(dtype)
    t, tt = from_numpy(a), torch.from_numpy(ta)
    assert NAME[tt.dtype] == (None if t.format is None else t.format.name)
    a[1] = ta[1] = 0  # the array writes the tensor
    assert t.data.tolist() == tt.tolist()
    if t.format is not None:
        t.fill_(7.0)  # and the tensor writes the array
        tt.fill_(7.0)
        assert a.tolist() == ta.tolist() == [7.0] * 4
        assert t._version == tt._version == 1


def test_from_numpy_errors_and_warning_as_torch():
    for bad in ([1.0], np.float64(1.0), np.array(["a"]), np.array([1.0], ">f8")):
        with pytest.raises((TypeError, ValueError)) as want:
            torch.from_numpy(bad)
        with pytest.raises(want.type) as got:
            from_numpy(bad)
        head = str(want.value).split(" The only")[0]
        assert str(got.value).startswith(head), (str(got.value), head)
    ro = np.arange(3.0)
    ro.flags.writeable = False
    with pytest.warns(UserWarning, match="The given NumPy array is not writable"):
        torch.from_numpy(ro)
    with pytest.warns(UserWarning, match="The given NumPy array is not writable"):
        t = from_numpy(ro)
    assert np.shares_memory(t.data, ro)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.int32])
def test_from_numpy_refuses_dtypes_fpsim_cannot_share(dtype):
    """fp16/bf16 values live in float32 arrays (int32 in int64 ones): sharing is impossible, so
    from_numpy refuses (torch.from_numpy shares float16 and int32) and points to tensor()."""
    a = np.array([1, 2], dtype)
    with pytest.raises(TypeError, match="fpsim.tensor"):
        from_numpy(a)
    assert tensor(a).data.tolist() == [1, 2]


def test_range_histogram_counts_tensors_that_require_grad():
    """stats reads tensors through detach().numpy(): parameters of both libraries count."""
    h = RangeHistogram(formats=("fp16",))
    h.add(nn.Parameter([1.0, 2.0]))
    h.add(torch.nn.Parameter(torch.ones(3)))
    assert h.count == 5


# ---- integers rounded once, from their exact values (hand-derived) ---------------------------
# 2^60 + 2^36 + 1 is just above the midpoint of fp32 neighbours 2^60 and 2^60 + 2^37 (spacing
# 2^37 there): the nearest is 2^60 + 2^37. Through float64 first it becomes 2^60 + 2^36 (+1 is
# below float64's half-spacing 2^7), a tie, which rounds to even: 2^60 -- the double rounding.
N, N_FP32 = 2**60 + 2**36 + 1, 2**60 + 2**37


def test_tensor_rounds_integers_once():
    assert tensor([N], format="fp32").item() == N_FP32
    assert tensor(N, format="fp32").item() == N_FP32
    assert tensor(np.array([N], np.int64), format="fp32").item() == N_FP32
    assert tensor(np.array([N], np.uint64), format="fp32").item() == N_FP32
    assert tensor(torch.tensor([N]), format=torch.float32).item() == N_FP32
    # bf16 (spacing 2^53 at 2^60): 2^60 + 2^52 + 1 -> 2^60 + 2^53, not the even 2^60
    assert tensor([2**60 + 2**52 + 1], format="bf16").item() == 2**60 + 2**53
    # beyond int64 (numpy holds these as objects, or as float64 when signs mix)
    assert tensor([2**70 + 2**46 + 1], format="fp32").item() == 2**70 + 2**47
    assert tensor([2**63 + 2**39 + 1, -1], format="fp32").data.tolist() == [2**63 + 2**40, -1]
    with pytest.raises(RuntimeError, match="Overflow when unpacking long"):
        tensor([2**63, -1])  # an integer tensor cannot hold it (torch raises too)
    assert tensor([2**40 + 1, 3]).data.tolist() == [2**40 + 1, 3]  # int64 stays exact


def test_engine_conversions_round_integers_once():
    assert fpsim.full((2,), N, format="fp32").data.tolist() == [N_FP32] * 2
    assert tensor([N]).to("fp32").item() == N_FP32  # int64 tensor -> cast node
    t = fpsim.zeros(3)
    t.fill_(N)
    t[1] = N
    assert t.data.tolist() == [N_FP32] * 3
    t.copy_(np.array([N, N, N]))
    assert t.data.tolist() == [N_FP32] * 3
    # Python ints as operands: weak scalars and clamp bounds, as torch (which agrees here)
    assert (tensor([1.0]) * N).item() == N_FP32 == (torch.tensor([1.0]) * N).item()
    assert (tensor([0.0]) + N).item() == N_FP32
    big = tensor([2.0**61])
    assert big.clamp(max=N).item() == N_FP32 == torch.tensor([2.0**61]).clamp(max=N).item()
