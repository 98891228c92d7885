"""The rules that turn options and shapes into counts (``docs/spec.md`` §1, §2, §10).

Quantisation widths of the scaling and the bound GEMM, the bits a moduli count
guarantees, the count a ``bits=`` request needs, and the certificate's target. Pure
functions of integers: the plan and both engines call them, so they cannot disagree.
"""

from __future__ import annotations

import math

from .moduli import MAX_MODULI, MIN_MODULI, crt_constants

#: Quantisation bits of the bound GEMM (both modes, ``docs/spec.md`` §2.3):
#: ``alpha = floor(|a| 2^(D - E)) <= 2^D - 1 = 127`` fits int8.
BOUND_D = 7

#: Longest k whose bound GEMM is exact in int32: ``k * 127**2 <= 2**31 - 1``.
BOUND_KMAX = (2 ** 31 - 1) // (2 ** BOUND_D - 1) ** 2

#: The certificate's target constant (``docs/spec.md`` §10.2): the certified truncation
#: error of ``C_ij`` is at most ``c_k`` units of roundoff times ``(|A||B|)_ij`` with
#: ``c_k = min(k - 1, floor(sqrt(k)), CERT_C)``.
CERT_C = 16


def certificate_factor(k: int) -> int:
    """``c_k = min(k - 1, floor(sqrt(k)), CERT_C)``.

    ``c_k <= k - 1`` makes the target imply the bound ``gamma_k (|A||B|)_ij`` that every
    correct DGEMM satisfies; ``c_k <= sqrt(k)`` follows what native DGEMM achieves in
    practice (its rounding errors grow like ``sqrt(k) u |A||B|`` on data of random sign),
    so that short products are as accurate as native ones too; ``CERT_C`` keeps long
    ones within a factor 2 of native's measured error (``docs/precision.md``).
    """
    k = int(k)
    return max(0, min(k - 1, math.isqrt(max(k, 0)), CERT_C))


def fast_quant_bits(k: int) -> int:
    """``D`` of the fast mode: every ``S_i <= k 4^D`` stays below 2**53."""
    return min(16, (53 - max(int(k), 1).bit_length()) // 2)


def guaranteed_bits(n_moduli: int, k: int) -> int:
    """Bits kept of each row's (column's) largest element, guaranteed for any data.

    Both scaling modes give ``s_i + E_i >= floor((log2 H - log2 k) / 2)``
    (``docs/spec.md`` §2), i.e. the largest integer ``b`` with ``H >= k * 4**b``.
    """
    H = crt_constants(n_moduli).H
    k = max(int(k), 1)
    b = (H // k).bit_length() - 1  # floor(log2(H // k)) == floor(log2(H / k))
    return b // 2


def moduli_for_bits(bits: int, k: int) -> int:
    """Fewest moduli whose :func:`guaranteed_bits` reach ``bits`` at this ``k``."""
    for n in range(MIN_MODULI, MAX_MODULI + 1):
        if guaranteed_bits(n, k) >= bits:
            return n
    return MAX_MODULI


# --------------------------------------------------------------------- precision="fp64"

def expected_moduli(k: int) -> int:
    """The moduli count ``precision="fp64"`` certifies with on ordinary data (entries
    of one order of magnitude, as N(0,1)): the fewest whose guaranteed bits reach
    ``EXPECTED_BITS``. Only an estimate (the cost model's, and the printed plan's); the
    count of a product is always its certificate's (``docs/spec.md`` §10.3)."""
    return moduli_for_bits(EXPECTED_BITS, k)


#: Guaranteed bits per operand at which ordinary data certifies (measured on N(0,1)
#: operands, k = 16 ... 65536; ``tests`` check the estimate within one modulus).
EXPECTED_BITS = 51
