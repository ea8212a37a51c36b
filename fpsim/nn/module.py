"""``Module`` and ``Parameter``, and the containers ``Sequential`` and ``ModuleList``: the
bookkeeping of ``torch.nn.Module`` (parameters, buffers, children, train/eval, state_dict,
``.to(fmt)``, forward hooks) on fpsim tensors."""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ..autograd.hooks import RemovableHandle
from ..autograd.precision import to_format
from ..autograd.tensor import Tensor, _resolve_format
from ..formats import FormatLike, bf16, fp16, fp32, fp64

__all__ = ["Parameter", "Module", "Sequential", "ModuleList"]


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
    def state_dict(self, prefix: str = "") -> OrderedDict:
        """name -> detached copy of every parameter and buffer (Tensors in their formats), in
        PyTorch's order: each module's own parameters, then its buffers, then its children's,
        recursively (a tensor shared by two modules appears under both names, as there)."""
        out: OrderedDict = OrderedDict()
        for name, t in list(self._parameters.items()) + list(self._buffers.items()):
            if t is not None:
                out[prefix + name] = Tensor._make(t.data.copy(), t.format)
        for name, m in self._modules.items():
            if m is not None:
                out.update(m.state_dict(prefix=f"{prefix}{name}."))
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
