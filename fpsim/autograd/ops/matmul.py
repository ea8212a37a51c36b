"""Matrix products: ``matmul``, ``mm``, ``bmm``, ``baddbmm``, ``linear`` and ``einsum``.

All operands must have the same format (no promotion, as in PyTorch outside autocast); every
product -- forward and backward -- goes through :func:`~fpsim.autograd.precision._matmul_values`
(the accumulator model: fp32 by default, ``matmul_accumulation`` to choose), and is rounded
once to the format.
"""

from __future__ import annotations

import numpy as np

from ...formats import Format
from ..function import Function, _same_format
from ..precision import (
    _info,
    _matmul_values,
    resolve_accumulator,
    to_format,
)
from ._common import F64, _needs, _sum_to


class MatMul(Function):
    """``a @ b`` with numpy's matmul rules (1-D operands, broadcast batch dimensions).

    Both operands must have the same format (no promotion, as in PyTorch). The product is
    accumulated in the matmul accumulator (fp32 by default, see ``matmul_accumulation``) and
    rounded once to the format; the backward products likewise."""

    name = "matmul"
    forward_precision = backward_precision = "stored"

    @classmethod
    def compute_format(cls, args, kwargs):
        return _same_format(cls.name, args)

    @staticmethod
    def forward(ctx, a, b, acc=None):
        fmt = ctx.fmt
        ctx.acc = resolve_accumulator(acc, fmt)
        if a.ndim == 0 or b.ndim == 0:
            raise RuntimeError("matmul: both arguments need at least 1 dimension")
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        ctx.a2, ctx.b2, ctx.shapes = a2, b2, (a.shape, b.shape)
        out = _matmul_values(a2, b2, fmt, ctx.acc)
        if b.ndim == 1:
            out = out[..., 0]
        if a.ndim == 1:
            out = out[..., 0, :] if b.ndim != 1 else out[..., 0]
        return out

    @staticmethod
    def backward(ctx, g):
        fmt, acc = ctx.fmt, ctx.acc
        (sa, sb), a2, b2 = ctx.shapes, ctx.a2, ctx.b2
        g2 = g
        if len(sb) == 1:
            g2 = g2[..., None]
        if len(sa) == 1:
            g2 = np.expand_dims(g2, -2)
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = _matmul_values(g2, np.swapaxes(b2, -1, -2), fmt, acc)
            ga = _sum_to(ga, a2.shape, fmt).reshape(sa)
        if ctx.needs_input_grad[1]:
            gb = _matmul_values(np.swapaxes(a2, -1, -2), g2, fmt, acc)
            gb = _sum_to(gb, b2.shape, fmt).reshape(sb)
        return ga, gb


class MM(MatMul):
    """``mm(a, b)``: 2-D @ 2-D only."""

    name = "mm"

    @staticmethod
    def forward(ctx, a, b, acc=None):
        if a.ndim != 2 or b.ndim != 2:
            raise RuntimeError(f"mm: expected 2-D matrices, got {a.ndim}-D and {b.ndim}-D")
        return MatMul.forward(ctx, a, b, acc)


class BMM(MatMul):
    """``bmm(a, b)``: batches of matrices, ``(b, n, m) @ (b, m, p)``, no broadcasting."""

    name = "bmm"

    @staticmethod
    def forward(ctx, a, b, acc=None):
        if a.ndim != 3 or b.ndim != 3:
            raise RuntimeError(f"batch1 must be a 3D tensor (got {a.ndim}-D and {b.ndim}-D)")
        if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
            raise RuntimeError(
                f"Expected size for first two dimensions of batch2 tensor to be: "
                f"[{a.shape[0]}, {a.shape[2]}] but got: [{b.shape[0]}, {b.shape[1]}]."
            )
        return MatMul.forward(ctx, a, b, acc)


