"""Stage 5 on the GPU — the certificate: the gathers, the moduli count, the a-posteriori
test.

Mirrors :mod:`ozaki_backend.reference.certificate`. The hot path is one kernel of
``kernels/scaling.cu`` over the bound GEMM's tiles: ``oz_cert_counts`` (the histogram of
each element's fewest a-priori certified count, read back in the status array with the
Inf/NaN flag). Data whose rows span many binades add ``kernels/certificate.cu``'s
gathers (``oz_top_entries``, ``oz_codes_t``, ``oz_gather``) and, for the few elements
failing a priori, the a-posteriori passes (``oz_post_*_level``, ``oz_post_*_test``). The
rare paths (the residual pass, the native fallback's bound) evaluate the formulas of
:mod:`ozaki_backend.spec.certificate` on CuPy arrays — the same expressions the CPU
engine evaluates on NumPy arrays.

The status array (int32, :func:`status_size`): ``[0]`` the Inf/NaN flag (above 1024),
``[1]`` elements passing no count (a fixed count: failing it), ``[2]`` undecided
elements of a windowed search, ``[3]`` direct elements, ``[4]`` the gathers' gate,
``[5]`` exempt elements (direct or exactly zero), ``[6 + c]`` elements whose fewest
count is ``counts[c]``.
"""

from __future__ import annotations

from typing import NamedTuple

import cupy
import numpy as np

from ..spec import certificate as spec
from ..spec.rules import GATHER_H
from . import loader
from ._common import REAL_TABLE, CountTable, as_rows, blocks, from_row, span
from .scaling import BoundMatrix, Side, kernel, row_stride

#: Rows per block of the count kernel (kernels/scaling.cu OZ_CR).
_CR = 256
#: Rows per block of the a-posteriori passes (kernels/certificate.cu OZ_PR).
_PR = 64
#: Status slots before the histogram.
HEAD = 6


def status_size(table: CountTable = REAL_TABLE) -> int:
    """Length of the status array for ``table``'s counts."""
    return HEAD + len(table.counts)


def _fn(name):
    return loader.get_function("certificate.cu", name)


def factors(side: Side, table: CountTable):
    """``(f, q, rq)``: the per-count factor table (NN x rows), ``SA + n`` and the
    2-norm factor (:func:`~ozaki_backend.spec.certificate.norm_factor`, correctly
    rounded), of one operand (``oz_cert_factors``)."""
    rows = side.E.shape[0]
    f = cupy.empty((len(table.counts), rows), dtype=np.float64)
    q = cupy.empty(rows, dtype=np.float64)
    rq = cupy.empty(rows, dtype=np.float64)
    if rows:
        kernel("oz_cert_factors", table)(
            (blocks(rows),), (256,), (side.kept, np.int32(rows), side.E, side.X, side.n,
                                      side.SA, side.S2, f, q, rq))
    return f, q, rq


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


# --------------------------------------------------------------------------- gathers

#: Rows per block of the gathers' passes over an operand read block by block.
_BLOCK_ROWS = 2048


