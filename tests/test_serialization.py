"""fpsim.save / fpsim.load: state dicts of models (every format, special values bit for bit),
optimizers and GradScalers round-trip; a run resumed from a checkpoint continues exactly as the
uninterrupted run (bit-identical losses and weights); nested containers keep their types; files
that are not fpsim saves, damaged files and unsavable objects give clear errors; nothing is
unpickled."""

import io
import json
import math
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import fpsim
from fpsim import amp, nn, optim
from fpsim.nn import functional as F
from fpsim.optim import lr_scheduler

FORMATS = ["fp32", "fp16", "bf16", "tf32", "fp8_e4m3", "fp8_e5m2", "fp64",
           fpsim.Format(4, 3, bias=5, name="e4m3_b5"), fpsim.Format(3, 2)]  # fmt: skip


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint64 if a.dtype == np.float64 else np.uint32)


def _same_tensor(a, b):
    assert type(a) is type(b) and a.format == b.format and a.format.name == b.format.name
    assert a.data.dtype == b.data.dtype and a.shape == b.shape
    assert np.array_equal(_bits(a.data), _bits(b.data))


# ---- models ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_model_state_dict_round_trip_bit_for_bit(tmp_path, fmt):
    model = nn.MLP([3, 8, 2], seed=0).to(fmt)
    model[0].register_buffer("steps", fpsim.tensor(np.array([7, 8]), format="int64"))
    path = tmp_path / "model.fpsim"
    fpsim.save(model.state_dict(), path)
    sd = fpsim.load(path)
    assert isinstance(sd, OrderedDict) and list(sd) == list(model.state_dict())
    for k, v in model.state_dict().items():
        if v.format is None:
            assert sd[k].format is None and np.array_equal(sd[k].data, v.data)
        else:
            _same_tensor(sd[k], v)
    builtin = isinstance(fmt, str)
    assert (sd["0.weight"].format is fpsim.get_format(fmt)) == builtin  # fp16 is fpsim.fp16
    twin = nn.MLP([3, 8, 2], seed=1).to(fmt)
    twin[0].register_buffer("steps", fpsim.tensor(np.array([0, 0]), format="int64"))
    twin.load_state_dict(sd)
    x = fpsim.randn(5, 3, generator=0).to(fmt)
    with fpsim.no_grad():
        _same_tensor(twin(x), model(x))
    assert twin[0].steps.data.tolist() == [7, 8]


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp32", "fp64"])
def test_special_values_survive(tmp_path, fmt):
    f = fpsim.get_format(fmt)
    vals = [0.0, -0.0, f.smallest_subnormal, -f.min_normal, f.max, -f.max, float("nan")]
    if f.style == "ieee":
        vals += [float("inf"), float("-inf")]
    t = fpsim.tensor(vals, format=fmt)
    fpsim.save([t], tmp_path / "s.fpsim")
    (back,) = fpsim.load(tmp_path / "s.fpsim")
    _same_tensor(back, t)
    assert math.copysign(1.0, float(back.data[1])) == -1.0


def test_nan_payload_and_parameters_are_kept(tmp_path):
    raw = np.array([0x7FC00001, 0xFFC12345], dtype=np.uint32).view(np.float32)  # two NaNs
    t = fpsim.Tensor._make(raw.copy(), fpsim.fp32)
    p = nn.Parameter([1.0, 2.0], format="bf16")
    fpsim.save({"t": t, "p": p, "again": p}, tmp_path / "x.fpsim")
    back = fpsim.load(tmp_path / "x.fpsim")
    assert np.array_equal(back["t"].data.view(np.uint32), raw.view(np.uint32))
    assert isinstance(back["p"], nn.Parameter) and back["p"].requires_grad
    assert back["again"] is back["p"]  # one object saved twice loads as one object
    assert back["p"].data.flags.writeable


# ---- optimizers, scalers, resuming -----------------------------------------------------------

X, Y = amp.underflow_task(256, seed=0)


