"""Ozaki scheme II on the CPU, end to end, with its certificate.

equilibrate -> statistics -> (moduli count) -> truncate -> residues -> modular GEMMs
-> CRT -> certificate. Every stage is exact integer arithmetic until the one rounding
in ``crt``, so this pipeline is the oracle the CUDA engine's (``cuda/pipeline.py``) is
compared with bit for bit. The seed scheme has its own pipeline (``phase22.py``);
``engine.py`` chooses.

``precision="fp64"`` (``docs/spec.md`` §10.3–10.5): the count at which at most 1/16 of
the elements fail the a-priori test against native DGEMM's error on these data (or one
below it, where few enough fail there); those are tested a posteriori and the few still
unsettled recomputed as compensated dot products (``direct.py``, which also computes the
elements of one or two terms); when too many remain, the 1/16 rule's count, the count
every element passes, the most moduli, the exact residual pass, the native float64
product. Explicit ``moduli=`` / ``bits=`` use their count and report
whether it met the target.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import _native, _stats
from .._warnings import warn_native
from ..semantics import transpose_pair
from ..spec.moduli import MAX_MODULI, MIN_MODULI, MODULI
from ..spec import certificate as spec
from . import certificate, crt, direct, equilibrate, modgemm, residues, scaling, symmetric

#: Outcomes of one 2-D product (``stats()["certificate"]`` counts them).
CERTIFIED = "certified"            # met the native-level target (fp64) / with its count
UNCERTIFIED = "uncertified"        # a fixed count (moduli=, bits=) that misses the target
RESIDUAL = "residual pass"         # met the target after the exact residual pass
NATIVE = "native fallback"         # computed by the native float64 GEMM


class Product(NamedTuple):
    """One 2-D product and how it was obtained.

    Attributes
    ----------
    C : ndarray of float64 (m, n)
    bound : ndarray of float64 (m, n) or None
        A rigorous bound on ``|C - AB|`` per element (when asked for).
    n_moduli : int
        Moduli of the main integer product (0 for the native fallback).
    outcome : str
        :data:`CERTIFIED`, :data:`UNCERTIFIED`, :data:`RESIDUAL` or :data:`NATIVE`.
    patched : ndarray of bool (m, n) or None
        The elements computed from their terms rather than by the integer product (the
        direct ones, the repaired ones: ``direct.py``); None when there are none.
    """

    C: np.ndarray
    bound: np.ndarray | None
    n_moduli: int
    outcome: str
    patched: np.ndarray | None = None


def integer_product(A, B, s, t, n_moduli, sym=False):
    """``RN(A'B' 2^{-s-t})`` with ``A' = trunc(A 2^s)``, ``B' = trunc(2^t B)`` (the
    exact integer product through ``n_moduli`` residues and the CRT); ``sym``:
    ``B = A.T`` and ``t = s``, one triangle is computed and mirrored
    (:mod:`.symmetric`)."""
    if sym:
        return symmetric.integer_product(A, s, n_moduli)
    moduli = MODULI[:n_moduli]
    Ai = scaling.truncate(A, s)
    Bi = scaling.truncate(B.T, t).T
    RA = residues.residues(Ai, moduli)
    RB = residues.residues(Bi, moduli)
    c = modgemm.modular_products(RA, RB, moduli)
    return crt.reconstruct_round(c, moduli, s, t)


def _fixed(A, B, st, d, plan, want_bound):
    """A fixed count (``moduli=``/``bits=``): the integer product as it is, recorded as
    certified when every element passes the a-priori test (``docs/spec.md`` §10.6)."""
    N = plan.n_moduli
    s, t = scaling.shifts(st, N, plan.mode)
    C = integer_product(A, B, s, t, N, sym=st.symmetric)
    pre = spec.prior(d)
    ok = bool(spec.passes(d, s, t, pre).all()) and not bool(spec.direct(pre.ke).any())
    bound = spec.result_bound(d, s, t, C) if want_bound else None
    return Product(C, bound, N, CERTIFIED if ok else UNCERTIFIED)


def _residual_term(X, Y, mode):
    """``(R, T)``: the emulated product ``X @ Y`` with 20 moduli (its own equilibration
    and scaling) and its truncation bound ``T`` in absolute units."""
    X, Y, _ = equilibrate.equilibrate(X, Y)
    st = scaling.statistics(X, Y, mode)
    s, t = scaling.shifts(st, MAX_MODULI, mode)
    return (lambda: integer_product(X, Y, s, t, MAX_MODULI)), \
        spec.truncation_bound(certificate.data(st), s, t)


def residual_pass(A, B, st, d, pre, mode, n_moduli, C1, level):
    """The exact residual pass (``docs/spec.md`` §10.4): ``(C, bound)``, or None when
    its certificate misses the target.

    With the shifts of ``n_moduli``, ``A = Ã + dA`` and ``B = B̃ + dB`` exactly
    (``Ã = A' 2^-s``; ``dA = A - Ã`` is exact by Sterbenz's lemma), so
    ``AB = ÃB̃ + dA B + Ã dB``: the two remainders are multiplied as further emulated
    products (20 moduli, their own equilibration and scaling) and the three rounded
    results are added in float64, ``C = (C1 + R1) + R2`` with ``C1 = RN(ÃB̃)``. The bound
    adds the remainders' truncation bounds and every rounding,
    ``T1 + T2 + u(|C1| + |R1| + |R2| + |S| + |C|) + 5 eta``. The remainders' truncation
    bounds are tested (with ``|C1|`` standing in for ``|C|``) before their GEMMs run;
    ``level`` is the a-posteriori test's (:class:`~ozaki_backend.spec.certificate.Posterior`).
    """
    s, t = scaling.shifts(st, n_moduli, mode)
    At = np.ldexp(scaling.truncate(A, s), -s[:, None])
    Bt = np.ldexp(scaling.truncate(B.T, t).T, -t[None, :])
    return spec.add_residuals(d, pre, C1, level,
                              *_residual_term(A - At, B, mode),
                              *_residual_term(At, B - Bt, mode))


def _native_product(A0, B0, st, d, want_bound, why):
    """The native float64 product, counted and warned (``docs/spec.md`` §10.4)."""
    warn_native(why)
    C = _native.matmul(A0, B0)
    if st.symmetric:         # NumPy's syrk is symmetric already; a copy's gemm may not be
        C = symmetric.symmetrize(C)
    return Product(C, spec.native_bound(d) if want_bound else None, 0, NATIVE)


def _adaptive(A0, B0, A, B, plan, st, d, want_bound):
    """``precision="fp64"``: the certificate's count, the a-posteriori test of the few
    elements failing a priori, their repair, else more moduli, the residual pass, the
    native product (``docs/spec.md`` §10.3–10.5)."""
    pre = spec.prior(d)
    ch = certificate.choose_count(d, st, plan.mode, pre=pre)
    tried = set()
    N = ch.n_moduli
    while True:
        tried.add(N)
        s, t = scaling.shifts(st, N, plan.mode)
        C = integer_product(A, B, s, t, N, sym=st.symmetric)
        failing = ~spec.passes(d, s, t, pre)
        if not failing.any():
            bound = spec.result_bound(d, s, t, C) if want_bound else None
            return _finish(C, bound, A0, B0, d, pre, st, N, CERTIFIED)
        post = spec.posterior(d, s, t, C, pre, failing)
        un = post.unsettled
        n_un = int(un.sum())
        if n_un == 0 or spec.repairable(n_un, st.k, bool(pre.big[un].any()), C.size):
            bound = post.bound if want_bound else None
            direct.repair_into(C, bound, A0, B0, d, pre.ke, un)
            return _finish(C, bound, A0, B0, d, pre, st, N, CERTIFIED, un if n_un else None)
        # Too many unsettled elements: the 1/16 rule's count when the product took one
        # below it, the count every element passes a priori, else the most moduli
        # (tested again), else the residual pass, else native.
        N2 = spec.next_count(ch, tried, MAX_MODULI)
        if N2 is not None:
            N = N2
            continue
        rp = residual_pass(A, B, st, d, pre, plan.mode, N, C, post.level)
        if rp is not None:
            C, bound = rp
            if st.symmetric:     # the remainders' products are not symmetric: mirror
                C, bound = symmetric.symmetrize(C), symmetric.symmetrize(bound)
            return _finish(C, bound if want_bound else None, A0, B0, d, pre, st, N,
                           RESIDUAL)
        return _native_product(A0, B0, st, d, want_bound,
                       "neither the certificate with up to 20 moduli nor the residual "
                       "pass meets the native-level target")


def _finish(C, bound, A0, B0, d, pre, st, N, outcome, repaired=None):
    """The direct elements written (``direct.py``), the product's record."""
    patched = repaired
    if direct.direct_into(C, bound, A0, B0, d, pre.ke):
        dm = spec.direct(pre.ke)
        patched = dm if patched is None else (patched | dm)
    if st.symmetric:
        C = symmetric.symmetrize(C)
        if bound is not None:
            bound = symmetric.symmetrize(bound)
    return Product(C, bound, N, outcome, patched)


