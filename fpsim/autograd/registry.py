"""The op registry: every op of the engine, by name.

A leaf module: ``Function`` subclasses register themselves here when their module is imported
(``fpsim.autograd`` imports every op module), and ``Tensor``'s methods and operators find their
op here by name (``x + y`` runs ``registry["add"]``). So ``tensor.py`` needs neither
``function.py`` nor the op modules, which both build on it: the import graph has no cycle.

>>> from fpsim.autograd.registry import op
>>> op("add").__name__
'Add'
>>> op("no_such_op")
Traceback (most recent call last):
...
KeyError: "no op named 'no_such_op' is registered (is fpsim.autograd imported?)"
"""

from __future__ import annotations

__all__ = ["registry", "op"]

#: name -> Function subclass, for every op of the engine (autocast attaches policies by name).
registry: dict[str, type] = {}


def op(name: str) -> type:
    """The op registered under ``name``."""
    try:
        return registry[name]
    except KeyError:
        msg = f"no op named {name!r} is registered (is fpsim.autograd imported?)"
        raise KeyError(msg) from None
