"""The test utilities themselves: exact oracle, φ generator, error metric, error bound.

The oracle is checked against Python's ``fractions.Fraction`` (exact rationals, and
``float(Fraction)`` is correctly rounded), on the cases that break naive summation:
catastrophic cancellation, ties, sticky bits, subnormals, overflow.
"""

import math
from fractions import Fraction

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.testing import (error_bound, exact_matmul, max_relative_error,
                                   native_error_level, phi_matrix, reference_blas_matmul,
                                   relative_errors)

from bits import assert_same_bits

U = 2.0**-53
ETA = 2.0**-1074
DBL_MAX = np.finfo(np.float64).max


def fraction_matmul(A, B):
    """Reference: exact rational sums, rounded once by ``float(Fraction)``."""
    m, k = A.shape
    n = B.shape[1]
    out = np.empty((m, n))
    FA = [[Fraction(float(A[i, l])) for l in range(k)] for i in range(m)]
    FB = [[Fraction(float(B[l, j])) for j in range(n)] for l in range(k)]
    for i in range(m):
        for j in range(n):
            s = sum((FA[i][l] * FB[l][j] for l in range(k)), Fraction(0))
            try:
                out[i, j] = float(s)
            except OverflowError:
                out[i, j] = math.inf if s > 0 else -math.inf
    return out


def _random_case(rng, trial):
    m, k, n = (int(v) for v in rng.integers(1, 7, 3))
    phi = float(rng.choice([-1, 0, 0.5, 1, 2, 4, 8, 30]))
    A = phi_matrix((m, k), phi, rng)
    B = phi_matrix((k, n), phi, rng)
    with np.errstate(over="ignore", under="ignore"):
        if trial % 3 == 0:        # exponents anywhere in the float64 range
            A = A * np.ldexp(1.0, rng.integers(-1074, 1000, size=A.shape))
            B = B * np.ldexp(1.0, rng.integers(-1074, 1000, size=B.shape))
        if trial % 7 == 0:        # subnormal-range operands times moderate ones
            A = np.ldexp(rng.integers(-2**53, 2**53, size=A.shape).astype(float),
                         rng.integers(-1126, -1000, size=A.shape))
        A = np.where(np.isfinite(A), A, 1.0)
        B = np.where(np.isfinite(B), B, 1.0)
    if trial % 5 == 0:            # near-total cancellation: [A, -A] @ [B; B(1 + 2^-52)]
        A = np.concatenate([A, -A], axis=1)
        B = np.concatenate([B, B * (1 + 2.0**-52)], axis=0)
    return A, B


@pytest.mark.parametrize("method", ["python", "split"])
def test_oracle_equals_fractions_random(method):
    rng = np.random.default_rng(20250801)
    for trial in range(150):
        A, B = _random_case(rng, trial)
        with np.errstate(over="ignore"):
            C = exact_matmul(A, B, method=method)
        assert_same_bits(C, fraction_matmul(A, B),
                         what=f"trial {trial}: A={A!r}, B={B!r}")


def test_oracle_split_equals_python_medium():
    """Longer reductions (k up to 5000): the two exact methods agree bit for bit."""
    rng = np.random.default_rng(7)
    for trial, (k, phi) in enumerate([(1000, -1), (3000, 4), (5000, 2), (2000, 1)]):
        A = phi_matrix((3, k), phi, rng)
        B = phi_matrix((k, 2), phi, rng)
        if trial % 2:   # cancellation down to the last bits: [A, -A, 3A] @ [B; B; -B/3]
            A = np.concatenate([A, -A, 3 * A], axis=1)
            B = np.concatenate([B, B, -B / 3], axis=0)
        assert_same_bits(exact_matmul(A, B, method="split"), exact_matmul(A, B, method="python"))


def test_oracle_phi4_cancellation_against_fractions():
    """φ = 4 at k = 4096 with heavy cancellation: every element correctly rounded."""
    rng = np.random.default_rng(11)
    k = 4096
    A = phi_matrix((2, k), 4, rng)
    B = phi_matrix((k, 2), 4, rng)
    # Make the sums nearly cancel: subtract the float64 dot product as an extra term.
    A = np.concatenate([A, np.ones((2, 1))], axis=1)
    B = np.concatenate([B, -(A[:1, :k] @ B)], axis=0)
    C = exact_matmul(A, B)
    assert_same_bits(C, fraction_matmul(A, B))
    # The oracle's error is at most half an ulp: it differs from native by a lot here.
    assert max_relative_error(A @ B, C) > 1e-6


