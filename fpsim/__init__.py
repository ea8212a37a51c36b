"""fpsim: see low-precision floating point and mixed-precision training, bit by bit.

>>> import fpsim
>>> fpsim.round_to(0.1, "fp16")
0.0999755859375
"""

from . import amp, arith, autograd, data, memory, nn, optim
from .amp import GradScaler, autocast, get_autocast_dtype, is_autocast_enabled
from .arith import explain_op, trace_sum
from .autograd import (
    Function,
    Tensor,
    arange,
    cat,
    enable_grad,
    full,
    is_grad_enabled,
    manual_seed,
    matmul_accumulation,
    no_grad,
    ones,
    ones_like,
    rand,
    randn,
    set_grad_enabled,
    stack,
    tensor,
    where,
    zeros,
    zeros_like,
)
from .core import ROUNDING_MODES, from_bits, next_down, next_up, round_to, to_bits, ulp
from .formats import (
    Format,
    bf16,
    fp8_e4m3,
    fp8_e5m2,
    fp16,
    fp32,
    fp64,
    get_format,
    list_formats,
    tf32,
)
from .inspect import Fields, all_values, compare, explain, fields

__version__ = "0.1.0"

__all__ = [
    "Format",
    "get_format",
    "list_formats",
    "fp32",
    "fp16",
    "bf16",
    "tf32",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp64",
    "ROUNDING_MODES",
    "round_to",
    "to_bits",
    "from_bits",
    "next_up",
    "next_down",
    "ulp",
    "Fields",
    "fields",
    "explain",
    "all_values",
    "compare",
    "amp",
    "memory",
    "autocast",
    "GradScaler",
    "is_autocast_enabled",
    "get_autocast_dtype",
    "arith",
    "explain_op",
    "trace_sum",
    "autograd",
    "nn",
    "optim",
    "data",
    "Tensor",
    "Function",
    "tensor",
    "zeros",
    "ones",
    "full",
    "zeros_like",
    "ones_like",
    "rand",
    "randn",
    "arange",
    "manual_seed",
    "cat",
    "stack",
    "where",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "matmul_accumulation",
]
