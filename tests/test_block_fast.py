"""The CPU's fused block FMA (fpsim.kernels.block_fast: the products four at a time, a block of
four in one pass, the lean rounding toward zero, the promotion as a float64 sum).

Oracles, for random block-FMA models over every parameter the fused form claims (block sizes
1..40, alignment bits, truncate / round, every rounding mode, normalisation, subnormal inputs
and accumulators kept or flushed, promotion every N_C into several formats, a starting
accumulator) and random shapes (K = 0, 1, not a multiple of the block; m across the lane
tile's edge), inputs with zeros of both signs, subnormals, inf, NaN and cancellation, in
float32 and float64 containers:

* the general block FMA -- ``reduce.block_row`` as the CUDA kernel and the teaching trace run
  it, compiled here with every fast form switched off -- bit for bit on the whole result;
* the exact rational reference of the definition (``arith_oracle.block_fma_reference``) on
  sampled elements, bit for bit (stochastic rounding with the same random bits).

Each case asserts which kernel ``arith.matmul`` ran (the fused one exactly where the model has
finite alignment bits and exact products), so that no case compares a kernel with itself.
"""

import math
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import fpsim
from fpsim import arith
from fpsim.arith import BlockFMA
from fpsim.arith.reductions import _params, _promote_plain, _seed_for
from fpsim.kernels import arith_cpu, block_fast, reduce, scalar
from fpsim.kernels.fastround import fast_round_ok

sys.path.insert(0, str(Path(__file__).parent))
from arith_cases import fmt, general_block_rows, same_bits, small_values, values  # noqa: E402
from arith_oracle import ALL_MODES, block_fma_reference  # noqa: E402

IN_FORMATS = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "tf32"]
ACC_FORMATS = ["fp32", "fp16", "bf16", "e8m13", "tf32", "fp8_e5m2"]
PROM_FORMATS = ["fp32", "fp64", "bf16", "fp16", "e8m13"]
LANES = [0, 1, 2, 3, 5, 8, 13, block_fast.TILE - 1, block_fast.TILE, block_fast.TILE + 1,
         block_fast.TILE + 3]  # fmt: skip


@st.composite
def models(draw):
    # the presets' block sizes and rounding toward zero come up often (the fused form's
    # special cases: a block of four in one pass, the lean rounding toward zero)
    block = draw(st.one_of(st.sampled_from([4, 4, 8, 16, 32]), st.integers(1, 40)))
    align = draw(st.integers(0, 40))
    assume((4 * block + 3) << align < 1 << 53)
    return BlockFMA(
        block=block,
        align_bits=align,
        align_rounding=draw(st.sampled_from(["truncate", "truncate", "nearest_even"])),
        rounding=draw(st.sampled_from(["toward_zero"] * 4 + ALL_MODES)),
        acc=fmt(draw(st.sampled_from(ACC_FORMATS))),
        normalize_products=draw(st.booleans()),
        products=draw(st.sampled_from(["exact"] * 5 + ["rounded"])),
        min_exponent=draw(st.one_of(st.none(), st.integers(-140, 6))),
        input_subnormals=draw(st.booleans()),
        acc_subnormals=draw(st.booleans()),
        promote_every=draw(st.one_of(st.none(), st.integers(1, 4).map(lambda k: k * block))),
        promote_to=fmt(draw(st.sampled_from(PROM_FORMATS))),
    )


def inputs(f, n, rng, spread):
    """n values of f: every exponent field equally likely (zeros of both signs, subnormals, the
    largest values, now and then inf or NaN), or (not ``spread``) moderate values whose bits
    meet and cancel in the blocks."""
    return values(f, n, rng) if spread else small_values(f, n, rng)


