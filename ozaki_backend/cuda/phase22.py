"""The seed scheme ``scheme="phase22"`` on the GPU (``docs/spec.md`` §9).

Mirrors :mod:`ozaki_backend.reference.phase22` stage by stage (same stage names), with
the kernels of ``kernels/phase22.cu``:

1. :func:`prescale` -- ``E_i``, ``F_j`` from the CUDA scaling stage's row-exponent kernel
   (the same quantity as the reference's ``row_exponents``);
2. :func:`split_hi_lo` + :func:`residues_01` -- fused in production as
   :func:`residue_planes_into`: one read of the float64 operand writes the 14 int8
   planes (``slice * 7 + prime``, rows x kpad, k contiguous, padding zeroed) that the
   modular products take, and the per-tile maxima of ``|hi|``, ``|lo|`` per k chunk;
3. the INT8 GEMMs -- :func:`ozaki_backend.cuda.modprod.mod_products`, one call per k
   chunk with every pass and prime as an item;
4. :func:`choose_nl_tiles` -- the adaptive prime count of every 128 x 64 tile, per pass
   and chunk (:func:`choose_nl_chunks` in production);
5. :func:`crt_reconstruct_nl` -- per chunk, ``(sum c_i f_i) mod M_nl`` (Barrett, exact
   for every 64-bit sum) folded at ``M_nl / 2``, summed over the chunks in int64;
6. :func:`accumulate_passes` / :func:`finalize` -- float64 in the reference's order
   (``__dadd_rn``/``__dmul_rn``: no contraction) and an ``ldexp`` done on the bits
   (one rounding for subnormal results, overflow to inf). In production 5 and 6 are one
   kernel, :func:`crt_finalize_into`: it reads the residue planes of a *group* of up to
   :data:`GROUP_MAX` chunks (28 planes each), sums the chunks' CRT values in registers
   and writes C; only when there are more chunks than one group holds do int64 pass
   sums go through memory between groups (the last group still ends in the finalize);
7. :func:`residual_correction` -- the Phase 24 tail through CuPy's float64 matmul: like
   the reference's BLAS product it is *not* bitwise reproducible across engines.

:func:`matmul_2d` (CuPy in, CuPy out) drives them; :func:`matmul_2d_trace` keeps every
intermediate with the reference trace's keys.

Cost of the driver around the INT8 products (``nch`` k chunks, one row block; the
products themselves write 28 B per output element and chunk, unchanged)

=============================  ======================  ===========================
per output element (C side)    before                  now (``nch <= GROUP_MAX``)
=============================  ======================  ===========================
residue planes read            28 nch                  28 nch
int64 pass sums                32 + 64 (nch - 1) + 32  0
float64 C written              8                       8
total                          92 nch + 8              28 nch + 8
n = k = 8192 (nch = 2)         192 B (12.9 GB)         64 B (4.3 GB)
n = k = 2048 (nch = 1)         100 B (0.42 GB)         36 B (0.15 GB)
=============================  ======================  ===========================

With ``nch > GROUP_MAX`` (groups of ``GROUP_MAX`` chunks): ``28 nch + 8 + 64 (ngroups -
1)`` B. Per operand element (A and B alike, unchanged): row exponents 8 B read, split +
residues 8 B read + 14 B written.

Launches per call (kernels, memsets, copies; one row block): before ``18 + 3 nch`` plus
2 device-to-host reads, each a host synchronisation in the middle of the pipeline (the
finiteness check after the exponents; the nl maxima, which sized the item lists, per row
block). Now ``10 + 2 nch + ngroups`` (one memset for every counter, the exponents of A
and B fixed up by one kernel, every pass and prime always given to the products --
tiles needing fewer primes skip the rest through ``need`` -- and one CRT+finalize per
group) and one device-to-host read of a few words (non-finite flag, nl maxima; nl > 7 is
impossible for ``k_chunk <= 4096``, see ``oz22_choose_nl``), after every launch is
queued: the errors are raised once the product is done.
"""

from __future__ import annotations

import os

import cupy
import numpy as np

