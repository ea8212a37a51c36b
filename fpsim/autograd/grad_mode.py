"""Gradient recording on/off, per thread: ``no_grad``, ``enable_grad``, ``set_grad_enabled``.

>>> from fpsim.autograd import tensor, no_grad, is_grad_enabled
>>> w = tensor([1.0, 2.0], requires_grad=True)
>>> with no_grad():
...     y = w * 2
>>> y.requires_grad, is_grad_enabled()
(False, True)
"""

from __future__ import annotations

import functools
import threading

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled"]

_state = threading.local()


def is_grad_enabled() -> bool:
    """True when ops record the graph for backward (the default; a new thread starts with it)."""
    return getattr(_state, "enabled", True)


class set_grad_enabled:
    """Turn gradient recording on or off: as a call, a context manager or a decorator.

    Used as a context manager the previous state comes back on exit.
    """

    def __init__(self, mode: bool) -> None:
        self.prev = is_grad_enabled()
        self.mode = bool(mode)
        _state.enabled = self.mode

    def __enter__(self) -> set_grad_enabled:
        return self

    def __exit__(self, *exc) -> None:
        _state.enabled = self.prev

    def __call__(self, fn):
        mode = self.mode
        _state.enabled = self.prev  # the decorator form must not change the state now

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)

        return wrapper


class _GradMode:
    mode = True

    def __enter__(self):
        self.prev = is_grad_enabled()
        _state.enabled = self.mode
        return self

    def __exit__(self, *exc) -> None:
        _state.enabled = self.prev

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradMode):
    """Context manager / decorator: ops inside record nothing (outputs do not require grad)."""

    mode = False


class enable_grad(_GradMode):
    """Context manager / decorator: turn recording back on inside a ``no_grad`` region."""

    mode = True
