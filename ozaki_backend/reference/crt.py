"""Stage 4 — CRT reconstruction, the one rounding, and alpha/beta (spec §6–7).

The exact integer ``X`` (``|X| <= H < 2^155``) is held as 8 limbs of 24 bits in int64,
limb-major ``(8, count)`` so that every limb operation runs over contiguous memory:
``X = sum_j L_j 2^{24 j}`` with ``0 <= L_j < 2^24`` for ``j < 7`` and a signed top limb.
Everything is vectorised over the output elements; no floating-point operation ever
holds an inexact part of ``X``.

1. ``S = sum_l c_l f_l`` with symmetric residues ``c_l`` and symmetric CRT
   coefficients ``f_l`` (``f_l = 1 mod p_l``, ``0 mod p_i`` for ``i != l``). In 24-bit
   limbs this is one small float64 GEMM ``(8 x N) @ (N x mn)`` whose entries are
   integers below ``N 128 2^24 < 2^36``: exact.
2. ``X = S - Q M`` with ``Q = rint(S / M)`` estimated in floating point; an exact
   limb comparison against ``±M/2`` then corrects the rare off-by-one, so ``X`` is the
   unique representative in ``[-M/2, M/2)``.
3. ``RN(X 2^-e)`` for ``e = s_i + t_j``: the bits above the rounding position (53
   significant bits, or the 2^-1074 position when the result is subnormal) are
   extracted exactly from the limbs, rounded to nearest even with guard and sticky
   bits, and scaled by an exact ``ldexp`` (which overflows to ±inf exactly when the
   rounded value does).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

LIMB = 24
NLIMB = 8                      # 192 bits: |S| < 2^(155 + 12) plus a sign limb
_MASK = (1 << LIMB) - 1


def _limbs_of(x: int, signed: bool = True):
    sgn = -1 if x < 0 else 1
    x = abs(x)
    out = []
    for _ in range(NLIMB):
        out.append(sgn * (x & _MASK))
        x >>= LIMB
    assert x == 0
    return out


@lru_cache(maxsize=None)
def _tables(moduli: tuple):
    from math import prod

    M = prod(moduli)
    F = np.zeros((len(moduli), NLIMB), dtype=np.float64)
    for l, p in enumerate(moduli):
        Ml = M // p
        f = Ml * pow(Ml % p, -1, p) % M
        if f > M // 2:
            f -= M             # symmetric coefficient keeps the limb sums small
        F[l] = _limbs_of(f)
    Mlimbs = np.array(_limbs_of(M), dtype=np.int64)
    Mhalf = np.array(_limbs_of(M // 2), dtype=np.int64)
    return M, F, Mlimbs, Mhalf


def normalize(L):
    """Carry-propagate limbs ``(8, count)`` in place: ``L_j in [0, 2^24)`` below the
    signed top limb (so the sign of ``X`` is the sign of ``L_7``)."""
    for j in range(NLIMB - 1):
        carry = L[j] >> LIMB                 # arithmetic shift: floor division
        L[j] -= carry << LIMB
        L[j + 1] += carry
    return L


def _limbs_to_float(L):
    """Approximate value of un-normalized limbs, for estimates only — never for results
    (on normalized negative limbs it cancels catastrophically)."""
    return np.ldexp(1.0, LIMB * np.arange(NLIMB)) @ L.astype(np.float64)


def reconstruct(c, moduli):
    """Exact ``X`` as normalized limbs ``(8, m*n)`` int64 from residues ``c (N, m, n)``.

    ``X`` is the unique integer in ``[-M/2, M/2)`` with ``X = c_l mod p_l``.
    """
    moduli = tuple(int(p) for p in moduli)
    M, F, Mlimbs, Mhalf = _tables(moduli)
    N = len(moduli)
    C = c.reshape(N, -1).astype(np.float64)                 # (N, mn)
    p = np.array(moduli, dtype=np.float64)[:, None]
    C -= p * (C > (p - 1) // 2)                             # symmetric residues
    S = F.T @ C                                             # exact: |entries| < 2^36
    # S / M to ~1e-12 absolute (|S| < 64 N M): never used for the result, only to pick
    # Q and to flag the elements whose Q needs an exact check.
    ratio = _limbs_to_float(S) / float(M)
    Q = np.rint(ratio)
    X = S.astype(np.int64)
    X -= Mlimbs[:, None] * Q.astype(np.int64)[None, :]
    normalize(X)
    # Q can be off by one only when |X| is within ~1e-12 M of M/2: settle those exactly.
    near = np.nonzero(np.abs(ratio - Q) > 0.25)[0]
    if near.size:
        Xn = X[:, near]
        hi = normalize(Xn - Mhalf[:, None])[-1] >= 0         # X >= M/2
        lo = normalize(Xn + Mhalf[:, None])[-1] < 0          # X < -M/2
        Xn = Xn - Mlimbs[:, None] * hi + Mlimbs[:, None] * lo
        X[:, near] = normalize(Xn)
    return X


def _bitlen(v):
    """Bit length of non-negative int64 values below 2^53 (exact through frexp)."""
    return np.frexp(v.astype(np.float64))[1].astype(np.int64)


def round_scaled(X, e):
    """``RN(X * 2^-e)`` as float64 for exact limbs ``X (8, count)`` and int64 ``e``.

    Round to nearest, ties to even, once: gradual underflow rounds at 2^-1074, and
    values beyond the float64 range become ±inf.
    """
    neg = X[-1] < 0
    A = normalize(np.where(neg, -X, X))                     # magnitude limbs
    nb = np.zeros(A.shape[1], dtype=np.int64)               # bit length of |X|
    for j in range(NLIMB):
        nb = np.where(A[j] != 0, LIMB * j + _bitlen(A[j]), nb)
    # Lowest kept bit position; r = 0 when |X| < 2^53 and X 2^-e is a multiple of
    # 2^-1074 (then Y is X itself and nothing is rounded).
    r = np.maximum(np.maximum(nb - 53, e - 1074), 0)
    # Y = floor(|X| / 2^r) (< 2^54), guard = bit r-1, sticky = any bit below r-1.
    Y = np.zeros_like(nb)
    guard = np.zeros_like(nb)
    sticky = np.zeros(nb.shape, dtype=bool)
    for j in range(NLIMB):
        sh = LIMB * j - r                                   # where limb j lands in Y
        Y += np.where(sh >= 0, A[j] << np.clip(sh, 0, 62), A[j] >> np.clip(-sh, 0, 63))
        g = -sh - 1                                         # guard bit's place in limb j
        inside = (g >= 0) & (g < LIMB)
        gc = np.clip(g, 0, LIMB - 1)
        guard |= np.where(inside, (A[j] >> gc) & 1, 0)
        sticky |= np.where(inside, (A[j] & ((1 << gc) - 1)) != 0, (g >= LIMB) & (A[j] != 0))
    Y += guard & (sticky | (Y & 1))
    Y = np.where(r > nb, 0, Y)                              # below half an ulp of 0
    with np.errstate(over="ignore"):
        out = np.ldexp(Y.astype(np.float64), np.clip(r - e, -2200, 2200))
    return np.where(neg, -out, out)


def reconstruct_round(c, moduli, s, t):
    """Spec §6 for one product: residues ``c (N, m, n)`` -> float64 ``(m, n)``."""
    _, m, n = c.shape
    if m == 0 or n == 0:
        return np.zeros((m, n))
    X = reconstruct(c, moduli)
    e = (s[:, None] + t[None, :]).reshape(-1).astype(np.int64)
    return round_scaled(X, e).reshape(m, n)


def apply_alpha_beta(C, alpha, beta, C0=None):
    """Spec §7: ``alpha*C + beta*C0`` with BLAS conventions (C0 unread when beta == 0)."""
    alpha = float(alpha)
    beta = float(beta)
    out = C if alpha == 1.0 else alpha * C
    if beta != 0.0:
        out = out + beta * np.asarray(C0, dtype=np.float64)
    return out
