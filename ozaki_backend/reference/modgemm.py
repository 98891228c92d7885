"""Stage 3 — modular GEMMs: ``C_l = R_A,l @ R_B,l`` reduced mod ``p_l``.

Spec §5. On the CPU the residue products run through float32 BLAS over
chunks of ``FP32_KCHUNK = 1024`` terms: every product ``|r_a r_b| <= 2^14`` and every
partial sum is an integer of magnitude at most ``1024 * 2^14 = 2^24``, which float32
holds exactly, so each call is exact whatever its summation order, blocking or FMA use
(and twice as fast as float64). Chunk results are summed in float64 (exact below
2^53, i.e. for k < 2^39). The GPU's INT32 accumulation needs k split at
``KSPLIT``; reducing each chunk mod p first gives the same residues, so the CPU does
not need to split.
"""

from __future__ import annotations

import numpy as np

FP32_KCHUNK = 1024


def modular_products(RA, RB, moduli):
    """Residues of the products, ``(N, m, n)`` int16 in ``[0, p_l)``.

    Parameters
    ----------
    RA : int8 array (N, m, k)
    RB : int8 array (N, k, n)
    moduli : sequence of int
    """
    N, m, _ = RA.shape
    n = RB.shape[2]
    out = np.empty((N, m, n), dtype=np.int16)
    k = RA.shape[2]
    # Rows per block of the epilogue (~256 KiB of float64), so that the conversion and
    # floor_mod run in cache instead of streaming whole m x n temporaries.
    rows = max(1, (1 << 15) // max(n, 1))
    for l, p in enumerate(moduli):
        C = None
        for k0 in range(0, k, FP32_KCHUNK):
            a = RA[l, :, k0:k0 + FP32_KCHUNK].astype(np.float32)
            b = RB[l, k0:k0 + FP32_KCHUNK, :].astype(np.float32)
            part = a @ b
            if C is None:
                C = part                         # float32 while there is one chunk
            else:
                if C.dtype != np.float64:
                    C = C.astype(np.float64)
                C += part
        if C is None:                            # k = 0: the empty sum
            out[l] = 0
            continue
        for r0 in range(0, m, rows):
            out[l, r0:r0 + rows] = floor_mod(C[r0:r0 + rows].astype(np.float64, copy=False), p)
    return out


def floor_mod(C, p: int):
    """``C mod p`` in ``[0, p)`` for float64 integers ``|C| < 2^44``.

    ``floor(C / p)`` is exact: a non-integer quotient is at least ``1/p`` away from
    the next integer, far more than the division's rounding error ``|C/p| 2^-53``.
    (Cheaper than ``np.mod``, which handles signs and non-integers.)
    """
    return C - p * np.floor(C / p)
