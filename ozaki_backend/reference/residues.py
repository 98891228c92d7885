"""Stage 2 — residues: the integer operands modulo each modulus, as int8 planes.

Spec §4: symmetric residues, ``[-(p-1)/2, (p-1)/2]`` for odd ``p`` and
``[-128, 127]`` for ``p = 256``. Everything is exact float64 arithmetic, for all
moduli at once and over cache-sized blocks of elements:

1. An integer ``x`` held in a float64 is split into 26-bit digits
   ``x = sum_j h_j 2^{c_j}``, ``|h_j| < 2^26`` (``h = trunc(x 2^-c)`` and the remainder
   ``x - h 2^c`` are subsets of the bits of ``x``, hence exact). The truncated operands
   have at most about 110 significant bits: at most five digits, usually three.
2. For every modulus at once, ``y = W @ H`` with ``W_lj = 2^{c_j} mod p_l`` in the
   symmetric range (``|W| <= 128``): one small float64 GEMM whose terms and partial
   sums are integers below ``5 * 2^33 < 2^53``, so it is exact in any order;
   ``y = x mod p_l``.
3. For an integer ``|y| < 2^48``: ``r = y - p floor(y fl(1/p) + 0.5)`` is the symmetric
   residue. For ``p = 256`` every step is exact and ``r in [-128, 127]``. For odd ``p``
   write ``y/p = n + j/p`` with ``|j| <= (p-1)/2``; then ``y/p + 1/2`` lies at least
   ``1/(2p)`` from every integer, while the three roundings move it by at most
   ``3.01 u |y/p| + 0.51 u < 2^-5/p`` (``u = 2^-53``), so ``floor`` returns ``n``
   exactly; ``p n`` and the subtraction are exact (``< 2^53``).
"""

from __future__ import annotations

import numpy as np

_DIGIT = 26
_BLOCK = 1 << 16          # elements per (modulus x block) temporary: stays in cache


def _digits(x):
    """``(H, c)``: rows ``H_j`` and exponents ``c_j`` with ``x = sum_j H_j 2^{c_j}``
    exactly, ``|H_j| < 2^26`` integers (the last ``c_j`` is 0)."""
    rows, cs = [], []
    rem = x
    while True:
        amax = float(np.max(np.abs(rem))) if rem.size else 0.0
        if amax < 2.0**_DIGIT:
            rows.append(rem)
            cs.append(0)
            return np.stack(rows), cs
        c = int(np.frexp(amax)[1]) - _DIGIT      # |rem 2^-c| < 2^26
        h = np.trunc(rem * 2.0**-c)              # exact power-of-two scaling, trunc
        rows.append(h)
        cs.append(c)
        rem = rem - h * 2.0**c                   # exact: the low c bits of rem


def _sym_int(v: int, p: int) -> int:
    r = v % p
    return r - p if r > (127 if p == 256 else (p - 1) // 2) else r


def residues(Aint, moduli):
    """int8 array ``(N, rows, cols)``: ``Aint mod p_l`` for each modulus, symmetric.

    Parameters
    ----------
    Aint : ndarray of float64
        Exact integers (the truncated, scaled operand).
    moduli : sequence of int
    """
    x = np.asarray(Aint, dtype=np.float64)
    N = len(moduli)
    out = np.empty((N,) + x.shape, dtype=np.int8)
    if x.size == 0:
        return out
    flat = np.ascontiguousarray(x).reshape(-1)
    res = out.reshape(N, -1)
    mods = [int(q) for q in moduli]
    p = np.array(mods, dtype=np.float64)[:, None]
    ip = 1.0 / p
    step = max(1, _BLOCK // N)
    weights = {}
    for b0 in range(0, flat.size, step):
        H, cs = _digits(flat[b0:b0 + step])
        key = tuple(cs)
        if key not in weights:
            weights[key] = np.array([[_sym_int(pow(2, c, q), q) for c in cs] for q in mods],
                                    dtype=np.float64)
        y = weights[key] @ H                     # exact: integers below 2^36
        r = y * ip
        r += 0.5
        np.floor(r, out=r)
        r *= p
        np.subtract(y, r, out=y)                 # symmetric residue
        res[:, b0:b0 + step] = y
    return out
