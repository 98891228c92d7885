"""The seed scheme ``scheme="phase22"`` in production on the GPU: driver and launches.

:func:`matmul_2d` computes what :func:`ozaki_backend.reference.phase22.matmul_2d` does
(``docs/spec.md`` §9), bit for bit without the residual correction, with the kernels
of ``kernels/phase22.cu`` and the reference's stages fused into few launches:

* the row exponents of A and B (the CUDA scaling stage's kernel), fixed up in one
  launch (zero rows, the non-finite flag);
* :func:`residue_planes_into` per operand: one read of the float64 operand writes the
  14 int8 residue planes the modular products take and the per-tile maxima of
  ``|hi|``, ``|lo|`` per k chunk (the reference's ``split_hi_lo`` + ``residues_01``);
* one launch of ``oz22_choose_nl`` per row block: the adaptive prime count of every
  128 x 64 tile, per chunk and pass (``choose_nl_tiles``), and the ``need`` map the
  products skip tiles by;
* :func:`ozaki_backend.cuda.modprod.mod_products` per k chunk, every pass and prime
  as an item;
* :func:`crt_finalize_into` per group of up to :data:`GROUP_MAX` chunks: the CRT of
  each chunk (``crt_reconstruct_nl``), summed over the group in registers, and for the
  last group the float64 accumulation and ``ldexp`` (``accumulate_passes`` /
  ``finalize``); int64 pass sums go through memory only between groups;
* with ``plan.residual``, the Phase 24 tail through CuPy's float64 matmul (not bitwise
  reproducible across engines).

The errors (non-finite operands, a chunk beyond the 7-prime range) come from one small
device-to-host read once every launch is queued. :func:`choose_blocks` sizes the row
blocks and groups to the free device memory. The bytes moved and the launches per call
are in ``docs/gpu-kernels.md``; :mod:`.phase22` holds the stage-by-stage mirror of the
reference that the tests compare.
"""

from __future__ import annotations

import os

import cupy
import numpy as np

from ..semantics import check_plan_and_shapes
from ..spec import seed as T
from ..spec.seed import K_MAX, TILE_M, TILE_N
from . import loader
from ._common import KPAD, as_rows, blocks, free_device_bytes, round_up
from ._prelude import phase22_prelude
from .errors import CudaEngineError


#: Slice names in plane order: plane ``slice * NPRIMES + prime``.
SLICES = ("hi", "lo")
#: int8 residue planes per operand.
NPLANES = len(SLICES) * T.NPRIMES
#: Leading dimension of the uint8 product planes is a multiple of this (mod_products).
LDO_PAD = 16
#: The modular products take k ranges starting at multiples of 128 (their k tile), so
#: chunks start there (the plan's 4096 does).
KCHUNK_ALIGN = 128
#: Tests may force the output row block (a multiple of 128); also
#: ``OZAKI_BACKEND_PHASE22_ROWS``.
ROW_BLOCK_OVERRIDE = None
#: Fraction of the free device memory the workspace may take; the rest is headroom for
#: the modular products' own workspace and cuBLAS.
MEMORY_FRACTION = 0.6

_SLICE_INDEX = {name: i for i, name in enumerate(SLICES)}
_PASS_A = tuple(_SLICE_INDEX[a] for a, _, _ in T.PASSES)
_PASS_B = tuple(_SLICE_INDEX[b] for _, b, _ in T.PASSES)
_NPASS = len(T.PASSES)


# ------------------------------------------------------------------------- kernels

#: Source text placed before ``kernels/phase22.cu`` (generated from the tables; lives in
#: the CuPy-free :mod:`._prelude` so that ``scripts/compile-kernels.sh`` can use it).
prelude = phase22_prelude


def _fn(name):
    return loader.get_function("phase22.cu", name, prelude=prelude())


# ------------------------------------------------------------------------ launches

