"""Stage 1 on the GPU — per-row exponents ``s`` of A and per-column exponents ``t`` of B.

Mirrors :mod:`ozaki_backend.reference.scaling` (``docs/spec.md`` §2–3): the same exact
integer quantities, computed by the kernels of ``kernels/scaling.cu``:

* ``fast``: row exponents (atomic max of frexp exponents), sums of squares of the
  ceiling-quantised magnitudes in u64 (atomic adds of integers: exact in any order),
  then ``s = floor(lambda(S)/2) + D - E``.
* ``accurate``: the quantised operands (``D = 6``, int8) go through one INT8 GEMM (the
  bound matrix ``P``); row maxima give ``sigma``, column minima of
  ``lambda(P) - sigma`` give ``tau``. When ``P`` does not fit in device memory it is
  computed tile by tile, twice (once for the row maxima, once for the column minima).

Operands are read row-wise: A as ``m x k`` and B through its transpose ``n x k``
(any strides; no copies).

``precision="fp64"`` (adaptive plans): :func:`choose_moduli` runs the row-exponent pass
with the exponents' sums and counts (``oz_row_exponent_stats``, the same single read of
A and B), folds them into the exponent spread and the Inf/NaN flag on the device
(``oz_spread``) and reads those 8 bytes back: the moduli count is then the plan's table
entry for that spread, exactly as on the CPU. The row exponents are handed on to the
shift computation, so nothing is read twice.
"""

from __future__ import annotations

import cupy
import numpy as np

from .. import _stats
from ..spec.rules import ACCURATE_D, fast_quant_bits
from . import loader
from ._common import INT_MAX, INT_MIN, KPAD, LDC_PAD, as_rows, blocks, h_params, lam1, round_up
from .modgemm import gemm_tn

#: Reduction length per block of the row reductions (kernels/scaling.cu OZ_KR).
_KR = 256
#: Rows per block of the column-minimum kernel (OZ_PR).
_PR = 128
#: Longest k the int32 bound GEMM takes in one call: k 64^2 <= 2^31 - 1.
BOUND_KMAX = (2 ** 31 - 1) // 64 ** 2 // KPAD * KPAD


