"""Ozaki scheme II on the CPU, end to end, with its certificate.

equilibrate -> statistics -> (moduli count) -> truncate -> residues -> modular GEMMs
-> CRT -> certificate. Every stage is exact integer arithmetic until the one rounding
in ``crt``, so this pipeline is the oracle the CUDA engine's (``cuda/pipeline.py``) is
compared with bit for bit. The seed scheme has its own pipeline (``phase22.py``);
``engine.py`` chooses.

``precision="fp64"`` (``docs/spec.md`` §10.3): the fewest moduli whose certificate meets
the native-level target; when even 20 do not, the exact residual pass (§10.4); when that
misses too, the native float64 product. Explicit ``moduli=`` / ``bits=`` use their count
and report whether it met the target.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import _native, _stats
from .._warnings import warn_native
from ..semantics import transpose_pair
from ..spec.moduli import MAX_MODULI, MIN_MODULI, MODULI
from ..spec import certificate as spec
from . import certificate, crt, equilibrate, modgemm, residues, scaling, symmetric

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
    """

    C: np.ndarray
    bound: np.ndarray | None
    n_moduli: int
    outcome: str


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


def _with_count(A, B, plan, st, n_moduli, want_bound, certified=None):
    """The product with ``n_moduli`` moduli; ``certified`` when already known."""
    s, t = scaling.shifts(st, n_moduli, plan.mode)
    C = integer_product(A, B, s, t, n_moduli, sym=st.symmetric)
    d = certificate.data(st)
    if certified is None:
        certified = bool(spec.passes(d, s, t).all())
    bound = spec.result_bound(d, s, t, C) if want_bound else None
    return Product(C, bound, n_moduli, CERTIFIED if certified else UNCERTIFIED)


def _residual_term(X, Y, mode):
    """``(R, T)``: the emulated product ``X @ Y`` with 20 moduli (its own equilibration
    and scaling) and its truncation bound ``T`` in absolute units."""
    X, Y, _ = equilibrate.equilibrate(X, Y)
    st = scaling.statistics(X, Y, mode)
    s, t = scaling.shifts(st, MAX_MODULI, mode)
    return (lambda: integer_product(X, Y, s, t, MAX_MODULI)), \
        spec.truncation_bound(certificate.data(st), s, t)


def residual_pass(A, B, st, mode, n_moduli, C1):
    """The exact residual pass (``docs/spec.md`` §10.4): ``(C, bound)``, or None when
    its certificate misses the target.

    With the shifts of ``n_moduli``, ``A = Ã + dA`` and ``B = B̃ + dB`` exactly
    (``Ã = A' 2^-s``; ``dA = A - Ã`` is exact by Sterbenz's lemma), so
    ``AB = ÃB̃ + dA B + Ã dB``: the two remainders are multiplied as further emulated
    products (20 moduli, their own equilibration and scaling) and the three rounded
    results are added in float64, ``C = (C1 + R1) + R2`` with ``C1 = RN(ÃB̃)``. The bound
    adds the remainders' truncation bounds and every rounding,
    ``T1 + T2 + u(|C1| + |R1| + |R2| + |S| + |C|) + 5 eta``. The remainders' truncation
    bounds are tested against the target (with ``|C1|`` standing in for ``|C|``) before
    their GEMMs run.
    """
    s, t = scaling.shifts(st, n_moduli, mode)
    At = np.ldexp(scaling.truncate(A, s), -s[:, None])
    Bt = np.ldexp(scaling.truncate(B.T, t).T, -t[None, :])
    return spec.add_residuals(certificate.data(st), C1,
                              *_residual_term(A - At, B, mode),
                              *_residual_term(At, B - Bt, mode))


def _escalate(A0, B0, A, B, plan, st, res, want_bound):
    """Some element passes no a-priori test: the computed result tested a posteriori,
    then the residual pass, then the native product (``docs/spec.md`` §10.4)."""
    d = certificate.data(st)
    s, t = scaling.shifts(st, res.n_moduli, plan.mode)
    if spec.meets_target(d, spec.truncation_bound(d, s, t), res.bound, res.C).all():
        return res._replace(outcome=CERTIFIED, bound=res.bound if want_bound else None)
    rp = residual_pass(A, B, st, plan.mode, res.n_moduli, res.C)
    if rp is not None:
        C, bound = rp
        if st.symmetric:     # the remainders' products are not symmetric: mirror
            C, bound = symmetric.symmetrize(C), symmetric.symmetrize(bound)
        return Product(C, bound if want_bound else None, res.n_moduli, RESIDUAL)
    warn_native("neither the certificate with up to 20 moduli nor the residual pass "
                "meets the native-level target")
    C = _native.matmul(A0, B0)
    if st.symmetric:         # NumPy's syrk is symmetric already; a copy's gemm may not be
        C = symmetric.symmetrize(C)
    return Product(C, spec.native_bound(d) if want_bound else None, 0, NATIVE)


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
        res = _with_count(A, B, plan, st, plan.n_moduli, want_bound)
    else:
        N, all_certified = certificate.choose_count(st, plan.mode)
        if all_certified:
            res = _with_count(A, B, plan, st, N, want_bound, certified=True)
        else:
            res = _with_count(A, B, plan, st, N, True, certified=False)
            res = _escalate(A0, B0, A, B, plan, st, res, want_bound)
    if res.n_moduli:
        _stats.record_moduli(res.n_moduli)
    _stats.record_certificate(res.outcome)
    return res


def moduli_for(A, B, plan):
    """The moduli count of the integer product ``plan`` computes for ``A @ B``: its own
    when fixed; for ``precision="fp64"`` the count of :func:`certificate.choose_count`
    (the result may still take the residual pass or the native GEMM)."""
    if not plan.adaptive:
        return plan.n_moduli
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    sym = transpose_pair(A, B)
    A, B, S = equilibrate.equilibrate(A, B)
    if 0 in A.shape or B.shape[1] == 0:
        return MIN_MODULI
    st = scaling.statistics(A, B, plan.mode, symmetric=sym and not S.any())
    return certificate.choose_count(st, plan.mode)[0]


__all__ = ["Product", "integer_product", "residual_pass", "ozaki2_2d", "moduli_for",
           "CERTIFIED", "UNCERTIFIED", "RESIDUAL", "NATIVE"]
