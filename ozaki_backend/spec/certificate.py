"""The certificate's formulas (``docs/spec.md`` §10), element-wise, for NumPy or CuPy arrays.

Both engines evaluate these exact expressions — the CPU engine on NumPy arrays, the
CUDA engine on CuPy arrays on its rare paths and in ``kernels/scaling.cu`` /
``kernels/certificate.cu`` operation for operation on its hot path — so they reach the
same decisions bit for bit. Every rigorous quantity is an exact integer or a power of
two until one rounded operation, whose rounding is accounted for by moving the result
one float up (an upper bound) or down (a lower bound); the target's own arithmetic (a
level to meet, not a bound) is plain round-to-nearest, the same on both engines.

Per element ``(i, j)`` of ``C = AB`` (equilibrated operands, ``docs/spec.md`` §2.1), with
``t_ij = (A_ik B_kj)_k`` its terms:

* ``k_ij`` (:func:`terms`): at most this many terms are non-zero;
* the rigorous truncation bound ``T_ij = delta_i ||B_j||_1 + ||A_i||_1 rho_j`` (``x``,
  :func:`excess`, in units of ``2^{E_i+F_j-67}``);
* its size ``W_ij = delta_i ||B_j||_2 + ||A_i||_2 rho_j`` (``w``, :func:`spread`, in
  units of ``2^{E_i+F_j-63.5}``, from ``||a||_2^2 <= max|a| ||a||_1``): the truncation
  errors have random signs, so the error is near ``W / sqrt(3)``, not ``T``;
* native DGEMM's rounding error scale ``nu_ij = g(k_ij) S_ij`` (:func:`native_scale`,
  units ``2^{E_i+F_j-14}``), with ``S_ij`` a lower bound of ``||t_ij||_2`` — the larger of
  ``P_ij / sqrt(k_ij)`` (the bound GEMM, Cauchy–Schwarz) and the largest term found
  among the rows' and columns' top entries (``G``, :func:`gathered`);
* ``Lambda_ij = max(P_ij, G_ij)``, a lower bound of ``(|A||B|)_ij`` (units ``2^{E+F-14}``).

An element passes a count a priori when ``T <= (k_ij - 1) u (|A||B|)`` (never looser than
native's own ``gamma_k`` bound with the element's number of terms) and
``W <= KAPPA u nu`` (about native's error on these data), or when ``T = 0`` (its integer
product is exact). Elements with one or two terms are computed directly
(:func:`direct_values`), those with none are exact zeros.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .rules import (GATHER_SHARE, KAPPA, NATIVE_K, NATIVE_TYPICAL, OPTIMISTIC_ELEMENTS,
                    OPTIMISTIC_FAILING, OPTIMISTIC_SHARE, POST_CAP, POST_KAPPA, POST_SHARE,
                    REPAIR_ELEMENTS, REPAIR_SHARE_LOG2, REPAIR_TERMS)

#: float64 unit roundoff and smallest subnormal.
U64 = 2.0 ** -53
ETA = 2.0 ** -1074

#: log2 of ``KAPPA`` (exact: the target's scalings are ldexp).
_LOG2_KAPPA = int(np.log2(KAPPA))
#: log2 of ``POST_KAPPA * NATIVE_TYPICAL * u``: the a-posteriori relative allowance.
_LOG2_POST = int(np.log2(POST_KAPPA * NATIVE_TYPICAL)) - 53
_LOG2_CAP = int(np.log2(POST_CAP))
#: ``sqrt(2)`` rounded, and the target's factor ``KAPPA sqrt(2) / 16`` (exact scaling
#: of it).
SQRT2 = float(np.sqrt(2.0))
_TARGET = KAPPA * SQRT2 / 16
assert 2.0 ** _LOG2_KAPPA == KAPPA and 2.0 ** (_LOG2_POST + 53) == POST_KAPPA * NATIVE_TYPICAL


class CertData(NamedTuple):
    """What the certificate reads of one product (exact integers unless noted; NumPy or
    CuPy).

    Attributes
    ----------
    k : int
    E, F : int64 (m,), (n,)
        Row exponents of A, column exponents of B (0 for all-zero ones).
    xA, yB : int64 (m,), (n,)
        Exactness thresholds (``docs/spec.md`` §10.1; very negative for all-zero ones).
    QA, QB : float64 (m,), (n,)
        ``SA + nA``, ``SB + nB``: the 1-norm bounds in units of ``2^{E-7}``.
    nA, nB : float64 (m,), (n,)
        Non-zero counts of A's rows and B's columns.
    loA, hiA, loB, hiB : int64 (m,), (m,), (n,), (n,)
        The first and last k of a non-zero entry of each row of A / column of B
        (``k`` and ``-1`` when there is none).
    P : float64 (m, n)
        The bound GEMM.
    RA, RB : float64 (m,), (n,)
        ``sqrt(QA)``, ``sqrt(QB)`` (correctly rounded): the 2-norm bounds in units of
        ``2^{E-3.5}`` (``||a||_2^2 <= max|a| ||a||_1 < 2^E 2^{E-7} QA``).
    G14 : float64 (m, n) or None
        The gathered largest-term lower bound in units of ``2^{E+F-14}``
        (:func:`gathered`); None where the gathers did not run (read as 0).
    wA, wB : float64 (m,), (n,) or None
        The non-zero entries inside the bound GEMM's window (``alpha > 0``: ``nA - zA``)
        of each row of A and column of B; None for the complex embedding's statistics
        (then the window's count is not used, :func:`window_terms`).
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
    RA: object
    RB: object
    G14: object = None
    wA: object = None
    wB: object = None


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


def overlap_length(d: CertData):
    """int64 ``(m, n)``: the length of the intersection of the non-zero ranges along k
    of row ``i`` of A and column ``j`` of B (at most 0 where they do not meet)."""
    xp = _xp(d.P)
    return (xp.minimum(d.hiA[:, None], d.hiB[None, :])
            - xp.maximum(d.loA[:, None], d.loB[None, :]) + 1)


def terms(d: CertData):
    """int64 ``(m, n)``: ``k_ij = min(overlap, nA_i, nB_j)``, at least the number of
    non-zero terms of the element (0 or less: every term is zero)."""
    xp = _xp(d.P)
    n = xp.minimum(d.nA[:, None], d.nB[None, :]).astype(np.int64)
    return xp.minimum(overlap_length(d), n)


def direct(ke):
    """Bool: elements of one or two terms, computed directly (:func:`direct_bound`)."""
    return (ke >= 1) & (ke <= 2)


def exempt(ke):
    """Bool: elements no count has to certify — exact zeros (``k_ij <= 0``) and the
    direct ones (computed from their terms, in the complex scheme's embedding too)."""
    return ke <= 2


def big(d: CertData):
    """Bool ``(m, n)``: ``(|A||B|)_ij`` may reach the float64 overflow threshold
    (``E_i + F_j + bitlen(k) >= 1022``): such an element is never certified a priori,
    only after the product by a finite bound."""
    return (d.E[:, None] + d.F[None, :] + int(d.k).bit_length()) >= 1022


def lower_terms(d: CertData):
    """``Lambda_ij = max(P_ij, G14_ij)``: a lower bound of ``(|A||B|)_ij`` in units of
    ``2^{E_i+F_j-14}`` (exact)."""
    return d.P if d.G14 is None else _xp(d.P).maximum(d.P, d.G14)


def cap(d: CertData, ke):
    """``down((k_ij - 1) Lambda_ij)``: the a-priori test's rigorous limit in the units of
    :func:`excess` (``(k_ij - 1) u (|A||B|)_ij``: ``2^{-53+14-67} = 2^{E+F}`` units cancel)."""
    xp = _xp(d.P)
    return down((xp.maximum(ke, 1) - 1).astype(np.float64) * lower_terms(d))


def window_terms(d: CertData, ke):
    """float64 ``(m, n)``: ``max(1, min(k_ij, wA_i, wB_j))`` (``max(1, k_ij)`` without the
    window's counts): at least the number of terms the bound GEMM ``P_ij`` sums, since a
    term of ``P`` needs ``alpha_ik > 0`` and ``beta_kj > 0``."""
    xp = _xp(d.P)
    kw = xp.maximum(ke, 1)
    if d.wA is not None:
        kw = xp.minimum(kw, xp.maximum(xp.minimum(d.wA[:, None], d.wB[None, :]), 1)
                        .astype(kw.dtype))
    return kw.astype(np.float64)


def native_scale(d: CertData, ke):
    """``nu_ij = g(k_ij) max(P_ij / sqrt(kw_ij), G14_ij)`` in units of ``2^{E_i+F_j-14}``
    (round to nearest, as ``kernels/certificate.cuh`` ``oz_prior``): native DGEMM's
    typical rounding error over ``u`` (:func:`~.rules.native_growth`). ``kw``
    (:func:`window_terms`) bounds the number of terms ``P`` sums, so ``P / sqrt(kw)`` is
    a lower bound of ``||t_ij||_2`` by Cauchy–Schwarz over those terms."""
    xp = _xp(d.P)
    kk = xp.maximum(ke, 1).astype(np.float64)
    S = d.P / xp.sqrt(window_terms(d, ke))
    if d.G14 is not None:
        S = xp.maximum(S, d.G14)
    g = xp.sqrt(xp.ldexp(xp.minimum(kk, float(NATIVE_K)), -1))
    return g * S


def target(d: CertData, nu):
    """``KAPPA u nu`` in the units of :func:`spread`: ``nu`` in units of ``2^{E+F-14}``
    times ``KAPPA 2^{-53-14+63.5} = KAPPA sqrt(2) / 16`` (one rounded product)."""
    return nu * _TARGET


def norm_factor(Q, S2, SA, n):
    """``RA_i = sqrt(min(QA_i, (S2_i + 2 SA_i + nA_i) / 128))`` (correctly rounded), the
    bound of ``‖A_i‖₂`` in units of ``2^{E_i - 3.5}`` that :func:`spread` uses
    (``docs/spec.md`` §10.1): ``|a| < (alpha + 1) 2^{E-7}`` for every non-zero entry, so
    ``‖a‖₂² < Σ (alpha + 1)² 2^{2E-14}``, and ``‖a‖₂² ≤ max|a| ‖a‖₁ < 2^{2E-7} QA``.
    ``S2``: the row sums of ``alpha²``, or None (the complex embedding's rows): then
    ``sqrt(QA)``. Every operand is an exact integer below 2^53, the quotient exact."""
    xp = _xp(Q)
    if S2 is None:
        return xp.sqrt(Q)
    return xp.sqrt(xp.minimum(Q, xp.ldexp(S2 + 2.0 * SA + n, -7)))


def _factor(x, thr, E, s):
    """``[s < x] 2^{60 - (s + E)}``: one operand's factor of :func:`excess`/:func:`spread`."""
    xp = _xp(x)
    return xp.where(s < thr, xp.ldexp(1.0, (60 - (s + E)).astype(np.int32)), 0.0)


def excess(d: CertData, s, t):
    """``x_ij``: the truncation bound in units of ``2^{E_i+F_j-67}``, rounded once (0 for
    an element whose terms are all zero)."""
    xp = _xp(d.P)
    ra, rb = _factor(d.P, d.xA, d.E, s), _factor(d.P, d.yB, d.F, t)
    x = (ra[:, None] * d.QB[None, :]) + (d.QA[:, None] * rb[None, :])
    return xp.where(overlap_length(d) > 0, x, 0.0)


def spread(d: CertData, s, t):
    """``w_ij``: the truncation error's size ``W_ij`` in units of ``2^{E_i+F_j-63.5}``
    (two rounded products and one rounded sum)."""
    ra, rb = _factor(d.P, d.xA, d.E, s), _factor(d.P, d.yB, d.F, t)
    return (ra[:, None] * d.RB[None, :]) + (d.RA[:, None] * rb[None, :])


class Prior(NamedTuple):
    """The count-independent part of the a-priori test (:func:`prior`)."""

    ke: object
    exempt: object
    big: object
    cap: object
    nu: object
    target: object


def prior(d: CertData) -> Prior:
    """Everything of the a-priori test that does not depend on the count (the elements
    of one or two terms are computed directly: exempt)."""
    ke = terms(d)
    nu = native_scale(d, ke)
    return Prior(ke, exempt(ke), big(d), cap(d, ke), nu, target(d, nu))


def passes(d: CertData, s, t, pre: Prior | None = None):
    """Bool ``(m, n)``: the a-priori test at ``(s, t)`` (``docs/spec.md`` §10.2)."""
    pre = prior(d) if pre is None else pre
    x = excess(d, s, t)
    w = spread(d, s, t)
    ok = (x < pre.cap) & (w <= pre.target)
    # x == 0: the integer product is exact and C its one rounding, an overflow included
    return pre.exempt | (x == 0) | (~pre.big & ok)


def element_counts(d: CertData, shifts, counts, pre: Prior | None = None):
    """int64 ``(m, n)``: each element's fewest count of ``counts`` (ascending) whose
    a-priori test it passes, 0 when none does (the test is monotone in the count: every
    shift is non-decreasing in it). ``shifts(N)`` gives ``(s, t)``."""
    pre = prior(d) if pre is None else pre
    xp = _xp(d.P)
    counts = list(counts)
    need = xp.zeros(d.P.shape, dtype=np.int64)
    if not counts or need.size == 0:
        return need
    need[passes(d, *shifts(counts[0]), pre)] = counts[0]
    # By monotonicity no element left passes below the first count at which any of them
    # does, so the sweep starts there: a bisection on "any passes" replaces the ~13
    # evaluations of the counts below it that ordinary data make (the same counts).
    lo, hi = 1, len(counts)
    while lo < hi and not bool(need.all()):
        mid = (lo + hi) // 2
        if bool(((need == 0) & passes(d, *shifts(counts[mid]), pre)).any()):
            hi = mid
        else:
            lo = mid + 1
    for N in counts[lo:]:
        if bool(need.all()):
            break
        newly = (need == 0) & passes(d, *shifts(N), pre)
        need[newly] = N
    return need


class Choice(NamedTuple):
    """The count of a ``precision="fp64"`` product (:func:`choose`)."""

    #: The count the product is computed with.
    n_moduli: int
    #: Elements failing the a-priori test at that count (0: certified a priori).
    failing: int
    #: The fewest count every element passes a priori, or None.
    all_pass: int | None
    #: The 1/16 rule's count when the product is computed one count below it
    #: (:func:`optimistic`; the escalation's first step), else None.
    safe: int | None = None


def next_count(choice: "Choice", tried, most: int):
    """The escalation's next count (``docs/spec.md`` §10.4): the 1/16 rule's count when
    the product was computed below it, then the fewest every element passes a priori,
    then the table's most; None when all were tried."""
    for N in (choice.safe, choice.all_pass, most):
        if N is not None and N not in tried:
            return N
    return None


def fails_at(hist, none, c):
    """Elements failing the a-priori test at count ``c`` from the histogram of per-element
    counts (``hist[N]``: elements whose fewest count is ``N``; ``none``: no count)."""
    return none + sum(v for N, v in hist.items() if N > c)


def repair_cap(k: int, elements: int = 0) -> int:
    """The most unsettled elements a product of reduction length ``k`` and ``elements``
    output elements repairs (:func:`repairable`): ``REPAIR_ELEMENTS`` with
    ``REPAIR_TERMS`` terms in all, or ``2^-REPAIR_SHARE_LOG2`` of the output, whichever
    is more."""
    return max(min(REPAIR_ELEMENTS, REPAIR_TERMS // max(int(k), 1)),
               int(elements) >> REPAIR_SHARE_LOG2)


def optimistic(failing_below: int, elements: int, repairs: int) -> bool:
    """Whether a product is computed one count below the 1/16 rule's (``docs/spec.md``
    §10.3) when ``failing_below`` of its ``elements`` fail a priori there: an output of
    at least ``OPTIMISTIC_ELEMENTS`` elements, at most ``OPTIMISTIC_SHARE`` of them
    failing and at most ``OPTIMISTIC_FAILING`` times the elements it can repair
    (``repairs``, :func:`repair_cap`; 0: none, the complex products). One count below
    the rule's the a-posteriori test settles all but a few per cent of the elements
    failing a priori (measured: 0.1–8 % on the families of
    ``scripts/accuracy_families.py``), so the unsettled ones stay within what is
    repaired and the product takes one modulus fewer; when they do not, it escalates
    to the rule's count."""
    return (elements >= OPTIMISTIC_ELEMENTS
            and failing_below <= elements * OPTIMISTIC_SHARE
            and failing_below <= OPTIMISTIC_FAILING * repairs)


def _below(ch: Choice, failing_below: int, elements: int, counts, repairs: int) -> Choice:
    """``ch`` one count lower where :func:`optimistic` admits it."""
    if ch.n_moduli == counts[0] or not optimistic(failing_below, elements, repairs):
        return ch
    return Choice(ch.n_moduli - 1, failing_below, ch.all_pass, ch.n_moduli)


def choose(hist, none, elements, counts, repairs: int = 0) -> Choice:
    """The product's count from the histogram of per-element counts (``docs/spec.md``
    §10.3): the fewest count at which at most ``POST_SHARE`` of the elements fail a
    priori (they are tested a posteriori), else the largest; one count fewer where
    :func:`optimistic` admits it (``repairs``: the unsettled elements the product
    repairs, :func:`repair_cap`; 0 for none), the rule's count then kept as ``safe``."""
    all_pass = next((c for c in counts if fails_at(hist, none, c) == 0), None)
    limit = elements * POST_SHARE
    for c in counts:
        f = fails_at(hist, none, c)
        if f <= limit:
            return _below(Choice(c, f, all_pass), fails_at(hist, none, c - 1), elements,
                          counts, repairs)
    c = counts[-1]
    return Choice(c, fails_at(hist, none, c), all_pass)


def histogram(need):
    """``(hist, none)`` of a per-element count array (:func:`element_counts`)."""
    xp = _xp(need)
    vals, cnt = xp.unique(need, return_counts=True)
    hist = {int(v): int(c) for v, c in zip(vals.tolist(), cnt.tolist()) if v}
    return hist, int((need == 0).sum())


# --------------------------------------------------------------------- the gathers

#: The code of an entry too small for the gathers (or zero): value 0.
CODE_ZERO = -128
#: The smallest code of a non-zero entry (``2 * rel + m1 >= -126``: ``rel >= -63``).
CODE_MIN = -126


def codes(X, E):
    """int8 ``codes(X)`` of a row-wise operand (``docs/spec.md`` §10.2): for a non-zero
    ``x = f 2^e`` (frexp) in a row of exponent ``E``, ``2 (e - E) + [|f| >= 3/4]``, or
    :data:`CODE_ZERO` below :data:`CODE_MIN`; its value :func:`code_value` is a lower
    bound of ``|x| / 2^E``."""
    xp = _xp(X)
    f, e = xp.frexp(xp.abs(X))
    c = 2 * (e.astype(np.int64) - E[:, None]) + (f >= 0.75)
    return xp.where((X != 0) & (c >= CODE_MIN), c, CODE_ZERO).astype(np.int8)


def code_value(c):
    """``(2 + m1) 2^(rel - 2)`` of codes ``c = 2 rel + m1`` (0 for :data:`CODE_ZERO`)."""
    xp = _xp(c)
    c = c.astype(np.int64)
    return xp.where(c == CODE_ZERO, 0.0, xp.ldexp(2.0 + (c & 1), ((c >> 1) - 2).astype(np.int32)))


def gathers_needed(zA, nA, zB, nB) -> bool:
    """Whether the gathers run: more than ``GATHER_SHARE`` of the non-zero entries lie
    below the bound GEMM's window (``zA``, ``zB``: per row / column, the non-zero
    entries whose ``alpha`` is 0). Exact integer comparison."""
    below = int(zA.sum()) + int(zB.sum())
    total = int(nA.sum()) + int(nB.sum())
    return below > total * GATHER_SHARE


# --------------------------------------------------------------------- bounds

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
    """``2^{E_i+F_j-14} Lambda_ij``, a lower bound of ``(|A||B|)_ij`` (rounded down; 0
    where it would overflow, so it stays a lower bound)."""
    xp = _xp(d.P)
    with np.errstate(over="ignore"):
        L = _scaled(lower_terms(d), d.E[:, None] + d.F[None, :] - 14)
        return xp.where(xp.isinf(L), 0.0, down(L))


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


def gamma(n):
    """``gamma_n = n u / (1 - n u)`` rounded up (``n``: an integer array or int)."""
    xp = _xp(n)
    nf = xp.asarray(n, dtype=np.float64)
    return up(up(nf * U64) / down(1.0 - nf * U64))


def native_bound(d: CertData, ke=None):
    """``gamma_k (|A||B|)_ij + k eta``, rounded up: what every correct float64 GEMM
    guarantees; with ``ke`` (:func:`terms`), each element's own number of terms (the
    bound of a recursive float64 dot product, :func:`repair_bound`)."""
    k = d.k if ke is None else _xp(ke).maximum(ke, 0)
    with np.errstate(over="ignore"):
        return up(up(gamma(k) * upper_product(d)) + _xp(d.P).asarray(k, dtype=np.float64) * ETA)


def repair_bound(d: CertData, ke):
    """The bound of an element recomputed by 32 lanes (``reference/direct.py``
    ``dot2_in_order``): ``gamma_h (|A||B|)_ij + h eta`` with ``h = min(k_ij, ceil(k / 32))
    + 6``, rounded up — the bound of the plain float64 dot product in that order (a term
    goes through at most ``h`` roundings: its product, its lane's sums, the five pairwise
    sums), which also holds for the compensated one: its error is at most ``u |C|``, the
    products' errors lost to underflow (:func:`two_prod_scaled`) and ``O(h^2 u^2)
    (|A||B|)_ij`` (Ogita, Rump and Oishi's Dot2), below ``gamma_h (|A||B|)_ij`` for
    ``h >= 6``."""
    xp = _xp(d.P)
    h = xp.minimum(xp.maximum(ke, 0), -(-int(d.k) // 32)) + 6
    with np.errstate(over="ignore"):
        return up(up(gamma(h) * upper_product(d)) + h.astype(np.float64) * ETA)


# --------------------------------------------------------------------- a posteriori

class Posterior(NamedTuple):
    """The a-posteriori test of a computed product (:func:`posterior`)."""

    #: Bool (m, n): elements that failed a priori and fail a posteriori too.
    unsettled: object
    #: The rigorous bound of every element, ``T + u |C|`` rounded up.
    bound: object
    #: ``max nu / |C|`` over the reliable elements (0 for none): the product's level.
    level: float


def posterior(d: CertData, s, t, C, pre: Prior, failing) -> Posterior:
    """The a-posteriori test (``docs/spec.md`` §10.4) of ``C = RN(A'B' 2^{-s-t})``.

    The product's relative error level is native's typical error at its most
    ill-conditioned reliable element: ``rho = NATIVE_TYPICAL u max nu / |C|`` over the
    elements of at least three terms whose ``|C|`` exceeds four times their error size.
    An element failing a priori (``failing``) passes when its bound is finite, its
    truncation bound is at most ``(k_ij - 1) u max(Lambda, |C| - bound)`` (``|C| -
    bound <= |AB| <= |A||B|`` is a second lower bound) and its error size
    ``W <= max(KAPPA u nu, min(POST_KAPPA rho |C|, POST_CAP KAPPA u nu))``.
    """
    xp = _xp(C)
    EF = d.E[:, None] + d.F[None, :]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        T = truncation_bound(d, s, t)
        bound = up(T + rounding_bound(C))
        absC = xp.abs(C)
        W = _scaled(spread(d, s, t) * SQRT2, EF - 64)
        nu = _scaled(pre.nu, EF - 14)
        reliable = (pre.ke >= 3) & (absC > xp.ldexp(W, 2)) & (nu < np.inf)
        ratio = xp.where(reliable, nu / xp.where(reliable, absC, 1.0), 0.0)
        level = float(ratio.max()) if ratio.size else 0.0
        L1 = xp.maximum(lower_product(d), down(absC - bound))
        capabs = down(xp.ldexp(down((xp.maximum(pre.ke, 1) - 1).astype(np.float64) * L1), -53))
        own = xp.ldexp(nu, -53 + _LOG2_KAPPA)
        rel = xp.ldexp(level * absC, _LOG2_POST)
        allow = xp.maximum(own, xp.minimum(rel, xp.ldexp(own, _LOG2_CAP)))
        ok = (bound < np.inf) & (T <= capabs) & (W <= allow)
    return Posterior(failing & ~ok, bound, level)


def repairable(n_elements: int, k: int, near_overflow: bool = False,
               elements: int = 0) -> bool:
    """Whether this many unsettled elements of a product with ``elements`` output
    elements are recomputed one by one (rather than the product escalated): at most
    :func:`repair_cap`, none of them near the overflow threshold (``near_overflow``:
    :func:`big` for one of them; its dot product could overflow)."""
    if n_elements > repair_cap(k, elements):
        return False
    return not near_overflow


# --------------------------------------------------------------------- direct elements

#: Veltkamp's splitter for float64 (``2^27 + 1``).
_SPLIT = 134217729.0
#: Dekker's product is exact (no split overflows, no partial product underflows) when
#: every factor is zero or of magnitude in ``[2^-480, 2^480)``.
_LO, _HI = 2.0 ** -480, 2.0 ** 480


def in_range(x):
    """Bool: ``x`` is zero or of magnitude in ``[2^-480, 2^480)``, where Dekker's product
    of two such factors is exact."""
    ax = _xp(x).abs(x)
    return (ax == 0) | ((ax >= _LO) & (ax < _HI))


def two_sum(x, y):
    """Knuth's error-free sum: ``(s, e)`` with ``s = RN(x + y)``, ``s + e = x + y``."""
    s = x + y
    z = s - x
    return s, (x - (s - z)) + (y - z)


def _split(a):
    c = _SPLIT * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a, b):
    """Dekker's error-free product (Veltkamp's split, no fused multiply-add): ``(h, l)``
    with ``h = RN(a b)`` and ``h + l = a b`` for factors :func:`in_range`."""
    h = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return h, (((ah * bh - h) + ah * bl) + al * bh) + al * bl


def two_prod_scaled(a, b):
    """``(RN(a b), e)``: the product and its error ``e = ldexp(l, ea + eb)``, with ``l``
    the error of Dekker's product of the frexp fractions ``a = fa 2^ea``, ``b = fb 2^eb``
    (``fa, fb`` in ``[1/2, 1)``: the product is exact and ``e = a b - RN(a b)`` wherever
    ``RN(a b)`` is a normal number and ``e`` representable; a subnormal ``e`` is rounded,
    by at most ``eta / 2``). Scaling an operand by a power of two scales both exactly,
    so the repaired elements keep the products' scale invariance."""
    xp = _xp(a)
    fa, ea = xp.frexp(a)
    fb, eb = xp.frexp(b)
    _, l = two_prod(fa, fb)
    return a * b, xp.ldexp(l, ea + eb)


def direct_indices(d: CertData, ke):
    """``(k1, k2)`` int64 ``(m, n)``: the indices of the (at most two) terms of each
    direct element (:func:`direct`): column ``j``'s support when ``nB_j <= 2``, else row
    ``i``'s when ``nA_i <= 2``, else the overlap (``k1 == k2``: one term)."""
    xp = _xp(d.P)
    shape = d.P.shape
    colB = (d.nB <= 2)[None, :]
    rowA = (d.nA <= 2)[:, None]
    ov_lo = xp.maximum(d.loA[:, None], d.loB[None, :])
    ov_hi = xp.minimum(d.hiA[:, None], d.hiB[None, :])
    k1 = xp.where(colB, xp.broadcast_to(d.loB[None, :], shape),
                  xp.where(rowA, xp.broadcast_to(d.loA[:, None], shape), ov_lo))
    k2 = xp.where(colB, xp.broadcast_to(d.hiB[None, :], shape),
                  xp.where(rowA, xp.broadcast_to(d.hiA[:, None], shape), ov_hi))
    return k1, k2


def direct_values(a1, b1, a2, b2, two):
    """``(C, bound)`` of direct elements from their terms' factors (``two``: whether the
    element has two terms; with one, ``a2 = b2 = 0``) — ``docs/spec.md`` §10.5.

    One term: ``RN(a b)``, exact up to its one rounding. Two terms: Ogita, Rump and
    Oishi's Dot2 — Dekker's exact products, an exact sum of their high parts, the low
    parts added once — ``RN(s + RN(e + RN(l1 + l2)))``, whose error is at most
    ``u |C| + gamma_2^2 (|a1 b1| + |a2 b2|)``; where Dekker's product may not be exact (a
    non-zero factor outside ``[2^-480, 2^480)``) the plain
    ``RN(RN(a1 b1) + RN(a2 b2))`` with its own bound. Every operation rounds to nearest
    (the CUDA kernel uses ``__dmul_rn``/``__dadd_rn``: no contraction).
    """
    xp = _xp(a1)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        p1, p2 = a1 * b1, a2 * b2
        safe = in_range(a1) & in_range(b1) & in_range(a2) & in_range(b2)
        z = xp.zeros_like(a1)
        h1, l1 = two_prod(xp.where(safe, a1, z), xp.where(safe, b1, z))
        h2, l2 = two_prod(xp.where(safe, a2, z), xp.where(safe, b2, z))
        s, e = two_sum(h1, h2)
        dot2 = s + (e + (l1 + l2))
        plain = p1 + p2
        C = xp.where(two, xp.where(safe, dot2, plain), p1)
        # Bounds: one term, u|C|; Dot2, (u|C| + gamma_2^2 S)/(1 - u) with S = |p1| + |p2|
        # <= (|h1| + |h2|)(1 + u); plain, u(|p1| + |p2|) + u|C| (+ subnormal halves).
        r = rounding_bound(C)
        S = up(up(xp.abs(h1) + xp.abs(h2)) * (1.0 + 2.0 ** -52))
        g2 = float(up(np.float64(gamma(2)) * up(np.float64(gamma(2)))))
        b_dot2 = up(up(up(r + up(g2 * S)) * (1.0 + 2.0 ** -51)) + 2 * ETA)
        b_plain = up(up(r + rounding_bound(up(xp.abs(p1) + xp.abs(p2)))) + 2 * ETA)
        bound = xp.where(two, xp.where(safe, b_dot2, b_plain), r)
    return C, bound


# --------------------------------------------------------------------- the residual pass

def add_residuals(d: CertData, pre: Prior, C1, level, run1, T1, run2, T2):
    """The residual pass's sum ``C = (C1 + R1) + R2`` with its bound, or None when the
    target is missed (``docs/spec.md`` §10.4); for both engines and both element types.

    ``run1``/``run2`` compute the remainder products ``R1``/``R2`` (their truncation
    bounds are ``T1``/``T2``); they run only when ``T1 + T2`` passes with ``|C1|``
    standing in for ``|C|``. The method error (the remainders' truncation bounds and
    every rounding but the last) is held to the a-posteriori test's allowance and cap,
    with the rigorous method error in place of the error size.
    """
    xp = _xp(C1)
    with np.errstate(over="ignore"):
        tot = up(T1 + T2)
        if not bool(_method_ok(d, pre, tot, tot, C1, level).all()):
            return None
        R1 = run1()
        R2 = run2()
        S = C1 + R1
        C = S + R2
        for part in (C1, R1, R2):
            tot = up(tot + rounding_bound(part))
        # S = C1 + R1 rounds only where both are non-zero.
        tot = up(tot + xp.where((C1 == 0) | (R1 == 0), 0.0, rounding_bound(S)))
        bound = up(tot + rounding_bound(C))
    if not bool(_method_ok(d, pre, tot, bound, C, level).all()):
        return None
    return C, xp.where(pre.ke <= 0, 0.0, bound)


def _method_ok(d, pre, method, bound, C, level):
    xp = _xp(C)
    EF = d.E[:, None] + d.F[None, :]
    with np.errstate(over="ignore", invalid="ignore"):
        absC = xp.abs(C)
        nu = _scaled(pre.nu, EF - 14)
        L1 = xp.maximum(lower_product(d), down(absC - bound))
        capabs = down(xp.ldexp(down((xp.maximum(pre.ke, 1) - 1).astype(np.float64) * L1), -53))
        own = xp.ldexp(nu, -53 + _LOG2_KAPPA)
        allow = xp.maximum(own, xp.minimum(xp.ldexp(level * absC, _LOG2_POST),
                                           xp.ldexp(own, _LOG2_CAP)))
        # the pass's method error is mostly its sums' roundings, a few u |C|: a few u
        # of the lower bound L1 are within native's level too
        allow = xp.maximum(allow, xp.ldexp(L1, -50))
        ok = (bound < np.inf) & (method <= capabs) & (method <= allow)
    return (pre.ke <= 0) | (method == 0) | ok


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


def window_choice(hist, none, undecided, window, counts, elements, repairs=0):
    """The :class:`Choice` a search within ``window`` (:func:`count_window`; None: every
    count) settles, or None when it does not (the search is then repeated over every
    count). Per element the search reports the fewest count of ``lo .. hi`` that passes
    (``lo`` when ``lo`` passes: the element may need fewer), or none when even the
    largest count fails, or *undecided* when ``hi`` fails and the largest passes
    (``hist``: reported count -> elements; ``counts``: the table's counts). Failures
    at a count of the window are then exact, so :func:`choose`'s count is settled unless
    it is the window's ``lo`` above the table's first (the product may need fewer) or
    lies above ``hi`` while some element is undecided. ``all_pass`` is given only where
    the window settles it too (else None: the caller widens the search when it needs
    it). ``repairs``: as :func:`choose`'s (the count below a settled one lies in the
    window: a settled count is not the window's ``lo`` unless it is the table's first)."""
    counts = list(counts)
    if window is None:
        return choose(hist, none, elements, counts, repairs)
    lo, hi = window[0], window[1]
    limit = elements * POST_SHARE
    inside = counts[lo:hi + 1]
    f = {c: fails_at(hist, none + undecided, c) for c in inside}
    chosen = next((c for c in inside if f[c] <= limit), None)
    if chosen is None:
        if undecided:
            return None
        return Choice(counts[-1], none, None)
    if chosen == counts[lo] and lo > 0:
        return None
    all_pass = next((c for c in inside if f[c] == 0), None)
    if all_pass == counts[lo] and lo > 0:
        all_pass = None
    return _below(Choice(chosen, f[chosen], all_pass), f.get(chosen - 1, 0), elements,
                  counts, repairs)
