"""Moduli, square roots of -1 and exact CRT constants of the complex scheme
(``docs/spec.md`` §11).

A complex128 product is emulated through Gaussian integers: the truncated operands
``A' = A'r + i A'i``, ``B' = B'r + i B'i`` have integer real and imaginary parts, and for
a modulus ``m`` with a square root ``r`` of ``-1`` (``r^2 = -1 mod m``) the two maps

    phi_+(x + i y) = x + r y  (mod m),       phi_-(x + i y) = x - r y  (mod m)

are ring homomorphisms ``Z[i] -> Z/m`` (``i`` goes to a root of ``-1`` either way).
Hence ``phi_+(A'B') = phi_+(A') phi_+(B')`` and likewise for ``phi_-``: one complex
residue product costs two real modular products. With
``P1 = phi_+(C)``, ``P2 = phi_-(C)`` for ``C = A'B'``,

    Re C = (P1 + P2) / 2,        Im C = (P1 - P2) / (2 r)        (mod m),

which needs ``2`` and ``r`` invertible mod ``m``: ``m`` odd (then ``r^2 = -1`` makes
``r`` a unit). ``-1`` is a square mod an odd ``m`` exactly when every prime factor of
``m`` is ``1 mod 4`` (a root mod each prime power lifts by Hensel and combines by the
CRT). Residues must fit int8 like the real scheme's (symmetric, ``|r| <= (m - 1)/2``),
so ``m <= 255``.

Everything here is exact Python integer arithmetic, computed once and cached.
"""

from __future__ import annotations

import math
from functools import lru_cache

from .moduli import MIN_MODULI, CRTConstants
from .rules import EXPECTED_BITS, NATIVE_K

#: The complex moduli, in the order they are used: greedily the largest odd ``m <= 255``
#: whose prime factors are all ``1 mod 4`` and that is coprime with every modulus
#: before it (``221 = 13*17``, ``205 = 5*41``; every other entry is a prime). Greedy
#: maximises ``M`` at every count: every candidate above 29 not taken shares a prime
#: with a larger entry (185 = 5*37, 169 = 13^2, 145 = 5*29, 125 = 5^3, ...). 22 entries
#: (log2 M = 152.1), two more than the real table's 20: each carries fewer bits, and
#: ``precision="fp64"`` needs the range on small products with wide exponent spreads
#: (``moduli=`` stays within 2..20 like the real option).
COMPLEX_MODULI = (241, 233, 229, 221, 205, 197, 193, 181, 173, 157,
                  149, 137, 113, 109, 101, 97, 89, 73, 61, 53, 37, 29)

MAX_COMPLEX_MODULI = len(COMPLEX_MODULI)


def sqrt_minus_one(m: int) -> int:
    """The smallest ``r`` in ``[1, m)`` with ``r^2 = -1 (mod m)``.

    Raises
    ------
    ValueError
        If there is none (``m`` even or some prime factor ``3 mod 4``).
    """
    m = int(m)
    for r in range(1, m):
        if (r * r + 1) % m == 0:
            return r
    raise ValueError(f"-1 is not a square modulo {m}")


def admissible(m: int) -> bool:
    """Whether ``m`` can be a complex modulus: odd, ``3 <= m <= 255``, ``-1`` a square."""
    if not (3 <= m <= 255 and m % 2 == 1):
        return False
    try:
        sqrt_minus_one(m)
    except ValueError:
        return False
    return True


class ComplexCRTConstants(CRTConstants):
    """:class:`~.moduli.CRTConstants` of the first ``n`` complex moduli, plus the
    constants of the Gaussian-integer map.

    Attributes
    ----------
    roots : tuple of int
        ``r_l``: :func:`sqrt_minus_one` of each modulus.
    inv2 : tuple of int
        ``2^-1 mod m_l`` (``(m_l + 1) / 2``).
    inv2r : tuple of int
        ``(2 r_l)^-1 mod m_l``.

    Notes
    -----
    ``M`` is odd, so ``H = M // 2 - 1 = (M - 1)/2 - 1`` (one below the largest
    symmetric representative; see :class:`~.moduli.CRTConstants`).
    """

    def __init__(self, n: int):
        super().__init__(n, COMPLEX_MODULI)
        self.roots = tuple(sqrt_minus_one(p) for p in self.moduli)
        self.inv2 = tuple(pow(2, -1, p) for p in self.moduli)
        self.inv2r = tuple(pow(2 * r, -1, p) for p, r in zip(self.moduli, self.roots))

    def __repr__(self) -> str:
        return f"ComplexCRTConstants(n={self.n}, log2(M)={self.log2_M:.2f})"


@lru_cache(maxsize=None)
def complex_crt_constants(n: int) -> ComplexCRTConstants:
    """Cached :class:`ComplexCRTConstants` for the first ``n`` complex moduli."""
    return ComplexCRTConstants(n)


def complex_guaranteed_bits(n_moduli: int, k: int) -> int:
    """Bits kept of each row's (column's) largest element with ``n_moduli`` complex
    moduli at reduction length ``k``: the real rule at ``2k`` (``Re C`` and ``Im C``
    are real products of ``2k`` terms, ``docs/spec.md`` §11.2): the largest ``b`` with
    ``H >= 2k 4^b``."""
    H = complex_crt_constants(n_moduli).H
    k2 = 2 * max(int(k), 1)
    return ((H // k2).bit_length() - 1) // 2


def complex_moduli_for_bits(bits: int, k: int) -> int:
    """Fewest complex moduli whose :func:`complex_guaranteed_bits` reach ``bits``
    (:data:`MAX_COMPLEX_MODULI` when none does)."""
    for n in range(MIN_MODULI, MAX_COMPLEX_MODULI + 1):
        if complex_guaranteed_bits(n, k) >= bits:
            return n
    return MAX_COMPLEX_MODULI


def expected_complex_moduli(k2: int, elements: int) -> int:
    """Where the certificate's count search starts for a complex product, given the
    real embedding's reduction length ``k2 = 2k`` and output elements (``2 m n``, as the
    certificate's factor counts them): the analogue of
    :func:`~ozaki_backend.spec.rules.expected_moduli` (the fewest complex moduli whose
    guaranteed bits reach ``EXPECTED_BITS`` less the native scale's relief). Only a
    starting point: the count found does not depend on it."""
    g2 = min(max(int(k2), 1), NATIVE_K) / 2
    relief = math.floor(math.log2(g2) / 4) if g2 >= 1 else 0
    return complex_moduli_for_bits(EXPECTED_BITS - relief, max(k2 // 2, 1))


def pairwise_coprime(moduli) -> bool:
    """Whether the moduli are pairwise coprime."""
    mods = list(moduli)
    return all(math.gcd(a, b) == 1 for i, a in enumerate(mods) for b in mods[i + 1:])
