"""``fpsim.save(obj, f)`` / ``fpsim.load(f)``: checkpoints of state dicts, bit for bit, no pickle.

What can be saved: the state dicts of models, optimizers (moments, master copies, step counts,
param groups), GradScalers and lr schedulers, and any nesting of dicts, lists and tuples of
them -- precisely ``None``, ``bool``, ``int``, ``float`` (inf/NaN too), ``str``, lists, tuples,
dicts (keys of those scalar types or tuples; an ``OrderedDict`` stays one), numpy arrays and
scalars (not of ``object`` dtype), fpsim Tensors (``nn.Parameter`` stays one) and Formats.
A model or optimizer itself is refused: save its ``state_dict()``.

Every Tensor comes back with its format (name, exponent and mantissa bits, bias, specials) and
its values bit for bit: fpsim holds each value exactly in the format's container (float32 for
fp16, bf16, fp8, tf32, fp32; float64 for fp64), and the file stores that container's bytes, so
a bf16 or fp8 value, a subnormal, -0.0 and a NaN's payload all survive. An object that appears
twice (the same Tensor or array) comes back as one object.

The file format (version 1) is a zip archive in numpy's ``.npz`` layout (``numpy.load`` opens
it): ``fpsim.json``, the manifest ``{"fpsim_save": 1, "fpsim_version": ..., "object": node}``,
and one ``<i>.npy`` per array. In a node, JSON null/true/false/numbers/strings/arrays are
themselves and a JSON object is a dict of string keys, unless its key starts with ``$``:
``{"$float": "inf"}`` (also ``"-inf"``, ``"nan"``), ``{"$tuple": [...]}``,
``{"$dict": [[key, value], ...]}`` (other keys), ``{"$odict": [[key, value], ...]}``,
``{"$array": "0.npy"}``, ``{"$scalar": "1.npy"}`` (a 0-d array read back as a numpy scalar),
``{"$format": {...}}`` and ``{"$tensor": "2.npy", "format": {"name": "bf16", "exp_bits": 8,
"man_bits": 7, "bias": 127, "has_inf": true, "nan": "ieee", "has_subnormals": true, "signed":
true}, "requires_grad": false, "parameter": false}`` (``"format": null`` for an integer tensor;
a format written as ``"style": "ieee"`` by fpsim before formats had these properties is read
too). Loading reads JSON and ``.npy`` files with
``allow_pickle=False``: it runs no code from the file, so a checkpoint from elsewhere is safe to
open.

>>> import os, tempfile
>>> import numpy as np
>>> import fpsim
>>> from fpsim import nn, optim
>>> model = nn.Linear(3, 2, format="bf16", seed=0)
>>> opt = optim.Adam(model.parameters(), lr=1e-3)
>>> path = os.path.join(tempfile.mkdtemp(), "ckpt.fpsim")
>>> fpsim.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, path)
>>> ckpt = fpsim.load(path)
>>> ckpt["epoch"], ckpt["model"]["weight"].format.name, ckpt["optimizer"]["param_groups"][0]
(3, 'bf16', {'lr': 0.001, 'betas': (0.9, 0.999), 'eps': 1e-08, 'weight_decay': 0.0, \
'amsgrad': False, 'maximize': False, 'params': [0, 1]})
>>> twin = nn.Linear(3, 2, format="bf16", seed=1)
>>> twin.load_state_dict(ckpt["model"])
IncompatibleKeys(missing_keys=[], unexpected_keys=[])
>>> np.array_equal(twin.weight.data.view(np.uint32), model.weight.data.view(np.uint32))
True
>>> sorted(np.load(path).files)
['0', '1', 'fpsim.json']
"""

from __future__ import annotations

import io
import json
import math
import os
import zipfile
from collections import OrderedDict
from typing import Any

import numpy as np
from numpy.lib import format as npformat

from .formats import Format, get_format, list_formats

__all__ = ["save", "load"]

