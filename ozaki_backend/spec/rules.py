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

#: The certificate's target (``docs/spec.md`` §10.2): the certified truncation error of
#: ``C_ij`` is at most ``c u (|A||B|)_ij`` with ``c = min(k_ij - 1, CERT_C, isqrt(k_ij) / d)``,
#: ``k_ij`` the number of k where row i of A and column j of B may both be non-zero (k for
#: dense operands), ``d = CERT_DIV`` for outputs of at least ``CERT_SMALL`` elements,
#: ``CERT_SMALL_DIV`` below.
CERT_C = 16
CERT_DIV = 8
CERT_SMALL = 2 ** 16
CERT_SMALL_DIV = 32


def certificate_divisor(elements: int) -> int:
    """``d`` of the certificate's factor ``isqrt(k) / d`` for a product of ``elements =
    m n`` output elements: ``CERT_DIV``, or ``CERT_SMALL_DIV`` below ``CERT_SMALL``."""
    return CERT_DIV if int(elements) >= CERT_SMALL else CERT_SMALL_DIV


def certificate_factor(k: int, elements: int) -> float:
    """The certificate's factor ``c`` of an element summing ``k`` terms (the overlap of
    its row's and column's non-zero ranges along k; the reduction length for dense
    operands) in a product of ``elements = m n`` output elements:
    ``min(k - 1, CERT_C, isqrt(k) / d)``, ``d = 8`` (32 when ``m n < 2**16``); 0 for
    ``k <= 1``. A float with at most ten significant bits (a multiple of 1/32 below
    16), so ``c * P`` and ``c * u`` are the same IEEE operation on both engines
    (:func:`ozaki_backend.spec.certificate.factor` is the element-wise form).

    Why this shape (``docs/precision.md``, "How the target was chosen"):

    * ``c <= k - 1``: with the final rounding, ``(c + 1) u <= gamma_k``, so a certified
      product meets the bound ``gamma_k (|A||B|)_ij`` of every correct DGEMM (with the
      element's own ``k``, a tighter bound still).
    * per element: banded, triangular and block operands sum few terms in some
      elements, where native DGEMM's error is small too.
    * ``c`` grows like ``sqrt(k)``: a truncation error bound of ``c u (|A||B|)_ij`` made of
      ``k`` terms of random sign gives errors near ``c u (|A||B|)_ij / sqrt(k)``, while
      native DGEMM's rounding errors are near ``u (|A||B|)_ij``; ``sqrt(k) / 8`` keeps the
      emulation's typical error an eighth of native's at every ``k``.
    * a four times tighter target for small outputs: the max relative error of a
      product with few elements is decided by one or two strongly cancelling
      elements, where native's error is a single draw that is sometimes far below its
      typical size; the margin covers those draws (measured: ``docs/precision.md``).
      Small products are cheap, so the extra modulus it sometimes costs is too.
    * ``CERT_C`` caps it (from ``k = 16384``) at the largest factor whose measured
      errors stay within the factor-2 goal at ``k = 65536``.
    """
    k = int(k)
    if k <= 1:
        return 0.0
    return float(min(k - 1, CERT_C, math.isqrt(k) / certificate_divisor(elements)))


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

def expected_moduli(k: int, elements: int = CERT_SMALL) -> int:
    """The moduli count ``precision="fp64"`` certifies with on ordinary data (entries
    of one order of magnitude, as N(0,1)) for a product of reduction length ``k`` and
    ``elements = m n`` output elements: the fewest whose guaranteed bits reach
    ``EXPECTED_BITS`` at the factor ``CERT_C``, plus half a bit per halving of the
    target's factor below it (each operand keeps half of the extra bits the product
    needs), rounded. Only an estimate (the cost model's, the printed plan's and the
    GPU's starting point of the count search); the count of a product is always its
    certificate's (``docs/spec.md`` §10.3)."""
    c = certificate_factor(k, elements)
    extra = round(math.log2(CERT_C / c) / 2) if c > 0 else 0
    return moduli_for_bits(EXPECTED_BITS + extra, k)


#: Guaranteed bits per operand at which ordinary data certifies (measured on N(0,1)
#: operands, k = 16 ... 65536; ``tests`` check the estimate within one modulus).
EXPECTED_BITS = 51
