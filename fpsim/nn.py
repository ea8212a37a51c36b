"""Neural-network building blocks on the fpsim engine, shaped like ``torch.nn``.

``Module`` (parameters, children, train/eval, state_dict, ``.to(fmt)``/``.half()``, forward
hooks), ``Parameter``, layers (``Linear``, ``Embedding``, ``LayerNorm``, ``Dropout``),
activations, ``Sequential``/``ModuleList``, loss modules, the ``MLP`` helper and ``init``
(Kaiming / Xavier with an explicit seed or numpy Generator). ``fpsim.nn.functional`` holds the
ops as functions.

>>> from fpsim import nn
>>> from fpsim.autograd import randn
>>> model = nn.MLP([2, 16, 16, 2], seed=0)
>>> model
MLP(
  (0): Linear(in_features=2, out_features=16, bias=True, format=fp32)
  (1): ReLU()
  (2): Linear(in_features=16, out_features=16, bias=True, format=fp32)
  (3): ReLU()
  (4): Linear(in_features=16, out_features=2, bias=True, format=fp32)
)
>>> model(randn(5, 2, generator=0)).shape
(5, 2)
>>> sum(p.numel() for p in model.parameters()), model.half()[0].weight.format.name
(354, 'fp16')
"""

from __future__ import annotations

import math
from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterable, Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np

from .autograd import functional
from .autograd.grad_mode import no_grad
from .autograd.hooks import RemovableHandle
from .autograd.precision import to_format
from .autograd.tensor import Tensor, _resolve_format, as_generator
from .formats import FormatLike, bf16, fp16, fp32, fp64

__all__ = [
    "Module",
    "Parameter",
    "Linear",
    "Embedding",
    "LayerNorm",
    "Dropout",
    "ReLU",
    "GELU",
    "SiLU",
    "Tanh",
    "Sigmoid",
    "Identity",
    "Flatten",
    "Sequential",
    "ModuleList",
    "MLP",
    "MSELoss",
    "CrossEntropyLoss",
    "NLLLoss",
    "BCEWithLogitsLoss",
    "BCELoss",
    "init",
    "functional",
]

F = functional


class Parameter(Tensor):
    """A Tensor that a Module registers as a learnable parameter (``requires_grad=True``).

    ``Parameter(data, format=None)``: ``data`` is a Tensor (its format is kept unless
    ``format`` is given) or anything :func:`fpsim.tensor` accepts.
    """

    def __init__(self, data: Any = None, format: FormatLike | None = None, requires_grad=True):
        empty = np.zeros(0, np.float32)  # torch's Parameter(): an empty fp32 tensor
        Tensor.__init__(self, empty if data is None else data, format)
        if requires_grad:
            self.requires_grad_(True)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + Tensor.__repr__(self)


