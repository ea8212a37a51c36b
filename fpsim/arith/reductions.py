"""sum, dot and matmul with an accumulator format in a documented order, or with a hardware
accumulation model (a tensor core's block FMA); see the package docstring of
:mod:`fpsim.arith` for the definitions and :mod:`fpsim.arith.accumulation` for the models.

The reduction itself is :mod:`fpsim.kernels.reduce` (one scalar implementation, run by the CPU
kernels, the CUDA kernels and :func:`fpsim.arith.trace_sum`); this module checks the
arguments, lays the operands out as (batch, rows, K) @ (batch, K, columns), decides which
fast forms of the steps are exact for the formats at hand, and shapes the result.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from ..core import _mode_code, _seed_value, round_to
from ..formats import Format, FormatLike, fp32, fp64, get_format
from ..kernels import reduce, scalar
from ..kernels.fastround import fast_round_ok
from ..kernels.lanes32 import lanes32_kind
from ..kernels.operands import require_add, require_mul
from .accumulation import BlockFMA, get_accumulation
from .operands import is_binary64, is_device, kernel_array, operand, operands, out_dtype

__all__ = ["sum", "dot", "matmul", "ORDERS"]

ORDERS = ("sequential", "pairwise", "blas")


def _order_code(order: str | None, allowed: tuple) -> int:
    if order is None:
        order = "sequential"
    if order not in allowed:
        raise ValueError(f"unknown order {order!r}; choose one of {', '.join(allowed)}")
    return reduce.PAIRWISE if order == "pairwise" else reduce.SEQUENTIAL


def _products_code(products: str | None) -> int:
    if products is None:
        return 0
    if products not in ("exact", "rounded"):
        raise ValueError(f"products must be 'exact' or 'rounded', got {products!r}")
    return 1 if products == "rounded" else 0


def _model_or_acc(accumulation, acc, order, products) -> tuple[BlockFMA | None, Format]:
    """The hardware model (or None) and the accumulator format; refuses mixing the two."""
    if accumulation is None:
        return None, get_format("fp32" if acc is None else acc)
    model = get_accumulation(accumulation)
    named = (("acc", acc), ("order", order), ("products", products))
    given = [n for n, v in named if v is not None]
    if given:
        raise ValueError(
            f"pass either accumulation= (a hardware model: it fixes the accumulator, the order "
            f"and the products) or {', '.join(given)}=, not both"
        )
    return model, model.acc


def _check_model(model: BlockFMA, f: Format, terms_emax: int) -> None:
    """Refuse formats the model's float64 datapath cannot hold exactly (a clear error rather
    than a silent wrong answer): the alignment's scale 2^(F - E) and the plain sum of a block's
    terms must stay in float64's range."""
    model.check_inputs(f)
    require_add(model.acc, "accumulation in")
    require_add(model.promote_to, "promotion to")
    if model.align_bits is None:
        return
    lowest = min(2 * f.emin if terms_emax > f.emax else f.emin, min(model.acc.emin, -126))
    floor = model.min_exponent if model.min_exponent is not None else lowest
    if max(lowest, floor) < model.align_bits - 1022:
        raise ValueError(
            f"the accumulation model {model.name!r} cannot align {f.name} terms: their exponents "
            f"reach 2^{lowest}, and with {model.align_bits} bits below it the alignment's unit "
            "falls out of float64's normal range"
        )
    if terms_emax + 1 + model.block.bit_length() > 1022 or model.acc.emax > 1021:
        raise ValueError(
            f"the accumulation model {model.name!r} cannot add {f.name} terms: a block of "
            f"{model.block} could overflow float64 (terms up to 2^{terms_emax + 1})"
        )


