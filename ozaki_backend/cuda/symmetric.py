"""Stages 2–4 of a symmetric product ``x.T @ x`` / ``x @ x.T`` on the GPU: one triangle.

Mirrors :mod:`ozaki_backend.reference.symmetric`. With ``B = A.T`` and ``t = s``, one
set of residue planes of A's rows serves both sides of every INT8 GEMM: the planes are
written once (``N x m x kpad`` bytes), and each tile of the upper block triangle
(:func:`~ozaki_backend.spec.tiling.symmetric_tiles`: large off-diagonal blocks from
recursive halving, small diagonal blocks in full) is one set of cuBLAS INT8 GEMMs
reading row blocks of those planes, followed by the fused CRT pass into
``out[i0:i1, j0:j1]``. The blocks below the diagonal blocks are then copied from their
mirror images on the device. When the planes do not fit the workspace budget, each
tile computes its own row blocks' planes (more residue passes, the same bits).
"""

from __future__ import annotations

import cupy
import numpy as np

from .. import _stats
from ..spec import tiling
from ..spec.tiling import mirrored_blocks, symmetric_plan, symmetric_work
from . import crt, modgemm, residues
from ._common import Workspace, round_up
from .errors import WorkspaceTooSmall

#: The GPU's smallest diagonal block: INT8 GEMMs of fewer rows run far below the peak.
MIN_PANEL_ROWS = tiling.MIN_TILE


def _layout(m, rows, cols, kpad, N, whole):
    """The workspace of :func:`~ozaki_backend.spec.tiling.symmetric_workspace_bytes`."""
    ws = Workspace()
    if whole:
        ws.need("R", (N, m, kpad), np.int8)
    else:
        ws.need("RA", (N, rows, kpad), np.int8)
        ws.need("RB", (N, cols, kpad), np.int8)
    ws.need("C", (N, rows, round_up(cols, 16)), np.int32)
    return ws


def plan_tiles(m, kpad, N, budget):
    """:func:`~ozaki_backend.spec.tiling.symmetric_plan` with the GPU's smallest tile."""
    return symmetric_plan(m, kpad, N, budget, min_rows=MIN_PANEL_ROWS)


def mirror_lower(out, tiles):
    """``out[j0:j1, i0:i1] = out[i0:i1, j0:j1].T`` for every tile above the diagonal
    blocks (device copies of disjoint regions)."""
    for i0, i1, j0, j1 in mirrored_blocks(tiles):
        out[j0:j1, i0:i1] = out[i0:i1, j0:j1].T


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
    tiles, rows, cols, whole = choice
    ws = _layout(m, rows, cols, kpad, N, whole)
    buf = cupy.empty(ws.nbytes, dtype=np.uint8)
    if note is not None:
        note()
    v = ws.carve(buf)
    C = v["C"]
    if whole:
        with ph("residues"):
            residues.residue_planes_into(A, s, v["R"], N, S=S, ks=-1)
    rows_key = cols_key = None
    for (i0, i1, j0, j1) in tiles:
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
            modgemm.products_into(RA, RB, C, N, i1 - i0, j1 - j0, kpad)
        with ph("crt"):
            crt.crt_into(C, N, i1 - i0, j1 - j0, s[i0:i1], s[j0:j1], out[i0:i1, j0:j1])
    with ph("crt"):
        mirror_lower(out, tiles)
    del buf, v, C
    k = A.shape[1]
    _stats.record_symmetric(symmetric_work(tiles) * k * N, m * m * k * N)
