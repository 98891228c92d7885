"""The exactness invariant ``sum_k |A'_ik| |B'_kj| <= H = M/2 - 1`` on adversarial inputs.

This is what makes CRT recovery exact (``docs/spec.md`` §2). It is checked here with
Python integers (object arrays: no rounding anywhere), for both scaling modes and every
moduli count 2..20, on inputs chosen to stress the bound: all-positive matrices (where
Cauchy–Schwarz and the bound GEMM are tightest), φ = 4 exponent spreads (where a
published fast-mode formula overflows the CRT range), single huge elements, rows and
columns of wildly different scales, subnormals, and quantisation edge values. A final
group checks the other direction: the scaling does not waste range.
"""

import numpy as np
import pytest

from ozaki_backend.spec.moduli import MAX_MODULI, MIN_MODULI, crt_constants
from ozaki_backend.plan import Plan
from ozaki_backend.reference import scaling
from ozaki_backend.testing import phi_matrix

ALL_N = list(range(MIN_MODULI, MAX_MODULI + 1))
_to_int = np.vectorize(int, otypes=[object])


def exact_bound_matrix(A, B, N, mode):
    """``(S, H)``: the exact integer matrix ``sum_k |A'_ik||B'_kj|`` and ``H``."""
    m, k = A.shape
    n = B.shape[1]
    plan = Plan(m, n, k, moduli=N, mode=mode)
    s, t = scaling.exponents(A, B, plan)
    Ai = scaling.truncate(A, s)
    Bi = scaling.truncate(B.T, t).T
    # A' and B' are integers held in float64; int() of each is exact.
    a = _to_int(np.abs(Ai))
    b = _to_int(np.abs(Bi))
    return a @ b, crt_constants(N).H


def assert_invariant(A, B, N, mode):
    S, H = exact_bound_matrix(A, B, N, mode)
    worst = max((max(row) for row in S.tolist()), default=0)
    assert worst <= H, f"invariant broken: {worst} > H = {H} (N={N}, {mode})"
    return worst, H


def _adversarial(rng):
    """Named (A, B) pairs, small enough for exact object-array products."""
    cases = {}
    m, k, n = 6, 48, 5
    cases["positive-uniform"] = (rng.random((m, k)), rng.random((k, n)))
    cases["positive-ones"] = (np.ones((m, k)), np.ones((k, n)))
    # Just below a power of two: every quantised value rounds up to 2^D exactly.
    below = np.nextafter(1.0, 0.0)
    cases["positive-just-below-pow2"] = (np.full((m, k), below), np.full((k, n), below * 8))
    cases["positive-phi4"] = (np.abs(phi_matrix((m, k), 4, rng)),
                              np.abs(phi_matrix((k, n), 4, rng)))
    cases["signed-phi4"] = (phi_matrix((m, k), 4, rng), phi_matrix((k, n), 4, rng))
    cases["phi4-long"] = (np.abs(phi_matrix((3, 1500), 4, rng)),
                          np.abs(phi_matrix((1500, 3), 4, rng)))
    A = np.full((m, k), 1e-3)
    A[np.arange(m), rng.integers(0, k, m)] = 1e3      # one huge element per row
    B = np.full((k, n), 2e-3)
    B[rng.integers(0, k, n), np.arange(n)] = 7e2      # and per column
    cases["single-huge"] = (A, B)
    A = np.ones((m, k))
    B = np.ones((k, n))
    A[:, 0] = 2.0**60                                  # the huge ones meet
    B[0, :] = 2.0**60
    cases["huge-meets-huge"] = (A, B)
    A = rng.random((m, k)) * np.ldexp(1.0, rng.integers(-900, 900, (m, 1)))
    B = rng.random((k, n)) * np.ldexp(1.0, rng.integers(-900, 900, (1, n)))
    cases["row-col-scales"] = (A, B)
    A = rng.random((m, k))
    A[:, : k // 2] *= 2.0**-1070                       # subnormals beside normal values
    B = rng.random((k, n))
    B[::3] *= 2.0**-1060
    cases["subnormals"] = (A, B)
    A = np.abs(rng.standard_normal((m, k)))
    A[1] = 0.0                                         # zero row and column
    B = np.abs(rng.standard_normal((k, n)))
    B[:, 2] = 0.0
    cases["zero-row-col"] = (A, B)
    cases["k1"] = (rng.random((m, 1)) + 0.5, rng.random((1, n)) + 0.5)
    # Binary-power edges of the quantiser: 2^(E-1) exactly and just above it.
    A = np.where(rng.random((m, k)) < 0.5, 0.5, np.nextafter(0.5, 1.0))
    cases["quantiser-edges"] = (A, A.T.copy())
    return cases


CASES = _adversarial(np.random.default_rng(2024))


@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_invariant_all_moduli(name, mode):
    A, B = CASES[name]
    for N in ALL_N:
        assert_invariant(A, B, N, mode)


@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_invariant_phi4_many_seeds(mode):
    """φ = 4 is where GEMMul8 v3's fast-mode rule exceeds the CRT range at every N."""
    for seed in range(6):
        rng = np.random.default_rng(seed)
        A = phi_matrix((5, 200), 4, rng)
        B = phi_matrix((200, 4), 4, rng)
        if seed % 2:
            A, B = np.abs(A), np.abs(B)
        for N in ALL_N:
            assert_invariant(A, B, N, mode)


@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_invariant_long_k(mode):
    """k beyond the INT32 chunk (65536): the bound covers the whole reduction."""
    k = 70000
    rng = np.random.default_rng(3)
    A = rng.random((2, k)) + 0.5
    B = rng.random((k, 2)) + 0.5
    for N in (2, 9, 16, 20):
        assert_invariant(A, B, N, mode)


def _tightness(mode, c, d, N, k=64):
    m = n = 4
    A = np.full((m, k), c)
    B = np.full((k, n), d)
    S, H = exact_bound_matrix(A, B, N, mode)
    return max(max(row) for row in S.tolist()) / H


@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("c", [1.0, np.nextafter(1.0, 0.0), 0.75, np.nextafter(0.5, 1.0)])
def test_scaling_not_wastefully_loose(mode, c):
    """All-equal positive matrices: the bound comes within a small factor of H.

    Derived factors, before truncation to integers: fast mode keeps
    ``4^q S > H_f / 4`` with Cauchy–Schwarz tight for equal vectors, and quantisation
    loses at most ``1/2^(D-1)`` per operand (``D = 16``); accurate mode keeps
    ``2^(sigma+tau) P > H_f / 2`` and loses at most ``1/33`` per operand to
    quantisation (``alpha >= 32``). Truncation costs ``< 1/|A'|`` per operand, which
    is below 2^-20 from N = 8 on. For every N the ratio must exceed 1/16.
    """
    floor = (0.25 * (1 - 2.0**-15) ** 2 if mode == "fast" else 0.5 * (32 / 33) ** 2)
    for N in ALL_N:
        r = _tightness(mode, c, 3 * c, N)
        assert r <= 1
        assert r > 1 / 16, (N, r)
        if N >= 8:
            assert r >= floor * (1 - 2.0**-18), (N, r)

