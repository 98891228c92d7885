"""Stage 1 — scaling: the operands' statistics and the row / column exponents.

Implements ``docs/spec.md`` §2–3 on equilibrated operands (``equilibrate.py``). One
pass over A and B gives the integer statistics both the scaling and the certificate
(``certificate.py``) need (:func:`statistics`):

* ``E_i`` / ``F_j``: the largest frexp exponent of row ``i`` of A / column ``j`` of B;
* ``x_i`` / ``y_j``: the smallest shift making the row / column exact integers;
* the bound GEMM ``P = alpha beta`` of the floor-quantised magnitudes
  ``alpha_ik = floor(|A_ik| 2^{7-E_i})`` (int8), with the row sums ``SA_i`` and
  non-zero counts ``nA_i`` (columns of B alike): ``2^{E_i+F_j-14} P_ij`` is a lower
  and ``2^{E_i+F_j-14} U_ij`` an upper bound of ``(|A||B|)_ij``, where
  ``U_ij = P_ij + SA_i + SB_j + min(nA_i, nB_j)``;
* fast mode only: the sums of squares ``S_i`` of the ceiling-quantised magnitudes;
* the number ``zA_i`` of non-zero entries below the bound GEMM's window (``alpha_ik =
  0``): the certificate's gathers run on data where most entries are.

The exponents ``s_i``, ``t_j`` of a moduli count (:func:`shifts`) make the truncated
integer operands ``A'_ik = trunc(A_ik 2^{s_i})``, ``B'_kj = trunc(B_kj 2^{t_j})``
satisfy the exactness invariant

    sum_k |A'_ik| |B'_kj| <= H = M/2 - 1        for every (i, j),

which is what makes CRT recovery of the integer product exact. Every rule is built
from exact integer quantities (frexp exponents, floors and ceilings of power-of-two
scaled magnitudes, exact float64 sums of integers below 2**53), so it is independent of
summation order and scale invariant: multiplying a row of A by 2^e shifts ``s_i`` by -e
and changes nothing else.

Proof of the invariant, fast mode. With ``a_ik = ceil(|A_ik| 2^{D-E_i})`` we have
``|A_ik| <= a_ik 2^{E_i-D}``, hence
``||2^{s_i} A_i||^2 <= 4^{s_i + E_i - D} S_i = 4^{q_i} S_i <= H_f <= H`` by the choice
of ``q_i``; the same holds for the columns of B, and Cauchy–Schwarz gives
``sum_k |A'_ik||B'_kj| <= ||2^{s_i}A_i|| ||2^{t_j}B_j|| <= H``.

Proof, accurate mode. ``sum_k |A_ik||B_kj| <= 2^{E_i + F_j - 14} U_ij``; with
``sigma_i = s_i + E_i - 7`` and ``tau_j = t_j + F_j - 7`` the rule guarantees
``sigma_i + tau_j <= lambda(U_ij)`` for every ``U_ij > 0``, so
``sum_k |A'_ik||B'_kj| <= 2^{lambda(U_ij)} U_ij <= H_f <= H``; where ``U_ij = 0`` every
term is zero. Truncation only shrinks magnitudes, so the bounds hold for ``A'``, ``B'``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..spec.moduli import crt_constants, lambda_exponent
from ..spec.rules import BOUND_D, fast_quant_bits

_NO_EXP = np.iinfo(np.int64).min
#: "Exact at every shift": the exactness threshold of an all-zero row or column.
NO_THRESHOLD = -(1 << 31)


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


def exact_thresholds(X):
    """``x_i``: the smallest shift ``s`` with every ``X_ik 2^s`` an integer (spec §10.1).

    For ``x = f 2^e`` (frexp) with the 53-bit integer significand ``M = f 2^53`` having
    ``z`` trailing zero bits, ``x 2^s`` is an integer exactly when ``s >= 53 - e - z``
    (for subnormals this is ``1074 - tz(m)``, ``x = m 2^-1074``). :data:`NO_THRESHOLD`
    for an all-zero (or empty) row.
    """
    X = np.asarray(X, dtype=np.float64)
    f, e = np.frexp(X)
    M = np.ldexp(np.abs(f), 53).astype(np.int64)      # exact: an integer below 2^53
    low = M & -M                                      # lowest set bit (0 for x = 0)
    z = np.frexp(low.astype(np.float64))[1] - 1       # its position (exact: a power of 2)
    thr = np.where(X != 0, 53 - e.astype(np.int64) - z, NO_THRESHOLD)
    if X.shape[1] == 0:
        return np.full(X.shape[0], NO_THRESHOLD, dtype=np.int64)
    return thr.max(axis=1)


def k_ranges(X):
    """``(lo, hi)`` int64: the first and last column of a non-zero entry of each row of
    ``X`` (``cols`` and ``-1`` for an all-zero row)."""
    X = np.asarray(X)
    rows, cols = X.shape
    nz = X != 0
    idx = np.arange(cols, dtype=np.int64)
    lo = np.where(nz, idx[None, :], cols).min(axis=1) if cols else np.zeros(rows, np.int64)
    hi = np.where(nz, idx[None, :], -1).max(axis=1) if cols else np.full(rows, -1, np.int64)
    return lo.astype(np.int64), hi.astype(np.int64)


def quantize(A, E, D: int):
    """``alpha_ik = max(1, ceil(|A_ik| 2^{D-E_i}))`` for non-zero entries, else 0.

    Exact: ldexp is exact unless the result underflows, and then the true value is
    below 1, whose ceiling is 1 — which the ``max(1, .)`` restores.
    """
    x = np.ldexp(np.abs(A), (D - E)[:, None])
    alpha = np.maximum(np.ceil(x), 1.0)
    alpha[A == 0] = 0.0
    return alpha


def quantize_down(A, E):
    """``alpha_ik = floor(|A_ik| 2^{7-E_i})`` in ``[0, 127]`` (the bound GEMM's operand).

    Exact: ldexp only rounds below 2^-1022, where the floor is 0 either way.
    """
    return np.floor(np.ldexp(np.abs(A), (BOUND_D - E)[:, None]))


class Statistics(NamedTuple):
    """The integer statistics of one product (spec §2.3, §10), as the CPU engine holds
    them (the CUDA engine holds the same numbers on the device).

    Attributes
    ----------
    k : int
    E, F : int64 (m,), (n,)
        Row exponents of A, column exponents of B (0 for all-zero ones).
    nzA, nzB : bool (m,), (n,)
        Which rows of A / columns of B have a non-zero entry.
    xA, yB : int64 (m,), (n,)
        Exactness thresholds (:func:`exact_thresholds`).
    SA, nA : float64 (m,)
        Row sums of ``alpha`` and non-zero counts of A's rows (exact integers).
    SB, nB : float64 (n,)
    P : float64 (m, n)
        The bound GEMM ``alpha beta`` (exact integers below 2^53).
    U : float64 (m, n)
        ``P + SA_i + SB_j + min(nA_i, nB_j)``, 0 where a row or column is all zero.
    SqA, SqB : float64 (m,), (n,) or None
        Fast mode: sums of squares of ``ceil(|x| 2^{D-E})``, ``D = fast_quant_bits(k)``.
    zA, zB : float64 (m,), (n,)
        Non-zero entries whose ``alpha`` is 0 (below the bound GEMM's window).
    loA, hiA, loB, hiB : int64
        The non-zero ranges along k (:func:`k_ranges`).
    symmetric : bool
        ``B`` is ``A.T`` (a symmetric product, :func:`shifts` gives ``t = s``).
    S2A, S2B : float64 (m,), (n,) or None
        Row sums of ``alpha^2`` (exact integers; the certificate's 2-norm bound,
        :func:`~ozaki_backend.spec.certificate.norm_factor`); None for the complex
        embedding's statistics (``squares=False``).
    """

    k: int
    E: np.ndarray
    F: np.ndarray
    nzA: np.ndarray
    nzB: np.ndarray
    xA: np.ndarray
    yB: np.ndarray
    SA: np.ndarray
    nA: np.ndarray
    SB: np.ndarray
    nB: np.ndarray
    P: np.ndarray
    U: np.ndarray
    SqA: np.ndarray | None
    SqB: np.ndarray | None
    loA: np.ndarray
    hiA: np.ndarray
    loB: np.ndarray
    hiB: np.ndarray
    zA: np.ndarray
    zB: np.ndarray
    symmetric: bool = False
    S2A: np.ndarray | None = None
    S2B: np.ndarray | None = None


def statistics(A, B, mode: str, symmetric: bool = False, squares: bool = True
               ) -> Statistics:
    """Every statistic of ``A (m, k) @ B (k, n)`` the scaling and certificate use
    (``symmetric``: ``B`` is ``A.T``, see :func:`shifts`; ``squares``: also the sums of
    ``alpha^2``, as the CUDA engine's real products compute them)."""
    k = A.shape[1]
    E, nzA = row_exponents(A)
    F, nzB = row_exponents(B.T)
    alpha = quantize_down(A, E)
    beta = quantize_down(B.T, F)
    P = alpha @ beta.T                           # exact: integers below k 127^2 < 2^53
    SA, SB = alpha.sum(axis=1), beta.sum(axis=1)
    nA = (A != 0).sum(axis=1).astype(np.float64)
    nB = (B != 0).sum(axis=0).astype(np.float64)
    both = nzA[:, None] & nzB[None, :]
    U = np.where(both, P + SA[:, None] + SB[None, :] + np.minimum(nA[:, None], nB[None, :]),
                 0.0)
    SqA = SqB = None
    if mode == "fast":
        D = fast_quant_bits(k)
        SqA = np.square(quantize(A, E, D)).sum(axis=1)
        SqB = np.square(quantize(B.T, F, D)).sum(axis=1)
    zA = ((A != 0) & (alpha == 0)).sum(axis=1).astype(np.float64)
    zB = ((B.T != 0) & (beta == 0)).sum(axis=1).astype(np.float64)
    S2A = S2B = None
    if squares:                                  # exact: integers below k 127^2 < 2^53
        S2A, S2B = np.square(alpha).sum(axis=1), np.square(beta).sum(axis=1)
    return Statistics(k, E, F, nzA, nzB, exact_thresholds(A), exact_thresholds(B.T),
                      SA, nA, SB, nB, P, U, SqA, SqB, *k_ranges(A), *k_ranges(B.T),
                      zA, zB, symmetric, S2A, S2B)


def _q_from_sumsq(S, H_f: float):
    """Largest ``q`` with ``ldexp(S, 2q) <= H_f`` for float64 integers ``S > 0``."""
    return lambda_exponent(S, H_f) // 2


def sigma_tau(st: Statistics, n_moduli: int, H_f: float | None = None):
    """Accurate mode's ``(sigma, tau)`` (int64): the bits kept of each row's and
    column's largest element, less ``BOUND_D`` (spec §2.3). ``H_f`` of the real table's
    ``n_moduli`` unless given (the complex scheme's table, spec §11)."""
    if H_f is None:
        H_f = crt_constants(n_moduli).H_f
    U = st.U
    m, n = U.shape
    r = np.maximum(U.max(axis=1) if n else np.zeros(m), 1.0)
    sigma = lambda_exponent(r, H_f) // 2
    lam1 = int(lambda_exponent(np.array([1.0]), H_f)[0])
    big = np.iinfo(np.int64).max
    if m:
        pos = U > 0
        lamU = np.where(pos, lambda_exponent(np.where(pos, U, 1.0), H_f), big)
        tau = np.min(np.where(pos, lamU - sigma[:, None], big), axis=0)
    else:
        tau = np.full(n, big, dtype=np.int64)
    tau = np.where(tau == big, lam1 - lam1 // 2, tau)
    return sigma.astype(np.int64), tau.astype(np.int64)


def shifts(st: Statistics, n_moduli: int, mode: str, H_f: float | None = None):
    """Exponents ``(s, t)`` (int64) of ``n_moduli`` moduli and ``mode`` (spec §2);
    ``H_f`` of the real table's ``n_moduli`` unless given (the complex table, spec §11).

    A symmetric product (``st.symmetric``: ``B = A.T``, so ``E = F`` and ``U`` is
    symmetric) uses the row rule on both sides, ``t = s``: then ``A'`` and ``B'`` are
    transposes of each other, the integer product is symmetric and so is every rounded
    element. The invariant still holds: ``sigma_i = min_j floor(lambda(U_ij) / 2)``
    (``lambda`` is non-increasing), so ``sigma_i + sigma_j <= lambda(U_ij)``. The general
    rule's ``tau_j >= sigma_j`` may keep one more bit of a column than this one.
    """
    s, t = _shifts_general(st, n_moduli, mode, H_f)
    return (s, s) if st.symmetric else (s, t)


def _shifts_general(st: Statistics, n_moduli: int, mode: str, H_f: float | None = None):
    if H_f is None:
        H_f = crt_constants(n_moduli).H_f
    if mode == "fast":
        D = fast_quant_bits(st.k)
        qa = _q_from_sumsq(np.where(st.nzA, st.SqA, 1.0), H_f)
        qb = _q_from_sumsq(np.where(st.nzB, st.SqB, 1.0), H_f)
        return (np.where(st.nzA, qa + D - st.E, 0).astype(np.int64),
                np.where(st.nzB, qb + D - st.F, 0).astype(np.int64))
    sigma, tau = sigma_tau(st, n_moduli, H_f)
    return (np.where(st.nzA, sigma + BOUND_D - st.E, 0).astype(np.int64),
            np.where(st.nzB, tau + BOUND_D - st.F, 0).astype(np.int64))


def exponents(A, B, plan):
    """Row exponents ``s`` (m,) of A and column exponents ``t`` (n,) of B for ``plan``'s
    moduli count (the most, for an adaptive plan) and mode: the scaling stage on its
    own, for operands as given (the pipeline first equilibrates them)."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    return shifts(statistics(A, B, plan.mode), plan.n_moduli, plan.mode)


def truncate(A, s):
    """``trunc(A_ik 2^{s_i})`` row-wise, as exact integers held in float64.

    ldexp only rounds below 2^-1022, where trunc gives 0 whatever the rounding.
    For B use ``truncate(B.T, t).T``.
    """
    return np.trunc(np.ldexp(A, s[:, None]))
