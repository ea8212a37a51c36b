"""Hardware accumulation models: how a tensor core adds up a dot product.

A textbook dot product rounds after every addition (``arith.matmul(..., acc="fp32",
order="sequential")``). A tensor core does not: it takes a *block* of products at once, aligns
them to the largest exponent among them and the accumulator, keeps a fixed number of bits
below that exponent (the rest are cut off), adds the aligned integers exactly and rounds the
block's sum once into the accumulator -- often by truncation, sometimes into an accumulator
narrower than fp32. :class:`BlockFMA` describes such a step with a handful of parameters; the
presets in :data:`PRESETS` set them to what the papers measured on NVIDIA GPUs.

>>> from fpsim import arith
>>> m = arith.get_accumulation("v100_fp16")
>>> m.block, m.align_bits, m.rounding, m.acc.name
(4, 23, 'toward_zero', 'fp32')

Fasi, Higham, Mikaitis and Pranesh's probe for guard bits: ``1 * 1 + c`` with
``c = -(1 - 2^-24)``. Exactly it is 2^-24. The V100 aligns c to the product's exponent and keeps
23 fraction bits, so c's last bit (2^-24) is cut off first and the result is 2^-23; an A100
keeps one more bit and gets 2^-24:

>>> c = -(1 - 2.0**-24)
>>> for name in ("v100_fp16", "a100_fp16", "exact_fp32"):
...     print(name, arith.dot([1.0], [1.0], "fp16", accumulation=name, c=c, out_fmt="fp32"))
v100_fp16 1.1920928955078125e-07
a100_fp16 5.960464477539063e-08
exact_fp32 5.960464477539063e-08

The step, for a block of products p_1..p_n (``n = block``) and the accumulator c:

1. **Exact products.** ``p = a * b`` exactly (``products="rounded"`` rounds each to the
   accumulator first, as a separate multiply would).
2. **The block's exponent.** E = the largest exponent among the non-zero products and c. A
   product's exponent is ``e_a + e_b`` -- its significand, the product of two significands in
   [1, 2), lies in [1, 4) and is *not* normalised (``normalize_products=True`` uses the
   product's own exponent) -- where a subnormal input is read in its format's lowest binade;
   c's exponent is that of c as a binary32 number. E is at least ``min_exponent``.
3. **Alignment.** Every product and c is written in units of 2^(E - F), F = ``align_bits``,
   and cut to an integer: ``align_rounding="truncate"`` drops the bits shifted out (rounding
   each magnitude toward zero: no guard, round or sticky bit), ``"nearest_even"`` rounds them.
4. **The sum.** The aligned integers are added with their signs, exactly: no rounding and no
   normalisation inside the block, however many carries.
5. **Into the accumulator.** The sum is rounded once to ``acc`` in mode ``rounding``. A sum
   beyond acc's range is ±inf in every mode (the exponent overflows; IEEE's "largest finite
   value" for round-toward-zero does not apply); an exact zero is +0 (-0 when rounding down,
   or when every term was -0); any NaN, or +inf with -inf, gives NaN, other infinities ±inf
   (Khattak & Mikaitis's rule). ``acc_subnormals=False`` flushes subnormal accumulator values
   to zero, ``input_subnormals=False`` reads subnormal inputs as zero.
6. **Promotion** (optional): every ``promote_every`` products the accumulator is added to a
   partial sum in ``promote_to`` (round to nearest even, as fp32 registers on CUDA cores) and
   restarts at +0 -- DeepSeek-V3's fix for FP8 GEMMs.

A whole dot product of K terms runs the step on products 0..n-1, n..2n-1, ... (the last block
may be shorter: padding with zeros changes nothing), starting from c = +0, and rounds the
final partial sum once to the output format (``out_fmt`` of :func:`fpsim.arith.matmul`).
``align_bits=None`` means exact alignment (only with ``block=1``): each product is added to c
with one IEEE rounding -- the "exact fp32 accumulate" baseline.

Sources
    [FHMP21] M. Fasi, N. J. Higham, M. Mikaitis, S. Pranesh, "Numerical behavior of NVIDIA
    tensor cores", PeerJ Computer Science 7:e330 (2021); their probe programs:
    github.com/north-numerical-computing/tensor-cores-numerical-behavior. Found on V100, T4
    and A100: products exact, alignment to the largest magnitude, truncation in binary32
    mode (round to nearest in binary16 mode), no guard bits (V100), no normalisation inside
    the sum, carry-out bits, subnormals supported, a non-monotonic result.
    [KM25] F. A. Khattak, M. Mikaitis, "Accurate models of NVIDIA tensor cores", arXiv
    2512.07004 (ACM TACO, doi 10.1145/3830409); the models: github.com/north-numerical-
    computing/MATLAB-tensor-core (``models/*TC.m``, ``models/tools/Generic_BFMA_TC.m``,
    ``GEMM.m``), made bit-accurate against V100, A100, H100 and B200 outputs. Their parameters
    map to these: ``fma`` = block, 23 + ``neab`` = align_bits, ``frmode`` = rounding,
    ``min_exp_limit`` = min_exponent, ``denorm_prd`` = not normalize_products; a negative
    ``neab`` also narrows the accumulator (H100 FP8: 13 fraction bits, "e8m13"). The paper's
    text beyond its abstract was not available to us: every parameter below is the one in
    their model code, and ``tests/test_tensorcore.py`` checks that the presets reproduce the
    GPU outputs their repository ships (model_validation/) bit for bit.
    [DSV3] DeepSeek-AI, "DeepSeek-V3 technical report", arXiv 2412.19437, sections 3.3.2 and
    3.5.2: FP8 GEMM accumulation on H800 GPUs "limited to retaining around 14 bits", a
    maximum relative error of "nearly 2%" for K = 4096; the tensor core aligns 32 products to
    the largest exponent and keeps their top 14 bits; the fix promotes the partial sum to
    FP32 registers every N_C = 128 elements.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..core import ROUNDING_MODES
from ..formats import Format, fp32, get_format

__all__ = ["BlockFMA", "PRESETS", "get_accumulation", "list_accumulations", "E8M13"]

ALIGN_ROUNDINGS = ("truncate", "nearest_even")

#: The H100's FP8 accumulator: binary32's exponent with 13 fraction bits ([KM25]: neab = -10).
E8M13 = Format(8, 13, name="e8m13")

_FHMP = "[FHMP21]"
_KM = "[KM25]"


@dataclass(frozen=True)
class BlockFMA:
    """A tensor core's accumulation step (see the module docstring for the definition).

    ``block``: products per step (>= 1). ``align_bits``: fraction bits kept below the block's
    largest exponent (None: exact, ``block=1`` only). ``align_rounding``: ``"truncate"`` or
    ``"nearest_even"``, for the bits shifted out. ``rounding``: how the block sum enters the
    accumulator (any mode of :func:`fpsim.round_to`). ``acc``: the accumulator's format.
    ``normalize_products``: align products by their own exponent instead of ``e_a + e_b``.
    ``products``: ``"exact"`` or ``"rounded"`` (to ``acc``, nearest even). ``min_exponent``:
    the alignment exponent is at least this (None: no limit). ``input_subnormals`` /
    ``acc_subnormals``: False reads subnormal inputs as zero / flushes subnormal accumulator
    values. ``promote_every``: add the accumulator to a ``promote_to`` partial sum every so
    many products (a multiple of ``block``; None: never). ``inputs``: the input formats the
    model is for (None: any). ``name``, ``source``: what it is and where the parameters come
    from.

    >>> m = BlockFMA(block=2, align_bits=3, rounding="toward_zero", acc="fp32")
    >>> from fpsim import arith
    >>> arith.dot([1.0, 1.0], [1.0, 2.0**-4], "fp16", accumulation=m, out_fmt="fp32")
    1.0
    >>> arith.dot([1.0, 1.0], [1.0, 2.0**-3], "fp16", accumulation=m, out_fmt="fp32")
    1.125

    (2^-4 is one bit below the 3 kept under 2^0, so it is cut off; 2^-3 is kept.)
    """

    block: int = 1
    align_bits: int | None = None
    align_rounding: str = "truncate"
    rounding: str = "toward_zero"
    acc: Format = fp32
    normalize_products: bool = False
    products: str = "exact"
    min_exponent: int | None = None
    input_subnormals: bool = True
    acc_subnormals: bool = True
    promote_every: int | None = None
    promote_to: Format = fp32
    inputs: tuple | None = None
    name: str = "custom"
    source: str = ""

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise the fields once, here
        set_(self, "acc", get_format(self.acc))
        set_(self, "promote_to", get_format(self.promote_to))
        if self.inputs is not None:
            set_(self, "inputs", tuple(get_format(f).name for f in self.inputs))
        if not isinstance(self.block, int) or isinstance(self.block, bool) or self.block < 1:
            raise ValueError(f"block must be a positive integer, got {self.block!r}")
        if self.align_bits is None:
            if self.block != 1:
                raise ValueError(
                    "align_bits=None (exact alignment) needs block=1: an exact sum of several "
                    "products is not a hardware block FMA; give the bits the datapath keeps"
                )
        elif not isinstance(self.align_bits, int) or not 0 <= self.align_bits <= 48:
            raise ValueError(
                f"align_bits must be None or an integer 0..48, got {self.align_bits!r}"
            )
        elif (4 * self.block + 3) << self.align_bits >= 1 << 53:
            raise ValueError(
                f"block={self.block} with align_bits={self.align_bits}: the aligned block sum "
                "could need more than 53 bits (fpsim adds it in float64); use fewer of either"
            )
        if self.align_rounding not in ALIGN_ROUNDINGS:
            raise ValueError(
                f"align_rounding must be one of {', '.join(ALIGN_ROUNDINGS)}, "
                f"got {self.align_rounding!r}"
            )
        if self.rounding not in ROUNDING_MODES:
            raise ValueError(
                f"unknown rounding mode {self.rounding!r}; choose one of "
                f"{', '.join(ROUNDING_MODES)}"
            )
        if self.products not in ("exact", "rounded"):
            raise ValueError(f"products must be 'exact' or 'rounded', got {self.products!r}")
        if self.promote_every is not None and (
            not isinstance(self.promote_every, int)
            or self.promote_every < 1
            or self.promote_every % self.block
        ):
            raise ValueError(
                f"promote_every must be a positive multiple of block={self.block}, "
                f"got {self.promote_every!r}"
            )
        if self.min_exponent is not None and not isinstance(self.min_exponent, int):
            raise ValueError(f"min_exponent must be None or an int, got {self.min_exponent!r}")

    def replace(self, **changes) -> BlockFMA:
        """A copy with some parameters changed (named ``custom`` unless ``name`` is given):
        ``arith.get_accumulation("h100_fp8").replace(promote_every=128)``."""
        changes.setdefault("name", "custom")
        return dataclasses.replace(self, **changes)

    @property
    def neab(self) -> int | None:
        """Khattak & Mikaitis's "extra alignment bits": align_bits - 23."""
        return None if self.align_bits is None else self.align_bits - 23

    def summary(self) -> str:
        """One line: the parameters that matter."""
        if self.align_bits is None:
            how = f"each product added exactly, rounded {self.rounding} to {self.acc.name}"
        else:
            how = (
                f"{self.block} products per block, {self.align_bits} bits below the largest "
                f"exponent ({self.align_rounding}), block sum {self.rounding} to {self.acc.name}"
            )
        if self.promote_every:
            how += f", promoted to {self.promote_to.name} every {self.promote_every}"
        return f"{self.name}: {how}"

    def check_inputs(self, f: Format) -> None:
        """Raise ValueError when the model describes other input formats than ``f``."""
        if self.inputs is not None and f.name not in self.inputs:
            raise ValueError(
                f"the accumulation model {self.name!r} describes {', '.join(self.inputs)} "
                f"inputs, not {f.name}; use .replace(inputs=None) to run it on other inputs"
            )