def _params(f, a_fmt, out_f, mode, subnormals, saturate, seed_v, order_code, rounded,
            unit_b, model, device, has_c=False, record=False) -> tuple:  # fmt: skip
    """The kernel's parameter tuple (:func:`fpsim.kernels.reduce.pack_params`), with the fast
    forms of the steps switched on where they are exact (host CPU only)."""
    stoch = scalar.STOCHASTIC
    fast_out = int(not device and mode != stoch and bool(fast_round_ok(out_f.record)))
    # The terms: products (2p bits, up to 2^(2 emax + 1)), a sum's values, or rounded products.
    term_p = f.precision if unit_b else 2 * f.precision
    term_emax = f.emax if unit_b else 2 * f.emax + 1
    # Every term is a multiple of 2^term_lo (the inputs' smallest quantum, squared for products).
    term_lo = (1 if unit_b else 2) * (f.emin - f.man_bits)
    a_lo = a_fmt.emin - a_fmt.man_bits
    block = None
    fast_add = 0
    if model is not None:
        _check_model(model, f, term_emax)
        bmode = _mode_code(model.rounding)
        order_code = reduce.BLOCK
        rounded = int(model.products == "rounded")
        block = dict(
            prom=model.promote_to.record,
            n=model.block,
            align=-1 if model.align_bits is None else model.align_bits,
            align_mode=int(model.align_rounding == "nearest_even"),
            bmode=bmode,
            bfast=int(not device and bmode != stoch and bool(fast_round_ok(a_fmt.record))),
            normalize=int(model.normalize_products),
            min_exp=-100000 if model.min_exponent is None else model.min_exponent,
            in_subn=int(model.input_subnormals),
            acc_subn=int(model.acc_subnormals),
            promote=model.promote_every or 0,
            in_emin=f.emin,
            c_emin=min(a_fmt.emin, -126),
            prom_fast=int(not device and _promote_plain(a_fmt, model.promote_to)),
        )
    elif not device and mode != stoch and fast_round_ok(a_fmt.record) and term_emax <= 1020:
        # round_fast for every accumulator rounding; the float64 sum alone (no two_sum) where
        # that is innocuous (sequential, nearest even), else two_sum + round to odd.
        plain = (
            order_code == reduce.SEQUENTIAL
            and mode == scalar.NEAREST_EVEN
            and reduce.plain_add_innocuous(
                a_fmt.precision if rounded else term_p,
                a_fmt.precision,
                a_fmt.emax,
                a_fmt.emin - a_fmt.man_bits,
                a_fmt.emax if rounded else term_emax,
                a_lo if rounded else term_lo,
            )
        )
        fast_add = 1 if plain else 2
    # Stochastic rounding, sequential, exact products: round_fast_stochastic where the float64
    # sum is exact, the general step elsewhere (reduce_fast.stochastic_row).
    fast_stoch = int(
        not device
        and model is None
        and mode == stoch
        and order_code == reduce.SEQUENTIAL
        and not rounded
        and bool(fast_round_ok(a_fmt.record))
        and term_emax <= 1020
    )
    # Sequential, exact products into fp32/fp16/bf16 (nearest even; fp16/bf16 also toward zero,
    # up, down and stochastic): float32 lanes where float32 holds the terms exactly (lanes32).
    lanes32 = 0
    acc_name = next((n for n in ("fp32", "fp16", "bf16") if a_fmt.record == get_format(n).record),
                    None)  # fmt: skip
    if (not device and model is None and (fast_out or mode == stoch)
            and order_code == reduce.SEQUENTIAL
            and not rounded and not record and acc_name):
        lanes32 = lanes32_kind(acc_name, term_p, term_lo, term_emax, bool(subnormals),
                               bool(saturate), mode)  # fmt: skip
    return reduce.pack_params(
        a_fmt.record, out_f.record, mode, int(subnormals), int(saturate), seed_v, order_code,
        rounded, int(unit_b), fast_add, fast_out, block, record, has_c, fast_stoch, lanes32,
    )  # fmt: skip


def _promote_plain(acc, prom) -> bool:
    """Whether a block FMA's promotion, ``O + S`` rounded to nearest even in ``prom`` (O a value
    of prom, S of the accumulator), may be the float64 sum rounded by ``round_fast``."""
    return bool(fast_round_ok(prom.record)) and reduce.plain_add_innocuous(
        acc.precision, prom.precision, prom.emax, prom.emin - prom.man_bits, acc.emax,
        acc.emin - acc.man_bits,
    )  # fmt: skip


