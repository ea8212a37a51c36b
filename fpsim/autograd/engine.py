"""The backward engine: one reverse sweep over the graph of ``Function`` nodes.

A leaf of the engine's import graph: it walks nodes (``node._edges``, ``node.inputs``,
``node._backward(grad)``) and numpy arrays, and makes Tensors only through the class its
caller passes (``Tensor``, which calls it from :meth:`~fpsim.Tensor.backward`), so
``tensor.py`` can call it without an import cycle. Run it through :meth:`fpsim.Tensor.backward`.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..formats import Format
from .precision import _info, to_format

__all__ = ["backward"]


def _add(a: np.ndarray, b: np.ndarray, fmt: Format) -> np.ndarray:
    """Sum of two gradient contributions, rounded once to the tensor's format."""
    m = _info(fmt).math
    return to_format(a.astype(m, copy=False) + b.astype(m, copy=False), fmt)


def _apply_hooks(hooks: dict | None, g: np.ndarray, fmt: Format, shape: tuple, cls) -> np.ndarray:
    if not hooks:
        return g
    for fn in list(hooks.values()):
        r = fn(cls._make(g, fmt))
        if r is not None:
            r = r.data if isinstance(r, cls) else np.asarray(r)
            if r.shape != shape:
                raise RuntimeError(f"hook returned a gradient of shape {r.shape}, expected {shape}")
            g = to_format(r, fmt)
    return g


def backward(root, g: np.ndarray, cls: type) -> None:
    """Reverse-mode sweep from ``root`` (a tensor that requires grad) with output gradient
    ``g`` (an array of ``root``'s values, already in its format): accumulate gradients into
    the ``.grad`` of every leaf that requires grad (and of non-leaves that called
    ``retain_grad()``); ``cls`` is the Tensor class (``cls._make(array, fmt)`` wraps arrays).

    Nodes run in reverse topological order; a node runs once, with the sum of all its incoming
    gradients (each addition rounded to the output's format, as PyTorch's autograd adds them).
    Tensor hooks see that summed gradient and may replace it. Graphs are kept after backward
    (as ``retain_graph=True``); higher-order gradients (``create_graph``) are not supported.
    """
    # leaf id -> [leaf, summed gradient, whether that array is ours alone (no copy needed)]
    leaf_grads: dict[int, list] = {}
    if root._ctx is None:
        leaf_grads[id(root)] = [root, g, False]
    else:
        order = _topological(root._ctx)
        grads: dict[int, np.ndarray] = {id(root._ctx): g}
        for node in reversed(order):
            gn = grads.pop(id(node), None)
            if gn is None:
                continue
            gn = _apply_hooks(node.hooks, gn, node.out_fmt, node.out.shape, cls)
            if node.retain is not None:
                t = node.retain()
                if t is not None:
                    t.grad = cls._make(gn.copy(), node.out_fmt)
            for inp, edge, gi in zip(node.inputs, node._edges, node._backward(gn), strict=False):
                if gi is None:
                    continue
                if edge is None:
                    entry = leaf_grads.get(id(inp))
                    if entry is None:
                        # a pass-through or view of the incoming gradient must be copied
                        leaf_grads[id(inp)] = [inp, gi, not np.may_share_memory(gi, gn)]
                    else:
                        entry[1], entry[2] = _add(entry[1], gi, inp.format), True
                else:
                    k = id(edge)
                    grads[k] = gi if k not in grads else _add(grads[k], gi, inp.format)
    for t, gl, owned in leaf_grads.values():
        if t._hooks:
            gl, owned = _apply_hooks(t._hooks, gl, t.format, t.data.shape, cls), False
        if t.grad is None:
            container = _info(t.format).container
            owned = owned and gl.dtype == container and gl.flags.writeable and gl.base is None
            t.grad = cls._make(gl if owned else np.array(gl, dtype=container), t.format)
        else:
            acc = _add(t.grad.data, gl, t.format)
            if t.grad.data.flags.writeable and t.grad.data.shape == acc.shape:
                np.copyto(t.grad.data, acc)  # accumulate in place, as PyTorch does
                t.grad._bump_version()  # ... and, as there, a graph that kept .grad sees it
            else:
                t.grad = cls._make(acc, t.format)


def _topological(start) -> list:
    """Nodes reachable from ``start``, inputs before the nodes that consume them (iterative)."""
    order: list = []
    visited: set[int] = set()
    stack = [(start, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        for edge in node._edges:
            if edge is not None and id(edge) not in visited:
                stack.append((edge, False))
    return order


def retain_ref(t) -> weakref.ref:
    """The weak reference a node keeps to a tensor that called ``retain_grad()``."""
    return weakref.ref(t)
