"""The elementwise ops ``torch.optim`` updates with, rounded exactly as PyTorch's CPU kernels
(ATen) round them: ``add`` with ``alpha``, ``add`` of a scalar, ``mul``/``div`` by a scalar,
``sqrt``, ``lerp``, ``addcmul``, ``addcdiv``, ``maximum`` and ``neg``.

Each function takes numpy arrays holding values of a format ``fmt`` (fp32, fp16, bf16 in their
float32 containers, or any other fpsim format) and Python-float scalars, as ``torch.optim``
passes them, and returns the result in the same container:

>>> import numpy as np
>>> from fpsim import aten_cpu
>>> w, g = np.float32([1.0]), np.float32([1 + 2.0**-23])
>>> aten_cpu.add(w, g, -(1 - 2.0**-24), "fp32")   # one rounding: -(2^-24 - 2^-47) survives
array([-5.9604638e-08], dtype=float32)
>>> w - np.float32(1 - 2.0**-24) * g                    # numpy rounds the product first
array([0.], dtype=float32)

How ATen rounds (PyTorch 2.13; every rule is checked against a live torch in
``tests/test_optim_bitexact.py``)
=====================================================================================
fp32 tensors compute in fp32. fp16 and bf16 tensors ("reduced" formats) load into fp32 (exact),
compute in fp32 ("opmath") and round to the format once per *op* -- except ``add`` with
``alpha`` outside the vector loop, below. Scalars: ``add``'s ``alpha`` and an added scalar are
converted to the tensor's dtype (for fp16: Python float -> float -> Half, two roundings); every
other scalar (``mul``/``div`` operands, ``lerp``'s weight, ``addcmul``/``addcdiv``'s ``value``)
to float. With ``fl`` rounding to fp32, ``R`` to the tensor's format and ``madd(a, b, c)``
``a * b + c``:

============================  =============================================================
``add(x, y, alpha)``          ``R(madd(y, R(alpha), x))``; reduced formats outside the vector
                              loop: ``R(x + R(R(alpha) * y))`` (c10::Half arithmetic)
``add_scalar(x, s)``          ``R(x + R(s))``
``mul_scalar(x, s)``          ``R(x * fl(s))`` (``div_scalar``: ``/``)
``sqrt(x)``                   ``R(sqrt(x))`` correctly rounded (see MKL below)
``lerp(x, end, w)``           ``d = fl(end - x)``; ``|w| < 0.5``: ``R(madd(w, d, x))``, else
                              ``R(madd(fl(w - 1), d, end))``
``addcmul(x, t1, t2, v)``     ``R(madd(fl(v * t1), t2, x))``
``addcdiv(x, t1, t2, v)``     ``R(x + fl(fl(v * t1) / t2))``, three fp32 roundings
``maximum(a, b)``             exact, NaN if either is; of ``-0`` and ``+0`` the vector loop
                              returns ``b`` (``_mm256_max_ps``), the tail ``a`` (``std::max``)
============================  =============================================================

``madd`` is *fused* (one rounding, :func:`fma32`) when ATen runs its AVX2 or AVX-512 kernels:
the vector loop calls ``vec::fmadd`` (``_mm256_fmadd_ps``), and GCC contracts the scalar
``a + b * c`` of the loop's tail and of ``addcmul`` into an fma as well (the kernels are
compiled with ``-mfma`` and GCC's default ``-ffp-contract=fast``). With the ``"default"``
capability (no FMA instructions) it is ``fl(fl(a * b) + c)``. Which one ATen runs:
``torch.backends.cpu.get_cpu_capability()``; set the same here with
:func:`set_cpu_capability`.

The vector loop and its tail
    ATen's ``vectorized_loop`` handles ``2 * Vectorized<T>::size()`` elements per iteration (AVX2:
    16 fp32 or 32 fp16/bf16; AVX-512: 32 or 64); the last ``n mod that`` elements go through
    the scalar lambda. The only op whose scalar lambda rounds differently is ``add`` with
    ``alpha`` on fp16/bf16: ``self + alpha * other`` in ``c10::Half`` arithmetic rounds the
    product to Half, so those tail elements get two roundings to the format. Tensors of at least
    32768 elements are split over ``torch.get_num_threads()`` threads in chunks of
    ``ceil(n / threads)``, each with its own tail: :func:`set_num_threads`.

fp64 and the formats fp32 cannot hold
    are computed in float64 with every product and sum rounded separately -- not ATen's fp64
    kernels, which fuse in fp64 (a correctly rounded fp64 fma needs wider arithmetic).
fp8, tf32 and the other formats fp32 holds
    (PyTorch cannot compute in them) follow the reduced-format rules with every element on the
    vector path.
``sqrt`` and MKL
    PyTorch's x86 builds compute fp32 and fp64 ``sqrt`` with MKL's ``vmsSqrt`` in its HA mode,
    which is faithful but not correctly rounded (on an AMD EPYC with MKL 2024.2, 17% of fp32
    inputs come out one ulp from the correctly rounded root). fpsim computes the correctly
    rounded root, as ``_mm256_sqrt_ps`` and builds without MKL do. fp16/bf16 ``sqrt`` goes
    through float ``sqrt_ps`` and is correctly rounded in PyTorch too.
    :func:`set_fp32_sqrt` takes PyTorch's own root where bit-identity with such a build matters.

Sources read (ATen): ``native/ufunc/add.h`` (scalar ``self + alpha * other``, vector
``vec::fmadd(other, alpha, self)``) with ``torchgen/dest/ufunc.py`` (``alpha.to<scalar_t>()``);
``native/cpu/Loops.h`` (``vectorized_loop``: ``2 * Vec::size()`` per iteration, ``basic_loop``
for the rest); ``native/cpu/PointwiseOpsKernel.cpp`` (``addcmul``/``addcdiv``; fp16/bf16 in float
with ``value.to<float>()``); ``native/cpu/LerpKernel.cpp`` (``lerp_vec``: ``is_lerp_weight_small``
and ``fmadd(coeff, end - start, base)``); ``native/cpu/BinaryOpsKernel.cpp`` (``mul``/``div`` of
fp16/bf16 by a scalar in float, the scalar from its original double);
``cpu/vec/vec256/vec256_half.h`` (``fmadd`` of Half: to float, ``_mm256_fmadd_ps``, back);
``cpu/vml.h`` (``vsqrt`` -> MKL ``vmsSqrt(..., VML_HA)``); ``torch/optim/sgd.py`` and
``adam.py`` (``_single_tensor_sgd``, ``_single_tensor_adam``). The ``maximum`` tie rule and
GCC's contraction of the scalar code were measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import contextmanager

import ml_dtypes
import numpy as np

from .autograd.precision import to_format
from .formats import Format, FormatLike, bf16, fp16, fp32, fp64, get_format
from .kernels.fma32 import fma32_into

__all__ = [
    "CAPABILITIES",
    "GRAIN_SIZE",
    "get_cpu_capability",
    "set_cpu_capability",
    "get_num_threads",
    "set_num_threads",
    "set_fp32_sqrt",
    "cpu_kernels",
    "Ops",
    "ops",
    "fma32",
    "vector_loop_tails",
    "add",
    "add_scalar",
    "mul_scalar",
    "div_scalar",
    "sqrt",
    "lerp",
    "addcmul",
    "addcdiv",
    "maximum",
    "neg",
]

# capability -> (madd fused?, bytes in one Vectorized<T>)
_CAPS = {"avx2": (True, 32), "avx512": (True, 64), "default": (False, 32)}
CAPABILITIES = tuple(_CAPS)
GRAIN_SIZE = 32768  # at::internal::GRAIN_SIZE: TensorIterator runs smaller tensors serially

_state: dict = {"capability": "avx2", "num_threads": 1, "sqrt": None}

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)


def get_cpu_capability() -> str:
    """The ATen CPU capability the kernels model: ``"avx2"`` (default), ``"avx512"`` or
    ``"default"`` -- what ``torch.backends.cpu.get_cpu_capability()`` reports, lower-cased."""
    return _state["capability"]


def set_cpu_capability(capability: str) -> None:
    """Model the kernels ATen runs with this capability (``torch.backends.cpu.
    get_cpu_capability()``: ``"AVX2"``, ``"AVX512"``, ``"DEFAULT"``; any case)."""
    cap = str(capability).lower()
    if cap not in _CAPS:
        raise ValueError(
            f"unknown CPU capability {capability!r}; expected one of {', '.join(CAPABILITIES)}"
        )
    _state["capability"] = cap


def get_num_threads() -> int:
    """The thread count ATen splits tensors of ``GRAIN_SIZE`` or more elements over (default 1)."""
    return _state["num_threads"]


def set_num_threads(n: int) -> None:
    """Model ATen running with ``n`` threads (``torch.get_num_threads()``)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"num_threads must be a positive integer, got {n!r}")
    _state["num_threads"] = int(n)


