"""CPU reference engine for the seed scheme ``scheme="phase22"`` (``docs/spec.md`` §9).

The seed's Phase 22, stage by stage, in exact integer arithmetic held in NumPy arrays:

1. :func:`prescale` -- per-row exponents ``E_i`` of A, per-column ``F_j`` of B (the
   seed had none; without it ``|v| > 1`` silently overflows the CRT range);
2. :func:`split_hi_lo` -- ``hi = round(v 2^17)``, ``lo = round((v - hi 2^-17) 2^34)``;
3. :func:`residues_01` -- the seven residue planes in ``[0, p)`` as int8;
4. :func:`prime_gemm` -- the naive per-prime integer GEMM (the seed's Day 8 oracle);
5. :func:`choose_nl_tiles` -- the adaptive prime count per 128 x 64 output tile;
6. :func:`crt_reconstruct_nl` -- ``x = (sum c_p f_p) mod M_nl``, folded at ``M_nl / 2``;
7. :func:`pass_integer` -- the above per k chunk (<= 4096), chunk integers summed in int64;
8. :func:`accumulate_passes` / :func:`finalize` -- the four scaled passes in float64,
   then ``ldexp(acc, E_i + F_j)``;
9. :func:`residual_correction` -- the seed's Phase 24 FP64 tail correction (optional).

Every stage before :func:`accumulate_passes` is exact, so a CUDA engine that follows
the same spec must agree with these functions stage by stage, bit for bit. The
residual correction uses the native float64 GEMM and is *not* bitwise reproducible
across engines (or BLAS builds / thread counts).

Loops run over primes, passes, chunks and tiles only -- never over matrix elements.
"""

from __future__ import annotations

import numpy as np

from ..semantics import check_plan_and_shapes
from ..spec import seed as T
from ..spec.seed import K_MAX, TILE_M, TILE_N
from .scaling import row_exponents as _scaling_row_exponents

_PRIMES = np.array(T.PRIMES, dtype=np.int64)
_M_ARR = np.array(T.M_PREFIX, dtype=np.int64)  # < 2^48: int64 is exact

# _COEF[nl, i] = coefficient i of the prefix of nl primes (read from the flat table
# through the offsets, exactly as the kernel does), 0 for i >= nl so that a
# per-element gather over a mixed-nl map adds nothing for primes a tile does not use.
_COEF = np.zeros((T.NPRIMES + 1, T.NPRIMES), dtype=np.int64)
for _nl in range(1, T.NPRIMES + 1):
    _off = T.coeff_offsets[_nl]
    _COEF[_nl, :_nl] = T.coeffs_flat[_off:_off + _nl]
del _nl, _off

_SCALE_HI = 2.0 ** T.SHIFT_HI
_SCALE_LO = 2.0 ** T.SHIFT_LO


# --------------------------------------------------------------------------- scaling

def row_exponents(A):
    """Row exponents ``E_i`` of A (``docs/spec.md`` §2).

    Parameters
    ----------
    A : ndarray of float64, shape (m, k)

    Returns
    -------
    ndarray of int32, shape (m,)
        ``max_k frexp(A_ik)[1]`` over the non-zero entries of row ``i``; 0 for an
        all-zero row. Then ``|A_ik| < 2^E_i`` for every ``k``.
    """
    E, _ = _scaling_row_exponents(np.asarray(A, dtype=np.float64))
    return E.astype(np.int32)


def col_exponents(B):
    """Column exponents ``F_j`` of B; see :func:`row_exponents`.

    Parameters
    ----------
    B : ndarray of float64, shape (k, n)

    Returns
    -------
    ndarray of int32, shape (n,)
    """
    return row_exponents(np.asarray(B, dtype=np.float64).T)


def prescale(A, B):
    """Power-of-two prescale of both operands.

    Parameters
    ----------
    A : ndarray of float64, shape (m, k)
    B : ndarray of float64, shape (k, n)

    Returns
    -------
    v : ndarray of float64, shape (m, k)
        ``ldexp(A_ik, -E_i)``, ``|v| < 1``.
    w : ndarray of float64, shape (k, n)
        ``ldexp(B_kj, -F_j)``, ``|w| < 1``.
    E : ndarray of int32, shape (m,)
    F : ndarray of int32, shape (n,)

    Notes
    -----
    Scaling by a power of two is exact unless the result falls below 2^-1022 (an
    entry more than ~1022 binades below its row maximum); there ldexp rounds once,
    with error at most 2^-1075 in the scaled domain -- far below the 2^-35 that
    the hi/lo split keeps, and accounted for in the tests' error bound.
    """
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    E = row_exponents(A)
    F = col_exponents(B)
    v = np.ldexp(A, -E[:, None])
    w = np.ldexp(B, -F[None, :])
    return v, w, E, F


