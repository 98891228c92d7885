"""Stage 0 (equilibration along k, ``docs/spec.md`` §2.1): exact, scale-pattern free,
clamped to the normal range, and unchanged by scaling an operand."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ozaki_backend.reference import equilibrate
from ozaki_backend.testing import exact_matmul

from bits import assert_same_bits


def test_two_sided_scaling_along_k_is_removed():
    """A = X D, B = D^-1 Y with D = 2^e: the exponents follow e (up to one constant and
    the rounding of the halving), so the equilibrated operands no longer carry D."""
    rng = np.random.default_rng(0)
    k = 300
    e = rng.integers(-300, 301, k)
    X, Y = rng.standard_normal((20, k)), rng.standard_normal((k, 15))
    A, B = np.ldexp(X, e[None, :]), np.ldexp(Y, -e[:, None])
    S = equilibrate.shifts(A, B)
    S0 = equilibrate.shifts(X, Y)
    resid = (S - S0) - e
    assert np.ptp(resid) <= 2          # a common offset, up to the halving's rounding
    Ae, Be, _ = equilibrate.equilibrate(A, B)
    # Column maxima of A and row maxima of B now sit within a few binades of each other.
    amax = np.frexp(np.abs(Ae).max(axis=0))[1]
    bmax = np.frexp(np.abs(Be).max(axis=1))[1]
    assert np.ptp(amax - bmax) <= 8


def test_product_is_unchanged_exactly():
    rng = np.random.default_rng(1)
    k = 64
    e = rng.integers(-200, 201, k)
    A = np.ldexp(rng.standard_normal((9, k)), e[None, :])
    B = np.ldexp(rng.standard_normal((k, 7)), -e[:, None])
    Ae, Be, S = equilibrate.equilibrate(A, B)
    assert S.any()
    assert_same_bits(exact_matmul(Ae, Be), exact_matmul(A, B))
    # scaling by powers of two was exact: undoing it gives the operands back
    assert_same_bits(np.ldexp(Ae, S[None, :]), A)
    assert_same_bits(np.ldexp(Be, -S[:, None]), B)


def test_clamped_to_the_normal_range():
    """Columns holding subnormals are never scaled down, huge ones never overflow."""
    k = 6
    A = np.ones((3, k))
    B = np.ones((k, 2))
    A[:, 0] = 5e-324                  # subnormal column, B row huge: s_0 would be < 0
    B[0] = 1e300
    A[:, 1] = 1e308                   # huge column against a tiny row
    B[1] = 1e-300
    A[:, 2] = 1e-310                  # subnormal against subnormal: no room either way
    B[2] = 1e-310
    S = equilibrate.shifts(A, B)
    Ae, Be, _ = equilibrate.equilibrate(A, B)
    for X, Xe in ((A, Ae), (B, Be)):
        assert np.isfinite(Xe).all()
        # every element keeps its significand: scaling back is exact
    assert_same_bits(np.ldexp(Ae, S[None, :]), A)
    assert_same_bits(np.ldexp(Be, -S[:, None]), B)
    assert_same_bits(exact_matmul(Ae, Be), exact_matmul(A, B))


def test_zero_columns_and_balanced_data_are_left_alone():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((10, 40))
    B = rng.standard_normal((40, 8))
    A[:, 3] = 0.0
    B[5] = 0.0
    S = equilibrate.shifts(A, B)
    assert S[3] == 0 and S[5] == 0
    assert np.abs(S).max() <= 1        # N(0,1) on both sides: balanced already


@pytest.mark.parametrize("e", [1, -1, 7, -300, 600])
def test_scaling_an_operand_changes_nothing(e):
    rng = np.random.default_rng(3)
    D = np.ldexp(1.0, rng.integers(-40, 41, 50))
    A = rng.standard_normal((6, 50)) * D
    B = rng.standard_normal((50, 5)) / D[:, None]
    S = equilibrate.shifts(A, B)
    np.testing.assert_array_equal(equilibrate.shifts(np.ldexp(A, e), B), S)
    np.testing.assert_array_equal(equilibrate.shifts(A, np.ldexp(B, e)), S)


def test_idempotent():
    rng = np.random.default_rng(4)
    D = np.ldexp(1.0, rng.integers(-60, 61, 80))
    A = rng.standard_normal((5, 80)) * D
    B = rng.standard_normal((80, 4)) / D[:, None]
    Ae, Be, _ = equilibrate.equilibrate(A, B)
    assert not equilibrate.shifts(Ae, Be).any()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-1070, 1020), min_size=2, max_size=12),
       st.lists(st.integers(-1070, 1020), min_size=2, max_size=12), st.integers(0, 2 ** 32))
def test_any_exponents_stay_exact(ea, eb, seed):
    """Random exponents anywhere in the float64 range: the scaled operands are finite
    and scale back exactly (no element left the normal range or overflowed)."""
    rng = np.random.default_rng(seed)
    k = min(len(ea), len(eb))
    A = np.ldexp(rng.uniform(0.5, 1.0, (3, k)), np.array(ea[:k])[None, :])
    B = np.ldexp(rng.uniform(0.5, 1.0, (k, 2)), np.array(eb[:k])[:, None])
    Ae, Be, S = equilibrate.equilibrate(A, B)
    assert np.isfinite(Ae).all() and np.isfinite(Be).all()
    assert_same_bits(np.ldexp(Ae, S[None, :]), A)
    assert_same_bits(np.ldexp(Be, -S[:, None]), B)
