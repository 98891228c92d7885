"""Stage 4 — CRT reconstruction and the one rounding (spec §6; alpha/beta, §7, are
``ozaki_backend.semantics.apply_alpha_beta``).

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
   extracted exactly from the limbs (regrouped in 48-bit chunks), rounded to nearest
   even with guard and sticky bits, and scaled by an exact ``ldexp`` (which overflows
   to ±inf exactly when the rounded value does).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..spec.complex_moduli import COMPLEX_MODULI, complex_crt_constants
from ..spec.moduli import MODULI, crt_constants

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
    if moduli == MODULI[:len(moduli)]:
        cc = crt_constants(len(moduli))
    elif moduli == COMPLEX_MODULI[:len(moduli)]:
        cc = complex_crt_constants(len(moduli))      # the complex scheme (spec §11)
    else:
        raise ValueError(f"the moduli must be a prefix of the table {MODULI} or of "
                         f"{COMPLEX_MODULI}; got {moduli}")
    M = cc.M
    F = np.zeros((len(moduli), NLIMB), dtype=np.float64)
    for l, w in enumerate(cc.weights):
        # The symmetric representative keeps the limb sums small.
        F[l] = _limbs_of(w - M if w > M // 2 else w)
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


_W = 2 * LIMB                  # 48-bit chunks (two limbs): exact in int64 and float64
_NCH = NLIMB // 2
#: Elements per CRT block: the (8, block) int64 limb arrays stay cache-resident.
BLOCK = 1 << 14


def round_scaled(X, e):
    """``RN(X * 2^-e)`` as float64 for exact limbs ``X (8, count)`` and int64 ``e``.

    Round to nearest, ties to even, once: gradual underflow rounds at 2^-1074, and
    values beyond the float64 range become ±inf.

    The magnitude is regrouped into four 48-bit chunks ``P_j`` (base 2^48, exact in
    int64). With ``nb`` the bit length of ``|X|`` and ``r`` the lowest kept bit position
    (53 significant bits, never below 2^-1074), ``Y = floor(|X| / 2^r) < 2^54`` lies in
    at most three consecutive chunks, gathered per element; the guard bit ``r - 1`` is
    in one chunk, and the sticky bit is its lower bits or any non-zero chunk below.
    """
    P = X[0::2] + (X[1::2] << LIMB)        # chunks in [0, 2^48) below a signed top
    neg = P[-1] < 0
    P = np.where(neg, -P, P)
    for j in range(_NCH - 1):              # renormalise the magnitude, base 2^48
        c = P[j] >> _W                     # arithmetic shift: floor division
        P[j] -= c << _W
        P[j + 1] += c
    cnt = P.shape[1]
    nz = P != 0
    top = np.where(nz, np.arange(_NCH)[:, None], -1).max(axis=0)   # top chunk, or -1
    ptop = np.take_along_axis(P, np.maximum(top, 0)[None, :], axis=0)[0]
    # Bit length of |X| (frexp is exact on chunks below 2^48).
    nb = np.where(top >= 0, _W * top + np.frexp(ptop.astype(np.float64))[1], 0)
    # Lowest kept bit position; r = 0 when |X| < 2^53 and X 2^-e is a multiple of
    # 2^-1074 (then Y is X itself and nothing is rounded).
    r = np.maximum(np.maximum(nb - 53, e - 1074), 0)
    Pp = np.concatenate([P, np.zeros((3, cnt), dtype=np.int64)])   # reads past the top: 0
    last = Pp.shape[0] - 1

    def chunk(j):
        return np.take_along_axis(Pp, np.minimum(j, last)[None, :], axis=0)[0]

    j0, off = r // _W, r % _W
    Y = chunk(j0) >> off
    Y += chunk(j0 + 1) << (_W - off)       # shift 1..48; the bits land below 2^54
    sh2 = 2 * _W - off                     # 49..96: only off > 42 can contribute
    Y += np.where(sh2 < 63, chunk(j0 + 2) << np.minimum(sh2, 62), 0)
    g = np.maximum(r - 1, 0)               # guard bit position
    jg, og = g // _W, g % _W
    cg = chunk(jg)
    guard = np.where(r >= 1, (cg >> og) & 1, 0)
    below = np.logical_or.accumulate(nz, axis=0)        # any non-zero chunk <= j
    lower = np.take_along_axis(below, np.clip(jg - 1, 0, _NCH - 1)[None, :], axis=0)[0]
    sticky = (r >= 1) & (((cg & ((np.int64(1) << og) - 1)) != 0) | ((jg >= 1) & lower))
    Y += guard & (sticky | (Y & 1))
    with np.errstate(over="ignore"):
        out = np.ldexp(Y.astype(np.float64), np.clip(r - e, -2200, 2200))
    return np.where(neg, -out, out)


def reconstruct_round(c, moduli, s, t):
    """Spec §6 for one product: residues ``c (N, m, n)`` -> float64 ``(m, n)``.

    Elements are independent, so they are processed in blocks of ``BLOCK`` (same
    bits, several times faster than whole-matrix limb arrays).
    """
    N, m, n = c.shape
    if m == 0 or n == 0:
        return np.zeros((m, n))
    e = (s[:, None] + t[None, :]).reshape(-1).astype(np.int64)
    cf = c.reshape(N, m * n)
    out = np.empty(m * n)
    for b0 in range(0, m * n, BLOCK):
        X = reconstruct(cf[:, b0:b0 + BLOCK], moduli)
        out[b0:b0 + BLOCK] = round_scaled(X, e[b0:b0 + BLOCK])
    return out.reshape(m, n)
