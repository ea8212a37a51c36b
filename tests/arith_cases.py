"""Inputs and a comparison shared by the tests of fpsim's reductions and block FMAs
(test_reduce_kernels, test_tensorcore, test_block_fast): test helpers, not oracles (those are in
arith_oracle.py)."""

import numpy as np
from numba import njit

import fpsim
from fpsim import arith
from fpsim.kernels import reduce


def fmt(name):
    """A format by name, ``"e8m13"`` being fpsim.arith's E8M13 (the H100 FP8 accumulator)."""
    return arith.E8M13 if name == "e8m13" else fpsim.get_format(name)


def same_bits(a, b) -> bool:
    """Whether two arrays are the same float64 bit patterns throughout, any NaN matching any
    NaN (a whole-array answer; oracle.same_bits answers element by element)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return bool(((a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))).all())


def values(f, n, rng, special=True):
    """n values of f: every exponent field equally likely (subnormals, zeros of both signs, the
    largest values), and (``special``) now and then inf or NaN."""
    f = fpsim.get_format(f)
    top = f.emax + f.bias
    e = rng.integers(0, top + 1, n)
    frac = rng.integers(0, 1 << f.man_bits, n)
    sig = np.where(e == 0, frac, frac + (1 << f.man_bits))
    v = np.ldexp(sig.astype(np.float64), np.maximum(e, 1) - f.bias - f.man_bits)
    v = np.minimum(v, f.max) * np.where(rng.integers(0, 2, n) == 1, -1.0, 1.0)
    if special and n:
        r = rng.random(n)
        v = np.where(r < 0.02, np.nan, v)
        if f.has_inf:
            v = np.where((r >= 0.02) & (r < 0.04), np.inf * np.sign(v + 0.5), v)
    return v


def small_values(f, n, rng):
    """n values of f of moderate size (float64), so that the blocks' bits meet and cancel."""
    x = rng.standard_normal(n) * np.exp2(rng.integers(-6, 6, n))
    return np.asarray(fpsim.round_to(x, f), np.float64)


@njit(cache=False, error_model="numpy")
def general_block_rows(A, B, C, out, P):
    """The general block FMA, one ``reduce.block_row`` per row, as CUDA and the teaching trace
    run it (B's flush and exponents found in the loops): the reference the CPU's block kernels
    are compared with. A (nb, n, K), B (nb, K, m), C starting accumulators, out (nb, n, m)."""
    W = np.empty((reduce.NW, max(out.shape[2], 1)))
    for bi in range(out.shape[0]):
        for i in range(out.shape[1]):
            reduce.block_row(A, B, C, out, bi, i, 0, out.shape[2], W, P)
