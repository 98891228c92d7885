"""Stages 2–4 of a symmetric product ``x.T @ x`` / ``x @ x.T`` on the CPU: one triangle.

With ``B = A.T`` and the symmetric scaling ``t = s`` (``scaling.shifts``), the truncated
operands satisfy ``B' = A'.T``, so the residues of A serve both sides and the exact
integer product ``X = A' A'^T`` is symmetric. The tiles of
:func:`ozaki_backend.spec.tiling.symmetric_tiles` compute the upper block triangle
(the diagonal blocks in full: ``X_ij = X_ji`` and ``s_i + s_j = s_j + s_i``, so they
are symmetric bit for bit) and the blocks below the diagonal blocks are copies of their
mirror images. The result is exactly symmetric, like
NumPy's ``syrk``, with about half of the INT8 work; every element has the bits the full
product with the same scaling would give (tiling never changes a bit).
"""

from __future__ import annotations

import numpy as np

from .. import _stats
from ..spec.moduli import MODULI
from ..spec.tiling import mirrored_blocks, symmetric_tiles, symmetric_work
from . import crt, modgemm, residues, scaling


def mirror_lower(C, tiles):
    """Copy the tiles above the diagonal blocks to their mirror images below
    (``C[j0:j1, i0:i1] = C[i0:i1, j0:j1].T``), in place."""
    for i0, i1, j0, j1 in mirrored_blocks(tiles):
        C[j0:j1, i0:i1] = C[i0:i1, j0:j1].T
    return C


def integer_product(A, s, n_moduli, tiles=None):
    """``RN(A' A'^T 2^{-s_i-s_j})`` with ``A' = trunc(A 2^s)``: the symmetric product's
    integer stages, one triangle computed and mirrored.

    Parameters
    ----------
    A : ndarray of float64 (m, k)
    s : int64 (m,)
        The symmetric exponents (``t = s``).
    n_moduli : int
    tiles : list of (int, int, int, int), optional
        The upper block triangle's tiles (default
        :func:`~ozaki_backend.spec.tiling.symmetric_tiles`).
    """
    m = A.shape[0]
    moduli = MODULI[:n_moduli]
    if tiles is None:
        tiles = symmetric_tiles(m)
    RA = residues.residues(scaling.truncate(A, s), moduli)      # (N, m, k): both sides
    C = np.empty((m, m), dtype=np.float64)
    for i0, i1, j0, j1 in tiles:
        c = modgemm.modular_products(RA[:, i0:i1], RA[:, j0:j1].transpose(0, 2, 1), moduli)
        C[i0:i1, j0:j1] = crt.reconstruct_round(c, moduli, s[i0:i1], s[j0:j1])
    _stats.record_symmetric(symmetric_work(tiles) * A.shape[1] * n_moduli,
                            m * m * A.shape[1] * n_moduli)
    return mirror_lower(C, tiles)


def symmetrize(C):
    """``C`` with its strictly lower triangle replaced by the mirror of the upper one
    (for results computed in full, e.g. by the residual pass): still within each
    element's bound, because ``(A A^T)_ij = (A A^T)_ji``."""
    il = np.tril_indices(C.shape[0], -1)
    C[il] = C.T[il]
    return C
