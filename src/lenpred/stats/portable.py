"""Elementwise exp / expm1 that give the same bits on every x86-64 CPU.

numpy dispatches its float64 ``exp``, ``log``, ``expm1``, ... to hand-written SIMD kernels chosen at
run time: on a CPU with AVX-512 (an Intel Xeon here) ``np.exp`` runs numpy's own AVX-512 kernel,
on an AVX2-only CPU (an AMD EPYC here) it falls back to the C library. The two differ in the last
bit on some inputs. Where such a value decides an event order (a queue key, a synthetic
prediction that a dispatcher sums and compares), the simulator's results then depended on the CPU
(issue 39). These helpers call the C library's ``exp`` / ``expm1`` through :mod:`math` for every
element, which is one code path on every machine (the same glibc); they are slower than numpy's
kernels (~50 ns an element), so use them where the bits matter, not in bulk numerics.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["exp", "expm1"]


def _apply(fn: object, x: np.ndarray | float) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    flat = [fn(v) for v in a.ravel().tolist()]  # type: ignore[operator]
    return np.asarray(flat, dtype=np.float64).reshape(a.shape)


def _exp(v: float) -> float:
    try:
        return math.exp(v)
    except OverflowError:  # numpy's convention: inf, not an exception
        return math.inf


def _expm1(v: float) -> float:
    try:
        return math.expm1(v)
    except OverflowError:
        return math.inf


def exp(x: np.ndarray | float) -> np.ndarray:
    """``e**x`` elementwise, float64, identical bits on every CPU (overflow gives inf)."""
    return _apply(_exp, x)


def expm1(x: np.ndarray | float) -> np.ndarray:
    """``e**x - 1`` elementwise, float64, identical bits on every CPU (overflow gives inf)."""
    return _apply(_expm1, x)