def set_fp32_sqrt(fn: Callable[[np.ndarray], np.ndarray] | None) -> None:
    """Compute fp32 ``sqrt`` with ``fn`` (a float32 array in, its roots as float32 out) instead
    of the correctly rounded root; ``None`` restores that.

    For bit-identity with a PyTorch build whose fp32 ``sqrt`` is MKL's (x86 wheels; see the
    module doc), hand it PyTorch's own: ``set_fp32_sqrt(lambda x:
    torch.from_numpy(x).sqrt().numpy())``. fp16/bf16 roots never use it (they are correctly
    rounded in PyTorch too).
    """
    if fn is not None and not callable(fn):
        raise TypeError(f"set_fp32_sqrt takes a function or None, got {type(fn).__name__}")
    _state["sqrt"] = fn


_UNSET = object()


@contextmanager
def cpu_kernels(capability: str | None = None, num_threads: int | None = None, sqrt=_UNSET):
    """Model ATen's kernels for ``capability`` and ``num_threads`` (and compute fp32 roots with
    ``sqrt``, as :func:`set_fp32_sqrt`) inside the block.

    >>> x, y = np.float32([-1.0]), np.float32([1 + 2.0**-23])
    >>> with cpu_kernels("default"):           # no fma: the product rounds to 1 first
    ...     add(x, y, 1 - 2.0**-24, "fp32").tolist()
    [0.0]
    >>> add(x, y, 1 - 2.0**-24, "fp32").tolist()   # avx2: one rounding, 2^-24 - 2^-47
    [5.960463766996327e-08]
    """
    old = dict(_state)
    try:
        if capability is not None:
            set_cpu_capability(capability)
        if num_threads is not None:
            set_num_threads(num_threads)
        if sqrt is not _UNSET:
            set_fp32_sqrt(sqrt)
        yield
    finally:
        _state.update(old)


