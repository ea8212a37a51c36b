"""Simulated arithmetic: correctly rounded operations in any format, and sums, dot products and
matrix products with an accumulator precision of your choice.

>>> from fpsim import arith
>>> arith.add(1.0, 2.0**-11, "fp16")          # half an ulp above 1: a tie, rounds to even
1.0
>>> arith.add(1.0, 3 * 2.0**-12, "fp16")      # three quarters of an ulp: rounds up
1.0009765625
>>> ones = [1.0] * 4096
>>> arith.sum(ones, "fp16", acc="fp16"), arith.sum(ones, "fp16", acc="fp32")
(2048.0, 4096.0)

Elementwise operations (:mod:`fpsim.arith.elementwise`, which also proves every result exact)
    :func:`add`, :func:`sub`, :func:`mul`, :func:`div`, :func:`sqrt`, :func:`fma`, :func:`neg`,
    :func:`abs` take values of a format ``fmt`` and return the exact mathematical result rounded
    *once* to ``fmt``, in any rounding mode (the arguments ``rounding``, ``subnormals``,
    ``saturate`` and ``seed`` mean what they mean for :func:`fpsim.round_to`). Operands
    broadcast like numpy; numpy results follow :mod:`fpsim.containers`' rule (the operands'
    dtype when every value of the format fits in it, else the smallest of float16, float32,
    float64 that holds it: float16 in, fp16 out gives float16); Python scalars in give a Python
    float out.

Inputs must be values of the format
    An operation "in fp16" takes fp16 operands; fpsim checks this (a vectorised pass, much
    cheaper than the operation) and raises ``ValueError`` naming the first offending value,
    rather than silently rounding the operand first -- which would be a second rounding the
    caller may not have meant. Pass ``round_inputs=True`` to round every operand to the format
    (nearest even, the usual cast) before the operation. NaN is accepted everywhere; ±inf
    wherever the format has infinities.

Reductions with an accumulator format
=====================================
:func:`sum`, :func:`dot` and :func:`matmul` take inputs in ``fmt``, round *every partial sum* to
the accumulator format ``acc`` and round the result once to ``out_fmt`` (default: ``fmt``).

* ``order="sequential"`` -- ``s = acc(t_0)``, then ``s = acc(s + t_k)`` for k = 1, 2, ... left
  to right: deterministic and bit-reproducible on any machine and thread count.
* ``order="pairwise"`` -- ``P(t_0..t_{n-1}) = acc(P(t_0..t_{h-1}) + P(t_h..t_{n-1}))`` with h the
  largest power of two below n (recursive halving; for n a power of two, a complete binary tree
  of adjacent pairs). Error bound ``|error| <= ceil(log2 n) u sum|t_k|`` to first order (u =
  unit roundoff of acc), against ``(n - 1) u sum|t_k|`` for sequential.
* ``order="blas"`` (:func:`matmul` only) -- numpy's float32 (``acc="fp32"``) or float64
  (``acc="fp64"``) BLAS: "fp32 accumulate, BLAS order". The BLAS rounds every partial sum to
  fp32 (round to nearest even) but chooses its own order (blocking, SIMD lanes, threads), so
  the result can differ from sequential in the last bits and between machines; it equals the
  sequential result whenever every partial sum is exact, and obeys the usual bound
  ``|error| <= gamma_K sum|a||b|`` (``gamma_K = K u / (1 - K u)``, u = 2^-24). Products are
  exact in float32 when 2p <= 24 (fp16, bf16, tf32, fp8 inputs; for bf16/tf32, products
  below 2^-149 or beyond the fp32 range are exact only where the BLAS fuses multiply and add,
  as OpenBLAS and MKL do on AVX2 machines); for fp32 inputs they are whatever the BLAS kernel
  does -- fused (exact) in OpenBLAS's matrix kernels, rounded to fp32 in its matrix-vector
  ones -- i.e. exactly numpy's float32 matmul (the bound then holds with ``gamma_{K+1}``).
  Needs the default rounding mode, subnormals and no saturation.
Products (``dot``, ``matmul``): ``products="exact"`` (default) adds the exact product a*b into
the accumulator with one rounding, as an fma or a tensor core does; ``products="rounded"``
rounds each product to ``acc`` first (a separate multiply and add in the accumulator's
precision).

Where a term first meets the accumulator follows the order. Sequentially the first term is
rounded to the accumulator alone, ``s = acc(t_0)`` -- what an fma chain started from zero
computes (``s = fma(a_0, b_0, 0)``), or loading the first input into an accumulator register
-- and every later term enters its addition unrounded, ``s = acc(s + t_k)``. Pairwise, the
leaves of the tree are the unrounded terms (``acc(t_0 + t_1)``), and a reduction over a single
term rounds that term to ``acc``. The two differ already for two terms: ``1 + 2^-11`` and
``2^-11`` in an fp16 accumulator (spacing 2^-10 at 1) give ``fp16(fp16(1 + 2^-11) + 2^-11) =
fp16(1 + 2^-11) = 1`` (two ties to even) sequentially, but ``fp16(1 + 2^-10) = 1 + 2^-10``
pairwise:

>>> x, ones = [1 + 2.0**-11, 2.0**-11], [1.0, 1.0]
>>> arith.dot(x, ones, "fp32", acc="fp16", out_fmt="fp32")
1.0
>>> arith.dot(x, ones, "fp32", acc="fp16", order="pairwise", out_fmt="fp32")
1.0009765625

An empty reduction (no terms) is +0.0 in every rounding mode, as in numpy and PyTorch (IEEE 754
defines no sign for it); a matmul with no rows or columns is an empty array of numpy's shape.

Defaults: ``acc="fp32"``; ``order="sequential"`` for :func:`sum` and :func:`dot`; for
:func:`matmul` ``order=None`` means "blas" when it is allowed -- acc fp32 or fp64, default
rounding, host arrays: fast, within a small factor of numpy's float32 matmul, which is what an
autodiff engine calling ``matmul(a, b, fmt, acc="fp32")`` for every product needs -- and
"sequential" otherwise (the exact-order numba kernels, vectorised across output columns and
parallel over rows).

Hardware accumulation models
============================
``accumulation=`` (in place of ``acc``, ``order`` and ``products``) computes every dot product
as a tensor core does: blocks of exact products aligned to their largest exponent with a fixed
number of bits, the bits shifted out cut off, one rounding per block into an accumulator that
may be narrower than fp32, optionally promoted to fp32 every N products. A model is a
:class:`BlockFMA`, or the name of a preset measured on a GPU (:data:`PRESETS`,
:func:`list_accumulations`); see :mod:`fpsim.arith.accumulation` for the definition and the
papers. ``c=`` gives the starting accumulators (``D = A @ B + C``).

>>> x = [1.0] + [2.0**-24] * 15
>>> arith.dot(x, [1.0] * 16, "fp16", accumulation="v100_fp16", out_fmt="fp32")
1.0
>>> arith.dot(x, [1.0] * 16, "fp16", accumulation="h100_fp16", out_fmt="fp32")
1.0000008344650269

(fifteen products of 2^-24: the V100 adds them four at a time to the running sum, each block
truncated to fp32 at 1, where the spacing is 2^-23; the H100 adds all sixteen in one block
with 25 bits below 2^0 and keeps 14 * 2^-24 of the 15, truncated to fp32's 2^-23 grid.)

Back ends: numba CPU kernels (:mod:`fpsim.kernels.arith_cpu`) for host data, numba CUDA kernels
(:mod:`fpsim.kernels.arith_cuda`) for arrays with ``__cuda_array_interface__``; both run the
scalar code of :mod:`fpsim.kernels.scalar` and, for reductions, :mod:`fpsim.kernels.reduce`,
which also run as plain Python in the teaching helpers :func:`explain_op` and
:func:`trace_sum`.

Modules
    :mod:`~fpsim.arith.elementwise` (the operations, and why every result is exact),
    :mod:`~fpsim.arith.reductions` (sum, dot, matmul), :mod:`~fpsim.arith.accumulation` (the
    hardware models and presets), :mod:`~fpsim.arith.explain` (explain_op, trace_sum),
    :mod:`~fpsim.arith.operands` (checking and shaping operands).
"""

from __future__ import annotations

from .accumulation import E8M13, PRESETS, BlockFMA, get_accumulation, list_accumulations
from .elementwise import abs, add, div, fma, mul, neg, sqrt, sub
from .explain import SumStep, SumTrace, explain_op, trace_sum
from .reductions import ORDERS, dot, matmul, sum

__all__ = [
    "add",
    "sub",
    "mul",
    "div",
    "sqrt",
    "fma",
    "neg",
    "abs",
    "sum",
    "dot",
    "matmul",
    "explain_op",
    "trace_sum",
    "SumStep",
    "SumTrace",
    "ORDERS",
    "BlockFMA",
    "PRESETS",
    "E8M13",
    "get_accumulation",
    "list_accumulations",
]