_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Module:
    """Base class of every layer and model. Assigning a Parameter / Module / buffer Tensor as
    an attribute registers it; ``model(x)`` calls ``forward`` (with hooks)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "training", True)

    # ---- registration ------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError("call Module.__init__() before assigning attributes")
        for d in (self._parameters, self._buffers, self._modules):
            d.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, Tensor) and name in self.__dict__.get("_buffer_names", ()):
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)
            return
        self.__dict__.pop(name, None)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            if key in d and name in d[key]:
                return d[key][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for d in (self._parameters, self._buffers, self._modules):
            if name in d:
                del d[name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if param is None:
            object.__setattr__(self, name, None)
        else:
            setattr(self, name, param)

    def register_buffer(self, name: str, value: Tensor) -> None:
        """A non-learnable tensor saved in the state_dict and converted by ``.to()``."""
        self.__dict__.setdefault("_buffer_names", set()).add(name)
        setattr(self, name, value)

    def add_module(self, name: str, module: Module | None) -> None:
        setattr(self, name, module)

    # ---- traversal ---------------------------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, Module]]:
        yield from self._modules.items()

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """This module and every descendant, once each, with dotted names ('' for self)."""
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, m = stack.pop(0)
            if id(m) in seen:
                continue
            seen.add(id(m))
            yield name, m
            kids = [
                (f"{name}.{k}" if name else k, c) for k, c in m._modules.items() if c is not None
            ]
            stack[0:0] = kids

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_parameters(
        self, prefix: str = "", recurse: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        seen: set[int] = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mname, m in mods:
            for pname, p in m._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield (f"{mname}.{pname}" if mname else pname), p

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self) -> Iterator[tuple[str, Tensor]]:
        for mname, m in self.named_modules():
            for bname, b in m._buffers.items():
                yield (f"{mname}.{bname}" if mname else bname), b

    # ---- modes -------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.data[...] = 0
                p.grad._bump_version()  # PyTorch's grad.zero_() counts a version

    # ---- formats -----------------------------------------------------------------------------
    def to(self, fmt: FormatLike) -> Module:
        """Convert every floating parameter and buffer *in place* to ``fmt`` (values rounded
        once; gradients converted too). The Parameter objects stay the same."""
        f = _resolve_format(fmt)
        for t in list(self.parameters()) + [b for _, b in self.named_buffers()]:
            if t.format is None or t.format == f:
                continue
            t.data = to_format(t.data, f)
            t.format = f
            if t.grad is not None:
                t.grad = Tensor._make(to_format(t.grad.data, f), f)
        return self

    def half(self) -> Module:
        return self.to(fp16)

    def bfloat16(self) -> Module:
        return self.to(bf16)

    def float(self) -> Module:
        return self.to(fp32)

    def double(self) -> Module:
        return self.to(fp64)

    # ---- state -------------------------------------------------------------------------------
    def state_dict(self) -> OrderedDict:
        """name -> detached copy of every parameter and buffer (Tensors in their formats)."""
        out: OrderedDict = OrderedDict()
        for name, p in self.named_parameters():
            out[name] = Tensor._make(p.data.copy(), p.format)
        for name, b in self.named_buffers():
            out[name] = Tensor._make(b.data.copy(), b.format)
        return out

    def load_state_dict(self, state_dict: dict, strict: bool = True):
        """Copy values in (rounded to each parameter's own format). With ``strict``, missing
        or unexpected keys raise. Returns ``(missing_keys, unexpected_keys)``."""
        own = dict(self.named_parameters())
        own.update(dict(self.named_buffers()))
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}: "
                f"missing keys {missing}, unexpected keys {unexpected}"
            )
        for k, t in own.items():
            if k not in state_dict:
                continue
            v = state_dict[k]
            arr = v.data if isinstance(v, Tensor) else np.asarray(v)
            if arr.shape != t.shape:
                raise RuntimeError(
                    f"size mismatch for {k}: copying a param with shape {arr.shape}, "
                    f"the shape in current model is {t.shape}"
                )
            t.data[...] = arr if t.format is None else to_format(arr, t.format)
            t._bump_version()  # PyTorch loads with param.copy_(...), which counts
        return _IncompatibleKeys(missing, unexpected)

    # ---- calling -----------------------------------------------------------------------------
    def forward(self, *args, **kwargs):  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        for hook in list(self._forward_pre_hooks.values()):
            r = hook(self, args)
            if r is not None:
                args = r if isinstance(r, tuple) else (r,)
        out = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            r = hook(self, args, out)
            if r is not None:
                out = r
        return out

    def register_forward_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, inputs, output)`` after forward; a returned value replaces output."""
        h = RemovableHandle(self._forward_hooks)
        self._forward_hooks[h.id] = hook
        return h

    def register_forward_pre_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, inputs)`` before forward; a returned value replaces the inputs."""
        h = RemovableHandle(self._forward_pre_hooks)
        self._forward_pre_hooks[h.id] = hook
        return h

    def apply(self, fn: Callable[[Module], None]) -> Module:
        for m in self.modules():
            fn(m)
        return self

    # ---- printing ----------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = []
        for name, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({name}): {sub}")
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n" + "\n".join(lines) + "\n)"


# ---- initialisation --------------------------------------------------------------------------


def _fans(shape: tuple) -> tuple[int, int]:
    if len(shape) < 2:
        raise ValueError("fan in and fan out need at least 2 dimensions")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """PyTorch's recommended gains (relu: sqrt 2, tanh: 5/3, leaky_relu: sqrt(2/(1+a^2)))."""
    if nonlinearity in ("linear", "sigmoid", "identity"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        a = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + a * a))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"unsupported nonlinearity {nonlinearity}")