# ---- exact building blocks -----------------------------------------------------------------
def _f32_vector(v: np.ndarray, shape: tuple) -> np.ndarray:
    """A float32 operand as the kernel takes it: 1-D, C-contiguous, writeable (one numba type);
    size 1 for a scalar, else broadcast to ``shape``."""
    if v.size == 1:
        v = v.reshape(1)
    elif v.shape != shape:
        v = np.broadcast_to(v, shape)
    if not (v.flags.c_contiguous and v.flags.writeable):
        v = np.array(v, F32)
    return v.reshape(-1)


def _fma32(a, b, c) -> np.ndarray:
    """:func:`fma32` on float32 arrays/scalars, without the argument checks."""
    a, b, c = np.asarray(a, F32), np.asarray(b, F32), np.asarray(c, F32)
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    out = np.empty(shape, F32)
    if out.size:
        fma32_into(*(_f32_vector(v, shape) for v in (a, b, c)), out.reshape(-1))
    return out


def fma32(a, b, c) -> np.ndarray:
    """``a * b + c`` rounded once to fp32 (nearest even), for fp32 values ``a, b, c`` (arrays
    or scalars, broadcast): what ``_mm256_fmadd_ps`` computes.

    One numba pass (:mod:`fpsim.kernels.fma32`): ``fl64(a * b + c)`` has one rounding (the
    product is exact in float64), and rounding it to fp32 is correct unless it landed on a
    midpoint between two fp32 values; only there TwoSum recovers the exact error and the
    float64 sum is rounded to odd first (Boldo & Melquiond, IEEE Trans. Computers 57(4), 2008),
    as :func:`fpsim.arith.fma` does on every element (and the tests check the two against each
    other). Infinities and NaN follow IEEE fma (NaN payloads are not modelled).

    >>> x = np.float32(1 + 2.0**-12)
    >>> float(fma32(x, x, np.float32(-(1 + 2.0**-11))))     # 2^-24: lost if x*x rounds first
    5.960464477539063e-08
    """
    args = [np.asarray(v) for v in (a, b, c)]
    for name, v in zip("abc", args, strict=True):
        if v.dtype != F32:
            raise TypeError(f"fma32 takes float32 operands; {name} is {v.dtype}")
    with np.errstate(all="ignore"):
        return _fma32(*args)