def _ldexp_rows_into(X, E, sign, out):
    """``out = ldexp(X, sign * E_row)`` (exact, or one rounding when subnormal)."""
    rows, cols = X.shape
    if rows == 0 or cols == 0:
        return out
    X, rs, cs, _ = as_rows(X)
    _fn("oz22_ldexp_2d")((blocks(rows * cols),), (256,),
                         (X, rs, cs, np.int32(rows), np.int32(cols), E, None,
                          np.int32(sign), out, np.int64(out.strides[0] // 8),
                          np.int64(out.strides[1] // 8)))
    return out


def residue_planes_into(X, E, R, *, kchunk=T.K_CHUNK_MAX, tile_rows=TILE_M, smax=None,
                        hi_out=None, lo_out=None):
    """split_hi_lo + residues_01 of ``X 2^-E_row`` in one pass, in the GEMM layout.

    Parameters
    ----------
    X : cupy float64 (rows, cols), any strides
        The operand read row-wise: A's rows, or B through ``B.T`` (B's columns).
    E : cupy int32 (rows,) or None
        Row exponents (None: 0, ``X`` is already prescaled, ``|X| < 1``).
    R : cupy int8 (14, >= rows, kpad) or None
        Planes ``slice * 7 + prime`` (slice 0 = hi, 1 = lo): ``R[q, i, t]`` is the
        residue in ``[0, p)`` of element ``(i, t)``; columns ``cols..kpad-1`` zeroed.
        C-contiguous.
    kchunk : int
        k chunk of the maxima (a multiple of 16).
    tile_rows : int
        Rows per tile of the maxima: 128 for A, 64 for B (its output columns).
    smax : cupy uint32 (2, nch, ntiles), zeroed, or None
        Receives ``max |slice|`` per (slice, chunk, tile) by atomic max.
    hi_out, lo_out : cupy int64 (rows, cols), C-contiguous, or None
        The slices themselves (stage output for tests).
    """
    rows, cols = X.shape
    kpad = R.shape[2] if R is not None else round_up(max(cols, 1), KPAD)
    if rows == 0 or kpad == 0:
        return
    if kchunk % KPAD or tile_rows % 32:
        raise ValueError("kchunk must be a multiple of 16 and tile_rows of 32")
    if R is not None and not (R.flags.c_contiguous and R.dtype == np.int8
                              and R.shape[0] == NPLANES and R.shape[1] >= rows):
        raise ValueError("R must be C-contiguous int8 (14, >= rows, kpad)")
    X, rs, cs, rows_fast = as_rows(X)
    grid = (-(-kpad // 64), -(-rows // 32))
    if grid[1] > 65535:
        raise ValueError(f"operand too tall for one launch ({rows} rows)")
    nch, ntiles = (smax.shape[1], smax.shape[2]) if smax is not None else (0, 0)
    plane = R.shape[1] * kpad if R is not None else 0
    _fn("oz22_split_residues")(
        grid, (256,),
        (X, rs, cs, np.int32(rows), np.int32(cols), rows_fast, np.int32(kpad), E, R,
         np.int64(plane), np.int32(kchunk), np.int32(tile_rows), smax, np.int32(nch),
         np.int32(ntiles), hi_out, lo_out))


def _choose_nl(amax, bmax, k, kchunk, nlmax):
    """:func:`choose_nl_chunks` into a given (zeroed) ``nlmax``; one launch."""
    _, nch, ntr = amax.shape
    ntc = bmax.shape[2]
    nl = cupy.empty((nch, _NPASS, ntr, ntc), dtype=np.int8)
    need = cupy.empty((nch, ntr, ntc), dtype=np.int8)
    total = nch * ntr * ntc
    if total:
        _fn("oz22_choose_nl")((blocks(total),), (256,),
                              (amax, bmax, np.int32(nch), np.int32(ntr), np.int32(ntc),
                               np.int32(k), np.int32(kchunk), nl, need, nlmax))
    return nl, need


def _check_nlmax(nlmax_host):
    if len(nlmax_host) and int(np.max(nlmax_host)) > T.NPRIMES:
        raise ValueError("k chunk x slice magnitudes exceed the 7-prime CRT range "
                         f"(K max|a| max|b| >= M/2 = {T.M / 2:.6g})")


def crt_finalize_into(Rp, rows, cols, nl, nchunks, *, npass=_NPASS, X=None, xin=False,
                      xout=False, E=None, F=None, C=None, acc_out=None):
    """CRT of a group of k chunks, summed, and (with ``C``) accumulate + finalize.

    One launch of ``oz22_crt_finalize``. ``x_P = [X_P +] sum_g crt(chunk g, pass P)``
    (exact int64); with ``C``: ``C = ldexp(sum_P RN(x_P) 2^s_P, E_i + F_j)``.

    Parameters
    ----------
    Rp : cupy uint8 (>= nchunks * npass * 7, >= rows, ldo), C-contiguous, ``ldo`` a
        multiple of 16
        Residues in ``[0, p)`` from the modular products: chunk ``g``'s pass ``P``,
        prime ``i`` is plane ``(g npass + P) 7 + i``. Only planes ``i < nl`` of each
        tile are read. Unused (may be None) when ``nchunks == 0``.
    rows, cols : int
    nl : cupy int8 (>= nchunks, npass, ceil(rows/128), ceil(cols/64)), C-contiguous
    nchunks : int
        Chunks in the group (0: only ``X`` is used).
    npass : int
        Passes per chunk (4; 1 for the single-pass stage test; ``C`` needs 4).
    X : cupy int64 (npass, rows, ldx) view, unit stride along the columns, or None
        The pass sums: read when ``xin``, written when ``xout``.
    E : cupy int32 (rows,) or None;  F : cupy int32 (cols,) or None
    C : cupy float64 (rows, cols) view, any strides, or None
    acc_out : cupy float64 (rows, cols), C-contiguous, or None
    """
    if rows == 0 or cols == 0:
        return C
    if C is not None and npass != _NPASS:
        raise ValueError("the finalize needs all four passes")
    if (xin or xout) and (X is None or X.strides[2] != 8 or X.shape[0] < npass):
        raise ValueError("crt_finalize_into: X must be (npass, rows, ldx), unit column stride")
    if nchunks:
        if not (Rp.flags.c_contiguous and Rp.dtype == np.uint8
                and Rp.shape[2] % LDO_PAD == 0 and Rp.shape[0] >= nchunks * npass * T.NPRIMES
                and nl.flags.c_contiguous and nl.dtype == np.int8 and nl.shape[0] >= nchunks
                and nl.shape[1] == npass):
            raise ValueError("crt_finalize_into: layout of Rp / nl not as documented")
        plane, ldo = Rp.shape[1] * Rp.shape[2], Rp.shape[2]
        nl_chunk, nl_pass = nl.shape[1] * nl.shape[2] * nl.shape[3], nl.shape[2] * nl.shape[3]
        ntc = nl.shape[3]
    else:
        Rp = nl = None
        plane = ldo = nl_chunk = nl_pass = ntc = 0
    xs = (X.strides[0] // 8, X.strides[1] // 8) if X is not None else (0, 0)
    cs = (C.strides[0] // 8, C.strides[1] // 8) if C is not None else (0, 0)
    _fn("oz22_crt_finalize")(
        (blocks(rows * -(-cols // 4)),), (256,),
        (Rp, np.int64(plane), np.int64(ldo), np.int32(rows), np.int32(cols),
         np.int32(nchunks), np.int32(npass), nl, np.int64(nl_chunk), np.int64(nl_pass),
         np.int32(ntc), X, np.int64(xs[0]), np.int64(xs[1]), np.int32(bool(xin)),
         np.int32(bool(xout)), E, F, C, np.int64(cs[0]), np.int64(cs[1]), acc_out))
    return C


def finalize(acc, E, F):
    """``C_ij = ldexp(acc_ij, E_i + F_j)``, as np.ldexp (one rounding when subnormal,
    inf on overflow).

    Parameters
    ----------
    acc : cupy float64 (m, n)
    E : cupy int (m,);  F : cupy int (n,)

    Returns
    -------
    cupy float64 (m, n)
    """
    acc = cupy.asarray(acc, dtype=np.float64)
    m, n = acc.shape
    out = cupy.empty((m, n), dtype=np.float64)
    if m == 0 or n == 0:
        return out
    X, rs, cs, _ = as_rows(acc)
    _fn("oz22_ldexp_2d")((blocks(m * n),), (256,),
                         (X, rs, cs, np.int32(m), np.int32(n),
                          cupy.asarray(E, dtype=np.int32), cupy.asarray(F, dtype=np.int32),
                          np.int32(1), out, np.int64(n), np.int64(1)))
    return out


def _recombine_rows(X, E):
    """``Â`` of the rows of ``X 2^-E`` (float64 rows x cols, C order), exact."""
    rows, cols = X.shape
    out = cupy.empty((rows, cols), dtype=np.float64)
    if rows and cols:
        X, rs, cs, _ = as_rows(X)
        _fn("oz22_recombine")((blocks(rows * cols),), (256,),
                              (X, rs, cs, np.int32(rows), np.int32(cols), E, out))
    return out


def _residual_term(A, B, E, F):
    """:func:`residual_correction` from the operands, without materialising the slices."""
    m, k = A.shape
    n = B.shape[1]
    v = _ldexp_rows_into(A, E, -1, cupy.empty((m, k), dtype=np.float64))
    wt = _ldexp_rows_into(B.T, F, -1, cupy.empty((n, k), dtype=np.float64))
    Ah = _recombine_rows(A, E)
    Bht = _recombine_rows(B.T, F)
    Ta = v - Ah
    Tbt = wt - Bht
    del Bht
    S = cupy.matmul(Ta, wt.T) + cupy.matmul(Ah, Tbt.T)
    return finalize(S, E, F)


# ----------------------------------------------------------------------- driver

def _check_inputs(A, B, plan):
    A = cupy.asarray(A, dtype=np.float64)
    B = cupy.asarray(B, dtype=np.float64)
    check_plan_and_shapes(A, B, plan)
    if plan.k_chunk % KCHUNK_ALIGN:
        raise ValueError("the CUDA engine needs plan.k_chunk to be a multiple of "
                         f"{KCHUNK_ALIGN}; got {plan.k_chunk}")
    return A, B


#: At most this many k chunks share one CRT launch (their residue planes are all held);
#: more chunks go through the int64 pass sums, one group after the other.
GROUP_MAX = 4
#: A smaller group is preferred to row blocks below this many rows (the products
#: lose efficiency on short blocks).
MIN_ROWS = 1024

#: The modular products of one chunk: every pass, every prime (plane P * 7 + i of the
#: chunk's 28), level i. Tiles that need fewer primes skip the rest (``need``).
_ITEMS = tuple((_PASS_A[P] * T.NPRIMES + i, _PASS_B[P] * T.NPRIMES + i, T.PRIMES[i], i)
               for P in range(_NPASS) for i in range(T.NPRIMES))
_NITEMS = len(_ITEMS)


def _row_block_bytes(tm, n, kpad, nch, group=1, sums=True):
    """Device bytes of one output row block of ``tm`` rows: A's planes, ``group`` chunks
    of product planes, the int64 pass sums (``sums``), maxima, nl and need."""
    ntr, ntc = -(-tm // TILE_M), -(-n // TILE_N)
    return (NPLANES * tm * kpad                                 # RA
            + (8 * _NPASS * tm * n if sums else 0)              # int64 pass sums
            + group * _NITEMS * tm * round_up(n, LDO_PAD)       # uint8 product planes
            + nch * ntr * (12 + 5 * ntc) + 1024)                # maxima, nl, need


def _fixed_bytes(n, kpad, nch):
    return NPLANES * n * kpad + 2 * 4 * nch * -(-n // TILE_N) + 4 * n + 1024


def _row_block(m, n, kpad, nch, group, budget):
    """Largest row block (all of m, else a multiple of 128) within ``budget``, or 0."""
    sums = group < nch
    tm = m
    while _row_block_bytes(tm, n, kpad, nch, group, sums) > budget:
        if tm <= TILE_M:
            return 0
        tm = max(TILE_M, round_up(-(-tm // 2), TILE_M))
    return tm


def _override_rows(m):
    override = ROW_BLOCK_OVERRIDE
    env = os.environ.get("OZAKI_BACKEND_PHASE22_ROWS", "")
    if override is None and env:
        override = int(env)
    if override is None:
        return None
    if override % TILE_M:
        raise ValueError(f"row block must be a multiple of {TILE_M}")
    return max(TILE_M, min(override, round_up(m, TILE_M)))


def choose_blocks(m, n, kpad, nch, free=None):
    """``(rows per block, chunks per CRT group)``.

    The largest group (at most :data:`GROUP_MAX`, at most ``nch``) whose workspace keeps
    the row block at all of ``m`` or at least :data:`MIN_ROWS` rows; else the longest row
    block that fits, with the largest group at that length.
    """
    gmax = max(1, min(GROUP_MAX, nch))
    over = _override_rows(m)
    if free is None:
        free = free_device_bytes()
    budget = int(free * MEMORY_FRACTION) - _fixed_bytes(n, kpad, nch)
    if over is not None:
        for g in range(gmax, 0, -1):
            if _row_block_bytes(over, n, kpad, nch, g, g < nch) <= budget:
                return over, g
        return over, 1
    cands = [(_row_block(m, n, kpad, nch, g, budget), g) for g in range(gmax, 0, -1)]
    for tm, g in cands:
        if tm and (tm >= m or tm >= MIN_ROWS):
            return tm, g
    tm, g = max(cands)  # the longest row block; of those, the largest group
    if not tm:
        raise CudaEngineError(
            f"device out of memory: phase22 with {TILE_M}-row blocks (n = {n}, "
            f"k = {kpad}) needs {_fixed_bytes(n, kpad, nch) + _row_block_bytes(TILE_M, n, kpad, nch)}"
            f" bytes of workspace, {int(free * MEMORY_FRACTION)} are available")
    return tm, g


def _view(buf, shape):
    """C-contiguous view of the first elements of a flat buffer."""
    return buf[:int(np.prod(shape))].reshape(shape)


def _raise_on_status(status):
    """The driver's one device-to-host read: non-finite flag and nl maxima."""
    st = cupy.asnumpy(status)
    if st[0]:
        raise ValueError("phase22 needs finite operands (NaN/Inf take the native path)")
    _check_nlmax(st[1:].astype(np.int64))


def matmul_2d_trace(A, B, plan, *, keep=True):
    """:func:`matmul_2d` plus every intermediate, keyed as the reference's trace.

    Parameters
    ----------
    A, B, plan
        As for :func:`matmul_2d`.
    keep : bool
        Keep the intermediates (else the trace holds ``E`` and ``F`` only).

    Returns
    -------
    C : cupy float64 (m, n)
    trace : dict
        ``E``, ``F``, ``hiA``, ``loA``, ``hiB``, ``loB``, ``x`` (the four pass integers),
        ``nl`` (per pass, the list of per-chunk nl tiles), ``acc``, ``C_main`` and, when
        ``plan.residual``, ``residual`` -- CuPy arrays, as the reference's.
    """
    from . import scaling
    from .modprod import mod_products

    A, B = _check_inputs(A, B, plan)
    m, k = A.shape
    n = B.shape[1]
    trace = {}
    if k == 0 or m == 0 or n == 0:
        C = cupy.zeros((m, n), dtype=np.float64)
        trace.update(C_main=C.copy())
        return C, trace
    if k > K_MAX:
        raise ValueError(f"k = {k} > {K_MAX}: the exact int64 pass sum could overflow")

    kch = plan.k_chunk
    kpad = round_up(k, KPAD)
    nch = -(-k // kch)
    ntc = -(-n // TILE_N)
    ldo = round_up(n, LDO_PAD)
    tm, group = choose_blocks(m, n, kpad, nch)
    tm = min(tm, m)
    nblk = -(-m // tm)
    ntr_b = -(-tm // TILE_M)
    sums = keep or group < nch

    # One zeroed uint32 workspace: [flag | nlmax (nblk, nch) | bmax (2, nch, ntc) |
    # amax (nblk, 2, nch, ntr_b)] -- one memset; read back once, at the end.
    nst = 1 + nblk * nch
    ws = cupy.zeros(nst + 2 * nch * ntc + nblk * 2 * nch * ntr_b, dtype=np.uint32)
    status = ws[:nst]
    nlmax_all = ws[1:nst].view(np.int32).reshape(nblk, nch)
    bmax = ws[nst:nst + 2 * nch * ntc].reshape(2, nch, ntc)
    amax_all = ws[nst + 2 * nch * ntc:].reshape(nblk, 2 * nch * ntr_b)

    # Row exponents of both operands in one buffer, fixed up (zero rows -> 0, Inf/NaN
    # flagged) by one launch.
    EF = cupy.empty(m + n, dtype=np.int32)
    scaling.row_exponents(A, EF[:m])
    scaling.row_exponents(B.T, EF[m:])
    _fn("oz22_fix_exponents")((blocks(m + n, cap=1 << 30),), (256,),
                              (EF, np.int32(m + n), status))
    E, F = EF[:m], EF[m:]
    trace.update(E=E, F=F)

    # B's planes once, in full (rows of a plane = B's columns).
    RB = cupy.empty((NPLANES, n, kpad), dtype=np.int8)
    hiBt = loBt = None
    if keep:
        hiBt = cupy.empty((n, k), dtype=np.int64)
        loBt = cupy.empty((n, k), dtype=np.int64)
    residue_planes_into(B.T, F, RB, kchunk=kch, tile_rows=TILE_N, smax=bmax,
                        hi_out=hiBt, lo_out=loBt)

    RA = cupy.empty(NPLANES * tm * kpad, dtype=np.int8)
    OUT = cupy.empty(group * _NITEMS * tm * ldo, dtype=np.uint8)
    C = cupy.empty((m, n), dtype=np.float64)
    Xbuf = Xall = None
    if keep:
        Xall = cupy.empty((_NPASS, m, n), dtype=np.int64)
        hiA = cupy.empty((m, k), dtype=np.int64)
        loA = cupy.empty((m, k), dtype=np.int64)
        acc = cupy.empty((m, n), dtype=np.float64)
        nl_blocks = []
    elif sums:
        Xbuf = cupy.empty(_NPASS * tm * n, dtype=np.int64)

    for b, i0 in enumerate(range(0, m, tm)):
        rows = min(tm, m - i0)
        ntr = -(-rows // TILE_M)
        RAv = _view(RA, (NPLANES, rows, kpad))
        amax = amax_all[b, :2 * nch * ntr].reshape(2, nch, ntr)  # contiguous
        residue_planes_into(A[i0:i0 + rows], E[i0:i0 + rows], RAv, kchunk=kch,
                            tile_rows=TILE_M, smax=amax,
                            hi_out=hiA[i0:i0 + rows] if keep else None,
                            lo_out=loA[i0:i0 + rows] if keep else None)
        nl, need = _choose_nl(amax, bmax, k, kch, nlmax_all[b])
        X = None
        if sums:
            X = Xall[:, i0:i0 + rows] if keep else _view(Xbuf, (_NPASS, rows, n))
        Rall = _view(OUT, (group * _NITEMS, rows, ldo))
        for g0 in range(0, nch, group):
            gn = min(group, nch - g0)
            for g in range(gn):
                k0 = (g0 + g) * kch
                mod_products(RAv, RB, _ITEMS, Rall[g * _NITEMS:(g + 1) * _NITEMS], rows, n,
                             k0, min(kch, kpad - k0), need=need[g0 + g])
            last = g0 + gn == nch
            crt_finalize_into(Rall, rows, n, nl[g0:], gn, X=X, xin=g0 > 0,
                              xout=sums and (keep or not last),
                              E=E[i0:i0 + rows] if last else None, F=F if last else None,
                              C=C[i0:i0 + rows] if last else None,
                              acc_out=acc[i0:i0 + rows] if (keep and last) else None)
        if keep:
            nl_blocks.append(nl)

    _raise_on_status(status)
    if keep:
        nl_all = cupy.concatenate(nl_blocks, axis=2)  # (nch, 4, ntr_total, ntc)
        trace.update(hiA=hiA, loA=loA, hiB=hiBt.T, loB=loBt.T,
                     x=[Xall[P] for P in range(_NPASS)],
                     nl=[[nl_all[c, P] for c in range(nch)] for P in range(_NPASS)],
                     acc=acc, C_main=C)
    del RA, OUT, RB
    if plan.residual:
        R = _residual_term(A, B, E, F)
        trace["residual"] = R
        C = C + R
    return C, trace


def matmul_2d(A, B, plan):
    """The seed scheme's product of two 2-D float64 device matrices (``docs/spec.md`` §9).

    Parameters
    ----------
    A : cupy float64 (m, k), any strides
        Finite.
    B : cupy float64 (k, n), any strides
        Finite; ``k <= K_MAX``.
    plan : Plan
        ``scheme="phase22"``; its ``k_chunk`` (a multiple of 16 here) and ``residual``
        are used.

    Returns
    -------
    cupy float64 (m, n)
        Without ``plan.residual``: bitwise equal to the CPU reference. With it: plus the
        tail correction through cuBLAS's DGEMM (not bitwise reproducible).

    Raises
    ------
    ValueError
        Wrong plan or shapes, non-finite operands, ``k > K_MAX``, or a ``k_chunk`` that is
        not a multiple of 16.
    """
    return matmul_2d_trace(A, B, plan, keep=False)[0]


__all__ = ["SLICES", "NPLANES", "GROUP_MAX", "MIN_ROWS", "MEMORY_FRACTION",
           "ROW_BLOCK_OVERRIDE", "prelude", "residue_planes_into",
           "crt_finalize_into", "finalize", "choose_blocks", "matmul_2d",
           "matmul_2d_trace"]