def _seed_for(seed, mode: int, model: BlockFMA | None) -> int:
    """The seed (validated), drawn when either the call or the model rounds stochastically."""
    if model is not None and model.rounding == "stochastic":
        mode = scalar.STOCHASTIC
    return _seed_value(seed, mode)


def _reduce(A, B, P, C=None) -> np.ndarray:
    """The host reduction kernel on (nb, n, K) @ (nb, K, m) (B None: row sums of A); float64
    result (nb, n, m)."""
    from ..kernels import arith_cpu

    # One specialisation: the kernel computes in float64 anyway (float32 -> float64 is exact);
    # the float32-lane kernels in float32 (which then holds the inputs exactly).
    dtype = np.float32 if reduce.fast_kind(np.asarray(P)) in (4, 5) else np.float64
    A = kernel_array(A.astype(dtype, copy=False))
    if B is not None and P[reduce.I_ORDER] == reduce.BLOCK:
        B = kernel_array(B)  # (read once, into the model's float64 operands, by the kernels)
    elif B is not None:
        B = kernel_array(B.astype(dtype, copy=False))
    m = 1 if B is None else B.shape[2]
    out = np.empty((A.shape[0], A.shape[1], m), np.float64)
    if out.size:
        arith_cpu.matmul(A, B, out, P, C)
    return out


def _start_values(c, model: BlockFMA | None, shape: tuple, round_inputs: bool) -> np.ndarray | None:
    """The starting accumulators C of ``D = A B + C``: values of the model's accumulator
    format, broadcast to the result's shape, as a (nb, n, m) float64 array."""
    if c is None:
        return None
    if model is None:
        raise ValueError("c= (the starting accumulator) goes with an accumulation= model")
    arr, _ = operand(c, "c", model.acc, round_inputs)
    try:
        full = np.broadcast_to(arr.astype(np.float64), shape)
    except ValueError:
        raise ValueError(
            f"c of shape {arr.shape} does not broadcast to the result's {shape}"
        ) from None
    return full


def sum(
    x,
    fmt: FormatLike,
    acc: FormatLike | None = None,
    order: str | None = None,
    axis=None,
    *,
    accumulation: str | BlockFMA | None = None,
    out_fmt: FormatLike | None = None,
    rounding="nearest_even",
    subnormals=True,
    saturate=False,
    seed=None,
    round_inputs=False,
):
    """The sum of the ``fmt`` values ``x`` with every partial sum rounded to ``acc`` (default
    fp32), the result rounded once to ``out_fmt`` (default ``fmt``).

    ``order``: ``"sequential"`` (default; left to right: ``s = acc(x_0)``, then ``s = acc(s +
    x_k)``) or ``"pairwise"`` (recursive halving at the largest power of two below the
    length; see :mod:`fpsim.arith`). ``accumulation``: a hardware model instead (a preset name
    or a :class:`~fpsim.arith.BlockFMA`; the terms are the products ``x_k * 1``). ``axis``:
    None (all elements) or one axis. A 0-d result is a Python float; an empty sum is +0.0
    (``sum([], "fp16") == 0.0``, positive in every mode).

    4096 ones in fp16: an fp16 accumulator stops at 2048, where the spacing of fp16 values is 2
    and ``2048 + 1`` is a tie that rounds back to 2048 (even); fp32 counts to 4096; bf16 (8 bits
    of precision) already stalls at 256. Pairwise summation only ever adds equal partial sums
    here, so it is exact even in fp16:

    >>> ones = [1.0] * 4096
    >>> sum(ones, "fp16", acc="fp16"), sum(ones, "fp16", acc="fp32"), sum(ones, "fp16", acc="bf16")
    (2048.0, 4096.0, 256.0)
    >>> sum(ones, "fp16", acc="fp16", order="pairwise")
    4096.0
    """
    f = get_format(fmt)
    model, a_fmt = _model_or_acc(accumulation, acc, order, None)
    out_f = get_format(out_fmt) if out_fmt is not None else f
    mode = _mode_code(rounding)
    require_add(a_fmt, "accumulation in")
    order_code = _order_code(order, ("sequential", "pairwise"))
    seed_v = _seed_for(seed, mode, model)
    device = is_device(x)
    P = _params(f, a_fmt, out_f, mode, subnormals, saturate, seed_v, order_code, 0, True,
                model, device)  # fmt: skip
    if device:
        from ..kernels import arith_cuda

        return arith_cuda.sum_device(x, f, out_f, axis, P, round_inputs)
    (flat,), shape, container, _ = operands((x,), ("x",), f, round_inputs)
    arr = flat.reshape(shape)
    out_dt = out_dtype((x,), out_f)
    if axis is None:
        X = arr.reshape(1, -1)
        rest: tuple = ()
    else:
        if isinstance(axis, (tuple, list)) or not isinstance(axis, numbers.Integral):
            raise TypeError(f"axis must be None or an int, got {axis!r}")
        if not -arr.ndim <= axis < arr.ndim:
            raise ValueError(f"axis {axis} is out of bounds for an array of dimension {arr.ndim}")
        moved = np.moveaxis(arr, axis, -1)
        rest = moved.shape[:-1]
        # explicit sizes: reshape(-1, 0) is ambiguous for an empty axis
        X = np.ascontiguousarray(moved).reshape(math.prod(rest), moved.shape[-1])
    A = X.reshape(1, X.shape[0], X.shape[1])
    res = _reduce(A, None, P)
    res = res.reshape(rest).astype(out_dt)
    return float(res) if res.ndim == 0 else res