class BAddBMM(Function):
    """``baddbmm(input, b1, b2, beta=1, alpha=1) = beta * input + alpha * (b1 @ b2)``.

    The products are accumulated in the accumulator format (fp32 by default), ``beta * input``
    is added there and the sum is rounded once to the format (as Linear's bias). ``beta=0``
    ignores ``input`` (its NaN and inf are not propagated, as in PyTorch). Backward:
    ``beta * g`` for input (summed over its broadcast dims), ``alpha * (g @ b2^T)`` and
    ``alpha * (b1^T @ g)`` through the same matmul, each rounded to the format (and once more
    after the multiplication by an ``alpha`` other than 1)."""

    name = "baddbmm"
    forward_precision = backward_precision = "stored"

    @classmethod
    def compute_format(cls, args, kwargs):
        return _same_format(cls.name, args)

    @staticmethod
    def forward(ctx, inp, b1, b2, beta=1.0, alpha=1.0, acc=None):
        fmt = ctx.fmt
        acc = ctx.acc = resolve_accumulator(acc, fmt)
        if b1.ndim != 3 or b2.ndim != 3 or b1.shape[0] != b2.shape[0] or b1.shape[2] != b2.shape[1]:
            raise RuntimeError(
                f"baddbmm: expected batches (b, n, m) and (b, m, p), got {b1.shape} and {b2.shape}"
            )
        shape = (b1.shape[0], b1.shape[1], b2.shape[2])
        if np.broadcast_shapes(inp.shape, shape) != shape:
            raise RuntimeError(f"baddbmm: input of shape {inp.shape} does not broadcast to {shape}")
        ctx.b1, ctx.b2, ctx.ishape, ctx.beta, ctx.alpha = b1, b2, inp.shape, beta, alpha
        m = _matmul_values(b1, b2, acc, acc)  # the accumulator's values
        a_info = _info(acc)
        if a_info.native:
            work = m.dtype
            s = m * work.type(alpha) if alpha != 1 else m
            if beta != 0:
                s = s + inp.astype(work) * work.type(beta)
        else:
            s = to_format(m.astype(F64) * alpha, acc) if alpha != 1 else m
            if beta != 0:
                s = to_format(s.astype(F64) + to_format(inp.astype(F64) * beta, acc), acc)
        return to_format(s, fmt)

    @staticmethod
    def backward(ctx, g):
        fmt, acc = ctx.fmt, ctx.acc
        ni, n1, n2 = _needs(ctx, 3)
        math = _info(fmt).math

        def scaled(v, k):
            return v if k == 1 else to_format(v.astype(math) * k, fmt)

        gi = g1 = g2 = None
        if ni:
            gi = _sum_to(scaled(g, ctx.beta), ctx.ishape, fmt)
        if n1:
            g1 = scaled(_matmul_values(g, np.swapaxes(ctx.b2, -1, -2), fmt, acc), ctx.alpha)
        if n2:
            g2 = scaled(_matmul_values(np.swapaxes(ctx.b1, -1, -2), g, fmt, acc), ctx.alpha)
        return gi, g1, g2


class Linear(Function):
    """``linear(x, weight, bias) = x @ weight.T + bias`` (weight: ``(out, in)``).

    The product is accumulated in the accumulator format (fp32 by default), the bias is added
    to the accumulator, and the sum is rounded once to the format (as cuBLAS's fp32 epilogue).
    Backward: ``grad_x = g @ W``, ``grad_W = g.T @ x``, ``grad_b = ones @ g``, each through the
    same matmul (same accumulator), rounded once to the format."""

    name = "linear"
    forward_precision = backward_precision = "stored"

    @classmethod
    def compute_format(cls, args, kwargs):
        return _same_format(cls.name, args)

    @staticmethod
    def forward(ctx, x, w, b=None, acc=None):
        fmt = ctx.fmt
        acc = ctx.acc = resolve_accumulator(acc, fmt)
        x2 = x.reshape(-1, x.shape[-1])
        ctx.x2, ctx.w, ctx.xshape = x2, w, x.shape
        if b is None:
            out = _matmul_values(x2, w.T, fmt, acc)
        else:
            m = _matmul_values(x2, w.T, acc, acc)  # the accumulator's values
            if _info(acc).native:
                s = m + b.astype(m.dtype, copy=False)
            else:
                s = to_format(m.astype(F64) + b, acc)
            out = to_format(s, fmt)
        return out.reshape(x.shape[:-1] + (w.shape[0],))

    @staticmethod
    def backward(ctx, g):
        fmt, acc = ctx.fmt, ctx.acc
        g2 = g.reshape(-1, g.shape[-1])
        nx, nw, nb = (ctx.needs_input_grad + (False,))[:3]
        gx = _matmul_values(g2, ctx.w, fmt, acc).reshape(ctx.xshape) if nx else None
        gw = _matmul_values(g2.T, ctx.x2, fmt, acc) if nw else None
        gb = None
        if nb:
            ones = np.ones((1, g2.shape[0]), g2.dtype)
            gb = _matmul_values(ones, g2, fmt, acc)[0]
        return gx, gw, gb


# ---- einsum ----------------------------------------------------------------------------------