class Gathers:
    """The gathers of one product (``docs/spec.md`` §10.2): each side's top entries and
    their codes, each side's codes transposed, and the per-tile int16 lower bounds
    (:meth:`tile`, computed lazily per bound tile)."""

    def __init__(self, a: Side, b: Side, S, k):
        self.k = k
        self.h = min(GATHER_H, k)
        self.a = self._side(a, S)
        self.b = self._side(b, S)
        self._tile_key = None
        self._G = None

    def _side(self, side: Side, S):
        X = side.X_op
        rows, cols = X.shape
        H = cupy.zeros((rows, GATHER_H), dtype=np.int32)
        Ct = cupy.full((rows, GATHER_H), spec.CODE_ZERO, dtype=np.int8)
        Ck = cupy.empty((cols, rows), dtype=np.int8)
        # An operand read block by block (out of core: each slice uploads its rows).
        step = rows if isinstance(X, cupy.ndarray) else _BLOCK_ROWS
        for i0 in range(0, rows if cols else 0, max(step, 1)):
            i1 = min(rows, i0 + step)
            Xr, rs, cs, rf = as_rows(X if step == rows else X[i0:i1])
            r = np.int32(i1 - i0)
            _fn("oz_top_entries")((-(-(i1 - i0) // 8),), (32, 8),
                                  (Xr, rs, cs, r, np.int32(cols), S, np.int32(side.ks),
                                   span(side.E, i0, i1), np.int32(self.h), H[i0:i1],
                                   Ct[i0:i1]))
            _fn("oz_codes_t")((-(-cols // 64), -(-(i1 - i0) // 32)), (256,),
                              (Xr, rs, cs, r, np.int32(cols), rf, S, np.int32(side.ks),
                               span(side.E, i0, i1), Ck[:, i0:], np.int64(rows)))
        return H, Ct, Ck

    def tile(self, i0, i1, j0, j1):
        """The int16 lower bounds of the tile ``[i0:i1, j0:j1]`` (row stride its width)."""
        if self._tile_key != (i0, i1, j0, j1):
            rows, cols = i1 - i0, j1 - j0
            G = cupy.empty((rows, cols), dtype=np.int16)
            HA, CtA, CkA = self.a
            HB, CtB, CkB = self.b
            if rows and cols:
                _fn("oz_gather")((-(-cols // 32), -(-rows // 32)), (32, 8),
                                 (HA, CtA, CkA, np.int64(CkA.shape[1]), np.int32(i0),
                                  np.int32(rows), HB, CtB, CkB, np.int64(CkB.shape[1]),
                                  np.int32(j0), np.int32(cols), np.int32(self.h), G,
                                  np.int64(cols)))
            self._G, self._tile_key = G, (i0, i1, j0, j1)
        return self._G


def gate_into(a: Side, b: Side, st):
    """Queue the gathers' gate (``spec.gathers_needed``) into ``st[4]``."""
    _fn("oz_gather_gate")((1,), (1024,), (a.Z, a.n, np.int32(a.E.shape[0]), b.Z, b.n,
                                          np.int32(b.E.shape[0]), st[4:5]))


# --------------------------------------------------------------------------- the count

class Factors(NamedTuple):
    fa: object
    qa: object
    ra: object
    fb: object
    qb: object
    rb: object


def all_factors(a: Side, b: Side, table: CountTable) -> Factors:
    return Factors(*factors(a, table), *factors(b, table))


def window_counts(a: Side, b: Side, i0, i1, j0, j1):
    """The kernels' ``(ZA, ZB)``: the non-zero entries below the bound GEMM's window of
    the tile's rows of A and columns of B, from which they take the window's counts
    ``n - Z`` (``spec.window_terms``); ``(None, None)`` for sides without them (the
    complex embedding's, as the reference's)."""
    if a.Z is None or b.Z is None or a.S2 is None or b.S2 is None:
        return None, None
    return span(a.Z, i0, i1), span(b.Z, j0, j1)


#: The kernels' ``with_direct`` flag (``kernels/certificate.cuh`` ``oz_prior``): every
#: product, the complex embedding's included, computes its elements of one or two terms
#: directly, so it is always 1 (the kernels keep the flag; 0 would exempt only zeros).
_WITH_DIRECT = np.int32(1)


def counts_into(a: Side, b: Side, bm: BoundMatrix, tiles, k, status, fixed=None,
                table: CountTable = REAL_TABLE, window=None, gathers: Gathers | None = None,
                fac: Factors | None = None):
    """Queue the a-priori count over ``table``'s counts into ``status`` (module
    docstring); with ``fixed`` (a count), only that count is tested. ``window``: the
    search visits only the counts of ``window = (lo, hi, ...)``
    (:func:`~ozaki_backend.spec.certificate.count_window`); ``gathers``: their lower
    bounds join the test. The elements of one or two terms are exempt (computed directly,
    in the complex embedding too)."""
    m, n = a.E.shape[0], b.E.shape[0]
    fac = fac or all_factors(a, b, table)
    fn = bm.kernel("oz_cert_counts", table)
    guess = np.int32(start_index(k, m * n, table))
    lo = table.counts[0]
    fix = np.int32(-1 if fixed is None else fixed - lo)
    wlo, whi = (0, len(table.counts) - 1) if window is None else window[:2]
    kbits = np.int32(int(k).bit_length())
    for (i0, i1, j0, j1) in tiles:
        P = bm.tile(i0, i1, j0, j1)
        G = None if gathers is None else gathers.tile(i0, i1, j0, j1)
        grid = (-(-(j1 - j0) // 32), -(-(i1 - i0) // _CR))
        fn(grid, (32, 8), (P, row_stride(P), np.int32(i1 - i0), np.int32(j1 - j0),
                           G, np.int64(0 if G is None else G.shape[1]),
                           from_row(fac.fa, i0), span(fac.qa, i0, i1), span(fac.ra, i0, i1),
                           np.int32(m),
                           from_row(fac.fb, j0), span(fac.qb, j0, j1), span(fac.rb, j0, j1),
                           np.int32(n),
                           span(a.lo, i0, i1), span(a.hi, i0, i1), span(a.n, i0, i1),
                           span(a.E, i0, i1),
                           span(b.lo, j0, j1), span(b.hi, j0, j1), span(b.n, j0, j1),
                           span(b.E, j0, j1), *window_counts(a, b, i0, i1, j0, j1), kbits,
                           _WITH_DIRECT, guess, fix, np.int32(wlo),
                           np.int32(whi), status[1:]))


class Decision(NamedTuple):
    """A product's count from the read-back status."""

    #: The count the product is computed with (a fixed count: that one).
    n_moduli: int
    #: Elements failing the a-priori test at that count.
    failing: int
    #: The fewest count all elements pass, or None (unknown or none).
    all_pass: int | None
    #: Elements of one or two terms (computed directly).
    direct: int
    #: Elements in all.
    elements: int
    #: Exempt elements (direct or exactly zero).
    exempt: int = 0
    #: The 1/16 rule's count when the product is computed one below it, else None.
    safe: int | None = None

    @property
    def direct_only(self) -> bool:
        """Every element is direct or exactly zero: no integer product."""
        return self.exempt == self.elements


def decide(host, window, elements, table: CountTable = REAL_TABLE, fixed=None, repairs=0):
    """The :class:`Decision` of a read-back status, or None when the windowed search did
    not settle the count (:func:`~ozaki_backend.spec.certificate.window_choice`;
    ``repairs``: the unsettled elements the product repairs, its
    :func:`~ozaki_backend.spec.certificate.repair_cap`, 0 for none)."""
    none, undecided, direct, exempt = int(host[1]), int(host[2]), int(host[3]), int(host[5])
    if fixed is not None:
        return Decision(fixed, none, None, direct, elements, exempt)
    counts = list(table.counts)
    hist = {counts[c]: int(v) for c, v in enumerate(host[HEAD:HEAD + len(counts)]) if v}
    ch = spec.window_choice(hist, none, undecided, window, counts, elements, repairs)
    if ch is None:
        return None
    return Decision(ch.n_moduli, ch.failing, ch.all_pass, direct, elements, exempt,
                    ch.safe)


# --------------------------------------------------------------------------- a posteriori

def _post_args(a: Side, b: Side, fac: Factors, c, i0, i1, j0, j1, G, k, C):
    Cv = C[i0:i1, j0:j1]
    return (G, np.int64(0 if G is None else G.shape[1]), np.int32(i1 - i0), np.int32(j1 - j0),
            span(fac.fa[c], i0, i1), span(fac.qa, i0, i1), span(fac.ra, i0, i1),
            span(a.lo, i0, i1), span(a.hi, i0, i1), span(a.n, i0, i1), span(a.E, i0, i1),
            span(fac.fb[c], j0, j1), span(fac.qb, j0, j1), span(fac.rb, j0, j1),
            span(b.lo, j0, j1), span(b.hi, j0, j1), span(b.n, j0, j1), span(b.E, j0, j1),
            np.int32(int(k).bit_length()), _WITH_DIRECT,
            *window_counts(a, b, i0, i1, j0, j1), Cv,
            np.int64(Cv.strides[0] // 8),
            np.int64(Cv.strides[1] // 8))


def posterior_into(a: Side, b: Side, bm: BoundMatrix, tiles, k, n_moduli, C, *, bound=None,
                   test=True, gathers: Gathers | None = None, fac: Factors | None = None,
                   table: CountTable = REAL_TABLE, cap=None):
    """The bound of ``C = RN(A'B' 2^(-s-t))`` into ``bound`` (when given) and, with
    ``test``, the a-posteriori test of the elements failing a priori at ``n_moduli``
    (:func:`~ozaki_backend.spec.certificate.posterior`). Returns ``(unsettled, idx)``:
    a device int32 array of 2 (the unsettled count and how many of them are near the
    overflow threshold, not read here) and the int64 device array of up to ``cap`` of
    their indices ``i n + j`` (None without ``test``), and the product's level (a float,
    read back; 0 without ``test``)."""
    m, n = C.shape
    if cap is None:                     # the unsettled elements the product repairs
        cap = spec.repair_cap(k, m * n)
    fac = fac or all_factors(a, b, table)
    c = n_moduli - table.counts[0]
    out = cupy.zeros(2, dtype=np.int32)
    idx = cupy.empty(max(cap, 1), dtype=np.int64) if test else None
    level = cupy.zeros(1, dtype=np.uint64)
    tv = np.int32(1 if test else 0)
    lev = np.float64(0.0)
    for stage in (("level",) if test else ()) + ("test",):
        if stage == "test" and test:
            # The level is read once (the rare path: some element failed a priori);
            # the test kernel takes it as an argument.
            lev = np.float64(level.view(np.float64).get()[0])
        for (i0, i1, j0, j1) in tiles:
            P = bm.tile(i0, i1, j0, j1)
            G = None if gathers is None else gathers.tile(i0, i1, j0, j1)
            grid = (-(-(j1 - j0) // 32), -(-(i1 - i0) // _PR))
            args = (P, row_stride(P)) + _post_args(a, b, fac, c, i0, i1, j0, j1, G, k, C)
            name = f"oz_post_{'i64' if P.dtype == np.int64 else 'i32'}_{stage}"
            if stage == "level":
                _fn(name)(grid, (32, 8), args + (level,))
                continue
            bv = None if bound is None else bound[i0:i1, j0:j1]
            _fn(name)(grid, (32, 8), args + (
                lev, tv, bv, np.int64(0 if bv is None else bv.strides[0] // 8),
                np.int64(0 if bv is None else bv.strides[1] // 8), np.int32(m), np.int32(n),
                np.int32(i0), np.int32(j0), np.int32(cap), out, idx))
    return out, idx, float(lev)


def data(a: Side, b: Side, bm: BoundMatrix, tiles, k, gathers: Gathers | None = None
         ) -> spec.CertData:
    """The certificate's view of a product on the device (full ``P`` as float64: the
    rare paths only)."""
    m, n = a.E.shape[0], b.E.shape[0]
    P = cupy.empty((m, n), dtype=np.float64)
    G14 = None if gathers is None else cupy.empty((m, n), dtype=np.float64)
    for (i0, i1, j0, j1) in tiles:
        P[i0:i1, j0:j1] = bm.tile(i0, i1, j0, j1)[:i1 - i0, :j1 - j0]
        if gathers is not None:
            G14[i0:i1, j0:j1] = g16_values(gathers.tile(i0, i1, j0, j1))
    f64 = np.float64
    QA, QB = (a.SA + a.n).astype(f64), (b.SA + b.n).astype(f64)
    RA, RB = _norm_factor(a, QA), _norm_factor(b, QB)
    ZA, ZB = window_counts(a, b, 0, m, 0, n)
    return spec.CertData(k, a.E.astype(np.int64), b.E.astype(np.int64),
                         a.X.astype(np.int64), b.X.astype(np.int64), QA, QB,
                         a.n.astype(f64), b.n.astype(f64), a.lo.astype(np.int64),
                         a.hi.astype(np.int64), b.lo.astype(np.int64), b.hi.astype(np.int64),
                         P, RA, RB, G14,
                         None if ZA is None else (a.n - ZA).astype(f64),
                         None if ZB is None else (b.n - ZB).astype(f64))


def _norm_factor(side: Side, Q):
    """The 2-norm factor ``RA`` of one operand's rows (as ``oz_cert_factors``)."""
    f64 = np.float64
    S2 = None if side.S2 is None else side.S2.astype(f64)
    return spec.norm_factor(Q, S2, side.SA.astype(f64), side.n.astype(f64))


def g16_values(G):
    """float64 values of the int16 gathered bounds (``certificate.cuh`` ``oz_g16_value``)."""
    g = G.astype(np.int32)
    mant = cupy.asarray(np.array([4.0, 6.0, 9.0, 0.0]))[g & 3]
    return cupy.where(g < 0, 0.0, cupy.ldexp(mant, ((g >> 2) - 256).astype(np.int32)))
