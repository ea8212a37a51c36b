"""Kernels: the scalar routines (``scalar``) and the array back ends built from them.

``python`` runs the scalar code uncompiled (the reference), ``cpu`` compiles it with numba for
the CPU, ``cuda`` compiles it with numba.cuda. Importing this package compiles nothing.
"""