def _fill(t: Tensor, values: np.ndarray) -> Tensor:
    """Write float64 samples into ``t``, rounded once to its format (no graph)."""
    with no_grad():
        t.data[...] = to_format(values, t.format)
    t._bump_version()  # PyTorch's init functions are in-place ops (uniform_, normal_, ...)
    return t


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    return _fill(t, as_generator(generator).uniform(a, b, t.shape))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    return _fill(t, as_generator(generator).normal(mean, std, t.shape))


def zeros_(t: Tensor) -> Tensor:
    return _fill(t, np.zeros(t.shape))


def ones_(t: Tensor) -> Tensor:
    return _fill(t, np.ones(t.shape))


def kaiming_uniform_(
    t, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator=None
) -> Tensor:
    """U(-bound, bound), ``bound = gain * sqrt(3 / fan)`` (He et al. 2015)."""
    fan = _fans(t.shape)[0 if mode == "fan_in" else 1]
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(t, -bound, bound, generator)


def kaiming_normal_(
    t, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator=None
) -> Tensor:
    """N(0, std^2), ``std = gain / sqrt(fan)``."""
    fan = _fans(t.shape)[0 if mode == "fan_in" else 1]
    return normal_(t, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), generator)


def xavier_uniform_(t, gain: float = 1.0, generator=None) -> Tensor:
    """U(-a, a), ``a = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio 2010)."""
    fan_in, fan_out = _fans(t.shape)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -a, a, generator)


def xavier_normal_(t, gain: float = 1.0, generator=None) -> Tensor:
    fan_in, fan_out = _fans(t.shape)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


#: ``nn.init.kaiming_uniform_(w, generator=0)`` etc., as ``torch.nn.init`` (plus ``generator``:
#: a seed or a numpy Generator; default: the global generator, see ``fpsim.manual_seed``).
init = SimpleNamespace(
    calculate_gain=calculate_gain,
    uniform_=uniform_,
    normal_=normal_,
    zeros_=zeros_,
    ones_=ones_,
    kaiming_uniform_=kaiming_uniform_,
    kaiming_normal_=kaiming_normal_,
    xavier_uniform_=xavier_uniform_,
    xavier_normal_=xavier_normal_,
)


# ---- layers ----------------------------------------------------------------------------------


