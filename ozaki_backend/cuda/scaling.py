"""Stages 0–1 on the GPU — equilibration, statistics and the row / column exponents.

Mirrors :mod:`ozaki_backend.reference.equilibrate` and
:mod:`ozaki_backend.reference.scaling` (``docs/spec.md`` §2–3): the same exact integer
quantities, computed by the kernels of ``kernels/scaling.cu``. Operands are read
row-wise: A as ``m x k`` and B through its transpose ``n x k`` (any strides, no copies);
the equilibration exponents ``S`` are applied on the fly by every kernel that reads an
operand (``x 2^-S_k`` for A, ``x 2^S_k`` for B).

* :func:`equilibration` — the exponent range of every column of A and row of B, and
  ``S`` (``oz_col_exponents``, ``oz_equilibrate``);
* :func:`statistics` — row exponents, exactness thresholds and non-zero counts
  (``oz_row_stats``), fast mode's sums of squares (``oz_row_sumsq``);
* :class:`BoundMatrix` — the bound GEMM ``P = alpha beta^T`` of the floor-quantised
  operands (``oz_quantize_down`` + a cuBLAS INT8 GEMM), tile by tile when it does not
  fit, with the row sums ``SA``, ``SB``;
* :func:`kept_bits` — the bits kept of each row's / column's largest element for every
  moduli count 2..20, or for a window of five
  (:func:`~ozaki_backend.spec.certificate.count_window`) (accurate:
  ``oz_u_rowmax``, ``oz_sigma_all``, ``oz_u_colmin`` / ``oz_u_colmin_w``; fast: from
  the sums of squares), from which the certificate chooses the count and
  :func:`shifts_for` gives the exponents ``s``, ``t``.
"""

from __future__ import annotations

from dataclasses import dataclass

import cupy
import numpy as np

from ..spec.rules import BOUND_KMAX, fast_quant_bits
from ..spec.tiling import mirrored_blocks, symmetric_tiles
from . import loader
from ._common import (INT_MAX, INT_MIN, KPAD, LDC_PAD, REAL_TABLE, CountTable, as_rows,
                      blocks, from_row, h_params, lam1, not_capturing, round_up, span)
from .modgemm import GEMM_PAD, gemm_tn

#: Reduction length per block of the row reductions (kernels/scaling.cu OZ_KR).
_KR = 256
#: Rows per block of the column-minimum kernel (OZ_PR).
_PR = 512
#: Tile of the column-exponent and quantisation kernels (OZ_TR x OZ_TK), and the row
#: tiles per block of the column-exponent kernel (OZ_CE_TILES).
_TR, _TK = 32, 64
_CE_TILES = 8
#: Moduli counts of the real table's per-count tables (OZ_NLO .. OZ_NLO + OZ_NN - 1).
COUNTS = REAL_TABLE.counts
#: Longest k the int32 bound GEMM takes in one call, a multiple of KPAD.
BOUND_CHUNK = BOUND_KMAX // KPAD * KPAD


