"""Inputs and a comparison shared by the tests of fpsim's reductions and block FMAs
(test_reduce_kernels, test_lanes32_stochastic, test_tensorcore, test_block_fast): test helpers,
not oracles (those are in arith_oracle.py, which :func:`check_stochastic_reduction` uses)."""

import math
import sys
from fractions import Fraction
from pathlib import Path
from unittest import mock

import numpy as np
from numba import njit

import fpsim
from fpsim import arith
from fpsim.arith.reductions import _params
from fpsim.kernels import arith_cpu, reduce, scalar

sys.path.insert(0, str(Path(__file__).parent))
from arith_oracle import _special, reduce_reference  # noqa: E402


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


def scaled_values(f, rng, shape, scale_exp):
    """Values of f: random magnitudes across its range (and scaled by 2^scale_exp), with
    zeros of both signs, subnormals and max sprinkled in."""
    F = fmt(f)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-6, 6, shape) + scale_exp)
    x = np.asarray(fpsim.round_to(np.clip(x, -F.max, F.max), F, saturate=True), np.float64)
    flat = x.reshape(-1)
    if flat.size:
        k = rng.integers(0, flat.size, max(1, flat.size // 8))
        flat[k] = rng.choice([0.0, -0.0, F.smallest_subnormal, -F.min_normal, F.max, -F.max],
                             k.size)  # fmt: skip
    return x


def kernel_ran(call):
    """(the result of ``call()``, the row kernels arith_cpu ran for it)."""
    with mock.patch.object(arith_cpu, "_run_rows", wraps=arith_cpu._run_rows) as spy:
        res = call()
    return res, [c.args[0].__name__ for c in spy.call_args_list]


def check_stochastic_reduction(acc, f, n, K, m, scale, subn, sat, container, out, seed, unit,
                               data_seed, kind, kernel):  # fmt: skip
    """One sequential stochastic reduction through fpsim.arith (a matmul, or a sum: ``unit``)
    of inputs of f (an inf or a NaN in a row now and then), checked to run the row kernel
    ``kernel`` (``reduce.fast_kind`` ``kind``), against the general kernel bit for bit and,
    where small and finite, against exact rational sums with the documented random bits
    ``random62(seed, o (2K + 1) + r)``. ``out``: None (f), ``"acc"`` or a format."""
    A_fmt = fmt(acc)
    out_f = {None: f, "acc": A_fmt}.get(out, out)
    rng = np.random.default_rng(data_seed)
    m = 1 if unit else m
    a = scaled_values(f, rng, (n, K), scale)
    b = None if unit else scaled_values(f, rng, (K, m), 0)
    if K and rng.random() < 0.25:  # an inf or a NaN in a row
        a[0, rng.integers(0, K)] = rng.choice([np.inf, -np.inf, np.nan] if fmt(f).has_inf
                                              else [np.nan])  # fmt: skip
    S = fpsim.ROUNDING_MODES["stochastic"]
    P = list(_params(fmt(f), A_fmt, fmt(out_f), S, subn, sat, seed, reduce.SEQUENTIAL, 0, unit,
                     None, False))  # fmt: skip
    assert reduce.fast_kind(np.array(P)) == kind
    kw = dict(acc=acc, order="sequential", rounding="stochastic", seed=seed, out_fmt=out_f,
              subnormals=bool(subn), saturate=bool(sat))  # fmt: skip
    if unit:
        got, ran = kernel_ran(lambda: arith.sum(a.astype(container), f, axis=1, **kw))
        got = np.asarray(got, np.float64).reshape(n, 1)
    else:
        got, ran = kernel_ran(lambda: arith.matmul(a.astype(container), b.astype(container), f,
                                                   **kw))  # fmt: skip
        got = np.asarray(got, np.float64)
    assert ran == [kernel]
    P[reduce.I_FAST_STOCH] = P[reduce.I_LANES32] = 0
    general = np.empty((1, n, m))
    _, ran = kernel_ran(lambda: arith_cpu.matmul(
        a.reshape(1, n, K), None if unit else b.reshape(1, K, m), general, tuple(P)))
    assert ran == ["_rows_general"]
    assert same_bits(got, general[0])
    if subn and not sat and np.isfinite(a).all() and n * m * K <= 300:
        for i in range(n):
            for j in range(m):
                terms = [Fraction(a[i, k]) * (1 if unit else Fraction(b[k, j])) for k in range(K)]
                base = reduce.event_base(0, i, j, n, m, K)
                want = reduce_reference(terms, A_fmt, out_f, mode="stochastic",
                                        rand=lambda r, base=base: scalar.random62(seed, base + r))
                if math.isinf(want):  # an overflowed sum into the output format (reduce_reference
                    want = _special(want, fmt(out_f), False)  # keeps it as it is)
                assert got[i, j] == want or (math.isnan(got[i, j]) and math.isnan(want))
