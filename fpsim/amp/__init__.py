"""Automatic mixed precision with PyTorch's semantics: ``autocast``, ``GradScaler``, master
weights, and a training helper that runs one loop under any precision recipe.

>>> import fpsim
>>> from fpsim import amp, nn, optim
>>> from fpsim.nn import functional as F
>>> X, Y = amp.underflow_task(512, seed=0)
>>> model = amp.underflow_model(seed=0)
>>> opt = optim.Adam(model.parameters(), lr=3e-3)
>>> scaler = amp.GradScaler("cuda")
>>> for xb, yb in fpsim.data.batches(X, Y, batch_size=64, seed=0):
...     with amp.autocast("cuda", dtype=fpsim.fp16):
...         loss = F.mse_loss(model(xb), yb)
...     opt.zero_grad()
...     scaler.scale(loss).backward()
...     scaler.step(opt)
...     scaler.update()
>>> scaler.get_scale(), loss.format.name
(65536.0, 'fp32')

What is here
------------
* :class:`autocast` (also ``fpsim.autocast``), :func:`is_autocast_enabled`,
  :func:`get_autocast_dtype`, :func:`policy_table`, :func:`op_policy` -- per-op precision by
  PyTorch's tables for "cpu" and "cuda" (:mod:`fpsim.amp.autocast_mode`);
* :class:`GradScaler` (also ``fpsim.GradScaler``) -- dynamic loss scaling, PyTorch's state
  machine, numbers and error messages; :class:`StaticGradScaler` -- a fixed scale
  (:mod:`fpsim.amp.grad_scaler`); the two kernels it runs, in :mod:`fpsim.amp.functional`;
* :class:`MasterWeights` -- an fp16 model with fp32 master weights in the optimizer (the
  scheme of Micikevicius et al. 2018), composable with loss scaling;
* :func:`train` with the :data:`RECIPES` fp32 / fp16 / fp16_static / fp16_dynamic / bf16 /
  fp16_master / fp8_e4m3 / fp8_e5m2 (the fp8 ones beyond PyTorch), returning per-step losses,
  scales, skipped steps and optional gradient records, with callbacks after backward and after
  each step (:mod:`fpsim.amp.training`);
* :func:`underflow_task` / :func:`underflow_model` -- a regression whose fp16 gradients
  underflow (most activation gradients fall below 2^-24 without loss scaling);
* :class:`FormatTrace` -- the format of every op's inputs and outputs, forward and backward;
* :mod:`fpsim.amp.recipes` -- low-precision GEMM recipes (FP8 current / delayed scaling, MXFP8,
  NVFP4): one quantizer per operand role, used by :func:`fpsim.torch.emulate` and by
  :mod:`fpsim.amp.fp8`;
* :func:`convert_to_fp8` / :func:`fp8_training` / :class:`fp8_autocast` -- FP8 and MX training
  in fpsim's engine: Linear layers whose three GEMMs run on quantized operands, with the
  recipe's state inspectable (:mod:`fpsim.amp.fp8`), summed in fp32 or, with
  ``accumulation=``, on a tensor core model (:mod:`fpsim.amp.fp8_gemm`); the GEMM recipe class
  is exported as :class:`GemmRecipe` (:func:`get_gemm_recipe`), apart from the training
  :class:`Recipe`.

Design decisions (and where fpsim differs from PyTorch)
-------------------------------------------------------
* **One simulated device.** ``device_type`` selects the policy table and the default dtype
  ("cuda": fp16, "cpu": bf16) and the region applies to *all* fpsim tensors (they have no
  device). With regions of both device types enabled, the innermost enabled one wins.
* **Beyond PyTorch:** autocast accepts any format narrower than fp32 (fp8_e4m3, fp8_e5m2, ...);
  LOW ops and their backward then run in it. ``StaticGradScaler`` and the fp8 recipes have no
  PyTorch counterpart.
* **The scale** is a float32 value held in a one-element numpy array, updated by the
  ``_amp_update_scale_`` kernel with float64 arithmetic; ``scale(outputs)`` multiplies by it as
  a 0-dim fp32 tensor, as PyTorch does. By the promotion rule a dimensioned fp16 output stays
  fp16 (and can overflow there), while a 0-dim fp16 loss becomes fp32 (2.0 scales to 131072.0,
  not to fp16's inf).
* **Master weights + loss scaling.** GradScaler refuses fp16 gradients, as PyTorch does (and
  unscaling in fp16 would underflow again). :class:`MasterWeights` keeps fp32 master parameters
  *as the optimizer's parameters*: after backward the fp16 gradients are copied exactly into the
  masters' fp32 ``.grad``, where the scaler checks and unscales them; the optimizer updates the
  masters in fp32; the masters are rounded once into the fp16 model. (The optimizers' own
  ``master_weights=True`` keeps masters internally and suits unscaled training.) With fp32
  parameters, autocast computes exactly what this scheme computes: on the underflow task the
  ``fp16_master`` and ``fp16_dynamic`` recipes give bit-identical losses.
"""

from . import functional, recipes
from .autocast_mode import (
    DEVICE_TYPES,
    ERROR,
    FP32,
    LOW,
    POLICIES,
    PROMOTE,
    UNTOUCHED,
    WIDEST,
    autocast,
    clear_autocast_cache,
    get_autocast_dtype,
    is_autocast_cache_enabled,
    is_autocast_enabled,
    op_policy,
    policy_table,
    set_autocast_cache_enabled,
    set_autocast_dtype,
    set_autocast_enabled,
)
from .fp8 import (
    GEMM_RECIPES,
    FP8Layer,
    FP8Layers,
    GemmRecipe,
    convert_to_fp8,
    fp8_autocast,
    fp8_training,
    get_gemm_recipe,
    is_fp8_enabled,
    unconvert_fp8,
)
from .grad_scaler import GradScaler, OptState, StaticGradScaler
from .trace import FormatTrace, TraceEvent
from .training import (
    RECIPES,
    MasterWeights,
    Recipe,
    Scale,
    StepState,
    TrainResult,
    recipe,
    train,
    underflow_model,
    underflow_task,
)

__all__ = [
    "autocast",
    "is_autocast_enabled",
    "set_autocast_enabled",
    "get_autocast_dtype",
    "set_autocast_dtype",
    "is_autocast_cache_enabled",
    "set_autocast_cache_enabled",
    "clear_autocast_cache",
    "op_policy",
    "policy_table",
    "POLICIES",
    "DEVICE_TYPES",
    "LOW",
    "FP32",
    "PROMOTE",
    "WIDEST",
    "UNTOUCHED",
    "ERROR",
    "GradScaler",
    "StaticGradScaler",
    "OptState",
    "functional",
    "recipes",
    "FormatTrace",
    "TraceEvent",
    "MasterWeights",
    "Recipe",
    "RECIPES",
    "recipe",
    "train",
    "StepState",
    "TrainResult",
    "underflow_task",
    "underflow_model",
    "Scale",
    "GemmRecipe",
    "GEMM_RECIPES",
    "get_gemm_recipe",
    "FP8Layer",
    "FP8Layers",
    "convert_to_fp8",
    "unconvert_fp8",
    "fp8_training",
    "fp8_autocast",
    "is_fp8_enabled",
]