from ..semantics import check_plan_and_shapes
from ..spec import seed as T
from ..spec.seed import K_MAX, TILE_M, TILE_N
from . import loader
from ._common import INT_MIN, KPAD, as_rows, blocks, free_device_bytes, round_up
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


# --------------------------------------------------------------------------- scaling

def row_exponents(A):
    """Row exponents ``E_i`` of A (``docs/spec.md`` §2), as the reference's.

    Parameters
    ----------
    A : cupy float64 (m, k), any strides

    Returns
    -------
    cupy int32 (m,)
        ``max_k frexp(A_ik)[1]`` over the non-zero entries of row ``i``; 0 for an
        all-zero row; 2000 for a row holding Inf/NaN (the scaling kernel's flag).
    """
    from . import scaling

    E = scaling.row_exponents(A)
    # The scaling stage marks all-zero rows with INT_MIN; the reference's E is 0 there.
    return cupy.where(E == INT_MIN, 0, E).astype(np.int32, copy=False)


def col_exponents(B):
    """Column exponents ``F_j`` of B; see :func:`row_exponents`."""
    return row_exponents(B.T)


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


def prescale(A, B):
    """Power-of-two prescale of both operands; see the reference's ``prescale``.

    Parameters
    ----------
    A : cupy float64 (m, k)
    B : cupy float64 (k, n)

    Returns
    -------
    v : cupy float64 (m, k)
        ``ldexp(A_ik, -E_i)`` (rounded to nearest even where subnormal, as np.ldexp).
    w : cupy float64 (k, n)
        ``ldexp(B_kj, -F_j)``.
    E : cupy int32 (m,)
    F : cupy int32 (n,)
    """
    E = row_exponents(A)
    F = col_exponents(B)
    v = _ldexp_rows_into(A, E, -1, cupy.empty(A.shape, dtype=np.float64))
    wt = _ldexp_rows_into(B.T, F, -1, cupy.empty((B.shape[1], B.shape[0]), dtype=np.float64))
    return v, wt.T, E, F


# ------------------------------------------------------------ hi / lo and residues

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


def split_hi_lo(v):
    """The seed's split of prescaled values into two 17-bit integer slices.

    Parameters
    ----------
    v : cupy float64 (rows, cols), ``|v| < 1``

    Returns
    -------
    hi, lo : cupy int64 (rows, cols)
        As the reference's ``split_hi_lo``, bit for bit.

    Raises
    ------
    ValueError
        If some ``|v| >= 1`` (or NaN).
    """
    v = cupy.asarray(v, dtype=np.float64)
    if v.size and not bool(cupy.all(cupy.abs(v) < 1.0)):
        raise ValueError("split_hi_lo needs prescaled values with |v| < 1")
    X = v.reshape(v.shape[0], -1) if v.ndim == 2 else v.reshape(1, -1)
    hi = cupy.empty(X.shape, dtype=np.int64)
    lo = cupy.empty(X.shape, dtype=np.int64)
    residue_planes_into(X, None, None, hi_out=hi, lo_out=lo)
    return hi.reshape(v.shape), lo.reshape(v.shape)


def recombine(hi, lo):
    """``Â = hi 2^-17 + lo 2^-34`` as float64 (exact); see the reference."""
    return (cupy.asarray(hi).astype(np.float64) / 2.0 ** T.SHIFT_HI
            + cupy.asarray(lo).astype(np.float64) / 2.0 ** T.SHIFT_LO)


def residues_01(x, nprimes=T.NPRIMES):
    """Residues of an integer slice modulo the primes, in ``[0, p)``, as int8.

    Parameters
    ----------
    x : cupy int64
    nprimes : int

    Returns
    -------
    cupy int8 (nprimes,) + x.shape
        CuPy's integer ``mod`` takes the sign of the divisor, as NumPy's. (The
        production path writes these planes from the float operand:
        :func:`residue_planes_into`.)
    """
    x = cupy.asarray(x)
    if x.dtype.kind not in "iu":
        raise TypeError(f"residues_01 needs an integer array; got {x.dtype}")
    out = cupy.empty((nprimes,) + x.shape, dtype=np.int8)
    for i in range(nprimes):
        out[i] = cupy.mod(x, T.PRIMES[i]).astype(np.int8)
    return out


