"""The format as the scalar kernels take it: one small record of integers.

:class:`fpsim.Format` describes a format by named properties; :attr:`fpsim.Format.record`
turns them into the integers the scalar code needs, precomputed once, so the kernels never
re-derive where the special codes sit. The record is a ``namedtuple`` of ``int64``: numba types
it as one tuple type (one compilation for every format, on the CPU and on CUDA) and it reads
the same in pure Python. A container layout (float32, float64) is the record of fp32 / fp64.

A *magnitude code* is a code without its sign bit (``exp_bits + man_bits`` bits); the magnitude
codes are ordered like the magnitudes, so "the largest finite value" and "the NaN codes" are
thresholds on it.
"""

from collections import namedtuple

from numba.extending import register_jitable

FormatRecord = namedtuple(
    "FormatRecord",
    [
        "exp_bits",  # exponent field width
        "man_bits",  # stored fraction width (0 for E8M0)
        "bias",  # exponent bias
        "signed",  # 1: a sign bit above the magnitude bits; 0: unsigned (E8M0)
        "has_subnormals",  # 1: exponent field 0 is zero and subnormals; 0: an ordinary binade
        "max_mag",  # the magnitude code of the largest finite value
        "inf_mag",  # the magnitude code of infinity, -1 if the format has none
        "nan_mag",  # magnitude codes >= nan_mag are NaN (2^(exp_bits+man_bits) if none are)
        "qnan_mag",  # the magnitude code of the NaN fpsim writes, -1 if not a high code
        "negzero_nan",  # 1: the code of -0 (sign bit alone) is the format's one NaN (fnuz)
    ],
)

# The IEEE containers, written out (fp32 and fp64 as Format(...).record gives them).
FLOAT32 = FormatRecord(8, 23, 127, 1, 1, 0x7F7FFFFF, 0x7F800000, 0x7F800001, 0x7FC00000, 0)
FLOAT64 = FormatRecord(
    11, 52, 1023, 1, 1, 0x7FEFFFFFFFFFFFFF, 0x7FF0000000000000, 0x7FF0000000000001,
    0x7FF8000000000000, 0,
)  # fmt: skip


# numba's parallel loops (prange) cannot take a named tuple among the values they capture
# ("scalar type FormatRecord given for non scalar argument"): the parallel kernels take their
# records as one flat tuple of int64 and rebuild them inside each task with ``unflatten``.
def flatten(params: tuple) -> tuple:
    """Records and integers as one flat tuple of Python ints (records' fields in order)."""
    out: list[int] = []
    for p in params:
        if isinstance(p, tuple):
            out.extend(int(v) for v in p)
        else:
            out.append(int(p))
    return tuple(out)


@register_jitable
def unflatten(t, i):
    """The FormatRecord stored in the flat tuple ``t`` from index ``i``."""
    return FormatRecord(t[i], t[i + 1], t[i + 2], t[i + 3], t[i + 4], t[i + 5], t[i + 6],
                        t[i + 7], t[i + 8], t[i + 9])  # fmt: skip


NFIELDS = len(FormatRecord._fields)
