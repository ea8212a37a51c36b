"""Ops that move or select values without arithmetic: reshape/view, transpose, permute,
clone, indexing, cat, stack, embedding lookups, the cast node, and in-place writes."""

from __future__ import annotations

import numpy as np

from ...formats import Format
from ..dims import wrap_dim, wrap_dims
from ..function import Function
from ..precision import _info, to_format
from ..tensor import Tensor
from ..tensor_ops import _is_basic
from ._common import _unbroadcast


def _check_embedding_indices(idx: np.ndarray, rows: int, kind: str | None = None) -> None:
    """Refuse what PyTorch's embedding refuses: non-integer indices, and indices outside
    ``[0, rows)`` (numpy would count a negative one from the end)."""
    if idx.dtype.kind not in "iu":
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar "
            f"types: Long, Int; but got {kind or idx.dtype} instead (while checking arguments "
            "for embedding)"
        )
    if idx.size and (idx.min() < 0 or idx.max() >= rows):
        raise IndexError("index out of range in self")


class Embedding(Function):
    """``embedding(indices, weight, padding_idx=None)``: rows of ``weight``; an index outside
    ``[0, num_embeddings)`` raises IndexError, as in PyTorch. The weight gradient adds the
    gradients of repeated indices (in the math dtype), rounded once; the row ``padding_idx``
    gets none."""

    name = "embedding"
    forward_precision = "stored"

    @staticmethod
    def forward(ctx, idx, weight, padding_idx=None):
        idx = np.asarray(idx)
        _check_embedding_indices(idx, weight.shape[0])
        ctx.idx, ctx.wshape, ctx.padding_idx = idx, weight.shape, padding_idx
        return weight[idx]

    @staticmethod
    def backward(ctx, g):
        gw = np.zeros(ctx.wshape, g.dtype)
        idx = ctx.idx.reshape(-1)
        if idx.size:  # rows of repeated indices summed: sorted, then one reduceat (np.add.at
            order = np.argsort(idx, kind="stable")  # is an unbuffered loop, 20x slower)
            s = idx[order]
            starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
            gw[s[starts]] = np.add.reduceat(g.reshape(-1, ctx.wshape[-1])[order], starts, axis=0)
        if ctx.padding_idx is not None:
            gw[ctx.padding_idx] = 0
        return None, gw, None


class Reshape(Function):
    name = "reshape"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, x, shape):
        ctx.shape = x.shape
        return np.reshape(x, shape)

    @staticmethod
    def backward(ctx, g):
        return (np.reshape(g, ctx.shape),)


class View(Reshape):
    name = "view"


class Transpose(Function):
    name = "transpose"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, x, dim0, dim1):
        ctx.dims = (wrap_dim(dim0, x.ndim, arg="dim0"), wrap_dim(dim1, x.ndim, arg="dim1"))
        if x.ndim == 0:  # dims 0 and -1 of a 0-d tensor: nothing to swap
            return x
        return np.swapaxes(x, *ctx.dims)

    @staticmethod
    def backward(ctx, g):
        return (np.swapaxes(g, *ctx.dims) if g.ndim else g,)


class Permute(Function):
    name = "permute"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, x, dims):
        if len(dims) != x.ndim:
            raise RuntimeError(
                "permute(): number of dimensions in the tensor input does not match the length "
                f"of the desired ordering of dimensions i.e. input.dim() = {x.ndim} is not "
                f"equal to len(dims) = {len(dims)}"
            )
        try:
            ctx.dims = wrap_dims(tuple(dims), x.ndim)
        except RuntimeError:
            raise RuntimeError("permute(): duplicate dims are not allowed.") from None
        return np.transpose(x, ctx.dims)

    @staticmethod
    def backward(ctx, g):
        return (np.transpose(g, np.argsort(ctx.dims)),)


class Clone(Function):
    name = "clone"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, x):
        return np.array(x, copy=True)

    @staticmethod
    def backward(ctx, g):
        return (g,)


