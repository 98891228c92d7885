"""Stage 4 on the GPU — CRT reconstruction, the one rounding, alpha/beta, in one pass.

Mirrors :mod:`ozaki_backend.reference.crt` (``docs/spec.md`` §6–7). ``kernels/crt.cu``
is compiled once per moduli count with a generated prelude holding the exact CRT
constants as 32-bit limbs (from :func:`ozaki_backend.spec.moduli.crt_constants`):

    Y' = M/2 + sum_l c_l w_l,      w_l = (M/p_l) ((M/p_l)^-1 mod p_l) mod M,

with ``c_l`` congruent to the l-th product modulo ``p_l`` (``0 <= c_l < 2^25``), so
``Y' = X + M/2 (mod M)`` for the wanted ``X`` in ``(-M/2, M/2)``. A float64 estimate of
``Y'/M``, nudged up by 2^-40, gives a quotient that is exact or one too large; one limb
subtraction and a sign test settle it. No floating-point value ever stands in for a
bit of ``X``; the rounding to float64 is done on the limbs.
"""

from __future__ import annotations

import cupy
import numpy as np

from ..spec.moduli import MODULI
from . import loader
from ._prelude import crt_prelude as prelude


#: Use ``oz_crt2`` (two columns per thread) where the planes allow it; the same bits
#: either way (tests/cuda check the bits; the timing is in docs/benchmark-log.md, from a
#: probe retired at 40a9fc4).
PAIRS = True


def _kernel(n_moduli: int, residues: bool = False, table_prelude=None, pairs=False):
    name = "oz_crt_u8" if residues else "oz_crt2" if pairs else "oz_crt"
    return loader.get_function("crt.cu", name, prelude=table_prelude or prelude(n_moduli))


def ab_mode(alpha, beta) -> int:
    """0: ``C``; 1: ``alpha*C``; 2: ``alpha*C + beta*C0`` (spec §7)."""
    if beta != 0.0:
        return 2
    return 0 if alpha == 1.0 else 1


def crt_into(C, n_moduli, rows, cols, s, t, out, *, alpha=1.0, beta=0.0, C0=None,
             table_prelude=None):
    """The fused output pass for one tile.

    Parameters
    ----------
    C : cupy int32 or uint8 (>= N, >= rows, >= cols)
        Rows contiguous; rows and planes any distance apart (``ldc`` and the plane
        stride are read from the strides).
        int32: products congruent mod p_l with ``|value| <= 2^30 + 255`` (cuBLAS);
        uint8: the residues themselves, in ``[0, p_l)`` (the fused product kernel).
    s, t : cupy int32 (rows,), (cols,)
    out : cupy float64 (rows, cols) view, any strides
    C0 : cupy float64 (rows, cols) view or None (read only when ``beta != 0``)
    table_prelude : str or None
        The constants of another moduli table (the complex scheme's,
        ``_prelude.complex_crt_prelude``; uint8 residues only).
    """
    if rows == 0 or cols == 0:
        return
    mode = ab_mode(alpha, beta)
    os0, os1 = out.strides
    if C0 is None or mode < 2:
        C0p, c0, c1 = None, 0, 0
    else:
        C0p, (c0, c1) = C0, C0.strides
    if C.dtype not in (np.int32, np.uint8):
        raise TypeError(f"products must be int32 or uint8 planes, got {C.dtype}")
    if table_prelude is not None and C.dtype != np.uint8:
        raise TypeError("another moduli table needs reduced uint8 residues")
    # Planes and rows any distance apart (a block of larger planes), elements contiguous.
    if C.strides[2] != C.itemsize or C.strides[0] % C.itemsize or C.strides[1] % C.itemsize:
        raise ValueError("product planes need contiguous rows")
    plane, ldc = C.strides[0] // C.itemsize, C.strides[1] // C.itemsize
    # Two columns per thread (int2 loads) when every row of every plane starts 8-byte
    # aligned — the cuBLAS path's planes (ldc a multiple of 16) always do.
    pairs = (PAIRS and C.dtype == np.int32 and C.data.ptr % 8 == 0 and plane % 2 == 0
             and ldc % 2 == 0)
    per = 512 if pairs else 256
    _kernel(n_moduli, C.dtype == np.uint8, table_prelude, pairs)(
        (-(-cols // per), min(rows, 65535)), (256,),
        (C, np.int64(plane), np.int64(ldc), np.int32(rows),
         np.int32(cols), s, t, out, np.int64(os0 // 8), np.int64(os1 // 8), np.int32(mode),
         np.float64(alpha), np.float64(beta), C0p, np.int64(c0 // 8), np.int64(c1 // 8)))


def reconstruct_round(c, moduli, s, t):
    """Spec §6 for one product: residues ``c (N, m, n)`` -> float64 ``(m, n)`` (CuPy).

    Mirrors the reference's ``reconstruct_round``; ``c`` may be any integers congruent
    to the products (the reference's ``[0, p)`` residues, or raw int32 products).
    """
    moduli = tuple(int(p) for p in moduli)
    if moduli != MODULI[:len(moduli)]:
        raise ValueError(f"the CUDA kernels use a prefix of the moduli table; got {moduli}")
    N = len(moduli)
    C = cupy.ascontiguousarray(cupy.asarray(c).astype(np.int32, copy=False))
    _, m, n = C.shape
    out = cupy.empty((m, n), dtype=np.float64)
    s32 = cupy.asarray(s).astype(np.int32)
    t32 = cupy.asarray(t).astype(np.int32)
    crt_into(C, N, m, n, s32, t32, out)
    return out
