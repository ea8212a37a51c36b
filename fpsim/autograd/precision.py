"""Precision helpers of the engine: which container and math dtype a format uses, the promotion
rules (:func:`promote_formats` of formats, :func:`result_format` of an op's operands), rounding
an array to a format, and the one place where matrix products are computed.

>>> from fpsim.formats import fp16, bf16, fp32
>>> promote_formats([fp16, bf16]).name, promote_formats([fp16, fp32]).name
('fp32', 'fp32')
>>> to_format(np.array([0.1, 65520.0]), fp16).tolist()
[0.0999755859375, inf]
"""

from __future__ import annotations

import functools
import numbers
import threading
from collections.abc import Iterable
from contextlib import contextmanager

import numpy as np

from ..core import _ints_exact_in_float64, round_to
from ..formats import Format, fp32, fp64, get_format, list_formats

__all__ = [
    "promote_formats",
    "result_format",
    "contains",
    "to_format",
    "math_dtype",
    "acc_dtype",
    "matmul_accumulation",
    "get_matmul_accumulation",
    "set_matmul_accumulation",
    "ModelAccumulator",
]

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)


class _Info:
    """Per-format facts the engine looks up on every op (cached)."""

    __slots__ = ("container", "math", "native", "acc")

    def __init__(self, fmt: Format) -> None:
        self.container = fmt.container_dtype
        # The formats numpy computes in natively: a float32 (float64) result *is* an fp32 (fp64)
        # value, and numpy's cast float64 -> float32 is round-to-nearest-even.
        self.native = fmt == fp32 or fmt == fp64
        # The dtype an op's formula is evaluated in: float32 for fp32 (speed; as PyTorch),
        # float64 for every other format (wider, then one rounding to the format).
        self.math = F32 if fmt == fp32 else F64
        # The accumulator of sum/mean/matmul-bias reductions: fp32 for formats stored in float32
        # (PyTorch's accumulator for fp16/bf16), float64 for fp64 and wider custom formats.
        self.acc = F32 if self.container == F32 else F64


@functools.cache
def _info(fmt: Format) -> _Info:
    return _Info(fmt)


def math_dtype(fmt: Format) -> np.dtype:
    """The numpy dtype an op of format ``fmt`` evaluates its formula in (float32 for fp32)."""
    return _info(fmt).math


def acc_dtype(fmt: Format) -> np.dtype:
    """The accumulator dtype of sum/mean for tensors of ``fmt`` (float32 unless fmt needs fp64)."""
    return _info(fmt).acc


def contains(a: Format, b: Format) -> bool:
    """True when every value of ``b`` is a value of ``a`` (so converting b -> a is exact)."""
    return a.contains(b)


def promote_formats(fmts: Iterable[Format]) -> Format:
    """The format an op on inputs of these formats computes in (PyTorch's type promotion).

    * all equal -> that format;
    * one of them holds every value of all the others -> that one (fp16 + fp32 -> fp32);
    * otherwise the narrower of fp32 / fp64 that holds them all (fp16 + bf16 -> fp32, as in
      PyTorch; fp8 formats promote the same way, which PyTorch refuses to do).
    """
    fs = list(dict.fromkeys(fmts))  # unique, in order (Format is hashable)
    if not fs:
        raise ValueError("promote_formats needs at least one format")
    if len(fs) == 1:
        return fs[0]
    for cand in fs:
        if all(contains(cand, f) for f in fs):
            return cand
    for cand in (fp32, fp64):
        if all(contains(cand, f) for f in fs):
            return cand
    raise TypeError(f"no common format for {', '.join(f.name for f in fs)}")


def result_format(
    dimensioned: Iterable[Format | None],
    zero_dim: Iterable[Format | None] = (),
    scalars: Iterable[Format | None] = (),
) -> Format | None:
    """PyTorch's ``result_type`` over an op's operands, given as three priority groups of
    formats (None for an integer or bool operand): tensors with at least one dimension, 0-dim
    tensors, Python numbers.

    The first group that holds a floating operand decides, by :func:`promote_formats` of its
    floating formats; integer and bool operands never decide against a floating one (PyTorch's
    categories bool < integer < floating: a higher category in a lower group still wins over a
    lower category, so ``int64 [2] * fp16 0-dim`` is fp16). None when no operand is floating.

    >>> from fpsim.formats import fp16, fp32
    >>> result_format([fp16], [fp32]).name          # fp16 [2] * fp32 0-dim
    'fp16'
    >>> result_format([], [fp16, fp32]).name        # fp16 0-dim * fp32 0-dim
    'fp32'
    >>> result_format([None], [fp16]).name          # int64 [2] * fp16 0-dim
    'fp16'
    >>> result_format([None], [], [None]) is None   # int64 [2] * 3
    True
    """
    for group in (dimensioned, zero_dim, scalars):
        fs = [f for f in group if f is not None]
        if fs:
            first = fs[0]
            return first if all(f is first for f in fs) else promote_formats(fs)
    return None