def test_oracle_ties_and_sticky():
    # 1 + 2^-53 is a tie: to even (1.0); one more tiny term breaks it upward.
    A = np.array([[1.0, 2.0**-27, 2.0**-100]])
    B = np.array([[1.0], [2.0**-26], [0.0]])
    assert exact_matmul(A, B)[0, 0] == 1.0
    B[2, 0] = 2.0**-100
    assert exact_matmul(A, B)[0, 0] == 1.0 + 2.0**-52
    # 1 + 2^-52 + 2^-53 ties to even: 1 + 2^-51.
    A = np.array([[1.0, 2.0**-26, 2.0**-27]])
    B = np.array([[1.0], [2.0**-26], [2.0**-26]])
    assert exact_matmul(A, B)[0, 0] == 1.0 + 2.0**-51
    # Subnormal ties at 2^-1075: 1*2^-1075 -> 0, 3*2^-1075 -> 2^-1073 (even).
    A = np.array([[2.0**-1000, 3 * 2.0**-1000]])
    B = np.array([[2.0**-75, 0.0]]).T
    assert_same_bits(exact_matmul(A, B), [[0.0]])
    B = np.array([[0.0, 2.0**-75]]).T
    assert exact_matmul(A, B)[0, 0] == 2.0**-1073
    # ... and a sticky bit far below breaks the subnormal tie upward.
    A = np.array([[2.0**-1000, 2.0**-600]])
    B = np.array([[2.0**-75, 2.0**-600]]).T
    assert exact_matmul(A, B)[0, 0] == ETA


def test_oracle_overflow_boundary():
    half_ulp = 2.0**970                  # half an ulp of DBL_MAX
    A = np.array([[DBL_MAX, 1.0]])
    # DBL_MAX + half an ulp ties to even: 2^1024, i.e. overflow.
    assert exact_matmul(A, np.array([[1.0], [half_ulp]]))[0, 0] == math.inf
    # Less than half an ulp above DBL_MAX rounds back to DBL_MAX.
    assert exact_matmul(A, np.array([[1.0], [half_ulp / 2]]))[0, 0] == DBL_MAX
    # Intermediate overflow does not matter: DBL_MAX + DBL_MAX - DBL_MAX.
    A = np.array([[DBL_MAX, DBL_MAX, -DBL_MAX]])
    assert exact_matmul(A, np.ones((3, 1)))[0, 0] == DBL_MAX
    assert exact_matmul(-A, np.ones((3, 1)))[0, 0] == -DBL_MAX


def test_oracle_exact_cancellation_and_wide_rows():
    # 1e300 and 1e-300 in one row; the huge parts cancel exactly.
    A = np.array([[1e300, -1e300, 1e-300, 5e-324]])
    B = np.array([[1.0], [1.0], [3.0], [1.0]])
    assert exact_matmul(A, B)[0, 0] == fraction_matmul(A, B)[0, 0]
    assert exact_matmul(A, B, method="split")[0, 0] == float(
        Fraction(1e-300) * 3 + Fraction(5e-324))
    # Exact zero is +0.0.
    A = np.array([[1.5, -1.5]])
    assert_same_bits(exact_matmul(A, np.ones((2, 1)), method="split"), [[0.0]])


def test_oracle_shapes_and_errors():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 4))
    b = rng.standard_normal((4, 5))
    ref = np.stack([fraction_matmul(a[i], b) for i in range(2)])
    assert_same_bits(exact_matmul(a, b), ref)
    v = rng.standard_normal(4)
    assert exact_matmul(a, v).shape == (2, 3)
    assert exact_matmul(v, b).shape == (5,)
    assert exact_matmul(v, v).shape == ()
    assert_same_bits(exact_matmul(np.ones((3, 0)), np.ones((0, 2))), np.zeros((3, 2)))
    assert exact_matmul(np.ones((0, 3)), np.ones((3, 2))).shape == (0, 2)
    with pytest.raises(ValueError):
        exact_matmul(np.array([[np.nan]]), np.ones((1, 1)))
    with pytest.raises(ValueError):
        exact_matmul(np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError):
        exact_matmul(np.ones((2, 2)), np.ones((2, 2)), method="double-double")