class Index(Function):
    """``x[idx]``: slicing and integer-array indexing. Backward scatters the gradient back,
    adding the contributions of repeated indices (math dtype), rounded once."""

    name = "index"
    forward_precision = "stored"

    @staticmethod
    def forward(ctx, x, idx):
        ctx.idx, ctx.shape = idx, x.shape
        return np.asarray(x[idx])

    @staticmethod
    def backward(ctx, g):
        gx = np.zeros(ctx.shape, g.dtype)
        if _is_basic(ctx.idx):
            gx[ctx.idx] = g
        else:
            np.add.at(gx, ctx.idx, g)
        return gx, None


class Cat(Function):
    """``cat(tensors, dim)``; mixed formats promote (as PyTorch's cat)."""

    name = "cat"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, *xs, dim=0):
        for i, x in enumerate(xs):
            if x.ndim == 0:
                raise RuntimeError(
                    f"zero-dimensional tensor (at position {i}) cannot be concatenated"
                )
        dim = ctx.dim = wrap_dim(dim, xs[0].ndim if xs else 1)
        ctx.splits = np.cumsum([x.shape[dim] for x in xs])[:-1]
        return np.concatenate(xs, axis=dim)

    @staticmethod
    def backward(ctx, g):
        return tuple(np.split(g, ctx.splits, axis=ctx.dim))


class Stack(Function):
    name = "stack"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, *xs, dim=0):
        # the new dim may come after the last one: ndim + 1 places, as unsqueeze
        dim = wrap_dim(dim, (xs[0].ndim if xs else 0) + 1)
        ctx.dim, ctx.n = dim, len(xs)
        return np.stack(xs, axis=dim)

    @staticmethod
    def backward(ctx, g):
        return tuple(np.take(g, i, axis=ctx.dim) for i in range(ctx.n))


class Cast(Function):
    """The cast node ``x.to(fmt)``: forward rounds once to ``fmt``; backward casts the incoming
    gradient (a value of ``fmt``) to the SOURCE tensor's format. Never offered to the dispatch
    policy (the policy itself casts with it)."""

    name = "cast"
    forward_precision = backward_precision = "raw"
    dispatch = False

    @classmethod
    def compute_format(cls, args, kwargs):
        return args[1]

    @staticmethod
    def forward(ctx, x, fmt, rounding="nearest_even", seed=None):
        ctx.src = x.format
        return to_format(x.data, fmt, rounding=rounding, seed=seed)

    @staticmethod
    def backward(ctx, g):
        return (to_format(g, ctx.src), None)


# ---- in-place writes as graph nodes ----------------------------------------------------------


class _Write(Function):
    """An in-place write recorded in the graph: arguments ``(old, src, idx)``, the result is
    ``old`` with ``src`` (a tensor or a number, rounded once to ``old``'s format) written at
    ``idx``. Backward: ``old`` gets the gradient where its values were kept (0 where they were
    overwritten); ``src`` the gradient of the positions written, summed over broadcasting in
    the format and then cast to ``src``'s own format (as PyTorch). Keeps no tensor. Run by
    ``Tensor._write``."""

    forward_precision = backward_precision = "raw"
    dispatch = False  # autocast never casts a write: it is in the written tensor's format

    @classmethod
    def compute_format(cls, args: tuple, kwargs: dict) -> Format | None:
        return args[0].format

    @staticmethod
    def forward(ctx, old, src, idx):
        arr = src.data if isinstance(src, Tensor) else np.asarray(src)
        ctx.idx, ctx.src_shape = idx, arr.shape
        ctx.src_fmt = src.format if isinstance(src, Tensor) else None
        out = np.array(old.data, copy=True)
        out[idx] = to_format(arr, ctx.fmt)
        return out

    @staticmethod
    def backward(ctx, g):
        n_old, n_src = ctx.needs_input_grad[:2]
        g_old = g_src = None
        if n_old:
            g_old = np.array(g, copy=True)
            g_old[ctx.idx] = 0
        if n_src:
            part = np.asarray(g[ctx.idx])
            if part.shape != ctx.src_shape:
                summed = _unbroadcast(part.astype(_info(ctx.fmt).math), ctx.src_shape)
                part = to_format(summed, ctx.fmt)
            g_src = to_format(part, ctx.src_fmt)
        return g_old, g_src, None


class Fill(_Write):
    name = "fill_"


class Zero(_Write):
    name = "zero_"


class Copy(_Write):
    name = "copy_"


class IndexPut(_Write):
    name = "index_put_"