def _tc(name, block, align, rounding, acc, inputs, min_exp, source, **kw) -> BlockFMA:
    return BlockFMA(block=block, align_bits=align, rounding=rounding, acc=acc, inputs=inputs,
                    min_exponent=min_exp, name=name, source=source, **kw)  # fmt: skip


_FP8 = ("fp8_e4m3", "fp8_e5m2")
_SRC_V100 = (
    f"{_FHMP}: products exact, alignment to the largest exponent with no guard bit, truncation "
    "(binary32 out), round to nearest (binary16 out), carry-out bits, subnormals kept; "
    f"{_KM} V100TC.m: fma=4, neab=0, min_exp_limit -19 for binary16 out (none for binary32)"
)
_SRC_A100 = (
    f"{_FHMP} (A100: one extra alignment bit, truncation); {_KM} A100TC.m: fma=8 (tf32: 4), "
    "neab=1, frmode rz (rne for binary16 out), min_exp_limit -132 (-20 for binary16 out)"
)
_SRC_H100 = (
    f"{_KM} H100TC.m: fma=16 (tf32: 8), neab=2, frmode rz (rne for binary16 out), "
    "min_exp_limit -133 (-21 for binary16 out); not probed by [FHMP21]"
)
_SRC_H100_FP8 = (
    f"{_KM} H100TC.m: fma=32 (two interleaved blocks of 16), neab=-10: 13 fraction bits kept "
    "and a 13-bit accumulator (e8m13), truncation; [DSV3] 3.3.2/3.5.2: 32 products aligned, "
    "about 14 bits kept. The block's treatment of subnormal FP8 inputs follows the model "
    "(kept); the papers do not probe it"
)
_SRC_B200 = (
    f"{_KM} B200TC.m: fma=16 (tf32: 8; FP8: 32), neab=2, frmode rz (rne for binary16 out), "
    "min_exp_limit -133 (-21 for binary16 out)"
)