# ------------------------------------------------------------------------- hi / lo

def split_hi_lo(v):
    """The seed's Ozaki split of prescaled values into two 17-bit integer slices.

    Parameters
    ----------
    v : ndarray of float64
        Prescaled values, ``|v| < 1``.

    Returns
    -------
    hi, lo : ndarray of int64
        ``hi = round(v 2^17)``, ``lo = round((v - hi 2^-17) 2^34)``, rounding half to
        even (``np.rint``); ``|hi| <= 2^17``, ``|lo| <= 2^16``, and
        ``|v - (hi 2^-17 + lo 2^-34)| <= 2^-35``.

    Raises
    ------
    ValueError
        If some ``|v| >= 1`` (the exactness argument below needs ``|v| < 1``).

    Notes
    -----
    Every floating-point operation here is exact:

    * ``v * 2^17`` and ``hi * 2^-17`` are power-of-two scalings of values between
      2^-1074 and 2^17: no overflow, and scaling *up* never rounds; ``hi * 2^-17`` is
      an integer multiple of 2^-17 below 2^1 in magnitude, representable.
    * ``d = v - hi 2^-17``: if ``hi == 0`` then ``d = v``. Otherwise
      ``|v| >= 2^-18``, so ``v`` (binade ``2^(e-1) <= |v| < 2^e``, ``e >= -17``) is a
      multiple of ``2^(e-53)`` and so is ``hi 2^-17`` (as ``e - 53 <= -17``); ``d`` is
      a multiple of ``2^(e-53)`` with ``|d| <= 2^-18 < 2^e``, i.e. it has at most 53
      significant bits: the subtraction is exact.
    * ``d * 2^34`` scales up (exact), ``|d 2^34| <= 2^16``; ``rint`` is exact.
    * The same argument applied to ``d - lo 2^-34`` shows the tail ``Ta`` of
      :func:`recombine` is exact too.
    """
    v = np.asarray(v, dtype=np.float64)
    if v.size and not np.all(np.abs(v) < 1.0):
        raise ValueError("split_hi_lo needs prescaled values with |v| < 1")
    hi_f = np.rint(v * _SCALE_HI)
    d = v - hi_f / _SCALE_HI
    lo_f = np.rint(d * _SCALE_LO)
    return hi_f.astype(np.int64), lo_f.astype(np.int64)


def recombine(hi, lo):
    """``Â = hi 2^-17 + lo 2^-34`` as float64 (exact).

    Parameters
    ----------
    hi, lo : ndarray of int64
        Output of :func:`split_hi_lo`.

    Returns
    -------
    ndarray of float64
        Exact: both terms are multiples of 2^-34 and ``|Â| < 1 + 2^-35``, so the sum
        has at most 35 significant bits.
    """
    return np.asarray(hi, dtype=np.float64) / _SCALE_HI + np.asarray(lo, dtype=np.float64) / _SCALE_LO


# ------------------------------------------------------------------------ residues

def residues_01(x, nprimes=T.NPRIMES):
    """Residues of an integer slice modulo the seed's primes, in ``[0, p)``, as int8.

    Parameters
    ----------
    x : ndarray of int64
        Integer slice (``hi`` or ``lo``), any sign.
    nprimes : int, optional
        How many of the primes (in order) to produce.

    Returns
    -------
    ndarray of int8, shape (nprimes,) + x.shape
        Plane ``i`` holds ``x mod p_i`` in ``[0, p_i)`` -- at most 126, so the signed
        int8 holds it without changing sign (the seed's "不要選 131" rule). NumPy's
        ``mod`` of integers takes the sign of the divisor, so negative ``x`` land in
        ``[0, p)`` with no ``if (rem < 0) rem += p`` step.
    """
    x = np.asarray(x)
    if x.dtype.kind not in "iu":
        raise TypeError(f"residues_01 needs an integer array; got {x.dtype}")
    out = np.empty((nprimes,) + x.shape, dtype=np.int8)
    for i in range(nprimes):
        np.mod(x, _PRIMES[i], out=out[i], casting="unsafe")
    return out


# ----------------------------------------------------------------- per-prime GEMM