def _reduce_grid(rows, cols, rows_fast):
    gy = max(1, -(-cols // _KR))
    if gy > 65535:
        raise ValueError(f"reduction too long for one launch (k = {cols})")
    return (max(1, -(-rows // (32 if rows_fast else 8))), gy)


_tables = {}


def count_tables(table: CountTable = REAL_TABLE):
    """Device arrays ``(eh, fh, empty)`` for the counts of ``table``: frexp exponent and
    52-bit fraction field of each ``H_f``, and ``lambda(1) - floor(lambda(1) / 2)``."""
    key = (cupy.cuda.Device().id, table.name)
    t = _tables.get(key)
    if t is None:
        not_capturing("the count table")
        eh, fh, empty = [], [], []
        for N in table.counts:
            e, f = h_params(N, table)
            eh.append(int(e))
            fh.append(int(f))
            l1 = lam1(N, table)
            empty.append(l1 - l1 // 2)
        t = (cupy.asarray(np.array(eh, dtype=np.int32)),
             cupy.asarray(np.array(fh, dtype=np.uint64)),
             cupy.asarray(np.array(empty, dtype=np.int32)))
        _tables[key] = t
    return t


def variant(name: str, P) -> str:
    """The name of the ``_i32`` or ``_i64`` variant of a kernel reading P tiles of
    ``P``'s dtype (int64 where k exceeds the int32 bound GEMM)."""
    return f"{name}_{'i64' if P.dtype == np.int64 else 'i32'}"


def kernel(name: str, table: CountTable = REAL_TABLE):
    """A kernel of ``kernels/scaling.cu`` compiled for ``table``'s counts."""
    return loader.get_function("scaling.cu", name, defines=table.defines)


# --------------------------------------------------------------------------- stage 0

def init_ints(buf, *values):
    """Set row ``r`` of the int32 buffer ``buf`` (``len(values) x len``) to ``values[r]``
    in one launch."""
    nvals = len(values)
    length = buf.size // nvals
    if buf.size:
        v = list(values) + [0] * (8 - nvals)
        loader.get_function("scaling.cu", "oz_init_ints")(
            (blocks(buf.size),), (256,),
            (buf, np.int64(length), np.int32(nvals), *(np.int32(x) for x in v)))


def column_exponents(X, cmax, cmin):
    """Largest / smallest frexp exponent of the non-zero entries of each column of the
    ``rows x cols`` view ``X`` into int32 ``cmax`` / ``cmin`` (2000 flags Inf/NaN).
    Expects ``cmax`` at INT_MIN and ``cmin`` at INT_MAX."""
    rows, cols = X.shape
    if rows and cols:
        X, rs, cs, rf = as_rows(X)
        fn = loader.get_function("scaling.cu", "oz_col_exponents")
        grid = (max(1, -(-cols // _TK)), max(1, -(-rows // (_TR * _CE_TILES))))
        if grid[1] > 65535:
            raise ValueError(f"operand too tall for one launch ({rows} rows)")
        fn(grid, (256,), (X, rs, cs, np.int32(rows), np.int32(cols), rf, cmax, cmin))


def row_blocks(X, block=None):
    """``X`` itself, or its row blocks of ``block`` rows (an operand read block by block:
    the column reductions accumulate, the row statistics concatenate)."""
    rows = X.shape[0]
    if block is None:
        return [X]
    return [X[i0:min(rows, i0 + block)] for i0 in range(0, rows, block)]


def equilibration(A, Bt, block=None):
    """``(S, amax, bmax)``: the equilibration exponents (int32, length k) of
    ``A (m x k)`` and ``B = Bt.T`` (spec §2.1), and the per-k exponent maxima (above
    1024: an Inf/NaN entry). ``block``: read the operands in row blocks of that many
    rows (same result). ``A`` and ``Bt`` may each be a tuple of views with the same
    columns: the rule then sees their rows stacked (the complex scheme's ``[Ar; Ai]``
    and ``[Br, Bi]``, read in place)."""
    As = A if isinstance(A, tuple) else (A,)
    Bs = Bt if isinstance(Bt, tuple) else (Bt,)
    k = As[0].shape[1]
    ex = cupy.empty((4, k), dtype=np.int32)      # a_max, a_min, b_max, b_min
    S = cupy.empty(k, dtype=np.int32)
    if k:
        init_ints(ex, INT_MIN, INT_MAX, INT_MIN, INT_MAX)
        for X in (Xb for X in As for Xb in row_blocks(X, block)):
            column_exponents(X, ex[0], ex[1])
        for X in (Xb for X in Bs for Xb in row_blocks(X, block)):
            column_exponents(X, ex[2], ex[3])
        loader.get_function("scaling.cu", "oz_equilibrate")(
            (1,), (1024,), (ex[0], ex[1], ex[2], ex[3], np.int32(k), S))
    return S, ex[0], ex[2]


def equilibrate(A, B):
    """``(A 2^-S, 2^S B, S)`` as new device arrays (the residual pass and the tests; the
    product itself applies ``S`` on the fly)."""
    S, _, _ = equilibration(A, B.T)
    S64 = S.astype(np.int64)
    return cupy.ldexp(A, -S64[None, :].astype(np.int32)), \
        cupy.ldexp(B, S64[:, None].astype(np.int32)), S


# --------------------------------------------------------------------------- stage 1

def row_exponents(X, Emax=None):
    """int32 ``(rows,)``: max frexp exponent of each row's non-zero entries; INT_MIN for
    an all-zero row. 2000 flags Inf/NaN. (The seed scheme's prescale.)"""
    rows, cols = X.shape
    if Emax is None:
        Emax = cupy.full(rows, INT_MIN, dtype=np.int32)
    else:
        Emax.fill(INT_MIN)
    if rows and cols:
        X, rs, cs, rf = as_rows(X)
        fn = loader.get_function("scaling.cu", "oz_row_exponents")
        fn(_reduce_grid(rows, cols, rf), (32, 8),
           (X, rs, cs, np.int32(rows), np.int32(cols), rf, Emax))
    return Emax


@dataclass
class Side:
    """The statistics of one operand read row-wise (A's rows, or B's columns), as the
    reference's :class:`~ozaki_backend.reference.scaling.Statistics` holds them.

    ``E`` (0 for all-zero rows), ``X`` (exact thresholds, INT_MIN for all-zero rows),
    ``n`` (non-zero counts), ``SA`` (row sums of ``alpha``, filled by the bound GEMM's
    quantisation), ``Z`` (the non-zero entries below the bound GEMM's window, filled by
    the same pass; None for the complex embedding, which has no gathers), ``S2`` (uint64
    row sums of ``alpha^2``, the same pass: the certificate's 2-norm bound; None for the
    complex embedding, whose bound uses the row sums alone), ``Sq`` (fast
    mode: sums of squares), ``kept`` (``19 x rows``: bits kept per count), ``ks`` (-1
    for A, +1 for B). ``X_op`` is the operand, or a tuple of views whose rows side by
    side are the rows (the complex embedding's)."""

    X_op: object
    ks: int
    E: object
    X: object
    n: object
    SA: object
    Sq: object = None
    kept: object = None
    lo: object = None
    hi: object = None
    Z: object = None
    S2: object = None

    @property
    def width(self) -> int:
        """The length of the rows (``k``)."""
        X = self.X_op
        return sum(v.shape[1] for v in X) if isinstance(X, tuple) else X.shape[1]


def side_statistics(X, S, ks, mode, gmax=None, block=None) -> Side:
    """Row exponents, exact thresholds and non-zero counts of the equilibrated rows of
    ``X`` (``x 2^(ks S_k)``), and fast mode's sums of squares; ``gmax[0]`` (when given)
    is raised above 1024 when a row holds Inf/NaN. ``block``: read ``X`` in row blocks
    of that many rows (an operand that is not on the device; same result)."""
    parts = row_blocks(X, block) if X.shape[0] else [X]
    if block is not None and parts[0] is not X:
        if gmax is None:
            gmax = cupy.full(1, INT_MIN, dtype=np.int32)
        sides = []
        for P in parts:
            sd = side_statistics(P, S, ks, mode, gmax)
            sd.X_op = None          # drop the block (an upload of a host operand)
            sides.append(sd)
        if len(sides) == 1:
            side = sides[0]
            side.X_op = X
            return side
        cat = {f: cupy.concatenate([getattr(sd, f) for sd in sides])
               for f in ("E", "X", "n", "SA", "lo", "hi", "Z", "S2")}
        side = Side(X, ks, cat["E"], cat["X"], cat["n"], cat["SA"], lo=cat["lo"],
                    hi=cat["hi"], Z=cat["Z"], S2=cat["S2"])
        if mode == "fast":
            side.Sq = cupy.concatenate([sd.Sq for sd in sides])
        return side
    rows, cols = X.shape
    st = statistics_buffer(rows, cols)
    if gmax is None:
        gmax = cupy.full(1, INT_MIN, dtype=np.int32)
    row_stats_into(X, S, ks, st, gmax)
    finish_exponents(st)
    side = Side(X, ks, *st[:4], lo=st[4], hi=st[5], Z=cupy.zeros(rows, dtype=np.int32),
                S2=cupy.zeros(rows, dtype=np.uint64))
    if mode == "fast":
        side.Sq = cupy.zeros(rows, dtype=np.uint64)
        row_sumsq_into(X, S, ks, side.E, cols, side.Sq)
    return side


def statistics_buffer(rows, cols):
    """int32 ``(6, rows)``: ``E, X, n, SA, lo, hi`` of rows ``cols`` long, initialised as
    :func:`row_stats_into` expects (an all-zero row keeps ``lo = cols``, ``hi = -1``)."""
    st = cupy.empty((6, rows), dtype=np.int32)
    init_ints(st, INT_MIN, INT_MIN, 0, 0, cols, -1)
    return st


def row_stats_into(X, S, ks, st, gmax, koff=0, mirror=None, koff2=0, nonzero=None):
    """Accumulate the row statistics of the view ``X`` (``x 2^(ks S_k)``) into ``st``
    (:func:`statistics_buffer`), its columns at ``koff`` of the rows' ``k`` (rows made of
    several views side by side take one call per view). ``mirror``: a second ``(lo, hi)``
    pair that records the same columns at ``koff2``; ``nonzero`` (int32 device array of
    1): set when ``X`` has a non-zero entry. ``gmax[0]`` is raised above 1024 when a row
    holds Inf/NaN."""
    rows, cols = X.shape
    if not (rows and cols):
        return
    Xr, rs, cs, rf = as_rows(X)
    args = (Xr, rs, cs, np.int32(rows), np.int32(cols), rf, S, np.int32(ks), *st[:3],
            st[4], st[5], gmax)
    if koff == 0 and mirror is None and nonzero is None:
        loader.get_function("scaling.cu", "oz_row_stats")(
            _reduce_grid(rows, cols, rf), (32, 8), args)
        return
    lo2, hi2 = mirror if mirror is not None else (None, None)
    loader.get_function("scaling.cu", "oz_row_stats_part")(
        _reduce_grid(rows, cols, rf), (32, 8),
        args + (np.int32(koff), lo2, hi2, np.int32(koff2), nonzero))


def finish_exponents(st):
    """``E = 0`` for the all-zero rows of a finished :func:`statistics_buffer`."""
    rows = st.shape[1]
    if rows:
        loader.get_function("scaling.cu", "oz_zero_rows")((blocks(rows),), (256,),
                                                          (st[0], np.int32(rows)))


def row_sumsq_into(X, S, ks, E, k, Sq):
    """Fast mode: ``Sq += `` the sums of squares of ``ceil(|x| 2^(D - E))`` over the rows
    of the view ``X``, ``D = fast_quant_bits(k)`` for rows ``k`` long (``X`` may be one
    of several views side by side)."""
    rows, cols = X.shape
    if rows and cols:
        Xr, rs, cs, rf = as_rows(X)
        loader.get_function("scaling.cu", "oz_row_sumsq")(
            _reduce_grid(rows, cols, rf), (32, 8),
            (Xr, rs, cs, np.int32(rows), np.int32(cols), rf, S, np.int32(ks), E,
             np.int32(fast_quant_bits(k)), Sq))


def row_stride(P):
    """The row stride of a P tile (a view) in elements: the kernels' ``ldp``."""
    return np.int64(P.strides[0] // P.itemsize)


# --------------------------------------------------------------------------- bound GEMM

def quantize_down_into(side: Side, S, rows_slice, Q, sums: bool):
    """``alpha = floor(|x| 2^(7 - E))`` of the rows ``rows_slice`` into int8 ``Q``
    (``>= rows x kpad``), adding the row sums into ``side.SA``, the entries below the
    window into ``side.Z`` and the sums of ``alpha^2`` into ``side.S2`` when ``sums``."""
    i0, i1 = rows_slice
    X = side.X_op[i0:i1]           # a HostRows block (out of core) uploads here
    rows, cols = X.shape
    kpad = Q.shape[1]
    if rows == 0 or kpad == 0:
        return
    X, rs, cs, rf = as_rows(X)
    SA = span(side.SA, i0, i1) if sums else cupy.empty(rows, dtype=np.int32)
    Z = span(side.Z, i0, i1) if sums and side.Z is not None else None
    S2 = span(side.S2, i0, i1) if sums and side.S2 is not None else None
    kt, rt = -(-kpad // _TK), -(-rows // _TR)
    tiles = quantize_tiles(kt, rt)
    loader.get_function("scaling.cu", "oz_quantize_down")(
        (-(-kt // tiles), rt), (256,),
        (X, rs, cs, np.int32(rows), np.int32(cols), rf, S, np.int32(side.ks),
         np.int32(kpad), span(side.E, i0, i1), Q, SA, Z, S2, np.int32(tiles)))


#: oz_quantize_down keeps at least this many blocks (about four waves of resident
#: blocks on the H200's 132 SMs) before a block walks several tiles along k.
_QUANTIZE_BLOCKS = 4096


def quantize_tiles(kt, rt):
    """Tiles along k per block of ``oz_quantize_down`` for a grid of ``kt x rt`` tiles:
    up to 16, so that a block adds its rows' sums once for all of them (one atomic per
    row and tile was the pass's limit at long k), while the grid stays large."""
    return max(1, min(16, (kt * rt) // _QUANTIZE_BLOCKS))


def bound_tile_into(QA, QB, rows, cols, kpad, P, P32=None):
    """``P[:rows, :cols] = alpha beta^T`` for one tile (int32, or int64 via ``P32`` chunks
    when k exceeds the int32 range)."""
    ldc = P.shape[1]
    # As for the residue products (modgemm.products_into): cuBLAS's INT8 kernels are
    # slow off their tile (the 8191^3 bound GEMM took 3.2 ms against 0.73 at 8192), so
    # where the buffers have room (BoundMatrix pads them) the GEMM runs on sizes rounded
    # up to GEMM_PAD. The padded rows of QA / QB hold whatever the buffers held; they
    # reach only P's padded rows and columns, which no kernel reads.
    grows = min(round_up(rows, GEMM_PAD), QA.shape[0], P.shape[0])
    gcols = min(round_up(cols, GEMM_PAD), QB.shape[0], ldc)
    if P.dtype == np.int32:
        gemm_tn(QA.data.ptr, QB.data.ptr, P.data.ptr, grows, gcols, kpad, kpad, kpad, ldc)
        return
    P[:grows].fill(0)
    acc = loader.get_function("scaling.cu", "oz_accumulate_i64")
    for k0 in range(0, kpad, BOUND_CHUNK):
        kc = min(BOUND_CHUNK, kpad - k0)
        gemm_tn(QA.data.ptr + k0, QB.data.ptr + k0, P32.data.ptr, grows, gcols, kc,
                kpad, kpad, ldc)
        acc((blocks(grows * ldc),), (256,), (P32, P, np.int64(grows * ldc)))


def symmetric_bound_into(QA, rows, kpad, P):
    """``P[:rows, :rows] = alpha alpha^T`` (int32) from the upper block triangle's tiles
    (:func:`~ozaki_backend.spec.tiling.symmetric_tiles`), the rest mirrored."""
    ldc = P.shape[1]
    tiles = symmetric_tiles(rows, min_rows=256)
    for i0, i1, j0, j1 in tiles:
        gemm_tn(QA.data.ptr + i0 * kpad, QA.data.ptr + j0 * kpad,
                P.data.ptr + 4 * (i0 * ldc + j0), i1 - i0, j1 - j0, kpad, kpad, kpad, ldc)
    for i0, i1, j0, j1 in mirrored_blocks(tiles):
        P[j0:j1, i0:i1] = P[i0:i1, j0:j1].T


class BoundMatrix:
    """The bound GEMM ``P = alpha beta^T`` (spec §2.3), tile by tile (``(tm, tn)`` tiles).

    Holds the int8 quantised operands of the current row / column block and recomputes
    a P tile only when the tile changes (a single-tile problem computes P once). The row
    sums ``SA``/``SB`` are accumulated the first time a block is quantised.
    """

    def __init__(self, a: Side, b: Side, S, kpad, tm, tn, views=None):
        self.a, self.b, self.S = a, b, S
        self.kpad, self.tm, self.tn = kpad, tm, tn
        big = kpad > BOUND_CHUNK
        if views is None:
            views = self.allocate(tm, tn, kpad)
        self.QA, self.QB, self.P = views["QA"], views["QB"], views["P"]
        self.P32 = views.get("P32") if big else None
        self._rows_key = self._cols_key = self._tile_key = None
        self._summed = set()
        #: A symmetric product in one tile (B = A.T): P = alpha alpha^T is computed on
        #: the upper block triangle and mirrored (exact integers: the same P).
        self.symmetric = False

    @staticmethod
    def shapes(tm, tn, kpad):
        """``{name: (shape, dtype)}`` of the buffers for ``(tm, tn)`` tiles: rows padded
        to GEMM_PAD, so that the bound GEMM runs on aligned sizes (:func:`bound_tile_into`)."""
        pm, pn = round_up(tm, GEMM_PAD), round_up(tn, GEMM_PAD)
        ldc = round_up(pn, LDC_PAD)
        v = {"QA": ((pm, kpad), np.int8), "QB": ((pn, kpad), np.int8)}
        if kpad > BOUND_CHUNK:
            v["P"] = ((pm, ldc), np.int64)
            v["P32"] = ((pm, ldc), np.int32)
        else:
            v["P"] = ((pm, ldc), np.int32)
        return v

    @staticmethod
    def need(ws, tm, tn, kpad):
        """Register the workspace this needs with a :class:`~._common.Workspace`."""
        for name, (shape, dtype) in BoundMatrix.shapes(tm, tn, kpad).items():
            ws.need(name, shape, dtype)

    @staticmethod
    def allocate(tm, tn, kpad):
        return {name: cupy.empty(shape, dtype)
                for name, (shape, dtype) in BoundMatrix.shapes(tm, tn, kpad).items()}

    def _quantize(self, side, key, Q):
        first = ("a" if side is self.a else "b", key) not in self._summed
        quantize_down_into(side, self.S, key, Q, sums=first)
        self._summed.add(("a" if side is self.a else "b", key))

    def tile(self, i0, i1, j0, j1):
        """The P tile for rows ``i0:i1`` of A and columns ``j0:j1`` of B."""
        if self._tile_key != (i0, i1, j0, j1):
            if self._rows_key != (i0, i1):
                self._quantize(self.a, (i0, i1), self.QA)
                self._rows_key = (i0, i1)
            if self._cols_key != (j0, j1):
                self._quantize(self.b, (j0, j1), self.QB)
                self._cols_key = (j0, j1)
            if self.symmetric and (i0, j0) == (0, 0) and i1 == j1 and self.P.dtype == np.int32:
                symmetric_bound_into(self.QA, i1, self.kpad, self.P)
            else:
                bound_tile_into(self.QA, self.QB, i1 - i0, j1 - j0, self.kpad, self.P,
                                self.P32)
            self._tile_key = (i0, i1, j0, j1)
        return self.P

    def kernel(self, name, table: CountTable = REAL_TABLE):
        """The ``_i32`` or ``_i64`` variant of a kernel reading P tiles."""
        return kernel(variant(name, self.P), table)


def _window_counts(counts):
    """The device array of a window's counts, made once per device: a copy from host
    memory on every product would stall the host until the stream reaches it."""
    key = (cupy.cuda.Device().id, counts)
    t = _tables.get(key)
    if t is None:
        not_capturing("a window's counts")
        t = _tables[key] = cupy.asarray(np.array(counts, dtype=np.int32))
    return t


def kept_bits(a: Side, b: Side, bm: BoundMatrix, tiles, mode,
              table: CountTable = REAL_TABLE, window=None, tied=False):
    """Fill ``a.kept`` (NN x m) and ``b.kept`` (NN x n): the bits kept of each row's and
    column's largest element for every count of ``table`` (spec §2; NN counts, 19 for
    the real table's 2..20), or (accurate mode) only for the counts of ``window``
    (:func:`~ozaki_backend.spec.certificate.count_window`; the other counts' rows are
    not meaningful). Both modes
    quantise the bound GEMM's operands here (the certificate needs ``P``, ``SA``, ``SB``
    anyway). ``tied``: B's columns ``j`` and ``n/2 + j`` are the two parts of one
    complex column, whose shifts are tied to the smaller kept bits."""
    _kept_bits(a, b, bm, tiles, mode, table, window)
    if tied:
        h = b.kept.shape[1] // 2
        tc = cupy.minimum(b.kept[:, :h], b.kept[:, h:])
        b.kept[:, :h] = tc
        b.kept[:, h:] = tc


def _kept_bits(a, b, bm, tiles, mode, table, window):
    m, n = a.E.shape[0], b.E.shape[0]
    eh, fh, empty = count_tables(table)
    NN = len(table.counts)
    a.kept = cupy.empty((NN, m), dtype=np.int32)
    b.kept = cupy.empty((NN, n), dtype=np.int32)
    if mode == "fast":
        D = np.int32(fast_quant_bits(a.width))
        fn = kernel("oz_kept_fast", table)
        for side, rows in ((a, m), (b, n)):
            if rows:
                fn((blocks(rows),), (256,), (side.Sq, np.int32(rows), D, eh, fh, side.kept))
        for (i0, i1, j0, j1) in tiles:      # the certificate's sums
            bm.tile(i0, i1, j0, j1)
        return
    rmax = cupy.zeros(m, dtype=np.int64)
    rowmax = bm.kernel("oz_u_rowmax")
    for (i0, i1, j0, j1) in tiles:
        P = bm.tile(i0, i1, j0, j1)
        rowmax((-(-(i1 - i0) // 8),), (256,),
               (P, row_stride(P), np.int32(i1 - i0), np.int32(j1 - j0),
                span(a.SA, i0, i1), span(a.n, i0, i1), span(b.SA, j0, j1), span(b.n, j0, j1),
                span(rmax, i0, i1)))
    sigma = cupy.empty((NN, m), dtype=np.int32)
    if m:
        kernel("oz_sigma_all", table)(
            (blocks(m),), (256,), (rmax, np.int32(m), eh, fh, sigma))
    tau = cupy.full((NN, n), INT_MAX, dtype=np.int32)
    if window is None:
        colmin, cidx = bm.kernel("oz_u_colmin", table), None
    else:
        colmin, cidx = bm.kernel("oz_u_colmin_w", table), _window_counts(window[2])
    # Visit the tiles in reverse so that the last P tile of the first pass is reused.
    for (i0, i1, j0, j1) in reversed(tiles):
        P = bm.tile(i0, i1, j0, j1)
        grid = (-(-(j1 - j0) // 32), -(-(i1 - i0) // _PR))
        colmin(grid, (32, 8),
               (P, row_stride(P), np.int32(i1 - i0), np.int32(j1 - j0),
                span(a.SA, i0, i1), span(a.n, i0, i1), span(b.SA, j0, j1), span(b.n, j0, j1),
                from_row(sigma, i0), np.int32(m), eh, fh, from_row(tau, j0), np.int32(n), cidx))
    fin = kernel("oz_kept_accurate", table)
    if m:
        fin((blocks(m),), (256,), (sigma, np.int32(m), empty, a.kept))
    if n:
        fin((blocks(n),), (256,), (tau, np.int32(n), empty, b.kept))


def shifts_for(side: Side, n_moduli: int):
    """int32 exponents of one operand for ``n_moduli``: ``kept - E`` (0 for all-zero rows)."""
    rows = side.E.shape[0]
    s = cupy.empty(rows, dtype=np.int32)
    if rows:
        loader.get_function("scaling.cu", "oz_shifts_for")(
            (blocks(rows),), (256,), (side.kept, np.int32(rows),
                                      np.int32(n_moduli - COUNTS[0]), side.E, side.n, s))
    return s


def exponents(A, B, plan, tile=None):
    """Row exponents ``s`` (m,) of A and column exponents ``t`` (n,) of B for ``plan``'s
    moduli count and mode, as int64 CuPy arrays: the scaling stage on its own, for
    operands as given (mirrors the reference's ``exponents``). ``tile=(tm, tn)``
    computes the bound GEMM tile by tile, as when it does not fit."""
    A = cupy.asarray(A, dtype=np.float64)
    B = cupy.asarray(B, dtype=np.float64)
    m, k = A.shape
    n = B.shape[1]
    a = side_statistics(A, None, 0, plan.mode)
    b = side_statistics(B.T, None, 0, plan.mode)
    kpad = round_up(max(k, 1), KPAD)
    tm, tn = tile or (max(m, 1), max(n, 1))
    bm = BoundMatrix(a, b, None, kpad, tm, tn)
    tiles = [(i0, min(m, i0 + tm), j0, min(n, j0 + tn))
             for i0 in range(0, m, tm) for j0 in range(0, n, tn)]
    kept_bits(a, b, bm, tiles, plan.mode)
    return (shifts_for(a, plan.n_moduli).astype(np.int64),
            shifts_for(b, plan.n_moduli).astype(np.int64))


def truncate(A, s):
    """``trunc(A_ik 2^{s_i})`` row-wise as float64 (mirrors the reference; for B use
    ``truncate(B.T, t).T``)."""
    A = cupy.asarray(A, dtype=np.float64)
    rows, cols = A.shape
    out = cupy.empty((rows, cols), dtype=np.float64)
    if rows and cols:
        X, rs, cs, _ = as_rows(A)
        s32 = cupy.asarray(s).astype(np.int32)
        fn = loader.get_function("scaling.cu", "oz_truncate")
        fn((blocks(rows * cols),), (256,),
           (X, rs, cs, np.int32(rows), np.int32(cols), s32, out))
    return out