# ------------------------------------------------------------------ adaptive nl

def choose_nl_chunks(amax, bmax, k, kchunk):
    """The adaptive prime count of every tile, for every chunk and pass.

    Parameters
    ----------
    amax : cupy uint32 (2, nch, ntr)
        ``max |slice|`` of A per (slice, chunk, 128-row tile).
    bmax : cupy uint32 (2, nch, ntc)
        The same for B per 64-column tile.
    k, kchunk : int
        The true k and the chunk length (the last chunk's ``kc`` is shorter).

    Returns
    -------
    nl : cupy int8 (nch, 4, ntr, ntc)
        ``nl[c, P]`` is the reference's ``choose_nl_tiles`` for pass ``P``, chunk ``c``
        (a value 8 means out of range; see :func:`_check_nlmax`).
    need : cupy int8 (nch, ntr, ntc)
        Maximum over the passes: the tiles each prime level must be computed for.
    nlmax : cupy int32 (nch,)
        Maximum over the chunk's tiles and passes.
    """
    _, nch, ntr = amax.shape
    nlmax = cupy.zeros(nch, dtype=np.int32)
    nl, need = _choose_nl(amax, bmax, k, kchunk, nlmax)
    return nl, need, nlmax


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


def _tile_max(x, tile, axis):
    """``max |x|`` per block of ``tile`` along ``axis`` (a 2-D int64 slice), uint32."""
    a = cupy.abs(cupy.asarray(x, dtype=np.int64)).max(axis=1 - axis)
    pad = round_up(a.size, tile) - a.size
    if pad:
        a = cupy.concatenate([a, cupy.zeros(pad, dtype=a.dtype)])
    return a.reshape(-1, tile).max(axis=1).astype(np.uint32)


