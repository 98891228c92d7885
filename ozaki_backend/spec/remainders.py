"""Exact remainders on the accumulators: the constants the fused kernel uses, with proofs.

The fused product kernel (``kernels/modprod.cu``) reduces each int32 accumulator ``x``
modulo a small modulus ``p`` without a division:

    u = x + bias_p                      (bias_p = p * ceil(2^30 / p), so u >= 0)
    q = umulhi(u, m_p) >> s_p           (the "magic number" quotient)
    r = u - q p                         (in [0, p), and r = x mod p)

This module computes ``(m_p, s_p, bias_p)`` for every modulus and proves, with Python
integers, that ``q = floor(u / p)`` for every ``u`` the kernel can produce. Nothing
here needs a GPU; the tests check the boundary values directly, and the GPU tests run
the kernel at the largest accumulators.

Ranges (``docs/spec.md`` §5):

* residues lie in ``[-128, 127]`` (Ozaki II) or ``[0, 126]`` (seed scheme), so one
  product term is at most ``2^14`` in magnitude;
* the kernel folds the accumulator into ``[0, p)`` after every :data:`FOLD_K` terms, so
  before a reduction ``|x| <= FOLD_K * 2^14 + 255 <= X_MAX < 2^30``;
* hence ``0 <= u < U_MAX = X_MAX + bias_max + 1 <= 2^31 + 2^9``.
"""

from __future__ import annotations

from functools import lru_cache

#: k terms between two folds in the kernel (511 k-blocks of 128).
FOLD_K = 511 * 128  # = 65408, OZ_FOLD_K in kernels/modprod.cu
#: Largest |accumulator| the kernel ever reduces.
X_MAX = FOLD_K * 2 ** 14 + 255
#: Exclusive bound of ``u = x + bias``: every bias is below ``2^30 + 256`` (p <= 256).
U_MAX = X_MAX + 2 ** 30 + 256


def bias(p: int) -> int:
    """``p * ceil(2^30 / p)``: the smallest multiple of ``p`` that is ``>= 2^30``."""
    return p * -(-(2 ** 30) // p)


def magic_exact(p: int, m: int, s: int, u_max: int) -> bool:
    """Whether ``(u * m) >> (32 + s) == u // p`` for every ``0 <= u < u_max``.

    Write ``m p = 2^(32+s) + e``. For ``u = q p + r`` (``0 <= r < p``),
    ``u m / 2^(32+s) = q + (r + u e / 2^(32+s)) / p``, so the floor is ``q`` for every
    such ``u`` exactly when ``e >= 0`` and ``r + u e / 2^(32+s) < p`` for all of them;
    the worst case is ``r = p - 1`` with the largest ``u``, i.e.
    ``(u_max - 1) e < 2^(32+s)`` (and ``e < 0`` fails already at ``u = p``).
    """
    e = m * p - 2 ** (32 + s)
    return e >= 0 and (u_max - 1) * e < 2 ** (32 + s)


@lru_cache(maxsize=None)
def magic(p: int, u_max: int = U_MAX) -> tuple[int, int]:
    """``(m, s)``: the smallest shift whose ``m = ceil(2^(32+s) / p) < 2^32`` is exact.

    Raises
    ------
    ValueError
        If no 32-bit multiplier is exact on ``[0, u_max)`` for this ``p``.
    """
    p = int(p)
    if not 2 <= p <= 256:
        raise ValueError(f"modulus must lie in [2, 256], got {p}")
    for s in range(0, 32):
        m = -(-(2 ** (32 + s)) // p)
        if m >= 2 ** 32:
            break
        if magic_exact(p, m, s, u_max):
            return m, s
    raise ValueError(f"no exact 32-bit magic multiplier for p = {p} on [0, {u_max})")


def umod(x: int, p: int) -> int:
    """The kernel's remainder of ``x`` (``|x| <= X_MAX``), emulated with Python ints."""
    if abs(x) > X_MAX:
        raise ValueError(f"|x| = {abs(x)} exceeds the kernel's range {X_MAX}")
    m, s = magic(p)
    u = (x + bias(p)) & 0xFFFFFFFF
    q = ((u * m) >> 32) >> s
    return (u - q * p) & 0xFFFFFFFF
