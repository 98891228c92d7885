"""The CPU reference engine end to end: scaling -> residues -> modular GEMMs -> CRT.

Every stage is exact integer arithmetic until the one rounding in ``crt``, so this
engine is the oracle the CUDA engine is compared with bit for bit.
"""

from __future__ import annotations

import numpy as np

from .. import _stats
from . import crt, modgemm, residues, scaling


def ozaki2_2d(A, B, plan):
    """Ozaki scheme II product of 2-D finite float64 ``A (m, k)``, ``B (k, n)``."""
    m, k = A.shape
    n = B.shape[1]
    if m == 0 or n == 0 or k == 0:
        return np.zeros((m, n))
    # precision="fp64": the moduli count of this product, from the operands' exponent
    # spread (spec §1); a fixed-count plan is returned unchanged.
    plan = plan.resolve(A, B)
    _stats.record_moduli(plan.n_moduli)
    s, t = scaling.exponents(A, B, plan)
    Ai = scaling.truncate(A, s)
    Bi = scaling.truncate(B.T, t).T
    RA = residues.residues(Ai, plan.moduli)
    RB = residues.residues(Bi, plan.moduli)
    c = modgemm.modular_products(RA, RB, plan.moduli)
    return crt.reconstruct_round(c, plan.moduli, s, t)


def matmul_2d(A, B, plan):
    """Product of 2-D finite float64 operands with ``plan`` (either scheme)."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    if plan.scheme == "phase22":
        from . import phase22

        return phase22.matmul_2d(A, B, plan)
    return ozaki2_2d(A, B, plan)