# --------------------------------------------------------------------------- phi


@pytest.mark.parametrize("phi", [0.0, 0.5, 1.0, 2.0, 4.0])
def test_phi_generator_log_magnitude_moments(phi):
    """``log|x| = log|U - 1/2| + phi Z``: mean ``-1 - ln 2``, variance ``1 + phi^2``.

    ``-log(2|U - 1/2|)`` is Exp(1) (cumulants 1, 1, 2, 6). Tolerances: 5 standard
    errors of the sample mean and variance (fourth cumulant 6 from the exponential
    part), a false failure rate below 1e-6.
    """
    n = 200_000
    x = phi_matrix((400, 500), phi, np.random.default_rng(42))
    assert x.shape == (400, 500) and x.dtype == np.float64
    lx = np.log(np.abs(x.ravel()))
    var = 1 + phi**2
    assert abs(lx.mean() - (-1 - math.log(2))) < 5 * math.sqrt(var / n)
    assert abs(lx.var() - var) < 5 * math.sqrt((6 + 2 * var**2) / n)
    # Symmetric signs: binomial(n, 1/2), 5 standard errors.
    assert abs((x > 0).mean() - 0.5) < 5 * 0.5 / math.sqrt(n)


def test_phi_generator_minus_one_is_standard_normal():
    n = 200_000
    x = phi_matrix(n, -1, np.random.default_rng(5))
    # Mean, variance, and P(|x| < 1) = 0.6827 within 5 standard errors.
    assert abs(x.mean()) < 5 / math.sqrt(n)
    assert abs(x.var() - 1) < 5 * math.sqrt(2 / n)
    p = math.erf(1 / math.sqrt(2))
    assert abs((np.abs(x) < 1).mean() - p) < 5 * math.sqrt(p * (1 - p) / n)


def test_phi_generator_reproducible_and_formula():
    a = phi_matrix((3, 4), 2.0, 123)
    b = phi_matrix((3, 4), 2.0, np.random.default_rng(123))
    assert_same_bits(a, b)
    rng = np.random.default_rng(123)
    u = rng.random((3, 4))
    z = rng.standard_normal((3, 4))
    assert_same_bits(a, (u - 0.5) * np.exp(2.0 * z))
    assert_same_bits(phi_matrix(5, -1, 9), np.random.default_rng(9).standard_normal(5))


# --------------------------------------------------------------------------- metric


def test_relative_error_conventions():
    E = np.array([1.0, 0.0, 0.0, -0.0, 2.0, np.inf, np.inf, DBL_MAX, 3.0])
    C = np.array([1.5, 0.0, 1e-300, 0.0, np.nan, np.inf, DBL_MAX, -DBL_MAX, 3.0])
    r = relative_errors(C, E)
    assert r[0] == 0.5
    assert r[1] == 0.0 and r[3] == 0.0              # 0 vs 0 (any sign)
    assert r[2] == math.inf                         # non-zero answer to an exact zero
    assert r[4] == math.inf                         # NaN
    assert r[5] == 0.0 and r[6] == math.inf         # exact product overflows
    assert r[7] == 2.0                              # no spurious overflow in C - E
    assert r[8] == 0.0
    assert max_relative_error(C, E) == math.inf
    assert max_relative_error(np.zeros((0, 3)), np.zeros((0, 3))) == 0.0
    assert max_relative_error([1.0, 2.0], [1.0, 2.0 * (1 + 2.0**-52)]) == pytest.approx(
        2.0**-52 / (1 + 2.0**-52), rel=1e-15)


# --------------------------------------------------------------------------- bound


def _check_bound(A, B, plan):
    from ozaki_backend.reference.engine import product_2d as matmul_2d

    C = matmul_2d(A, B, plan)
    E = exact_matmul(A, B)
    bound = error_bound(A, B, plan, C)
    err = np.abs(C - E)
    # |C - AB| <= bound and |AB - E| <= half an ulp of E; both sides are rounded
    # monotonically, so this holds in floating point too.
    assert (err <= bound + np.spacing(np.abs(E)) / 2).all()
    return C, E, bound, err


