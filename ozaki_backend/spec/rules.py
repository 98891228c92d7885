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

#: The certificate (``docs/spec.md`` §10). Its target compares the scale of the
#: emulation's truncation error with the scale of native DGEMM's rounding error on the
#: data in hand: an element passes a count when ``W_ij <= KAPPA u nu_ij`` (``W``: the
#: truncation error's size, ``delta_i ||B_j||_2 + ||A_i||_2 rho_j`` bounded through
#: ``||a||_2^2 <= max|a| ||a||_1``; ``nu``: native's,
#: ``sqrt(min(k_ij, NATIVE_K) / 2) ||t_ij||_2`` from below, ``t`` the element's terms)
#: and its rigorous truncation bound is at most ``(k_ij - 1) u (|A||B|)_ij`` (never looser
#: than native's own ``gamma_k`` with the element's number of terms). All of them powers
#: of two, so that every scaling by them is exact on both engines.
KAPPA = 1.0
#: The native scale's growth with the number of terms stops here: blocked summation
#: (OpenBLAS, cuBLAS) keeps native's error about flat beyond a few thousand terms
#: (measured in ``docs/precision.md``).
NATIVE_K = 4096
#: Top entries per row of A and column of B whose products bound an element's largest
#: term from below (``docs/spec.md`` §10.2): they find the terms that decide native's
#: error on data whose rows span many binades.
GATHER_H = 8
#: The gathers run when more than this fraction of the operands' non-zero entries falls
#: below the bound GEMM's window (``alpha = 0``): wide-range data. Below it the bound GEMM
#: sees the terms that matter and the gathers are skipped (they change no count there).
GATHER_SHARE = 0.5
#: A product is computed with the fewest count at which at most this fraction of its
#: elements fails the a-priori test; those are then tested a posteriori.
POST_SHARE = 1 / 16
#: A real product is computed one count below that one when at most
#: ``OPTIMISTIC_SHARE`` of its elements, and at most ``OPTIMISTIC_FAILING`` times the
#: elements it can repair (``REPAIR_ELEMENTS``, ``REPAIR_TERMS``), fail a priori there
#: (``certificate.optimistic``): the a-posteriori test settles all but a few per cent of
#: those (measured: at most 8 %), the rest are repaired, and the product takes one
#: modulus fewer; it escalates to the count above when they are too many. Only for
#: outputs of at least ``OPTIMISTIC_ELEMENTS``: the a-posteriori test measures the
#: elements against native's error at the product's most ill-conditioned one, and in a
#: small output native's largest error is one lucky or unlucky draw (8 x 8 x 8 phi = 2
#: products came out 3x less accurate than NumPy's with it).
OPTIMISTIC_SHARE = 1 / 2
OPTIMISTIC_FAILING = 8
OPTIMISTIC_ELEMENTS = 2 ** 16
#: The a-posteriori test: an element that failed a priori passes when ``W_ij <=
#: POST_KAPPA rho |C_ij|`` (the product's relative error level, ``rho`` = native's typical
#: error at its most ill-conditioned element, ``NATIVE_TYPICAL u nu / |C|`` maximised over
#: the elements), at most ``POST_CAP`` times the element's own allowance.
POST_KAPPA = 0.25
NATIVE_TYPICAL = 0.125
POST_CAP = 2.0 ** 10
#: Elements the a-posteriori test leaves unsettled are recomputed as compensated dot
#: products when there are at most ``REPAIR_ELEMENTS`` of them and their terms number at
#: most ``REPAIR_TERMS``, or at most ``REPAIR_SHARE`` of the output's elements;
#: otherwise the product is escalated (computed again). Why the share: the unsettled
#: elements of a count grow with the output (16384^3 phi = 2 at 16 moduli: 9080), and a
#: fixed cap sent such products to a second computation (342 ms eager on the H200,
#: against 187 ms with the repairs on an H100); repairing 2^-12 of the
#: elements reads ``mnk / 2^8`` bytes, about 5 % of the time of 16 INT8 GEMMs of
#: ``2 mnk`` operations (4 TB/s against 1.6 POPS), where an escalation costs 100 %.
REPAIR_ELEMENTS = 4096
REPAIR_TERMS = 2 ** 27
REPAIR_SHARE_LOG2 = 12
#: Outputs with fewer elements than this are "small" for the cost model's estimates.
CERT_SMALL = 2 ** 16


def native_growth(k_terms: int) -> float:
    """``g(k) = sqrt(min(k, NATIVE_K) / 2)``: how native DGEMM's typical rounding error
    grows with the number of terms, relative to the terms' 2-norm (an element of ``k``
    terms of random sign: recursive summation's partial sums grow like ``sqrt(k)``;
    blocked summation stops the growth, ``NATIVE_K``). Evaluated as the engines do:
    one correctly rounded square root."""
    return math.sqrt(min(max(int(k_terms), 1), NATIVE_K) / 2)


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
    of one order of magnitude, as N(0,1)) for a product of reduction length ``k``: the
    fewest whose guaranteed bits reach ``EXPECTED_BITS`` less half a bit per doubling of
    the native scale's growth ``g(k)^2`` (:func:`native_growth`: the target grows with
    ``g(k)``, each operand keeps half of what the product may lose). Only an estimate
    (the cost model's, the printed plan's and the GPU's starting point of the count
    search); the count of a product is always its certificate's (``docs/spec.md``
    §10.3). ``elements`` is accepted for callers that pass the output size; the estimate
    does not depend on it."""
    g2 = min(max(int(k), 1), NATIVE_K) / 2
    relief = math.floor(math.log2(g2) / 4) if g2 >= 1 else 0
    return moduli_for_bits(EXPECTED_BITS - relief, k)


#: Guaranteed bits per operand at which ordinary data certifies before the native
#: scale's relief (calibrated on N(0,1) operands, k = 16 ... 65536; ``tests`` check the
#: estimate within one modulus).
EXPECTED_BITS = 54