def _setup(kind, seed=0):
    model = amp.underflow_model(seed=seed)
    if kind == "adam":
        opt = optim.Adam(model.parameters(), lr=3e-3)
    elif kind == "adamw amsgrad":
        opt = optim.AdamW(model.parameters(), lr=3e-3, amsgrad=True, weight_decay=0.1)
    elif kind == "sgd momentum":
        opt = optim.SGD(model.parameters(), lr=0.5, momentum=0.9, nesterov=True)
    elif kind == "fp16 master":
        model.half()
        opt = optim.Adam(model.parameters(), lr=3e-3, master_weights=True)
    # growth_interval 2 and a large initial scale: the scale grows, backs off (a skipped step)
    scaler = amp.GradScaler("cuda", init_scale=2.0**28, growth_interval=2,
                            enabled=kind != "fp16 master")  # fmt: skip
    sched = lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    return model, opt, scaler, sched


def _train(model, opt, scaler, sched, steps, start):
    losses = []
    for i in range(start, start + steps):
        fmt = next(model.parameters()).format  # fp16 for the fp16 model, else fp32
        xb = fpsim.tensor(X[32 * (i % 8) : 32 * (i % 8 + 1)], format=fmt)
        yb = fpsim.tensor(Y[32 * (i % 8) : 32 * (i % 8 + 1)], format=fmt)
        with amp.autocast("cuda", dtype=fpsim.fp16, enabled=scaler.is_enabled()):
            loss = F.mse_loss(model(xb), yb)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("kind", ["adam", "adamw amsgrad", "sgd momentum", "fp16 master"])
def test_resumed_training_is_bit_identical(tmp_path, kind):
    model, opt, scaler, sched = _setup(kind)
    uninterrupted = _train(model, opt, scaler, sched, 10, 0)

    model, opt, scaler, sched = _setup(kind)
    first = _train(model, opt, scaler, sched, 5, 0)
    if scaler.is_enabled():
        assert scaler.get_scale() != 2.0**28  # the scaler's state matters
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(),
            "scaler": scaler.state_dict(), "scheduler": sched.state_dict(), "step": 5}  # fmt: skip
    fpsim.save(ckpt, tmp_path / "ckpt.fpsim")

    model2, opt2, scaler2, sched2 = _setup(kind, seed=123)  # other weights: all must load
    back = fpsim.load(tmp_path / "ckpt.fpsim")
    model2.load_state_dict(back["model"])
    opt2.load_state_dict(back["optimizer"])
    scaler2.load_state_dict(back["scaler"])
    sched2.load_state_dict(back["scheduler"])
    assert back["scaler"] == scaler.state_dict() and back["scheduler"] == sched.state_dict()
    for (_, s1), s2 in zip(opt.state_dict()["state"].items(), back["optimizer"]["state"].values(),
                           strict=True):  # fmt: skip
        assert s1.keys() == s2.keys()
        for k in s1:
            if isinstance(s1[k], np.ndarray):
                assert s1[k].dtype == s2[k].dtype and np.array_equal(_bits(s1[k]), _bits(s2[k]))
            else:
                assert s1[k] == s2[k] and type(s1[k]) is type(s2[k])
    assert back["optimizer"]["param_groups"] == opt.state_dict()["param_groups"]
    rest = _train(model2, opt2, scaler2, sched2, 5, back["step"])
    assert first + rest == uninterrupted  # Python floats: bit for bit


def test_resume_weights_equal_uninterrupted_weights(tmp_path):
    a = _setup("adam")
    _train(*a, 7, 0)
    b = _setup("adam")
    _train(*b, 3, 0)
    fpsim.save([m.state_dict() for m in b], tmp_path / "c.fpsim")
    c = _setup("adam", seed=5)
    for obj, sd in zip(c, fpsim.load(tmp_path / "c.fpsim"), strict=True):
        obj.load_state_dict(sd)
    _train(*c, 4, 3)
    for p, q in zip(a[0].parameters(), c[0].parameters(), strict=True):
        assert np.array_equal(_bits(p.data), _bits(q.data))