_SRC_B200_MMA = (
    "fitted by fpsim to the B200 FP8 outputs shipped with [KM25]'s models "
    "(model_validation/B200/E4M3, E5M2: mma.sync.m16n8k32, D = A B + C), which B200TC.m's "
    "parameters (b200_fp8) reproduce in only about 64% of cases: 32 products, rounded to nearest "
    "even; 30 bits below the largest exponent is the fewest that reproduces all 5000 E4M3 "
    "outputs (and 4998 of the 5000 E5M2 ones; more bits reach 4999, one output stays "
    "unexplained). So on this path the block sum is (nearly) correctly rounded; the paper's text "
    "was not available to check which B200 instruction its model describes"
)

#: The named models. ``*_acc16`` are the binary16-output modes (accumulator fp16, rounded to
#: nearest); the others accumulate in binary32 (H100 FP8: e8m13).
PRESETS: dict[str, BlockFMA] = {
    m.name: m
    for m in [
        BlockFMA(block=1, align_bits=None, rounding="nearest_even", acc=fp32, name="exact_fp32",
                 source="IEEE 754 binary32: every product added with one rounding to nearest "
                 "even, in order (a CPU fma loop); the reference the others are compared with"),
        _tc("v100_fp16", 4, 23, "toward_zero", fp32, ("fp16",), None, _SRC_V100),
        _tc("v100_fp16_acc16", 4, 23, "nearest_even", "fp16", ("fp16",), -19, _SRC_V100),
        _tc("a100_fp16", 8, 24, "toward_zero", fp32, ("fp16",), -132, _SRC_A100),
        _tc("a100_fp16_acc16", 8, 24, "nearest_even", "fp16", ("fp16",), -20, _SRC_A100),
        _tc("a100_bf16", 8, 24, "toward_zero", fp32, ("bf16",), -132, _SRC_A100),
        _tc("a100_tf32", 4, 24, "toward_zero", fp32, ("tf32",), -132, _SRC_A100),
        _tc("h100_fp16", 16, 25, "toward_zero", fp32, ("fp16",), -133, _SRC_H100),
        _tc("h100_fp16_acc16", 16, 25, "nearest_even", "fp16", ("fp16",), -21, _SRC_H100),
        _tc("h100_bf16", 16, 25, "toward_zero", fp32, ("bf16",), -133, _SRC_H100),
        _tc("h100_tf32", 8, 25, "toward_zero", fp32, ("tf32",), -133, _SRC_H100),
        _tc("h100_fp8", 32, 13, "toward_zero", E8M13, _FP8, -133, _SRC_H100_FP8),
        _tc("h100_fp8_promote128", 32, 13, "toward_zero", E8M13, _FP8, -133,
            _SRC_H100_FP8 + "; promotion to fp32 every 128 products as [DSV3] 3.3.2 (N_C = 128)",
            promote_every=128),
        _tc("b200_fp16", 16, 25, "toward_zero", fp32, ("fp16",), -133, _SRC_B200),
        _tc("b200_fp16_acc16", 16, 25, "nearest_even", "fp16", ("fp16",), -21, _SRC_B200),
        _tc("b200_bf16", 16, 25, "toward_zero", fp32, ("bf16",), -133, _SRC_B200),
        _tc("b200_tf32", 8, 25, "toward_zero", fp32, ("tf32",), -133, _SRC_B200),
        _tc("b200_fp8", 32, 25, "toward_zero", fp32, _FP8, -133, _SRC_B200),
        _tc("b200_fp8_mma_sync", 32, 30, "nearest_even", fp32, _FP8, -133, _SRC_B200_MMA),
    ]
}  # fmt: skip


def list_accumulations() -> list[str]:
    """The names of the presets.

    >>> list_accumulations()[:3]
    ['exact_fp32', 'v100_fp16', 'v100_fp16_acc16']
    """
    return list(PRESETS)


def get_accumulation(model: str | BlockFMA) -> BlockFMA:
    """A preset by name, or the model itself."""
    if isinstance(model, BlockFMA):
        return model
    if isinstance(model, str) and model in PRESETS:
        return PRESETS[model]
    raise ValueError(
        f"unknown accumulation model {model!r}; choose a BlockFMA or one of "
        f"{', '.join(PRESETS)}"
    )
