"""Stages 2–4 of a symmetric product ``x.T @ x`` / ``x @ x.T`` on the GPU: one triangle.

Mirrors :mod:`ozaki_backend.reference.symmetric`. With ``B = A.T`` and ``t = s``, one
set of residue planes of A's rows serves both sides of every INT8 GEMM: the planes are
written once (``N x m x kpad`` bytes), and each tile of the upper block triangle
(row panel ``[i0, i1)`` of :func:`~ozaki_backend.spec.tiling.symmetric_panels`, columns
``[j0, j1)`` with ``j0 >= i0``) is one set of cuBLAS INT8 GEMMs reading row blocks of
those planes, followed by the fused CRT pass into ``out[i0:i1, j0:j1]``. The blocks
below the diagonal blocks are then copied from their mirror images on the device. When
the planes do not fit the workspace budget, each tile computes its own row blocks'
planes (more residue passes, the same bits).
"""

from __future__ import annotations

import cupy
import numpy as np

from .. import _stats
from ..spec.tiling import symmetric_panels, symmetric_work
from . import crt, modgemm, residues
from ._common import Workspace, round_up
from .errors import WorkspaceTooSmall

#: The GPU's smallest panel: INT8 GEMMs of fewer rows run far below the peak.
MIN_PANEL_ROWS = 256


def _layout(m, rows, width, kpad, N, whole):
    ws = Workspace()
    if whole:
        ws.need("R", (N, m, kpad), np.int8)
    else:
        ws.need("RA", (N, rows, kpad), np.int8)
        ws.need("RB", (N, width, kpad), np.int8)
    ws.need("C", (N, rows, round_up(width, 16)), np.int32)
    return ws


def plan_tiles(m, kpad, N, budget):
    """``(panels, width, whole)``: the row panels, the column width of a tile and
    whether one set of planes for all of A fits ``budget`` bytes (else each tile makes
    its own). Widths halve (multiples of 256) until the workspace fits; None when even
    the smallest tile does not."""
    panels = symmetric_panels(m, min_rows=MIN_PANEL_ROWS)
    rows = max(i1 - i0 for i0, i1 in panels)
    for whole in (True, False):
        width = m
        while True:
            if _layout(m, rows, width, kpad, N, whole).nbytes <= budget:
                return panels, width, whole
            if width <= MIN_PANEL_ROWS:
                break
            width = max(MIN_PANEL_ROWS, round_up(-(-width // 2), 256))
    return None


def tiles(panels, width, m):
    """The output tiles ``(i0, i1, j0, j1)`` of the upper block triangle."""
    return [(i0, i1, j0, min(m, j0 + width))
            for i0, i1 in panels for j0 in range(i0, m, width)]


def mirror_lower(out, panels):
    """``out[i1:, i0:i1] = out[i0:i1, i1:].T`` for every panel (device copies of
    disjoint regions)."""
    for i0, i1 in panels:
        if i1 < out.shape[0]:
            out[i1:, i0:i1] = out[i0:i1, i1:].T


def product_into(A, S, s, n_moduli, kpad, out, budget, *, ph, note=None):
    """``out = RN(A' A'^T 2^(-s_i - s_j))`` (every element written; exactly symmetric).

    Parameters
    ----------
    A : cupy float64 (m, k), any strides
    S : cupy int32 (k,)
        Equilibration exponents (zero for a symmetric product; applied like A's).
    s : cupy int32 (m,)
        The symmetric exponents (``t = s``).
    out : cupy float64 (m, m), any strides
    budget : int
        Workspace bytes.
    ph : phase recorder; note : callable or None, called after the allocation.
    """
    m = A.shape[0]
    N = n_moduli
    choice = plan_tiles(m, kpad, N, budget)
    if choice is None:
        need = _layout(m, MIN_PANEL_ROWS, MIN_PANEL_ROWS, kpad, N, False).nbytes
        raise WorkspaceTooSmall(f"the smallest symmetric tile needs {need} bytes of "
                                f"workspace, the budget is {budget}")
    panels, width, whole = choice
    rows = max(i1 - i0 for i0, i1 in panels)
    ws = _layout(m, rows, width, kpad, N, whole)
    buf = cupy.empty(ws.nbytes, dtype=np.uint8)
    if note is not None:
        note()
    v = ws.carve(buf)
    C = v["C"]
    if whole:
        with ph("residues"):
            residues.residue_planes_into(A, s, v["R"], N, S=S, ks=-1)
    rows_key = cols_key = None
    for (i0, i1, j0, j1) in tiles(panels, width, m):
        if whole:
            RA, RB = v["R"][:, i0:i1], v["R"][:, j0:j1]
        else:
            RA, RB = v["RA"], v["RB"]
            with ph("residues"):
                if rows_key != (i0, i1):
                    residues.residue_planes_into(A[i0:i1], s[i0:i1], RA, N, S=S, ks=-1)
                    rows_key = (i0, i1)
                if cols_key != (j0, j1):
                    residues.residue_planes_into(A[j0:j1], s[j0:j1], RB, N, S=S, ks=-1)
                    cols_key = (j0, j1)
        with ph("gemms"):
            modgemm.products_into(RA, RB, C, N, i1 - i0, j1 - j0, kpad, strategy=None)
        with ph("crt"):
            crt.crt_into(C, N, i1 - i0, j1 - j0, s[i0:i1], s[j0:j1], out[i0:i1, j0:j1])
    with ph("crt"):
        mirror_lower(out, panels)
    del buf, v, C
    k = A.shape[1]
    _stats.record_symmetric(symmetric_work(panels, m) * k * N, m * m * k * N)
