"""Stage 6 — elements computed from their terms (``docs/spec.md`` §10.5).

Two kinds of element bypass the integer product:

* **direct** elements, whose row and column share at most two non-zero terms
  (diagonal scalings, selectors, permutations, difference operators): the one product
  ``RN(a b)``, or the compensated two-term sum of
  :func:`~ozaki_backend.spec.certificate.direct_values` — exact up to the one final
  rounding, where native DGEMM is exact too (a Sterbenz difference) or close to it;
* **repaired** elements, the few the a-posteriori test leaves unsettled: a compensated
  float64 dot product (Dot2) in a fixed blocked order (:func:`dot2_in_order`; round to
  nearest, no fused multiply-add) — about as accurate as the float64 rounding of the
  exact value, so never worse than native DGEMM even on an element that cancels badly,
  within native DGEMM's own kind of bound.

Both read the caller's operands (equilibration does not change a product ``a b``), and
both are the same operations in ``kernels/certificate.cu``, so the engines agree bit for
bit.
"""

from __future__ import annotations

import numpy as np

from ..spec import certificate as spec


def direct_into(C, bound, A, B, d: spec.CertData, ke):
    """Overwrite the direct elements of ``C`` (and ``bound``, when given) with their
    direct values; returns how many there are."""
    mask = spec.direct(ke)
    count = int(mask.sum())
    if not count:
        return 0
    k1, k2 = spec.direct_indices(d, ke)
    i, j = np.nonzero(mask)
    k1, k2 = k1[i, j], k2[i, j]
    two = k1 != k2
    a1, b1 = A[i, k1], B[k1, j]
    a2 = np.where(two, A[i, k2], 0.0)
    b2 = np.where(two, B[k2, j], 0.0)
    v, b = spec.direct_values(a1, b1, a2, b2, two)
    C[i, j] = v
    if bound is not None:
        bound[i, j] = b
    return count


#: Lanes of the repaired elements' dot products (``kernels/certificate.cu`` ``oz_repair``:
#: one warp per element).
LANES = 32


def dot2_in_order(A, B, rows, cols):
    """Compensated dot products (Ogita, Rump and Oishi's Dot2) of rows ``rows`` of A with
    columns ``cols`` of B in a fixed order (what the CUDA kernel does, one warp per
    element). Lane ``l`` takes the terms ``k = l, l + 32, ...`` in that order: ``p =
    RN(a b)`` and its error ``e = ldexp(l, ea + eb)``, ``l`` the error of Dekker's product
    of the factors' frexp fractions (exact at any magnitude: no split overflows, and the
    result is the same bits for operands scaled by powers of two), Knuth's sum
    ``(s, r) = TwoSum(s, p)`` and ``c = RN(c + RN(r + e))``; then the lanes meet pairwise
    for ``h = 16, 8, 4, 2, 1``: ``(s_l, r) = TwoSum(s_l, s_{l+h})``, ``c_l = RN(RN(c_l +
    c_{l+h}) + r)``; the result is ``RN(s_0 + c_0)``."""
    k = A.shape[1]
    s = np.zeros((len(rows), LANES))
    c = np.zeros((len(rows), LANES))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        for k0 in range(0, k, LANES):
            w = min(LANES, k - k0)
            a = A[rows, k0:k0 + w]
            b = B[k0:k0 + w][:, cols].T
            p, e = spec.two_prod_scaled(a, b)
            s2, r = spec.two_sum(s[:, :w], p)
            c[:, :w] = c[:, :w] + (r + e)
            s[:, :w] = s2
        h = LANES // 2
        while h:
            s2, r = spec.two_sum(s[:, :h], s[:, h:2 * h])
            c[:, :h] = (c[:, :h] + c[:, h:2 * h]) + r
            s[:, :h] = s2
            h //= 2
        return s[:, 0] + c[:, 0]


def repair_into(C, bound, A, B, d: spec.CertData, ke, unsettled):
    """Recompute the ``unsettled`` elements of ``C`` as compensated dot products
    (:func:`dot2_in_order`), with their bound (``bound``, when given)."""
    i, j = np.nonzero(unsettled)
    if not len(i):
        return 0
    C[i, j] = dot2_in_order(A, B, i, j)
    if bound is not None:
        bound[i, j] = spec.repair_bound(d, ke)[i, j]
    return len(i)
