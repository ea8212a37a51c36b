"""Handles returned by ``register_hook`` and friends: ``handle.remove()`` takes the hook away."""

from __future__ import annotations

import itertools

__all__ = ["RemovableHandle"]

_ids = itertools.count()


class RemovableHandle:
    """Removes one hook from the dict it was registered in (also as a context manager).

    >>> hooks = {}
    >>> h = RemovableHandle(hooks); hooks[h.id] = print
    >>> h.remove(); hooks
    {}
    """

    def __init__(self, hooks_dict: dict) -> None:
        self.hooks_dict = hooks_dict
        self.id = next(_ids)

    def remove(self) -> None:
        self.hooks_dict.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()