@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("N", [2, 3, 6, 10, 14, 17, 20])
@pytest.mark.parametrize("phi", [-1, 0.5, 4])
def test_error_bound_holds(mode, N, phi):
    rng = np.random.default_rng(N * 10 + int(phi * 2))
    A = phi_matrix((9, 150), phi, rng)
    B = phi_matrix((150, 7), phi, rng)
    _check_bound(A, B, ob.plan(9, 7, 150, moduli=N, mode=mode))


@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("N", [2, 4, 6])
@pytest.mark.parametrize("phi", [0.0, 1.0, 4.0])
def test_error_bound_is_tight_for_positive_operands(mode, N, phi):
    """Positive operands make every truncation error push the same way, so the error
    is the main term of the bound itself: the bound may exceed it only by its
    evaluation slack ``(4k+16)u bound``, the rounding terms ``u|C|`` and the oracle's
    half ulp. A bound built from ``min(|A|, 2^-s)`` instead would fail this."""
    rng = np.random.default_rng(N + int(10 * phi))
    m, k, n = 8, 200, 6
    A = np.abs(phi_matrix((m, k), phi, rng))
    B = np.abs(phi_matrix((k, n), phi, rng))
    C, E, bound, err = _check_bound(A, B, ob.plan(m, n, k, moduli=N, mode=mode))
    slack = ((4 * k + 16) * U * bound + 3 * U * np.abs(C) + 2 * U * np.abs(E) + 4 * ETA
             + U * err)
    assert (bound - err <= slack).all()
    assert (err > 0).all()


def test_error_bound_extremes():
    """Huge, tiny and subnormal magnitudes: still a bound, and finite."""
    rng = np.random.default_rng(8)
    A = rng.standard_normal((5, 40))
    B = rng.standard_normal((40, 4))
    A[0] *= 1e300
    A[1] *= 1e-300
    A[2, :20] *= 2.0**-1060                 # subnormals next to normal values
    B[:, 0] *= 1e-290
    B[:, 1] *= 1e7                          # row 0 times column 1: ~1e308
    B[:10, 2] *= 2.0**-600
    for N in (3, 12, 20):
        for mode in ("fast", "accurate"):
            _, _, bound, _ = _check_bound(A, B, ob.plan(5, 4, 40, moduli=N, mode=mode))
            assert np.isfinite(bound).all()


def test_error_bound_arguments():
    A = np.ones((2, 3))
    B = np.ones((3, 4))
    assert error_bound(A, B).shape == (2, 4)             # default plan, computed C
    with pytest.raises(NotImplementedError):
        error_bound(A, B, ob.plan(2, 4, 3, scheme="phase22"), np.zeros((2, 4)))
    with pytest.raises(ValueError):
        error_bound(A, B.T)
    with pytest.raises(ValueError):
        error_bound(A, B, ob.plan(2, 4, 3), np.zeros((4, 2)))
    # k = 0: only the rounding of C (which is 0) remains.
    b0 = error_bound(np.ones((2, 0)), np.ones((0, 3)), ob.plan(2, 3, 0), np.zeros((2, 3)))
    assert (b0 > 0).all() and (b0 < 1e-300).all()


def test_reference_blas_order_sums_along_k_in_order():
    # (1 + 1e16) rounds to 1e16 before -1e16 arrives: the reference loop order gives 0
    # where the exact value is 1 (a blocked or pairwise order may not).
    A = np.array([[1.0, 1e16, -1e16]])
    B = np.ones((3, 1))
    assert reference_blas_matmul(A, B)[0, 0] == 0.0
    X = np.arange(12.0).reshape(3, 4) - 5
    Y = np.arange(20.0).reshape(4, 5) - 7
    np.testing.assert_array_equal(reference_blas_matmul(X, Y), X @ Y)   # exact integers


def test_native_error_level_is_the_worse_of_two_native_gemms():
    rng = np.random.default_rng(5)
    A, B = phi_matrix((16, 300), 2, rng), phi_matrix((300, 12), 2, rng)
    E = exact_matmul(A, B)
    level = native_error_level(A, B)
    assert level == native_error_level(A, B, E)
    assert level == max(max_relative_error(A @ B, E),
                        max_relative_error(reference_blas_matmul(A, B), E))
