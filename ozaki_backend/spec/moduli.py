"""Moduli table and exact CRT constants for Ozaki scheme II (``docs/spec.md`` §1).

Everything here is exact Python integer arithmetic, computed once per moduli count and
cached. Both engines read their constants from here, so they cannot disagree.
"""

from __future__ import annotations

import math
from functools import lru_cache

#: The INT8 moduli, in the order they are used: 256 first (its residues are the low
#: byte), then odd values <= 255 that are pairwise coprime with everything before.
MODULI = (256, 255, 253, 251, 247, 241, 239, 233, 229, 227,
          223, 217, 211, 199, 197, 193, 191, 181, 179, 173)

MIN_MODULI = 2
MAX_MODULI = len(MODULI)

#: INT8 x INT8 -> INT32 products are exact while k * 128**2 <= 2**31 - 1; longer
#: reductions are cut into chunks of this many terms (a power of two, for tiling).
KSPLIT = 65536


def _check_count(n: int, most: int = MAX_MODULI) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"moduli count must be an int, got {type(n).__name__}")
    if not MIN_MODULI <= n <= most:
        raise ValueError(f"moduli count must be in [{MIN_MODULI}, {most}], got {n}")
    return n


class CRTConstants:
    """Exact constants for the first ``n`` moduli of ``table`` (:data:`MODULI` unless
    given: the complex scheme passes its own, ``complex_moduli.COMPLEX_MODULI``).

    Attributes
    ----------
    n : int
        Number of moduli.
    moduli : tuple of int
    M : int
        Product of the moduli.
    H : int
        ``M // 2 - 1``: for the even ``M`` of :data:`MODULI` the largest integer
        ``<= (M - 1) / 2``; for an odd ``M`` (the complex table) one less, so that the
        representative in ``[-M/2, M/2)`` the CRT stage finds never sits on its edge
        ``(M - 1)/2``. The exactness invariant requires ``sum_k |A'_ik| |B'_kj| <= H``.
    H_f : float
        The largest float64 not above ``H``.
    prefix : tuple of int
        ``prefix[l] = p_1 * ... * p_l`` (``prefix[0] = 1``).
    garner_inv : tuple of int
        ``garner_inv[l] = prefix[l]^-1 mod p_{l+1}`` for Garner's mixed-radix algorithm
        (entry 0 unused, set to 1).
    weights : tuple of int
        The CRT weights ``w_l = (M/p_l) ((M/p_l)^-1 mod p_l) mod M`` in ``[0, M)``:
        ``1`` modulo ``p_l``, ``0`` modulo every other modulus, so
        ``X = sum_l c_l w_l (mod M)``.
    """

    def __init__(self, n: int, table: tuple = MODULI):
        n = _check_count(n, len(table))
        self.n = n
        self.moduli = tuple(table[:n])
        self.M = math.prod(self.moduli)
        self.H = self.M // 2 - 1
        self.H_f = _float_floor(self.H)
        prefix = [1]
        for p in self.moduli:
            prefix.append(prefix[-1] * p)
        self.prefix = tuple(prefix)
        self.garner_inv = tuple(
            1 if l == 0 else pow(prefix[l] % p, -1, p) for l, p in enumerate(self.moduli)
        )
        self.weights = tuple((self.M // p) * pow((self.M // p) % p, -1, p) % self.M
                             for p in self.moduli)

    @property
    def log2_M(self) -> float:
        return math.log2(self.M)

    def __repr__(self) -> str:
        return f"CRTConstants(n={self.n}, log2(M)={self.log2_M:.2f})"


def _float_floor(x: int) -> float:
    """The largest float64 ``<= x`` for a non-negative Python int ``x``."""
    f = float(x)  # round to nearest
    if int(f) > x:
        f = math.nextafter(f, 0.0)
    return f


@lru_cache(maxsize=None)
def crt_constants(n: int) -> CRTConstants:
    """Cached :class:`CRTConstants` for the first ``n`` moduli."""
    return CRTConstants(n)


def lambda_exponent(x, H_f: float):
    """Largest integer ``l`` with ``ldexp(x, l) <= H_f``, for float64 ``x > 0``.

    Exact (no logarithms): compares the frexp mantissas. Works elementwise on arrays.
    """
    import numpy as np

    mh, eh = math.frexp(H_f)
    mx, ex = np.frexp(x)
    return eh - ex.astype(np.int64) - (mx > mh)
