"""Stage 1 — scaling: per-row exponents of A and per-column exponents of B.

Implements ``docs/spec.md`` §2–3. The exponents ``s_i``, ``t_j`` are chosen so that
the truncated integer operands ``A'_ik = trunc(A_ik 2^{s_i})`` and
``B'_kj = trunc(B_kj 2^{t_j})`` satisfy the exactness invariant

    sum_k |A'_ik| |B'_kj| <= H = M/2 - 1        for every (i, j),

which is what makes CRT recovery of the integer product exact. Both rules are built
from exact integer quantities only (frexp exponents, ceilings of power-of-two scaled
magnitudes, exact float64 sums of integers below 2**53), so they are independent of
summation order and scale invariant: multiplying a row of A by 2^e shifts ``s_i`` by
-e and changes nothing else.

Proof of the invariant, fast mode. With ``alpha_ik = ceil(|A_ik| 2^{D-E_i})`` we have
``|A_ik| <= alpha_ik 2^{E_i-D}``, hence
``||2^{s_i} A_i||^2 <= 4^{s_i + E_i - D} S_i = 4^{q_i} S_i <= H_f <= H`` by the choice
of ``q_i``; the same holds for the columns of B, and Cauchy–Schwarz gives
``sum_k |A'_ik||B'_kj| <= ||2^{s_i}A_i|| ||2^{t_j}B_j|| <= H``.

Proof, accurate mode. ``P = alpha beta`` bounds the product of magnitudes:
``sum_k |A_ik||B_kj| <= 2^{E_i + F_j - 2D} P_ij``; with ``sigma_i = s_i + E_i - D`` and
``tau_j = t_j + F_j - D`` the rule guarantees ``sigma_i + tau_j <= lambda(P_ij)`` for
every ``P_ij > 0``, so ``sum_k |A'_ik||B'_kj| <= 2^{lambda(P_ij)} P_ij <= H_f <= H``; where
``P_ij = 0`` every term is zero. Truncation only shrinks magnitudes, so the bounds
hold for ``A'``, ``B'``.
"""

from __future__ import annotations

import numpy as np

from ..spec.moduli import crt_constants, lambda_exponent
from ..spec.rules import ACCURATE_D, fast_quant_bits

_NO_EXP = np.iinfo(np.int64).min
_SPREAD_BLOCK = 1 << 20   # elements per block of row_spreads' temporaries


def row_exponents(A):
    """``(E, nonzero_row)``: max frexp exponent of each row's non-zero entries.

    ``|A_ik| < 2^{E_i}`` for every k; ``E_i = 0`` for an all-zero row.
    """
    _, e = np.frexp(A)
    e = np.where(A != 0, e.astype(np.int64), _NO_EXP)
    if A.shape[1] == 0:
        E = np.full(A.shape[0], _NO_EXP, dtype=np.int64)
    else:
        E = e.max(axis=1)
    nz = E != _NO_EXP
    return np.where(nz, E, 0), nz


