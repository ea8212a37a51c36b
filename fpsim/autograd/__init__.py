"""A small reverse-mode autodiff engine whose tensors carry a number format.

Like micrograd, but every tensor is an array of values of one :class:`~fpsim.Format`, and every
op, forward *and* backward, rounds where real low-precision hardware rounds. It is what
``fpsim.nn``, ``fpsim.optim`` and AMP (autocast, GradScaler) run on.

>>> from fpsim.autograd import tensor
>>> w = tensor([1.0, -2.0], requires_grad=True)               # fp32 leaf
>>> h = w.half()                                               # cast node -> fp16
>>> y = (h * 2.0**-20).sum()                                   # an fp16 op
>>> y.format.name, h.format.name
('fp16', 'fp16')
>>> y.backward(tensor(2.0**-6, format="fp16"))                 # tiny upstream gradient
>>> w.grad                                                     # 2^-26 underflowed in fp16
tensor([0., 0.], format=fp32)

Precision semantics
-------------------
**Storage.** ``Tensor.data`` is a numpy array in the format's *container* (float32 for every
format that fits, float64 for fp64 and wider custom formats; int64/bool for integer tensors,
whose ``format`` is None). Every stored element is exactly representable in the tensor's format:
tensors are created with one rounding (nearest even) and every op output is rounded.

**Compute format.** Each op runs in one format, ``ctx.fmt``:

* elementwise ops, reductions, activations, losses, ``cat``/``stack``/``where``: the
  *promotion* of their floating inputs -- equal formats stay; a format that holds all the others
  wins (fp16 + fp32 -> fp32, anything + fp64 -> fp64); otherwise the narrower of fp32/fp64 that
  holds them all (fp16 + bf16 -> fp32, as in PyTorch). Integer tensors (indices, class targets)
  never take part; Python numbers are *weak* (``fp16 * 0.1`` stays fp16).
* matmul-like ops (``matmul``, ``mm``, ``bmm``, ``baddbmm``, ``einsum``, ``linear``, ``conv1d``,
  ``conv2d``, ``scaled_dot_product_attention``): all operands must have the same format;
  otherwise a RuntimeError "expected both operands to have the same format, got fp32 and fp16"
  (as PyTorch outside autocast).

**Scalar operands** -- a Python number, or a 0-dim tensor of a wider format outranked by a
dimensioned operand (``bf16 [n] + fp32 0-dim`` computes in bf16) -- enter the formula as
PyTorch's CPU kernels read them (checked against torch 2.13 by tests/test_scalar_operands.py):
rounded to the compute format first (a Python number through float32, as PyTorch converts a
double to a 16-bit type), so ``bf16([2.296875]) + 1.1`` adds 1.1015625 and gives 3.40625;
except the *second* operand of ``mul`` and ``div``, which keeps its float32 value (its opmath
value; float64 for fp64) while the op runs in float32 and rounds once (ATen's
``original_scalar_value``). ``2.0 * x`` is ``x.mul(2.0)``, the number second, and
``2.0 / x`` is ``x.reciprocal() * 2.0``: two roundings, as PyTorch's ``__rtruediv__``.
* the cast node ``x.to(fmt)``: ``fmt``.

**Forward.** The output is a value of the compute format, rounded once:

* fp32 ops evaluate their numpy formula directly in float32 (fast, as PyTorch's fp32 kernels):
  ``+ - * /`` and ``sqrt`` are IEEE correctly rounded per elementary operation; ``exp``,
  ``log``, ``tanh``, ``erf`` have numpy's / libm's accuracy; composite ops (softmax,
  layer_norm, losses) round at each elementary numpy step, like any fp32 implementation.
* every other format (fp16, bf16, tf32, fp8, custom): the formula is evaluated in float64 on
  the stored values, and the result is rounded **once** to the format. So an fp16 op's output is
  exactly ``round_to(<float64 formula of the same inputs>, fp16)``. For ``+ - * /`` and
  ``sqrt`` of formats with at most 25 significand bits this is the correctly rounded result
  (float64 has >= 2p+2 bits, so the double rounding is innocuous).
* fp64: float64 numpy.

**Accumulators.** ``matmul``/``mm``/``linear`` accumulate in fp32 by default (as PyTorch's
CPU kernels and tensor cores do) and round once to the format; ``matmul_accumulation("input")``
(or ``acc=`` per call, or any format) accumulates in the op's own format instead, rounding after
every addition. All products go through ``fpsim.arith.matmul`` (one private function,
:func:`precision._matmul_values`). ``linear`` adds the bias to the accumulator and rounds once.
``sum``/``mean`` accumulate in fp32 for every format stored in float32 (fp16 ones sum to 4096,
not 2048) and round once; fp64 in float64. Sums *inside* composite ops (softmax denominators,
layer_norm statistics, var, gradient reductions over broadcast dimensions, scatter-adds of
``embedding``/indexing gradients) run in the op's math dtype (float32 for fp32, float64
otherwise) and round once with the op's result.

**Backward.** A node's backward runs in the format its forward ran in: it receives the output
gradient (a value of that format), evaluates the derivative formula the same way as the forward
(float32 numpy for fp32; float64 on stored values for the others) and rounds each input gradient
once to the compute format. Derivatives are taken at the stored inputs, or at the stored
(rounded) output where PyTorch uses the result (exp, sqrt, rsqrt, tanh, sigmoid, softmax,
log_softmax, logsumexp). A **cast node**'s backward casts the incoming gradient to the SOURCE
tensor's format; an implicit promotion (an fp16 input of an fp32 op) behaves the same: the
gradient is rounded to the input's own format. Gradients reaching one tensor from several uses
are added pairwise as they arrive, each addition rounded to its format (as PyTorch's autograd
accumulates them), so three fp16 contributions can sum to a different value than their exact sum
rounded once; ``.grad`` is a Tensor in the tensor's format. So with an fp16 matmul the activation
gradients are fp16 values, and a gradient below 2^-25 reaching an fp16 op becomes 0 -- exactly
where real fp16 training underflows.

**Dispatch policy (the hook for autocast).** :func:`set_dispatch_policy` installs one callback
``policy(op_name, args) -> args`` that :meth:`Function.apply` consults before every op (every
name in :data:`registry` except the cast op), before the compute format is chosen. It may return
the arguments with tensors replaced by ``t.to(fmt)`` (recorded cast nodes, so gradients flow back
to each source in its format) or raise. ``fpsim.amp.autocast`` is built on it.

**In-place ops and versions.** In-place writes are recorded in the graph and count versions as
PyTorch's (``Tensor._version``), optimizer steps and ``nn.init`` included; a backward that needs
a tensor written since raises PyTorch's "modified by an inplace operation" error. Not modelled:
higher-order gradients, in-place writes recorded through a view (refused). Graphs are kept after
``backward`` (as ``retain_graph=True``).
"""

