"""The random bits of stochastic rounding, computed for a tile of lanes at once in 32-bit
integer lanes: the CPU's vector form of :func:`fpsim.kernels.scalar.random62`, bit for bit.

``random62(seed, index)`` is four calls of a 32-bit mixer (``scalar.hash32``: two 32 x 32-bit
multiplies). Written on int64 values and masked, as the scalar form is, LLVM keeps 64-bit
lanes (or scalar code): AVX2 has no 64-bit vector multiply. Here the mixer is emitted as
32-bit LLVM operations (:func:`hash32_lanes`), so a loop over lanes multiplies four or eight
of them per ``vpmulld``; the rest of the generator is arranged so that every lane of a tile
needs only 32-bit work per rounding event:

* The lanes of a matmul row are output elements o, o + 1, ...; event r of lane j has the
  index ``base_j + r`` with ``base_j = (o + j) (2K + 1)`` (``reduce.event_base``). The tile's
  low words ``L_j = base_j mod 2^32`` are computed once (:func:`index_words`); at event r
  (r < 2^32) the low word of the index is ``L_j + r mod 2^32`` and the high word ``H_j`` or
  ``H_j + 1``, the latter exactly when that 32-bit addition wraps (``lo < r``).
* ``hash32(high word ^ key_b)`` therefore takes one of two values per lane, both computed once
  per tile (``G0 = hash32(H_j ^ b)`` and ``GX = G0 ^ hash32((H_j + 1) ^ b)``), and is selected
  with a mask: ``G0 ^ (GX & -carry)``.
* The 62 bits leave as two float64s that hold them exactly (:func:`random_split`):
  ``rh = hi30 * 2^-30`` and ``rl = lo32 * 2^-62``, ``random62 = (rh + rl) * 2^62`` -- the form
  in which :func:`fpsim.kernels.fastround.round_fast_stochastic_split` compares them with the
  fraction of a quantum without any integer-to-float conversion of 64-bit values (which AVX2
  lacks too).

CPU only (the LLVM intrinsic): the CUDA kernel and the teaching trace call ``random62``.
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
HI_MIX = 0xC2B2AE35  # the constant random62_keyed mixes into the high word


@intrinsic
def hash32_lanes(typingctx, x):
    """``scalar.hash32`` of the low 32 bits of the integer ``x``, as 32-bit LLVM operations (a
    uint32): the form LLVM vectorises with 32-bit multiplies."""
    if isinstance(x, types.Integer):

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            v = args[0]
            if x.bitwidth > 32:
                v = builder.trunc(v, i32)
            elif x.bitwidth < 32:
                v = builder.zext(v, i32)

            def xorshift(v, s):
                return builder.xor(v, builder.lshr(v, ir.Constant(i32, s)))

            v = xorshift(v, 16)
            v = builder.mul(v, ir.Constant(i32, 0x7FEB352D))
            v = xorshift(v, 15)
            v = builder.mul(v, ir.Constant(i32, 0x846CA68B))
            return xorshift(v, 16)

        return types.uint32(x), codegen
    return None


@register_jitable
def index_words(base0, stride, n, key_b, L, G0, GX):
    """The per-tile words of lanes ``j < n`` whose event 0 has the index ``base0 + j * stride``
    (non-negative): ``L[j]`` its low 32 bits, ``G0[j] = hash32(high ^ key_b)`` and ``GX[j] =
    G0[j] ^ hash32((high + 1) ^ key_b)`` (uint32 arrays)."""
    for j in range(n):
        idx = base0 + j * stride
        hi = idx >> 32
        g0 = hash32(hi ^ key_b)
        L[j] = np.uint32(idx & MASK32)
        G0[j] = np.uint32(g0)
        GX[j] = np.uint32(g0 ^ hash32((hi + 1) ^ key_b))


@register_jitable
def random_split(RH, RL, L, G0, GX, LO, key_a, key_b, r, n):
    """``RH[j] + RL[j] = random62(seed, index_j + r) * 2^-62`` for the lanes ``j < n`` of
    :func:`index_words` (``0 <= r < 2^32``; ``key_a, key_b = scalar.random62_keys(seed)``):
    ``RH[j]`` the high 30 bits times 2^-30, ``RL[j]`` the low 32 bits times 2^-62, both exact.
    ``LO``: uint32 work (>= n), the low 32 bits between the two loops of 32-bit lanes (six
    multiplies per lane in all)."""
    r32 = np.uint32(r)
    ka = np.uint32(key_a)
    kb = np.uint32(key_b)
    # Two loops, the low word's two mixers in the first: in one loop a lane's three mixers in
    # a row are a chain of about 45 cycles, longer than the core overlaps from one vector of
    # lanes to the next (one loop: about 14% slower on Zen 1)
    for j in range(n):
        LO[j] = hash32_lanes(hash32_lanes(np.uint32(L[j] + r32) ^ ka) ^ kb)
    for j in range(n):
        lo = np.uint32(L[j] + r32)  # the index's low word; it wrapped iff lo < r
        g = G0[j] ^ (GX[j] & -np.int64(lo < r32))  # hash32(the index's high word ^ key_b)
        lo_bits = LO[j]
        hi_bits = hash32_lanes(lo_bits ^ g ^ HI_MIX) & np.uint32(0x3FFFFFFF)
        RH[j] = np.int32(hi_bits) * TWO_M30
        # lo32 - 2^31 is a signed int32 (the conversion AVX2 has), exact in float64
        RL[j] = np.int32(lo_bits ^ np.uint32(0x80000000)) * TWO_M62 + TWO_M31
