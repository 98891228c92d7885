"""Stage 6 — elements computed from their terms (``docs/spec.md`` §10.5).

Two kinds of element bypass the integer product:

* **direct** elements, whose row and column share at most two non-zero terms
  (diagonal scalings, selectors, permutations, difference operators): the one product
  ``RN(a b)``, or the compensated two-term sum of
  :func:`~ozaki_backend.spec.certificate.direct_values` — exact up to the one final
  rounding, where native DGEMM is exact too (a Sterbenz difference) or close to it;
* **repaired** elements, the few the a-posteriori test leaves unsettled: a float64 dot
  product in a fixed blocked order (:func:`dot_in_order`; round to nearest, no fused
  multiply-add), within native DGEMM's own kind of bound.

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


def dot_in_order(A, B, rows, cols):
    """``RN`` dot products of rows ``rows`` of A with columns ``cols`` of B in a fixed
    order (what the CUDA kernel does, one warp per element): lane ``l`` sums the terms
    ``k = l, l + 32, ...`` in that order (``s = RN(s + RN(a_k b_k))``), then the lanes
    meet pairwise, ``s_l = RN(s_l + s_{l + h})`` for ``h = 16, 8, 4, 2, 1``."""
    k = A.shape[1]
    s = np.zeros((len(rows), LANES))
    with np.errstate(over="ignore", invalid="ignore"):
        for k0 in range(0, k, LANES):
            w = min(LANES, k - k0)
            s[:, :w] = s[:, :w] + A[rows, k0:k0 + w] * B[k0:k0 + w][:, cols].T
        h = LANES // 2
        while h:
            s[:, :h] = s[:, :h] + s[:, h:2 * h]
            h //= 2
    return s[:, 0]


def repair_into(C, bound, A, B, d: spec.CertData, ke, unsettled):
    """Recompute the ``unsettled`` elements of ``C`` as float64 dot products
    (:func:`dot_in_order`), with their bound (``bound``, when given)."""
    i, j = np.nonzero(unsettled)
    if not len(i):
        return 0
    C[i, j] = dot_in_order(A, B, i, j)
    if bound is not None:
        bound[i, j] = spec.repair_bound(d, ke)[i, j]
    return len(i)