def _direct_product(A0, B0, d, pre, want_bound):
    """Every element has at most two terms: no integer product at all."""
    m, n = d.P.shape
    C = np.zeros((m, n))
    bound = np.zeros((m, n)) if want_bound else None
    direct.direct_into(C, bound, A0, B0, d, pre.ke)
    return Product(C, bound, 0, CERTIFIED, spec.direct(pre.ke))


def ozaki2_2d(A, B, plan, *, want_bound=False) -> Product:
    """Ozaki scheme II product of 2-D finite float64 ``A (m, k)``, ``B (k, n)``.

    Parameters
    ----------
    A, B : ndarray of float64
    plan : Plan
        ``scheme="ozaki2"``; an adaptive (``precision="fp64"``) plan chooses the count.
    want_bound : bool
        Also return the rigorous per-element error bound.
    """
    m, k = A.shape
    n = B.shape[1]
    if m == 0 or n == 0 or k == 0:
        return Product(np.zeros((m, n)), np.zeros((m, n)) if want_bound else None,
                       0, CERTIFIED)
    A0, B0 = A, B
    sym = transpose_pair(A, B)
    A, B, S = equilibrate.equilibrate(A, B)
    # B = A.T gives S = 0 (the two sides' exponents are equal): kept as a check.
    st = scaling.statistics(A, B, plan.mode, symmetric=sym and not S.any())
    if not plan.adaptive:
        res = _fixed(A, B, st, certificate.data(st), plan, want_bound)
    else:
        d = certificate.data(st, certificate.gathered(A, B, st))
        pre = spec.prior(d)
        if bool(pre.exempt.all()):
            res = _direct_product(A0, B0, d, pre, want_bound)
        else:
            res = _adaptive(A0, B0, A, B, plan, st, d, want_bound)
    if res.n_moduli:
        _stats.record_moduli(res.n_moduli)
    _stats.record_certificate(res.outcome)
    return res