def choose_nl_tiles(a_slice, b_slice):
    """The adaptive prime count for each 128 x 64 output tile of one chunk.

    Parameters
    ----------
    a_slice : cupy int64 (m, kc)
    b_slice : cupy int64 (kc, n)

    Returns
    -------
    cupy int8 (ceil(m/128), ceil(n/64))
        As the reference's ``choose_nl_tiles``, computed by the production kernel
        (:func:`choose_nl_chunks`) from the tile maxima.

    Raises
    ------
    ValueError
        As the reference: ``kc max|a| max|b| >= M_7 / 2`` somewhere.
    """
    a = cupy.asarray(a_slice)
    b = cupy.asarray(b_slice)
    m, kc = a.shape
    n = b.shape[1]
    nrt, nct = -(-m // TILE_M), -(-n // TILE_N)
    if kc == 0 or m == 0 or n == 0:
        return cupy.ones((nrt, nct), dtype=np.int8)
    amax = _tile_max(a, TILE_M, 0)
    bmax = _tile_max(b, TILE_N, 1)
    if float(kc) * float(amax.max()) * float(bmax.max()) >= 2.0 ** 60:
        raise ValueError("k chunk x slice magnitudes exceed the 7-prime CRT range")
    # one chunk of length kc; both slice entries the same, pass 0 (hi x hi) is the answer
    A2 = cupy.stack([amax, amax])[:, None, :]
    B2 = cupy.stack([bmax, bmax])[:, None, :]
    nl, _, nlmax = choose_nl_chunks(A2, B2, kc, kc)
    _check_nlmax(cupy.asnumpy(nlmax))
    return nl[0, 0].copy()


def expand_tiles(nl_tiles, m, n):
    """Per-element map from a per-tile array (128 x 64 tiles); see the reference."""
    t = cupy.asarray(nl_tiles)
    return cupy.repeat(cupy.repeat(t, TILE_M, axis=0)[:m], TILE_N, axis=1)[:, :n]


# ---------------------------------------------------------------- reconstruction

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


def crt_reconstruct_nl(c, nl_tiles):
    """CRT reconstruction with a per-tile prime count, folded to signed.

    Parameters
    ----------
    c : cupy or numpy int (P, m, n)
        ``c[i]`` in ``[0, p_i)``, ``P >= max nl``.
    nl_tiles : int or array of int, shape (ceil(m/128), ceil(n/64))
        Prime count per 128 x 64 tile, 1..7 (the reference takes any per-element map;
        the kernel's is per tile: compare against ``expand_tiles``).

    Returns
    -------
    cupy int64 (m, n)
        As the reference's ``crt_reconstruct_nl(c, expand_tiles(nl_tiles, m, n))``.
    """
    c = cupy.asarray(c)
    P, m, n = c.shape
    shape = (-(-m // TILE_M), -(-n // TILE_N))
    nlt = cupy.asarray(np.broadcast_to(np.asarray(cupy.asnumpy(cupy.asarray(nl_tiles))),
                                       shape)).astype(np.int8)
    x = cupy.zeros((1, m, n), dtype=np.int64)
    if m == 0 or n == 0:
        return x[0]
    nlh = cupy.asnumpy(nlt)
    if int(nlh.min()) < 1 or int(nlh.max()) > T.NPRIMES:
        raise ValueError("nl must lie in [1, 7]")
    if P < int(nlh.max()):
        raise ValueError(f"{P} residue planes given, nl needs {int(nlh.max())}")
    Rp = cupy.zeros((max(P, T.NPRIMES), m, round_up(n, LDO_PAD)), dtype=np.uint8)
    Rp[:P, :, :n] = c.astype(np.uint8)
    crt_finalize_into(Rp, m, n, nlt[None, None].copy(), 1, npass=1, X=x, xout=True)
    return x[0]


# ------------------------------------------------------------------ accumulation

def finalize_into(X, rows, cols, E, F, C, acc_out=None):
    """accumulate_passes + finalize in one pass: ``C = ldexp(sum_P RN(x_P) 2^s_P, E+F)``.

    Parameters
    ----------
    X : cupy int64 (4, rows, ldx) view, unit stride along the columns
    E : cupy int32 (rows,) or None;  F : cupy int32 (cols,) or None
    C : cupy float64 (rows, cols) view, any strides
    acc_out : cupy float64 (rows, cols), C-contiguous, or None
    """
    return crt_finalize_into(None, rows, cols, None, 0, X=X, xin=True, E=E, F=F, C=C,
                             acc_out=acc_out)


def accumulate_passes(xs):
    """The four pass integers, scaled and summed in float64 in the spec's order.

    Parameters
    ----------
    xs : sequence of 4 cupy int64 (m, n)

    Returns
    -------
    cupy float64 (m, n)
        As the reference's ``accumulate_passes``, bit for bit.
    """
    if len(xs) != _NPASS:
        raise ValueError("need one integer matrix per pass")
    X = cupy.ascontiguousarray(cupy.stack([cupy.asarray(x, dtype=np.int64) for x in xs]))
    _, m, n = X.shape
    acc = cupy.empty((m, n), dtype=np.float64)
    return finalize_into(X, m, n, None, None, acc)


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


def residual_correction(v, w, hiA, loA, hiB, loB, E, F):
    """The seed's Phase 24 correction: the truncated tails, multiplied natively.

    Same formula as the reference's ``residual_correction``:
    ``ldexp(Ta @ w + Â @ Tb, E_i + F_j)``. The two products are CuPy's float64 matmul
    (cuBLAS DGEMM), whose summation order is not the CPU BLAS's: this term is **not**
    bitwise reproducible across engines (or GPUs / cuBLAS versions).
    """
    Ah = recombine(hiA, loA)
    Bh = recombine(hiB, loB)
    Ta = v - Ah
    Tb = w - Bh
    return finalize(cupy.matmul(Ta, w) + cupy.matmul(Ah, Tb), E, F)


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


__all__ = ["TILE_M", "TILE_N", "K_MAX", "SLICES", "NPLANES", "prelude", "row_exponents",
           "col_exponents", "prescale", "residue_planes_into", "split_hi_lo", "recombine",
           "residues_01", "choose_nl_chunks", "choose_nl_tiles", "expand_tiles",
           "crt_finalize_into", "crt_reconstruct_nl", "finalize_into", "accumulate_passes",
           "finalize", "residual_correction", "choose_blocks", "matmul_2d",
           "matmul_2d_trace"]
