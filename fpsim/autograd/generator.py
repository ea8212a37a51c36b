"""The engine's random numbers: one default numpy Generator (seeded with 0, so runs are
reproducible by default) and the rule that turns a ``generator`` argument into a Generator.

>>> g = manual_seed(3)
>>> as_generator(None) is g, as_generator(g) is g
(True, True)
>>> float(as_generator(7).random()) == float(np.random.default_rng(7).random())
True
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

__all__ = ["manual_seed", "default_generator", "as_generator"]

_default_rng = np.random.default_rng(0)


def manual_seed(seed: int) -> np.random.Generator:
    """Re-seed the default generator (used by ``randn``/``rand``/dropout/initialisation when no
    generator is given). fpsim starts seeded with 0, so runs are reproducible by default."""
    global _default_rng
    _default_rng = np.random.default_rng(seed)
    return _default_rng


def default_generator() -> np.random.Generator:
    """The generator used where none is passed (see :func:`manual_seed`)."""
    return _default_rng


def as_generator(generator: Any = None) -> np.random.Generator:
    """``None`` -> the default generator; an int -> a fresh ``default_rng(seed)``; a Generator
    -> itself."""
    if generator is None:
        return _default_rng
    if isinstance(generator, np.random.Generator):
        return generator
    if isinstance(generator, numbers.Integral):
        return np.random.default_rng(int(generator))
    raise TypeError(f"expected a seed or a numpy Generator, got {generator!r}")
