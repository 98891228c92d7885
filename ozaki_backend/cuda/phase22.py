"""The seed scheme ``scheme="phase22"`` on the GPU, stage by stage (``docs/spec.md`` §9).

Mirrors :mod:`ozaki_backend.reference.phase22` (same stage names, same bits), so that
the tests can compare the engines stage by stage. Production runs
:mod:`.phase22_driver`, which fuses the stages into few launches; its entry points
:func:`matmul_2d` and :func:`matmul_2d_trace` (every intermediate, keyed as the
reference's trace) are re-exported here, and so are the launches that serve as stages
unchanged (:func:`residue_planes_into`, :func:`crt_finalize_into`, :func:`finalize`).
The kernels are those of ``kernels/phase22.cu``:

1. :func:`prescale` -- ``E_i``, ``F_j`` from the CUDA scaling stage's row-exponent kernel
   (the same quantity as the reference's ``row_exponents``);
2. :func:`split_hi_lo` + :func:`residues_01` -- fused in production as
   :func:`residue_planes_into`: one read of the float64 operand writes the 14 int8
   planes (``slice * 7 + prime``, rows x kpad, k contiguous, padding zeroed) that the
   modular products take, and the per-tile maxima of ``|hi|``, ``|lo|`` per k chunk;
3. the INT8 GEMMs -- :func:`ozaki_backend.cuda.modprod.mod_products`, one call per k
   chunk with every pass and prime as an item;
4. :func:`choose_nl_tiles` -- the adaptive prime count of every 128 x 64 tile;
   :func:`choose_nl_chunks` runs the production kernel, every pass and chunk at once;
5. :func:`crt_reconstruct_nl` -- per chunk, ``(sum c_i f_i) mod M_nl`` (Barrett, exact
   for every 64-bit sum) folded at ``M_nl / 2``, summed over the chunks in int64;
6. :func:`accumulate_passes` / :func:`finalize` -- float64 in the reference's order
   (``__dadd_rn``/``__dmul_rn``: no contraction) and an ``ldexp`` done on the bits
   (one rounding for subnormal results, overflow to inf). In production 5 and 6 are one
   kernel, :func:`crt_finalize_into`: it reads the residue planes of a *group* of up to
   ``GROUP_MAX`` chunks (28 planes each), sums the chunks' CRT values in registers
   and writes C; only when there are more chunks than one group holds do int64 pass
   sums go through memory between groups (the last group still ends in the finalize);
7. :func:`residual_correction` -- the Phase 24 tail through CuPy's float64 matmul: like
   the reference's BLAS product it is *not* bitwise reproducible across engines.
"""

from __future__ import annotations

import cupy
import numpy as np

from ..spec import seed as T
from ..spec.seed import K_MAX, TILE_M, TILE_N
from ._common import INT_MIN, round_up
from .phase22_driver import (LDO_PAD, NPLANES, SLICES, _NPASS, _check_nlmax, _choose_nl,
                             _ldexp_rows_into, crt_finalize_into, finalize, matmul_2d,
                             matmul_2d_trace, prelude, residue_planes_into)


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


__all__ = ["TILE_M", "TILE_N", "K_MAX", "SLICES", "NPLANES", "prelude", "row_exponents",
           "col_exponents", "prescale", "residue_planes_into", "split_hi_lo", "recombine",
           "residues_01", "choose_nl_chunks", "choose_nl_tiles", "expand_tiles",
           "crt_finalize_into", "crt_reconstruct_nl", "finalize_into", "accumulate_passes",
           "finalize", "residual_correction", "matmul_2d", "matmul_2d_trace"]