def test_grad_scaler_state_round_trip(tmp_path):
    s = amp.GradScaler("cuda", init_scale=1024.0, growth_factor=3.0, backoff_factor=0.25)
    fpsim.save(s.state_dict(), tmp_path / "s.fpsim")
    back = fpsim.load(tmp_path / "s.fpsim")
    assert back == s.state_dict() and type(back["_growth_tracker"]) is int
    fpsim.save(amp.GradScaler(enabled=False).state_dict(), tmp_path / "d.fpsim")
    assert fpsim.load(tmp_path / "d.fpsim") == {}


# ---- containers ------------------------------------------------------------------------------


def test_nested_containers_keep_types_and_values(tmp_path):
    obj = {
        "none": None, "t": True, "f": False, "big": 2**80, "neg": -3, "s": "µ-ülp ✓",
        "floats": [0.1, -0.0, 1e-320, float("inf"), float("-inf"), float("nan"), 1 / 3],
        "tuple": (1, (2.5, "x"), []), "ints": {0: "a", 1: "b"}, "tuplekey": {(1, "a"): 2},
        "$dollar": {"$tensor": "not a tag"}, "od": OrderedDict([("b", 1), ("a", 2)]),
        "np": [np.float32(1.5), np.int64(7), np.bool_(True), np.float16(-0.0)],
        "arrays": [np.arange(6, dtype=np.int8).reshape(2, 3), np.array([True, False]),
                   np.asfortranarray(np.ones((2, 3))), np.array([1 + 2j]), np.zeros((0, 4))],
        "format": fpsim.bf16, "custom": fpsim.Format(5, 2, style="ieee"),
    }  # fmt: skip
    buf = io.BytesIO()
    fpsim.save(obj, buf)
    buf.seek(0)
    back = fpsim.load(buf)
    assert list(back) == list(obj)
    for k in ("none", "t", "f", "big", "neg", "s", "tuple", "ints", "tuplekey", "$dollar"):
        assert back[k] == obj[k] and type(back[k]) is type(obj[k])
    assert type(back["od"]) is OrderedDict and list(back["od"].items()) == [("b", 1), ("a", 2)]
    got = back["floats"]
    assert [math.copysign(1, x) for x in got] == [math.copysign(1, x) for x in obj["floats"]]
    assert got[:5] == obj["floats"][:5] and math.isnan(got[5]) and got[6] == 1 / 3
    for a, b in zip(back["np"], obj["np"], strict=True):
        assert type(a) is type(b) and a.tobytes() == b.tobytes()
    for a, b in zip(back["arrays"], obj["arrays"], strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    assert back["format"] is fpsim.bf16 and back["custom"] == obj["custom"]


def test_file_is_an_npz_with_a_json_manifest(tmp_path):
    path = tmp_path / "m.fpsim"
    fpsim.save({"w": fpsim.tensor([1.0, 2.0], format="fp8_e4m3"), "n": 3}, path)
    with zipfile.ZipFile(path) as zf:
        assert zf.namelist() == ["fpsim.json", "0.npy"]
        manifest = json.loads(zf.read("fpsim.json"))
    assert manifest["fpsim_save"] == 1 and manifest["object"]["n"] == 3
    assert manifest["object"]["w"] == {
        "$tensor": "0.npy", "requires_grad": False, "parameter": False,
        "format": {"name": "fp8_e4m3", "exp_bits": 4, "man_bits": 3, "bias": 7, "has_inf": False,
                   "nan": "all_ones", "has_subnormals": True, "signed": True},
    }  # fmt: skip
    assert np.load(path)["0"].tolist() == [1.0, 2.0]


# ---- errors ----------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        fpsim.load(tmp_path / "nope.fpsim")


def test_files_that_are_not_fpsim_saves(tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    with pytest.raises(ValueError, match="is not an fpsim save file.*not a zip archive"):
        fpsim.load(tmp_path / "a.txt")
    np.savez(tmp_path / "b.npz", x=np.ones(3))
    with pytest.raises(ValueError, match="no fpsim.json.*numpy.load"):
        fpsim.load(tmp_path / "b.npz")


def test_a_torch_checkpoint_is_recognised(tmp_path):
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.ones(2)}, tmp_path / "t.pt")
    with pytest.raises(ValueError, match="PyTorch checkpoint.*torch.load"):
        fpsim.load(tmp_path / "t.pt")