def _certificate_data(A, B, mode):
    """``(st, d)``: the statistics and the certificate's data of ``A @ B`` as
    ``precision="fp64"`` computes them (equilibrated; a transposed pair as a symmetric
    product); None for an empty product."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    sym = transpose_pair(A, B)
    A, B, S = equilibrate.equilibrate(A, B)
    if 0 in A.shape or B.shape[1] == 0:
        return None
    st = scaling.statistics(A, B, mode, symmetric=sym and not S.any())
    return st, certificate.data(st, certificate.gathered(A, B, st))


def count_choice(A, B, mode: str):
    """The certificate's :class:`~ozaki_backend.spec.certificate.Choice` for ``A @ B``
    (``docs/spec.md`` §10.3): the count ``precision="fp64"`` computes it with, the
    elements failing that count a priori, and the fewest count all pass; None for an
    empty product."""
    sd = _certificate_data(A, B, mode)
    return None if sd is None else certificate.choose_count(sd[1], sd[0], mode)


def moduli_for(A, B, plan):
    """The moduli count of the integer product ``plan`` computes for ``A @ B``: its own
    when fixed; for ``precision="fp64"`` the count of :func:`certificate.choose_count`
    (0 when every element is computed directly; the product may still take more moduli,
    the residual pass or the native GEMM)."""
    if not plan.adaptive:
        return plan.n_moduli
    sd = _certificate_data(A, B, plan.mode)
    if sd is None:
        return MIN_MODULI
    st, d = sd
    pre = spec.prior(d)
    if bool(pre.exempt.all()):
        return 0
    return certificate.choose_count(d, st, plan.mode, pre=pre).n_moduli


__all__ = ["Product", "integer_product", "residual_pass", "ozaki2_2d", "moduli_for",
           "count_choice", "CERTIFIED", "UNCERTIFIED", "RESIDUAL", "NATIVE"]
