"""Stage 5 — the certificate on the CPU: the gathers, the moduli count, the a-posteriori
test.

Evaluates the formulas of :mod:`ozaki_backend.spec.certificate` (``docs/spec.md`` §10) on
the statistics of ``scaling.py``: every rigorous quantity is an exact integer or a power
of two until one rounded operation per element, whose rounding is accounted for, and the
target's arithmetic is the same round-to-nearest sequence on both engines, so both reach
the same decisions bit for bit.
"""

from __future__ import annotations

import numpy as np

from ..spec import certificate as spec
from ..spec.moduli import MAX_MODULI, MIN_MODULI
from ..spec.rules import GATHER_H
from . import scaling


def top_indices(X, h: int):
    """int64 ``(rows, h)``: the columns of each row's ``h`` largest magnitudes, largest
    first, ties to the lower column (``kernels/certificate.cu`` ``oz_top_entries`` takes
    the same; a row with fewer non-zero entries fills up with zeros' columns, whose codes
    are zero)."""
    return np.argsort(-np.abs(X), axis=1, kind="stable")[:, :h].astype(np.int64)


def gathered(A, B, st: scaling.Statistics):
    """``G14`` (``docs/spec.md`` §10.2): per element the largest product of the codes'
    values over the top ``GATHER_H`` entries of row ``i`` of A (with B's entries in
    those rows) and of column ``j`` of B (with A's entries in those columns), in units
    of ``2^{E_i+F_j-14}`` — a lower bound of the element's largest term; None when the
    gathers do not run (:func:`~ozaki_backend.spec.certificate.gathers_needed`)."""
    m, k = A.shape
    n = B.shape[1]
    if not (m and n and k) or not spec.gathers_needed(st.zA, st.nA, st.zB, st.nB):
        return None
    h = min(GATHER_H, k)
    cA = spec.codes(A, st.E)                    # (m, k)
    cB = spec.codes(B.T, st.F)                  # (n, k)
    HA, HB = top_indices(A, h), top_indices(B.T, h)
    topA = spec.code_value(np.take_along_axis(cA, HA, 1))       # (m, h)
    topB = spec.code_value(np.take_along_axis(cB, HB, 1))       # (n, h)
    G = np.zeros((m, n))
    for r in range(h):
        G = np.maximum(G, topA[:, r:r + 1] * spec.code_value(cB[:, HA[:, r]].T))
        G = np.maximum(G, spec.code_value(cA[:, HB[:, r]]) * topB[None, :, r])
    return np.ldexp(G, 14)


def data(st: scaling.Statistics, G14=None) -> spec.CertData:
    """The certificate's view of the statistics (``G14``: :func:`gathered`). The
    window's counts ``nA - zA`` go with the real products' statistics (those with the
    sums of squares); the complex embedding's, like the CUDA engine's, go without."""
    real = st.S2A is not None
    return spec.CertData(st.k, st.E, st.F, st.xA, st.yB, st.SA + st.nA, st.SB + st.nB,
                         st.nA, st.nB, st.loA, st.hiA, st.loB, st.hiB, st.P,
                         spec.norm_factor(st.SA + st.nA, st.S2A, st.SA, st.nA),
                         spec.norm_factor(st.SB + st.nB, st.S2B, st.SB, st.nB), G14,
                         st.nA - st.zA if real else None, st.nB - st.zB if real else None)


def element_counts(d: spec.CertData, st: scaling.Statistics, mode: str, *,
                   max_moduli: int = MAX_MODULI, shifts=scaling.shifts, pre=None):
    """int64 ``(m, n)``: for each element the fewest moduli in ``[2, max_moduli]`` whose
    a-priori test it passes, or 0 when none does (``docs/spec.md`` §10.3).

    ``max_moduli`` and ``shifts`` are the moduli table's size and its shift rule (the
    complex pipeline passes its own, ``reference/complex.py``).
    """
    return spec.element_counts(d, lambda N: shifts(st, N, mode),
                               range(MIN_MODULI, max_moduli + 1), pre)


def choose_count(d: spec.CertData, st: scaling.Statistics, mode: str, *,
                 max_moduli: int = MAX_MODULI, shifts=scaling.shifts, pre=None,
                 repairs: bool = True):
    """The :class:`~ozaki_backend.spec.certificate.Choice` of ``precision="fp64"``
    (``docs/spec.md`` §10.3): the fewest count at which at most 1/16 of the elements
    fail the a-priori test, or one below it where the elements failing there are few
    enough to be settled a posteriori or repaired (``repairs``: the product repairs its
    unsettled elements; the complex ones do not), the number failing at the count, and
    the fewest count all pass."""
    need = element_counts(d, st, mode, max_moduli=max_moduli, shifts=shifts, pre=pre)
    hist, none = spec.histogram(need)
    return spec.choose(hist, none, need.size, list(range(MIN_MODULI, max_moduli + 1)),
                       spec.repair_cap(d.k, need.size) if repairs else 0)