def row_spreads(X):
    """Exponent spread ``d_i = E_i - floor(sum_k e_ik / c_i)`` of each row (spec §1).

    ``e_ik`` are the frexp exponents of the row's ``c_i`` non-zero entries and ``E_i``
    their maximum, so ``d_i`` is how many binades the row's maximum lies above the
    (floored) mean exponent of its entries. Exact integer arithmetic: the sum is an
    int64 (``|e| <= 1074``), the mean is floor division. ``d_i = 0`` for an all-zero
    row (and for an empty one). Always ``d_i >= 0``.
    """
    X = np.asarray(X)
    rows, cols = X.shape
    out = np.zeros(rows, dtype=np.int64)
    if cols == 0:
        return out
    step = max(1, _SPREAD_BLOCK // cols)   # row blocks: bounded temporaries
    for r0 in range(0, rows, step):
        x = X[r0:r0 + step]
        _, e = np.frexp(x)
        nz = x != 0
        e = e.astype(np.int64)
        cnt = nz.sum(axis=1, dtype=np.int64)
        tot = np.where(nz, e, 0).sum(axis=1)
        E = np.where(nz, e, _NO_EXP).max(axis=1)
        d = E - np.floor_divide(tot, np.maximum(cnt, 1))
        out[r0:r0 + step] = np.where(cnt > 0, d, 0)
    return out


def exponent_spread(A, B) -> int:
    """The exponent spread of a product ``A @ B`` (spec §1): the largest
    :func:`row_spreads` over the rows of ``A`` and the columns of ``B``; 0 when both
    are empty or all zero. ``precision="fp64"`` picks the moduli count from it."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    best = 0
    for X in (A, B.T):
        if X.size:
            best = max(best, int(row_spreads(X).max()))
    return best


def quantize(A, E, D: int):
    """``alpha_ik = max(1, ceil(|A_ik| 2^{D-E_i}))`` for non-zero entries, else 0.

    Exact: ldexp is exact unless the result underflows, and then the true value is
    below 1, whose ceiling is 1 — which the ``max(1, .)`` restores.
    """
    x = np.ldexp(np.abs(A), (D - E)[:, None])
    alpha = np.maximum(np.ceil(x), 1.0)
    alpha[A == 0] = 0.0
    return alpha


def _q_from_sumsq(S, H_f: float):
    """Largest ``q`` with ``ldexp(S, 2q) <= H_f`` for float64 integers ``S > 0``."""
    return lambda_exponent(S, H_f) // 2


def shifts_fast(A, B, n_moduli: int):
    """Exponents ``(s, t)`` of the fast (Cauchy–Schwarz) rule, spec §2."""
    H_f = crt_constants(n_moduli).H_f
    k = A.shape[1]
    D = fast_quant_bits(k)
    out = []
    for X in (A, B.T):
        E, nz = row_exponents(X)
        S = np.square(quantize(X, E, D)).sum(axis=1)
        q = _q_from_sumsq(np.where(nz, S, 1.0), H_f)
        out.append(np.where(nz, q + D - E, 0).astype(np.int64))
    return out[0], out[1]


def bound_matrix(A, B):
    """Accurate mode's bound GEMM: ``(P, E, F, nzA, nzB)`` with ``P = alpha @ beta``.

    ``P`` is an exact integer matrix (``k 64^2 < 2^53``), computed here in float64.
    """
    D = ACCURATE_D
    E, nzA = row_exponents(A)
    F, nzB = row_exponents(B.T)
    alpha = quantize(A, E, D)
    beta = quantize(B.T, F, D).T
    return alpha @ beta, E, F, nzA, nzB


def shifts_accurate(A, B, n_moduli: int):
    """Exponents ``(s, t)`` of the accurate (bound GEMM) rule, spec §2."""
    H_f = crt_constants(n_moduli).H_f
    D = ACCURATE_D
    P, E, F, nzA, nzB = bound_matrix(A, B)
    m, n = P.shape
    r = np.maximum(P.max(axis=1) if n else np.zeros(m), 1.0)
    sigma = lambda_exponent(r, H_f) // 2
    lam1 = int(lambda_exponent(np.array([1.0]), H_f)[0])
    big = np.iinfo(np.int64).max
    if m:
        lamP = np.where(P > 0, lambda_exponent(np.where(P > 0, P, 1.0), H_f), big)
        tau = np.min(np.where(P > 0, lamP - sigma[:, None], big), axis=0)
    else:
        tau = np.full(n, big, dtype=np.int64)
    tau = np.where(tau == big, lam1 - lam1 // 2, tau)
    s = np.where(nzA, sigma + D - E, 0).astype(np.int64)
    t = np.where(nzB, tau + D - F, 0).astype(np.int64)
    return s, t


def exponents(A, B, plan):
    """Row exponents ``s`` (m,) of A and column exponents ``t`` (n,) of B for ``plan``
    (an adaptive ``precision="fp64"`` plan first picks its moduli count from the
    operands' exponent spread, :meth:`~ozaki_backend.plan.Plan.for_spread`)."""
    plan = plan.for_spread(exponent_spread(A, B))
    n_moduli = len(plan.moduli)
    if plan.mode == "fast":
        return shifts_fast(A, B, n_moduli)
    return shifts_accurate(A, B, n_moduli)


def truncate(A, s):
    """``trunc(A_ik 2^{s_i})`` row-wise, as exact integers held in float64.

    ldexp only rounds below 2^-1022, where trunc gives 0 whatever the rounding.
    For B use ``truncate(B.T, t).T``.
    """
    return np.trunc(np.ldexp(A, s[:, None]))
