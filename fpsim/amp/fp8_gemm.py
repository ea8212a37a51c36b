"""The GEMMs of an FP8 layer (:mod:`fpsim.amp.fp8`) on a model of a tensor core.

With ``accumulation="fp32"`` (every built-in recipe) a GEMM multiplies the dequantized float32
operands -- each FP8 element times its ``scale_inv``, rounded to float32 -- and sums the products
with float32 BLAS. With a hardware accumulation model (a preset name of
:func:`fpsim.arith.list_accumulations` such as ``"h100_fp8"``, or a :class:`fpsim.arith.BlockFMA`)
it computes as TransformerEngine's per-tensor-scaled GEMMs run on the tensor core:

1. the block FMA of the model runs on the *element* values -- the FP8 codes' values, unscaled --
   into the model's accumulator, and the final partial sum is rounded to float32 (the output of
   :func:`fpsim.arith.matmul` with ``accumulation=model, out_fmt="fp32"``);
2. the scales are applied to that float32 result afterwards: ``out = fl32(acc * s)`` with
   ``s = fl32(scale_inv_a * scale_inv_b)`` (alpha = 1), one float32 rounding each; an operand
   without a scale (a plain cast) contributes 1.

Why this order. TransformerEngine passes each operand's ``scale_inv`` to cuBLASLt as
``CUBLASLT_MATMUL_DESC_A_SCALE_POINTER`` / ``B_SCALE_POINTER`` with alpha = 1, and cuBLASLt
documents the result as ``D = alpha * scale_A * scale_B * op(A) op(B) (+ beta * scale_C * C)``:
the scales multiply the accumulated product, not the inputs. The order of the two scalar
multiplications inside cuBLAS is not documented; CUTLASS's FP8 epilogues (the open code of the
same operation: ``Sm90ScaledLinCombPerRowBiasEltAct``, whose scalar node multiplies
``scale_a * scale_b * alpha`` into one scalar before ``homogeneous_multiply_add`` with the
accumulator; ``58_ada_fp8_gemm``: ``Aux = ((alpha * scale_a * scale_b) * accumulator) + ...``)
form the scalar first and multiply the accumulator once, which is what fpsim does. The bias
is then added in float32 as on the fp32 path (a fused epilogue may round ``s * acc + bias``
once; fpsim rounds twice).

Mixed input formats (the backward GEMMs multiply E5M2 gradients with E4M3 weights or inputs,
as TE's HYBRID recipes do): every product of two FP8 values is exact, and the block FMA needs
only each product's value and its exponent ``e_a + e_b``, each operand's subnormals read in
its own format's lowest binade. fpsim's kernel takes one input format, so the operand with the
lower ``emin`` is multiplied by ``2^shift`` (exact) to bring its subnormal boundary onto the
other's, both are read in one common format (:func:`common_format`), and the result is
multiplied by ``2^-shift`` again: every exponent, alignment unit and block sum moves by the same
power of two. That is exact as long as nothing reaches the model's exponent limits (its
``min_exponent``, the accumulator's subnormal and overflow ranges), which
:func:`check_shift_exact` makes sure of (every FP8 preset passes; a custom model that fails is
refused). Khattak and Mikaitis's models take one input format; reading each operand in its own
format is fpsim's extension of their definition.

Block-scaled recipes (MXFP8, NVFP4) are refused with a model: the tensor core applies the block
scales inside the MMA, per K block, and where they enter relative to the alignment and the
accumulator is not described by the models fpsim has (their B200 FP8 model takes unscaled
inputs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arith.accumulation import PRESETS, BlockFMA, get_accumulation
from ..formats import Format, get_format

__all__ = ["Operand", "operand_of", "resolve_model", "check_model", "scaled_matmul",
           "common_format", "check_shift_exact"]  # fmt: skip


def resolve_model(accumulation) -> BlockFMA | None:
    """None for ``"fp32"``; the model of a preset name or a :class:`~fpsim.arith.BlockFMA`."""
    if isinstance(accumulation, str) and accumulation == "fp32":
        return None
    try:
        return get_accumulation(accumulation)
    except ValueError:
        raise ValueError(
            f"accumulation must be 'fp32', a hardware model of fpsim.arith.list_accumulations() "
            f"({', '.join(PRESETS)}) or a fpsim.arith.BlockFMA, got {accumulation!r}"
        ) from None


@dataclass(frozen=True)
class Operand:
    """One quantized GEMM operand: ``values`` (the dequantized float32 values, what the fp32 path
    multiplies), ``elements`` (float32 values of ``fmt``, unscaled) and ``scale_inv`` (the
    float32 factor from elements to values; None for a plain cast)."""

    values: np.ndarray
    elements: np.ndarray
    fmt: Format
    scale_inv: float | None

    @property
    def T(self) -> Operand:  # noqa: N802 - numpy's name
        return Operand(self.values.T, self.elements.T, self.fmt, self.scale_inv)


def operand_of(quantizer, values: np.ndarray) -> Operand:
    """The operand a per-tensor or plain-cast quantizer's last :meth:`quantize` returned
    (``values``), with its elements and ``scale_inv`` (from ``quantizer.last``)."""
    last = quantizer.last
    if isinstance(last, np.ndarray):  # a plain cast: the values are the elements
        return Operand(values, values, quantizer.spec.element, None)
    if not hasattr(last, "scale_inv"):
        raise NotImplementedError("block-scaled operands do not run on an accumulation model")
    return Operand(values, last.elements, last.fmt, float(last.scale_inv))


def check_model(model: BlockFMA, formats) -> None:
    """Refuse element formats the model does not describe, pairs it cannot run exactly, and
    stochastic rounding (an FP8 layer's GEMMs carry no seed: the runs would not repeat)."""
    if model.rounding == "stochastic":
        raise ValueError(
            f"the accumulation model {model.name!r} rounds stochastically; FP8 layers take "
            "models with a deterministic rounding"
        )
    fs = [get_format(f) for f in formats]
    for f in fs:
        model.check_inputs(f)
    for a in fs:
        for b in fs:
            if a != b:
                check_shift_exact(model, a, b)


def common_format(fa: Format, fb: Format) -> tuple[Format, int, int]:
    """A format holding ``fa``'s values times ``2^sa`` and ``fb``'s times ``2^sb``, with its
    ``emin`` equal to both shifted ``emin``\\s (so each operand's subnormals are read in its own
    lowest binade): ``(format, sa, sb)``.

    >>> f, sa, sb = common_format(get_format("fp8_e4m3"), get_format("fp8_e5m2"))
    >>> f.emin, f.man_bits, sa, sb
    (-6, 3, 0, 8)
    """
    e0 = max(fa.emin, fb.emin)
    sa, sb = e0 - fa.emin, e0 - fb.emin
    need = max(fa.emax + sa, fb.emax + sb)
    man = max(fa.man_bits, fb.man_bits)
    e = 2
    while Format(e, man, bias=1 - e0).emax < need:
        e += 1
    return Format(e, man, bias=1 - e0, name=f"{fa.name}|{fb.name}"), sa, sb


def check_shift_exact(model: BlockFMA, fa: Format, fb: Format) -> None:
    """Raise ValueError unless scaling the products of ``fa`` x ``fb`` by ``2^shift``
    (:func:`common_format`) changes nothing but the scale. A non-zero term of a block is at
    least 2^(emin_a + emin_b) (a product) or a value of the accumulator that an earlier block
    rounded from multiples of 2^(E - F) with E at least that: so every non-zero value the model
    sees is at least 2^lo, lo = emin_a + emin_b - F - 2, and no product reaches 2^hi,
    hi = emax_a + emax_b + 2. Exact if ``min_exponent`` does not exceed lo (it then never
    decides a block's exponent), and the accumulator and promotion formats hold every value
    from 2^lo to 2^(hi + 64 + shift) as a normal number (K < 2^64 products)."""
    _, sa, sb = common_format(fa, fb)
    shift = sa + sb
    lo = fa.emin + fb.emin - (model.align_bits or 0) - 2
    hi = fa.emax + fb.emax + 2 + 64 + shift
    fmts = [model.acc] + ([model.promote_to] if model.promote_every else [])
    ok = (model.min_exponent is None or model.min_exponent <= lo) and all(
        f.emin <= lo and f.emax >= hi for f in fmts
    )
    if not ok:
        raise ValueError(
            f"the accumulation model {model.name!r} cannot multiply {fa.name} by {fb.name} "
            f"here: its min_exponent or accumulator range reaches the products' exponents "
            f"(2^{lo} .. 2^{hi - 64 - shift}), where reading both formats in one (shifted by "
            f"2^{shift}) would change the result; use equal input formats or a model with "
            "a wider accumulator"
        )


def _element_matmul(a: Operand, b: Operand, model: BlockFMA) -> np.ndarray:
    """The model's float32 result of ``a.elements @ b.elements`` (each in its own format)."""
    from .. import arith

    if a.fmt == b.fmt:
        res = arith.matmul(a.elements, b.elements, a.fmt, accumulation=model, out_fmt="fp32")
        return np.asarray(res, np.float32)
    model.check_inputs(a.fmt)
    model.check_inputs(b.fmt)
    check_shift_exact(model, a.fmt, b.fmt)
    common, sa, sb = common_format(a.fmt, b.fmt)
    ea = a.elements.astype(np.float64) * 2.0**sa  # exact: powers of two on FP8 values
    eb = b.elements.astype(np.float64) * 2.0**sb
    res = arith.matmul(ea, eb, common, accumulation=model.replace(inputs=None),
                       out_fmt="fp32")  # fmt: skip
    return (np.asarray(res, np.float64) * 2.0 ** -(sa + sb)).astype(np.float32)


def scaled_matmul(a: Operand, b: Operand, model: BlockFMA | None) -> np.ndarray:
    """``a @ b`` of two quantized operands (2-D), float32: with ``model`` None the float32
    product of the dequantized values; else the model's block FMA on the elements, then
    ``fl32(acc * fl32(scale_inv_a * scale_inv_b))`` (see the module docstring)."""
    if model is None:
        return np.matmul(a.values, b.values)
    acc = _element_matmul(a, b, model)
    scales = [s for s in (a.scale_inv, b.scale_inv) if s is not None]
    if not scales:
        return acc
    s = np.float32(scales[0])
    if len(scales) == 2:
        s = np.float32(s * np.float32(scales[1]))
    with np.errstate(over="ignore", invalid="ignore"):
        return acc * s
