"""The certificate's formulas (``docs/spec.md`` §10), element-wise, for NumPy or CuPy arrays.

Both engines evaluate these exact expressions — the CPU engine on NumPy arrays, the
CUDA engine on CuPy arrays where a product needs the a-posteriori test, the residual
pass or its bound, and in ``kernels/scaling.cu`` operation for operation on its hot
path — so they reach the same decisions bit for bit. Every quantity is an exact integer
or a power of two until one rounded operation, whose rounding is accounted for by
moving the result one float up (an upper bound) or down (a lower bound).

For exponents ``s``, ``t`` the truncation errors obey ``|A_ik - A'_ik 2^{-s_i}| <
delta_i`` with ``delta_i = 2^{-s_i}``, or ``0`` when the row is exact at that shift
(``s_i >= x_i``); B's columns alike with ``rho_j``. Hence

    |A'B' 2^{-s-t} - AB|_ij <= delta_i ||B_j||_1 + ||A_i||_1 rho_j = T_ij,

with the norms bounded by the bound GEMM's sums: ``||A_i||_1 < 2^{E_i-7} QA_i``,
``QA_i = SA_i + nA_i``. In units of ``2^{E_i+F_j-67}`` (so that every term is an
integer times a power of two below 2^53)

    T_ij / 2^{E_i+F_j-67} = [s_i < x_i] 2^{60-b_i} QB_j + [t_j < y_j] 2^{60-b'_j} QA_i

(``b_i = s_i + E_i``, ``b'_j = t_j + F_j``), computed as one rounded sum ``x_ij``; the
true value is below ``up(x_ij)`` (or 0 with ``x_ij``).

The **target** is ``c u L_ij`` with ``L_ij = 2^{E_i+F_j-14} P_ij <= (|A||B|)_ij``,
``u = 2^-53`` and ``c_ij`` of :func:`~.rules.certificate_factor` for the element's
overlap length (:func:`factor`); in the same units as ``x``: ``c_ij P_ij``. It limits the method error only; the final rounding ``u |C_ij|`` comes
on top (``docs/spec.md`` §10.2).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .rules import CERT_C, certificate_divisor

#: float64 unit roundoff and smallest subnormal.
U64 = 2.0 ** -53
ETA = 2.0 ** -1074


class CertData(NamedTuple):
    """What the certificate reads of one product (all exact integers; NumPy or CuPy).

    Attributes
    ----------
    k : int
    E, F : int64 (m,), (n,)
        Row exponents of A, column exponents of B (0 for all-zero ones).
    xA, yB : int64 (m,), (n,)
        Exactness thresholds (``docs/spec.md`` §10.1; very negative for all-zero ones).
    QA, QB : float64 (m,), (n,)
        ``SA + nA``, ``SB + nB``: the norm bounds in units of ``2^{E-7}``.
    nA, nB : float64 (m,), (n,)
        Non-zero counts of A's rows and B's columns.
    loA, hiA, loB, hiB : int64 (m,), (m,), (n,), (n,)
        The first and last k of a non-zero entry of each row of A / column of B
        (``k`` and ``-1`` when there is none).
    P : float64 (m, n)
        The bound GEMM.
    """

    k: int
    E: object
    F: object
    xA: object
    yB: object
    QA: object
    QB: object
    nA: object
    nB: object
    loA: object
    hiA: object
    loB: object
    hiB: object
    P: object


def _xp(x):
    if type(x).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def up(x):
    """The next float64 up: an upper bound of the exact value of a rounded-to-nearest
    non-negative result."""
    return _xp(x).nextafter(x, np.inf)


def down(x):
    """The next float64 towards zero: a lower bound of a rounded non-negative result."""
    return _xp(x).nextafter(x, 0.0)


def _scaled(x, e):
    """``ldexp(x, e)`` with the exponent clipped to a range that only ever overflows to
    inf or underflows to 0, never wraps."""
    xp = _xp(x)
    return xp.ldexp(x, xp.clip(e, -4000, 4000).astype(np.int32))


def overlap(d: CertData):
    """Bool ``(m, n)``: whether the non-zero ranges along k of row ``i`` of A and column
    ``j`` of B intersect. Where they do not, every term ``A_ik B_kj`` is zero, and so is
    every truncation error term: the element is exact (triangular, banded and block
    structures are caught at no GEMM's cost)."""
    return overlap_length(d) > 0


def excess(d: CertData, s, t):
    """``x_ij``: the truncation bound in units of ``2^{E_i+F_j-67}``, rounded once (0 for
    an element without overlap)."""
    xp = _xp(d.P)
    ra = xp.where(s < d.xA, xp.ldexp(1.0, (60 - (s + d.E)).astype(np.int32)), 0.0)
    rb = xp.where(t < d.yB, xp.ldexp(1.0, (60 - (t + d.F)).astype(np.int32)), 0.0)
    x = (ra[:, None] * d.QB[None, :]) + (d.QA[:, None] * rb[None, :])
    return xp.where(overlap(d), x, 0.0)


def overlap_length(d: CertData):
    """int64 ``(m, n)``: ``k_ij``, the length of the intersection of the non-zero ranges
    along k of row ``i`` of A and column ``j`` of B (at most 0 where they do not meet):
    at most this many terms of ``C_ij`` are non-zero."""
    xp = _xp(d.P)
    return (xp.minimum(d.hiA[:, None], d.hiB[None, :])
            - xp.maximum(d.loA[:, None], d.loB[None, :]) + 1)


def isqrt(x):
    """Element-wise integer square root of non-negative int64 ``x < 2**52`` (exact: the
    float sqrt is within one of it, and two corrections make it exact)."""
    xp = _xp(x)
    r = xp.floor(xp.sqrt(x.astype(np.float64))).astype(np.int64)
    r = xp.where(r * r > x, r - 1, r)
    return xp.where((r + 1) * (r + 1) <= x, r + 1, r)


def factor(d: CertData):
    """float64 ``(m, n)``: the target's factor ``c_ij`` of every element,
    :func:`~.rules.certificate_factor` of its overlap length (``kernels/scaling.cu``
    ``oz_cert_factor`` computes the same numbers)."""
    xp = _xp(d.P)
    m, n = d.P.shape
    div = certificate_divisor(m * n)
    ke = xp.maximum(overlap_length(d), 0)
    c = xp.minimum(isqrt(ke).astype(np.float64) * (1.0 / div), float(CERT_C))
    c = xp.minimum(c, (ke - 1).astype(np.float64))
    return xp.where(ke <= 1, 0.0, c)


def target(d: CertData):
    """``c_ij P_ij``: the target in the units of :func:`excess` (one rounded product,
    as ``oz_cert_counts`` computes it). It does not depend on the count."""
    return factor(d) * d.P


def passes(d: CertData, s, t, limit=None):
    """Bool ``(m, n)``: the a-priori test ``T_ij <= c_ij u L_ij`` at ``(s, t)``;
    ``limit`` is :func:`target` when the caller already has it (a sweep over counts)."""
    x = excess(d, s, t)
    return (x == 0) | (up(x) <= (target(d) if limit is None else limit))


def truncation_bound(d: CertData, s, t):
    """``T_ij`` in absolute units, rounded up (``inf`` beyond the float64 range)."""
    xp = _xp(d.P)
    x = excess(d, s, t)
    with np.errstate(over="ignore"):
        T = _scaled(up(x), d.E[:, None] + d.F[None, :] - 67)
        # ldexp is exact unless the result is subnormal (then off by at most ETA / 2).
        return xp.where(x == 0, 0.0, up(T + ETA))


def rounding_bound(C):
    """``u |C| + 2^-1075``, rounded up: the error of one rounding to float64."""
    xp = _xp(C)
    with np.errstate(over="ignore"):
        return up(xp.ldexp(xp.abs(C), -53) + ETA)


def result_bound(d: CertData, s, t, C):
    """A rigorous bound on ``|C - AB|`` per element for ``C = RN(A'B' 2^{-s-t})``."""
    with np.errstate(over="ignore"):
        return up(truncation_bound(d, s, t) + rounding_bound(C))


def lower_product(d: CertData):
    """``L_ij = 2^{E_i+F_j-14} P_ij``, a lower bound of ``(|A||B|)_ij`` (rounded down)."""
    with np.errstate(over="ignore"):
        return down(_scaled(d.P, d.E[:, None] + d.F[None, :] - 14))


def meets_target(d: CertData, method, bound, C):
    """Bool ``(m, n)``: the a-posteriori test of a computed ``C`` (``docs/spec.md``
    §10.4): its method error (every error but the final rounding: the truncation bound,
    plus the residual pass's intermediate roundings) against the target,
    ``method <= c u max(L, |C| - bound)``, where ``bound`` is the full error bound.

    ``|C| - bound`` is a second lower bound of ``(|A||B|)_ij``, since
    ``|A||B| >= |AB| >= |C| - |C - AB|``: it covers elements whose bound-GEMM lower bound
    ``L`` is weak (a row's mass far below its largest entry) while the result is
    accurate relative to itself.
    """
    xp = _xp(C)
    c = factor(d)
    with np.errstate(over="ignore", invalid="ignore"):
        gap = down(xp.abs(C) - bound)
        low = xp.maximum(lower_product(d), gap)
        goal = down(c * U64 * low)
    return (method == 0) | (method <= goal)


def add_residuals(d: CertData, C1, run1, T1, run2, T2):
    """The residual pass's sum ``C = (C1 + R1) + R2`` with its bound, or None when the
    target is missed (``docs/spec.md`` §10); for both engines and both element types.

    ``run1``/``run2`` compute the remainder products ``R1``/``R2`` (their truncation
    bounds are ``T1``/``T2``); they run only when ``T1 + T2`` passes the target with
    ``|C1|`` standing in for ``|C|``. The bound adds every rounding of the two sums.
    """
    with np.errstate(over="ignore"):     # an infinite bound simply fails the target
        tot = up(T1 + T2)
        if not bool(meets_target(d, tot, tot, C1).all()):
            return None
        R1 = run1()
        R2 = run2()
        S = C1 + R1
        C = S + R2
        for part in (C1, R1, R2, S):
            tot = up(tot + rounding_bound(part))
        bound = up(tot + rounding_bound(C))
    if not bool(meets_target(d, tot, bound, C).all()):
        return None
    return C, bound


def upper_product(d: CertData):
    """``2^{E_i+F_j-14} U_ij`` (spec §2.3), an upper bound of ``(|A||B|)_ij``, rounded up;
    ``U_ij = P_ij + SA_i + SB_j + min(nA_i, nB_j)`` (exact integers below 2^53)."""
    xp = _xp(d.P)
    SA, SB = d.QA - d.nA, d.QB - d.nB
    both = (d.nA[:, None] > 0) & (d.nB[None, :] > 0)
    U = xp.where(both, d.P + SA[:, None] + SB[None, :]
                 + xp.minimum(d.nA[:, None], d.nB[None, :]), 0.0)
    with np.errstate(over="ignore"):
        return xp.where(U > 0, up(_scaled(U, d.E[:, None] + d.F[None, :] - 14) + ETA), 0.0)


def native_bound(d: CertData):
    """``gamma_k (|A||B|)_ij + k eta``, rounded up: what every correct float64 GEMM
    guarantees (``gamma_k = k u / (1 - k u)``)."""
    k = d.k
    gamma = float(up(np.float64(k * U64 / (1.0 - k * U64))))
    with np.errstate(over="ignore"):
        return up(up(gamma * upper_product(d)) + k * ETA)


# --------------------------------------------------------------------- the count search

#: Counts whose exponents the GPU's count search computes first (``docs/spec.md``
#: §10.3; ``kernels/scaling.cu`` ``OZ_NW``): four around where the search starts and the
#: largest.
WINDOW = 5


def count_window(n_counts: int, start: int):
    """``(lo, hi, counts)``: the window of a search over ``n_counts`` counts (indices
    ``0 .. n_counts - 1``) that starts at index ``start``: ``lo .. hi`` (two below
    ``start``, one above, shifted to stay inside) and the largest, ``WINDOW`` distinct
    indices in all (``counts``); next to the largest, the window takes it in."""
    lo = min(max(start - 2, 0), n_counts - WINDOW)
    hi = lo + WINDOW - 2
    if hi >= n_counts - 2:
        lo, hi = n_counts - WINDOW, n_counts - 1
        return lo, hi, tuple(range(lo, hi + 1))
    return lo, hi, tuple(range(lo, hi + 1)) + (n_counts - 1,)


def window_decides(largest: int, undecided: int, window, first: int) -> bool:
    """Whether a search within ``window`` (:func:`count_window`; None: every count) found
    the product's count. Per element the search reports the fewest count of
    ``lo .. hi`` that passes (``lo`` when ``lo`` passes: the element may need fewer), or
    none when even the largest count fails, or *undecided* when ``hi`` fails and the
    largest passes. Since the test is monotone in the count, the largest reported count
    ``largest`` (a count, ``first`` the table's smallest; 0 when no element reported
    one) is the product's count unless an element is undecided or ``largest`` is the
    window's ``lo`` above the table's first; the number of elements with none is exact
    when no element is undecided."""
    if window is None:
        return True
    lo = window[0]
    return undecided == 0 and not (lo > 0 and largest == first + lo)
