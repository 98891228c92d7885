"""complex128 products on the CPU: Gaussian-integer residues, two real modular products
per modulus (``docs/spec.md`` §11).

For ``A = Ar + i Ai`` (m, k) and ``B = Br + i Bi`` (k, n), the complex product is the
real product of the embedding

    [Re C, Im C] = [Ar, -Ai] @ [[Br, Bi], [Bi, -Br]]        (m x 2k) @ (2k x 2n),

so the real scheme's statistics, shifts and certificate apply to it unchanged with
``k' = 2k`` — except that the shifts of columns ``j`` and ``n + j`` (the real and the
imaginary part of column ``j`` of ``B``'s result) are tied to their minimum, and the
equilibration exponent of index ``k`` is shared by ``k`` and ``k + K``, so that the
truncated operands are Gaussian integers ``A' = A'r + i A'i``, ``B' = B'r + i B'i``.
Their product is then computed with two real modular products per modulus (the maps
``x + i y -> x ± r y``, :mod:`ozaki_backend.spec.complex_moduli`), recombined into the
residues of ``Re A'B'`` and ``Im A'B'`` and reconstructed by the CRT.

Stages (mirrored by ``cuda/complex.py``): equilibrate -> statistics of the embedding ->
(moduli count) -> truncate -> residues -> Gaussian map -> two modular GEMMs per
modulus -> recombination -> CRT -> certificate.

A product with one real operand — real dtype, or complex with every imaginary part
zero — is the real scheme's product of the real operand with the stacked parts of the
other (``A @ [Br, Bi]`` or ``[Ar; Ai] @ B``): the imaginary part of the real operand is
exactly zero, so this is the same exact product, at ``k`` rather than ``2k`` and with
one real product per modulus.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import _native, _stats
from .._warnings import warn_native
from ..spec import certificate as spec
from ..spec.complex_moduli import (MAX_COMPLEX_MODULI, complex_crt_constants,
                                   complex_moduli_for_bits)
from ..spec.moduli import MIN_MODULI
from . import certificate, crt, direct, equilibrate, modgemm, pipeline, residues, scaling
from .pipeline import CERTIFIED, NATIVE, RESIDUAL, UNCERTIFIED


class ComplexProduct(NamedTuple):
    """One 2-D complex product and how it was obtained.

    Attributes
    ----------
    C : ndarray of complex128 (m, n)
    bound : ndarray of float64 (m, n) or None
        A rigorous bound on ``|C - AB|`` (the complex modulus) per element: the sum of
        the bounds of the real and imaginary parts, rounded up.
    n_moduli : int
        Moduli of the integer product (0 for the native fallback).
    outcome : str
        As :class:`~ozaki_backend.reference.pipeline.Product`.
    """

    C: np.ndarray
    bound: np.ndarray | None
    n_moduli: int
    outcome: str


# --------------------------------------------------------------------------- embedding

def compose(re, im):
    """complex128 array with real part ``re`` and imaginary part ``im`` (no arithmetic:
    the parts are stored as they are, signed zeros and infinities included)."""
    out = np.empty(re.shape, dtype=np.complex128)
    out.real = re
    out.imag = im
    return out


def real_if_exact(X):
    """``X`` itself, or its real part (float64) when ``X`` is complex with every
    imaginary part zero: a complex operand that holds real values is multiplied as a
    real one (§11.5), so ``A_real @ B`` gives the same bits whether or not ``A_real``
    was promoted to complex128 first (as NumPy's ``@`` does before its loop)."""
    if np.iscomplexobj(X) and not X.imag.any():
        return np.ascontiguousarray(X.real)
    return X


def equilibrate_parts(Ar, Ai, Br, Bi):
    """Stage 0: one exponent ``S_k`` per inner index for both parts, the real rule of
    ``docs/spec.md`` §2.1 on ``[Ar; Ai]`` and ``[Br, Bi]`` (column ``k`` of A and row
    ``k`` of B include both parts, so every scaled entry stays exact). Returns the
    four scaled parts."""
    S = equilibrate.shifts(np.vstack([Ar, Ai]), np.hstack([Br, Bi]))
    if not S.any():
        return Ar, Ai, Br, Bi
    return (np.ldexp(Ar, -S[None, :]), np.ldexp(Ai, -S[None, :]),
            np.ldexp(Br, S[:, None]), np.ldexp(Bi, S[:, None]))


def embed(Ar, Ai, Br, Bi):
    """The real embedding ``([Ar, -Ai], [[Br, Bi], [Bi, -Br]])`` of ``A @ B``: its
    product is ``[Re AB, Im AB]`` (m, 2n)."""
    return np.hstack([Ar, -Ai]), np.block([[Br, Bi], [Bi, -Br]])


def shifts(st: scaling.Statistics, n_moduli: int, mode: str):
    """``(s, t)`` of the embedding for ``n_moduli`` complex moduli: the real rule with
    the complex table's ``H_f``, then ``t_j = t_{n+j} = min(t_j, t_{n+j})`` (one
    exponent per column of the complex ``B``; lowering an exponent keeps the invariant,
    and the minimum of two non-decreasing functions of the count is non-decreasing)."""
    H_f = complex_crt_constants(n_moduli).H_f
    s, t = scaling.shifts(st, n_moduli, mode, H_f)
    n = t.size // 2
    tc = np.minimum(t[:n], t[n:])
    return s, np.concatenate([tc, tc])


# --------------------------------------------------------------------------- stages

def gaussian_residues(Rr, Ri, moduli, roots):
    """The two images ``(x + r y, x - r y) mod m_l`` of Gaussian residues, as int8
    planes in the symmetric range (``Rr``, ``Ri``: int8 ``(N, rows, cols)`` residues of
    the real and imaginary parts)."""
    plus = np.empty_like(Rr)
    minus = np.empty_like(Rr)
    for l, (p, r) in enumerate(zip(moduli, roots)):
        h = (p - 1) // 2
        x = Rr[l].astype(np.int32)
        y = Ri[l].astype(np.int32) * r            # |y| <= 127 * 254: exact in int32
        plus[l] = np.mod(x + y + h, p) - h
        minus[l] = np.mod(x - y + h, p) - h
    return plus, minus


def recombine(c1, c2, cc):
    """Residues ``[0, m_l)`` of ``Re C = (P1 + P2)/2`` and ``Im C = (P1 - P2)/(2r)``
    from those of ``P1 = phi_+(C)``, ``P2 = phi_-(C)`` (int16 ``(N, m, n)`` each)."""
    re = np.empty_like(c1)
    im = np.empty_like(c1)
    for l, p in enumerate(cc.moduli):
        a = c1[l].astype(np.int32)
        b = c2[l].astype(np.int32)
        re[l] = np.mod((a + b) * cc.inv2[l], p)   # < 2 * 255 * 255: exact in int32
        im[l] = np.mod((a - b) * cc.inv2r[l], p)
    return re, im


def integer_product(Ar, Ai, Br, Bi, s, t, n_moduli):
    """``(RN(Re A'B' 2^{-s-t}), RN(Im A'B' 2^{-s-t}))`` for the Gaussian integers
    ``A' = trunc(Ar 2^s) + i trunc(Ai 2^s)``, ``B'`` alike with the column exponents
    ``t`` (n,), through ``n_moduli`` complex moduli."""
    cc = complex_crt_constants(n_moduli)
    moduli = cc.moduli
    RAr = residues.residues(scaling.truncate(Ar, s), moduli)
    RAi = residues.residues(scaling.truncate(Ai, s), moduli)
    RBr = residues.residues(scaling.truncate(Br.T, t).T, moduli)
    RBi = residues.residues(scaling.truncate(Bi.T, t).T, moduli)
    UA, VA = gaussian_residues(RAr, RAi, moduli, cc.roots)
    UB, VB = gaussian_residues(RBr, RBi, moduli, cc.roots)
    c1 = modgemm.modular_products(UA, UB, moduli)
    c2 = modgemm.modular_products(VA, VB, moduli)
    re, im = recombine(c1, c2, cc)
    return (crt.reconstruct_round(re, moduli, s, t),
            crt.reconstruct_round(im, moduli, s, t))


# --------------------------------------------------------------------------- certificate

def element_counts(st: scaling.Statistics, mode: str):
    """int64 ``(m, 2n)``: per element of the embedding the fewest complex moduli whose
    a-priori test (``docs/spec.md`` §10.2 on the embedding; its direct elements pass at
    every count) it passes, 0 if none."""
    d = certificate.data(st)
    return certificate.element_counts(d, st, mode, max_moduli=MAX_COMPLEX_MODULI,
                                      shifts=shifts, pre=spec.prior(d))


def choose_count(st: scaling.Statistics, mode: str, d=None, pre=None):
    """The :class:`~ozaki_backend.spec.certificate.Choice` of
    :func:`ozaki_backend.reference.certificate.choose_count`, over the complex table
    (``d``, ``pre``: the certificate's data and prior of ``st``, when the caller has
    them)."""
    d = certificate.data(st) if d is None else d
    pre = spec.prior(d) if pre is None else pre
    return certificate.choose_count(d, st, mode, max_moduli=MAX_COMPLEX_MODULI,
                                    shifts=shifts, pre=pre, repairs=False)


def fixed_count(plan, k: int):
    """The complex moduli count of a non-adaptive plan: ``moduli=`` as given, ``bits=``
    by :func:`~ozaki_backend.spec.complex_moduli.complex_moduli_for_bits`."""
    opts = plan.options
    if opts.get("moduli") is not None:
        return int(opts["moduli"])
    return complex_moduli_for_bits(int(opts["bits"]), max(k, 1))


def _part_bound(b):
    """``|C - AB|`` bound from the embedding's per-part bounds ``b`` (m, 2n)."""
    n = b.shape[1] // 2
    with np.errstate(over="ignore"):
        return spec.up(b[:, :n] + b[:, n:])


def _residual_term(Xr, Xi, Yr, Yi, mode):
    """``(run, T)``: the emulated complex product ``X @ Y`` with 20 moduli (its own
    equilibration and scaling), ``run()`` giving ``[Re, Im]`` (m, 2n), and its
    truncation bound ``T`` (m, 2n) in absolute units."""
    parts = equilibrate_parts(Xr, Xi, Yr, Yi)
    st = scaling.statistics(*embed(*parts), mode, squares=False)
    s, t = shifts(st, MAX_COMPLEX_MODULI, mode)
    n = Yr.shape[1]
    return ((lambda: np.hstack(integer_product(*parts, s, t[:n], MAX_COMPLEX_MODULI))),
            spec.truncation_bound(certificate.data(st), s, t))


def residual_pass(parts, st, mode, n_moduli, C1, level):
    """The exact residual pass (``docs/spec.md`` §10.4, §11.4) of a complex product:
    ``(C, bound)`` in the embedding's layout ``[Re, Im]`` (m, 2n), or None when its
    certificate misses the target. As the real pass
    (:func:`ozaki_backend.reference.pipeline.residual_pass`), part by part:
    ``A = Ã + dA``, ``B = B̃ + dB`` exactly (``Ã = A' 2^-s`` for both parts; Sterbenz),
    ``AB = ÃB̃ + dA B + Ã dB``; the two remainder products are further emulated
    complex products with 20 moduli, and ``C = (C1 + R1) + R2`` in float64."""
    Ar, Ai, Br, Bi = parts
    n = Br.shape[1]
    s, t = shifts(st, n_moduli, mode)
    tn = t[:n]
    Art, Ait = (np.ldexp(scaling.truncate(X, s), -s[:, None]) for X in (Ar, Ai))
    Brt, Bit = (np.ldexp(scaling.truncate(X.T, tn).T, -tn[None, :]) for X in (Br, Bi))
    d = certificate.data(st)
    return spec.add_residuals(
        d, spec.prior(d), C1, level,
        *_residual_term(Ar - Art, Ai - Ait, Br, Bi, mode),
        *_residual_term(Art, Ait, Br - Brt, Bi - Bit, mode))


def direct_into(C2, bound, A0, B0, d, ke):
    """Overwrite the direct elements of the embedding's ``C2 = [Re, Im]`` (m, 2n) (and
    ``bound``) with their direct values (``docs/spec.md`` §10.5 on the embedding, §11.4):
    the real scheme's :func:`~ozaki_backend.reference.direct.direct_into` on the
    embedding of the caller's (not equilibrated) operands; returns how many there are."""
    if not bool(spec.direct(ke).any()):
        return 0
    Ah, Bh = embed(A0.real, A0.imag, B0.real, B0.imag)
    return direct.direct_into(C2, bound, Ah, Bh, d, ke)


def _complex_2d(A0, B0, plan, want_bound):
    """Both operands complex: the Gaussian-integer pipeline."""
    m, k = A0.shape
    n = B0.shape[1]
    Ar, Ai, Br, Bi = equilibrate_parts(np.ascontiguousarray(A0.real),
                                       np.ascontiguousarray(A0.imag),
                                       np.ascontiguousarray(B0.real),
                                       np.ascontiguousarray(B0.imag))
    st = scaling.statistics(*embed(Ar, Ai, Br, Bi), plan.mode, squares=False)
    d = certificate.data(st)
    pre = spec.prior(d)
    if not plan.adaptive:                  # a fixed count: report, never escalate
        N = fixed_count(plan, k)
        s, t = shifts(st, N, plan.mode)
        re, im = integer_product(Ar, Ai, Br, Bi, s, t[:n], N)
        # certified when every element passes and none is left to direct computation
        ok = bool(spec.passes(d, s, t, pre).all()) and not bool(spec.direct(pre.ke).any())
        b = _part_bound(spec.result_bound(d, s, t, np.hstack([re, im]))) if want_bound else None
        return ComplexProduct(compose(re, im), b, N, CERTIFIED if ok else UNCERTIFIED)
    if bool(pre.exempt.all()):             # every element has at most two terms
        C2 = np.zeros((m, 2 * n))
        b2 = np.zeros((m, 2 * n)) if want_bound else None
        direct_into(C2, b2, A0, B0, d, pre.ke)
        return ComplexProduct(compose(C2[:, :n], C2[:, n:]),
                              _part_bound(b2) if want_bound else None, 0, CERTIFIED)
    ch = choose_count(st, plan.mode, d, pre)
    tried = set()
    N = ch.n_moduli
    while True:                            # the a-posteriori test (§10.4), then escalate
        tried.add(N)
        s, t = shifts(st, N, plan.mode)
        re, im = integer_product(Ar, Ai, Br, Bi, s, t[:n], N)
        C2 = np.hstack([re, im])
        failing = ~spec.passes(d, s, t, pre)
        post = spec.posterior(d, s, t, C2, pre, failing) if failing.any() else None
        if post is None or not post.unsettled.any():
            b2 = spec.result_bound(d, s, t, C2) if want_bound else None
            direct_into(C2, b2, A0, B0, d, pre.ke)
            return ComplexProduct(compose(C2[:, :n], C2[:, n:]),
                                  None if b2 is None else _part_bound(b2), N, CERTIFIED)
        N2 = spec.next_count(ch, tried, MAX_COMPLEX_MODULI)
        if N2 is None:
            break
        N = N2
    rp = residual_pass((Ar, Ai, Br, Bi), st, plan.mode, N, C2, post.level)
    if rp is not None:
        C2, b2 = rp
        direct_into(C2, b2, A0, B0, d, pre.ke)
        return ComplexProduct(compose(C2[:, :n], C2[:, n:]),
                              _part_bound(b2) if want_bound else None, N, RESIDUAL)
    warn_native("neither the certificate of the complex product with up to "
                f"{MAX_COMPLEX_MODULI} moduli nor the residual pass meets the "
                "native-level target")
    C = _native.matmul(A0, B0)
    b = _part_bound(spec.native_bound(d)) if want_bound else None
    return ComplexProduct(C, b, 0, NATIVE)


def _mixed_2d(A, B, plan, want_bound):
    """One real operand: the real scheme on the stacked parts of the other."""
    n = B.shape[1]
    if np.iscomplexobj(B):
        res = pipeline.ozaki2_2d(np.asarray(A, dtype=np.float64),
                                 np.hstack([B.real, B.imag]), plan, want_bound=want_bound)
        re, im = res.C[:, :n], res.C[:, n:]
        b = None if res.bound is None else _part_bound(res.bound)
    else:
        m = A.shape[0]
        res = pipeline.ozaki2_2d(np.vstack([A.real, A.imag]),
                                 np.asarray(B, dtype=np.float64), plan,
                                 want_bound=want_bound)
        re, im = res.C[:m], res.C[m:]
        b = None
        if res.bound is not None:
            with np.errstate(over="ignore"):
                b = spec.up(res.bound[:m] + res.bound[m:])
    return ComplexProduct(compose(re, im), b, res.n_moduli, res.outcome)


def complex_2d(A, B, plan, *, want_bound=False) -> ComplexProduct:
    """The product of 2-D finite operands, at least one of them complex128, the other
    complex128 or float64 (``docs/spec.md`` §11).

    Parameters
    ----------
    A : ndarray of complex128 or float64, shape (m, k)
    B : ndarray of complex128 or float64, shape (k, n)
    plan : Plan
        ``scheme="ozaki2"``; ``precision="fp64"`` chooses the count by the certificate
        of the embedding, ``moduli=`` / ``bits=`` fix it (complex table).
    want_bound : bool
        Also return a rigorous bound on ``|C - AB|`` per element.
    """
    m, k = A.shape
    n = B.shape[1]
    if m == 0 or n == 0 or k == 0:
        return ComplexProduct(np.zeros((m, n), dtype=np.complex128),
                              np.zeros((m, n)) if want_bound else None, 0, CERTIFIED)
    A, B = real_if_exact(A), real_if_exact(B)
    if not (np.iscomplexobj(A) or np.iscomplexobj(B)):
        res = pipeline.ozaki2_2d(A, B, plan, want_bound=want_bound)
        return ComplexProduct(compose(res.C, np.zeros_like(res.C)), res.bound,
                              res.n_moduli, res.outcome)
    if not (np.iscomplexobj(A) and np.iscomplexobj(B)):
        return _mixed_2d(A, B, plan, want_bound)      # records its own statistics
    res = _complex_2d(A, B, plan, want_bound)
    if res.n_moduli:
        _stats.record_moduli(res.n_moduli)
    _stats.record_certificate(res.outcome)
    return res


def moduli_for(A, B, plan):
    """The moduli count ``plan`` uses for the complex product ``A @ B`` (complex table
    when both operands are complex; the real scheme's count for a real/complex mix)."""
    A, B = real_if_exact(np.asarray(A)), real_if_exact(np.asarray(B))
    if not (np.iscomplexobj(A) or np.iscomplexobj(B)):
        return pipeline.moduli_for(A, B, plan)
    if not (np.iscomplexobj(A) and np.iscomplexobj(B)):
        if np.iscomplexobj(B):
            return pipeline.moduli_for(A, np.hstack([B.real, B.imag]), plan)
        return pipeline.moduli_for(np.vstack([A.real, A.imag]), B, plan)
    if not plan.adaptive:
        return fixed_count(plan, A.shape[1])
    if 0 in A.shape or B.shape[1] == 0:
        return MIN_MODULI
    Ar, Ai, Br, Bi = equilibrate_parts(A.real.copy(), A.imag.copy(),
                                       B.real.copy(), B.imag.copy())
    st = scaling.statistics(*embed(Ar, Ai, Br, Bi), plan.mode, squares=False)
    d = certificate.data(st)
    pre = spec.prior(d)
    if bool(pre.exempt.all()):
        return 0                            # every element computed from its terms
    return choose_count(st, plan.mode, d, pre).n_moduli


__all__ = ["ComplexProduct", "complex_2d", "moduli_for", "integer_product",
           "gaussian_residues", "recombine", "embed", "equilibrate_parts", "shifts",
           "compose", "choose_count", "element_counts"]
