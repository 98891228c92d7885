"""Stage 2 — residues: the integer operands modulo each modulus, as int8 planes.

Spec §4: symmetric residues, ``[-(p-1)/2, (p-1)/2]`` for odd ``p`` and
``[-128, 127]`` for ``p = 256``. An integer held in a float64 is ``mant * 2^q`` with an
integer mantissa ``|mant| < 2^53`` and ``q >= 0``, so
``x mod p = (mant mod p) (2^q mod p) mod p`` in int64 arithmetic: exact for any
magnitude and far faster than ``fmod`` on huge values (whose cost grows with the
exponent gap).
"""

from __future__ import annotations

import numpy as np


def _mantissa_exponent(x):
    """``(mant, q)`` int64 with ``x = mant * 2^q`` exactly, ``q >= 0``, for integers ``x``."""
    f, e = np.frexp(x)
    big = np.abs(x) >= 2.0**53
    mant = np.where(big, np.ldexp(f, 53), x).astype(np.int64)
    q = np.where(big, e.astype(np.int64) - 53, 0)
    return mant, q


def _symmetric(r, p: int):
    """Map ``r in [0, p)`` to the symmetric range."""
    return np.where(r > (p - 1) // 2, r - p, r)


def residues(Aint, moduli):
    """int8 array ``(N, rows, cols)``: ``Aint mod p_l`` for each modulus, symmetric.

    Parameters
    ----------
    Aint : ndarray of float64
        Exact integers (the truncated, scaled operand).
    moduli : sequence of int
    """
    out = np.empty((len(moduli),) + Aint.shape, dtype=np.int8)
    mant, q = _mantissa_exponent(Aint)
    qmax = int(q.max()) if q.size else 0
    for l, p in enumerate(moduli):
        r = mant % p                             # Python-style %: in [0, p)
        if qmax:                                 # some |x| >= 2^53: times 2^q mod p
            pow2 = np.array([pow(2, i, p) for i in range(qmax + 1)], dtype=np.int64)
            r = r * pow2[q] % p
        out[l] = _symmetric(r, p)
    return out
