"""Stage 2 on the GPU — truncation and residues in one pass (``docs/spec.md`` §3–4).

Mirrors :mod:`ozaki_backend.reference.residues`. The production path,
:func:`residue_planes_into`, reads the float64 operand once and writes all N symmetric
int8 residues of ``trunc(x 2^s_row)`` in the GEMM's layout (``rows x kpad`` per
modulus, k contiguous, padding zeroed); :func:`residues` is the stage function with the
reference's signature and layout, for tests and debugging.
"""

from __future__ import annotations

import cupy
import numpy as np

from ..spec.moduli import MODULI
from . import loader
from ._common import KPAD, as_rows, round_up


def _check_moduli(moduli):
    moduli = tuple(int(p) for p in moduli)
    if moduli != MODULI[:len(moduli)]:
        raise ValueError("the CUDA kernels use a prefix of the moduli table "
                         f"{MODULI}; got {moduli}")
    return len(moduli)


def residue_planes_into(X, shift, R, n_moduli, S=None, ks=0):
    """Residues of ``trunc(X 2^(ks S_k) 2^shift_row)`` into planes ``R``.

    Parameters
    ----------
    X : cupy float64 (rows, cols), any strides
        The operand read row-wise (A itself, or B.T).
    shift : cupy int32 (rows,) or None
        Row exponents (None: X already holds integers).
    S : cupy int32 (cols,) or None
        Equilibration exponents (``docs/spec.md`` §2.1), applied as ``2^(ks S_k)``
        (``ks = -1`` for A, ``+1`` for B read as its transpose).
    R : cupy int8 (>= N, >= rows, kpad), rows contiguous, 8-byte aligned
        Plane ``l`` is ``R[l, :rows, :]``; columns ``cols..kpad-1`` are zeroed. The
        planes may be any distance apart (a row block of larger planes).
        (The kernel stores 8 bytes of a row at a time; kpad is a multiple of KPAD.)
    n_moduli : int
    """
    rows, cols = X.shape
    kpad = R.shape[2]
    if rows == 0 or kpad == 0:
        return
    if R.data.ptr % 8 or kpad % 8 or R.strides[1:] != (kpad, 1) or R.strides[0] % 8:
        raise ValueError("residue planes must be 8-byte aligned with contiguous rows "
                         "and kpad % 8 == 0")
    X, rs, cs, rows_fast = as_rows(X)
    fn = loader.get_function("residues.cu", "oz_residues")
    grid = (-(-kpad // 64), -(-rows // 32))
    if grid[1] > 65535:
        raise ValueError(f"operand too tall for one launch ({rows} rows)")
    fn(grid, (256,), (X, rs, cs, np.int32(rows), np.int32(cols), rows_fast, S, np.int32(ks),
                      np.int32(kpad), shift, R, np.int64(R.strides[0]),
                      np.int32(n_moduli)))


def residues(Aint, moduli):
    """int8 ``(N, rows, cols)``: ``Aint mod p_l`` for each modulus, symmetric (spec §4).

    Parameters
    ----------
    Aint : cupy or numpy float64 (rows, cols)
        Exact integers (the truncated, scaled operand).
    moduli : sequence of int
        A prefix of the moduli table.
    """
    N = _check_moduli(moduli)
    X = cupy.asarray(Aint, dtype=np.float64)
    rows, cols = X.shape
    R = cupy.empty((N, rows, round_up(max(cols, 1), KPAD)), dtype=np.int8)
    residue_planes_into(X, None, R, N)
    return R[:, :, :cols]
