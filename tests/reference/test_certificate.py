"""Stage 5 (the certificate, ``docs/spec.md`` §10) of the CPU reference, piece by
piece: the exactness thresholds, the non-zero ranges, the monotone count, the gathers,
the count's choice, and the rigour of the bound end to end. The formulas themselves
(the bound GEMM's two bounds of ``|A||B|``, the cap's relation to ``gamma_k``, the
codes, the direct values) are checked in ``tests/spec/test_certificate_formulas.py``."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ozaki_backend as ob
from ozaki_backend.reference import certificate, equilibrate, scaling
from ozaki_backend.spec import certificate as spec
from ozaki_backend.spec.moduli import MAX_MODULI, MIN_MODULI
from ozaki_backend.spec.rules import OPTIMISTIC_FAILING, expected_moduli
from ozaki_backend.testing import exact_matmul, native_error_level, phi_matrix

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
        d = certificate.data(st_, certificate.gathered(A, B, st_))
        need = certificate.element_counts(d, st_, mode)
        prev = np.zeros(need.shape, dtype=bool)
        for N in range(MIN_MODULI, MAX_MODULI + 1):
            s, t = scaling.shifts(st_, N, mode)
            ok = spec.passes(d, s, t)
            assert (ok >= prev).all(), N            # once passed, passed for every larger N
            np.testing.assert_array_equal(ok, (need > 0) & (need <= N))
            prev = ok


def _swept_counts(d, st_, mode):
    """Each element's fewest passing count by trying every count in turn."""
    need = np.zeros(d.P.shape, dtype=np.int64)
    for N in range(MIN_MODULI, MAX_MODULI + 1):
        ok = spec.passes(d, *scaling.shifts(st_, N, mode))
        need[(need == 0) & ok] = N
    return need


def _sparse_rows(rng, shape):
    X = phi_matrix(shape, 4.0, rng)
    X[::3] = 0.0                                # empty rows: every element exempt
    X[1::3, 2:] = 0.0                           # rows of two terms: exempt
    return X


@pytest.mark.parametrize("case", ["normal", "phi1", "phi6", "sparse", "k2", "huge"])
@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_the_count_search_gives_the_counts_of_trying_every_count(case, mode):
    """element_counts starts its sweep at the first count any element passes (found by
    bisection on the monotone test): the counts of trying every count in turn."""
    rng = np.random.default_rng(["normal", "phi1", "phi6", "sparse", "k2", "huge"].index(case))
    m, k, n = 12, 300, 9
    if case == "normal":
        A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    elif case in ("phi1", "phi6"):
        phi = float(case[3:])
        A, B = phi_matrix((m, k), phi, rng), phi_matrix((k, n), phi, rng)
    elif case == "sparse":
        A, B = _sparse_rows(rng, (m, k)), phi_matrix((k, n), 1.0, rng)
    elif case == "k2":
        A, B = rng.standard_normal((m, 2)), rng.standard_normal((2, n))
    else:                                       # no count passes for some elements
        A, B = phi_matrix((m, k), 30.0, rng), phi_matrix((k, n), 30.0, rng)
    st_ = scaling.statistics(A, B, mode)
    d = certificate.data(st_, certificate.gathered(A, B, st_))
    np.testing.assert_array_equal(certificate.element_counts(d, st_, mode),
                                  _swept_counts(d, st_, mode))


def test_the_count_lets_at_most_a_sixteenth_fail_a_priori():
    """choose_count: the fewest count at which at most 1/16 of the elements fail the
    a-priori test (the next lower count lets more fail) — or one below it when at most
    half of the elements, and at most eight times the repairable ones, fail there (then
    the rule's count is the escalation's ``safe``) — and the fewest count all pass."""
    rng = np.random.default_rng(15)
    A, B = phi_matrix((256, 300), 3.0, rng), phi_matrix((300, 256), 3.0, rng)
    A, B, _ = equilibrate.equilibrate(A, B)
    st_ = scaling.statistics(A, B, "accurate")
    d = certificate.data(st_, certificate.gathered(A, B, st_))
    ch = certificate.choose_count(d, st_, "accurate")
    size = A.shape[0] * B.shape[1]
    fails = {N: int((~spec.passes(d, *scaling.shifts(st_, N, "accurate"))).sum())
             for N in range(MIN_MODULI, MAX_MODULI + 1)}
    rule = min(N for N in fails if 16 * fails[N] <= size)
    assert 16 * fails[rule - 1] > size
    below = 2 * fails[rule - 1] <= size and \
        fails[rule - 1] <= OPTIMISTIC_FAILING * spec.repair_cap(st_.k, size)
    assert below                                # these data take the count below
    assert (ch.n_moduli, ch.safe) == (rule - 1, rule)
    assert ch.failing == fails[ch.n_moduli]
    assert ch.all_pass == min((N for N in fails if fails[N] == 0), default=None)
    plain = certificate.choose_count(d, st_, "accurate", repairs=False)
    assert (plain.n_moduli, plain.failing, plain.safe) == (rule, fails[rule], None)