#: The version of the file layout that :func:`save` writes (and the newest :func:`load` reads).
FORMAT_VERSION = 1
_MANIFEST = "fpsim.json"


# ---- saving ----------------------------------------------------------------------------------


def _format_node(f: Format) -> dict:
    return {
        "name": f.name,
        "exp_bits": f.exp_bits,
        "man_bits": f.man_bits,
        "bias": f.bias,
        "has_inf": f.has_inf,
        "nan": f.nan,
        "has_subnormals": f.has_subnormals,
        "signed": f.signed,
    }


class _Encoder:
    """Turn an object into a JSON node, collecting its arrays (by reference, not copied)."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []
        self.memo: dict[int, tuple[Any, Any]] = {}  # id -> (object kept alive, its node)
        self.active: set[int] = set()  # the containers being encoded: a cycle is an error

    def _member(self, arr: np.ndarray, where: str) -> str:
        if arr.dtype.hasobject:
            raise TypeError(
                f"cannot save {where}: an array of dtype {arr.dtype} holds Python objects "
                "(fpsim.save stores numbers only, without pickle)"
            )
        self.arrays.append(arr)
        return f"{len(self.arrays) - 1}.npy"

    def encode(self, obj: Any, where: str) -> Any:
        from .autograd.tensor import Tensor

        if isinstance(obj, np.generic):  # first: np.float64 is a float, np.int64 is not an int
            if id(obj) not in self.memo:
                self.memo[id(obj)] = (obj, {"$scalar": self._member(np.asarray(obj), where)})
            return self.memo[id(obj)][1]
        if obj is None or isinstance(obj, str):
            return None if obj is None else str(obj)
        if isinstance(obj, (bool, int)):
            return bool(obj) if isinstance(obj, bool) else int(obj)
        if isinstance(obj, float):
            x = float(obj)
            if math.isfinite(x):
                return x  # JSON writes repr(x), the shortest string that reads back as x
            return {"$float": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}
        if isinstance(obj, Format):
            return {"$format": _format_node(obj)}
        if id(obj) in self.memo:
            return self.memo[id(obj)][1]
        if isinstance(obj, Tensor):
            node = {
                "$tensor": self._member(obj.data, where),
                "format": None if obj.format is None else _format_node(obj.format),
                "requires_grad": bool(obj.requires_grad),
                "parameter": type(obj).__name__ == "Parameter",
            }
        elif isinstance(obj, np.ndarray):
            node = {"$array": self._member(obj, where)}
        elif isinstance(obj, (list, tuple, dict)):
            if id(obj) in self.active:
                raise ValueError(f"cannot save {where}: it contains itself")
            self.active.add(id(obj))
            try:
                node = self._container(obj, where)
            finally:
                self.active.discard(id(obj))
            return node  # containers are not memoised: each comes back as its own object
        else:
            raise TypeError(_unsupported(obj, where))
        self.memo[id(obj)] = (obj, node)
        return node

    def _container(self, obj: Any, where: str) -> Any:
        if isinstance(obj, (list, tuple)):
            items = [self.encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]
            return items if isinstance(obj, list) else {"$tuple": items}
        plain = not isinstance(obj, OrderedDict) and all(
            type(k) is str and not k.startswith("$") for k in obj
        )
        if plain:
            return {k: self.encode(v, f"{where}[{k!r}]") for k, v in obj.items()}
        pairs = []
        for k, v in obj.items():
            if not (k is None or isinstance(k, (bool, int, float, str, tuple))):
                raise TypeError(
                    f"cannot save {where}: a dict key of type {type(k).__name__} ({k!r}); "
                    "keys must be None, bool, int, float, str or tuples of them"
                )
            pairs.append([self.encode(k, f"{where} key"), self.encode(v, f"{where}[{k!r}]")])
        return {"$odict" if isinstance(obj, OrderedDict) else "$dict": pairs}


def _unsupported(obj: Any, where: str) -> str:
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    if hasattr(obj, "state_dict") and callable(obj.state_dict):
        return (
            f"cannot save {where}, a {kind}: fpsim.save stores data, not objects; save "
            "its state_dict() and restore it with load_state_dict(fpsim.load(path))"
        )
    return (
        f"cannot save {where} of type {kind}: fpsim.save stores None, bool, int, float, str, "
        "lists, tuples, dicts, numpy arrays and scalars, fpsim Tensors and Formats"
    )


def save(obj: Any, f) -> None:
    """Write ``obj`` (state dicts, or dicts/lists/tuples of them) to ``f``, a path or a
    writable binary file. See the module's documentation for what is stored and how.

    The whole object is checked before the file is opened: an object that cannot be saved
    (a model, a lambda) raises TypeError and leaves an existing file untouched.
    """
    enc = _Encoder()
    root = enc.encode(obj, "obj")
    from . import __version__

    manifest = {"fpsim_save": FORMAT_VERSION, "fpsim_version": __version__, "object": root}
    text = json.dumps(manifest, allow_nan=False, ensure_ascii=False)
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            _write(fh, text, enc.arrays)
    else:
        _write(f, text, enc.arrays)


def _write(fh, text: str, arrays: list[np.ndarray]) -> None:
    with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(_MANIFEST, text.encode("utf-8"))
        for i, arr in enumerate(arrays):
            with zf.open(f"{i}.npy", "w", force_zip64=True) as m:  # as numpy.savez
                npformat.write_array(m, np.asanyarray(arr), allow_pickle=False)


# ---- loading ---------------------------------------------------------------------------------


class _Decoder:
    def __init__(self, zf: zipfile.ZipFile, name: str) -> None:
        self.zf, self.name = zf, name
        self.loaded: dict[tuple, Any] = {}  # (tag, member) -> object: one per saved object

    def corrupt(self, why: str) -> ValueError:
        return ValueError(f"corrupt fpsim save file {self.name}: {why}")

    def read(self, member: Any) -> np.ndarray:
        if not isinstance(member, str) or member == _MANIFEST:
            raise self.corrupt(f"bad array reference {member!r}")
        try:
            with self.zf.open(member) as m:
                return npformat.read_array(m, allow_pickle=False)
        except KeyError:
            raise self.corrupt(f"the array {member!r} is missing") from None
        except ValueError as e:  # an object array, a bad header
            raise self.corrupt(f"the array {member!r}: {e}") from None

    def format(self, node: Any) -> Format:
        try:
            if "style" in node:  # files written before formats had explicit properties
                props = {"style": node["style"]}
            else:
                props = {k: node[k] for k in ("has_inf", "nan", "has_subnormals", "signed")}
            f = Format(node["exp_bits"], node["man_bits"], node["bias"], name=node["name"], **props)
        except (KeyError, TypeError, ValueError) as e:
            raise self.corrupt(f"bad format {node!r} ({e})") from None
        if f.name in list_formats() and get_format(f.name) == f:
            return get_format(f.name)  # the built-in object itself (fp16 is fpsim.fp16)
        return f

    def decode(self, node: Any) -> Any:
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            return [self.decode(v) for v in node]
        if not isinstance(node, dict):
            raise self.corrupt(f"unexpected node {node!r}")
        tags = [k for k in node if k.startswith("$")]
        if not tags:
            return {k: self.decode(v) for k, v in node.items()}
        tag, value = tags[0], node[tags[0]]
        if tag == "$float":
            if value not in ("inf", "-inf", "nan"):
                raise self.corrupt(f"bad float {value!r}")
            return float(value)
        if tag == "$tuple":
            return tuple(self.decode(v) for v in value)
        if tag in ("$dict", "$odict"):
            pairs = [(self.decode(k), self.decode(v)) for k, v in value]
            return OrderedDict(pairs) if tag == "$odict" else dict(pairs)
        if tag == "$format":
            return self.format(value)
        if tag in ("$array", "$scalar", "$tensor"):
            key = (tag, value)
            if key not in self.loaded:
                arr = self.read(value)
                if tag == "$array":
                    self.loaded[key] = arr
                elif tag == "$scalar":
                    self.loaded[key] = arr[()]
                else:
                    self.loaded[key] = self.tensor(node, arr)
            return self.loaded[key]
        raise self.corrupt(f"unknown tag {tag!r}")

    def tensor(self, node: dict, arr: np.ndarray):
        from .autograd.precision import to_format
        from .autograd.tensor import Tensor

        fmt = None if node.get("format") is None else self.format(node["format"])
        if fmt is None:
            if arr.dtype.kind not in "iub":
                raise self.corrupt(f"a tensor without a format holds {arr.dtype} values")
        else:
            if arr.dtype != fmt.container_dtype:
                raise self.corrupt(
                    f"a {fmt.name} tensor stored as {arr.dtype} (its container is "
                    f"{fmt.container_dtype})"
                )
            # fpsim's invariant: every element is a value of the format
            with np.errstate(all="ignore"):
                if not np.array_equal(to_format(arr, fmt), arr, equal_nan=True):
                    raise self.corrupt(f"a {fmt.name} tensor holds values outside {fmt.name}")
        t = Tensor._make(arr, fmt, bool(node.get("requires_grad", False)))
        if node.get("parameter"):
            from .nn import Parameter

            t = Parameter(t, requires_grad=t.requires_grad)
        return t


def load(f, map_location=None, *, weights_only: bool = True) -> Any:
    """Read what :func:`save` wrote to ``f`` (a path or a readable binary file).

    ``map_location`` and ``weights_only`` are accepted for PyTorch's habits and change
    nothing: fpsim has no devices, and a file holds only data (nothing in it runs).
    FileNotFoundError for a missing file; ValueError for a file that is not an fpsim save
    (a PyTorch checkpoint, a plain ``.npz``, anything else) or is damaged.
    """
    del map_location, weights_only
    if isinstance(f, (str, os.PathLike)):
        name = repr(os.fspath(f))
        with open(f, "rb") as fh:
            return _load(fh, name)
    return _load(f, "(file object)")


def _load(fh: io.BufferedIOBase, name: str) -> Any:
    try:
        zf = zipfile.ZipFile(fh)
    except zipfile.BadZipFile:
        raise ValueError(
            f"{name} is not an fpsim save file: fpsim.save writes a zip archive with an "
            f"{_MANIFEST} manifest, and this is not a zip archive"
        ) from None
    with zf:
        names = zf.namelist()
        if _MANIFEST not in names:
            if any(n.endswith("data.pkl") for n in names):
                hint = "it looks like a PyTorch checkpoint (torch.save); read it with torch.load"
            elif names and all(n.endswith(".npy") for n in names):
                hint = "it looks like a numpy .npz archive; read it with numpy.load"
            else:
                hint = "a zip archive of something else"
            raise ValueError(f"{name} is not an fpsim save file (no {_MANIFEST}): {hint}")
        dec = _Decoder(zf, name)
        try:
            manifest = json.loads(zf.read(_MANIFEST).decode("utf-8"))
        except ValueError as e:
            raise dec.corrupt(f"the manifest is not JSON ({e})") from None
        if not isinstance(manifest, dict) or "fpsim_save" not in manifest:
            raise dec.corrupt("the manifest has no 'fpsim_save' version")
        version = manifest["fpsim_save"]
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise ValueError(
                f"{name} was written by a newer fpsim (file format version {version!r}, "
                f"fpsim {manifest.get('fpsim_version')}); this fpsim reads version "
                f"{FORMAT_VERSION}: upgrade fpsim"
            )
        try:
            return dec.decode(manifest.get("object"))
        except (TypeError, AttributeError, KeyError) as e:
            raise dec.corrupt(f"malformed manifest ({type(e).__name__}: {e})") from None
