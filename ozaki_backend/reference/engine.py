"""The CPU reference engine: :class:`ozaki_backend.engine.Engine` on NumPy arrays.

Chooses the scheme's pipeline (``pipeline.py`` for Ozaki scheme II with its certificate,
``phase22.py`` for the seed scheme), checks the operands for NaN/infinity on the host
(such products are declined and computed natively), and applies ``alpha``/``beta``.
"""

from __future__ import annotations

import numpy as np

from ..engine import DECLINED, DONE, OVERFLOW, Engine
from ..semantics import apply_alpha_beta
from . import complex as complex_
from . import phase22, pipeline


def product_2d(A, B, plan):
    """The product of 2-D finite float64 operands with ``plan`` (either scheme)."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    if plan.scheme == "phase22":
        return phase22.matmul_2d(A, B, plan)
    return pipeline.ozaki2_2d(A, B, plan).C


class CpuEngine(Engine):
    """The exact NumPy engine (``engine="cpu"``): bitwise what ``docs/spec.md`` says."""

    name = "cpu"
    array_types = ("numpy",)

    def availability(self):
        return True, "the NumPy reference engine"

    def product(self, a3, b3, plan, out3, *, alpha=1.0, beta=0.0, c3=None,
                bound3=None) -> int:
        if not (np.isfinite(a3).all() and np.isfinite(b3).all()):
            return DECLINED
        is_complex = out3.dtype.kind == "c"     # complex stacks: docs/spec.md §11
        for idx in np.ndindex(*a3.shape[:-2]):
            if is_complex:
                A, B = np.asarray(a3[idx]), np.asarray(b3[idx])
            else:
                A = np.asarray(a3[idx], dtype=np.float64)
                B = np.asarray(b3[idx], dtype=np.float64)
            if plan.scheme == "phase22" and not is_complex:
                C = phase22.matmul_2d(A, B, plan)
            else:
                run = complex_.complex_2d if is_complex else pipeline.ozaki2_2d
                res = run(A, B, plan, want_bound=bound3 is not None)
                C = res.C
                if bound3 is not None:
                    bound3[idx] = res.bound
            if alpha != 1.0 or beta != 0.0:
                C = apply_alpha_beta(C, alpha, beta, None if c3 is None else c3[idx])
            out3[idx] = C
        return OVERFLOW if np.isinf(out3).any() else DONE

    def moduli_for(self, A, B, plan):
        if np.iscomplexobj(A) or np.iscomplexobj(B):
            return complex_.moduli_for(A, B, plan)
        return pipeline.moduli_for(A, B, plan)


ENGINE = CpuEngine()