def _blas_reason(f, a_fmt, mode, subnormals, saturate, device, model) -> str | None:
    """Why order="blas" cannot be used here (None when it can)."""
    if model is not None:
        return "order='blas' is numpy's own accumulation, not a hardware model"
    if device:
        return "order='blas' is for host (numpy) arrays"
    if a_fmt not in (fp32, fp64):
        return f"order='blas' needs acc='fp32' or acc='fp64', got {a_fmt.name}"
    if mode != scalar.NEAREST_EVEN or not subnormals or saturate:
        return "order='blas' rounds to nearest even, with subnormals and without saturation"
    if a_fmt.man_bits == 23 and not f.fits_in(np.float32):
        return f"order='blas' with acc='fp32' needs inputs that fit in float32, not {f.name}"
    return None


def _batched(x: np.ndarray, batch: tuple, nb: int) -> np.ndarray:
    """``x`` (..., r, c) broadcast to the batch shape, as a contiguous (nb, r, c) array: a view
    of x where it already has that batch shape (a broadcast view is read-only, and the
    kernels would copy it again)."""
    if x.shape[:-2] != batch:
        x = np.broadcast_to(x, batch + x.shape[-2:])
    return np.ascontiguousarray(x).reshape((nb,) + x.shape[-2:])


def _matmul_layout(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple]:
    """numpy matmul shapes: (..., n, K) @ (..., K, m), 1-D operands promoted then squeezed.
    Returns A (nb, n, K), B (nb, K, m) (contiguous) and the result's shape."""
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: operands must be arrays of at least one dimension (use mul)")
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(
            f"matmul: shapes {a.shape} and {b.shape} do not align: {a2.shape[-1]} (last axis of "
            f"a) != {b2.shape[-2]} ({'first' if b.ndim == 1 else 'second-to-last'} axis of b)"
        )
    try:
        batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        raise ValueError(
            f"matmul: batch shapes {a2.shape[:-2]} and {b2.shape[:-2]} do not broadcast"
        ) from None
    n, m = a2.shape[-2], b2.shape[-1]
    nb = math.prod(batch)  # explicit: reshape(-1, n, K) is ambiguous when n * K == 0
    A = _batched(a2, batch, nb)
    B = _batched(b2, batch, nb)
    shape = batch + ((n,) if a.ndim > 1 else ()) + ((m,) if b.ndim > 1 else ())
    return A, B, shape