class Linear(Module):
    """``y = x @ W.T + b`` with ``W: (out_features, in_features)``.

    ``init="torch"`` (default) is PyTorch's: W ~ U(+-1/sqrt(in)) (kaiming_uniform with a=sqrt 5)
    and b ~ U(+-1/sqrt(in)); ``"kaiming"`` (He normal, for ReLU nets) and ``"xavier"`` (Glorot
    uniform) are the alternatives, bias zero. ``seed``: an int or numpy Generator. ``acc``:
    the matmul accumulator for this layer (default: the global setting, fp32)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        format: FormatLike = "fp32",
        seed=None,
        init: str = "torch",
        acc=None,
    ):
        super().__init__()
        self.in_features, self.out_features, self.acc = in_features, out_features, acc
        g = as_generator(seed)
        self.weight = Parameter(np.zeros((out_features, in_features)), format)
        self.bias = Parameter(np.zeros(out_features), format) if bias else None
        bound = 1 / math.sqrt(in_features) if in_features > 0 else 0.0
        if init == "torch":
            kaiming_uniform_(self.weight, a=math.sqrt(5), generator=g)
            if self.bias is not None:
                uniform_(self.bias, -bound, bound, g)
        elif init == "kaiming":
            kaiming_normal_(self.weight, nonlinearity="relu", generator=g)
        elif init == "xavier":
            xavier_uniform_(self.weight, generator=g)
        else:
            raise ValueError(f"init must be 'torch', 'kaiming' or 'xavier', got {init!r}")

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias, acc=self.acc)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, format={self.weight.format.name}"
        )


class Embedding(Module):
    """A table of ``num_embeddings`` vectors; ``emb(indices)`` looks rows up. Init N(0, 1)."""

    def __init__(
        self, num_embeddings: int, embedding_dim: int, format: FormatLike = "fp32", seed=None
    ):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(np.zeros((num_embeddings, embedding_dim)), format)
        normal_(self.weight, 0.0, 1.0, as_generator(seed))

    def forward(self, idx) -> Tensor:
        return F.embedding(idx, self.weight)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, format={self.weight.format.name}"


class LayerNorm(Module):
    """Normalise over the last dims, then scale (weight, ones) and shift (bias, zeros)."""

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        format: FormatLike = "fp32",
    ):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape, self.eps = tuple(normalized_shape), eps
        if elementwise_affine:
            self.weight = Parameter(np.ones(self.normalized_shape), format)
            self.bias = Parameter(np.zeros(self.normalized_shape), format)
        else:
            self.weight = self.bias = None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class Dropout(Module):
    """Zeroes elements with probability ``p`` in training mode; identity in eval mode. The
    masks come from the module's own generator (``seed``: int or Generator), or from the global
    generator (``fpsim.manual_seed``) when ``seed`` is None: reproducible either way."""

    def __init__(self, p: float = 0.5, seed=None) -> None:
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.generator = None if seed is None else as_generator(seed)

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training, self.generator)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class ReLU(Module):
    def forward(self, x):
        return F.relu(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return "" if self.approximate == "none" else f"approximate={self.approximate!r}"


class SiLU(Module):
    def forward(self, x):
        return F.silu(x)


class Tanh(Module):
    def forward(self, x):
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x):
        return F.sigmoid(x)


class Identity(Module):
    def forward(self, x):
        return x


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class Sequential(Module):
    """Modules applied in order; ``seq[i]``, ``len(seq)``, iteration, ``append``."""

    def __init__(self, *modules: Module) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], (OrderedDict, dict)):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        mods = list(self._modules.values())
        if isinstance(i, slice):
            return Sequential(*mods[i])
        return mods[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module: Module) -> Sequential:
        self.add_module(str(len(self._modules)), module)
        return self


class ModuleList(Module):
    """A list of modules, registered as children (no forward)."""

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module: Module) -> ModuleList:
        self.add_module(str(len(self._modules)), module)
        return self

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


_ACTIVATIONS = {"relu": ReLU, "gelu": GELU, "silu": SiLU, "tanh": Tanh, "sigmoid": Sigmoid}


class MLP(Sequential):
    """``MLP([in, h1, ..., out])``: Linear layers with an activation between them (none after
    the last). ``activation``: a name (relu, gelu, silu, tanh, sigmoid) or a Module class.
    ``seed``: one int/Generator drawing every layer's initial weights in order."""

    def __init__(
        self,
        sizes,
        activation: str | type = "relu",
        seed=0,
        format: FormatLike = "fp32",
        bias: bool = True,
        init: str = "torch",
    ):
        if len(sizes) < 2:
            raise ValueError("MLP needs at least [in_features, out_features]")
        act = _ACTIVATIONS[activation] if isinstance(activation, str) else activation
        g = as_generator(seed) if seed is not None else None
        layers: list[Module] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            layers.append(Linear(a, b, bias=bias, format=format, seed=g, init=init))
            if i < len(sizes) - 2:
                layers.append(act())
        super().__init__(*layers)


# ---- losses ----------------------------------------------------------------------------------


class _Loss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction


class MSELoss(_Loss):
    def forward(self, input, target):
        return F.mse_loss(input, target, self.reduction)


class CrossEntropyLoss(_Loss):
    def __init__(self, reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.cross_entropy(input, target, self.reduction, self.ignore_index)


class NLLLoss(CrossEntropyLoss):
    def forward(self, input, target):
        return F.nll_loss(input, target, self.reduction, self.ignore_index)


class BCEWithLogitsLoss(_Loss):
    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.reduction)


class BCELoss(_Loss):
    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, self.reduction)


# `nn.utils.clip_grad_norm_`, PyTorch's path (a module of its own: it imports fpsim.optim).
from . import nn_utils as utils  # noqa: E402,F401