def prime_gemm(ra, rb):
    """Exact integer product of two residue (or any int8) matrices.

    Parameters
    ----------
    ra : ndarray of int8, shape (m, kc)
    rb : ndarray of int8, shape (kc, n)

    Returns
    -------
    ndarray of int64, shape (m, n)
        ``ra @ rb`` as exact integers (the seed's INT8 x INT8 -> INT32 accumulator,
        before ``mod p``).

    Notes
    -----
    Computed as a float64 matmul, which is exact here: every product is an integer of
    magnitude at most ``128^2 = 2^14``, so every partial sum, in whatever order or
    blocking BLAS uses (FMA included), is an integer of magnitude at most
    ``kc 2^14 <= 2^53`` for ``kc <= 2^39``, exactly representable. (In the engine
    ``kc <= 4096`` and residues ``<= 126``: sums ``<= 65028096 < 2^26``.)
    """
    ra = np.asarray(ra)
    rb = np.asarray(rb)
    if ra.dtype != np.int8 or rb.dtype != np.int8:
        raise TypeError("prime_gemm needs int8 operands")
    kc = ra.shape[1]
    if kc * 2 ** 14 > 2 ** 53:
        raise ValueError(f"k chunk {kc} too long for an exact float64 accumulation")
    C = ra.astype(np.float64) @ rb.astype(np.float64)
    return C.astype(np.int64)


# ------------------------------------------------------------------ adaptive nl

