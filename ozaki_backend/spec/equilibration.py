"""The equilibration rule along k (``docs/spec.md`` §2.1), on exact integers only, for
NumPy and CuPy arrays alike: the reference engine's ``equilibrate`` stage and the
CUDA engine's complex statistics both compute ``S`` with these two functions, so
their bits cannot drift apart. (The CUDA engine's real path computes the same rule in
``kernels/scaling.cu``; the bitwise tests compare it with the reference.)
"""

from __future__ import annotations

import numpy as np

from .certificate import _xp

#: Exponent sentinels for empty columns / rows (outside every float64 exponent).
LOW = -(1 << 20)
HIGH = 1 << 20


def k_exponents(X, axis):
    """``(emax, emin)`` int64 along ``axis``: the largest and smallest frexp exponent
    of the non-zero entries of each column (``axis=0``) or row (``axis=1``) of ``X``;
    :data:`LOW` / :data:`HIGH` where there is none."""
    xp = _xp(X)
    if X.shape[axis] == 0:
        size = X.shape[1 - axis]
        return xp.full(size, LOW, np.int64), xp.full(size, HIGH, np.int64)
    _, e = xp.frexp(X)
    nz = X != 0
    e = e.astype(np.int64)
    return xp.where(nz, e, LOW).max(axis=axis), xp.where(nz, e, HIGH).min(axis=axis)


def shifts_from_exponents(a_max, a_min, b_max, b_min):
    """``S`` (int64, length ``k``) from the per-``k`` exponents of A's columns
    (``a_max``, ``a_min``) and B's rows (``b_max``, ``b_min``), as :func:`k_exponents`
    gives them: ``trunc(((a_k - a) - (b_k - b)) / 2)``, 0 where column or row ``k`` is
    all zero, clamped so that every scaled element stays normal and finite."""
    xp = _xp(a_max)
    both = (a_max != LOW) & (b_max != LOW)
    if not bool(both.any()):
        return xp.zeros(a_max.shape[0], dtype=np.int64)
    d = (a_max - a_max.max()) - (b_max - b_max.max())
    raw = xp.where(both, xp.sign(d) * (xp.abs(d) // 2), 0)
    hi = xp.minimum(xp.maximum(0, a_min + 1021), 1024 - xp.where(both, b_max, 0))
    lo = xp.maximum(-xp.maximum(0, b_min + 1021), xp.where(both, a_max, 0) - 1024)
    return xp.clip(raw, lo, hi).astype(np.int64)
