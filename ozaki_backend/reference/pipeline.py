"""Ozaki scheme II on the CPU, end to end: scaling -> residues -> modular GEMMs -> CRT.

Every stage is exact integer arithmetic until the one rounding in ``crt``, so this
pipeline is the oracle the CUDA engine's (``cuda/pipeline.py``) is compared with bit
for bit. The seed scheme has its own pipeline (``phase22.py``); ``engine.py`` chooses.
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
    # spread (spec §1.1); a fixed-count plan is returned unchanged.
    plan = plan.for_spread(scaling.exponent_spread(A, B))
    _stats.record_moduli(plan.n_moduli)
    s, t = scaling.exponents(A, B, plan)
    Ai = scaling.truncate(A, s)
    Bi = scaling.truncate(B.T, t).T
    RA = residues.residues(Ai, plan.moduli)
    RB = residues.residues(Bi, plan.moduli)
    c = modgemm.modular_products(RA, RB, plan.moduli)
    return crt.reconstruct_round(c, plan.moduli, s, t)