def test_gathers_run_on_wide_range_data_only_and_bound_the_largest_term():
    """The gate: N(0,1) operands keep their mass in the bound GEMM's window (no
    gathers); phi = 4 operands do not, and the gathered bound is at most each element's
    largest term (exact products of the operands, in units of 2^(E+F-14))."""
    rng = np.random.default_rng(16)
    X, Y = rng.standard_normal((20, 300)), rng.standard_normal((300, 18))
    assert certificate.gathered(X, Y, scaling.statistics(X, Y, "accurate")) is None
    A, B = phi_matrix((20, 300), 4.0, rng), phi_matrix((300, 18), 4.0, rng)
    st_ = scaling.statistics(A, B, "accurate")
    G14 = certificate.gathered(A, B, st_)
    assert G14 is not None and (G14 > 0).all()
    largest = (np.abs(A)[:, :, None] * np.abs(B)[None, :, :]).max(axis=1)
    scale = np.ldexp(1.0, st_.E[:, None] + st_.F[None, :] - 14)
    assert (G14 * scale <= largest).all()
    # the top entries of every row are found: at least a quarter of the largest term
    # where it involves a row's or a column's largest entry
    assert (G14 * scale * 4 >= np.maximum(
        np.abs(A).max(1)[:, None] * np.abs(B)[np.abs(A).argmax(1), :],
        np.abs(A)[:, np.abs(B).argmax(0)] * np.abs(B).max(0)[None, :])).all()


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
    """The target is not vacuous: one modulus fewer than the count fails more than a
    sixteenth of the elements of ordinary data."""
    rng = np.random.default_rng(9)
    A, B = rng.standard_normal((32, 1000)), rng.standard_normal((1000, 32))
    st_ = scaling.statistics(*equilibrate.equilibrate(A, B)[:2], "accurate")
    d = certificate.data(st_)
    ch = certificate.choose_count(d, st_, "accurate")
    assert ch.failing == 0
    s, t = scaling.shifts(st_, ch.n_moduli - 1, "accurate")
    assert 16 * int((~spec.passes(d, s, t)).sum()) > 32 * 32


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
    meets the target, the native GEMM (warned, counted) where not; every outcome's
    bound holds."""
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


def test_crossed_two_term_products_are_exact():
    """The crossed 2 x 2 product no scaling resolves (each row and column truncates the
    other's small entry): every element has two terms, computed directly and exactly,
    with no fallback."""
    x = np.array([[1e30, 1e-30], [1e-30, 1e30]])
    y = np.array([[1e-30, 1e30], [1e30, 1e-30]])
    ob.reset_stats()
    r, bound = ob.matmul(x, y, engine="cpu", return_bound=True)
    np.testing.assert_array_equal(r, exact_matmul(x, y))
    assert ob.stats()["certificate"] == {"certified": 1}
    assert (bound <= U * np.abs(r) * 1.01 + 1e-300).all()


def _dot_exact(a, b):
    return sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a, b)), Fraction(0))


def test_repaired_elements_are_compensated_dot_products():
    """The repair (``direct.dot2_in_order``): on dot products that cancel to 1e-12 of
    their terms, the error is at most u|exact| plus the Dot2 term ``2 gamma_h^2 sum|t|``
    (h roundings per term in its lane, 5 meetings), far below a plain float64 dot's, and
    within the element's repair bound; scaling a row by a power of two (2^-600, below
    Dekker's split range) scales the result exactly."""
    from ozaki_backend.reference import direct

    rng = np.random.default_rng(21)
    k, n = 300, 12
    A = rng.standard_normal((n, k)) * np.exp(3 * rng.standard_normal((n, k)))
    B = rng.standard_normal((k, n))
    # cancel: the last term of each element makes the sum nearly zero
    for i in range(n):
        A[i, -1] = -(A[i, :-1] @ B[:-1, i]) / B[-1, i]
    rows, cols = np.arange(n), np.arange(n)
    got = direct.dot2_in_order(A, B, rows, cols)
    h = -(-k // direct.LANES) + 6
    g = float(spec.gamma(np.int64(h)))
    for i in range(n):
        exact = _dot_exact(A[i], B[:, i])
        size = sum(abs(Fraction(float(x)) * Fraction(float(y))) for x, y in zip(A[i], B[:, i]))
        err = abs(Fraction(float(got[i])) - exact)
        assert err <= U * abs(exact) + 2 * Fraction(g) ** 2 * size, i
        assert float(size) > 1e9 * float(abs(exact))      # these do cancel
    scaled = direct.dot2_in_order(np.ldexp(A, -600), B, rows, cols)
    np.testing.assert_array_equal(scaled, np.ldexp(got, -600))


def test_a_count_below_the_rule_escalates_to_it_when_too_many_stay_unsettled(monkeypatch):
    """The product computed one count below the 1/16 rule's (``Choice.safe``) goes on
    with the rule's count when the a-posteriori test leaves more than can be repaired;
    its result is then that count's product."""
    from ozaki_backend.reference import pipeline

    rng = np.random.default_rng(15)
    A, B = phi_matrix((256, 300), 3.0, rng), phi_matrix((300, 256), 3.0, rng)
    ch = pipeline.count_choice(A, B, "accurate")
    assert ch.safe == ch.n_moduli + 1
    ob.reset_stats()
    ob.matmul(A, B, engine="cpu")
    assert ob.stats()["moduli"] == {ch.n_moduli: 1}          # settled below the rule
    tried = []
    product = pipeline.integer_product

    def logged(A, B, s, t, n_moduli, sym=False):
        tried.append(n_moduli)
        return product(A, B, s, t, n_moduli, sym)

    monkeypatch.setattr(pipeline, "integer_product", logged)
    monkeypatch.setattr(spec, "repairable", lambda *a, **kw: False)
    C = ob.matmul(A, B, engine="cpu")
    assert tried[:2] == [ch.n_moduli, ch.safe]                # the rule's count next
    assert tried[2:] in ([], [ch.all_pass])
    E = exact_matmul(A, B)
    native = native_error_level(A, B, E)
    assert np.max(np.abs(C - E) / np.abs(E)) <= 2 * native + 2.0 ** -52