def run_and_kernel(fn, *args, **kw):
    """``fn(*args, **kw)`` (``arith.matmul``, ``arith.sum``) and the row kernels it ran."""
    ran = []
    run_rows = arith_cpu._run_rows

    def spy(kernel, *rest):
        ran.append(kernel)
        return run_rows(kernel, *rest)

    with mock.patch.object(arith_cpu, "_run_rows", spy):
        got = fn(*args, **kw)
    return np.asarray(got, np.float64), ran


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models(), st.sampled_from(IN_FORMATS), st.integers(1, 3), st.integers(0, 80),
       st.sampled_from(LANES), st.sampled_from(ALL_MODES), st.sampled_from(["fp32", "fp64", "fp16"]),
       st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans(),
       st.integers(0, 2**32))  # fmt: skip
@example(arith.get_accumulation("v100_fp16"), "fp16", 2, 9, 257, "nearest_even", "fp32", True,
         True, False, True, False, 3)  # fmt: skip
@example(arith.get_accumulation("v100_fp16"), "fp16", 2, 8, 5, "nearest_even", "fp32", False,
         False, True, False, True, 5)  # fmt: skip
@example(arith.get_accumulation("h100_fp8_promote128").replace(inputs=None), "fp8_e4m3", 1, 80,
         5, "nearest_even", "fp32", False, True, True, False, False, 4)  # fmt: skip
def test_fused_block_fma_equals_general_and_exact(model, fin, n, K, m, mode, out, spread,
                                                  cancel, with_c, as_f32, zeros, seed):  # fmt: skip
    rng = np.random.default_rng(seed)
    A = inputs(fin, n * K, rng, spread).reshape(n, K)
    B = inputs(fin, K * m, rng, spread).reshape(K, m)
    if zeros:
        # mostly -0 in A (row 0 all -0), and B's even columns made positive: blocks whose products are all
        # -0 (an exact zero keeps -0 only then), and starting accumulators -0 below
        A = np.where(rng.random((n, K)) < 0.9, -0.0, A)
        A[0] = -0.0
        B[:, ::2] = np.abs(B[:, ::2])
    if cancel and K >= 2:
        # the second half of row 0's products: the first half's, negated (exact cancellation
        # across blocks, and within a block where the halves meet)
        h = K // 2
        A[0, h:2 * h] = -A[0, :h]
        B[h:2 * h] = B[:h]
    C = None
    if with_c:
        C = np.asarray(fpsim.round_to(inputs(fin, n * m, rng, spread), model.acc), np.float64)
        C = C.reshape(n, m)
        if zeros:
            C = np.where(rng.random((n, m)) < 0.5, -0.0, C)
    cast = (lambda x: x.astype(np.float32)) if as_f32 else (lambda x: x)  # fp8..fp16 fit
    try:
        got, ran = run_and_kernel(arith.matmul, cast(A), cast(B), fin, accumulation=model, c=C,
                                     out_fmt=out, rounding=mode, seed=seed)  # fmt: skip
    except ValueError as e:
        assume("cannot" not in str(e))  # a model the float64 datapath refuses, by design
        raise
    # the fused kernel's domain, from the model (fused_ok's claim): finite (here: every model)
    # truncating alignment, exact products not normalised, the block sum rounded toward zero or
    # to nearest even by round_fast, a promotion that may be the float64 sum, a deterministic
    # final rounding by round_fast
    fused = (model.products == "exact" and model.align_rounding == "truncate"
             and not model.normalize_products
             and model.rounding in ("toward_zero", "nearest_even")
             and bool(fast_round_ok(model.acc.record))
             and (model.promote_every is None or _promote_plain(model.acc, model.promote_to))
             and mode != "stochastic" and bool(fast_round_ok(fpsim.get_format(out).record)))
    want_kernel = arith_cpu._rows_block_fused if fused else arith_cpu._rows_block
    assert ran == ([want_kernel] if n * m else []), (ran, model)
    if not n * m:
        assert got.shape == (n, m)
        return
    # the general block FMA, every fast form off (the parameters CUDA gets)
    code = fpsim.ROUNDING_MODES[mode]
    P = np.array(_params(fpsim.get_format(fin), model.acc, fpsim.get_format(out), code, 1, 0,
                         _seed_for(seed, code, model), reduce.SEQUENTIAL, 0, False, model, True,
                         C is not None))  # fmt: skip
    assert not block_fast.fused_ok(P) or fused
    Cx = np.zeros((1, 1, 1)) if C is None else np.ascontiguousarray(C.reshape(1, n, m))
    want = np.empty((1, n, m))
    general_block_rows(A.reshape(1, n, K), np.ascontiguousarray(B.reshape(1, K, m)), Cx, want, P)
    assert same_bits(got, want[0]), (model, np.argwhere(~np.isclose(got, want[0])))
    # the exact reference, on a few elements (the last lanes of a tile among them)
    seed_v = _seed_for(seed, code, model)
    picks = {(n - 1, m - 1), (0, 0)} | {(int(rng.integers(n)), int(rng.integers(m)))
                                         for _ in range(3)}  # fmt: skip
    for i, j in sorted(picks):
        o = i * m + j

        def rand(r, o=o):
            return scalar.random62(seed_v, o * (2 * K + 1) + r)

        c0 = 0.0 if C is None else C[i, j]
        ref = block_fma_reference(A[i], B[:, j], fin, model, c0, out, mode, rand)
        assert same_bits(got[i, j], ref), (i, j, got[i, j], ref, model)