def matmul(
    a,
    b,
    fmt: FormatLike,
    acc: FormatLike | None = None,
    *,
    products: str | None = None,
    order: str | None = None,
    accumulation: str | BlockFMA | None = None,
    c=None,
    out_fmt: FormatLike | None = None,
    rounding="nearest_even",
    subnormals=True,
    saturate=False,
    seed=None,
    round_inputs=False,
):
    """``a @ b`` of ``fmt`` values, every partial sum rounded to ``acc`` (default fp32), the
    result rounded once to ``out_fmt`` (default ``fmt``). Shapes follow ``numpy.matmul`` (1-D
    operands, batches).

    ``order``: None (default: ``"blas"`` when allowed -- acc fp32/fp64, default rounding, host
    arrays -- else ``"sequential"``), ``"sequential"``, ``"pairwise"`` or ``"blas"`` (see
    :mod:`fpsim.arith`: fp32 accumulation in the BLAS's order). ``products``: ``"exact"``
    (fused, default) or ``"rounded"`` (each product rounded to ``acc`` first); the BLAS order
    has its own product handling (exact for inputs with 2p <= 24). Sequentially the first
    product is rounded to ``acc`` alone, pairwise the first additions take two unrounded
    products. No terms (K = 0) give +0.0 in every mode; no rows or columns an empty array, as
    ``numpy.matmul``.

    ``accumulation``: a hardware accumulation model in place of ``acc``/``order``/``products``
    -- a preset name (:func:`fpsim.arith.list_accumulations`: ``"v100_fp16"``, ``"h100_fp8"``,
    ...) or a :class:`~fpsim.arith.BlockFMA`: the dot products are computed as that tensor
    core computes them (blocks of products aligned to their largest exponent, bits cut off,
    one rounding per block into the model's accumulator). ``c``: with a model, the starting
    accumulators (``D = A @ B + C`` on the hardware; values of the model's accumulator
    format, broadcast to the result). ``rounding`` is then the final rounding to ``out_fmt``;
    the model has its own.

    Stochastic rounding: output element o (flat index) with K terms numbers its rounding
    events ``r`` and uses ``random62(seed, o * (2K + 1) + r)``: ``r = 2k`` rounds product k,
    ``r = 2c + 1`` is the c-th accumulator rounding (the c-th block of a model), ``r = 2K``
    the final rounding.

    >>> a = [[1.0, 2.0**-11]] * 2
    >>> b = [[1.0, 0.0], [1.0, 1.0]]
    >>> matmul(a, b, "fp16", acc="fp16").tolist()       # 1 + 2^-11 ties to even in fp16
    [[1.0, 0.00048828125], [1.0, 0.00048828125]]
    >>> matmul(a, b, "fp16", acc="fp32", out_fmt="fp32").tolist()
    [[1.00048828125, 0.00048828125], [1.00048828125, 0.00048828125]]

    Sixteen products on a V100 (blocks of four, truncated to fp32 each time) and on an H100
    (one block of sixteen):

    >>> x = [1.0] + [2.0**-24] * 15
    >>> [matmul(x, [1.0] * 16, "fp16", accumulation=m, out_fmt="fp32")
    ...  for m in ("exact_fp32", "v100_fp16", "h100_fp16")]
    [1.0, 1.0, 1.0000008344650269]
    """
    f = get_format(fmt)
    model, a_fmt = _model_or_acc(accumulation, acc, order, products)
    out_f = get_format(out_fmt) if out_fmt is not None else f
    mode = _mode_code(rounding)
    require_add(a_fmt, "accumulation in")
    require_mul(f, "matmul")
    rounded = _products_code(products)
    seed_v = _seed_for(seed, mode, model)
    device = is_device(a) or is_device(b)
    reason = _blas_reason(f, a_fmt, mode, subnormals, saturate, device, model)
    if order is None:
        order = "blas" if reason is None else "sequential"
    order_code = _order_code(order, ORDERS)
    if order == "blas" and reason is not None:
        raise ValueError(reason)
    has_c = c is not None
    if device:
        from ..kernels import arith_cuda

        if has_c:
            raise NotImplementedError("c= is not supported on the GPU yet; pass host arrays")
        P = _params(f, a_fmt, out_f, mode, subnormals, saturate, seed_v, order_code, rounded,
                    False, model, True)  # fmt: skip
        return arith_cuda.matmul_device(a, b, f, out_f, P, round_inputs)
    arr_a, _ = operand(a, "a", f, round_inputs)
    arr_b, _ = operand(b, "b", f, round_inputs)
    if arr_a.dtype != arr_b.dtype:
        arr_a, arr_b = arr_a.astype(np.float64), arr_b.astype(np.float64)
    out_dt = out_dtype((a, b), out_f)
    if order == "blas":
        return _matmul_blas(arr_a, arr_b, a_fmt, out_f, out_dt)
    A, B, shape = _matmul_layout(arr_a, arr_b)
    C = _start_values(c, model, shape, round_inputs)
    if C is not None:
        C = np.ascontiguousarray(C.reshape(A.shape[0], A.shape[1], B.shape[2]))
    P = _params(f, a_fmt, out_f, mode, subnormals, saturate, seed_v, order_code, rounded,
                False, model, False, has_c)  # fmt: skip
    res = _reduce(A, B, P, C)
    res = res.reshape(shape).astype(out_dt)
    return float(res) if res.ndim == 0 else res