def to_format(
    x, fmt: Format, rounding: str = "nearest_even", seed: int | None = None
) -> np.ndarray:
    """Round an array once to ``fmt`` and return it in ``fmt``'s container dtype.

    float64 input is rounded directly (never through float32). fp32/fp64 with the default
    rounding use numpy's own IEEE cast (round to nearest even). Integers are rounded from their
    exact values: int64/uint64 beyond 2^53 and Python ints of any size (an object array) go to
    :func:`fpsim.round_to` as they are, since a cast to float64 first would round them twice.

    >>> to_format(np.array([2**60 + 2**36 + 1]), fp32).tolist() == [2**60 + 2**37]
    True
    """
    info = _info(fmt)
    a = np.asarray(x)
    if _is_int_objects(a) or (a.dtype.kind in "iu" and not _ints_exact_in_float64(a)):
        return _round_integers(a, fmt, rounding, seed).astype(info.container, copy=False)
    if a.dtype.kind in "iub":
        a = a.astype(F64)  # exact: every value is at most 2^53 in magnitude
    if info.native and rounding == "nearest_even":
        return a.astype(info.container, copy=False)
    if a.dtype != F32 and a.dtype != F64:
        a = a.astype(F64)
    if not fmt.fits_in(a.dtype):
        a = a.astype(F64)  # widening: exact
    r = np.asarray(round_to(a, fmt, rounding=rounding, seed=seed))
    return r.astype(info.container, copy=False)


def _is_int_objects(a: np.ndarray) -> bool:
    """An object array of integers only (Python ints beyond 64 bits: numpy keeps them so)."""
    return (
        a.dtype == object
        and a.size > 0
        and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in a.flat)
    )


def _round_integers(a: np.ndarray, fmt: Format, rounding: str, seed: int | None) -> np.ndarray:
    """Integers that float64 cannot all hold, rounded once from their exact values (float64)."""
    if a.dtype != object:
        return np.asarray(round_to(a, fmt, rounding=rounding, seed=seed), dtype=F64)
    # Element by element: exact for every deterministic mode (the engine never rounds objects
    # stochastically: they only come from tensor() and Python-number operands).
    out = [round_to(int(v), fmt, rounding=rounding, seed=seed) for v in a.flat]
    return np.array(out, dtype=F64).reshape(a.shape)


# ---- matrix products -------------------------------------------------------------------------

_acc_state = threading.local()


def _accumulation(acc):
    """A Format, ``"input"``, or a hardware accumulation model (a preset name or a BlockFMA)."""
    if isinstance(acc, str) and acc == "input":
        return acc
    from ..arith.accumulation import PRESETS, BlockFMA  # below the engine; light

    if isinstance(acc, BlockFMA):
        return acc
    if isinstance(acc, str) and acc in PRESETS:
        return PRESETS[acc]
    return get_format(acc)


def get_matmul_accumulation():
    """The accumulation of matmul/mm/linear in this thread: a Format (default fp32, as PyTorch
    and tensor cores), ``"input"`` (each op accumulates in its own format) or a hardware model
    (:class:`fpsim.arith.BlockFMA`)."""
    return getattr(_acc_state, "acc", fp32)


def set_matmul_accumulation(acc) -> None:
    """Set the matmul accumulation for this thread (see :func:`matmul_accumulation`)."""
    _acc_state.acc = _accumulation(acc)


