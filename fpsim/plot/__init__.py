"""Teaching figures: value ranges, gradient histograms, loss curves, bit fields, number lines.

Every function draws with matplotlib and returns the :class:`matplotlib.figure.Figure`; nothing
is shown or saved (``fig.savefig("out.png")`` is the caller's choice; in Jupyter, run
``%matplotlib inline`` once and a cell that returns a Figure displays it). Figures are made
with :class:`matplotlib.figure.Figure` and an Agg canvas, never through pyplot's global state,
so the module works headless and a notebook shows each figure once. Functions that draw a
single panel accept ``ax=`` to draw into an existing Axes instead (the Figure returned is then
that Axes' figure).

The colours mean the same thing in every figure (:data:`PALETTE`): the *zones* of a format's
number line — values that round to zero (``underflow``), ``subnormal`` values (kept, with fewer
significant bits), ``normal`` values and ``overflow`` (to inf; to NaN in the "fn" formats such
as fp8_e4m3, which have no inf) — and the data drawn over them. Powers of two are written in
mathtext (:math:`2^{-24}`) everywhere, and legends list only what is drawn.

========================================  ====================================================
:func:`plot_range_histogram`              |x| per binade over a format's zones and limits;
                                          the zero bin apart; optionally the shift by a scale
:func:`plot_histograms_side_by_side`      the same histogram under several scales
:func:`plot_layer_histograms`             small multiples, one histogram per layer
:func:`plot_loss_curves`                  loss per step for several recipes (NaN/inf: gaps)
:func:`plot_scale_trajectory`             a loss scale over the steps, skipped steps marked
:func:`plot_format_ranges`                subnormal and normal range of several formats
:func:`plot_bit_fields`                   one number's sign, exponent and mantissa bits
:func:`plot_number_line`                  every representable value, and values per binade
:func:`plot_block_scaling`                one tensor under no, per-tensor and per-block
                                          scaling: windows, what was flushed, block scales
========================================  ====================================================

>>> import numpy as np
>>> from fpsim.stats import RangeHistogram
>>> h = RangeHistogram()
>>> h.add(np.array([0.0, 0.0, 2.0**-30, 3e-8, 1e-6, 0.5]))
>>> fig = plot_range_histogram(h, "fp16", scale=2**15)
>>> fig.canvas.get_width_height()  # 12 × 5 inches at DPI = 100
(1200, 500)
"""

from .common import DPI, PALETTE
from .format_plots import plot_bit_fields, plot_format_ranges, plot_number_line
from .histograms import plot_histograms_side_by_side, plot_layer_histograms, plot_range_histogram
from .scaling_plots import plot_block_scaling
from .training import plot_loss_curves, plot_scale_trajectory

__all__ = [
    "PALETTE",
    "DPI",
    "plot_range_histogram",
    "plot_histograms_side_by_side",
    "plot_layer_histograms",
    "plot_loss_curves",
    "plot_scale_trajectory",
    "plot_format_ranges",
    "plot_bit_fields",
    "plot_number_line",
    "plot_block_scaling",
]
