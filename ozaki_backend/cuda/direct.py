"""Stage 6 on the GPU — elements computed from their terms (``docs/spec.md`` §10.5).

Mirrors :mod:`ozaki_backend.reference.direct`: ``kernels/certificate.cu``'s
``oz_direct`` (elements of one or two terms: the one product, or the compensated
two-term sum) and ``oz_repair`` (the few elements the a-posteriori test leaves
unsettled: compensated dot products in the reference's lane order, native's kind of
bound), both from the caller's operands and with the reference's operations, so the bits
agree.
"""

from __future__ import annotations

import numpy as np

from ..spec import certificate as spec
from . import loader
from ._common import as_rows
from .scaling import BoundMatrix, Side

#: ``up(gamma_2 up(gamma_2))`` as the reference's ``direct_values`` computes it.
_G2 = np.float64(spec.up(np.float64(spec.gamma(2)) * spec.up(np.float64(spec.gamma(2)))))


def _fn(name):
    return loader.get_function("certificate.cu", name)


def direct_into(A, Bt, a: Side, b: Side, C, bound=None):
    """Overwrite the direct elements of ``C`` (and ``bound``) in place; ``A`` (m x k) and
    ``Bt`` (n x k) the caller's operands read row-wise."""
    m, n = C.shape
    if not (m and n):
        return
    Ar, ars, acs, _ = as_rows(A)
    Br, brs, bcs, _ = as_rows(Bt)
    _fn("oz_direct")((-(-n // 32), -(-m // 8)), (32, 8),
                     (Ar, ars, acs, Br, brs, bcs, np.int32(m), np.int32(n), a.lo, a.hi, a.n,
                      b.lo, b.hi, b.n, _G2, C, np.int64(C.strides[0] // 8),
                      np.int64(C.strides[1] // 8), bound,
                      np.int64(0 if bound is None else bound.strides[0] // 8),
                      np.int64(0 if bound is None else bound.strides[1] // 8)))


def direct_embedding_into(Ar, Ai, BrT, BiT, a: Side, b: Side, C2, bound=None):
    """Overwrite the direct elements of the complex scheme's embedding ``C2 = [Re, Im]``
    (m x 2n, and ``bound``) in place (``kernels/certificate.cu`` ``oz_cx_direct``):
    ``oz_direct`` on ``Â = [Ar, -Ai]`` and ``B̂ = [[Br, Bi], [Bi, -Br]]`` read from the
    caller's parts (``Ar``/``Ai`` m x k and ``BrT``/``BiT`` n x k, each pair with one pair
    of strides) — the reference's :func:`ozaki_backend.reference.complex.direct_into`."""
    m, n2 = C2.shape
    if not (m and n2):
        return
    k = Ar.shape[1]
    Xr, ars, acs, _ = as_rows(Ar)
    Xi = as_rows(Ai)[0]
    Yr, brs, bcs, _ = as_rows(BrT)
    Yi = as_rows(BiT)[0]
    _fn("oz_cx_direct")((-(-n2 // 32), -(-m // 8)), (32, 8),
                        (Xr, Xi, ars, acs, Yr, Yi, brs, bcs, np.int32(m), np.int32(n2 // 2),
                         np.int32(k), a.lo, a.hi, a.n, b.lo, b.hi, b.n, _G2, C2,
                         np.int64(C2.strides[0] // 8), np.int64(C2.strides[1] // 8), bound,
                         np.int64(0 if bound is None else bound.strides[0] // 8),
                         np.int64(0 if bound is None else bound.strides[1] // 8)))


def repair_into(A, Bt, a: Side, b: Side, bm: BoundMatrix, tiles, idx, count, C, bound=None):
    """Recompute the ``count`` elements listed in ``idx`` (int64 ``i n + j``, device) as
    compensated dot products in the reference's order (``reference.direct.dot2_in_order``,
    one warp each), with their bound (``bound``)."""
    m, n = C.shape
    if not count:
        return
    k = A.shape[1]
    Ar, ars, acs, _ = as_rows(A)
    Br, brs, bcs, _ = as_rows(Bt)
    lst = idx[:count]
    rows, cols = lst // n, lst % n
    fn = _fn("oz_repair")
    for (i0, i1, j0, j1) in tiles:
        sel = lst if len(tiles) == 1 else \
            lst[(rows >= i0) & (rows < i1) & (cols >= j0) & (cols < j1)]
        c = int(sel.size)
        if not c:
            continue
        P = bm.tile(i0, i1, j0, j1)
        wide = P.dtype == np.int64
        fn((-(-c // 8),), (32, 8),
           (sel, np.int32(c), np.int32(n), Ar, ars, acs, Br, brs, bcs, np.int32(k),
            a.lo, a.hi, a.n, a.SA, a.E, b.lo, b.hi, b.n, b.SA, b.E,
            None if wide else P, P if wide else None, np.int64(P.shape[1]),
            np.int32(i0), np.int32(j0), C, np.int64(C.strides[0] // 8),
            np.int64(C.strides[1] // 8), bound,
            np.int64(0 if bound is None else bound.strides[0] // 8),
            np.int64(0 if bound is None else bound.strides[1] // 8)))


__all__ = ["direct_into", "direct_embedding_into", "repair_into"]
