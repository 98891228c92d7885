"""Stage 5 — the certificate on the CPU: the moduli count and the a-posteriori test.

Evaluates the formulas of :mod:`ozaki_backend.spec.certificate` (``docs/spec.md`` §10) on
the statistics of ``scaling.py``: every quantity is an exact integer or a power of two
until one rounded operation per element, whose rounding is accounted for, so both
engines reach the same decisions bit for bit.
"""

from __future__ import annotations

import numpy as np

from ..spec import certificate as spec
from ..spec.moduli import MAX_MODULI, MIN_MODULI
from . import scaling


def data(st: scaling.Statistics) -> spec.CertData:
    """The certificate's view of the statistics."""
    return spec.CertData(st.k, st.E, st.F, st.xA, st.yB, st.SA + st.nA, st.SB + st.nB,
                         st.nA, st.nB, st.loA, st.hiA, st.loB, st.hiB, st.P)


def passes(st: scaling.Statistics, s, t):
    """Bool ``(m, n)``: which elements meet the target ``c_k u L_ij`` at ``(s, t)``."""
    return spec.passes(data(st), s, t)


def certified(st: scaling.Statistics, n_moduli: int, mode: str) -> bool:
    """Whether every element of the product meets the target a priori with ``n_moduli``."""
    s, t = scaling.shifts(st, n_moduli, mode)
    return bool(passes(st, s, t).all())


def element_counts(st: scaling.Statistics, mode: str, *, max_moduli: int = MAX_MODULI,
                   shifts=scaling.shifts):
    """int64 ``(m, n)``: for each element the fewest moduli in ``[2, max_moduli]`` whose
    a-priori test it passes, or 0 when none does (``docs/spec.md`` §10.3).

    ``max_moduli`` and ``shifts`` are the moduli table's size and its shift rule (the
    complex pipeline passes its own, ``reference/complex.py``).

    The test is monotone in the count (every shift is non-decreasing in it), so one
    sweep upwards finds each element's count; it stops once every element has one.
    """
    d = data(st)
    limit = spec.target(d)
    need = np.zeros(st.P.shape, dtype=np.int64)
    for N in range(MIN_MODULI, max_moduli + 1):
        s, t = shifts(st, N, mode)
        newly = (need == 0) & spec.passes(d, s, t, limit)
        need[newly] = N
        if need.all():
            break
    return need


def choose_count(st: scaling.Statistics, mode: str, *, max_moduli: int = MAX_MODULI,
                 shifts=scaling.shifts):
    """``(N, all_certified)`` for ``precision="fp64"`` (``docs/spec.md`` §10.3):
    ``all_certified`` whether every element passes the a-priori test at some count, and
    then ``N`` the largest per-element count of :func:`element_counts`; otherwise
    ``N = max_moduli`` (20 for the real table), the count that gives the a-posteriori test
    (:func:`~ozaki_backend.spec.certificate.meets_target`) its best chance before the
    residual pass (which costs two more products at 20 moduli)."""
    need = element_counts(st, mode, max_moduli=max_moduli, shifts=shifts)
    if not need.all():
        return max_moduli, False
    return int(need.max()), True