def test_kernel_choice_and_promotion_predicate():
    """The fused kernel runs the presets; exact alignment, rounded products, normalised
    products, rounding alignment, stochastic rounding and sums run the general one (asserted
    on the kernels run).
    The promotion is a float64 sum + round_fast only where that double rounding is innocuous
    (checked against exact rational sums in test_reduce_kernels' plain_add_innocuous tests)."""
    x = np.ones((2, 8))
    for model, fused in [(arith.get_accumulation("v100_fp16"), True),
                         (arith.get_accumulation("exact_fp32"), False),
                         (BlockFMA(block=4, align_bits=10, products="rounded"), False),
                         (BlockFMA(block=4, align_bits=10, normalize_products=True), False),
                         (BlockFMA(block=4, align_bits=10, align_rounding="nearest_even"), False),
                         (BlockFMA(block=4, align_bits=10, rounding="stochastic"), False),
                         (BlockFMA(block=4, align_bits=10, rounding="up"), False),
                         (arith.get_accumulation("b200_fp8_mma_sync").replace(inputs=None), True),
                         ]:  # fmt: skip
        got, ran = run_and_kernel(arith.matmul, x, x.T, "fp16", accumulation=model)
        assert ran == [arith_cpu._rows_block_fused if fused else arith_cpu._rows_block]
        assert (got == 8.0).all()
    got, ran = run_and_kernel(arith.sum, np.ones(8), "fp16", accumulation="v100_fp16")
    assert ran == [arith_cpu._rows_block] and float(got) == 8.0
    # e8m13 and fp16 values into fp32: innocuous (24 + 14 <= 50, a subset of fp32);
    # fp32 into fp64 (24 + 53 bits) and fp32 into bf16 (a wider term) are not
    assert _promote_plain(arith.E8M13, fpsim.get_format("fp32"))
    assert _promote_plain(fpsim.get_format("fp16"), fpsim.get_format("fp32"))
    assert not _promote_plain(fpsim.get_format("fp32"), fpsim.get_format("fp64"))
    assert not _promote_plain(fpsim.get_format("fp32"), fpsim.get_format("bf16"))


@pytest.mark.parametrize("name", ["v100_fp16", "h100_fp16", "h100_fp8", "h100_fp8_promote128",
                                  "a100_tf32", "b200_fp8_mma_sync"])  # fmt: skip
