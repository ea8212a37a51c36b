"""Found in a second reading of the engine, each checked against a live PyTorch 2.13."""

import numpy as np
import pytest

import fpsim

torch = pytest.importorskip("torch")


def test_accumulating_into_a_kept_grad_counts_a_version():
    w = fpsim.tensor([1.0, 2.0], requires_grad=True)
    v = fpsim.tensor([1.0, 1.0], requires_grad=True)
    (w * 3).sum().backward()
    y = (w.grad * v).sum()  # keeps w.grad for v's gradient
    (w * 5).sum().backward()  # adds into w.grad in place
    tw = torch.tensor([1.0, 2.0], requires_grad=True)
    tv = torch.tensor([1.0, 1.0], requires_grad=True)
    (tw * 3).sum().backward()
    ty = (tw.grad * tv).sum()
    (tw * 5).sum().backward()
    assert w.grad._version == tw.grad._version == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as ours:
        y.backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        ty.backward()
    assert "is at version 1; expected version 0 instead" in str(ours.value)


@pytest.mark.parametrize("how", ["index", "fill", "copy"])
def test_retain_grad_follows_an_inplace_write(how):
    grads = []
    for lib in (fpsim, torch):
        w = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = w * 2
        y.retain_grad()
        if how == "index":
            y[0] = 1.0
            (y * y).sum().backward()
        elif how == "fill":
            y.fill_(2.0)
            (y * y).sum().backward()
        else:
            y.copy_(w * w)
            (y * 1).sum().backward()
        grads.append((np.asarray(y.grad.detach().numpy()), np.asarray(w.grad.detach().numpy())))
    (fy, fw), (ty, tw) = grads
    assert np.array_equal(fy, ty) and np.array_equal(fw, tw)


def test_max_along_dim_of_a_zero_dim_tensor_is_a_copy():
    x = fpsim.tensor(3.0)
    v = x.max(0).values
    with fpsim.no_grad():
        v.fill_(5.0)
    tx = torch.tensor(3.0)
    tv = tx.max(0).values
    tv.fill_(5.0)
    assert x.item() == tx.item() == 3.0
    xr = fpsim.tensor(3.0, requires_grad=True)
    xr.max(0).values.detach().fill_(1.0)  # no "view of a leaf" error: not a view
    assert xr.item() == 3.0


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reductions_keepdim_without_dim(op):
    data = np.array([[1.0, 4.0], [3.0, 2.0]])
    got = getattr(fpsim.tensor(data), op)(keepdim=True)
    want = getattr(torch.tensor(data), op)(keepdim=True)
    assert got.shape == tuple(want.shape) and got.numpy().tolist() == want.numpy().tolist()


@pytest.mark.parametrize("fmt, tdt", [("fp32", "float32"), ("fp16", "float16"), ("bf16", "bfloat16")])
@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_min_gradients_are_positive_zeros_off_the_selection(fmt, tdt, dim):
    data = np.array([[3.0, 1.0, 2.0], [0.5, 0.5, 4.0]])
    x = fpsim.tensor(data, format=fmt, requires_grad=True)
    tx = torch.tensor(data, dtype=getattr(torch, tdt), requires_grad=True)
    (x.min() if dim is None else x.min(dim).values.sum()).backward()
    (tx.min() if dim is None else tx.min(dim).values.sum()).backward()
    got = x.grad.numpy().astype(np.float64)
    want = tx.grad.to(torch.float64).numpy()
    assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("data", [None, [None, 1.0]])
def test_tensor_of_none_is_refused_like_torch(data):
    with pytest.raises(RuntimeError, match="Could not infer dtype of NoneType"):
        fpsim.tensor(data)
    with pytest.raises(RuntimeError, match="Could not infer dtype of NoneType"):
        torch.tensor(data)