def parse_einsum(equation: str, ndims: tuple[int, ...]) -> tuple[list[str], str]:
    """``"bhqd,bhkd->bhqk"`` -> (operand labels, output labels), with ``...`` expanded to
    upper-case letters (one per broadcast dimension) and the implicit output (no ``->``: the
    labels used once, sorted) made explicit. Checks what fpsim's einsum supports."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ndims):
        raise ValueError(
            f"einsum(): {len(terms)} operand(s) in the equation but {len(ndims)} were given"
        )
    used = set(eq) - set(".,->")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in used]
    n_ell = 0
    out_terms = []
    for term, nd in zip(terms, ndims, strict=True):
        if "..." in term:
            k = nd - (len(term) - 3)
            if k < 0:
                raise ValueError(f"einsum(): the term {term!r} has more labels than dimensions")
            n_ell = max(n_ell, k)
            term = term.replace("...", "".join(spare[n_ell - k : n_ell]))
        if len(term) != nd:
            raise ValueError(
                f"einsum(): the term {term!r} names {len(term)} dimension(s), the operand has {nd}"
            )
        if not all(c.isalpha() for c in term):
            raise ValueError(f"einsum(): invalid subscript in {term!r}")
        if len(set(term)) != len(term):
            raise NotImplementedError(
                f"einsum(): a label repeated within one operand ({term!r}: a diagonal) is not "
                "supported by fpsim"
            )
        out_terms.append(term)
    ell = "".join(spare[:n_ell])
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = {c: sum(t.count(c) for t in out_terms) for c in used}
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    if len(set(out)) != len(out) or any(c not in "".join(out_terms) for c in out):
        raise ValueError(f"einsum(): invalid output subscripts {out!r}")
    return out_terms, out


def _sum_labels(x: np.ndarray, labels: str, keep: str, fmt: Format) -> tuple[np.ndarray, str]:
    """Sum the dims of ``x`` whose labels are not in ``keep`` (accumulated in the math dtype,
    rounded once to ``fmt``)."""
    drop = tuple(i for i, c in enumerate(labels) if c not in keep)
    if not drop:
        return x, labels
    s = to_format(np.sum(x.astype(_info(fmt).math), axis=drop), fmt)
    return s, "".join(c for c in labels if c in keep)


def contract(
    a: np.ndarray, la: str, b: np.ndarray | None, lb: str, out: str, fmt: Format, acc: Format
) -> np.ndarray:
    """``einsum(la,lb->out)`` of values of ``fmt`` (``b`` None: one operand), as PyTorch's
    einsum computes it: labels of one operand only, absent from the output, are summed first;
    the rest becomes one batched matmul (batch labels, then the left operand's, the contracted
    ones, the right operand's) through the accumulator model; the result is rounded once."""
    if b is None:
        a, la = _sum_labels(a, la, out, fmt)
        return np.transpose(a, [la.index(c) for c in out])
    a, la = _sum_labels(a, la, out + lb, fmt)
    b, lb = _sum_labels(b, lb, out + la, fmt)
    for c in set(la) & set(lb):
        if a.shape[la.index(c)] != b.shape[lb.index(c)]:
            raise RuntimeError(
                f"einsum(): operands do not broadcast with remapped shapes: label {c!r} has "
                f"sizes {a.shape[la.index(c)]} and {b.shape[lb.index(c)]}"
            )
    batch = [c for c in out if c in la and c in lb]
    left = [c for c in out if c in la and c not in lb]
    right = [c for c in out if c in lb and c not in la]
    inner = [c for c in la if c in lb and c not in out]

    def size(x, lx, cs):
        return [x.shape[lx.index(c)] for c in cs]

    nb, nl, nr, ni = (size(a, la, batch), size(a, la, left), size(b, lb, right),
                      size(a, la, inner))  # fmt: skip
    a3 = np.transpose(a, [la.index(c) for c in batch + left + inner])
    b3 = np.transpose(b, [lb.index(c) for c in batch + inner + right])
    pb, pl, pr, pi = (int(np.prod(s)) for s in (nb, nl, nr, ni))
    m = _matmul_values(a3.reshape(pb, pl, pi), b3.reshape(pb, pi, pr), fmt, acc)
    m = m.reshape(nb + nl + nr)
    have = batch + left + right
    return np.transpose(m, [have.index(c) for c in out])


class Einsum(Function):
    """One step of ``einsum``: one operand, or a pair (``F.einsum`` folds more operands left
    to right, as PyTorch does without opt_einsum). ``equation`` is explicit (``"ij,jk->ik"``,
    labels already expanded by :func:`parse_einsum`). Backward: the gradient of each operand is
    the contraction of the output gradient with the other operand (same accumulator model);
    labels an operand summed away get the gradient broadcast back."""

    name = "einsum"
    forward_precision = backward_precision = "stored"

    @classmethod
    def compute_format(cls, args, kwargs):
        return _same_format(cls.name, args)

    @staticmethod
    def forward(ctx, a, b=None, *, equation, acc=None):
        fmt = ctx.fmt
        ctx.acc = resolve_accumulator(acc, fmt)
        lhs, out = equation.split("->")
        terms = lhs.split(",")
        ctx.terms, ctx.lout, ctx.a, ctx.b = terms, out, a, b
        if b is None:
            return contract(a, terms[0], None, "", out, fmt, ctx.acc)
        return contract(a, terms[0], b, terms[1], out, fmt, ctx.acc)

    @staticmethod
    def backward(ctx, g):
        fmt, acc, terms, lout = ctx.fmt, ctx.acc, ctx.terms, ctx.lout
        grads = []
        for i, need in enumerate(_needs(ctx, len(terms))):
            if not need:
                grads.append(None)
                continue
            x = ctx.a if i == 0 else ctx.b
            lx = terms[i]
            if len(terms) == 1:
                kept = "".join(c for c in lx if c in lout)
                gk = contract(g, lout, None, "", kept, fmt, acc)
            else:
                other, lo = (ctx.b, terms[1]) if i == 0 else (ctx.a, terms[0])
                kept = "".join(c for c in lx if c in lout or c in lo)
                gk = contract(g, lout, other, lo, kept, fmt, acc)
            # labels of x summed away in the forward: the gradient is the same along them
            gk = np.expand_dims(gk, tuple(j for j, c in enumerate(lx) if c not in kept))
            grads.append(np.array(np.broadcast_to(gk, x.shape)))
        return tuple(grads)