def vector_loop_tails(n: int, itemsize: int) -> list[slice]:
    """The elements of an ``n``-element contiguous tensor of ``itemsize``-byte elements that
    ATen's ``vectorized_loop`` leaves to its scalar lambda, for the current capability and
    thread count.

    >>> vector_loop_tails(37, 2)                  # AVX2 fp16: 32 per iteration
    [slice(32, 37, None)]
    >>> with cpu_kernels(num_threads=2):          # two chunks of 32773, each with its tail
    ...     vector_loop_tails(65546, 4)
    [slice(32768, 32773, None), slice(65541, 65546, None)]
    """
    block = 2 * (_CAPS[get_cpu_capability()][1] // itemsize)
    threads = get_num_threads()
    if n >= GRAIN_SIZE and threads > 1:
        # at::parallel_for (OpenMP): min(threads, ceil(n / grain)) chunks of ceil(n / chunks)
        chunks = min(threads, -(-n // GRAIN_SIZE))
        size = -(-n // chunks)
        bounds = [(b, min(n, b + size)) for b in range(0, n, size)]
    else:
        bounds = [(0, n)]
    out = []
    for lo, hi in bounds:
        start = lo + (hi - lo) // block * block
        if start < hi:
            out.append(slice(start, hi))
    return out


def _cast(x, dt) -> np.ndarray:
    return np.asarray(x, F32).astype(dt).astype(F32)


# ---- the kernels of one format ----------------------------------------------------------------
class Ops:
    """ATen's CPU kernels for tensors of one format (get one with :func:`ops`): the methods
    take arrays of the format's values (any float dtype that holds them) and Python floats,
    and return new arrays in the format's container. Call them inside
    ``np.errstate(all="ignore")`` (overflow to inf and 0/0 are results here, not accidents);
    the module-level functions do that for you.
    """

    def __init__(self, fmt: Format) -> None:
        self.fmt = fmt
        self.container = fmt.container_dtype
        self.wide = not fp32.contains(fmt)  # fp64 and wider custom formats
        self.reduced = not self.wide and fmt != fp32
        self.math = F64 if self.wide else F32  # opmath
        # c10::Half / c10::BFloat16: the 2-byte dtypes whose scalar lambda of add differs
        self.two_byte = fmt == fp16 or fmt == bf16
        # the element size of PyTorch's dtype, for the vector loop's tails (0: no such dtype)
        self.itemsize = 2 if self.two_byte else {fp32: 4, fp64: 8}.get(fmt, 0)
        self._scalars: dict = {}
        self.R: Callable[[np.ndarray], np.ndarray]  # round to the format
        if fmt == fp32:
            self.R = lambda x: np.asarray(x, F32)
        elif fmt == fp16:
            # numpy's float16 cast (nearest even, subnormals, inf) is fast on small arrays but
            # takes ~20x longer per element where it underflows or overflows; fpsim's kernel
            # costs the same on any values
            self.R = lambda x: (
                _cast(x, np.float16) if np.size(x) < 2048 else to_format(np.asarray(x, F32), fp16)
            )
        elif fmt == bf16:  # ml_dtypes' cast: round to nearest even, NaN kept
            self.R = lambda x: _cast(x, ml_dtypes.bfloat16)
        else:
            self.R = lambda x: to_format(np.asarray(x, self.math), fmt)

    def __repr__(self) -> str:
        return f"aten_cpu.ops({self.fmt.name!r})"

    # scalars as ATen converts a Python float (a double)
    def scalar(self, s: float):
        """``Scalar::to<scalar_t>()``: double -> float -> the format (``c10::Half(float)``)."""
        key = (s, math.copysign(1.0, s))  # -0.0 and 0.0 are equal keys otherwise
        v = self._scalars.get(key)
        if v is None:  # an optimizer asks for the same few scalars every step
            v = self.R(np.float64(s) if self.wide else np.float32(s))[()]
            if len(self._scalars) < 4096:
                self._scalars[key] = v
        return v

    def opmath_scalar(self, s: float):
        """``Scalar::to<opmath_t>()``: float for fp16/bf16/fp32."""
        return np.float64(s) if self.wide else np.float32(s)

    def _fused(self) -> bool:
        return not self.wide and _CAPS[_state["capability"]][0]

    def madd(self, a, b, c):
        """``a * b + c`` as the capability computes it: one rounding to fp32, or two."""
        if self._fused():
            return _fma32(a, b, c)
        return np.multiply(a, b, dtype=self.math) + c

    def _load(self, x) -> np.ndarray:
        return np.asarray(x, self.math)

    def round(self, x) -> np.ndarray:
        """``x`` (values fp32 -- or float64, for wide formats -- holds) rounded once to the
        format, nearest even, in the format's container: a copy into a tensor of the format
        (``param.copy_(master)``)."""
        return np.asarray(self.R(x), self.container)

    _out = round

    def add(self, x, y, alpha: float) -> np.ndarray:
        """``x + alpha * y``, as ``torch.add(x, y, alpha=alpha)``."""
        xs, ys, a = self._load(x), self._load(y), self.scalar(alpha)
        if xs.shape != ys.shape:
            xs, ys = np.broadcast_arrays(xs, ys)
        if self.reduced and not self._fused():
            # "default": the generic Vectorized<Half>::fmadd is a * b + c in c10::Half
            # arithmetic, each op rounded to the format -- as the scalar lambda everywhere
            return self._out(xs + self.R(np.multiply(a, ys, dtype=F32)))
        out = self.R(self.madd(ys, a, xs))
        if self.two_byte:
            # the vector loop's tails: self + alpha * other in c10::Half arithmetic
            fx, fy, flat = xs.reshape(-1), ys.reshape(-1), out.reshape(-1)
            for sl in vector_loop_tails(flat.size, 2):
                flat[sl] = self.R(fx[sl] + self.R(np.multiply(a, fy[sl], dtype=F32)))
        return np.asarray(out, self.container)

    def add_scalar(self, x, s: float) -> np.ndarray:
        """``x + s`` (``x.add(s)``), the scalar converted to the tensor's dtype."""
        return self._out(self._load(x) + self.scalar(s))

    def mul_scalar(self, x, s: float) -> np.ndarray:
        """``x * s`` (``x.mul(s)``), the scalar converted to float."""
        return self._out(self._load(x) * self.opmath_scalar(s))

    def div_scalar(self, x, s: float) -> np.ndarray:
        """``x / s`` (``x.div(s)``): a true division, not a multiplication by ``1/s``."""
        return self._out(self._load(x) / self.opmath_scalar(s))

    def sqrt(self, x) -> np.ndarray:
        """``x.sqrt()``, correctly rounded; fp32 through :func:`set_fp32_sqrt`'s function."""
        xs = self._load(x)
        fn = _state["sqrt"]
        if fn is not None and self.fmt == fp32:
            r = np.asarray(fn(np.ascontiguousarray(xs)))
            if r.shape != xs.shape:
                raise ValueError(f"the fp32 sqrt function returned shape {r.shape} for {xs.shape}")
            return r.astype(F32, copy=False)
        return self._out(np.sqrt(xs))

    def lerp(self, x, end, weight: float) -> np.ndarray:
        """``x.lerp(end, weight)``: ``x + w * (end - x)`` for ``|w| < 0.5``, else
        ``end + (w - 1) * (end - x)``, each one ``madd``."""
        xs, es, w = self._load(x), self._load(end), self.opmath_scalar(weight)
        d = es - xs
        if abs(w) < 0.5:
            return self._out(self.madd(w, d, xs))
        return self._out(self.madd(w - self.math.type(1), d, es))

    def addcmul(self, x, t1, t2, value: float) -> np.ndarray:
        """``x + value * t1 * t2``: ``madd(fl(value * t1), t2, x)``."""
        vt1 = self.opmath_scalar(value) * self._load(t1)
        return self._out(self.madd(vt1, self._load(t2), self._load(x)))

    def addcdiv(self, x, t1, t2, value: float) -> np.ndarray:
        """``x + value * t1 / t2``: three roundings, ``fl(x + fl(fl(value * t1) / t2))``."""
        q = (self.opmath_scalar(value) * self._load(t1)) / self._load(t2)
        return self._out(self._load(x) + q)

    def maximum(self, a, b) -> np.ndarray:
        """``torch.maximum(a, b)``: NaN where either is NaN, else the larger; of two equal
        values (zeros of opposite signs) the vector loop returns ``b`` (``_mm256_max_ps``), its
        tail ``a`` (``std::max``)."""
        xa, xb = self._load(a), self._load(b)
        if xa.shape != xb.shape:
            xa, xb = np.broadcast_arrays(xa, xb)
        out = np.maximum(xa, xb)  # NaN-propagating; b when equal
        if self.itemsize:
            fa, fb, flat = xa.reshape(-1), xb.reshape(-1), out.reshape(-1)
            for sl in vector_loop_tails(flat.size, self.itemsize):
                flat[sl] = np.where(fa[sl] == fb[sl], fa[sl], flat[sl])
        return out.astype(self.container, copy=False)

    def neg(self, x) -> np.ndarray:
        """``-x``: exact (the sign of zero flips)."""
        return np.negative(self._load(x)).astype(self.container, copy=False)


_OPS: dict[Format, Ops] = {}


def ops(fmt: FormatLike) -> Ops:
    """The kernels for tensors of format ``fmt`` (cached), e.g. ``ops("fp16").lerp(m, g, 0.1)``."""
    f = get_format(fmt)
    o = _OPS.get(f)
    if o is None:
        o = _OPS[f] = Ops(f)
    return o


def add(x, y, alpha: float, fmt: FormatLike) -> np.ndarray:
    """``torch.add(x, y, alpha=alpha)``: ``x + alpha * y``, as the module's table says.

    >>> one = np.float32([1.0] * 33)
    >>> r = add(one, one, 2.0**-11 + 2.0**-22, "fp16")   # alpha rounds to fp16 first: 2^-11
    >>> float(r[0]), float(r[32])                          # a tie in both paths, to even
    (1.0, 1.0)
    """
    with np.errstate(all="ignore"):
        return ops(fmt).add(x, y, alpha)


def add_scalar(x, s: float, fmt: FormatLike) -> np.ndarray:
    """``x.add(s)``: the scalar converted to the tensor's dtype, then one addition."""
    with np.errstate(all="ignore"):
        return ops(fmt).add_scalar(x, s)


def mul_scalar(x, s: float, fmt: FormatLike) -> np.ndarray:
    """``x.mul(s)``: ``R(x * fl(s))``."""
    with np.errstate(all="ignore"):
        return ops(fmt).mul_scalar(x, s)


def div_scalar(x, s: float, fmt: FormatLike) -> np.ndarray:
    """``x.div(s)``: ``R(x / fl(s))``."""
    with np.errstate(all="ignore"):
        return ops(fmt).div_scalar(x, s)


def sqrt(x, fmt: FormatLike) -> np.ndarray:
    """``x.sqrt()``, correctly rounded (``sqrt(-0) = -0``, NaN below zero)."""
    with np.errstate(all="ignore"):
        return ops(fmt).sqrt(x)


def lerp(x, end, weight: float, fmt: FormatLike) -> np.ndarray:
    """``x.lerp(end, weight)`` with ATen's two formulas.

    >>> float(lerp(np.float32([0.0]), np.float32([1.0]), 0.75, "fp32")[0])
    0.75
    """
    with np.errstate(all="ignore"):
        return ops(fmt).lerp(x, end, weight)


def addcmul(x, t1, t2, value: float, fmt: FormatLike) -> np.ndarray:
    """``x.addcmul(t1, t2, value=value)``: ``R(madd(fl(value * t1), t2, x))``."""
    with np.errstate(all="ignore"):
        return ops(fmt).addcmul(x, t1, t2, value)


def addcdiv(x, t1, t2, value: float, fmt: FormatLike) -> np.ndarray:
    """``x.addcdiv(t1, t2, value=value)``: ``R(x + fl(fl(value * t1) / t2))``."""
    with np.errstate(all="ignore"):
        return ops(fmt).addcdiv(x, t1, t2, value)


def maximum(a, b, fmt: FormatLike) -> np.ndarray:
    """``torch.maximum(a, b)``: exact, NaN where either is NaN."""
    return ops(fmt).maximum(a, b)


def neg(x, fmt: FormatLike) -> np.ndarray:
    """``-x`` (exact; the sign of zero flips)."""
    return ops(fmt).neg(x)