def _write_zip(path, manifest, arrays=(), allow_pickle=False):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("fpsim.json", json.dumps(manifest))
        for i, a in enumerate(arrays):
            with zf.open(f"{i}.npy", "w") as m:
                np.lib.format.write_array(m, a, allow_pickle=allow_pickle)


def test_damaged_or_newer_files(tmp_path):
    p = tmp_path / "x.fpsim"
    _write_zip(p, {"fpsim_save": 2, "fpsim_version": "9.0", "object": 1})
    with pytest.raises(ValueError, match="newer fpsim.*version 2"):
        fpsim.load(p)
    _write_zip(p, {"object": 1})
    with pytest.raises(ValueError, match="corrupt fpsim save file.*'fpsim_save'"):
        fpsim.load(p)
    _write_zip(p, {"fpsim_save": 1, "object": {"$array": "3.npy"}})
    with pytest.raises(ValueError, match="corrupt.*'3.npy' is missing"):
        fpsim.load(p)
    fmt = {"name": "fp16", "exp_bits": 5, "man_bits": 10, "bias": 15, "style": "ieee"}
    node = {"$tensor": "0.npy", "format": fmt}
    _write_zip(p, {"fpsim_save": 1, "object": node}, [np.array([0.1], np.float32)])
    with pytest.raises(ValueError, match="fp16 tensor holds values outside fp16"):
        fpsim.load(p)
    _write_zip(p, {"fpsim_save": 1, "object": node}, [np.array([0.5])])
    with pytest.raises(ValueError, match="fp16 tensor stored as float64"):
        fpsim.load(p)
    _write_zip(p, {"fpsim_save": 1, "object": {"$what": 1}})
    with pytest.raises(ValueError, match="unknown tag '\\$what'"):
        fpsim.load(p)


class _Boom:
    def __reduce__(self):
        raise AssertionError("the loader must not unpickle anything")


def test_pickled_arrays_are_refused_not_run(tmp_path):
    p = tmp_path / "evil.fpsim"
    evil = np.array([None], dtype=object)
    _write_zip(p, {"fpsim_save": 1, "object": {"$array": "0.npy"}}, [evil], allow_pickle=True)
    with pytest.raises(ValueError, match="corrupt.*0.npy"):
        fpsim.load(p)


def test_unsavable_objects_leave_the_file_alone(tmp_path):
    p = tmp_path / "keep.fpsim"
    fpsim.save({"v": 1}, p)
    model = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="Linear: fpsim.save stores data.*state_dict"):
        fpsim.save({"model": model}, p)
    with pytest.raises(TypeError, match="Adam: fpsim.save stores data.*state_dict"):
        fpsim.save(optim.Adam(model.parameters()), p)
    with pytest.raises(TypeError, match=r"cannot save obj\['f'\]\[1\] of type builtins.function"):
        fpsim.save({"f": [1, lambda: 0]}, p)
    with pytest.raises(TypeError, match="holds Python objects"):
        fpsim.save(np.array([_Boom()], dtype=object), p)
    with pytest.raises(TypeError, match="dict key of type"):
        fpsim.save({frozenset(): 1}, p)
    loop = [1]
    loop.append(loop)
    with pytest.raises(ValueError, match="contains itself"):
        fpsim.save(loop, p)
    assert fpsim.load(p) == {"v": 1}
