"""Stage 5 on the GPU — the certificate: the moduli count and the a-posteriori test.

Mirrors :mod:`ozaki_backend.reference.certificate`. The hot path is two kernels of
``kernels/scaling.cu`` over the bound GEMM's tiles: ``oz_cert_counts`` (each element's
fewest a-priori certified count; their maximum and the number of elements no count
certifies) and ``oz_certify`` (the bound of the computed product and the a-posteriori
test). The rare paths (the residual pass, the native fallback's bound) evaluate the
formulas of :mod:`ozaki_backend.spec.certificate` on CuPy arrays — the same
expressions the CPU engine evaluates on NumPy arrays.
"""

from __future__ import annotations

import cupy
import numpy as np

from ..spec import certificate as spec
from ..spec.rules import certificate_divisor
from ._common import REAL_TABLE, CountTable, blocks, from_row, span
from .scaling import BoundMatrix, Side, kernel, row_stride


#: Rows per block of the count kernel (kernels/scaling.cu OZ_CR).
_CR = 256


def _inv_div(elements):
    """``1/d`` of the certificate's factor for a product of ``elements`` outputs (the
    kernels compute ``c_ij`` per element from the overlap lengths, spec §10.2)."""
    return np.float64(1.0 / certificate_divisor(elements))


def _factors(side: Side, table: CountTable):
    """``(f, q)``: the per-count factor table (NN x rows) and ``SA + n`` of one operand."""
    rows = side.E.shape[0]
    f = cupy.empty((len(table.counts), rows), dtype=np.float64)
    q = cupy.empty(rows, dtype=np.float64)
    if rows:
        kernel("oz_cert_factors", table)(
            (blocks(rows),), (256,), (side.kept, np.int32(rows), side.E, side.X, side.n,
                                      side.SA, f, q))
    return f, q


def start_index(k, elements, table: CountTable = REAL_TABLE):
    """Where the count search starts (an index into ``table.counts``): the count ordinary
    data of this shape certifies with (``table.expected``)."""
    key = (k, elements, table.name)
    got = _starts.get(key)
    if got is None:
        lo, hi = table.counts[0], table.most
        got = min(max(table.expected(k, elements), lo), hi) - lo
        if len(_starts) >= 1024:
            _starts.clear()
        _starts[key] = got
    return got


_starts = {}        # start_index per (k, elements, table): every product asks twice


def counts_into(a: Side, b: Side, bm: BoundMatrix, tiles, k, status, fixed=None,
                table: CountTable = REAL_TABLE, window=None):
    """Queue the a-priori count over ``table``'s counts: ``status[1]`` receives the
    largest per-element count and ``status[2]`` the number of elements no count
    certifies (zero on entry); with ``fixed`` (a count), only that count is tested and
    ``status[2]`` receives the number of elements failing it. ``window``: the search
    visits only the counts of ``window = (lo, hi, ...)``
    (:func:`~ozaki_backend.spec.certificate.count_window`; their
    kept bits are the ones computed) and ``status[3]`` counts the elements it could not
    decide (see :func:`decided`)."""
    m, n = a.E.shape[0], b.E.shape[0]
    fa, qa = _factors(a, table)
    fb, qb = _factors(b, table)
    # The factor tables are count-major (NN x rows): a tile passes the address of its
    # first row in table 0 (a 1-D view) and the kernel steps by the full row count.
    fn = bm.kernel("oz_cert_counts", table)
    inv_div = _inv_div(m * n)
    guess = np.int32(start_index(k, m * n, table))
    lo = table.counts[0]
    fix = np.int32(-1 if fixed is None else fixed - lo)
    wlo, whi = (0, len(table.counts) - 1) if window is None else window[:2]
    for (i0, i1, j0, j1) in tiles:
        P = bm.tile(i0, i1, j0, j1)
        grid = (-(-(j1 - j0) // 32), -(-(i1 - i0) // _CR))
        fn(grid, (32, 8), (P, row_stride(P), np.int32(i1 - i0), np.int32(j1 - j0),
                           from_row(fa, i0), span(qa, i0, i1), np.int32(m),
                           from_row(fb, j0), span(qb, j0, j1), np.int32(n),
                           span(a.lo, i0, i1), span(a.hi, i0, i1),
                           span(b.lo, j0, j1), span(b.hi, j0, j1),
                           inv_div, guess, fix, np.int32(wlo), np.int32(whi), status[1:]))


def decided(need, outside, window, table: CountTable = REAL_TABLE):
    """Whether a windowed search (:func:`counts_into`) found the product's count
    (:func:`~ozaki_backend.spec.certificate.window_decides`)."""
    return spec.window_decides(need, outside, window, table.counts[0])


def chosen_count(need, unsure, table: CountTable = REAL_TABLE):
    """The count of a ``precision="fp64"`` product from the device's status (spec §10.3,
    as the reference's ``choose_count``): the largest per-element count when every
    element has one, else the table's largest (20 for the real table)."""
    return need if need and not unsure else table.most


def certify_into(a: Side, b: Side, bm: BoundMatrix, tiles, k, s, t, C, *, bound=None,
                 failures=None):
    """Queue ``oz_certify`` over every tile: the bound of ``C = RN(A'B' 2^(-s-t))`` into
    ``bound`` (when given, any strides) and the a-posteriori failures added to
    ``failures[0]`` (when given)."""
    fn = bm.kernel("oz_certify")        # reads one count's shifts: any table
    inv_div = _inv_div(a.E.shape[0] * b.E.shape[0])
    for (i0, i1, j0, j1) in tiles:
        P = bm.tile(i0, i1, j0, j1)
        Cv = C[i0:i1, j0:j1]
        bv = None if bound is None else bound[i0:i1, j0:j1]
        grid = (-(-(j1 - j0) // 32), -(-(i1 - i0) // 8))
        fn(grid, (32, 8),
           (P, row_stride(P), np.int32(i1 - i0), np.int32(j1 - j0), Cv,
            np.int64(Cv.strides[0] // 8), np.int64(Cv.strides[1] // 8),
            *(span(x, i0, i1) for x in (a.E, a.X, a.SA, a.n, s)),
            *(span(x, j0, j1) for x in (b.E, b.X, b.SA, b.n, t)),
            span(a.lo, i0, i1), span(a.hi, i0, i1), span(b.lo, j0, j1), span(b.hi, j0, j1),
            inv_div,
            bv, np.int64(0 if bv is None else bv.strides[0] // 8),
            np.int64(0 if bv is None else bv.strides[1] // 8), failures))


def data(a: Side, b: Side, bm: BoundMatrix, tiles, k) -> spec.CertData:
    """The certificate's view of a product on the device (full ``P`` as float64: the
    rare paths only)."""
    m, n = a.E.shape[0], b.E.shape[0]
    P = cupy.empty((m, n), dtype=np.float64)
    for (i0, i1, j0, j1) in tiles:
        P[i0:i1, j0:j1] = bm.tile(i0, i1, j0, j1)[:i1 - i0, :j1 - j0]
    f64 = np.float64
    return spec.CertData(k, a.E.astype(np.int64), b.E.astype(np.int64),
                         a.X.astype(np.int64), b.X.astype(np.int64),
                         (a.SA + a.n).astype(f64), (b.SA + b.n).astype(f64),
                         a.n.astype(f64), b.n.astype(f64), a.lo.astype(np.int64),
                         a.hi.astype(np.int64), b.lo.astype(np.int64), b.hi.astype(np.int64),
                         P)
