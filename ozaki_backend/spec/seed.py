"""The seed scheme ``scheme="phase22"``: its primes, CRT tables, split and limits (``docs/spec.md`` §9).

Everything is computed here with exact Python integers, at import, from the seven
primes alone, so the table cannot drift from the primes (the seed's own debugging
advice: never mix a coefficient table with another prime set). The numbers printed in
the seed posts (``M``, the prefix products, the seven ``nl = 7`` coefficients) are
checked against these in ``tests/spec/test_seed_tables.py``. Both engines (and the
generated CUDA prelude) read every constant of the scheme from here.

Layout (the seed's CUDA ``__constant__`` tables, whose names appear in brackets):

``PRIMES`` (``d_primes[7]``)
    ``127, 113, 109, 107, 103, 101, 97``: all below 128, so residues in ``[0, p)`` are
    ``0..126`` and fit a signed ``int8_t`` without changing sign.
``M_PREFIX`` (``d_M_arr[8]``)
    Prefix products ``M_nl = p_1 ... p_nl``; entry 0 is reserved (``1``, the empty
    product).
``coeffs_flat`` (``d_coeffs_flat[29]``)
    For each ``nl = 1..7`` the ``nl`` coefficients
    ``f_i = (M_nl / p_i) * ((M_nl / p_i)^-1 mod p_i)`` of the prefix ``M_nl``, stored
    one after another; entry 0 is reserved (``0``).
``coeff_offsets`` (``d_coeff_offsets[8]``)
    ``{0, 1, 2, 4, 7, 11, 16, 22}``: the ``nl`` coefficients live at
    ``coeffs_flat[offset[nl] : offset[nl] + nl]`` (``1 + 2 + ... + (nl - 1)`` after
    the reserved slot).

Reconstruction of an integer ``x`` with ``|x| < M_nl / 2`` from ``r_i = x mod p_i``::

    s = (sum_i r_i * f_i) mod M_nl
    x = s - M_nl  if s > M_nl / 2  else s
"""

from __future__ import annotations

import math

#: The seed's primes, in the order used (prefix ``nl`` uses the first ``nl``).
PRIMES = (127, 113, 109, 107, 103, 101, 97)

#: Number of primes.
NPRIMES = len(PRIMES)

#: Product of all seven primes (about 1.69e14, 47.26 bits).
M = math.prod(PRIMES)
assert M == 168897325606883, M


def _prefix_products(primes):
    out = [1]  # entry 0: the empty product, reserved
    for p in primes:
        out.append(out[-1] * p)
    return tuple(out)


#: ``M_PREFIX[nl] = p_1 * ... * p_nl`` for ``nl = 1..7``; ``M_PREFIX[0] = 1`` (reserved).
M_PREFIX = _prefix_products(PRIMES)
assert M_PREFIX[NPRIMES] == M


def coefficients_for(primes) -> tuple[int, ...]:
    """CRT coefficients ``f_i = (M / p_i) * ((M / p_i)^-1 mod p_i)`` for any coprime set.

    Parameters
    ----------
    primes : sequence of int
        Pairwise coprime moduli; ``M`` is their product.

    Returns
    -------
    tuple of int
        One coefficient per modulus, in ``[0, M)``.

    Examples
    --------
    The seed's Day 5 example: 3, 5, 7 and the residues 2, 3, 2 give back 23.

    >>> coefficients_for((3, 5, 7))
    (70, 21, 15)
    >>> (2 * 70 + 3 * 21 + 2 * 15) % 105
    23
    """
    Mn = math.prod(primes)
    out = []
    for p in primes:
        Mi = Mn // p
        out.append(Mi * pow(Mi % p, -1, p))
    return tuple(out)


def crt_coefficients(nl: int) -> tuple[int, ...]:
    """CRT coefficients of the prefix of ``nl`` primes, exactly.

    Parameters
    ----------
    nl : int
        Number of primes, ``1 <= nl <= 7``.

    Returns
    -------
    tuple of int
        ``f_i = (M_nl / p_i) * ((M_nl / p_i)^-1 mod p_i)`` for ``i < nl``; each is
        ``1 mod p_i``, ``0 mod p_j`` (``j != i``, ``j < nl``) and lies in ``[0, M_nl)``.

    Raises
    ------
    ValueError
        If ``nl`` is outside ``1..7`` (the seed's "nl 沒有防呆" pitfall).
    """
    if isinstance(nl, bool) or not isinstance(nl, int) or not 1 <= nl <= NPRIMES:
        raise ValueError(f"nl must be an int in [1, {NPRIMES}]; got {nl!r}")
    return coefficients_for(PRIMES[:nl])


def _flat_table():
    flat = [0]  # entry 0: reserved
    offsets = [0]  # offsets[0]: reserved (nl = 0 is not a valid prefix)
    for nl in range(1, NPRIMES + 1):
        offsets.append(len(flat))
        flat.extend(crt_coefficients(nl))
    return tuple(flat), tuple(offsets)


