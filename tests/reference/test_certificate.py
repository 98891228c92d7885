"""Stage 5 (the certificate, ``docs/spec.md`` §10) of the CPU reference, piece by
piece: the exactness thresholds, the non-zero ranges, the monotone count, and the rigour
of the bound end to end. The formulas themselves (the bound GEMM's two bounds of
``|A||B|``, the target's relation to ``gamma_k``, structural zeros) are checked in
``tests/spec/test_certificate_formulas.py``."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ozaki_backend as ob
from ozaki_backend.reference import certificate, equilibrate, scaling
from ozaki_backend.spec.moduli import MAX_MODULI, MIN_MODULI
from ozaki_backend.spec.rules import expected_moduli
from ozaki_backend.testing import exact_matmul, phi_matrix

U = 2.0 ** -53

def _threshold(x: float) -> int:
    """Smallest s with x 2^s an integer, from the exact rational value."""
    f = Fraction(x)
    if f.denominator > 1:
        return f.denominator.bit_length() - 1        # a power of two
    n = abs(f.numerator)
    return -((n & -n).bit_length() - 1)


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False).filter(lambda v: v != 0))
def test_exact_threshold_of_any_float(x):
    got = int(scaling.exact_thresholds(np.array([[x]]))[0])
    assert got == _threshold(x)
    assert (Fraction(x) * Fraction(2) ** got).denominator == 1
    assert (Fraction(x) * Fraction(2) ** (got - 1)).denominator != 1


def test_thresholds_and_ranges_of_rows():
    X = np.array([[0.0, 1.5, 0.0, 3.0, 0.0],
                  [0.0, 0.0, 0.0, 0.0, 0.0],
                  [5e-324, 0.0, 0.0, 0.0, 2.0 ** 60]])
    np.testing.assert_array_equal(scaling.exact_thresholds(X), [1, scaling.NO_THRESHOLD, 1074])
    lo, hi = scaling.k_ranges(X)
    np.testing.assert_array_equal(lo, [1, 5, 0])
    np.testing.assert_array_equal(hi, [3, -1, 4])


def test_counts_are_monotone_and_match_every_single_test():
    rng = np.random.default_rng(5)
    A, B = phi_matrix((10, 200), 2.0, rng), phi_matrix((200, 8), 2.0, rng)
    for mode in ("fast", "accurate"):
        st_ = scaling.statistics(A, B, mode)
        need = certificate.element_counts(st_, mode)
        prev = np.zeros(need.shape, dtype=bool)
        for N in range(MIN_MODULI, MAX_MODULI + 1):
            s, t = scaling.shifts(st_, N, mode)
            ok = certificate.passes(st_, s, t)
            assert (ok >= prev).all(), N            # once passed, passed for every larger N
            np.testing.assert_array_equal(ok, (need > 0) & (need <= N))
            prev = ok


def test_shifts_never_decrease_with_the_count():
    """Monotonicity of the count (docs/spec.md §10.3) rests on this."""
    rng = np.random.default_rng(6)
    A, B = phi_matrix((20, 70), 4.0, rng), phi_matrix((70, 11), 4.0, rng)
    for mode in ("fast", "accurate"):
        st_ = scaling.statistics(A, B, mode)
        prev = None
        for N in range(MIN_MODULI, MAX_MODULI + 1):
            s, t = scaling.shifts(st_, N, mode)
            if prev is not None:
                assert (s >= prev[0]).all() and (t >= prev[1]).all()
            prev = (s, t)


@pytest.mark.parametrize("k", [16, 256, 4096])
def test_ordinary_data_certifies_with_the_expected_count(k):
    rng = np.random.default_rng(k)
    A, B = rng.standard_normal((48, k)), rng.standard_normal((k, 40))
    for mode in ("fast", "accurate"):
        N = ob.plan(48, 40, k, mode=mode).moduli_for(A, B)
        assert abs(N - expected_moduli(k, 48 * 40)) <= 1, (mode, k, N)


def test_fewer_moduli_miss_the_target_on_ordinary_data():
    """The target is not vacuous: two moduli fewer than the count miss it."""
    rng = np.random.default_rng(9)
    A, B = rng.standard_normal((32, 1000)), rng.standard_normal((1000, 32))
    st_ = scaling.statistics(*equilibrate.equilibrate(A, B)[:2], "accurate")
    N, ok = certificate.choose_count(st_, "accurate")
    assert ok and not certificate.certified(st_, N - 1, "accurate")


def test_bound_is_rigorous_for_every_count():
    """|C - AB| <= bound for any fixed count, however few moduli (exact oracle: C - E
    within bound + half an ulp of E, E being AB rounded once)."""
    rng = np.random.default_rng(10)
    A, B = phi_matrix((16, 300), 2.0, rng), phi_matrix((300, 12), 2.0, rng)
    E = exact_matmul(A, B)
    for mode in ("fast", "accurate"):
        for N in (3, 8, 13, 17, 20):
            C, bound = ob.matmul(A, B, moduli=N, mode=mode, engine="cpu", return_bound=True)
            assert (np.abs(C - E) <= bound + U * np.abs(E)).all(), (mode, N)


def test_return_bound_shapes_and_scheme():
    rng = np.random.default_rng(11)
    a = rng.standard_normal((3, 4, 5))
    b = rng.standard_normal((5, 6))
    C, bound = ob.matmul(a, b, engine="cpu", return_bound=True)
    assert C.shape == bound.shape == (3, 4, 6) and (bound >= 0).all()
    v = rng.standard_normal(5)
    c, bd = ob.matmul(v, v, engine="cpu", return_bound=True)
    assert np.ndim(c) == 0 and np.ndim(bd) == 0
    bad = a.copy()
    bad[0, 0, 0] = np.nan
    C, bound = ob.matmul(bad, b, engine="cpu", return_bound=True)
    assert np.isinf(bound).all()                   # NumPy computed it: no certificate
    with pytest.raises(ValueError, match="ozaki2"):
        ob.matmul(a, b, scheme="phase22", engine="cpu", return_bound=True)


def test_escalation_order_residual_then_native():
    """Crossed magnitudes no moduli count resolves: the residual pass where its bound
    meets the target, the native GEMM (warned, counted) where not."""
    big, small = 2.0 ** 100, 2.0 ** -100
    rng = np.random.default_rng(12)
    n = 24
    # block pattern: each row of A mixes huge and tiny entries that meet B's opposite
    A = np.where(rng.random((n, n)) < 0.5, big, small) * rng.uniform(1, 2, (n, n))
    B = np.where(A.T > 1, small, big) * rng.uniform(1, 2, (n, n))
    ob.reset_stats()
    C, bound = ob.matmul(A, B, engine="cpu", return_bound=True)
    E = exact_matmul(A, B)
    assert (np.abs(C - E) <= bound + U * np.abs(E)).all()
    outcomes = ob.stats()["certificate"]
    assert set(outcomes) <= {"certified", "residual pass", "native fallback"}
    with pytest.warns(ob.NativeFallbackWarning):
        x = np.array([[1e30, 1e-30], [1e-30, 1e30]])
        y = np.array([[1e-30, 1e30], [1e30, 1e-30]])
        r = ob.matmul(x, y, engine="cpu")
    np.testing.assert_array_equal(r, x @ y)