from . import functional, ops
from .creation import (
    arange,
    from_numpy,
    full,
    ones,
    ones_like,
    rand,
    randn,
    zeros,
    zeros_like,
)
from .function import (
    Function,
    backward,
    get_dispatch_policy,
    register_op_observer,
    registry,
    set_dispatch_policy,
)
from .functional import baddbmm, bmm, cat, einsum, maximum, minimum, stack, where
from .generator import default_generator, manual_seed
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .hooks import RemovableHandle
from .precision import (
    get_matmul_accumulation,
    matmul_accumulation,
    promote_formats,
    set_matmul_accumulation,
)
from .tensor import Tensor, tensor

__all__ = [
    "Tensor",
    "tensor",
    "from_numpy",
    "zeros",
    "ones",
    "full",
    "zeros_like",
    "ones_like",
    "rand",
    "randn",
    "arange",
    "manual_seed",
    "default_generator",
    "Function",
    "registry",
    "backward",
    "set_dispatch_policy",
    "get_dispatch_policy",
    "register_op_observer",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "RemovableHandle",
    "matmul_accumulation",
    "get_matmul_accumulation",
    "set_matmul_accumulation",
    "promote_formats",
    "functional",
    "ops",
    "cat",
    "stack",
    "where",
    "bmm",
    "baddbmm",
    "einsum",
    "maximum",
    "minimum",
]