def _matmul_blas(a: np.ndarray, b: np.ndarray, a_fmt: Format, out_f: Format, out_dt) -> Any:
    """fp32 (or fp64) accumulate in the BLAS's order, then one rounding to ``out_f``."""
    from ..kernels import arith_cpu

    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: operands must be arrays of at least one dimension (use mul)")
    dt = np.float32 if a_fmt.man_bits == 23 else np.float64
    try:
        c = np.matmul(a.astype(dt, copy=False), b.astype(dt, copy=False))
    except ValueError:
        _matmul_layout(a, b)  # raises the descriptive error
        raise
    if not out_f.fits_in(c.dtype):
        c = c.astype(np.float64)
    if is_binary64(out_f):
        res = c
    elif c.size < arith_cpu.PARALLEL_MIN:
        flat = np.ascontiguousarray(c).reshape(-1)
        res = np.empty_like(flat)
        arith_cpu.round_nearest(flat, res, out_f.record)  # one thread: no pool wake-up
        res = res.reshape(c.shape)
    else:
        res = np.asarray(round_to(c, out_f))
    res = res.astype(out_dt, copy=False)
    return float(res) if res.ndim == 0 else res


def dot(
    a,
    b,
    fmt: FormatLike,
    acc: FormatLike | None = None,
    *,
    products: str | None = None,
    order: str | None = None,
    accumulation: str | BlockFMA | None = None,
    c=None,
    out_fmt: FormatLike | None = None,
    rounding="nearest_even",
    subnormals=True,
    saturate=False,
    seed=None,
    round_inputs=False,
):
    """The dot product of two 1-D vectors of ``fmt`` values, every partial sum rounded to
    ``acc`` (default fp32), the result rounded once to ``out_fmt`` (default ``fmt``); a Python
    float.

    ``order``: ``"sequential"`` (default) or ``"pairwise"``; ``products``: ``"exact"`` (default,
    fused) or ``"rounded"``; or ``accumulation``: a hardware model, with ``c`` its starting
    accumulator. Same rules as :func:`matmul`, whose 1-D case this is.

    >>> x = [1.0] * 3000
    >>> dot(x, x, "fp16", acc="fp16"), dot(x, x, "fp16", acc="fp32")
    (2048.0, 3000.0)
    """
    if order is not None and order not in ("sequential", "pairwise"):
        raise ValueError(f"unknown order {order!r}; choose one of sequential, pairwise")
    if accumulation is None and order is None:
        order = "sequential"
    if not is_device(a) and not is_device(b):
        na, nb = np.ndim(a), np.ndim(b)
        if na != 1 or nb != 1:
            raise ValueError(
                f"dot takes two 1-D vectors (got {na}-D and {nb}-D); use matmul for matrices"
            )
        if np.shape(a) != np.shape(b):
            raise ValueError(f"dot: vectors of different lengths {np.shape(a)} and {np.shape(b)}")
    return matmul(
        a,
        b,
        fmt,
        acc,
        products=products,
        order=order,
        accumulation=accumulation,
        c=c,
        out_fmt=out_fmt,
        rounding=rounding,
        subnormals=subnormals,
        saturate=saturate,
        seed=seed,
        round_inputs=round_inputs,
    )