#: The 29-entry flat coefficient table (entry 0 reserved).
#: ``coeffs_flat[coeff_offsets[nl] + i]`` is coefficient ``i`` of prefix ``nl``.
coeffs_flat, coeff_offsets = _flat_table()
assert len(coeffs_flat) == 1 + NPRIMES * (NPRIMES + 1) // 2 == 29
assert coeff_offsets == (0, 1, 2, 4, 7, 11, 16, 22)


#: Ozaki split scales: ``hi = round(v * 2**SHIFT_HI)``, ``lo = round((v - hi * 2**-SHIFT_HI) * 2**SHIFT_LO)``.
SHIFT_HI = 17
SHIFT_LO = 34

#: The four passes ``(A slice, B slice, exponent of the scale)`` in accumulation order:
#: hi x hi -> 2^-34, hi x lo -> 2^-51, lo x hi -> 2^-51, lo x lo -> 2^-68.
PASSES = (("hi", "hi", -2 * SHIFT_HI),
          ("hi", "lo", -SHIFT_HI - SHIFT_LO),
          ("lo", "hi", -SHIFT_LO - SHIFT_HI),
          ("lo", "lo", -2 * SHIFT_LO))

#: Longest k chunk: the largest power of two with ``K * 2**17 * 2**17 < M / 2``
#: (``|hi| <= 2**17``), the seed's ``K * 2^34 < M/2`` limit. 4096 * 2^34 = 2^46 <
#: M/2 ~ 2^46.26, while 8192 * 2^34 is not.
K_CHUNK_MAX = 4096
assert 2 * K_CHUNK_MAX * 2 ** (2 * SHIFT_HI) < M <= 2 * (2 * K_CHUNK_MAX) * 2 ** (2 * SHIFT_HI)

# --- Division constants for the later CUDA fused kernel (data only; the CPU engine
# uses exact integer `%`). ---

#: Barrett constant of the seed for ``x mod M`` with 64-bit ``x``:
#: ``mu = floor(2**64 / M) = 109218``. With ``q = umulhi64(x, mu)``,
#: ``x/M - 1 < x*mu/2**64 <= x/M`` for ``x < 2**64``, so ``q`` is ``floor(x/M)`` or one
#: less and ``r = x - q*M`` needs at most one ``if (r >= M) r -= M``.
BARRETT_MU = 2 ** 64 // M
assert BARRETT_MU == 109218

#: Magic multipliers for ``x mod p`` with 32-bit ``x`` (the seed's ``__umulhi`` trick):
#: ``magic[p] = floor(2**32 / p)``; for ``0 <= x < 2**32``, ``q = umulhi32(x, magic)`` is
#: ``floor(x/p)`` or one less (same argument as :data:`BARRETT_MU`), so one conditional
#: subtraction finishes. A chunk's accumulator is at most ``126**2 * 4096 < 2**32``.
MAGIC_U32 = tuple(2 ** 32 // p for p in PRIMES)
assert 126 ** 2 * K_CHUNK_MAX < 2 ** 32

#: Output tile of the adaptive prime count (the seed's fused kernel): 128 rows of A x
#: 64 columns of B share one ``nl`` per pass and k chunk.
TILE_M = 128
TILE_N = 64

#: Longest k: the exact int64 sum of the chunk integers of a pass cannot overflow,
#: ``|x_pass| <= k * 2^17 * 2^17 <= 2^63 - 1`` needs ``k <= 2^29 - 1``.
K_MAX = 2 ** 29 - 1


def reconstruct_int(residues, nl: int) -> int:
    """Scalar CRT reconstruction exactly as the seed's kernel writes it (Python ints).

    Parameters
    ----------
    residues : sequence of int
        ``r_i`` in ``[0, p_i)`` for at least the first ``nl`` primes.
    nl : int
        Prefix length, ``1..7``.

    Returns
    -------
    int
        The unique ``x`` with ``x = r_i mod p_i`` (``i < nl``) and
        ``-M_nl/2 < x < M_nl/2`` (``M_nl`` is odd).
    """
    f = crt_coefficients(nl)
    Mn = M_PREFIX[nl]
    s = 0
    for i in range(nl):
        r = int(residues[i])
        if not 0 <= r < PRIMES[i]:
            raise ValueError(f"residue {r} for prime {PRIMES[i]} is outside [0, p)")
        s = (s + r * f[i]) % Mn
    # M_nl is odd, so "s > M_nl/2" is "2*s > M_nl" with no rounding question.
    return s - Mn if 2 * s > Mn else s


__all__ = ["PRIMES", "NPRIMES", "M", "M_PREFIX", "coeffs_flat", "coeff_offsets",
           "coefficients_for", "crt_coefficients", "SHIFT_HI", "SHIFT_LO", "PASSES",
           "K_CHUNK_MAX", "BARRETT_MU", "MAGIC_U32", "TILE_M", "TILE_N", "K_MAX",
           "reconstruct_int"]
