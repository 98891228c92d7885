"""Stage 0 — equilibration along k: ``A·2^-S`` and ``2^S·B`` (``docs/spec.md`` §2.1).

Per inner index ``k`` a power of two moves magnitude between column ``k`` of A and
row ``k`` of B. The product is unchanged exactly (every scaled element stays a normal
float64, or is not scaled down), but a scaling pattern along ``k`` in the data
(``A = X·D``, ``B = D⁻¹·Y``: mixed physical units, balancing, similarity transforms)
no longer starves a row's small entries in the row/column scaling that follows.

The rule uses exact integers only (frexp exponents), so both engines compute the same
``S``:

* ``a_k`` / ``a'_k``: the largest / smallest exponent of column ``k``'s non-zero
  entries; ``b_k`` / ``b'_k`` the same for row ``k`` of B; ``a`` / ``b`` the largest of
  all ``a_k`` / ``b_k``;
* ``s_k = trunc(((a_k − a) − (b_k − b)) / 2)`` (rounded toward zero, so a balanced pair
  is left alone), 0 when column ``k`` or row ``k`` is all zero. Measured against the
  operands' own largest exponents, ``S`` does not change when A or B is scaled by a
  power of two (so neither does any bit of the scaled product, spec §2.1);
* clamped to ``[lo_k, hi_k]`` with ``hi_k = min(max(0, a'_k + 1021), 1024 − b_k)``
  and ``lo_k = max(−max(0, b'_k + 1021), a_k − 1024)``: scaling down keeps every
  element normal, scaling up never overflows. ``0`` always lies in the interval.
"""

from __future__ import annotations

import numpy as np

from ..spec.equilibration import k_exponents, shifts_from_exponents

__all__ = ["k_exponents", "shifts", "equilibrate"]


def shifts(A, B):
    """The equilibration exponents ``S`` (int64, length ``k``) of ``A (m, k)``, ``B (k, n)``."""
    return shifts_from_exponents(*k_exponents(A, axis=0), *k_exponents(B, axis=1))


def equilibrate(A, B):
    """``(A·2^-S, 2^S·B, S)``: the exactly equilibrated operands and the exponents.

    Parameters
    ----------
    A : ndarray of float64, shape (m, k)
    B : ndarray of float64, shape (k, n)
        Finite operands.

    Returns
    -------
    A_eq, B_eq : ndarray of float64
        ``A_eq @ B_eq`` equals ``A @ B`` exactly (and so does ``|A_eq| @ |B_eq|``).
    S : ndarray of int64, shape (k,)
    """
    S = shifts(A, B)
    if not S.any():
        return A, B, S
    return np.ldexp(A, -S[None, :]), np.ldexp(B, S[:, None]), S
