"""Dimension arguments, checked and wrapped exactly as PyTorch does.

Every op, method and function of the engine that takes a ``dim`` (or a list of dims) goes
through these helpers, so an out-of-range dim raises instead of wrapping around (numpy's
``dim % ndim`` would make ``x.sum(5)`` of a 2-D tensor sum dim 1), with PyTorch's messages:

>>> from fpsim.autograd.dims import wrap_dim, wrap_dims
>>> wrap_dim(-1, 2), wrap_dim(0, 0), wrap_dim(-1, 0)
(1, 0, 0)
>>> wrap_dim(5, 2)
Traceback (most recent call last):
...
IndexError: Dimension out of range (expected to be in range of [-2, 1], but got 5)
>>> wrap_dims((1, -1), 2)
Traceback (most recent call last):
...
RuntimeError: dim 1 appears multiple times in the list of dims
"""

from __future__ import annotations

import operator

import numpy as np

__all__ = ["wrap_dim", "wrap_dims", "reduction_axes"]


def _as_int(dim, arg: str) -> int:
    """``dim`` as a Python int: ints and numpy integers pass; bools, floats, strings, None and
    everything else raise TypeError (PyTorch's argument parser refuses them too)."""
    if isinstance(dim, (bool, np.bool_)):
        raise TypeError(f"argument '{arg}' must be int, not bool")
    try:
        return operator.index(dim)
    except TypeError:
        raise TypeError(f"argument '{arg}' must be int, not {type(dim).__name__}") from None


def wrap_dim(dim, ndim: int, *, wrap_scalar: bool = True, arg: str = "dim") -> int:
    """The non-negative dim that ``dim`` names in a tensor of ``ndim`` dimensions.

    A port of PyTorch's ``c10::maybe_wrap_dim``: valid dims are ``[-ndim, ndim - 1]``; a 0-d
    tensor accepts ``[-1, 0]`` as if it had one dimension (unless ``wrap_scalar`` is False, as
    for ``size(dim)``, where any dim of a 0-d tensor is an error). Anything else raises
    IndexError with PyTorch's message. Ops that insert a dimension (``unsqueeze``, ``stack``)
    pass ``ndim + 1``. ``arg`` names the argument in the TypeError for a non-integer dim."""
    d = _as_int(dim, arg)
    if ndim <= 0:
        if not wrap_scalar:
            raise IndexError(f"Dimension specified as {d} but tensor has no dimensions")
        ndim = 1
    if not -ndim <= d <= ndim - 1:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], "
            f"but got {d})"
        )
    return d + ndim if d < 0 else d


def wrap_dims(dims, ndim: int, *, arg: str = "dim") -> tuple[int, ...]:
    """A list or tuple of dims, each wrapped by :func:`wrap_dim`, in the given order; a dim
    named twice (``(1, -1)`` of a 2-D tensor) raises RuntimeError, as PyTorch's
    ``dim_list_to_bitset``."""
    if isinstance(dims, (str, bytes)) or not isinstance(dims, (tuple, list)):
        raise TypeError(f"argument '{arg}' must be a tuple of ints, not {type(dims).__name__}")
    out: list[int] = []
    for dim in dims:
        d = wrap_dim(dim, ndim, arg=arg)
        if d in out:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        out.append(d)
    return tuple(out)


def reduction_axes(dim, ndim: int, *, empty_means_all: bool = True) -> tuple[int, ...]:
    """The numpy axes a reduction over ``dim`` runs on (sorted): ``None`` is every axis; an int
    or a list/tuple of ints is checked by :func:`wrap_dim` / :func:`wrap_dims`. An empty list
    reduces every axis, as ``torch.sum(x, dim=())`` does, unless ``empty_means_all`` is False.
    A 0-d tensor accepts dims -1 and 0 and has no axis to reduce: ``()``."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (tuple, list)):
        axes = wrap_dims(dim, ndim)
        if not axes and empty_means_all:
            return tuple(range(ndim))
    else:
        axes = (wrap_dim(dim, ndim),)
    return () if ndim == 0 else tuple(sorted(axes))