@contextmanager
def matmul_accumulation(acc):
    """Run matmul/mm/linear with accumulation ``acc`` inside the block: an accumulator format,
    ``"input"``, or a hardware accumulation model -- a preset name of
    :func:`fpsim.arith.list_accumulations` or a :class:`fpsim.arith.BlockFMA` -- with which
    every matrix product of a training run, forward and backward, is computed as that tensor
    core computes it. A model applies to the input formats it describes (``model.inputs``;
    all, for a custom model); products in other formats (fp32 layers outside autocast, say)
    accumulate in fp32, as they would on that GPU's CUDA cores.

    >>> from fpsim.autograd import ones
    >>> x = ones(4096, format="fp16")
    >>> (x @ x).item()
    4096.0
    >>> with matmul_accumulation("input"):        # accumulate in fp16: stops at 2048
    ...     (x @ x).item()
    2048.0
    >>> with matmul_accumulation("h100_fp16"):    # blocks of 16 exact products, truncated
    ...     get_matmul_accumulation().block, get_matmul_accumulation().rounding
    (16, 'toward_zero')
    """
    old = get_matmul_accumulation()
    set_matmul_accumulation(acc)
    try:
        yield
    finally:
        _acc_state.acc = old


class ModelAccumulator(Format):
    """The accumulator format of a hardware accumulation model (where its sums end up: the
    accumulator, or the format it promotes to), carrying the model and the matmul's input
    format: it *is* the accumulator's Format (equal to it, same container), so
    every op that treats its accumulation as a format -- adds a bias in it, rounds into it,
    calls ``_matmul_values(x, w, acc, acc)`` for "the accumulator's values" -- works unchanged,
    and :func:`_matmul_values` recognises it and computes the products with the model."""

    __slots__ = ("model", "input_format")

    def __init__(self, model, fmt: Format) -> None:
        a = model.promote_to if model.promote_every else model.acc  # where the sums end up
        super().__init__(a.exp_bits, a.man_bits, a.bias, has_inf=a.has_inf, nan=a.nan,
                         has_subnormals=a.has_subnormals, signed=a.signed, name=a.name)
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "input_format", fmt)

    def __repr__(self) -> str:
        return f"ModelAccumulator({self.model.name}, {self.input_format.name} inputs)"


def resolve_accumulator(acc, fmt: Format) -> Format:
    """The accumulation of a matrix product in ``fmt``: a Format never narrower than ``fmt``, or,
    when the hardware model describes ``fmt``, the model's :class:`ModelAccumulator` (a model
    applied to other formats gives fp32, or ``fmt`` if wider)."""
    acc = get_matmul_accumulation() if acc is None else _accumulation(acc)
    if not isinstance(acc, (Format, str)):  # a hardware model
        if acc.inputs is None or fmt.name in acc.inputs:
            return ModelAccumulator(acc, fmt)
        acc = fp32
    a = fmt if (isinstance(acc, str) and acc == "input") else acc
    return a if contains(a, fmt) else fmt


def _matmul_values(a: np.ndarray, b: np.ndarray, fmt: Format, acc: Format) -> np.ndarray:
    """THE matrix product of the engine (every matmul/mm/linear product, forward and backward,
    goes through here): arrays holding values of ``fmt``, numpy matmul shapes (batches
    broadcast) -> ``a @ b`` accumulated in ``acc``, rounded once to ``fmt``, in ``fmt``'s
    container dtype. ``acc`` may be a :class:`ModelAccumulator` (a hardware model): the inputs
    are then values of its input format even where ``fmt`` is the accumulator itself (as in
    ``_matmul_values(x, w, acc, acc)``, the accumulator's values), and the model computes.

    An fp32/fp64 accumulator with an output of the same format is plain numpy BLAS. Everything
    else goes to ``fpsim.arith.matmul`` (fp32 accumulation there is "float32 BLAS on the stored
    values, then one rounding"; other accumulators round after every addition; a model computes
    as its tensor core).
    """
    info = _info(fmt)
    from .. import arith  # the layer below the engine; imported here to keep import light

    if isinstance(acc, ModelAccumulator):
        out = Format(**fmt._kwargs(), name=fmt.name) if isinstance(fmt, ModelAccumulator) else fmt
        res = arith.matmul(a, b, acc.input_format, accumulation=acc.model, out_fmt=out)
        return np.asarray(res).astype(info.container, copy=False)
    if info.native and acc == fmt:
        return np.matmul(a.astype(info.container, copy=False), b.astype(info.container, copy=False))
    acc_arg = acc.name if acc.name in list_formats() and get_format(acc.name) == acc else acc
    res = arith.matmul(a, b, fmt, acc=acc_arg)
    return np.asarray(res).astype(info.container, copy=False)