def choose_nl_tiles(a_slice, b_slice):
    """The seed's adaptive prime count for each 128 x 64 output tile of one chunk.

    Parameters
    ----------
    a_slice : ndarray of int64, shape (m, kc)
        The A slice (``hi`` or ``lo``) restricted to this k chunk.
    b_slice : ndarray of int64, shape (kc, n)
        The B slice restricted to this k chunk.

    Returns
    -------
    ndarray of int8, shape (ceil(m/128), ceil(n/64))
        ``nl``: the smallest prefix with ``kc * max|a_tile| * max|b_tile| < M_nl / 2``,
        where ``a_tile`` is the tile's 128 rows of ``a_slice`` (all ``kc`` columns) and
        ``b_tile`` its 64 columns of ``b_slice``. ``kc`` is this chunk's length (the
        last chunk may be shorter than 4096). Since ``|sum_k a b| <= threshold``, the
        folded reconstruction modulo ``M_nl`` returns the exact integer.

    Raises
    ------
    ValueError
        If even ``M_7`` is too small (cannot happen for chunks of <= 4096 of
        17-bit slices; guards the seed's silent overflow for longer ``k``).
    """
    a = np.asarray(a_slice)
    b = np.asarray(b_slice)
    m, kc = a.shape
    n = b.shape[1]
    nrt, nct = -(-m // TILE_M), -(-n // TILE_N)
    if kc == 0 or m == 0 or n == 0:
        return np.ones((nrt, nct), dtype=np.int8)
    amax = np.maximum.reduceat(np.abs(a).max(axis=1), np.arange(0, m, TILE_M))
    bmax = np.maximum.reduceat(np.abs(b).max(axis=0), np.arange(0, n, TILE_N))
    # Screen in float64 first so the exact int64 product below cannot overflow: any
    # threshold >= 2^60 is far beyond M_7/2 ~ 2^46.3 anyway.
    if float(kc) * float(amax.max()) * float(bmax.max()) >= 2.0 ** 60:
        raise ValueError("k chunk x slice magnitudes exceed the 7-prime CRT range")
    thr2 = 2 * kc * amax[:, None].astype(np.int64) * bmax[None, :].astype(np.int64)
    # thr < M_nl/2  <=>  2 thr < M_nl  (integers; M_nl is odd)
    nl = np.searchsorted(_M_ARR[1:], thr2, side="right") + 1
    if nl.max() > T.NPRIMES:
        raise ValueError("k chunk x slice magnitudes exceed the 7-prime CRT range "
                         f"(K max|a| max|b| >= M/2 = {T.M / 2:.6g})")
    return nl.astype(np.int8)


def expand_tiles(nl_tiles, m, n):
    """Per-element map from a per-tile array (128 x 64 tiles).

    Parameters
    ----------
    nl_tiles : ndarray, shape (ceil(m/128), ceil(n/64))
    m, n : int

    Returns
    -------
    ndarray, shape (m, n)
    """
    t = np.asarray(nl_tiles)
    return np.repeat(np.repeat(t, TILE_M, axis=0)[:m], TILE_N, axis=1)[:, :n]


# ---------------------------------------------------------------- reconstruction

def crt_reconstruct_nl(c, nl):
    """CRT reconstruction with a per-element prime count, folded to signed.

    Parameters
    ----------
    c : ndarray of int, shape (P, ...)
        ``c[i] = C_i mod p_i`` in ``[0, p_i)`` for the first ``P`` primes, ``P >= max nl``.
    nl : int or ndarray of int, broadcastable to ``c.shape[1:]``
        Prime count per element, ``1..7``.

    Returns
    -------
    ndarray of int64, shape c.shape[1:]
        ``s = (sum_{i<nl} c_i f_i) mod M_nl`` with the flat coefficient table, then
        ``s - M_nl`` where ``s > M_nl/2``: the unique ``x`` with ``x = c_i mod p_i`` and
        ``|x| < M_nl/2``.

    Notes
    -----
    The seed reduces after every term; this sums first and reduces once, which is
    the same integer because ``sum c_i f_i <= 7 * 126 * M_7 < 2^58`` fits int64.
    """
    c = np.asarray(c)
    if c.dtype.kind not in "iu":
        raise TypeError("crt_reconstruct_nl needs integer residues")
    shape = c.shape[1:]
    nl = np.broadcast_to(np.asarray(nl), shape)
    if nl.size == 0:
        return np.zeros(shape, dtype=np.int64)
    nlmax = int(nl.max())
    if int(nl.min()) < 1 or nlmax > T.NPRIMES:
        raise ValueError("nl must lie in [1, 7]")
    if c.shape[0] < nlmax:
        raise ValueError(f"{c.shape[0]} residue planes given, nl needs {nlmax}")
    s = np.zeros(shape, dtype=np.int64)
    for i in range(nlmax):
        ci = c[i].astype(np.int64)
        if ci.size and (ci.min() < 0 or ci.max() >= T.PRIMES[i]):
            raise ValueError(f"residues for prime {T.PRIMES[i]} outside [0, p)")
        s += ci * _COEF[nl, i]  # coefficient 0 where i >= nl
    Mn = _M_ARR[nl]
    s %= Mn
    return np.where(2 * s > Mn, s - Mn, s)


# ---------------------------------------------------------------------- one pass

def pass_chunk(a_slice, b_slice, ra=None, rb=None, force_nl=None):
    """Exact integer ``a_slice @ b_slice`` for one k chunk through residues and CRT.

    Parameters
    ----------
    a_slice : ndarray of int64, shape (m, kc)
    b_slice : ndarray of int64, shape (kc, n)
    ra, rb : ndarray of int8, optional
        Precomputed :func:`residues_01` of the slices (computed when omitted).
    force_nl : int, optional
        Use this many primes in every tile instead of the adaptive choice (must not
        be below the adaptive choice: a smaller prefix could wrap around).

    Returns
    -------
    x : ndarray of int64, shape (m, n)
        The exact integer product.
    nl_tiles : ndarray of int8
        The prime count used per 128 x 64 tile.
    """
    a = np.asarray(a_slice)
    b = np.asarray(b_slice)
    m, n = a.shape[0], b.shape[1]
    nl_tiles = choose_nl_tiles(a, b)
    if force_nl is not None:
        if nl_tiles.size and force_nl < int(nl_tiles.max()):
            raise ValueError(f"force_nl={force_nl} is below the required "
                             f"nl={int(nl_tiles.max())}")
        nl_tiles = np.full_like(nl_tiles, force_nl)
    if m == 0 or n == 0:
        return np.zeros((m, n), dtype=np.int64), nl_tiles
    nlmax = int(nl_tiles.max())
    if ra is None:
        ra = residues_01(a, nlmax)
    if rb is None:
        rb = residues_01(b, nlmax)
    # Primes beyond the largest nl of any tile are not needed anywhere: skipping their
    # GEMMs changes no bit (the kernel's saving, seen from the CPU).
    c = np.empty((nlmax, m, n), dtype=np.int16)
    for i in range(nlmax):
        np.mod(prime_gemm(ra[i], rb[i]), _PRIMES[i], out=c[i], casting="unsafe")
    x = crt_reconstruct_nl(c, expand_tiles(nl_tiles, m, n))
    return x, nl_tiles


def pass_integer(a_slice, b_slice, k_chunk=T.K_CHUNK_MAX, ra=None, rb=None,
                 force_nl=None, nl_log=None):
    """Exact integer ``a_slice @ b_slice`` over all of k: chunks of ``k_chunk``.

    Parameters
    ----------
    a_slice : ndarray of int64, shape (m, k)
    b_slice : ndarray of int64, shape (k, n)
    k_chunk : int
        Chunk length (``plan.k_chunk``; at most 4096 for 17-bit slices).
    ra, rb : ndarray of int8, optional
        Residues of the whole slices (shape (7, m, k), (7, k, n)).
    force_nl : int, optional
        See :func:`pass_chunk`.
    nl_log : list, optional
        When given, the per-chunk ``nl_tiles`` arrays are appended to it.

    Returns
    -------
    ndarray of int64, shape (m, n)
        Sum of the chunk integers, exact: ``|x| <= k 2^34 < 2^63`` for ``k <= K_MAX``.
    """
    a = np.asarray(a_slice)
    b = np.asarray(b_slice)
    m, k = a.shape
    n = b.shape[1]
    if k > K_MAX:
        raise ValueError(f"k = {k} > {K_MAX}: the exact int64 pass sum could overflow")
    x = np.zeros((m, n), dtype=np.int64)
    for k0 in range(0, k, k_chunk):
        k1 = min(k, k0 + k_chunk)
        xc, nl_tiles = pass_chunk(a[:, k0:k1], b[k0:k1, :],
                                  None if ra is None else ra[:, :, k0:k1],
                                  None if rb is None else rb[:, k0:k1, :],
                                  force_nl=force_nl)
        x += xc
        if nl_log is not None:
            nl_log.append(nl_tiles)
    return x


# ------------------------------------------------------------------ accumulation

def accumulate_passes(xs):
    """The four pass integers, scaled and summed in float64 in the spec's order.

    Parameters
    ----------
    xs : sequence of 4 ndarrays of int64
        Pass integers in :data:`~ozaki_backend.spec.seed.PASSES` order
        (hi x hi, hi x lo, lo x hi, lo x lo).

    Returns
    -------
    ndarray of float64
        ``acc = 0; acc += RN(x_l) * 2^s_l`` for ``l = 1..4``. ``RN(x_l)`` rounds only
        when ``|x_l| > 2^53`` (hi x hi beyond k = 2^19); the scaling is exact because
        ``|x| 2^-68 >= 2^-68`` is never subnormal; each addition rounds once (the
        first, to zero, does not).
    """
    if len(xs) != len(T.PASSES):
        raise ValueError("need one integer matrix per pass")
    acc = np.zeros(np.shape(xs[0]), dtype=np.float64)
    for x, (_, _, s) in zip(xs, T.PASSES):
        acc += np.asarray(x, dtype=np.int64).astype(np.float64) * 2.0 ** s
    return acc


def finalize(acc, E, F):
    """``C_ij = ldexp(acc_ij, E_i + F_j)``: undo the prescale.

    Parameters
    ----------
    acc : ndarray of float64, shape (m, n)
    E : ndarray of int, shape (m,)
    F : ndarray of int, shape (n,)

    Returns
    -------
    ndarray of float64
        Exact unless the result is subnormal (one rounding) or overflows (``±inf``).
    """
    s = np.asarray(E, dtype=np.int32)[:, None] + np.asarray(F, dtype=np.int32)[None, :]
    return np.ldexp(acc, s)


def residual_correction(v, w, hiA, loA, hiB, loB, E, F):
    """The seed's Phase 24 correction: the truncated tails, multiplied natively.

    Parameters
    ----------
    v : ndarray of float64, shape (m, k)
        Prescaled A.
    w : ndarray of float64, shape (k, n)
        Prescaled B.
    hiA, loA, hiB, loB : ndarray of int64
        The slices of ``v`` and ``w``.
    E, F : ndarray of int
        The prescale exponents.

    Returns
    -------
    ndarray of float64, shape (m, n)
        ``ldexp(Ta @ w + Â @ Tb, E_i + F_j)`` with ``Â = hi 2^-17 + lo 2^-34``,
        ``Ta = v - Â``, ``Tb = w - B̂`` (all exact, see :func:`split_hi_lo`).
        Mathematically ``Ta w + Â Tb = v w - Â B̂``, the part the four integer passes
        drop. The two products use NumPy's float64 GEMM (BLAS), whose summation order
        depends on the BLAS build and thread count: this term is **not** bitwise
        reproducible across engines or machines, unlike the rest of the scheme.
    """
    Ah = recombine(hiA, loA)
    Bh = recombine(hiB, loB)
    Ta = v - Ah
    Tb = w - Bh
    return finalize(Ta @ w + Ah @ Tb, E, F)


# ----------------------------------------------------------------------- driver

def _check_inputs(A, B, plan):
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    check_plan_and_shapes(A, B, plan)
    if not (np.isfinite(A).all() and np.isfinite(B).all()):
        raise ValueError("phase22 needs finite operands (NaN/Inf take the native path)")
    return A, B


def matmul_2d_trace(A, B, plan, *, force_nl=None):
    """:func:`matmul_2d` plus every intermediate, for stage-by-stage comparison.

    Parameters
    ----------
    A, B, plan, force_nl
        As for :func:`matmul_2d`.

    Returns
    -------
    C : ndarray of float64, shape (m, n)
    trace : dict
        ``E``, ``F`` (exponents), ``hiA``, ``loA``, ``hiB``, ``loB`` (int64 slices),
        ``x`` (the four pass integers, int64, PASSES order), ``nl`` (per pass, the list
        of per-chunk ``nl_tiles``), ``acc`` (float64 before ``ldexp``), ``C_main``
        (result without the residual) and, when ``plan.residual``, ``residual``.
    """
    A, B = _check_inputs(A, B, plan)
    m, k = A.shape
    n = B.shape[1]
    trace = {}
    if k == 0 or m == 0 or n == 0:
        C = np.zeros((m, n), dtype=np.float64)
        trace.update(C_main=C.copy())
        return C, trace
    if k > K_MAX:
        raise ValueError(f"k = {k} > {K_MAX}: the exact int64 pass sum could overflow")
    v, w, E, F = prescale(A, B)
    hiA, loA = split_hi_lo(v)
    hiB, loB = split_hi_lo(w)
    slices_a = {"hi": hiA, "lo": loA}
    slices_b = {"hi": hiB, "lo": loB}
    res_a = {s: residues_01(x) for s, x in slices_a.items()}
    res_b = {s: residues_01(x) for s, x in slices_b.items()}
    xs, nls = [], []
    for sa, sb, _ in T.PASSES:
        log = []
        xs.append(pass_integer(slices_a[sa], slices_b[sb], plan.k_chunk,
                               res_a[sa], res_b[sb], force_nl=force_nl, nl_log=log))
        nls.append(log)
    acc = accumulate_passes(xs)
    C = finalize(acc, E, F)
    trace.update(E=E, F=F, hiA=hiA, loA=loA, hiB=hiB, loB=loB, x=xs, nl=nls, acc=acc,
                 C_main=C)
    if plan.residual:
        R = residual_correction(v, w, hiA, loA, hiB, loB, E, F)
        trace["residual"] = R
        C = C + R
    return C, trace


def matmul_2d(A, B, plan, *, force_nl=None):
    """The seed scheme's product of two 2-D float64 matrices (``docs/spec.md`` §9).

    Parameters
    ----------
    A : ndarray of float64, shape (m, k)
        Finite.
    B : ndarray of float64, shape (k, n)
        Finite. ``k`` may be 0 (zeros) or large (split into chunks of
        ``plan.k_chunk <= 4096``; up to ``K_MAX = 2^29 - 1``).
    plan : Plan
        From ``ozaki_backend.plan(m, n, k, scheme="phase22", residual=...)``; its
        ``k_chunk`` and ``residual`` are used.
    force_nl : int, optional
        Use this many primes in every tile instead of the adaptive choice (testing:
        the result must not change, since every valid nl reconstructs exactly).

    Returns
    -------
    ndarray of float64, shape (m, n)
        Without ``plan.residual``: bitwise determined by the spec (about 34 bits of
        each row's / column's largest element are kept). With it: plus the native
        float64 tail correction (float64-level accuracy, not bitwise reproducible
        across engines).

    Raises
    ------
    ValueError
        Wrong plan or shapes, non-finite operands, or ``k > K_MAX``.
    """
    return matmul_2d_trace(A, B, plan, force_nl=force_nl)[0]


__all__ = ["TILE_M", "TILE_N", "K_MAX", "row_exponents", "col_exponents", "prescale",
           "split_hi_lo", "recombine", "residues_01", "prime_gemm", "choose_nl_tiles",
           "expand_tiles", "crt_reconstruct_nl", "pass_chunk", "pass_integer",
           "accumulate_passes", "finalize", "residual_correction", "matmul_2d",
           "matmul_2d_trace"]
