"""The complex scheme's scaling and certificate without materialising the embedding
(``docs/spec.md`` §11.1), for NumPy or CuPy arrays.

The reference (``reference/complex.py``) builds the real embedding
``Â = [Ar, -Ai]`` (m x 2k), ``B̂ = [[Br, Bi], [Bi, -Br]]`` (2k x 2n) and runs the real
scheme's statistics on it. Here the same integers are computed from the four parts
directly: column ``j`` and ``n + j`` of ``B̂`` hold the same magnitudes, so every row /
column statistic is a combination of the parts' own, and the bound GEMM splits into
``P_re = [αr, αi][βr; βi]`` and ``P_im = [αr, αi][βi; βr]`` — half the memory and no
copy of ``B``. Every quantity is an exact integer (or a power of two), so the results
are the reference's bit for bit whatever the array library; ``tests/reference``
checks that on NumPy arrays, ``tests/cuda`` on the device.

This module imports neither CuPy nor any other engine: the caller passes the array
module ``xp`` and the bound GEMM (``bound_gemm(X, Y)``: the exact float64 product of
two non-negative integer matrices with entries <= 127, e.g. cuBLAS INT8 on the GPU).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..spec import certificate as spec
from ..spec.equilibration import k_exponents, shifts_from_exponents
from ..spec.complex_moduli import (MAX_COMPLEX_MODULI, complex_crt_constants,
                                   complex_moduli_for_bits)
from ..spec.moduli import MIN_MODULI
from ..spec.rules import (BOUND_D, CERT_C, EXPECTED_BITS, certificate_factor,
                          fast_quant_bits)

_NO_EXP = np.iinfo(np.int64).min
NO_THRESHOLD = -(1 << 31)


class EmbeddingStats(NamedTuple):
    """The reference's :class:`~ozaki_backend.reference.scaling.Statistics` of the
    embedding (same field names and values; ``k`` is ``2k``, B's side has ``2n``)."""

    k: int
    E: object
    F: object
    nzA: object
    nzB: object
    xA: object
    yB: object
    SA: object
    nA: object
    SB: object
    nB: object
    P: object
    U: object
    SqA: object
    SqB: object
    loA: object
    hiA: object
    loB: object
    hiB: object


# --------------------------------------------------------------------------- stage 0

def equilibration(xp, Ar, Ai, Br, Bi):
    """``S`` (int64, k): the rule of ``docs/spec.md`` §2.1 on ``[Ar; Ai]`` and
    ``[Br, Bi]`` (reference: ``equilibrate.shifts`` of the stacked parts)."""
    ar, ar_min = k_exponents(Ar, 0)
    ai, ai_min = k_exponents(Ai, 0)
    br, br_min = k_exponents(Br, 1)
    bi, bi_min = k_exponents(Bi, 1)
    return shifts_from_exponents(xp.maximum(ar, ai), xp.minimum(ar_min, ai_min),
                                 xp.maximum(br, bi), xp.minimum(br_min, bi_min))


def equilibrate(xp, Ar, Ai, Br, Bi):
    """The four parts scaled by ``2^-S`` (A) and ``2^S`` (B), exactly."""
    S = equilibration(xp, Ar, Ai, Br, Bi)
    if not bool(S.any()):
        return Ar, Ai, Br, Bi
    Sa = (-S[None, :]).astype(np.int32)
    Sb = S[:, None].astype(np.int32)
    return xp.ldexp(Ar, Sa), xp.ldexp(Ai, Sa), xp.ldexp(Br, Sb), xp.ldexp(Bi, Sb)


# --------------------------------------------------------------------------- statistics

class _Rows(NamedTuple):
    """Row statistics of one part (reference: ``row_exponents``, ``exact_thresholds``,
    the non-zero counts and ``k_ranges``), from one ``frexp`` of the part."""

    emax: object     # largest exponent of a non-zero entry (_NO_EXP for none)
    thr: object      # largest exactness threshold (NO_THRESHOLD for none)
    nnz: object      # non-zero count
    first: object    # first / last column of a non-zero entry (-1 for none)
    last: object


def _rows(xp, X) -> _Rows:
    f, e = xp.frexp(X)
    nz = X != 0
    e = e.astype(np.int64)
    M = xp.ldexp(xp.abs(f), 53).astype(np.int64)
    low = M & -M
    z = xp.frexp(low.astype(np.float64))[1].astype(np.int64) - 1
    cols = X.shape[1]
    idx = xp.arange(cols, dtype=np.int64)
    first = xp.where(nz, idx[None, :], cols).min(axis=1)
    return _Rows(xp.where(nz, e, _NO_EXP).max(axis=1),
                 xp.where(nz, 53 - e - z, NO_THRESHOLD).max(axis=1),
                 nz.sum(axis=1),
                 xp.where(first == cols, -1, first),
                 xp.where(nz, idx[None, :], -1).max(axis=1))


def _ranges(xp, r1: _Rows, r2: _Rows, k):
    """``(lo, hi)`` of rows ``[X1_i, X2_i]`` (2k columns): reference ``k_ranges``."""
    lo = xp.where(r1.first >= 0, r1.first, xp.where(r2.first >= 0, k + r2.first, 2 * k))
    hi = xp.where(r2.last >= 0, k + r2.last, r1.last)
    return lo.astype(np.int64), hi.astype(np.int64)


def _quantize(xp, X, E, D):
    x = xp.ldexp(xp.abs(X), (D - E).astype(np.int32)[:, None])
    a = xp.maximum(xp.ceil(x), 1.0)
    return xp.where(X == 0, 0.0, a)


def statistics(xp, Ar, Ai, Br, Bi, mode, bound_gemm) -> EmbeddingStats:
    """The statistics of the embedding of the (equilibrated) parts."""
    k = Ar.shape[1]
    BrT, BiT = Br.T, Bi.T                       # rows = the columns of B
    rar, rai, rbr, rbi = (_rows(xp, X) for X in (Ar, Ai, BrT, BiT))
    EA = xp.maximum(rar.emax, rai.emax)
    nzA = EA != _NO_EXP
    E = xp.where(nzA, EA, 0)
    FB = xp.maximum(rbr.emax, rbi.emax)
    nzb = FB != _NO_EXP
    F = xp.where(nzb, FB, 0)
    sa = (BOUND_D - E).astype(np.int32)[:, None]
    sb = (BOUND_D - F).astype(np.int32)[:, None]
    ar = xp.floor(xp.ldexp(xp.abs(Ar), sa))
    ai = xp.floor(xp.ldexp(xp.abs(Ai), sa))
    br = xp.floor(xp.ldexp(xp.abs(BrT), sb))    # (n, k)
    bi = xp.floor(xp.ldexp(xp.abs(BiT), sb))
    alpha = xp.concatenate([ar, ai], axis=1)    # (m, 2k)
    P_re = bound_gemm(alpha, xp.concatenate([br, bi], axis=1))   # (m, n)
    P_im = bound_gemm(alpha, xp.concatenate([bi, br], axis=1))
    P = xp.concatenate([P_re, P_im], axis=1)
    SA = ar.sum(axis=1) + ai.sum(axis=1)
    sbv = br.sum(axis=1) + bi.sum(axis=1)
    nA = (rar.nnz + rai.nnz).astype(np.float64)
    nbv = (rbr.nnz + rbi.nnz).astype(np.float64)
    SB, nB = xp.concatenate([sbv, sbv]), xp.concatenate([nbv, nbv])
    F2, nzB = xp.concatenate([F, F]), xp.concatenate([nzb, nzb])
    both = nzA[:, None] & nzB[None, :]
    U = xp.where(both, P + SA[:, None] + SB[None, :]
                 + xp.minimum(nA[:, None], nB[None, :]), 0.0)
    SqA = SqB = None
    if mode == "fast":
        D = fast_quant_bits(2 * k)
        SqA = (xp.square(_quantize(xp, Ar, E, D)).sum(axis=1)
               + xp.square(_quantize(xp, Ai, E, D)).sum(axis=1))
        sq = (xp.square(_quantize(xp, BrT, F, D)).sum(axis=1)
              + xp.square(_quantize(xp, BiT, F, D)).sum(axis=1))
        SqB = xp.concatenate([sq, sq])
    xA = xp.maximum(rar.thr, rai.thr)
    yb = xp.maximum(rbr.thr, rbi.thr)
    loA, hiA = _ranges(xp, rar, rai, k)
    lo1, hi1 = _ranges(xp, rbr, rbi, k)         # column j:     [Br_j; Bi_j]
    lo2, hi2 = _ranges(xp, rbi, rbr, k)         # column n + j: [Bi_j; -Br_j]
    return EmbeddingStats(2 * k, E, F2, nzA, nzB, xA, xp.concatenate([yb, yb]), SA, nA,
                          SB, nB, P, U, SqA, SqB, loA, hiA,
                          xp.concatenate([lo1, lo2]), xp.concatenate([hi1, hi2]))


# --------------------------------------------------------------------------- shifts

def _lambda(xp, x, H_f):
    mh, eh = math.frexp(H_f)
    mx, ex = xp.frexp(x)
    return eh - ex.astype(np.int64) - (mx > mh).astype(np.int64)


def shifts(xp, st: EmbeddingStats, n_moduli: int, mode: str, cache=None):
    """``(s, t)`` (int64; ``t`` of length ``2n``, tied) for ``n_moduli`` complex moduli
    (reference: ``complex.shifts``). ``cache`` (a dict), when given, keeps what does not
    depend on the count (the frexp of the bound matrix) between calls."""
    H_f = complex_crt_constants(n_moduli).H_f
    if mode == "fast":
        D = fast_quant_bits(st.k)
        qa = _lambda(xp, xp.where(st.nzA, st.SqA, 1.0), H_f) // 2
        qb = _lambda(xp, xp.where(st.nzB, st.SqB, 1.0), H_f) // 2
        s = xp.where(st.nzA, qa + D - st.E, 0).astype(np.int64)
        t = xp.where(st.nzB, qb + D - st.F, 0).astype(np.int64)
    else:
        U = st.U
        r = xp.maximum(U.max(axis=1), 1.0)
        sigma = _lambda(xp, r, H_f) // 2
        lam1 = int(_lambda(np, np.array([1.0]), H_f)[0])
        big = np.iinfo(np.int64).max
        if cache is None:
            cache = {}
        if "fU" not in cache:
            pos = U > 0
            cache["fU"] = (pos,) + tuple(xp.frexp(xp.where(pos, U, 1.0)))
        pos, mU, eU = cache["fU"]
        mh, eh = math.frexp(H_f)
        lamU = xp.where(pos, eh - eU.astype(np.int64) - (mU > mh).astype(np.int64), big)
        tau = xp.min(xp.where(pos, lamU - sigma[:, None], big), axis=0)
        tau = xp.where(tau == big, lam1 - lam1 // 2, tau)
        s = xp.where(st.nzA, sigma + BOUND_D - st.E, 0).astype(np.int64)
        t = xp.where(st.nzB, tau + BOUND_D - st.F, 0).astype(np.int64)
    n = t.shape[0] // 2
    tc = xp.minimum(t[:n], t[n:])
    return s, xp.concatenate([tc, tc])


# --------------------------------------------------------------------------- certificate

def cert_data(st: EmbeddingStats) -> spec.CertData:
    return spec.CertData(st.k, st.E, st.F, st.xA, st.yB, st.SA + st.nA, st.SB + st.nB,
                         st.nA, st.nB, st.loA, st.hiA, st.loB, st.hiB, st.P)


def expected_count(k: int, elements: int) -> int:
    """Where the count search starts (``elements``: of the embedding, ``2 m n``, as the
    certificate's factor counts them): the complex analogue of
    :func:`~ozaki_backend.spec.rules.expected_moduli` (the fewest complex moduli whose
    guaranteed bits at ``2k`` reach ``EXPECTED_BITS``, plus half a bit per halving of
    the target's factor below ``CERT_C``). Only a starting point: the count found does
    not depend on it."""
    c = certificate_factor(2 * k, elements)
    extra = round(math.log2(CERT_C / c) / 2) if c > 0 else 0
    return complex_moduli_for_bits(EXPECTED_BITS + extra, k)


def choose_count(xp, st: EmbeddingStats, mode: str):
    """``(N, all_certified)``: the reference's ``complex.choose_count`` (the largest
    per-element count) found as the smallest count at which every element passes — the
    same number, since the test is monotone in the count. The search starts at
    :func:`expected_count` and walks down while every element passes, or up until they
    do (usually two evaluations of the test, each a few passes over the ``m x 2n``
    bound matrix)."""
    d = cert_data(st)
    limit = spec.target(d)
    cache = {}

    def all_pass(N):
        s, t = shifts(xp, st, N, mode, cache)
        return bool(spec.passes(d, s, t, limit).all())

    N = min(max(expected_count(st.k // 2, st.P.shape[0] * st.P.shape[1]),
                MIN_MODULI), MAX_COMPLEX_MODULI)
    if all_pass(N):
        while N > MIN_MODULI and all_pass(N - 1):
            N -= 1
        return N, True
    while N < MAX_COMPLEX_MODULI:
        N += 1
        if all_pass(N):
            return N, True
    return MAX_COMPLEX_MODULI, False


__all__ = ["EmbeddingStats", "equilibration", "equilibrate", "statistics", "shifts",
           "cert_data", "choose_count"]