def _reduce_grid(rows, cols, rows_fast):
    gy = max(1, -(-cols // _KR))
    if gy > 65535:
        raise ValueError(f"reduction too long for one launch (k = {cols})")
    return (max(1, -(-rows // (32 if rows_fast else 8))), gy)


def row_exponents(X, Emax=None):
    """int32 ``(rows,)``: max frexp exponent of each row's non-zero entries; INT_MIN for
    an all-zero row (the finalize kernels turn it into 0). 2000 flags Inf/NaN."""
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


def row_exponent_stats(X):
    """``(Emax, Esum, Ecnt)`` of the rows of ``X`` in one pass: the row exponents as
    :func:`row_exponents` gives them, and the int64 sum and int32 count of the frexp
    exponents of each row's non-zero entries (``docs/spec.md`` §1)."""
    rows, cols = X.shape
    Emax = cupy.full(rows, INT_MIN, dtype=np.int32)
    Esum = cupy.zeros(rows, dtype=np.int64)
    Ecnt = cupy.zeros(rows, dtype=np.int32)
    if rows and cols:
        X, rs, cs, rf = as_rows(X)
        fn = loader.get_function("scaling.cu", "oz_row_exponent_stats")
        fn(_reduce_grid(rows, cols, rf), (32, 8),
           (X, rs, cs, np.int32(rows), np.int32(cols), rf, Emax, Esum, Ecnt))
    return Emax, Esum, Ecnt


def _fold_spread(stats, out):
    """Fold one operand's row statistics into ``out = [max Emax, max spread]``."""
    Emax, Esum, Ecnt = stats
    rows = Emax.shape[0]
    if rows:
        fn = loader.get_function("scaling.cu", "oz_spread")
        fn((blocks(rows),), (256,), (Emax, Esum, Ecnt, np.int32(rows), out))


def spread_and_flag(A, B):
    """``(max_exponent, spread, EA, EB)``: the largest frexp exponent of either operand
    (above 1024: an Inf/NaN entry), the exponent spread of ``A @ B`` (``docs/spec.md``
    §1), both host ints from one 8-byte read, and the row exponents of A and of B's
    columns (int32, INT_MIN for all-zero rows) for :func:`shifts`."""
    sa = row_exponent_stats(A)
    sb = row_exponent_stats(B.T)
    out = cupy.array([INT_MIN, 0], dtype=np.int32)
    _fold_spread(sa, out)
    _fold_spread(sb, out)
    emax, spread = (int(v) for v in out.get())
    return emax, spread, sa[0], sb[0]


def exponent_spread(A, B) -> int:
    """The exponent spread of ``A @ B`` computed on the device (the same integer as
    :func:`ozaki_backend.reference.scaling.exponent_spread`)."""
    A = cupy.asarray(A, dtype=np.float64)
    B = cupy.asarray(B, dtype=np.float64)
    return spread_and_flag(A, B)[1]


def choose_moduli(A, B, plan, *, check_finite=False):
    """``(N, exps)``: the moduli count of the product ``A @ B`` with ``plan`` and the row
    exponents ``(EA, EB)`` already computed on the way (None if none were), to hand to
    :func:`shifts`; ``(None, None)`` when ``check_finite`` and an operand holds Inf/NaN.

    Fixed-count plans: ``plan.n_moduli``, with no device read unless ``check_finite``
    (then one read of the largest row exponent, as before). Adaptive plans
    (``precision="fp64"``): one pass over A and B for the exponents and their sums,
    one 8-byte read of the spread and the Inf/NaN flag, then ``plan``'s table
    (:meth:`~ozaki_backend.plan.Plan.moduli_for_spread`) — the CPU engine's rule on the
    same integer. Counts the product in ``stats()["moduli"]``.
    """
    if plan.adaptive:
        emax, spread, EA, EB = spread_and_flag(A, B)
        if check_finite and emax > 1024:
            return None, None
        N = plan.moduli_for_spread(spread)
        _stats.record_moduli(N)
        return N, (EA, EB)
    N = plan.n_moduli
    if not check_finite:
        _stats.record_moduli(N)
        return N, None
    EA, EB = row_exponents(A), row_exponents(B.T)
    # The row-exponent kernel reports Inf/NaN as an exponent of 2000 (finite: <= 1024).
    if int(cupy.maximum(EA.max(), EB.max())) > 1024:
        return None, None
    _stats.record_moduli(N)
    return N, (EA, EB)


def fast_row_shifts(X, n_moduli, k, E=None):
    """Fast-mode exponents of the rows of ``X``: ``(s, E)`` int32, E finalised (``E``:
    the row exponents when already computed, INT_MIN for all-zero rows; rewritten)."""
    rows, cols = X.shape
    D = fast_quant_bits(k)
    eh, fh = h_params(n_moduli)
    if E is None:
        E = row_exponents(X)
    S = cupy.zeros(rows, dtype=np.uint64)
    s = cupy.empty(rows, dtype=np.int32)
    if rows == 0:
        return s, E
    if cols:
        X, rs, cs, rf = as_rows(X)
        fn = loader.get_function("scaling.cu", "oz_row_sumsq")
        fn(_reduce_grid(rows, cols, rf), (32, 8),
           (X, rs, cs, np.int32(rows), np.int32(cols), rf, E, np.int32(D), S))
    fin = loader.get_function("scaling.cu", "oz_finalize_fast")
    fin((blocks(rows),), (256,), (E, S, np.int32(rows), np.int32(D), eh, fh, s))
    return s, E


def quantize_into(X, E, Q):
    """Accurate-mode ``alpha`` of the rows of ``X`` into int8 ``Q (>= rows, kpad)``."""
    rows, cols = X.shape
    kpad = Q.shape[1]
    if rows == 0 or kpad == 0:
        return
    X, rs, cs, rf = as_rows(X)
    fn = loader.get_function("scaling.cu", "oz_quantize")
    grid = (-(-kpad // 64), -(-rows // 32))
    fn(grid, (256,), (X, rs, cs, np.int32(rows), np.int32(cols), rf, np.int32(kpad), E,
                      np.int32(ACCURATE_D), Q))


def bound_tile_into(QA, QB, rows, cols, kpad, P, P32=None):
    """``P[:rows, :cols] = alpha beta^T`` for one tile (int32, or int64 via ``P32`` chunks
    when k exceeds the int32 range)."""
    ldc = P.shape[1]
    if P.dtype == np.int32:
        gemm_tn(QA.data.ptr, QB.data.ptr, P.data.ptr, rows, cols, kpad, kpad, kpad, ldc)
        return
    P[:rows].fill(0)
    acc = loader.get_function("scaling.cu", "oz_accumulate_i64")
    for k0 in range(0, kpad, BOUND_KMAX):
        kc = min(BOUND_KMAX, kpad - k0)
        gemm_tn(QA.data.ptr + k0, QB.data.ptr + k0, P32.data.ptr, rows, cols, kc,
                kpad, kpad, ldc)
        acc((blocks(rows * ldc),), (256,), (P32, P, np.int64(rows * ldc)))


class BoundMatrix:
    """The accurate mode's bound matrix ``P``, tile by tile (``(tm, tn)`` tiles).

    Holds the int8 quantised operands of the current row / column block and recomputes
    a P tile only when the tile changes (a single-tile problem computes P once).
    """

    def __init__(self, A, Bt, EA, EB, kpad, tm, tn, views=None):
        self.A, self.Bt, self.EA, self.EB = A, Bt, EA, EB
        self.kpad, self.tm, self.tn = kpad, tm, tn
        big = kpad > BOUND_KMAX
        if views is None:
            views = self.allocate(tm, tn, kpad)
        self.QA, self.QB, self.P = views["QA"], views["QB"], views["P"]
        self.P32 = views.get("P32") if big else None
        self._rows_key = self._cols_key = self._tile_key = None

    @staticmethod
    def need(ws, tm, tn, kpad):
        """Register the workspace this needs with a :class:`~._common.Workspace`."""
        ldc = round_up(tn, LDC_PAD)
        ws.need("QA", (tm, kpad), np.int8)
        ws.need("QB", (tn, kpad), np.int8)
        if kpad > BOUND_KMAX:
            ws.need("P", (tm, ldc), np.int64)
            ws.need("P32", (tm, ldc), np.int32)
        else:
            ws.need("P", (tm, ldc), np.int32)

    @staticmethod
    def allocate(tm, tn, kpad):
        ldc = round_up(tn, LDC_PAD)
        v = {"QA": cupy.empty((tm, kpad), np.int8), "QB": cupy.empty((tn, kpad), np.int8)}
        if kpad > BOUND_KMAX:
            v["P"] = cupy.empty((tm, ldc), np.int64)
            v["P32"] = cupy.empty((tm, ldc), np.int32)
        else:
            v["P"] = cupy.empty((tm, ldc), np.int32)
        return v

    def tile(self, i0, i1, j0, j1):
        """The P tile for rows ``i0:i1`` of A and columns ``j0:j1`` of B."""
        if self._tile_key != (i0, i1, j0, j1):
            if self._rows_key != (i0, i1):
                quantize_into(self.A[i0:i1], self.EA[i0:i1], self.QA)
                self._rows_key = (i0, i1)
            if self._cols_key != (j0, j1):
                quantize_into(self.Bt[j0:j1], self.EB[j0:j1], self.QB)
                self._cols_key = (j0, j1)
            bound_tile_into(self.QA, self.QB, i1 - i0, j1 - j0, self.kpad, self.P, self.P32)
            self._tile_key = (i0, i1, j0, j1)
        return self.P


def accurate_shifts(A, Bt, n_moduli, tiles, kpad, tm, tn, views=None, exps=None):
    """Accurate-mode ``(s, t, EA, EB)`` (int32) of ``A (m x k)`` and ``Bt = B.T (n x k)``.

    ``tiles`` lists the ``(i0, i1, j0, j1)`` output tiles (one tile when P fits);
    ``exps`` the row exponents ``(EA, EB)`` when already computed (rewritten).
    """
    m, n = A.shape[0], Bt.shape[0]
    D = ACCURATE_D
    eh, fh = h_params(n_moduli)
    EA, EB = exps if exps is not None else (row_exponents(A), row_exponents(Bt))
    bm = BoundMatrix(A, Bt, EA, EB, kpad, tm, tn, views)
    # Quantisation needs E with 0 for all-zero rows; INT_MIN rows are all zero, so the
    # kernel never reads their E (it skips zero entries) — no fix-up needed before.
    rmax = cupy.zeros(m, dtype=np.int64)
    big = bm.P.dtype == np.int64
    rowmax = loader.get_function("scaling.cu", "oz_p_rowmax_i64" if big else "oz_p_rowmax_i32")
    colmin = loader.get_function("scaling.cu", "oz_p_colmin_i64" if big else "oz_p_colmin_i32")
    for (i0, i1, j0, j1) in tiles:
        P = bm.tile(i0, i1, j0, j1)
        rowmax((-(-(i1 - i0) // 8),), (256,),
               (P, np.int64(P.shape[1]), np.int32(i1 - i0), np.int32(j1 - j0), rmax[i0:i1]))
    sigma = cupy.empty(m, dtype=np.int32)
    loader.get_function("scaling.cu", "oz_sigma")(
        (blocks(m),), (256,), (rmax, np.int32(m), eh, fh, sigma))
    tau = cupy.full(n, INT_MAX, dtype=np.int32)
    # Visit the tiles in reverse so that the last P tile of the first pass is reused.
    for (i0, i1, j0, j1) in reversed(tiles):
        P = bm.tile(i0, i1, j0, j1)
        grid = (-(-(j1 - j0) // 32), -(-(i1 - i0) // _PR))
        colmin(grid, (32, 8), (P, np.int64(P.shape[1]), np.int32(i1 - i0), np.int32(j1 - j0),
                               sigma[i0:i1], eh, fh, tau[j0:j1]))
    s = cupy.empty(m, dtype=np.int32)
    t = cupy.empty(n, dtype=np.int32)
    fin = loader.get_function("scaling.cu", "oz_finalize_accurate")
    l1 = lam1(n_moduli)
    empty = l1 - l1 // 2
    fin((blocks(m),), (256,), (EA, sigma, np.int32(m), np.int32(D), np.int32(empty), s))
    fin((blocks(n),), (256,), (EB, tau, np.int32(n), np.int32(D), np.int32(empty), t))
    return s, t, EA, EB


def shifts(A, B, n_moduli, mode, *, tiles=None, tm=None, tn=None, views=None, exps=None):
    """``(s, t, EA, EB)`` int32 CuPy arrays for ``A (m x k)``, ``B (k x n)``: the shifts
    and the finalised row exponents of A and of B's columns. ``exps``: the raw row
    exponents ``(EA, EB)`` when :func:`choose_moduli` already computed them (they are
    then not read again; the arrays are rewritten)."""
    m, k = A.shape
    n = B.shape[1]
    Bt = B.T
    EA0, EB0 = exps if exps is not None else (None, None)
    if mode == "fast":
        s, EA = fast_row_shifts(A, n_moduli, k, E=EA0)
        t, EB = fast_row_shifts(Bt, n_moduli, k, E=EB0)
    else:
        kpad = round_up(max(k, 1), KPAD)
        if tiles is None:
            tm, tn = max(m, 1), max(n, 1)
            tiles = [(0, m, 0, n)]
        s, t, EA, EB = accurate_shifts(A, Bt, n_moduli, tiles, kpad, tm, tn, views, exps)
    return s, t, EA, EB


def exponents(A, B, plan):
    """Row exponents ``s`` (m,) of A and column exponents ``t`` (n,) of B for ``plan``,
    as int64 CuPy arrays (mirrors the reference's ``exponents``; an adaptive plan
    first picks its moduli count from the operands, :func:`choose_moduli`)."""
    A = cupy.asarray(A, dtype=np.float64)
    B = cupy.asarray(B, dtype=np.float64)
    N, exps = choose_moduli(A, B, plan)
    s, t, _, _ = shifts(A, B, N, plan.mode, exps=exps)
    return s.astype(np.int64), t.astype(np.int64)


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
