"""The random bits of stochastic rounding, computed for a tile of lanes at once in 32-bit
integer lanes: the CPU's vector form of :func:`fpsim.kernels.scalar.random62`, bit for bit.

``random62(seed, index)`` is four calls of a 32-bit mixer (``scalar.hash32``: two 32 x 32-bit
multiplies between xorshifts). Written on int64 values and masked, as the scalar form is, LLVM
keeps 64-bit lanes (or scalar code): AVX2 has no 64-bit vector multiply. Here the mixers are
emitted as 32-bit LLVM operations (:func:`_lanes_intrinsic`), so a loop over lanes multiplies
eight of them per ``vpmulld``; the rest of the generator is arranged so that every lane of a
tile needs only 32-bit work per rounding event:

* The lanes of a matmul row are output elements o, o + 1, ...; event r of lane j has the
  index ``base_j + r`` with ``base_j = (o + j) (2K + 1)`` (``reduce.event_base``). The tile's
  low words ``L_j = base_j mod 2^32`` are computed once (:func:`index_words`); at event r
  (r < 2^32) the low word of the index is ``L_j + r mod 2^32`` and the high word ``H_j`` or
  ``H_j + 1``, the latter exactly when that 32-bit addition wraps (``lo < r``).
* ``hash32(high word ^ key_b)`` therefore takes one of two values per lane, both computed once
  per tile, and is selected with a mask (``G0 ^ (GX & -carry)``); a tile where no lane wraps
  (:func:`tile_wraps`: nearly all of them) skips the selection.
* The xorshift by 16 that ends one mixer and the one that starts the next fold into one xor
  with a precomputed word (:func:`xs16`: linear, and its own inverse): about a quarter of the
  generator's vector instructions fewer, the same bits.
* The 62 bits leave as two float64s that hold them exactly (:func:`random_split`):
  ``rh = hi30 * 2^-30`` and ``rl = lo32 * 2^-62``, ``random62 = (rh + rl) * 2^62`` -- the form
  in which :func:`fpsim.kernels.fastround.round_fast_stochastic_split` compares them with the
  fraction of a quantum without any integer-to-float conversion of 64-bit values (which AVX2
  lacks too); or as their top 24 bits in a float32 (:func:`random_top24`), for the float32
  lanes of :mod:`fpsim.kernels.lanes32_stochastic`.

CPU only (the LLVM intrinsics): the CUDA kernel and the teaching trace call ``random62``.
``tests/test_reduce_kernels.py`` checks these bits against ``scalar.random62`` run as plain
Python, for any seed and indices across 2^32.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, register_jitable

from .scalar import MASK32, hash32

TWO_M30 = 2.0**-30  # rh = hi30 * 2^-30
TWO_M62 = 2.0**-62  # rl = lo32 * 2^-62
TWO_M31 = 2.0**-31  # 2^31 * 2^-62: the offset of lo32 read as a signed int32
TWO_M24 = np.float32(2.0**-24)  # the top 24 bits as a float32 in [0, 1)
HI_MIX = 0xC2B2AE35  # the constant random62_keyed mixes into the high word


@register_jitable
def xs16(v):
    """``v ^ (v >> 16)`` of a 32-bit integer: the first and last step of ``scalar.hash32``.
    Linear over the bits, and its own inverse (applied twice it gives v back), so
    ``xs16(xs16(h) ^ k) = h ^ xs16(k)``: where one mixer's output, xored with a key, enters
    the next mixer, both steps fold into one xor with ``xs16(key)``."""
    return v ^ (v >> 16)


def _lanes_intrinsic(n_args: int, body):
    """An intrinsic of ``n_args`` integers returning a uint32 whose LLVM code is ``body(builder,
    c, *args)`` on i32 values (``c(v)``: an i32 constant): 32-bit operations, which LLVM
    vectorises eight to a 256-bit register (numba's own integer arithmetic is 64-bit)."""

    def typed(args):
        if all(isinstance(t, types.Integer) for t in args):

            def codegen(context, builder, signature, vals):
                i32 = ir.IntType(32)
                vs = []
                for t, v in zip(signature.args, vals, strict=True):
                    if t.bitwidth > 32:
                        v = builder.trunc(v, i32)
                    elif t.bitwidth < 32:
                        v = builder.zext(v, i32)
                    vs.append(v)
                return body(builder, lambda x: ir.Constant(i32, x), *vs)

            return types.uint32(*args), codegen
        return None

    # (numba's intrinsics take no *args: one typer per arity)
    typers = {1: lambda typingctx, x: typed((x,)),
              2: lambda typingctx, x, y: typed((x, y)),
              3: lambda typingctx, x, y, z: typed((x, y, z))}  # fmt: skip
    return intrinsic(typers[n_args])


def _xs(builder, v, c, s):
    return builder.xor(v, builder.lshr(v, c(s)))


def _mul_mix(builder, v, c):
    """The middle of ``scalar.hash32``: multiply, xorshift 15, multiply (no xorshift 16s)."""
    v = builder.mul(v, c(0x7FEB352D))
    return builder.mul(_xs(builder, v, c, 15), c(0x846CA68B))


# M2 = xs16(hash32(hash32(lo ^ key_a) ^ key_b)), the low random word before its last
# xorshift, from ka16 = xs16(key_a) and kb16 = xs16(key_b): two mixers, three xorshifts folded
low_mix = _lanes_intrinsic(
    3, lambda b, c, lo, ka16, kb16: _mul_mix(b, b.xor(_mul_mix(
        b, b.xor(_xs(b, lo, c, 16), ka16), c), kb16), c))
# hash32(xs16(m2) ^ g) from m2 and g16 = xs16(g): the high word's mixer, one xorshift folded
high_mix = _lanes_intrinsic(2, lambda b, c, m2, g16: _xs(b, _mul_mix(b, b.xor(m2, g16), c),
                                                          c, 16))  # fmt: skip
# xs16 as a 32-bit operation
xs16_lanes = _lanes_intrinsic(1, lambda b, c, x: _xs(b, x, c, 16))


# The tile's uint32 words ``U`` (rows: the index's low word L, then G0 and GX -- the high word's
# hash, see the module's docstring, kept through xs16 -- and M2, the event's low random word
# before its last xorshift), one column per lane: rows of one 2D array, not four arrays, so
# that the per-event loops take no array views (numba counts references to a view, with
# atomic operations, each time one is made: in a loop over events that cost as much as the
# lanes).
L_ROW, G0_ROW, GX_ROW, M2_ROW = 0, 1, 2, 3


@register_jitable
def index_words(base0, stride, n, key_b, U):
    """The per-tile words of lanes ``j < n`` whose event 0 has the index ``base0 + j * stride``
    (non-negative), in the uint32 array ``U`` (4, >= n): ``U[0, j]`` its low 32 bits (L),
    ``U[1, j] = xs16(hash32(high ^ key_b) ^ HI_MIX)`` (G0: the high word's mixer input,
    folded) and ``U[2, j] = xs16(hash32(high ^ key_b) ^ hash32((high + 1) ^ key_b))`` (GX:
    what changes when the low word wraps)."""
    for j in range(n):
        idx = base0 + j * stride
        hi = idx >> 32
        g0 = hash32(hi ^ key_b)
        U[L_ROW, j] = np.uint32(idx & MASK32)
        U[G0_ROW, j] = np.uint32(xs16(g0 ^ HI_MIX))
        U[GX_ROW, j] = np.uint32(xs16(g0 ^ hash32((hi + 1) ^ key_b)))


@register_jitable
def tile_wraps(U, n, last_r):
    """Whether the low word ``L + r`` of some lane ``j < n`` of :func:`index_words` wraps past
    2^32 for an event ``r <= last_r``."""
    for j in range(n):
        if np.int64(U[L_ROW, j]) + last_r > MASK32:
            return True
    return False


@register_jitable(inline="always")
def low_words(U, key_a, key_b, r, n):
    """``U[3, j]``: M2, the low 32 random bits of event r of the lanes ``j < n`` before their
    last xorshift (the low 32 bits are ``xs16(M2)``): the first of the two loops of
    :func:`random_split` and :func:`random_top24`, two mixers per lane."""
    r32 = np.uint32(r)
    ka16 = np.uint32(xs16(key_a & MASK32))
    kb16 = np.uint32(xs16(key_b & MASK32))
    for j in range(n):
        U[M2_ROW, j] = low_mix(np.uint32(U[L_ROW, j] + r32), ka16, kb16)


@register_jitable(inline="always")
def high_bits(U, r32, j):
    """The high 30 random bits of lane j at event ``r32`` (a uint32), from ``U[3, j]``
    (:func:`low_words`): one more mixer, its input's xorshift folded into G0 and GX."""
    lo = np.uint32(U[L_ROW, j] + r32)  # the index's low word; it wrapped iff lo < r
    g16 = U[G0_ROW, j] ^ (U[GX_ROW, j] & -np.int64(lo < r32))
    return high_mix(U[M2_ROW, j], g16) & np.uint32(0x3FFFFFFF)


@register_jitable
def random_split(RH, RL, U, key_a, key_b, r, n):
    """``RH[j] + RL[j] = random62(seed, index_j + r) * 2^-62`` for the lanes ``j < n`` of
    :func:`index_words` (``0 <= r < 2^32``; ``key_a, key_b = scalar.random62_keys(seed)``):
    ``RH[j]`` the high 30 bits times 2^-30, ``RL[j]`` the low 32 bits times 2^-62, both exact
    (six multiplies per lane in all)."""
    # Two loops, the low word's two mixers in the first: in one loop a lane's three mixers in
    # a row are a chain of about 45 cycles, longer than the core overlaps from one vector of
    # lanes to the next (one loop: about 14% slower on Zen 1)
    low_words(U, key_a, key_b, r, n)
    r32 = np.uint32(r)
    for j in range(n):
        RH[j] = np.int32(high_bits(U, r32, j)) * TWO_M30
        # lo32 - 2^31 is a signed int32 (the conversion AVX2 has), exact in float64
        RL[j] = np.int32(xs16_lanes(U[M2_ROW, j]) ^ np.uint32(0x80000000)) * TWO_M62 + TWO_M31


@register_jitable(inline="always")
def random_top24(R, U, key_a, key_b, r, n, wraps):
    """``R[j] = (random62(seed, index_j + r) >> 38) * 2^-24``: the top 24 of the 62 random
    bits of the lanes ``j < n`` as float32s in [0, 1) (exact), the form the float32-lane
    stochastic kernel compares first (:mod:`fpsim.kernels.lanes32_stochastic`); the same
    arguments as :func:`random_split`, and ``wraps``: whether the low word of some lane's index
    may wrap past 2^32 by event r (:func:`tile_wraps`); if not, every lane's high word is that
    of its event 0, and the per-lane selection of its hash is left out."""
    low_words(U, key_a, key_b, r, n)
    r32 = np.uint32(r)
    if wraps:
        for j in range(n):
            R[j] = np.float32(np.int32(high_bits(U, r32, j) >> np.uint32(6))) * TWO_M24
    else:
        for j in range(n):
            h = high_mix(U[M2_ROW, j], U[G0_ROW, j])
            R[j] = np.float32(np.int32((h >> np.uint32(6)) & np.uint32(0xFFFFFF))) * TWO_M24