def test_presets_at_the_tile_edge_and_ragged_k(name):
    """The presets (a block of four in one pass, groups of four, promotion, nearest even) on a
    matrix whose lanes cross the tile's edge and whose K is not a multiple of the block: the
    general kernel, bit for bit, and the exact reference on the last lane of each row."""
    model = arith.get_accumulation(name)
    fin = model.inputs[0] if model.inputs else "fp16"
    rng = np.random.default_rng(7)
    n, K, m = 2, 4 * model.block + 3, block_fast.TILE + 2
    A = inputs(fin, n * K, rng, False).reshape(n, K)
    B = inputs(fin, K * m, rng, False).reshape(K, m)
    A[1, 0] = -0.0
    B[1, 5] = math.nan
    got, ran = run_and_kernel(arith.matmul, A, B, fin, accumulation=model, out_fmt="fp32")
    assert ran == [arith_cpu._rows_block_fused]
    P = np.array(_params(fpsim.get_format(fin), model.acc, fpsim.get_format("fp32"), 0, 1, 0, 0,
                         reduce.SEQUENTIAL, 0, False, model, True))  # fmt: skip
    want = np.empty((1, n, m))
    general_block_rows(A.reshape(1, n, K), B.reshape(1, K, m), np.zeros((1, 1, 1)), want, P)
    assert same_bits(got, want[0])
    assert np.isnan(got[:, 5]).all()
    for i in range(n):
        ref = block_fma_reference(A[i], B[:, m - 1], fin, model, 0.0, "fp32")
        assert same_bits(got[i, m - 1], ref)


@pytest.mark.parametrize("case", ["flush", "overflow"])
def test_toward_zero_flush_and_overflow(case):
    """The lean rounding toward zero (``block_fast.finish_tz``) where its replacements act, on
    inputs built to reach them: block sums in fp16's subnormal range into an fp16 accumulator
    that flushes subnormals (+-0), and block sums of 2^16 and more into fp16 (the exponent
    overflows: +-inf; 65504 + 14 stays max, toward zero). The general kernel and the exact
    reference, bit for bit, with the signs of both kinds."""
    model = BlockFMA(block=4, align_bits=12, rounding="toward_zero", acc="fp16",
                     acc_subnormals=case != "flush")  # fmt: skip
    if case == "flush":  # products 2^-24 ... 2^-15: block sums below fp16's 2^-14
        a = np.ldexp(1.0, -np.array([[20, 20, 20, 20], [16, 18, 19, 20], [24, 22, 21, 17],
                                      [15, 24, 24, 24]]))  # fmt: skip
    else:  # 2^14 * 4 = 2^16 (overflows), and 65504 + 8 + 4 + 2 (past max, below 2^16)
        a = np.array([[16384.0] * 4, [32768.0, 16384.0, 8192.0, 8192.0],
                      [32768.0, 16384.0, 8192.0, 4096.0], [65504.0, 8.0, 4.0, 2.0]])  # fmt: skip
    A = np.concatenate([a, -a])
    B = np.ones((4, 3))
    B[:, 1] = -1.0
    B[3, 2] = 0.0  # (column 2: the last product zero)
    fin = "fp16"
    got, ran = run_and_kernel(arith.matmul, A, B, fin, accumulation=model, out_fmt="fp32")
    assert ran == [arith_cpu._rows_block_fused]
    n, K, m = A.shape[0], 4, 3
    P = np.array(_params(fpsim.get_format(fin), model.acc, fpsim.get_format("fp32"), 0, 1, 0, 0,
                         reduce.SEQUENTIAL, 0, False, model, True))  # fmt: skip
    want = np.empty((1, n, m))
    general_block_rows(A.reshape(1, n, K), B.reshape(1, K, m), np.zeros((1, 1, 1)), want, P)
    assert same_bits(got, want[0]), (got, want[0])
    for i in range(n):
        for j in range(m):
            ref = block_fma_reference(A[i], B[:, j], fin, model, 0.0, "fp32")
            assert same_bits(got[i, j], ref), (i, j, got[i, j], ref)
    # the cases reached what they were built for
    if case == "flush":
        assert (got[:, :2] == 0.0).all()
        assert not np.signbit(got[:4, 0]).any() and np.signbit(got[4:, 0]).all()
    else:
        assert np.isinf(got[[0, 1, 4, 5], :2]).all() and (np.abs(got[[3, 7], :2]) == 65504).all()
